"""Throughput of fa4num.fp on this machine, as ratios to numpy / ml_dtypes doing the nearest plain operation on
the same arrays in the same run (numpy's float32 ops are round-to-nearest only and make x86 NaNs; they are the
speed yardstick, not a reference). Prints a table and writes JSON with provenance.

Run: python benchmarks/bench_fp.py [--n 16777216] [--out experiments/results/bench_fp.json]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import ml_dtypes
import numpy as np

import fa4num.fp as fp
from fa4num.provenance import provenance


def best_of(fn, repeat=3):
    fn()  # warm-up (numba compilation or cache load)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1 << 24)
    ap.add_argument("--out", default="experiments/results/bench_fp.json")
    args = ap.parse_args()
    n = args.n
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    rows = []

    def row(name, fn, base_name, base):
        t, tb = best_of(fn), best_of(base)
        rows.append({"op": name, "melem_per_s": n / t / 1e6, "baseline": base_name,
                     "baseline_melem_per_s": n / tb / 1e6, "ratio_to_baseline": tb / t})
        print(f"{name:28s} {n / t / 1e6:9.1f} M/s   {base_name:22s} {n / tb / 1e6:9.1f} M/s   ratio {tb / t:6.3f}")

    for mode in ("rn", "rz", "rm", "rp"):
        for ftz in (False, True):
            tag = f".{mode}{'.ftz' if ftz else ''}"
            row("add" + tag, lambda: fp.add(a, b, rounding=mode, ftz=ftz), "numpy a + b", lambda: a + b)
            row("mul" + tag, lambda: fp.mul(a, b, rounding=mode, ftz=ftz), "numpy a * b", lambda: a * b)
            row("fma" + tag, lambda: fp.fma(a, b, c, rounding=mode, ftz=ftz), "numpy a * b + c",
                lambda: a * b + c)
    row("max", lambda: fp.max(a, b), "numpy maximum", lambda: np.maximum(a, b))
    for fmt, dt in (("bf16", ml_dtypes.bfloat16), ("fp16", np.float16), ("e4m3", ml_dtypes.float8_e4m3fn),
                    ("e5m2", ml_dtypes.float8_e5m2)):
        row("to_" + fmt, lambda: getattr(fp, "to_" + fmt)(a), f"astype({np.dtype(dt).name})", lambda: a.astype(dt))
    x = (rng.random(n) * 254 - 127).astype(np.float32)
    for target in ("float32", "bfloat16"):
        row(f"exp2_cr({target})", lambda: fp.exp2_cr(x, target), "numpy exp2 float32", lambda: np.exp2(x))
        row(f"log2_cr({target})", lambda: fp.log2_cr(np.abs(x), target), "numpy log2 float32",
            lambda: np.log2(np.abs(x)))
        row(f"rcp_cr({target})", lambda: fp.rcp_cr(x, target), "numpy 1 / x float32", lambda: 1 / x)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"n": n, "rows": rows, "provenance": provenance()}, indent=1, default=str) + "\n")
    print("wrote", out)


if __name__ == "__main__":
    main()
