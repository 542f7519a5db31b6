"""Capture the real FA4 kernel (flash-attn-4 4.0.0b36, SM90 path) on the H200 for the feature cases:
softcap, sliding windows (causal, symmetric, one-sided, seqlen_q != seqlen_k), learnable sinks, varlen, pack-GQA
on/off, fp16 with softcap + window, head dim 256 with every GQA ratio, non-finite inputs, odd softmax scales, and
the backward pass (``torch.autograd.grad`` through ``flash_attn_func(..., deterministic=True)``, twice for
determinism, and ``deterministic=False`` several times for the run-to-run spread of dQ).

Run on the device machine after ``. fa4num/gpu/fa4-env.sh``:
    python experiments/gpu/fa4_capture_features.py --out $OUT --rev <git rev>
Each case is a dict understood by ``fa4num.attention.inputs.make_feature_inputs`` (loaded by path: only numpy
and ml_dtypes are needed there). Two sets: ``dev`` (to develop the emulator against) and ``holdout`` (other seeds
and shapes, kept aside to check the finished emulator on cases it was never tuned on). Files written:
fa4_sm90_features_{dev,holdout}_h200.npz (forward; committed as package data, fa4num/data/golden/) and
fa4_sm90_bwd_{dev,holdout}_h200.npz (backward; tests/golden/attention/), each with
a ``meta`` JSON (provenance, cases, input SHA-256, determinism) and per case ``NAME.out_bits`` (uint16),
``NAME.lse`` (float32) and, for backward cases, ``NAME.dq_bits``/``dk_bits``/``dv_bits`` (uint16) and the
non-deterministic spread ``NAME.dq_nd_min_bits``/``dq_nd_max_bits`` (elementwise min/max, q's dtype) over the repeated runs.
Also ``baselines_h200.json``: FA4 and torch SDPA back ends vs fp64 on several shapes (fa4num.gpu.attention).
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
import traceback

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("fa4num_inputs", ROOT / "fa4num/attention/inputs.py")
inputs = importlib.util.module_from_spec(_spec)
sys.modules["fa4num_inputs"] = inputs
_spec.loader.exec_module(inputs)


def _c(name, *, b=1, sq=200, sk=300, h=2, hk=2, d=128, causal=False, dtype="bfloat16", seed=0, **kw):
    base = dict(name=name, kind=kw.pop("kind", "normal"), batch=b, seqlen_q=sq, seqlen_k=sk, heads=h,
                heads_kv=hk, head_dim=d, causal=causal, dtype=dtype, softmax_scale=kw.pop("softmax_scale", None),
                q_mult=kw.pop("q_mult", 1.0), seed=seed)
    base.update(kw)
    return base


def forward_cases(holdout: bool) -> list[dict]:
    s = 1000 if holdout else 0          # other seeds
    j = 17 if holdout else 0            # other lengths
    c = [
        _c("softcap5_d128_nc", sq=200 + j, sk=300 + j, softcap=5.0, q_mult=3.0, seed=s + 1),
        _c("softcap30_d64_c", sq=257 + j, sk=257 + j, d=64, causal=True, softcap=30.0, q_mult=4.0, seed=s + 2),
        _c("window_causal_d128", sq=300 + j, sk=300 + j, causal=True, window_size=[64, 0], seed=s + 3),
        _c("window_sym_d128", sq=257 + j, sk=400 + j, window_size=[50, 50], seed=s + 4),
        _c("window_left_d64", sq=230 + j, sk=333 + j, d=64, window_size=[100, None], seed=s + 5),
        _c("window_right_d128", sq=190 + j, sk=260 + j, window_size=[None, 30], seed=s + 6),
        _c("window_skew_d128", sq=150 + j, sk=420 + j, window_size=[40, 20], seed=s + 7),
        _c("window_causal_sqgt_d64", sq=400 + j, sk=250 + j, d=64, causal=True, window_size=[80, 0], seed=s + 8),
        _c("sink_d128_nc", sq=200 + j, sk=300 + j, h=4, hk=4, sink_mult=2.0, seed=s + 9),
        _c("sink_d64_c_sqgt", sq=300 + j, sk=200 + j, d=64, h=4, hk=2, causal=True, sink_mult=3.0, seed=s + 10),
        _c("sink_big_d128", sq=150 + j, sk=260 + j, h=2, hk=2, sink_mult=12.0, seed=s + 11),
        _c("varlen_nc_d128", h=4, hk=2, varlen={"seqlens_q": [77, 130 + j, 1, 200], "seqlens_k": [100, 130, 50 + j, 333]},
           sq=0, sk=0, seed=s + 12),
        _c("varlen_c_d64", d=64, h=4, hk=4, causal=True,
           varlen={"seqlens_q": [64, 129 + j, 300], "seqlens_k": [64, 200, 290 + j]}, sq=0, sk=0, seed=s + 13),
        _c("varlen_window_sink_d128", h=4, hk=2, window_size=[32, 16], sink_mult=2.0,
           varlen={"seqlens_q": [90 + j, 150], "seqlens_k": [120, 150 + j]}, sq=0, sk=0, seed=s + 14),
        _c("packgqa_on_d128", sq=130 + j, sk=200, h=8, hk=2, pack_gqa=True, seed=s + 15),
        _c("packgqa_off_d128", sq=130 + j, sk=200, h=8, hk=2, pack_gqa=False, seed=s + 15),
        _c("packgqa_off_c_d64", sq=200, sk=200 + j, d=64, h=6, hk=2, causal=True, pack_gqa=False, seed=s + 16),
        _c("fp16_softcap_window_d128", dtype="float16", sq=220 + j, sk=310, softcap=20.0, window_size=[64, 64],
           q_mult=2.0, seed=s + 17),
        _c("softcap_window_sink_c_d128", sq=260, sk=260 + j, causal=True, softcap=15.0, window_size=[100, 0],
           sink_mult=2.0, h=4, hk=2, seed=s + 18),
        _c("nonfinite_q_nan", sq=150 + j, sk=200, nonfinite=[["q", 1000, "nan"]], seed=s + 19),
        _c("nonfinite_k_inf", sq=150, sk=200 + j, nonfinite=[["k", 5000, "inf"], ["k", 9000, "-inf"]],
           seed=s + 20),
        _c("nonfinite_v_nan_inf", sq=150, sk=200, nonfinite=[["v", 777, "nan"], ["v", 12345, "inf"]],
           seed=s + 21),
        _c("scale_negative_d128", sq=150, sk=300 + j, softmax_scale=-0.1, seed=s + 22),
        _c("scale_huge_d64", d=64, sq=100, sk=256, softmax_scale=1e30, seed=s + 23),
        _c("scale_tiny_d128", sq=100, sk=200 + j, softmax_scale=1e-30, seed=s + 24),
    ]
    # head dim 256 with every GQA ratio (b36's pack-GQA / tile rules depend on qhead_per_kvhead)
    for ratio in (1, 2, 3, 4, 5, 6, 7, 8):
        hk = 2 if ratio <= 4 else 1
        c.append(_c(f"hd256_gqa{ratio}", sq=128 + j, sk=160, d=256, h=ratio * hk, hk=hk, seed=s + 30 + ratio))
    return c


def backward_cases(holdout: bool) -> list[dict]:
    s = 2000 if holdout else 100
    j = 11 if holdout else 0
    return [
        _c("bwd_d128_nc", sq=200 + j, sk=300, backward=True, seed=s + 1),
        _c("bwd_d64_c", sq=256, sk=256 + j, d=64, causal=True, backward=True, seed=s + 2),
        _c("bwd_gqa_d128_nc", sq=190, sk=260 + j, h=6, hk=2, backward=True, seed=s + 3),
        _c("bwd_mqa_d64_c", sq=200 + j, sk=200 + j, d=64, h=4, hk=1, causal=True, backward=True, seed=s + 4),
        _c("bwd_fp16_d128_nc", dtype="float16", sq=150, sk=333 + j, backward=True, seed=s + 5),
        _c("bwd_d128_c_sqgt", sq=300 + j, sk=200, causal=True, backward=True, seed=s + 6),
        _c("bwd_d96_nc", d=96, sq=130, sk=250 + j, backward=True, seed=s + 7),
        _c("bwd_d256_c", d=256, sq=160 + j, sk=200, causal=True, backward=True, seed=s + 8),
        _c("bwd_d128_long", sq=400 + j, sk=500, backward=True, seed=s + 9),
        _c("bwd_softcap_d128", sq=200, sk=260 + j, softcap=10.0, q_mult=2.0, backward=True, seed=s + 10),
        _c("bwd_window_d128", sq=240 + j, sk=300, window_size=[64, 32], backward=True, seed=s + 11),
        _c("bwd_varlen_d64", d=64, h=4, hk=2, causal=True, backward=True,
           varlen={"seqlens_q": [100, 37 + j, 200], "seqlens_k": [120, 90, 200 + j]}, sq=0, sk=0, seed=s + 12),
    ]


def wide_window_cases(backward: bool) -> list[dict]:
    """Windows with a side wider than the sequence (left > seqlen_k or right > seqlen_q): FA4 accepts them,
    fa4num refuses them and tells the user to pass None for that side. These cases record what FA4 computes,
    so that a test can show the None call gives the same bits (tests/attention/test_window_refusal_golden.py)."""
    if backward:
        return [
            _c("bwd_wide_causal_d128", sq=240, sk=300, causal=True, window_size=[4096, 0], backward=True,
               seed=3001),
            _c("bwd_wide_sym_d64", d=64, sq=200, sk=260, window_size=[261, 201], backward=True, seed=3002),
        ]
    return [
        _c("wide_causal_d128", sq=300, sk=300, causal=True, window_size=[5000, 0], seed=3011),
        _c("wide_both_nc_d128", sq=200, sk=333, window_size=[4096, 4096], seed=3012),
        _c("wide_left_d64", d=64, sq=230, sk=333, window_size=[334, 30], seed=3013),
        _c("wide_right_d128", sq=190, sk=260, window_size=[40, 191], seed=3014),
        _c("wide_varlen_gqa_d128", h=4, hk=2, window_size=[151, 16], sink_mult=2.0,
           varlen={"seqlens_q": [90, 150], "seqlens_k": [120, 150]}, sq=0, sk=0, seed=3015),
    ]


def narrowed(case: dict) -> dict:
    """The case with each window side wider than the (longest) sequence replaced by None, the call fa4num's
    refusal asks for instead."""
    vl = case.get("varlen")
    sq = max(vl["seqlens_q"]) if vl else case["seqlen_q"]
    sk = max(vl["seqlens_k"]) if vl else case["seqlen_k"]
    left, right = case["window_size"]
    return {**case, "window_size": [None if left is not None and left > sk else left,
                                    None if right is not None and right > sq else right]}


def compare_wide_with_none(path, prov, torch):
    """On the GPU itself: FA4 with the wide window against FA4 with the narrowed (None) window, every bit of
    out, LSE and (backward cases) dq/dk/dv."""
    rows = []
    for case in wide_window_cases(False) + wide_window_cases(True):
        arrays = inputs.make_feature_inputs(case)
        grad = bool(case.get("backward"))
        a = _call(case, arrays, torch, grad=grad)
        b = _call(narrowed(case), arrays, torch, grad=grad)
        ta = [a[0], a[1].float()] + (list(a[2]) if grad else [])
        tb = [b[0], b[1].float()] + (list(b[2]) if grad else [])
        equal = all(torch.equal(x.view(torch.int16) if x.element_size() == 2 else x.view(torch.int32),
                                y.view(torch.int16) if y.element_size() == 2 else y.view(torch.int32))
                    for x, y in zip(ta, tb))
        rows.append({"name": case["name"], "window_size": case["window_size"],
                     "narrowed": narrowed(case)["window_size"], "arrays": ["out", "lse"] + (["dq", "dk", "dv"]
                                                                                            if grad else []),
                     "bit_equal": bool(equal)})
        print(f"{case['name']}: wide vs None bit-equal={equal}", flush=True)
    path.write_text(json.dumps({"provenance": prov, "cases": rows}, indent=1))


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


def _t(a, torch):
    if a.dtype == np.float16:
        return torch.from_numpy(a).cuda()
    if a.dtype == np.float32 or a.dtype == np.int32:
        return torch.from_numpy(a).cuda()
    return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).cuda()


def _bits(t, torch):
    return t.detach().contiguous().view(torch.int16).cpu().numpy().view(np.uint16)


def _call(case, arrays, torch, *, grad=False, deterministic=True):
    from flash_attn.cute import flash_attn_func, flash_attn_varlen_func
    q, k, v = (_t(arrays[n], torch) for n in ("q", "k", "v"))
    if grad:
        for t in (q, k, v):
            t.requires_grad_(True)
    kw = dict(softmax_scale=case.get("softmax_scale"), causal=case["causal"], return_lse=True,
              softcap=case.get("softcap") or 0.0, deterministic=deterministic)
    ws = case.get("window_size")
    if ws is not None:
        kw["window_size"] = tuple(ws)
    if "learnable_sink" in arrays:
        kw["learnable_sink"] = _t(arrays["learnable_sink"], torch)
    if case.get("pack_gqa") is not None:
        kw["pack_gqa"] = case["pack_gqa"]
    if "cu_seqlens_q" in arrays:
        vl = case["varlen"]
        o, lse = flash_attn_varlen_func(q, k, v, cu_seqlens_q=_t(arrays["cu_seqlens_q"], torch),
                                        cu_seqlens_k=_t(arrays["cu_seqlens_k"], torch),
                                        max_seqlen_q=max(vl["seqlens_q"]), max_seqlen_k=max(vl["seqlens_k"]), **kw)
    else:
        o, lse = flash_attn_func(q, k, v, **kw)
    if not grad:
        torch.cuda.synchronize()
        return o, lse, None
    dout = _t(arrays["dout"], torch)
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), dout)
    torch.cuda.synchronize()
    return o, lse, (dq, dk, dv)


def capture(cases, path, prov, torch, *, backward: bool, nd_reps: int):
    arrays_out, meta = {}, []
    for case in cases:
        t0 = time.time()
        arrays = inputs.make_feature_inputs(case)
        digest = hashlib.sha256(b"".join(np.ascontiguousarray(arrays[n]).tobytes()
                                         for n in sorted(arrays))).hexdigest()
        rec = {"case": case, "input_sha256": digest}
        try:
            o, lse, g = _call(case, arrays, torch, grad=backward)
            o2, lse2, g2 = _call(case, arrays, torch, grad=backward)
        except Exception as e:  # a refused feature is data: record FA4's message
            rec["error"] = f"{type(e).__name__}: {e}"[:800]
            meta.append(rec)
            print(f"{case['name']}: ERROR {rec['error'][:200]}", flush=True)
            continue
        name = case["name"]
        arrays_out[f"{name}.out_bits"] = _bits(o, torch)
        arrays_out[f"{name}.lse"] = lse.detach().float().cpu().numpy()
        same = torch.equal(o.view(torch.int16), o2.view(torch.int16)) and torch.equal(
            lse.float().view(torch.int32), lse2.float().view(torch.int32))
        if backward:
            for n, t, t2 in zip(("dq", "dk", "dv"), g, g2):
                arrays_out[f"{name}.{n}_bits"] = _bits(t, torch)
                same = same and torch.equal(t.view(torch.int16), t2.view(torch.int16))
            if nd_reps:
                runs = []
                for _ in range(nd_reps):
                    _, _, gn = _call(case, arrays, torch, grad=True, deterministic=False)
                    runs.append(gn[0].float())
                st = torch.stack(runs)
                # dQ is bf16/fp16, so its elementwise min and max over the runs are values of that dtype
                arrays_out[f"{name}.dq_nd_min_bits"] = _bits(st.min(0).values.to(g[0].dtype), torch)
                arrays_out[f"{name}.dq_nd_max_bits"] = _bits(st.max(0).values.to(g[0].dtype), torch)
                det = g[0].float()
                rec["nd_runs"] = nd_reps
                rec["nd_dq_elements_varying"] = int((st.max(0).values != st.min(0).values).sum())
                rec["nd_dq_max_abs_spread"] = float((st.max(0).values - st.min(0).values).abs().max())
                rec["nd_dq_max_abs_vs_det"] = float((st - det).abs().max())
                rec["nd_runs_equal_det"] = int(sum(bool(torch.equal(r, det)) for r in runs))
        rec["deterministic"] = bool(same)
        rec["seconds"] = round(time.time() - t0, 2)
        meta.append(rec)
        print(f"{name}: {rec['seconds']}s det={same}", flush=True)
    np.savez_compressed(path, meta=json.dumps({"provenance": prov, "cases": meta}), **arrays_out)
    print(f"-> {path}: {sum('error' not in m for m in meta)}/{len(meta)} cases", flush=True)


BASELINE_SHAPES = [  # (batch, seqlen_q, heads, heads_kv, head_dim, causal, dtype, q_mult)
    (1, 1024, 8, 8, 64, False, "bfloat16", 1.0),
    (1, 2048, 16, 16, 128, False, "bfloat16", 1.0),
    (1, 2048, 16, 16, 128, True, "bfloat16", 1.0),
    (2, 4096, 16, 16, 128, True, "bfloat16", 1.0),
    (1, 4096, 32, 8, 128, True, "bfloat16", 1.0),
    (1, 8192, 8, 8, 128, True, "bfloat16", 1.0),
    (1, 4096, 16, 16, 256, False, "bfloat16", 1.0),
    (1, 4096, 16, 16, 128, False, "float16", 1.0),
    (1, 4096, 16, 16, 128, True, "bfloat16", 4.0),
]


def baselines(path, torch):
    sys.path.insert(0, str(ROOT))
    from fa4num.attention.inputs import CaseSpec
    from fa4num.gpu.attention import capture as cap
    recs = []
    for i, (b, s, h, hk, d, causal, dt, qm) in enumerate(BASELINE_SHAPES):
        spec = CaseSpec(f"baseline{i}", "normal", b, s, s, h, hk, d, causal, dtype=dt, q_mult=qm, seed=500 + i)
        t0 = time.time()
        try:
            r = cap(spec, device="cuda", warmup=3, repeats=20)
            r.pop("arrays", None)
        except Exception:  # noqa: BLE001
            r = {"spec": spec.as_dict(), "error": traceback.format_exc()[-800:]}
        recs.append(r)
        print(f"baseline {spec.as_dict()} {time.time() - t0:.1f}s "
              + " ".join(f"{k}={v.get('median_ms', 'ERR')}" for k, v in r.get("runs", {}).items()), flush=True)
        pathlib.Path(path).write_text(json.dumps(recs, indent=1) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--rev", default=None)
    ap.add_argument("--parts", default="fwd,bwd,baselines", help="any of fwd,bwd,baselines,wide")
    ap.add_argument("--nd-reps", type=int, default=5)
    ap.add_argument("--skip", default="", help="comma-separated file tags to skip, e.g. features_dev")
    args = ap.parse_args()
    import torch
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    prov = _provenance(torch, args.rev)
    parts = args.parts.split(",")
    for hold in (False, True):
        tag = "holdout" if hold else "dev"
        if "fwd" in parts and f"features_{tag}" not in args.skip:
            capture(forward_cases(hold), out / f"fa4_sm90_features_{tag}_h200.npz", prov, torch, backward=False,
                    nd_reps=0)
        if "bwd" in parts:
            capture(backward_cases(hold), out / f"fa4_sm90_bwd_{tag}_h200.npz", prov, torch, backward=True,
                    nd_reps=0 if hold else args.nd_reps)
    if "wide" in parts:
        capture(wide_window_cases(False), out / "fa4_sm90_wide_window_h200.npz", prov, torch, backward=False,
                nd_reps=0)
        capture(wide_window_cases(True), out / "fa4_sm90_bwd_wide_window_h200.npz", prov, torch, backward=True,
                nd_reps=0)
        compare_wide_with_none(out / "wide_window_vs_none_h200.json", prov, torch)
    if "baselines" in parts:
        baselines(out / "baselines_h200.json", torch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
