"""FA4 b36's SM90 backward preprocess (``flash_bwd_preprocess.py``) run alone on the H200: D = rowsum(dO * O)
and lse_log2 = lse * log2(e), the fp32 row statistics the main backward kernel reads; and the backward with a
learnable sink (dq, dk, dv and dsink, which the postprocess reduces from D and the LSE).

The backward's dq/dk/dv goldens do not pin down how D is summed (dS is rounded to 16 bits, which hides the
last bits of D), so this captures D itself, on inputs whose terms span 2^±8 so that the fold order and the
FMA contraction change the result on most rows.

GPU (device machine, after ``. fa4num/gpu/fa4-env.sh``):
    python experiments/gpu/fa4_bwd_preprocess.py --out $OUT          # ~60 s (kernel compiles dominate)
Writes $OUT/fa4_sm90_bwd_preprocess_h200.npz: ``meta`` (JSON: provenance, cases) and per case
``NAME.dpsum`` / ``NAME.lse_log2`` (float32, (batch, heads, seqlen_rounded), as the kernel stores them).
The inputs are a pure function of the case (:func:`make_inputs`, numpy only), so they are not stored.
Checked on the CPU by tests/attention/test_backward_preprocess.py (fa4num.attention.backward.dpsum_sm90).
And $OUT/fa4_sm90_bwd_sink_h200.npz: ``torch.autograd.grad`` through ``flash_attn_func(...,
learnable_sink=..., deterministic=True)`` on :data:`SINK_CASES` (inputs from :func:`case_arrays`; the last two
cases have head_dim_v != head_dim and no sink): per case ``NAME.lse``, ``NAME.dsink`` (float32, full) and for
out/dq/dk/dv a SHA-256 of the bits in ``meta`` plus ``NAME.ARR_sample_idx``/``ARR_sample_bits`` (256 random
elements). Checked by tests/attention/test_backward_sink.py.
And ``--part dlse``: $OUT/fa4_sm90_bwd_dlse_h200.npz, the same records for :data:`DLSE_CASES` with the LSE's
gradient too (``torch.autograd.grad((out, lse), ..., (dout, dlse))``, dlse from :func:`dlse_of`, its SHA-256 in
``meta``). Checked by tests/attention/test_backward_dlse.py.
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


# learnable-sink backward cases (feature-case dicts of fa4num.attention.inputs)
SINK_CASES = [
    dict(name="sinkbwd_d128_nc", kind="normal", batch=2, seqlen_q=200, seqlen_k=300, heads=4, heads_kv=4,
         head_dim=128, causal=False, dtype="bfloat16", softmax_scale=None, q_mult=1.0, seed=401, sink_mult=2.0,
         backward=True),
    dict(name="sinkbwd_gqa_d64_c", kind="normal", batch=1, seqlen_q=300, seqlen_k=200, heads=4, heads_kv=2,
         head_dim=64, causal=True, dtype="bfloat16", softmax_scale=None, q_mult=1.0, seed=402, sink_mult=3.0,
         backward=True),
    dict(name="sinkbwd_d96_big", kind="normal", batch=1, seqlen_q=150, seqlen_k=260, heads=2, heads_kv=2,
         head_dim=96, causal=False, dtype="bfloat16", softmax_scale=None, q_mult=1.0, seed=403, sink_mult=12.0,
         backward=True),
    dict(name="sinkbwd_fp16_varlen_d64", kind="normal", batch=1, seqlen_q=0, seqlen_k=0, heads=4, heads_kv=2,
         head_dim=64, causal=True, dtype="float16", softmax_scale=None, q_mult=1.0, seed=404, sink_mult=2.0,
         backward=True, varlen={"seqlens_q": [100, 37, 300], "seqlens_k": [120, 90, 280]}),
    # head_dim_v != head_dim (no sink): v and dout are the first head_dim_v columns of the feature inputs
    dict(name="hdv_d192_v128_nc", kind="normal", batch=1, seqlen_q=170, seqlen_k=230, heads=2, heads_kv=2,
         head_dim=192, head_dim_v=128, causal=False, dtype="bfloat16", softmax_scale=None, q_mult=1.0, seed=405,
         backward=True),
    dict(name="hdv_d128_v64_c_gqa", kind="normal", batch=1, seqlen_q=210, seqlen_k=190, heads=4, heads_kv=2,
         head_dim=128, head_dim_v=64, causal=True, dtype="bfloat16", softmax_scale=None, q_mult=1.0, seed=406,
         backward=True),
]
# the LSE's gradient reaches the kernel (flash_bwd_preprocess.py: D' = D - dLSE): with and without a sink, varlen
# (with a sequence that sees no key), GQA, fp16; never run by the earlier captures
DLSE_CASES = [
    dict(name="dlse_d128_nc", kind="normal", batch=2, seqlen_q=180, seqlen_k=260, heads=2, heads_kv=2,
         head_dim=128, causal=False, dtype="bfloat16", softmax_scale=None, q_mult=1.0, seed=501, backward=True),
    dict(name="dlse_sink_gqa_d64_c", kind="normal", batch=1, seqlen_q=300, seqlen_k=220, heads=4, heads_kv=2,
         head_dim=64, causal=True, dtype="bfloat16", softmax_scale=None, q_mult=1.0, seed=502, sink_mult=2.0,
         backward=True),
    dict(name="dlse_sink_fp16_varlen_d64", kind="normal", batch=1, seqlen_q=0, seqlen_k=0, heads=2, heads_kv=2,
         head_dim=64, causal=True, dtype="float16", softmax_scale=None, q_mult=1.0, seed=503, sink_mult=3.0,
         backward=True, varlen={"seqlens_q": [90, 40, 150], "seqlens_k": [110, 0, 130]}),
    dict(name="dlse_d96_big", kind="normal", batch=1, seqlen_q=140, seqlen_k=200, heads=2, heads_kv=2,
         head_dim=96, causal=False, dtype="bfloat16", softmax_scale=None, q_mult=4.0, seed=504, backward=True),
]
SAMPLE = 256


def dlse_of(case: dict, shape) -> np.ndarray:
    """The LSE's incoming gradient of a dlse case: float32 N(0, 1) of the LSE's shape, from the case's seed."""
    return np.random.default_rng([case["seed"], 7]).standard_normal(shape, dtype=np.float32)


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
    if a.dtype in (np.float16, np.float32, np.int32):
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


