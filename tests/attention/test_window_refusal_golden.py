"""A window side wider than the sequence is refused by fa4num (FA4 accepts it; it masks nothing), and the
refusal tells the user to pass None for that side. These tests hold that advice to the real kernel: FA4 b36 was
run on an H200 with the wide windows (tests/golden/attention/fa4_sm90_{,bwd_}wide_window_h200.npz, made by
experiments/gpu/fa4_capture_features.py --parts wide + compact_golden.py), and fa4num's bit-exact forward and
backward called with the narrowed window (:func:`fa4num.attention.masking.without_wide_sides`) must give those
bits: out, LSE, dq, dk, dv. On the GPU itself the wide and the None calls were bit-equal too
(experiments/results/h200_20261201/wide_window_vs_none_h200.json)."""
from __future__ import annotations

import hashlib
import json
import pathlib

import numpy as np
import pytest

from fa4num.attention import backward, forward, golden
from fa4num.attention.inputs import make_feature_inputs
from fa4num.attention.masking import without_wide_sides

ROOT = pathlib.Path(__file__).resolve().parents[2]
FWD = ROOT / "tests/golden/attention/fa4_sm90_wide_window_h200.npz"
BWD = ROOT / "tests/golden/attention/fa4_sm90_bwd_wide_window_h200.npz"
ON_GPU = ROOT / "experiments/results/h200_20261201/wide_window_vs_none_h200.json"


def _records(path):
    return json.loads(str(np.load(path)["meta"]))["cases"]


def _longest(case):
    vl = case.get("varlen")
    if vl:
        return max(vl["seqlens_q"]), max(vl["seqlens_k"])
    return case["seqlen_q"], case["seqlen_k"]


def _narrowed(case):
    sq, sk = _longest(case)
    return {**case, "window_size": list(without_wide_sides(tuple(case["window_size"]), seqlen_q=sq,
                                                           seqlen_k=sk))}


def _sha(a):
    return hashlib.sha256(np.ascontiguousarray(a).view(np.uint16).tobytes()).hexdigest()


def test_gpu_compared_the_same_narrowing():
    """The GPU run compared each wide window with the narrowing this module applies, and found every bit equal."""
    rows = {r["name"]: r for r in json.loads(ON_GPU.read_text())["cases"]}
    recs = _records(FWD) + _records(BWD)
    assert sorted(rows) == sorted(r["case"]["name"] for r in recs)
    for rec in recs:
        row = rows[rec["case"]["name"]]
        assert row["narrowed"] == _narrowed(rec["case"])["window_size"] != rec["case"]["window_size"]
        assert row["bit_equal"], row


@pytest.mark.parametrize("rec", _records(FWD), ids=lambda r: r["case"]["name"])
def test_forward_refuses_the_wide_window_and_none_gives_the_kernels_bits(rec):
    case = rec["case"]
    arrays = make_feature_inputs(case)
    with pytest.raises(ValueError, match="window_size (left|right) must be in"):
        forward(arrays["q"], arrays["k"], arrays["v"], **golden.feature_call(case, arrays))
    check = golden.check_feature_case({**rec, "case": _narrowed(case)}, np.load(FWD))
    assert check.inputs_match and check.bit_exact, check


@pytest.mark.parametrize("rec", _records(BWD), ids=lambda r: r["case"]["name"])
def test_backward_with_none_gives_the_kernels_bits(rec):
    case = _narrowed(rec["case"])
    z = np.load(BWD)
    arrays = make_feature_inputs(case)
    kw = dict(softmax_scale=case["softmax_scale"], causal=case["causal"], window_size=tuple(case["window_size"]))
    fw = forward(arrays["q"], arrays["k"], arrays["v"], **kw)
    assert _sha(fw.out) == rec["digests"]["out"]
    lse = z[f"{case['name']}.lse"]
    assert np.array_equal(np.asarray(fw.lse, np.float32).view(np.uint32), lse.view(np.uint32))
    with pytest.raises(ValueError, match="window_size (left|right) must be in"):
        backward(arrays["q"], arrays["k"], arrays["v"], fw.out, arrays["dout"], lse,
                 **{**kw, "window_size": tuple(rec["case"]["window_size"])})
    res = backward(arrays["q"], arrays["k"], arrays["v"], fw.out, arrays["dout"], lse, deterministic=True, **kw)
    for name in ("dq", "dk", "dv"):
        assert _sha(getattr(res, name)) == rec["digests"][name], name
