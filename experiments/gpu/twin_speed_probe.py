"""On the H200: where the GPU twin's time goes, and which kernel variant keeps the bits while running faster.

    python experiments/gpu/twin_speed_probe.py OUT_DIR [--corpus] [--fa4]

For (1, 32768, 16, 128) causal bf16 and both kernels, each variant of the twin's launch -- the per-row
counters on or off (``stats``), ``num_warps``, ``num_stages`` -- is timed (CUDA events around ``twin.forward``,
what a user waits for, and the kernel alone from torch.profiler) and compared bit for bit with the first
variant (the default launch). With ``--corpus`` the default launch also runs the whole validation corpus
(experiments/gpu/twin_cases.py) and its digests are compared with the committed H200 goldens
(tests/golden/twin_h200.json.xz). With ``--fa4`` the real FA4 SM90 kernel is timed in the same run.

The first run (2026-12-02, experiments/results/h200_20261202/twin_speed_probe_scratch_vs_registers.json) compared
the row sums through a per-program scratch tile with the row sums from P's registers: the same bits, the kernel
30.8 -> 13.5 ms (SM90 numerics) and 46.0 -> 18.3 ms (SM100); the twin now takes the register path wherever each
row's columns sit in its own threads. Writes OUT_DIR/twin_speed_probe.json with provenance.
"""
from __future__ import annotations

import argparse
import json
import lzma
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import twin_cases  # noqa: E402

SHAPE = (1, 32768, 16, 128)
# (name, stats, num_warps, num_stages); the first is the default launch
VARIANTS = [
    ("stats", True, None, 2),
    ("nostats", False, None, 2),
    ("stats-ns3", True, None, 3),
    ("nostats-ns3", False, None, 3),
]


def _bits(x, torch):
    x = x.detach()
    return x.view(torch.int16) if x.element_size() == 2 else x.view(torch.int32)


def _time(fn, torch, repeats=7):
    """CUDA-event median of ``fn`` after a warm-up call: the benchmark's own timer (benchmarks/bench_twin.py)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("bench_twin", ROOT / "benchmarks" / "bench_twin.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench._time(fn, torch, repeats=repeats)


def _kernel_ms(fn, torch):
    """Device time of the twin's Triton kernel in one call (torch.profiler), or None."""
    try:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        tot = sum(e.device_time_total for e in prof.key_averages() if "twin_fwd" in e.key)
        return round(tot / 1e3, 3)
    except Exception as exc:        # noqa: BLE001 -- the probe records why
        return f"profiler failed: {exc}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--corpus", action="store_true")
    ap.add_argument("--fa4", action="store_true")
    args = ap.parse_args(argv)
    import numpy as np
    import torch
    from fa4num.attention import twin
    from fa4num.gpu import run_provenance
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = dict(provenance=run_provenance(script="experiments/gpu/twin_speed_probe.py"), shape=list(SHAPE),
               load_average_start=os.getloadavg(), speed=[], corpus=None)
    g = torch.Generator(device="cuda").manual_seed(7)
    q, k, v = (torch.randn(*SHAPE, generator=g, device="cuda").to(torch.bfloat16) for _ in range(3))
    if args.fa4:
        try:
            from flash_attn.cute import flash_attn_func
            doc["fa4_sm90_ms"] = round(_time(lambda: flash_attn_func(q, k, v, causal=True, return_lse=True),
                                             torch), 3)
        except Exception as exc:    # noqa: BLE001
            doc["fa4_sm90_ms"] = f"failed: {exc}"
        print("fa4", doc["fa4_sm90_ms"], flush=True)
    for kernel in ("fa4-sm90", "fa4-sm100"):
        ref = None
        for name, stats, nw, ns in VARIANTS:
            run = (lambda: twin.forward(q, k, v, causal=True, kernel=kernel, stats=stats, num_warps=nw,
                                        num_stages=ns))
            row = dict(kernel=kernel, variant=name)
            try:
                t0 = time.perf_counter()
                res = run()
                torch.cuda.synchronize()
                row["first_call_s"] = round(time.perf_counter() - t0, 2)
                row["ms"] = round(_time(run, torch), 3)
                row["kernel_ms"] = _kernel_ms(run, torch)
                if ref is None:
                    ref = res
                row["differing_out"] = int((_bits(res.out, torch) != _bits(ref.out, torch)).sum())
                row["differing_lse"] = int((_bits(res.lse, torch) != _bits(ref.lse, torch)).sum())
                if res.stats is not None:
                    row["differing_counters"] = {
                        n: int((np.asarray(getattr(res.stats, n)) != np.asarray(getattr(ref.stats, n))).sum())
                        for n in twin_cases.COUNTERS}
            except Exception as exc:    # noqa: BLE001 -- one failing variant must not lose the others
                row["error"] = f"{type(exc).__name__}: {exc}"[:2000]
            doc["speed"].append(row)
            print(json.dumps(row), flush=True)
        del ref
        torch.cuda.empty_cache()
    if args.corpus:
        gold = json.loads(lzma.decompress((ROOT / "tests/golden/twin_h200.json.xz").read_bytes()))["cases"]
        rows = []
        for case in twin_cases.cases():
            qq, kk, vv, kw = twin_cases.inputs(case)
            try:
                dg = twin_cases.digest(twin.forward(qq.cuda(), kk.cuda(), vv.cuda(), **kw))
                bad = sorted(n for n in gold[case["name"]] if dg.get(n) != gold[case["name"]][n])
            except Exception as exc:    # noqa: BLE001
                bad = [f"error: {type(exc).__name__}: {exc}"[:500]]
            rows.append(dict(name=case["name"], differing=bad))
            print(case["name"], "EQUAL" if not bad else bad, flush=True)
        doc["corpus"] = dict(variant="stats", cases=len(rows), equal=sum(not r["differing"] for r in rows),
                             rows=rows)
    doc["load_average_end"] = os.getloadavg()
    (out / "twin_speed_probe.json").write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
