"""Speed of the bit-exact backward emulator against the bit-exact forward, in one run.

    python benchmarks/bench_backward.py [--shape 1,2048,2,128] [--rounds 3] [--causal] [--json PATH]

Target (issue 11): ``backward(kernel="fa4-sm90")`` of (1, 2048, 2, 128) within 3x ``forward(kernel="fa4-sm90")``
on the same inputs. Both run once to warm up (numba compilation, MUFU tables), then they alternate for
``rounds`` rounds and the median of each is reported, so background load affects both alike.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from fa4num.attention import backward, forward, inputs
from fa4num.provenance import provenance


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="1,2048,2,128", help="batch,seqlen,heads,head_dim")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.rounds < 1:
        raise SystemExit("--rounds must be >= 1")
    b, s, h, d = (int(x) for x in args.shape.split(","))
    spec = inputs.CaseSpec("bench", "normal", b, s, s, h, h, d, args.causal, seed=0)
    q, k, v = inputs.make_inputs(spec)
    dout = np.random.default_rng(1).standard_normal(q.shape, dtype=np.float32).astype(q.dtype)
    fw = forward(q, k, v, causal=args.causal)
    contenders = {
        "forward_bitexact": lambda: forward(q, k, v, causal=args.causal),
        "backward_bitexact": lambda: backward(q, k, v, fw.out, dout, fw.lse, causal=args.causal),
    }
    times = {name: [] for name in contenders}
    for fn in contenders.values():
        fn()
    for _ in range(args.rounds):
        for name, fn in contenders.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    med = {name: statistics.median(t) for name, t in times.items()}
    ratio = med["backward_bitexact"] / med["forward_bitexact"]
    result = {"shape": [b, s, h, d], "causal": args.causal, "rounds": args.rounds, "median_seconds": med,
              "ratio_backward_vs_forward": ratio, "targets": {"backward <= 3x forward": ratio <= 3},
              "provenance": provenance()}
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
