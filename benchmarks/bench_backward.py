"""Speed of the bit-exact backward emulator against the bit-exact forward, measured in one run.

    python benchmarks/bench_backward.py [--shape 1,2048,2,128] [--rounds 3] [--causal] [--no-first-call]
                                        [--out PATH]

Target (issue 11): ``backward(kernel="fa4-sm90")`` of (1, 2048, 2, 128) within 3x ``forward(kernel="fa4-sm90")``
on the same inputs. What a user sees, as ``bench_attention.py`` measures it:
- ``warm``: one warm-up call each (numba compilation or cache load, MUFU tables), then ``--rounds`` rounds
  alternating forward and backward (background load hits both alike), median per contender;
- ``first_call``: a fresh interpreter per contender times its first call (imports done, numba's on-disk cache
  as this checkout has it, table loads included).
The load average before and after, the thread counts and provenance go into the JSON (default
experiments/results/bench_backward.json).
"""
from __future__ import annotations

import argparse
import statistics

import numpy as np

from _common import fresh_process_json, interleaved_seconds, machine_state, write_result
from fa4num.attention import backward, forward, inputs

_FIRST_CALL = """
import json, time
import numpy as np
from fa4num.attention import backward, forward, inputs
spec = inputs.CaseSpec("bench", "normal", {b}, {s}, {s}, {h}, {h}, {d}, {causal}, seed=0)
q, k, v = inputs.make_inputs(spec)
dout = np.random.default_rng(1).standard_normal(q.shape, dtype=np.float32).astype(q.dtype)
{prep}
t = time.perf_counter()
{call}
print(json.dumps({{"first_call_seconds": time.perf_counter() - t}}))
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="1,2048,2,128", help="batch,seqlen,heads,head_dim")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--no-first-call", action="store_true", help="skip the fresh-process first-call timings")
    ap.add_argument("--out", default="experiments/results/bench_backward.json")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        raise SystemExit("--rounds must be >= 1")
    before = machine_state()
    b, s, h, d = (int(x) for x in args.shape.split(","))
    spec = inputs.CaseSpec("bench", "normal", b, s, s, h, h, d, args.causal, seed=0)
    q, k, v = inputs.make_inputs(spec)
    dout = np.random.default_rng(1).standard_normal(q.shape, dtype=np.float32).astype(q.dtype)
    fw = forward(q, k, v, causal=args.causal)
    contenders = {
        "forward_bitexact": lambda: forward(q, k, v, causal=args.causal),
        "backward_bitexact": lambda: backward(q, k, v, fw.out, dout, fw.lse, causal=args.causal),
    }
    times = interleaved_seconds(contenders, args.rounds)
    med = {name: statistics.median(t) for name, t in times.items()}
    ratio = med["backward_bitexact"] / med["forward_bitexact"]
    result = {"shape": [b, s, h, d], "causal": args.causal, "rounds": args.rounds, "warm_median_seconds": med,
              "warm_all_seconds": times, "ratio_backward_vs_forward": ratio,
              "targets": {"backward <= 3x forward (warm)": ratio <= 3}}
    try:
        import numba
        result["numba_threads"] = numba.get_num_threads()
    except ImportError:
        pass
    if not args.no_first_call:
        fmt = dict(b=b, s=s, h=h, d=d, causal=args.causal)
        first = {
            "forward_bitexact": fresh_process_json(_FIRST_CALL.format(
                prep="", call="forward(q, k, v, causal={causal})".format(**fmt), **fmt)),
            # the forward that makes out and lse runs first (and pays the shared compilation): only the
            # backward call is timed
            "backward_bitexact": fresh_process_json(_FIRST_CALL.format(
                prep="fw = forward(q, k, v, causal={causal})".format(**fmt),
                call="backward(q, k, v, fw.out, dout, fw.lse, causal={causal})".format(**fmt), **fmt)),
        }
        result["first_call"] = first
        result["first_call_ratio_backward_vs_forward"] = (first["backward_bitexact"]["first_call_seconds"]
                                                          / first["forward_bitexact"]["first_call_seconds"])
    path = write_result(result, args.out, before)
    line = (f"backward/forward {args.shape}{' causal' if args.causal else ''}: warm {med['backward_bitexact']:.2f} s"
            f" / {med['forward_bitexact']:.2f} s = {ratio:.2f}x")
    if "first_call" in result:
        line += f"; first call {result['first_call_ratio_backward_vs_forward']:.2f}x"
    print(f"{line}; load {before['loadavg_1_5_15'][0]:.2f} -> {result['machine_after']['loadavg_1_5_15'][0]:.2f}; "
          f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
