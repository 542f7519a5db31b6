"""``fa4num report``: the README's main job, a Markdown + JSON + PNG report from embedded defaults.

The top layer: it imports each section provider explicitly (no module names built at run time) and assembles
their sections in this order: FA4's software exp2 (fa4num.ex2.report), the coefficient sets (fa4num.fit), one
attention forward pass with FA4's tricks on and off (fa4num.attention), the studies (fa4num.study). A provider that raises does not stop
the report: its section says what failed, the other sections are written, and :func:`write_report` reports
the failure so that the command exits non-zero.
"""
from __future__ import annotations

import json
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fa4num.section import ReportContext, Section

__all__ = ["write_report", "ReportOutcome", "providers", "register"]


def providers() -> list:
    """(name, report_sections) of every section provider, in report order.

    Each subpackage that contributes to ``fa4num report`` has a report hook; ``report_sections(ctx)`` returns its
    sections. Imported here, on demand, so that this module stays cheap to import.

    Parameters
    ----------
    None

    Returns
    -------
    list of (str, callable)

    Examples
    --------
    >>> [name for name, _ in providers()]
    ['ex2', 'fit', 'attention', 'study']
    """
    from fa4num.attention import _report as attention_sections   # the report hook of each subpackage
    from fa4num.ex2 import report as ex2_sections
    from fa4num.fit import _report as fit_sections
    from fa4num.study import _report as study_sections
    return [("ex2", ex2_sections.report_sections), ("fit", fit_sections.report_sections),
            ("attention", attention_sections.report_sections), ("study", study_sections.report_sections)]


@dataclass(frozen=True)
class ReportOutcome:
    """Where the report went and which providers failed (their sections hold the traceback)."""
    path: Path
    failed: tuple

    @property
    def ok(self) -> bool:
        return not self.failed


def _json_default(v):
    if isinstance(v, np.generic):
        return v.item()
    raise TypeError(f"cannot write {type(v).__name__} to JSON")


def write_report(out_dir="fa4num-report", *, quick: bool = False, progress: bool = True,
                 sections=None) -> ReportOutcome:
    """Run the embedded default studies and write report.md, report.json and PNG figures into ``out_dir``.

    Parameters
    ----------
    out_dir : str or Path
        Output folder (created).
    quick : bool
        Subsample the exhaustive sweeps (seconds instead of minutes).
    progress : bool
        Show progress bars.
    sections : list of (name, callable), optional
        The providers to run (default: :func:`providers`); each takes a ReportContext and returns sections.

    Returns
    -------
    ReportOutcome
        ``.path`` of report.md and ``.failed``, the names of the providers that raised.

    Examples
    --------
    >>> import tempfile
    >>> from fa4num.section import Section
    >>> def broken(ctx):
    ...     raise RuntimeError("boom")
    >>> out = write_report(tempfile.mkdtemp(), progress=False, sections=[("mine", lambda ctx: [Section("Mine", "text")]),
    ...                                                  ("broken", broken)])
    >>> out.failed, "## Mine" in out.path.read_text()
    (('broken',), True)
    """
    from fa4num.outputs import atomic_dir, check_output_dir
    # the new report replaces the whole folder: never one that holds something a previous report did not write
    out_dir = check_output_dir(out_dir, replace=True)
    with atomic_dir(out_dir) as tmp:   # an interrupted report leaves out_dir exactly as it was
        failed = _write(Path(tmp), quick=quick, progress=progress,
                        sections=providers() if sections is None else sections)
    return ReportOutcome(out_dir / "report.md", tuple(failed))


def _say(text: str) -> None:
    """A progress line on stderr (stdout stays for results)."""
    print(text, file=sys.stderr, flush=True)


def _write(out: Path, *, quick: bool, progress: bool, sections) -> list:
    from fa4num.ex2.report import DEFINITIONS
    from fa4num.provenance import provenance
    ctx = ReportContext(out, bool(quick), bool(progress))
    t0 = time.perf_counter()
    done, failed = [], []
    for step, (name, make) in enumerate(sections, start=1):
        if progress:
            _say(f"report [{step}/{len(sections)}]: {name} ...")
        try:
            done.extend(make(ctx))
        except Exception:  # noqa: BLE001 -- one failing provider must not hide the others' sections
            failed.append(name)
            done.append(Section(f"{name}: section failed", "```\n" + traceback.format_exc() + "```\n"))
    seconds = time.perf_counter() - t0
    prov = provenance(report_seconds=round(seconds, 1), quick=bool(quick))
    heads = [s.headline for s in done if s.headline]
    md = ["# fa4num report: FlashAttention-4's software exp2\n",
          f"Generated {prov['date']} at code revision `{prov['code_revision']}` in {seconds:.0f} s"
          f"{' (quick mode: subsampled)' if quick else ''}. Data: `report.json`.\n"]
    if failed:
        md.append(f"**Sections that failed: {', '.join(failed)}** (their tracebacks are below).\n")
    md += ["## Summary\n\n" + "".join(f"- {h}\n" for h in heads),
           "## How to read the numbers\n\n" + DEFINITIONS]
    for s in done:
        md.append(f"## {s.title}\n\n{s.markdown}")
    (out / "report.md").write_text("\n".join(md))
    payload = {"provenance": prov, "failed": failed, "summary": heads,
               "sections": [{"title": s.title, "figures": s.figures, "data": s.data} for s in done]}
    (out / "report.json").write_text(json.dumps(payload, indent=1, default=_json_default) + "\n")
    return failed


def _report(args) -> int:
    res = write_report(args.out, quick=args.quick, progress=not args.no_progress)
    print(f"wrote {res.path} (+ report.json, figures)")
    if not res.ok:
        print(f"fa4num report: sections failed: {', '.join(res.failed)} (tracebacks in {res.path})",
              file=sys.stderr)
        return 1
    return 0


def register(subparsers) -> None:
    """Add the ``report`` sub-command (and its --out, --quick, --no-progress options) to the ``fa4num`` CLI.

    Parameters
    ----------
    subparsers : argparse._SubParsersAction
        From ``ArgumentParser.add_subparsers()``.

    Returns
    -------
    None

    Examples
    --------
    >>> import argparse
    >>> parser = argparse.ArgumentParser(prog="fa4num")
    >>> register(parser.add_subparsers())
    >>> args = parser.parse_args(["report", "--quick", "--out", "/tmp/r"])
    >>> args.out, args.quick, args.no_progress, args.func.__name__
    ('/tmp/r', True, False, '_report')
    """
    rep = subparsers.add_parser(
        "report", help="write the FA4 exp2 accuracy report (Markdown + JSON + PNG) from embedded defaults",
        description="Sweep FA4's software exp2 (cubic, packed form) over every fp32 x in [-126, 0] and below, "
                    "compare degrees 1-5, the three forms and the MUFU model, the coefficient sets and one "
                    "attention forward pass, and write report.md, report.json and figures. About 1-2 minutes "
                    "on 2 cores. Exits 1 if a section failed (the others are still written).")
    from fa4num.argtypes import path_arg
    rep.add_argument("--out", type=path_arg, default="fa4num-report", help="output directory (default: ./fa4num-report)")
    rep.add_argument("--quick", action="store_true",
                     help="subsample the exhaustive [-126, 0] sweep (every 257th bit pattern) for a fast look")
    rep.add_argument("--no-progress", action="store_true", help="no progress bars")
    rep.set_defaults(func=_report)
