"""``fa4num report``: the README's main job, a Markdown + JSON + PNG report from embedded defaults.

The top layer: it imports each section provider explicitly (no module names built at run time) and assembles
their sections in this order: FA4's software exp2 (fa4num.ex2.report), the coefficient sets (fa4num.fit), one
attention forward pass with FA4's tricks on and off (fa4num.attention), the error bounds against what is
observed (fa4num.bounds), the studies (fa4num.study), and last the golden data the bit-exact checks compare
against (:func:`golden_counts`, counted from the committed files: the README's counts come from there too).
A provider that raises does not stop the report: its section says what failed, the other sections are written,
and :func:`write_report` reports the failure so that the command exits non-zero. So does a check that compared
nothing (no case found, every output NaN) or that failed (a violated bound): see fa4num.section.Check.
"""
from __future__ import annotations

import json
import lzma
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from fa4num.section import ReportContext, Section

__all__ = ["write_report", "ReportOutcome", "providers", "register", "golden_counts"]


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
    ['ex2', 'fit', 'attention', 'bounds', 'study', 'golden']
    """
    from fa4num.attention import _report as attention_sections   # the report hook of each subpackage
    from fa4num.bounds import _report as bounds_sections
    from fa4num.ex2 import report as ex2_sections
    from fa4num.fit import _report as fit_sections
    from fa4num.study import _report as study_sections
    return [("ex2", ex2_sections.report_sections), ("fit", fit_sections.report_sections),
            ("attention", attention_sections.report_sections), ("bounds", bounds_sections.report_sections),
            ("study", study_sections.report_sections), ("golden", golden_sections)]


@dataclass(frozen=True)
class ReportOutcome:
    """Where the report went, which providers failed (their sections hold the traceback), which checks compared
    nothing (``empty``) and which found failures (``refuted``), each as "section: check"."""
    path: Path
    failed: tuple
    empty: tuple = ()
    refuted: tuple = ()

    @property
    def ok(self) -> bool:
        return not (self.failed or self.empty or self.refuted)


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
        ``.path`` of report.md, ``.failed`` (the names of the providers that raised), ``.empty`` and
        ``.refuted`` (the checks that compared nothing or found failures).

    Examples
    --------
    >>> import tempfile
    >>> from fa4num.section import Check, Section
    >>> def broken(ctx):
    ...     raise RuntimeError("boom")
    >>> mine = lambda ctx: [Section("Mine", "text")]
    >>> out = write_report(tempfile.mkdtemp(), progress=False, sections=[("mine", mine), ("broken", broken)])
    >>> out.failed, "## Mine" in out.path.read_text()
    (('broken',), True)
    >>> none = lambda ctx: [Section("Golden", "text", checks=[Check("cases", compared=0, unit="cases")])]
    >>> write_report(tempfile.mkdtemp(), progress=False, sections=[("none", none)]).empty
    ('Golden: cases',)
    """
    from fa4num.outputs import atomic_dir, check_output_dir
    # the new report replaces the whole folder: never one that holds something a previous report did not write
    out_dir = check_output_dir(out_dir, replace=True)
    with atomic_dir(out_dir) as tmp:   # an interrupted report leaves out_dir exactly as it was
        failed, empty, refuted = _write(Path(tmp), quick=quick, progress=progress,
                                        sections=providers() if sections is None else sections)
    return ReportOutcome(out_dir / "report.md", tuple(failed), tuple(empty), tuple(refuted))

# The committed golden files the bit-exact checks compare against, one row per README claim. (key, file in
# fa4num/data/golden (package data) or tests/golden/attention (checkouts), what the cases are).
_GOLDEN_ATTENTION = (
    ("forward", "fa4_sm90_h200.npz", "SM90 forward, every out bit and LSE (package data)"),
    ("forward_large", "fa4_sm90_h200_large.json", "SM90 forward, longer sequences (digests of out and LSE)"),
    ("features_dev", "fa4_sm90_features_dev_h200.npz", "SM90 forward feature cases, dev"),
    ("features_holdout", "fa4_sm90_features_holdout_h200.npz", "SM90 forward feature cases, never-seen holdout"),
    ("wide_window", "fa4_sm90_wide_window_h200.npz", "SM90 forward, windows wider than the sequence"),
    ("backward_dev", "fa4_sm90_bwd_dev_h200.npz", "SM90 backward dq/dk/dv, dev"),
    ("backward_holdout", "fa4_sm90_bwd_holdout_h200.npz", "SM90 backward dq/dk/dv, never-seen holdout"),
    ("backward_sink", "fa4_sm90_bwd_sink_h200.npz", "SM90 backward, learnable sink / head_dim_v != head_dim"),
    ("backward_wide_window", "fa4_sm90_bwd_wide_window_h200.npz", "SM90 backward, wide windows"),
    ("backward_preprocess", "fa4_sm90_bwd_preprocess_h200.npz", "SM90 backward preprocess D = rowsum(dO*O)"),
    ("softmax_twin", "fa4_sm100_softmax_twin_h200.npz", "SM100 softmax stage vs its PTX twin (rows)"),
)
_GOLDEN_INSTRUCTION = ("fp.json.xz", "convert.json.xz", "ex2_emulated.json.xz", "mufu.json.xz")


