"""FA4 b36's SM90 backward preprocess (``flash_bwd_preprocess.py``) run alone on the H200: D = rowsum(dO * O)
and lse_log2 = lse * log2(e), the fp32 row statistics the main backward kernel reads.

The backward's dq/dk/dv goldens do not pin down how D is summed (dS is rounded to 16 bits, which hides the
last bits of D), so this captures D itself, on inputs whose terms span 2^±8 so that the fold order and the
FMA contraction change the result on most rows.

GPU (device machine, after ``. fa4num/gpu/fa4-env.sh``):
    python experiments/gpu/fa4_bwd_preprocess.py --out $OUT          # ~20 s (kernel compiles dominate)
Writes $OUT/fa4_sm90_bwd_preprocess_h200.npz: ``meta`` (JSON: provenance, cases) and per case
``NAME.dpsum`` / ``NAME.lse_log2`` (float32, (batch, heads, seqlen_rounded), as the kernel stores them).
The inputs are a pure function of the case (:func:`make_inputs`, numpy only), so they are not stored.
Checked on the CPU by tests/test_backward_preprocess.py (fa4num.attention.backward.dpsum_sm90).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]

# name, head_dim, dtype; batch 1, 2 heads, 1000 rows (not a multiple of any tile_m: the padding rows are
# written too), seed
CASES = [
    dict(name=f"pre_d{d}_{dt}", head_dim=d, dtype=dt, batch=1, heads=2, seqlen=1000, seed=300 + i)
    for i, (d, dt) in enumerate([(64, "bfloat16"), (96, "bfloat16"), (128, "bfloat16"), (192, "bfloat16"),
                                 (256, "bfloat16"), (64, "float16"), (128, "float16"), (256, "float16"),
                                 (72, "bfloat16")])
]


def make_inputs(case: dict) -> dict:
    """out, dout (case dtype, (batch, seqlen, heads, head_dim)) and lse (float32, (batch, heads, seqlen)):
    N(0,1) times 2^k with k uniform in [-8, 8] per element; every 97th row of lse is -inf."""
    import ml_dtypes
    dt = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}[case["dtype"]]
    rng = np.random.default_rng(case["seed"])
    shape = (case["batch"], case["seqlen"], case["heads"], case["head_dim"])

    def draw():
        x = rng.standard_normal(shape, dtype=np.float32) * np.exp2(rng.integers(-8, 9, shape)).astype(np.float32)
        return x.astype(dt)
    out, dout = draw(), draw()
    lse = (rng.standard_normal((case["batch"], case["heads"], case["seqlen"]), dtype=np.float32)
           * np.float32(3))
    lse[:, :, ::97] = -np.inf
    return {"out": out, "dout": dout, "lse": lse}


def input_sha256(arrays: dict) -> str:
    return hashlib.sha256(b"".join(np.ascontiguousarray(arrays[n]).tobytes() for n in sorted(arrays))).hexdigest()


def _torch(a, torch):
    if a.dtype == np.float16 or a.dtype == np.float32:
        return torch.from_numpy(np.ascontiguousarray(a)).cuda()
    return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16).cuda()


def run(out_dir: pathlib.Path) -> int:
    import torch
    from flash_attn.cute import interface as fi
    sys.path.insert(0, str(ROOT))
    from fa4num.gpu import run_provenance
    arrays_out, meta = {}, []
    for case in CASES:
        t0 = time.time()
        a = make_inputs(case)
        d = case["head_dim"]
        cfg = fi._tile_size_bwd_sm90(d, d, False, False)
        hdim_multiple_of = 64 if cfg.dKV_swapAB else 32
        tile_m = cfg.m_block_size
        b, s, h = case["batch"], case["seqlen"], case["heads"]
        s_round = -(-s // tile_m) * tile_m
        d_round = -(-d // hdim_multiple_of) * hdim_multiple_of
        out, dout, lse = (_torch(a[n], torch) for n in ("out", "dout", "lse"))
        dpsum = torch.full((b, h, s_round), float("nan"), dtype=torch.float32, device="cuda")
        lse_log2 = torch.full((b, h, s_round), float("nan"), dtype=torch.float32, device="cuda")
        dq_accum = torch.empty(b, h, s_round * d_round, dtype=torch.float32, device="cuda")
        rec = {"case": case, "input_sha256": input_sha256(a), "tile_m": tile_m,
               "hdim_multiple_of": hdim_multiple_of}
        try:
            fi._bwd_preprocess(out, dout, dpsum, lse, lse_log2, dq_accum, None, None, None,
                               fi.torch2cute_dtype_map[out.dtype], d, d, tile_m,
                               hdim_multiple_of=hdim_multiple_of, fake_mode=False)
            torch.cuda.synchronize()
        except Exception as e:  # a refused configuration is data
            rec["error"] = f"{type(e).__name__}: {e}"[:800]
            meta.append(rec)
            print(case["name"], "ERROR", rec["error"][:200], flush=True)
            continue
        arrays_out[f"{case['name']}.dpsum"] = dpsum.cpu().numpy()
        arrays_out[f"{case['name']}.lse_log2"] = lse_log2.cpu().numpy()
        rec["zeroed_dq_accum"] = bool((dq_accum == 0).all().item())
        rec["seconds"] = round(time.time() - t0, 2)
        meta.append(rec)
        print(case["name"], rec["seconds"], "s", flush=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "fa4_sm90_bwd_preprocess_h200.npz"
    np.savez_compressed(path, meta=json.dumps({"provenance": run_provenance(), "cases": meta}), **arrays_out)
    print("->", path)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="directory for fa4_sm90_bwd_preprocess_h200.npz")
    args = ap.parse_args()
    return run(pathlib.Path(args.out))


if __name__ == "__main__":
    raise SystemExit(main())
