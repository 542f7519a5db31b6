"""fa4num.attention.forward(kernel="fa4-sm90") against the real FA4 kernel (4.0.0b36) on an H200, bit for bit,
for every SM90 feature: softcap, sliding windows, learnable sinks, varlen, pack-GQA on/off, fp16 with softcap +
window, non-finite inputs, odd softmax scales, head dim 256 x every GQA ratio (tests/golden/attention/
fa4_sm90_features_{dev,holdout}_h200.npz: per case a SHA-256 of every output bit, 256+ sampled elements and the
whole LSE). The emulator was developed against the dev cases only; the holdout cases (other seeds and lengths)
check it on inputs it was never tuned on. Softcap cases use fa4num.hw's measured tanh.approx.f32 table for sm90,
which ships with the package: no case is skipped, and a missing table fails the softcap cases."""
import json

import numpy as np
import pytest

from fa4num.attention import golden

FAST = ("window_sym_d128", "window_causal_sqgt_d64", "sink_d64_c_sqgt", "varlen_window_sink_d128",
        "packgqa_off_c_d64", "nonfinite_k_inf", "nonfinite_v_nan_inf", "scale_negative_d128", "scale_huge_d64",
        "hd256_gqa3")


def _cases(tag):
    path = golden.FEATURE_FILES[tag]
    if not path.exists():
        return []
    meta = json.loads(str(np.load(path)["meta"]))
    return [c for c in meta["cases"] if "error" not in c]


def _check(rec, z):
    c = golden.check_feature_case(rec, z)
    assert c.tanh_exact, "softcap ran with libm's tanh: fa4num.hw's sm90 tanh.approx.f32 table did not load"
    assert c.inputs_match, "regenerated inputs differ from the ones the H200 saw"
    msg = (f"{c.name}: {c.out_mismatches}/{c.out_checked} stored output elements and {c.lse_mismatches}/"
           f"{c.lse_size} LSE values differ; digest of all outputs {'matches' if c.out_digest_match else 'differs'}")
    assert c.bit_exact, msg


@pytest.mark.parametrize("name", FAST)
def test_feature_case_bit_exact_dev(name):
    z = np.load(golden.FEATURE_FILES["dev"])
    rec = next(r for r in _cases("dev") if r["case"]["name"] == name)
    _check(rec, z)


@pytest.mark.slow
@pytest.mark.parametrize("rec", _cases("dev"), ids=lambda r: r["case"]["name"])
def test_every_dev_case_bit_exact(rec):
    _check(rec, np.load(golden.FEATURE_FILES["dev"]))


@pytest.mark.slow
@pytest.mark.parametrize("rec", _cases("holdout"), ids=lambda r: r["case"]["name"])
def test_every_holdout_case_bit_exact(rec):
    _check(rec, np.load(golden.FEATURE_FILES["holdout"]))


def test_a_changed_bit_is_caught():
    """The check can fail: the same case with the sink off differs (its sink mass is small: the LSE moves)."""
    rec = next(r for r in _cases("dev") if r["case"]["name"] == "sink_big_d128")
    bad = {**rec, "case": {k: v for k, v in rec["case"].items() if k != "sink_mult"}}
    c = golden.check_feature_case(bad, np.load(golden.FEATURE_FILES["dev"]))
    assert not c.bit_exact and c.lse_mismatches > 0