def _inputs_module():
    import importlib.util
    spec = importlib.util.spec_from_file_location("fa4num_inputs", ROOT / "fa4num/attention/inputs.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["fa4num_inputs"] = mod
    spec.loader.exec_module(mod)
    return mod


def case_arrays(case: dict, inputs) -> dict:
    """The arrays of a case: make_feature_inputs, with v and dout cut to ``head_dim_v`` columns."""
    a = inputs.make_feature_inputs(case)
    dv = case.get("head_dim_v")
    if dv is not None:
        a["v"] = np.ascontiguousarray(a["v"][..., :dv])
        a["dout"] = np.ascontiguousarray(a["dout"][..., :dv])
    return a


def _bits(t, torch):
    return t.detach().contiguous().view(torch.int16).cpu().numpy().view(np.uint16)


def run_sink(out_dir: pathlib.Path, *, cases=None, fname: str = "fa4_sm90_bwd_sink_h200.npz",
             with_dlse: bool = False) -> int:
    import torch
    from flash_attn.cute import flash_attn_func, flash_attn_varlen_func
    sys.path.insert(0, str(ROOT))
    from fa4num.gpu import run_provenance
    inputs = _inputs_module()
    arrays_out, meta = {}, []
    for case in SINK_CASES if cases is None else cases:
        t0 = time.time()
        a = case_arrays(case, inputs)
        rec = {"case": case, "input_sha256": input_sha256(a)}
        has_sink = "learnable_sink" in a

        def call():
            q, k, v = (_torch(a[n], torch).requires_grad_(True) for n in ("q", "k", "v"))
            kw = dict(softmax_scale=case["softmax_scale"], causal=case["causal"], return_lse=True,
                      deterministic=True)
            leaves = [q, k, v]
            if has_sink:
                kw["learnable_sink"] = _torch(a["learnable_sink"], torch).requires_grad_(True)
                leaves.append(kw["learnable_sink"])
            if "cu_seqlens_q" in a:
                vl = case["varlen"]
                o, lse = flash_attn_varlen_func(q, k, v, cu_seqlens_q=_torch(a["cu_seqlens_q"], torch),
                                                cu_seqlens_k=_torch(a["cu_seqlens_k"], torch),
                                                max_seqlen_q=max(vl["seqlens_q"]),
                                                max_seqlen_k=max(vl["seqlens_k"]), **kw)
            else:
                o, lse = flash_attn_func(q, k, v, **kw)
            if with_dlse:
                dl = dlse_of(case, tuple(lse.shape))
                rec["dlse_sha256"] = hashlib.sha256(dl.tobytes()).hexdigest()
                grads = torch.autograd.grad((o, lse), leaves, (_torch(a["dout"], torch), _torch(dl, torch)))
            else:
                grads = torch.autograd.grad(o, leaves, _torch(a["dout"], torch))
            torch.cuda.synchronize()
            return o, lse, grads
        try:
            o, lse, g = call()
            o2, lse2, g2 = call()
        except Exception as e:  # a refused feature is data
            rec["error"] = f"{type(e).__name__}: {e}"[:800]
            meta.append(rec)
            print(case["name"], "ERROR", rec["error"][:200], flush=True)
            continue
        name = case["name"]
        arrays_out[f"{name}.lse"] = lse.detach().float().cpu().numpy()
        same = True
        if has_sink:
            arrays_out[f"{name}.dsink"] = g[3].detach().float().cpu().numpy()
            same = torch.equal(g[3], g2[3])
        rec["digests"], rec["shapes"] = {}, {}
        rng = np.random.default_rng([len(name), sum(map(ord, name))])
        for arr, t, t2 in (("out", o, o2), ("dq", g[0], g2[0]), ("dk", g[1], g2[1]), ("dv", g[2], g2[2])):
            bits = _bits(t, torch)
            same = same and bool(np.array_equal(bits, _bits(t2, torch)))
            rec["digests"][arr] = hashlib.sha256(np.ascontiguousarray(bits).tobytes()).hexdigest()
            rec["shapes"][arr] = list(bits.shape)
            idx = np.sort(rng.choice(bits.size, size=min(SAMPLE, bits.size), replace=False)).astype(np.int32)
            arrays_out[f"{name}.{arr}_sample_idx"] = idx
            arrays_out[f"{name}.{arr}_sample_bits"] = bits.reshape(-1)[idx]
        rec["deterministic"] = bool(same)
        rec["seconds"] = round(time.time() - t0, 2)
        meta.append(rec)
        print(name, rec["seconds"], "s det", same, flush=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / fname
    np.savez_compressed(path, meta=json.dumps({"provenance": run_provenance(), "cases": meta}), **arrays_out)
    print("->", path)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="directory for the .npz files")
    ap.add_argument("--part", choices=("all", "preprocess", "sink", "dlse"), default="all")
    args = ap.parse_args()
    rc = 0
    if args.part in ("all", "preprocess"):
        rc |= run(pathlib.Path(args.out))
    if args.part in ("all", "sink"):
        rc |= run_sink(pathlib.Path(args.out))
    if args.part in ("all", "dlse"):
        rc |= run_sink(pathlib.Path(args.out), cases=DLSE_CASES, fname="fa4_sm90_bwd_dlse_h200.npz", with_dlse=True)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
