"""Cost of the rigorous attention bounds against the bit-exact emulators of the same problem, measured in one run.

    python benchmarks/bench_bounds.py [--shape 1,2048,2,128] [--rounds 3] [--kernels fa4-sm90,fa4-sm100]
                                      [--no-backward] [--out PATH]

Targets (issues 12, 24): ``attention_error_bound`` costs no more than 2x ``forward`` (bit-exact) on the same
inputs; ``attention_backward_error_bound`` no more than 3x ``backward`` (bit-exact) on the same inputs (the
forward's out and LSE, a random dout).
Each contender runs once to warm up (numba compilation or cache load, MUFU tables, the exp2 bound's cache), then
the forward and the bound alternate for ``--rounds`` rounds per kernel, so background load hits both alike; the
medians and their ratio are reported with the load average before and after (``benchmarks/_common.py``).
"""
from __future__ import annotations

import argparse
import statistics

from _common import interleaved_seconds, machine_state, write_result
import numpy as np

from fa4num.attention import backward, forward, inputs
from fa4num.bounds import attention_backward_error_bound, attention_error_bound

TARGET = 2.0
TARGET_BACKWARD = 3.0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="1,2048,2,128", help="batch,seqlen,heads,head_dim")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--kernels", default="fa4-sm90,fa4-sm100")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--no-backward", action="store_true", help="time the forward bound only")
    ap.add_argument("--out", default="experiments/results/bench_bounds.json")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error(f"--rounds must be >= 1, got {args.rounds}")
    try:
        b, s, h, d = (int(x) for x in args.shape.split(","))
    except ValueError:
        ap.error(f"--shape must be batch,seqlen,heads,head_dim, got {args.shape!r}")
    before = machine_state()
    spec = inputs.CaseSpec("bench", "normal", b, s, s, h, h, d, args.causal, seed=0)
    q, k, v = inputs.make_inputs(spec)
    kernels = {}
    for kernel in args.kernels.split(","):
        contenders = {
            "forward_bitexact": lambda: forward(q, k, v, causal=args.causal, kernel=kernel),
            "attention_error_bound": lambda: attention_error_bound(q, k, v, causal=args.causal, kernel=kernel),
        }
        times = interleaved_seconds(contenders, args.rounds)
        med = {name: statistics.median(t) for name, t in times.items()}
        ratio = med["attention_error_bound"] / med["forward_bitexact"]
        kernels[kernel] = {"seconds": times, "median_seconds": med, "ratio_bound_vs_forward": ratio,
                           "target_met": ratio <= TARGET}
        print(f"{kernel}: forward {med['forward_bitexact']:.3f} s, bound {med['attention_error_bound']:.3f} s, "
              f"ratio {ratio:.2f} (target <= {TARGET:g})", flush=True)
        if args.no_backward:
            continue
        fw = forward(q, k, v, causal=args.causal, kernel=kernel)
        dout = (np.random.default_rng(1).standard_normal(q.shape)).astype(q.dtype)
        contenders = {
            "backward_bitexact": lambda: backward(q, k, v, fw.out, dout, fw.lse, causal=args.causal, kernel=kernel),
            "attention_backward_error_bound": lambda: attention_backward_error_bound(
                q, k, v, fw.out, dout, fw.lse, causal=args.causal, kernel=kernel),
        }
        times = interleaved_seconds(contenders, args.rounds)
        med = {name: statistics.median(t) for name, t in times.items()}
        ratio = med["attention_backward_error_bound"] / med["backward_bitexact"]
        kernels[kernel]["backward"] = {"seconds": times, "median_seconds": med, "ratio_bound_vs_backward": ratio,
                                       "target_met": ratio <= TARGET_BACKWARD}
        print(f"{kernel}: backward {med['backward_bitexact']:.3f} s, backward bound "
              f"{med['attention_backward_error_bound']:.3f} s, ratio {ratio:.2f} (target <= {TARGET_BACKWARD:g})",
              flush=True)
    result = {"what": "attention_error_bound vs bit-exact forward, same inputs, medians of alternating rounds",
              "shape": [b, s, h, d], "causal": args.causal, "dtype": str(q.dtype), "rounds": args.rounds,
              "target_ratio": TARGET, "target_ratio_backward": TARGET_BACKWARD, "kernels": kernels}
    print(write_result(result, args.out, before))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