def _attention_golden_records(path: Path) -> list:
    if path.suffix == ".json":
        return json.loads(path.read_text())["cases"]
    with np.load(path) as z:
        return json.loads(str(z["meta"]))["cases"]


def golden_counts(*, search=()) -> dict:
    """What each committed golden file holds, counted from the files now: the one source of the case counts in
    the report and in the README's "What has been measured" (tests/top/test_report_sections.py holds the README to
    them).

    Parameters
    ----------
    search : sequence of path-like, optional
        More folders to look for the files in, after the package's own ``fa4num/data/golden`` (the library reads
        only package data; the test suite passes the checkout's ``tests/golden`` and ``tests/golden/attention``
        so that the README's counts are held to every committed file).

    Returns
    -------
    dict
        key -> {"file", "what", "cases", "refused"} for each attention golden file (``refused``: records that hold
        the error FA4 raised instead of outputs; for "softmax_twin", ``cases`` counts rows), and
        "instruction_sets" -> {"file", "what", "cases"} (the golden sets of ``fa4num gpu verify``). ``cases`` is
        None where the file is absent (an installed package has only fa4num/data/golden).

    Examples
    --------
    >>> c = golden_counts()
    >>> c["forward"]["cases"] > 0, c["forward"]["file"]
    (True, 'fa4_sm90_h200.npz')
    """
    from fa4num.attention import golden as attention_golden
    dirs = [attention_golden.GOLDEN_DIR, *(Path(d) for d in search)]

    def find(name):
        return next((d / name for d in dirs if (d / name).exists()), dirs[0] / name)

    counts = {}
    for key, name, what in _GOLDEN_ATTENTION:
        path = find(name)
        n = refused = None
        if path.exists():
            recs = _attention_golden_records(path)
            refused = sum("error" in r for r in recs)
            n = (sum(r["rows"] for r in recs) if key == "softmax_twin"
                 else len(recs) - refused)
        counts[key] = {"file": name, "what": what, "cases": n, "refused": refused}
    sets = None
    if all(find(f).exists() for f in _GOLDEN_INSTRUCTION):
        sets = sum(len(json.loads(lzma.decompress(find(f).read_bytes()))["sets"]) for f in _GOLDEN_INSTRUCTION)
    counts["instruction_sets"] = {"file": ", ".join(_GOLDEN_INSTRUCTION), "what": "instruction golden sets "
                                  "(H200 outputs of fp32 ops, conversions, FA4's exp2, MUFU)", "cases": sets}
    return counts


def golden_sections(ctx) -> list:
    """The report's last section: what the golden data holds (:func:`golden_counts`). It only counts; the checks
    against these files are the test suite's, ``fa4num attention golden`` and the bounds section's."""
    counts = golden_counts()
    rows = "".join(f"| {c['what']} | `{c['file']}` | "
                   + (f"{c['cases']:,}" if c["cases"] is not None else "not in this installation (tests/golden)")
                   + (f" (+{c['refused']} where FA4 refused)" if c.get("refused") else "") + " |\n"
                   for c in counts.values())
    md = ("The H200 captures the bit-exact checks compare against, counted from the package's golden files "
          "(`fa4num/data/golden`) when this report ran. The rest live in the checkout's `tests/golden` (the test "
          "suite checks the emulators against them on every CI run, and holds the README's counts to every file: "
          "`tests/top/test_report_sections.py`); the library reads only package data, so they show here as not in "
          "this installation.\n\n"
          "| golden data | file | cases |\n|---|---|---|\n" + rows)
    return [Section("Golden data: what the bit-exact checks compare against", md, [],
                    {k: dict(c) for k, c in counts.items()})]


