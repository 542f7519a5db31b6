"""Capture the real FA4 forward (flash-attn-4, SM90 path) on the H200 for a list of small cases.

Run on the device machine after ``. fa4num/gpu/fa4-env.sh``:
    python experiments/gpu/fa4_capture_sm90.py --out $OUT/fa4_sm90_capture.npz --rev <git rev>
Inputs are regenerated from each case spec by fa4num/attention/inputs.py (loaded by path, so that only
numpy and ml_dtypes are needed here); the file stores the spec, a SHA-256 of the input bytes, the output
bits and the LSE. tests/golden/attention/ holds what came back, checked by tests/attention/test_golden.py.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import importlib.metadata
import importlib.util
import json
import pathlib
import subprocess
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("fa4num_inputs", ROOT / "fa4num/attention/inputs.py")
inputs = importlib.util.module_from_spec(_spec)
sys.modules["fa4num_inputs"] = inputs
_spec.loader.exec_module(inputs)
CaseSpec = inputs.CaseSpec


def cases() -> list:
    """The captured problems: every SM90 tile config of head dims 64/96/128/192/256, causal and not,
    seqlens that are not multiples of the tile, sq > sk with causal (fully masked rows), GQA, MQA, fp16,
    a non-default softmax_scale and large logits (many rescales)."""
    out = []
    # exact QK^T, one-hot V, seqlen_k <= head_dim: out exposes bf16 P / row_sum without any GEMM model
    for d, sq, sk in ((64, 100, 64), (128, 77, 120), (256, 150, 250)):
        for causal in (False, True):
            out.append(CaseSpec(f"onehot_d{d}_{'c' if causal else 'nc'}", "exact_onehot", 1, sq, sk, 2, 2,
                                d, causal, seed=10 + d + causal))
    # exact QK^T (LSE independent of any GEMM model), random V, several KV blocks
    for d in (64, 128, 256):
        for causal in (False, True):
            out.append(CaseSpec(f"exact_d{d}_{'c' if causal else 'nc'}", "exact", 1, 200, 333, 2, 2, d,
                                causal, seed=20 + d + causal))
    # random normal
    for d in (64, 128, 256):
        out.append(CaseSpec(f"normal_d{d}_nc", "normal", 2, 257, 300, 2, 2, d, False, seed=30 + d))
        out.append(CaseSpec(f"normal_d{d}_c", "normal", 2, 300, 257, 2, 2, d, True, seed=31 + d))
    out += [
        CaseSpec("normal_d96_nc", "normal", 1, 200, 350, 2, 2, 96, False, seed=41),
        CaseSpec("normal_d192_c", "normal", 1, 230, 230, 2, 2, 192, True, seed=42),
        CaseSpec("gqa_d128_nc", "normal", 1, 130, 200, 6, 2, 128, False, seed=43),
        CaseSpec("mqa_d128_c", "normal", 1, 200, 200, 4, 1, 128, True, seed=44),
        CaseSpec("fp16_d128_nc", "normal", 1, 190, 260, 2, 2, 128, False, dtype="float16", seed=45),
        CaseSpec("scale_d64_nc", "normal", 1, 150, 400, 2, 2, 64, False, softmax_scale=0.5, q_mult=3.0,
                 seed=46),
        CaseSpec("big_d256_c", "normal", 1, 241, 241, 2, 2, 256, True, q_mult=4.0, seed=47),
    ]
    return out


def large_cases() -> list:
    """Longer sequences (many m-blocks and KV blocks) for a one-off check; too big to commit as golden data."""
    return [
        CaseSpec("large_d128_c", "normal", 1, 1500, 1500, 4, 2, 128, True, seed=51),
        CaseSpec("large_d64_nc", "normal", 2, 777, 2049, 2, 2, 64, False, seed=52),
        CaseSpec("large_d256_c", "normal", 1, 1000, 1300, 2, 1, 256, True, q_mult=2.0, seed=53),
        CaseSpec("large_d128_fp16_nc", "normal", 1, 640, 1800, 4, 4, 128, False, dtype="float16", seed=54),
    ]


def _torch_in(a, torch):
    if a.dtype == np.float16:
        return torch.from_numpy(a).cuda()
    return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).cuda()


def _provenance(torch, rev):
    def ver(p):
        try:
            return importlib.metadata.version(p)
        except importlib.metadata.PackageNotFoundError:
            return None
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True).stdout.strip()
    except OSError:
        driver = None
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "code_revision": rev, "gpu": torch.cuda.get_device_name(), "driver": driver,
            "packages": {p: ver(p) for p in ("torch", "flash-attn-4", "nvidia-cutlass-dsl", "numpy",
                                             "ml_dtypes", "quack-kernels")},
            "python": sys.version.split()[0]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--rev", default=None)
    ap.add_argument("--only", default=None, help="comma-separated case names")
    ap.add_argument("--set", default="golden", choices=("golden", "large"))
    args = ap.parse_args()
    import torch
    from flash_attn.cute import flash_attn_func

    prov = _provenance(torch, args.rev)
    arrays, meta = {}, []
    todo = cases() if args.set == "golden" else large_cases()
    if args.only:
        names = set(args.only.split(","))
        todo = [c for c in todo if c.name in names]
    for spec in todo:
        q, k, v = inputs.make_inputs(spec)
        digest = hashlib.sha256(b"".join(np.ascontiguousarray(a).tobytes() for a in (q, k, v))).hexdigest()
        t0 = time.time()
        try:
            o, lse = flash_attn_func(_torch_in(q, torch), _torch_in(k, torch), _torch_in(v, torch),
                                     softmax_scale=spec.softmax_scale, causal=spec.causal, return_lse=True)
            torch.cuda.synchronize()
        except Exception as e:  # record the failure and go on with the other cases
            meta.append({"spec": spec.as_dict(), "input_sha256": digest, "error": repr(e)[:500]})
            print(f"{spec.name}: ERROR {e!r}"[:300], flush=True)
            continue
        # a second run checks that the forward is deterministic
        o2, lse2 = flash_attn_func(_torch_in(q, torch), _torch_in(k, torch), _torch_in(v, torch),
                                   softmax_scale=spec.softmax_scale, causal=spec.causal, return_lse=True)
        det = bool(torch.equal(o.view(torch.int16), o2.view(torch.int16))
                   and torch.equal(lse.view(torch.int32), lse2.view(torch.int32)))
        arrays[f"{spec.name}.out_bits"] = o.view(torch.int16).cpu().numpy().view(np.uint16)
        arrays[f"{spec.name}.lse"] = lse.float().cpu().numpy()
        meta.append({"spec": spec.as_dict(), "input_sha256": digest, "deterministic": det,
                     "seconds": round(time.time() - t0, 2)})
        print(f"{spec.name}: {time.time() - t0:.1f}s det={det}", flush=True)
        np.savez_compressed(args.out, meta=json.dumps({"provenance": prov, "cases": meta}), **arrays)
    np.savez_compressed(args.out, meta=json.dumps({"provenance": prov, "cases": meta}), **arrays)
    print(f"captured {sum('error' not in m for m in meta)}/{len(meta)} cases -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
