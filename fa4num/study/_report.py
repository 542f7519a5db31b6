"""The studies' part of ``fa4num report``: the smoke grid's skip rates (and, where committed, the full grid up to
128k tokens and the H200 kernel baselines), as Markdown with figures."""
from __future__ import annotations

import shutil
from importlib.resources import as_file, files
from pathlib import Path

# the committed results the report shows (package data): the smoke grid's store, the full skip-rate grid's stores
# (CPU to 8k, H200 to 128k) and the H200 kernel baselines
DATA = files(__package__) / "data"


def _section(title, md, figs, data=None, checks=()):
    from fa4num.section import Section
    return Section(title, md, [str(f) for f in figs], data or {}, checks=list(checks))


def report_section(out_dir, *, run_smoke: bool = True) -> list:
    """Report sections (``fa4num.section.Section``) of the studies, figures written into ``out_dir``.

    The smoke grid comes from the shipped store fa4num/study/data/study_smoke (copied, then completed by a run
    that computes only what is missing, about 20 s on 2 cores when nothing is stored). The full skip-rate grid
    (fa4num/study/data/study_skip_rate*) and the baselines (fa4num/study/data/baselines_h200*.json) are added
    when shipped."""
    from .baselines import baseline_table, load_baselines, plot_baselines
    from .runner import run_grid
    from .summary import skip_markdown, skip_table, summarize
    out_dir = Path(out_dir)
    smoke = out_dir / "study_smoke"
    with as_file(DATA / "study_smoke") as committed:
        if Path(committed).is_dir() and not smoke.exists():
            shutil.copytree(committed, smoke)
    sections = []
    if run_smoke:
        res = run_grid("smoke", smoke, scheduler="none", progress=False)
        s = summarize(smoke, fig_dir=out_dir, prefix="study_smoke")
        figs = [f.name for f in s.figures]
        md = (f"FA4 SM100's lazy rescale (rescale only when the row max grew by more than `rescale_threshold` "
              f"log2 units since the stored max) replayed from exact per-(row, KV block) maxima of S, smoke grid "
              f"(`fa4num study run smoke`: {res.line}). *Events* are the blocks where the true row max grew (what "
              "threshold 0 rescales for); *avoided* = (events - done) / events, with a 95 % Student-t interval "
              "over seeds. The SM100 path is emulated from FA4's source, not run on a Blackwell GPU.\n\n"
              + s.markdown + "\n\n" + "\n".join(f"![{f}]({f})" for f in figs) + "\n")
        from fa4num.section import Check
        # a grid that ran no task, or tasks that raised, is a report that checked nothing / failed
        sections.append(_section("Studies: lazy-rescale skip rate (smoke grid)", md, figs,
                                 checks=[Check("smoke grid tasks", res.total - len(res.failed), len(res.failed),
                                               unit="tasks")]))
    from .store import merged_skip_rows, store_dirs
    with as_file(DATA) as root:
        full = store_dirs(root, "study_skip_rate*")
    if full:
        df = merged_skip_rows(full)
        t = skip_table(df)
        from .summary import plot_done_vs_seqlen, plot_skip_vs_threshold
        figs = [plot_skip_vs_threshold(t, out_dir / "study_skip_vs_threshold.png").name,
                plot_done_vs_seqlen(t, out_dir / "study_done_vs_seqlen.png").name]
        md = (f"{len(df)} tasks from {', '.join(p.name for p in full)} (devices: "
              f"{', '.join(sorted(set(df.device_name)))}); threshold 8 is FA4's bf16/fp16 default.\n\n"
              + skip_markdown(t, thresholds=(8,)) + "\n\n" + "\n".join(f"![{f}]({f})" for f in figs) + "\n")
        sections.append(_section("Studies: skip rate from 1k to 128k tokens", md, figs))
    bl = load_baselines()
    if not bl.empty:
        fig = plot_baselines(bl, out_dir / "study_baselines.png").name
        md = ("Each kernel on the H200 against fp64 attention on the same bf16/fp16 inputs: relative L2 error of "
              "the output (median time in ms), and the floor: fp64 rounded once to the dtype.\n\n"
              + baseline_table(bl) + f"\n\n![baselines]({fig})\n")
        sections.append(_section("Studies: FA4 next to cuDNN and torch SDPA on the H200", md, [fig]))
    return sections


def report_sections(ctx) -> list:
    """``fa4num report`` hook (fa4num.report.providers)."""
    return report_section(ctx.out_dir)