def _write(out: Path, *, quick: bool, progress: bool, sections) -> list:
    from fa4num.ex2.report import DEFINITIONS
    from fa4num.provenance import provenance
    ctx = ReportContext(out, bool(quick), bool(progress))
    t0 = time.perf_counter()
    done, failed = [], []
    for step, (name, make) in enumerate(sections, start=1):
        ctx.say(f"report [{step}/{len(sections)}]: {name} ...")
        try:
            done.extend((name, s) for s in make(ctx))
        except Exception:  # noqa: BLE001 -- one failing provider must not hide the others' sections
            failed.append(name)
            done.append((name, Section(f"{name}: section failed", "```\n" + traceback.format_exc() + "```\n")))
    seconds = time.perf_counter() - t0
    prov = provenance(report_seconds=round(seconds, 1), quick=bool(quick))
    checks = [(s.title, c) for _, s in done for c in s.checks]
    empty = [f"{title}: {c.name}" for title, c in checks if c.empty]
    refuted = [f"{title}: {c.name}" for title, c in checks if c.failed]
    heads = [s.headline for _, s in done if s.headline]
    md = ["# fa4num report: FlashAttention-4's software exp2\n",
          f"Generated {prov['date']} at code revision `{prov['code_revision']}` in {seconds:.0f} s"
          f"{' (quick mode: subsampled)' if quick else ''}. Data: `report.json`.\n"]
    if failed:
        md.append(f"**Sections that failed: {', '.join(failed)}** (their tracebacks are below).\n")
    if empty:
        md.append(f"**Checks that compared nothing: {'; '.join(empty)}** (they prove nothing; see the Checks "
                  "table).\n")
    if refuted:
        md.append(f"**Checks that failed: {'; '.join(refuted)}** (see the Checks table).\n")
    md += ["## Summary\n\n" + "".join(f"- {h}\n" for h in heads),
           "## How to read the numbers\n\n" + DEFINITIONS]
    for _, s in done:
        md.append(f"## {s.title}\n\n{s.markdown}")
    if checks:
        md.append("## Checks\n\nWhat each section compared, and how many of the compared values failed (– for a "
                  "measurement with no pass/fail criterion); a check that compared nothing, or one with failures, "
                  "makes `fa4num report` exit 1.\n\n"
                  "| section | check | compared | failed |\n|---|---|---|---|\n"
                  + "".join(f"| {title} | {c.name} | {c.compared:,} {c.unit}"
                            f"{' (**nothing compared**)' if c.empty else ''} | "
                            f"{'–' if c.failed is None else f'{c.failed:,}'} |\n"
                            for title, c in checks))
    (out / "report.md").write_text("\n".join(md))
    payload = {"provenance": prov, "failed": failed, "empty_checks": empty, "failed_checks": refuted,
               "summary": heads,
               "sections": [{"provider": name, "title": s.title, "figures": s.figures, "data": s.data,
                             "checks": [asdict(c) for c in s.checks]} for name, s in done]}
    (out / "report.json").write_text(json.dumps(payload, indent=1, default=_json_default) + "\n")
    return failed, empty, refuted


def _report(args) -> int:
    res = write_report(args.out, quick=args.quick, progress=not args.no_progress)
    print(f"wrote {res.path} (+ report.json, figures)")
    if res.failed:
        print(f"fa4num report: sections failed: {', '.join(res.failed)} (tracebacks in {res.path})",
              file=sys.stderr)
    if res.empty:
        print(f"fa4num report: checks that compared nothing: {'; '.join(res.empty)}", file=sys.stderr)
    if res.refuted:
        print(f"fa4num report: checks that failed: {'; '.join(res.refuted)} (see {res.path})", file=sys.stderr)
    return 0 if res.ok else 1


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
                    "on 2 cores. Exits 1 if a section failed (the others are still written), or a check compared "
                    "nothing or found failures.")
    from fa4num.argtypes import path_arg
    rep.add_argument("--out", type=path_arg, default="fa4num-report", help="output directory (default: ./fa4num-report)")
    rep.add_argument("--quick", action="store_true",
                     help="subsample the exhaustive [-126, 0] sweep (every 257th bit pattern) for a fast look")
    rep.add_argument("--no-progress", action="store_true", help="no progress bars")
    rep.set_defaults(func=_report)
