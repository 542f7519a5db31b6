"""FA4 against cuDNN and torch's SDPA back ends (flash = FA2, efficient, math) on many shapes, each against an
fp64 reference computed on the GPU (torch float64, ``fa4num.study.baselines.attention_fp64_torch``).

Shapes: sequence lengths 1k-16k, head dims 64/128/256, causal and not, GQA, fp16, large logits (q * 4). Per
shape and back end: median time (CUDA events, 2 warm-ups, 5 repeats), errors of out and LSE against fp64, and the
floor (fp64 rounded once to the dtype). Records have the format of ``fa4num.gpu.attention.capture`` plus
"floor" and "reference", so ``fa4num.study.baselines.load_baselines`` reads them with the earlier captures.

    . fa4num/gpu/fa4-env.sh; python experiments/gpu/baselines_h200.py --out DIR     # H200: expected ~60 s
    python experiments/gpu/baselines_h200.py --out DIR --quick --device cpu         # CPU check (flash, math)

Writes DIR/baselines_h200_fp64gpu.json.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

# (batch, seqlen, heads, heads_kv, head_dim, causal, dtype, q_mult)
SHAPES = [   # most informative first: a time budget cuts the tail
    (1, 4096, 16, 16, 128, True, "bfloat16", 1.0),
    (1, 16384, 8, 8, 128, True, "bfloat16", 1.0),
    (1, 4096, 16, 16, 256, False, "bfloat16", 1.0),
    (1, 4096, 32, 4, 128, True, "bfloat16", 1.0),
    (1, 4096, 16, 16, 128, True, "float16", 1.0),
    (1, 4096, 16, 16, 128, False, "bfloat16", 4.0),
    (1, 1024, 16, 16, 64, False, "bfloat16", 1.0),
    (1, 4096, 16, 16, 64, True, "bfloat16", 1.0),
    (1, 16384, 8, 8, 128, False, "bfloat16", 1.0),
    (1, 4096, 16, 16, 128, False, "bfloat16", 1.0),
    (1, 4096, 16, 16, 256, True, "bfloat16", 1.0),
    (1, 8192, 16, 16, 128, True, "bfloat16", 1.0),
    (1, 1024, 16, 16, 128, True, "bfloat16", 1.0),
    (1, 8192, 16, 16, 128, False, "bfloat16", 1.0),
]
QUICK = [(1, 256, 2, 2, 64, False, "bfloat16", 1.0), (1, 256, 4, 2, 128, True, "float16", 4.0)]


def run_shape(shape, *, device, backends, warmup, repeats, seed):
    import numpy as np
    import torch

    from fa4num.attention import reference
    from fa4num.attention.inputs import CaseSpec, make_inputs
    from fa4num.gpu import attention as gattn
    from fa4num.study.baselines import attention_fp64_torch
    b, n, h, hk, d, causal, dtype, q_mult = shape
    spec = CaseSpec(f"baseline-{b}x{n}x{h}x{hk}x{d}-{'c' if causal else 'n'}-{dtype}-q{q_mult:g}", "normal", b, n,
                    n, h, hk, d, causal, dtype=dtype, q_mult=q_mult, seed=seed)
    q, k, v = make_inputs(spec)
    tdt = torch.bfloat16 if dtype == "bfloat16" else torch.float16
    qt, kt, vt = (torch.from_numpy(a.view(np.int16)).view(tdt).to(device) for a in (q, k, v))
    t0 = time.perf_counter()
    out64, lse64 = attention_fp64_torch(qt, kt, vt, causal=causal)
    out64, lse64 = out64.cpu().numpy(), lse64.cpu().numpy()
    ref_s = time.perf_counter() - t0
    floor = reference.metrics(reference.round_once(out64, q.dtype), out64)
    rec = {"spec": spec.as_dict(), "device": str(device), "runs": {}, "floor": floor.as_dict(),
           "reference": f"torch float64 on {device}", "reference_seconds": round(ref_s, 3)}
    for backend in backends:
        try:
            r = gattn.run_attention(qt, kt, vt, backend=backend, causal=causal, warmup=warmup, repeats=repeats)
        except Exception as exc:  # noqa: BLE001 - an unsupported shape is data here
            rec["runs"][backend] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            continue
        lse = r.lse.detach().float().cpu().numpy()
        m = reference.metrics(r.out.detach().float().cpu().numpy(), out64)
        rec["runs"][backend] = {"median_ms": r.median_ms, "times_ms": r.times_ms, "metrics": m.as_dict(),
                                "lse_max_abs_err": float(np.nanmax(np.abs(lse - lse64)))}
        del r
    if device != "cpu":
        torch.cuda.empty_cache()
    return rec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true", help="two small shapes (a CPU check of the script)")
    ap.add_argument("--budget-s", type=float, default=100.0, help="start no new shape after this many seconds")
    args = ap.parse_args(argv)
    from fa4num.gpu import attention as gattn
    from fa4num.gpu import run_provenance
    backends = gattn.BACKENDS if args.device != "cpu" else ("flash", "math")
    shapes = QUICK if args.quick else SHAPES
    t0 = time.perf_counter()
    records = []
    for shape in shapes:
        if time.perf_counter() - t0 > args.budget_s:
            print(f"budget reached: skipped {shape}", flush=True)
            continue
        t1 = time.perf_counter()
        rec = run_shape(shape, device=args.device, backends=backends, warmup=2, repeats=5,
                        seed=700 + shapes.index(shape))
        rec["provenance"] = run_provenance(kind="attention_baselines")
        records.append(rec)
        errs = {b: f"{r['metrics']['rel_l2']:.3e}" for b, r in rec["runs"].items() if "metrics" in r}
        print(f"{rec['spec']['name']}: {time.perf_counter() - t1:.1f} s  rel_l2 {errs}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "baselines_h200_fp64gpu.json"
    path.write_text(json.dumps(records, indent=1) + "\n")
    print(f"{len(records)} shapes in {time.perf_counter() - t0:.1f} s -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
