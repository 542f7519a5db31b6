"""Speed of the attention emulator against a plain fp32 torch attention on the same CPU, in one run.

    python benchmarks/bench_attention.py [--shape 1,2048,2,128] [--rounds 5] [--kernel fa4-sm90] [--json PATH]

Targets (issue 5): bit-exact emulation within 200x and the statistical mode within 5x of the plain fp32
attention (softmax(q k^T * scale) v written out in torch); torch's fused SDPA is timed too. Every contender runs
once to warm up (numba compilation, table loading), then the contenders alternate for ``rounds`` rounds and
the median of each is reported, so background load affects all of them alike.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import time

import numpy as np
import torch

from fa4num.attention import forward, inputs
from fa4num.provenance import provenance


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="1,2048,2,128", help="batch,seqlen,heads,head_dim")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--kernel", default="fa4-sm90", choices=("fa4-sm90", "fa4-sm100"))
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    b, s, h, d = (int(x) for x in args.shape.split(","))
    spec = inputs.CaseSpec("bench", "normal", b, s, s, h, h, d, args.causal, seed=0)
    q, k, v = inputs.make_inputs(spec)
    tq, tk, tv = (torch.from_numpy(x.astype(np.float32)).transpose(1, 2).contiguous() for x in (q, k, v))
    scale = 1.0 / math.sqrt(d)
    mask = torch.ones(s, s, dtype=torch.bool).tril() if args.causal else None

    def plain():
        sc = (tq @ tk.transpose(-1, -2)) * scale
        if mask is not None:
            sc = sc.masked_fill(~mask, float("-inf"))
        return torch.softmax(sc, dim=-1) @ tv

    contenders = {
        "torch_fp32_plain": plain,
        "torch_fp32_sdpa": lambda: torch.nn.functional.scaled_dot_product_attention(tq, tk, tv,
                                                                                     is_causal=args.causal),
        "bitexact": lambda: forward(q, k, v, causal=args.causal, kernel=args.kernel),
        "statistical": lambda: forward(q, k, v, causal=args.causal, kernel=args.kernel, mode="statistical"),
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
    base = med["torch_fp32_plain"]
    result = {"shape": [b, s, h, d], "kernel": args.kernel, "causal": args.causal, "rounds": args.rounds,
              "torch_threads": torch.get_num_threads(), "median_seconds": med,
              "ratio_vs_plain": {n: med[n] / base for n in med},
              "ratio_vs_sdpa": {n: med[n] / med["torch_fp32_sdpa"] for n in med},
              "targets": {"bitexact <= 200x plain": med["bitexact"] / base <= 200,
                          "statistical <= 5x plain": med["statistical"] / base <= 5},
              "provenance": provenance()}
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
