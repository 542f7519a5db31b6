"""Before/after a change, in one run: the same benchmarks on two revisions of fa4num, interleaved.

    python benchmarks/bench_before_after.py --before 5e8b00a [--after HEAD] [--rounds 3] [--out PATH]

Each revision is checked out into a temporary git worktree. Per round, and alternating which revision goes
first, every contender runs in a fresh process with ``PYTHONPATH`` set to that worktree:
- ``attention``: that revision's own ``benchmarks/bench_attention.py --no-first-call`` (bit-exact and statistical
  ``forward`` for both kernels against a plain fp32 torch attention timed in the same process), so each side is
  a ratio to torch measured in its own process, and the two ratios are compared;
- ``fit``: a fresh ``python -m fa4num.cli fit --degree 3`` with the user cache off (``FA4NUM_NO_CACHE=1``: the
  computation a newcomer's first run does), against a fresh ``python -c "import numpy, scipy"``.
A warm-up run per revision comes first (numba compiles into the new worktree's caches; not timed). Reported:
medians per revision, and after/before ratios of those medians (below 1: faster after). Timings are never
tests; on a shared machine compare only ratios from the same run (the load average is recorded).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import machine_state, user_env, write_result

ROOT = Path(__file__).resolve().parents[1]


def _worktree(rev: str, where: Path) -> Path:
    path = where / rev.replace("/", "_")
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(path), rev], check=True)
    return path


def _env(tree: Path, **extra) -> dict:
    return user_env(PYTHONPATH=str(tree), **extra)


def _attention(tree: Path, shape: str, rounds: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.json"
        subprocess.run([sys.executable, str(tree / "benchmarks" / "bench_attention.py"), "--no-first-call",
                        "--shape", shape, "--rounds", str(rounds), "--out", str(out)],
                       env=_env(tree), cwd=tree, check=True, capture_output=True)
        return json.loads(out.read_text())["warm_ratio_vs_plain"]


def _seconds(cmd: list, env: dict, cwd: Path) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=cwd, check=True, capture_output=True)
    return time.perf_counter() - t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="the revision before the change")
    ap.add_argument("--after", default="HEAD", help="the revision after it (default HEAD)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--shape", default="1,2048,2,128", help="attention shape batch,seqlen,heads,head_dim")
    ap.add_argument("--out", default=str(ROOT / "experiments" / "results" / "bench_before_after.json"))
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error(f"--rounds: expected an integer >= 1, got {args.rounds}")
    before_state = machine_state()
    revs = {"before": args.before, "after": args.after}
    resolved = {k: subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", r], check=True,
                                  capture_output=True, text=True).stdout.strip() for k, r in revs.items()}
    with tempfile.TemporaryDirectory() as tmp:
        trees = {k: _worktree(r, Path(tmp)) for k, r in resolved.items()}
        try:
            for tree in trees.values():        # warm-up: numba compiles into this worktree's caches
                _attention(tree, args.shape, 1)
                _seconds([sys.executable, "-m", "fa4num.cli", "fit", "--degree", "3"],
                         _env(tree, FA4NUM_NO_CACHE="1"), Path(tmp))
            att = {k: [] for k in trees}
            fit = {k: [] for k in trees}
            base = []
            for r in range(args.rounds):
                order = list(trees) if r % 2 == 0 else list(trees)[::-1]
                for k in order:
                    att[k].append(_attention(trees[k], args.shape, 3))
                    fit[k].append(_seconds([sys.executable, "-m", "fa4num.cli", "fit", "--degree", "3"],
                                           _env(trees[k], FA4NUM_NO_CACHE="1"), Path(tmp)))
                base.append(_seconds([sys.executable, "-c", "import numpy, scipy"], _env(trees["after"]),
                                     Path(tmp)))
        finally:
            for tree in trees.values():
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
    names = sorted(att["before"][0])
    med = {k: {n: statistics.median(run[n] for run in att[k]) for n in names} for k in att}
    fit_med = {k: statistics.median(v) for k, v in fit.items()}
    base_med = statistics.median(base)
    result = {
        "revisions": resolved, "rounds": args.rounds, "shape": args.shape,
        "attention_ratio_vs_plain_torch": med,
        "attention_after_over_before": {n: med["after"][n] / med["before"][n] for n in names},
        "attention_all_rounds": att,
        "fit_fresh_seconds": fit_med, "fit_all_seconds": fit,
        "import_numpy_scipy_seconds": base_med,
        "fit_fresh_ratio_vs_import_numpy_scipy": {k: v / base_med for k, v in fit_med.items()},
        "fit_after_over_before": fit_med["after"] / fit_med["before"],
    }
    path = write_result(result, args.out, before_state)
    for n in names:
        print(f"{n:<26} before {med['before'][n]:6.2f}x  after {med['after'][n]:6.2f}x  plain torch   "
              f"after/before {result['attention_after_over_before'][n]:.3f}")
    print(f"fresh fit --degree 3 (no cache): before {fit_med['before']:.2f} s, after {fit_med['after']:.2f} s; "
          f"import numpy, scipy {base_med:.2f} s; ratios {result['fit_fresh_ratio_vs_import_numpy_scipy']}")
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
