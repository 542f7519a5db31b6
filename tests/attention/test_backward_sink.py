"""Backward with a learnable sink: dsink as FA4's postprocess reduces it (fa4num.attention.backward.dsink_sm90),
and dq/dk/dv unchanged by the sink given the forward's LSE; and head_dim_v != head_dim. Against the H200 when the capture of
experiments/gpu/fa4_bwd_preprocess.py (fa4_sm90_bwd_sink_h200.npz, under tests/golden/attention/ or
experiments/results/) is present; the analytic checks run always."""
from __future__ import annotations

import hashlib
import json
import pathlib

import ml_dtypes
import numpy as np
import pytest

from fa4num.attention import backward, forward
from fa4num.attention.backward import dsink_sm90
from fa4num.attention import inputs as _inputs
from _bwd_capture import assert_grads_match, capture_script

ROOT = pathlib.Path(__file__).resolve().parents[2]
NAME = "fa4_sm90_bwd_sink_h200.npz"




def _capture():
    found = sorted((ROOT / "tests/golden/attention").glob(NAME)) + sorted((ROOT / "experiments/results").rglob(NAME))
    return found[0] if found else None


def test_dsink_against_exact_sum():
    """dsink = -sum over rows of exp(sink - lse) * D; the emulated reduction is within fp32 rounding of it."""
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 70, 4, 64)).astype(ml_dtypes.bfloat16)
    k = rng.standard_normal((2, 90, 2, 64)).astype(ml_dtypes.bfloat16)
    v = rng.standard_normal((2, 90, 2, 64)).astype(ml_dtypes.bfloat16)
    do = rng.standard_normal((2, 70, 4, 64)).astype(ml_dtypes.bfloat16)
    sink = rng.standard_normal(4).astype(np.float32) * 2
    fw = forward(q, k, v, learnable_sink=sink)
    g = backward(q, k, v, fw.out, do, fw.lse, learnable_sink=sink)
    d = (fw.out.astype(np.float64) * do.astype(np.float64)).sum(-1).transpose(0, 2, 1)
    exact = -(np.exp(sink[None, :, None] - fw.lse.astype(np.float64)) * d).sum(axis=(0, 2))
    np.testing.assert_allclose(g.dsink, exact, rtol=1e-5)
    assert g.dsink.dtype == np.float32
    plain = backward(q, k, v, fw.out, do, fw.lse)
    assert plain.dsink is None
    assert np.array_equal(np.asarray(plain.dq).view(np.uint16), np.asarray(g.dq).view(np.uint16))


def test_dsink_rows_without_keys_count_fully():
    # lse = -inf: the sink held all the row's mass (p = 1)
    assert float(dsink_sm90(5.0, [np.float32([-np.inf, 0.0])], [np.float32([2.0, 0.0])], num_threads=32)) == -2.0
    with pytest.raises(ValueError, match="num_threads"):
        dsink_sm90(0.0, [], [], num_threads=48)


# Every case is bit-exact, d96 included (its dq depends on D's last bits, which the preprocess's element-outer fold
# order settles). hdv_d128_v64_c_gqa is in the capture as the error FA4 b36 raised ("GQA backward requires
# head_dim == head_dim_v"); test_gqa_hdv_refused_like_fa4 checks that.
_SINK_CASES = ["sinkbwd_d128_nc", "sinkbwd_gqa_d64_c", "sinkbwd_fp16_varlen_d64", "hdv_d192_v128_nc",
               "sinkbwd_d96_big"]


def _sink_record(name):
    path = _capture()
    if path is None:
        pytest.skip(f"no H200 capture {NAME} (run experiments/gpu/fa4_bwd_preprocess.py)")
    z = np.load(path)
    recs = [r for r in json.loads(str(z["meta"]))["cases"] if r["case"]["name"] == name]
    assert len(recs) == 1, f"{name} is not in {NAME}"
    return z, recs[0]


@pytest.mark.parametrize("name", _SINK_CASES)
def test_sink_backward_matches_h200(name):
    z, rec = _sink_record(name)
    assert "error" not in rec, rec["error"]
    case = rec["case"]
    script = capture_script()
    a = script.case_arrays(case, _inputs)
    assert script.input_sha256(a) == rec["input_sha256"], f"{name}: regenerated inputs differ"
    kw = {"learnable_sink": a["learnable_sink"]} if "learnable_sink" in a else {}
    if "cu_seqlens_q" in a:
        kw.update(cu_seqlens_q=a["cu_seqlens_q"], cu_seqlens_k=a["cu_seqlens_k"])
    fw = forward(a["q"], a["k"], a["v"], softmax_scale=case["softmax_scale"], causal=case["causal"], **kw)
    out_bits = np.ascontiguousarray(fw.out).view(np.uint16)
    assert hashlib.sha256(out_bits.tobytes()).hexdigest() == rec["digests"]["out"], f"{name}: forward out"
    lse = z[f"{name}.lse"]
    g = backward(a["q"], a["k"], a["v"], fw.out, a["dout"], lse, softmax_scale=case["softmax_scale"],
                 causal=case["causal"], **kw)
    assert_grads_match(z, name, rec, g, has_sink="learnable_sink" in a)


def test_gqa_hdv_refused_like_fa4():
    """FA4 b36's SM90 backward refuses GQA with head_dim != head_dim_v (the capture holds its error); so does backward."""
    _, rec = _sink_record("hdv_d128_v64_c_gqa")
    assert "head_dim == head_dim_v" in rec["error"]
    a = capture_script().case_arrays(rec["case"], _inputs)
    fw = forward(a["q"], a["k"], a["v"], causal=rec["case"]["causal"])
    with pytest.raises(ValueError, match="head_dim"):
        backward(a["q"], a["k"], a["v"], fw.out, a["dout"], fw.lse, causal=rec["case"]["causal"])


def test_head_dim_v_differs():
    """head_dim_v != head_dim (FA4 SM90 takes any pair in [8, 256]; SM100 both <= 128 or (192, 128))."""
    from fa4num.attention.reference import backward_fp64, backward_metrics
    rng = np.random.default_rng(4)
    q = rng.standard_normal((1, 90, 2, 128)).astype(ml_dtypes.bfloat16)
    k = rng.standard_normal((1, 110, 2, 128)).astype(ml_dtypes.bfloat16)   # no GQA: FA4's SM90 refuses it here
    v = rng.standard_normal((1, 110, 2, 64)).astype(ml_dtypes.bfloat16)
    do = rng.standard_normal((1, 90, 2, 64)).astype(ml_dtypes.bfloat16)
    fw = forward(q, k, v, causal=True)
    for kernel in ("fa4-sm90", "fa4-sm100"):
        g = backward(q, k, v, fw.out, do, fw.lse, causal=True, kernel=kernel)
        assert g.dv.shape == v.shape and g.dk.shape == k.shape
        m = backward_metrics(g, backward_fp64(q, k, v, do, causal=True))
        assert max(x.rel_l2 for x in m.values()) < 2e-2, m
    with pytest.raises(ValueError, match="dout"):
        backward(q, k, v, fw.out, q, fw.lse)
