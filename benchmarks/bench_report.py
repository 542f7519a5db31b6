"""Wall time of ``fa4num report`` (the README's main job) in a fresh process, with numba's on-disk cache cold
(an empty NUMBA_CACHE_DIR: what a first run after installing sees) and then warm (the same cache, second run).

    python benchmarks/bench_report.py [--out experiments/results/bench_report.json] [--skip-cold]

Target (issue 15): <= 90 s on 2 idle cores, cold caches included. Also records how much of the cold run was
numba compilation (the cold minus the warm time) and the load average before and after.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

from _common import ROOT, machine_state, write_result


def _run_report(out_dir: str, cache_dir: str | None) -> float:
    """Seconds of one fresh ``fa4num report``; ``cache_dir`` None: numba's own cache (next to the sources)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if cache_dir is not None:
        env["NUMBA_CACHE_DIR"] = cache_dir
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "fa4num.cli", "report", "--out", out_dir, "--no-progress"], cwd=ROOT,
                   check=True, capture_output=True, env=env)
    return time.perf_counter() - t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="experiments/results/bench_report.json")
    ap.add_argument("--skip-cold", action="store_true", help="only a warm run, on numba's own on-disk cache")
    args = ap.parse_args(argv)
    before = machine_state()
    with tempfile.TemporaryDirectory(prefix="fa4num-bench-report-") as tmp:
        cache = os.path.join(tmp, "numba-cache")
        result = {"command": "fa4num report --out DIR --no-progress"}
        if not args.skip_cold:
            result["cold_cache_seconds"] = _run_report(os.path.join(tmp, "r1"), cache)
        result["warm_cache_seconds"] = _run_report(os.path.join(tmp, "r2"), None if args.skip_cold else cache)
    if "cold_cache_seconds" in result:
        result["compilation_seconds_estimate"] = result["cold_cache_seconds"] - result["warm_cache_seconds"]
        result["targets"] = {"cold report <= 90 s": result["cold_cache_seconds"] <= 90}
    path = write_result(result, args.out, before)
    cold = result.get("cold_cache_seconds")
    print(f"fa4num report: cold cache {cold:.1f} s, " if cold is not None else "fa4num report: ",
          end="")
    print(f"warm cache {result['warm_cache_seconds']:.1f} s; load {before['loadavg_1_5_15'][0]:.2f} -> "
          f"{result['machine_after']['loadavg_1_5_15'][0]:.2f}; wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
