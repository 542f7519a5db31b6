"""Benchmark: CLI start-up as a user meets it (issue 9), fresh processes only. ``fa4num --help`` and
``fa4num polys list`` against ``python -c "import numpy"``, interleaved and repeated in one run so that the ratio
holds on a shared machine; the best of N of each is compared.

    python benchmarks/bench_cli.py [--repeat 7] [--out experiments/results/bench_cli.json]

Target (issue 9): both commands within 1.5x of the numpy import.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time

from _common import ROOT, machine_state, write_result


def _commands() -> dict[str, list[str]]:
    """What is timed. The console script is used when it is on PATH (that is what a user types); ``python -m
    fa4num.cli`` otherwise, which runs the same code without the entry-point shim."""
    script = shutil.which("fa4num")
    cli = [script] if script else [sys.executable, "-m", "fa4num.cli"]
    return {"import_numpy": [sys.executable, "-c", "import numpy"],
            "fa4num_help": cli + ["--help"],
            "fa4num_polys_list": cli + ["polys", "list"]}


def _once(argv: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, check=True, capture_output=True,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})
    return time.perf_counter() - t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=7, help="rounds; each round runs every command once (default 7)")
    ap.add_argument("--out", default="experiments/results/bench_cli.json")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error(f"--repeat: expected an integer >= 1, got {args.repeat}")
    cmds = _commands()
    before = machine_state()
    for a in cmds.values():          # one untimed round: the OS file cache, __pycache__
        _once(a)
    times: dict[str, list[float]] = {k: [] for k in cmds}
    for _ in range(args.repeat):     # interleaved: a load spike hits every command alike
        for k, a in cmds.items():
            times[k].append(_once(a))
    best = {k: min(v) for k, v in times.items()}
    base = best["import_numpy"]
    ratio = {k: best[k] / base for k in cmds if k != "import_numpy"}
    for k in cmds:
        print(f"{k:20s} best {best[k] * 1e3:7.1f} ms" + (f"   {ratio[k]:.2f}x import numpy" if k in ratio else ""))
    out = {"commands": {k: " ".join(a) for k, a in cmds.items()}, "seconds": times, "best_seconds": best,
           "ratio_vs_import_numpy": ratio, "target_ratio": 1.5,
           "meets_target": all(r <= 1.5 for r in ratio.values())}
    print(f"wrote {write_result(out, args.out, before)}  (load average before: {before['loadavg_1_5_15']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
