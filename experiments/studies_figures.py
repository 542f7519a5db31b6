"""Tables and figures of the studies from the committed result stores (no computing beyond summaries).

    python experiments/studies_figures.py

Reads fa4num/study/data/study_skip_rate* (GPU rows win over CPU rows of the same task),
experiments/results/study_error_budget and fa4num/study/data/baselines_h200*.json; writes
experiments/figures/study_*.png and experiments/results/studies_summary.md (Markdown tables with 95 % CIs over
seeds, and where each number came from) plus studies_skip_ci.csv (the full CI table).
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    from fa4num.provenance import provenance
    from fa4num.study import baselines, summary
    from fa4num.study.store import merged_skip_rows, read_store, store_dirs
    res, figs = ROOT / "experiments" / "results", ROOT / "experiments" / "figures"
    prov = provenance(kind="studies_figures")
    md = [f"# Studies: summary\n\nGenerated {prov['date']} at `{prov['code_revision']}` by "
          "`python experiments/studies_figures.py`. Intervals: 95 % Student-t over seeds.\n"]
    dirs = store_dirs(ROOT / "fa4num" / "study" / "data", "study_skip_rate*")
    if dirs:
        df = merged_skip_rows(dirs)
        t = summary.skip_table(df)
        t.to_csv(res / "studies_skip_ci.csv", index=False)
        made = [summary.plot_skip_vs_threshold(t, figs / "study_skip_vs_threshold.png"),
                summary.plot_done_vs_seqlen(t, figs / "study_done_vs_seqlen.png"),
                summary.plot_lag(t, figs / "study_lag.png")]
        where = df.groupby(["device_name"]).size().to_dict()
        secs = df.groupby("device_name").seconds.sum().round(1).to_dict()
        md.append(f"## Lazy-rescale skip rate\n\n{len(df)} tasks from {[str(d.relative_to(ROOT)) for d in dirs]}; "
                  f"rows per device {where}, task seconds per device {secs}.\n\n"
                  + summary.skip_markdown(t, thresholds=(0, 4, 8, 16)) + "\n\n"
                  + "\n".join(f"![{p.name}](../figures/{p.name})" for p in made) + "\n")
    eb = res / "study_error_budget"
    if eb.is_dir():
        s = summary.summarize(eb, fig_dir=figs, prefix="study")
        md.append(f"## Error budget of FA4's knobs (SM100 path, emulated from source)\n\n{len(read_store(eb))} "
                  f"tasks.\n\n{s.markdown}\n\n" + "\n".join(f"![{p.name}](../figures/{p.name})" for p in s.figures)
                  + "\n")
    bl = baselines.load_baselines()
    if not bl.empty:
        p = baselines.plot_baselines(bl, figs / "study_baselines.png")
        md.append(f"## Kernels on the H200 vs fp64\n\nSources: {sorted(set(bl.source))}; fp64 reference: "
                  f"{sorted(set(bl.reference))}.\n\n{baselines.baseline_table(bl)}\n\n![{p.name}](../figures/{p.name})\n")
    import json
    for p in sorted(res.glob("**/skip_rate_h200.json")):
        r = json.loads(p.read_text())
        md.append(f"## GPU run of the skip-rate grid ({p.relative_to(ROOT)})\n\n{r['computed']} tasks computed, "
                  f"{r['cached']} cached on {r['device']} in {r['seconds']} s; per sequence length: "
                  + ", ".join(f"{n}: {v['seconds']} s" for n, v in r["per_seqlen"].items())
                  + (f"; lengths left out by the time budget: {r['skipped_seqlens']}" if r["skipped_seqlens"] else "")
                  + "\n")
    for p in sorted(res.glob("**/dask_scaling.json")):
        r = json.loads(p.read_text())
        if "runs" not in r:
            md.append(f"## Dask scaling ({p.relative_to(ROOT)})\n\nnot measured: {r.get('error')}\n")
            continue
        lines = "\n".join(f"| {x['workers']} | {x['seconds']} | {x['speedup_vs_first']}x |" for x in r["runs"])
        md.append(f"## Dask scaling ({p.relative_to(ROOT)})\n\nGrid `{r['grid']}` ({r['tasks']} tasks) on a "
                  f"LocalCluster, {r['cpu_count']} CPUs, dask {r['dask']}.\n\n| workers | seconds | speedup |\n"
                  f"|---|---|---|\n{lines}\n")
    (res / "studies_summary.md").write_text("\n".join(md))
    print(f"wrote {res / 'studies_summary.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
