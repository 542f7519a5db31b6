"""Dask scaling of the study runner: one grid on a LocalCluster of 1 worker, then of N workers (default 16).

Each worker is one process with one thread (torch runs single-threaded inside it), and the grid
(fa4num/study/grids/scaling.toml: 96 skip-rate tasks at 8k tokens, every task its own input, CPU only) is run
once per cluster size into a fresh result directory. The clock covers ``run_grid`` with the cluster up and every
worker warmed (fa4num, torch imported; one small task run), so it measures the scheduling of the grid, not the
start of the processes. speedup = seconds(1 worker) / seconds(N workers).

    python experiments/gpu/dask_scaling.py --out DIR               # 16-core host: expected ~2 min
    python experiments/gpu/dask_scaling.py --out DIR --workers 1,2 --tasks 8   # quick check

Needs dask and distributed (see the report for the wheels). Writes DIR/dask_scaling.json.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def _warm():
    import torch  # noqa: F401

    from fa4num.study.studies import skip_rate
    skip_rate(dist="gaussian", seqlen=256, threshold=8, heads=1, head_dim=64, device="cpu")
    return os.getpid()


def measure(grid, n_workers: int) -> dict:
    from dask.distributed import Client, LocalCluster

    from fa4num.study import run_grid
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    with LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=None) as cl, \
            Client(cl) as client:
        client.wait_for_workers(n_workers)
        pids = client.run(_warm)
        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            res = run_grid(grid, d, client=client, progress=False, compact=False)
            seconds = time.perf_counter() - t0
    print(f"{n_workers:>3} workers: {res.line} in {seconds:.2f} s", flush=True)
    return {"workers": n_workers, "seconds": round(seconds, 3), "computed": res.computed,
            "failed": len(res.failed), "worker_pids": len(set(pids.values()))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--grid", default="scaling")
    ap.add_argument("--workers", default="1,16", help="comma-separated cluster sizes (default 1,16)")
    ap.add_argument("--tasks", type=int, default=None, help="use only the first N tasks of the grid")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        import distributed  # noqa: F401
    except ImportError as exc:   # say so in the result instead of a traceback
        (out / "dask_scaling.json").write_text(json.dumps({"error": f"dask.distributed missing: {exc}"}) + "\n")
        print(f"dask.distributed is not installed here ({exc}); carry the wheels listed in the study report")
        return 2
    from fa4num.study import load_grid
    g = load_grid(args.grid)
    if args.tasks is not None:
        g = dataclasses.replace(g, tasks=g.tasks[:args.tasks])
    sizes = [int(x) for x in args.workers.split(",")]
    runs = [measure(g, n) for n in sizes]
    base = runs[0]["seconds"]
    for r in runs:
        r["speedup_vs_first"] = round(base / r["seconds"], 2) if r["seconds"] else None
    from fa4num.provenance import provenance
    import dask
    import distributed
    record = {"grid": g.name, "tasks": len(g), "cpu_count": os.cpu_count(), "runs": runs,
              "dask": dask.__version__, "distributed": distributed.__version__,
              "provenance": provenance(kind="dask_scaling", revision_env=os.environ.get("FA4NUM_REVISION"))}
    (out / "dask_scaling.json").write_text(json.dumps(record, indent=1, default=str) + "\n")
    print(f"speedup {sizes[-1]} vs {sizes[0]} workers: {runs[-1]['speedup_vs_first']}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
