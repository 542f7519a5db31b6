"""Speed of the attention emulator against a plain fp32 torch attention on the same CPU, measured in one run.

    python benchmarks/bench_attention.py [--shape 1,2048,2,128] [--rounds 3] [--out PATH]

Targets (issue 15): bit-exact ``forward`` within 5x and ``mode="statistical"`` within 1.5x of the plain fp32
attention ``softmax(q k^T * scale) v`` written in torch (torch's own threads), for kernels fa4-sm90 and fa4-sm100.

What is timed, and why the earlier benchmark (10.1x) and the issue's figure (36.6x) disagreed: the earlier
script timed only warm calls (after a warm-up call) on an idle machine; a user running one forward in a fresh
process also pays numba's compilation or cache load on the first call (about 20 s when the on-disk cache is
cold, the bulk of a one-off call), and on a shared machine the parallel numba kernels lose more to load than
torch does. So this script reports both:
- ``warm``: in this process, one warm-up call per contender, then ``--rounds`` rounds alternating between the
  contenders (background load hits all alike), median per contender;
- ``first_call``: a fresh interpreter per emulator contender times its first call (numba cache load included;
  the cache is whatever this checkout has, as a user's would be), next to the plain attention's first call in
  a fresh interpreter.
Ratios are to the plain attention's warm median (warm) and first call (first_call). Threads: torch and numba
use their defaults (all cores); both are recorded with the load average before and after. On a shared machine
the warm rounds also record the process's CPU seconds (``warm_cpu_median_seconds``, all threads): a busy
machine stretches wall time, and spinning BLAS/OpenMP threads stretch CPU time, each differently per contender.
"""
from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np
import torch

from _common import fresh_process_json, machine_state, write_result
from fa4num.attention import forward, inputs

_FIRST_CALL = """
import json, math, time
t0 = time.perf_counter()
import numpy as np
{imports}
from fa4num.attention import inputs
spec = inputs.CaseSpec("bench", "normal", {b}, {s}, {s}, {h}, {h}, {d}, False, seed=0)
q, k, v = inputs.make_inputs(spec)
t1 = time.perf_counter()
{call}
t2 = time.perf_counter()
print(json.dumps({{"import_and_inputs_seconds": t1 - t0, "first_call_seconds": t2 - t1}}))
"""
_PLAIN = """
tq, tk, tv = (torch.from_numpy(x.astype(np.float32)).transpose(1, 2).contiguous() for x in (q, k, v))
torch.softmax((tq @ tk.transpose(-1, -2)) * (1.0 / math.sqrt({d})), dim=-1) @ tv
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="1,2048,2,128", help="batch,seqlen,heads,head_dim")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--kernels", default="fa4-sm90,fa4-sm100")
    ap.add_argument("--no-first-call", action="store_true", help="skip the fresh-process first-call timings")
    ap.add_argument("--out", default="experiments/results/bench_attention.json")
    args = ap.parse_args(argv)
    before = machine_state()
    b, s, h, d = (int(x) for x in args.shape.split(","))
    kernels = args.kernels.split(",")
    spec = inputs.CaseSpec("bench", "normal", b, s, s, h, h, d, False, seed=0)
    q, k, v = inputs.make_inputs(spec)
    tq, tk, tv = (torch.from_numpy(x.astype(np.float32)).transpose(1, 2).contiguous() for x in (q, k, v))
    scale = 1.0 / math.sqrt(d)

    def plain():
        return torch.softmax((tq @ tk.transpose(-1, -2)) * scale, dim=-1) @ tv

    contenders = {"torch_fp32_plain": plain}
    for kern in kernels:
        contenders[f"{kern}/bitexact"] = lambda kern=kern: forward(q, k, v, kernel=kern)
        contenders[f"{kern}/statistical"] = lambda kern=kern: forward(q, k, v, kernel=kern, mode="statistical")
    for fn in contenders.values():
        fn()
    times = {name: [] for name in contenders}
    cpu = {name: [] for name in contenders}
    for _ in range(args.rounds):
        for name, fn in contenders.items():
            t, c = time.perf_counter(), time.process_time()
            fn()
            times[name].append(time.perf_counter() - t)
            cpu[name].append(time.process_time() - c)
    warm = {name: statistics.median(t) for name, t in times.items()}
    warm_cpu = {name: statistics.median(t) for name, t in cpu.items()}
    base = warm["torch_fp32_plain"]
    result = {"shape": [b, s, h, d], "rounds": args.rounds, "torch_threads": torch.get_num_threads(),
              "warm_median_seconds": warm, "warm_all_seconds": times,
              "warm_ratio_vs_plain": {n: t / base for n, t in warm.items()},
              "warm_cpu_median_seconds": warm_cpu,
              "warm_cpu_ratio_vs_plain": {n: t / warm_cpu["torch_fp32_plain"] for n, t in warm_cpu.items()}}
    try:
        import numba
        result["numba_threads"] = numba.get_num_threads()
    except ImportError:
        pass
    if not args.no_first_call:
        fmt = dict(b=b, s=s, h=h, d=d)
        first = {"torch_fp32_plain": fresh_process_json(_FIRST_CALL.format(
            imports="import torch", call=_PLAIN.format(d=d), **fmt))}
        for kern in kernels:
            for mode in ("bitexact", "statistical"):
                first[f"{kern}/{mode}"] = fresh_process_json(_FIRST_CALL.format(
                    imports="from fa4num.attention import forward",
                    call=f"forward(q, k, v, kernel={kern!r}, mode={mode!r})", **fmt))
        fb = first["torch_fp32_plain"]["first_call_seconds"]
        result["first_call"] = first
        result["first_call_ratio_vs_plain"] = {n: r["first_call_seconds"] / fb for n, r in first.items()}
    targets = {}
    for kern in kernels:
        targets[f"{kern} bitexact <= 5x plain (warm)"] = result["warm_ratio_vs_plain"][f"{kern}/bitexact"] <= 5
        targets[f"{kern} statistical <= 1.5x plain (warm)"] = \
            result["warm_ratio_vs_plain"][f"{kern}/statistical"] <= 1.5
    result["targets"] = targets
    path = write_result(result, args.out, before)
    r = result["warm_ratio_vs_plain"]
    rc = result["warm_cpu_ratio_vs_plain"]
    line = "; ".join(f"{kern}: bitexact {r[f'{kern}/bitexact']:.1f}x (cpu {rc[f'{kern}/bitexact']:.1f}x), "
                     f"statistical {r[f'{kern}/statistical']:.2f}x (cpu {rc[f'{kern}/statistical']:.2f}x)"
                     for kern in kernels)
    if "first_call_ratio_vs_plain" in result:
        fr = result["first_call_ratio_vs_plain"]
        line += " | first call: " + ", ".join(f"{n} {x:.0f}x" for n, x in fr.items() if n != "torch_fp32_plain")
    print(f"attention {args.shape} vs plain fp32 torch ({base * 1e3:.0f} ms warm), warm medians: {line}; "
          f"load {before['loadavg_1_5_15'][0]:.2f} -> {result['machine_after']['loadavg_1_5_15'][0]:.2f}; "
          f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
