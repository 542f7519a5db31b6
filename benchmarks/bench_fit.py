"""Benchmark: fit + certify 2^x coefficient sets of degrees 1-5 (fa4num.fit defaults: p(0) = 1, fp32,
relative error on [0, 1]) against Sollya doing fpminimax + supnorm for the same five degrees (FA4's call),
measured in the same run on the same machine.

    python benchmarks/bench_fit.py [--repeat 3] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import time

from fa4num.fit import _sollya, fit_exp2
from fa4num.provenance import provenance

DEGREES = range(1, 6)


def time_fa4num() -> tuple[float, dict]:
    t0 = time.perf_counter()
    per = {}
    for n in DEGREES:
        r = fit_exp2(n)
        per[n] = {"seconds": r.timings["total"], "max_error": r.max_error, "certified_bound": r.certified_bound}
    return time.perf_counter() - t0, per


def time_sollya() -> float:
    script = "".join(
        f"p{n} = fpminimax(exp(x*log(2.0)), {n}, [|1,24...|], [0;1], relative);\n"
        f"s{n} = supnorm(p{n}, 2^x, [0;1], relative, 2^-20);\n" for n in DEGREES)
    t0 = time.perf_counter()
    _sollya.run(script)
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="best of N runs (default 3)")
    ap.add_argument("--json", help="also write the numbers here")
    args = ap.parse_args(argv)
    fit_exp2(1)  # warm imports and numba caches outside the timing
    ours = min((time_fa4num() for _ in range(args.repeat)), key=lambda t: t[0])
    out = {"fa4num_fit_certify_deg1to5_s": ours[0], "per_degree": ours[1]}
    print(f"fa4num fit+certify, degrees 1-5: {ours[0]:.3f} s")
    for n, d in ours[1].items():
        print(f"  n={n}: {d['seconds']:.3f} s  max rel {d['max_error']:.6e}  certified {d['certified_bound']:.6e}")
    if _sollya.available():
        sol = min(time_sollya() for _ in range(args.repeat))
        out["sollya_fpminimax_supnorm_deg1to5_s"] = sol
        out["ratio_fa4num_over_sollya"] = ours[0] / sol
        print(f"Sollya fpminimax+supnorm, degrees 1-5: {sol:.3f} s")
        print(f"ratio fa4num / Sollya: {ours[0] / sol:.1f}x")
    else:
        print("Sollya not installed: no ratio")
    out["provenance"] = provenance()
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
