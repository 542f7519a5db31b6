"""Release profiles (``plan(..., fa4_release=...)``): the profile's recorded values reach the emulator, b27 and
b36 give different bits exactly where the planner's decisions differ, and what a profile records but fa4num
does not emulate is refused."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from fa4num.attention import forward, plan, plan_of, same_bits
from fa4num.attention import releases
from fa4num.attention.kernels import SM100_HD256_DEDICATED
from fa4num.cli import main as cli_main
from fa4num.softmax import sm100 as s100

BF16 = ml_dtypes.bfloat16


def _qkv(b, sq, sk, h, d, *, hk=None, dtype=BF16, seed=0):
    rng = np.random.default_rng(seed)
    hk = h if hk is None else hk
    return [rng.standard_normal(s, dtype=np.float32).astype(dtype) for s in ((b, sq, h, d), (b, sk, hk, d),
                                                                               (b, sk, hk, d))]


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint16)


def test_profiles_take_their_recorded_tables():
    """Each profile's hd256 2-CTA tuning entry is the one its wheel recorded (fa4num/data/releases/*.json)."""
    q, k, v = _qkv(1, 1, 256, 16, 256)
    for rel in releases.known():
        r = releases.get(rel)
        if "sm100_hd256" in r.not_emulated:
            with pytest.raises(ValueError, match=f"fa4_release='{rel}'"):
                plan(q, k, v, kernel="fa4-sm100", fa4_release=rel)
            continue
        o = plan(q, k, v, kernel="fa4-sm100", fa4_release=rel).opts
        freq, res, start = r.tuning(fp8=False)[(True, False, 256, False)]
        assert (o.ex2_emu_freq, o.ex2_emu_res, o.ex2_emu_start_frg) == (freq, res or r.ex2_emu_res, start)
    assert releases.resolve_release("4.0.0b28") == "4.0.0b27"


@pytest.mark.parametrize("batch", [1, 8])
def test_hd256_decode_b27_vs_b36_differs_where_the_plans_differ(batch):
    """Issue 26's case: hd256 decode at 16 heads. b36: 2-CTA (24 software-exp2 columns) at batch 1, 1-CTA (none)
    at batch 8; b27: the dedicated 2-CTA kernel (36 columns, no lazy rescale) at both."""
    q, k, v = _qkv(batch, 1, 520, 16, 256, seed=batch)
    a = plan(q, k, v, kernel="fa4-sm100", fa4_release="4.0.0b27")
    b = plan(q, k, v, kernel="fa4-sm100")
    assert a.kernel is SM100_HD256_DEDICATED and b.kernel is not SM100_HD256_DEDICATED
    pa, pb = plan_of(a).decisions(), plan_of(b).decisions()
    assert len(pa["emulated_columns"]) == 36 and len(pb["emulated_columns"]) == (24 if batch == 1 else 0)
    assert pa["rescale_threshold"] == 0.0 and pb["rescale_threshold"] == 8.0
    r = same_bits(a, b)
    assert r.predicted_equal == 0 and "emulated_columns" in r.decisions
    assert r.rows_equal < r.rows


def test_same_plan_same_bits_across_releases():
    """A call whose decisions b27 and b36 share (bf16, head dim 128, causal) gets the same bits."""
    q, k, v = _qkv(2, 150, 300, 4, 128, hk=2)
    a = plan(q, k, v, kernel="fa4-sm100", causal=True, fa4_release="4.0.0b27")
    b = plan(q, k, v, kernel="fa4-sm100", causal=True)
    assert plan_of(a).decisions() == plan_of(b).decisions()
    r = same_bits(a, b)
    assert r.rows_equal == r.rows == r.predicted_equal > 0


def test_fp8_threshold_of_b10_b22():
    """b10-b22: fp8 kept a stale max within 4 (max_offset 8, no headroom assert); b36: threshold 0."""
    q, k, v = _qkv(1, 64, 512, 2, 128, dtype=ml_dtypes.float8_e4m3fn, seed=3)
    old = plan(q, k, v, kernel="fa4-sm100", fa4_release="4.0.0b22")
    new = plan(q, k, v, kernel="fa4-sm100")
    assert (old.opts.rescale_threshold, old.opts.max_offset) == (4.0, 8)
    assert (new.opts.rescale_threshold, new.opts.max_offset) == (0.0, 8)
    assert plan(q, k, v, kernel="fa4-sm100", fa4_release="4.0.0b23").opts.max_offset == 4
    r = same_bits(old, new)
    assert "rescale_threshold" in r.decisions and r.rows_equal < r.rows


def test_sm90_is_the_same_in_every_profile():
    q, k, v = _qkv(1, 100, 200, 2, 64)
    ref = forward(q, k, v, causal=True)
    for rel in releases.known():
        got = forward(q, k, v, causal=True, fa4_release=rel)
        assert np.array_equal(_bits(got.out), _bits(ref.out)) and np.array_equal(got.lse, ref.lse)


def test_what_is_not_emulated_is_refused():
    q, k, v = _qkv(1, 16, 64, 2, 128, dtype=ml_dtypes.float8_e4m3fn)
    with pytest.raises(ValueError, match="wrong slots"):
        plan(q, k, v, kernel="fa4-sm100", fa4_release="4.0.0b22", q_descale=np.ones((1, 2), np.float32))
    q, k, v = _qkv(1, 1, 256, 4, 256, hk=2)
    with pytest.raises(ValueError, match="no pack_gqa and no SplitKV"):
        plan(q, k, v, kernel="fa4-sm100", fa4_release="4.0.0b27", pack_gqa=True)
    with pytest.raises(ValueError, match="does not support learnable_sink"):
        plan(q, k, v, kernel="fa4-sm100", fa4_release="4.0.0b27", learnable_sink=np.zeros(4, np.float32))
    q, k, v = _qkv(1, 4, 2048, 4, 128, hk=2)
    with pytest.raises(ValueError, match="automatic split count"):
        plan(q, k, v, kernel="fa4-sm100", fa4_release="4.0.0b27", num_splits=0)
    assert plan(q, k, v, kernel="fa4-sm100", num_splits=0).num_splits > 1
    with pytest.raises(ValueError, match=r"fa4_release must be one of \['4.0.0b10'"):
        plan(q, k, v, fa4_release="4.0.0b99")


def test_quarter_row_sum_order():
    """The dedicated kernel's row sum, written here element by element from its description."""
    rng = np.random.default_rng(5)
    p = (rng.random((3, 128), dtype=np.float32) * np.float32(2.0) ** rng.integers(-30, 5, (3, 128))).astype(np.float32)
    h = rng.random(3, dtype=np.float32)
    want = []
    for i in range(3):
        lanes = [[h[i], h[i]], [np.float32(0)] * 2, [np.float32(0)] * 2, [np.float32(0)] * 2]
        for f in range(4):
            for c in range(0, 32, 2):
                lanes[f] = [np.float32(lanes[f][0] + p[i, 32 * f + c]), np.float32(lanes[f][1] + p[i, 32 * f + c + 1])]
        l0 = [np.float32(lanes[0][j] + lanes[1][j]) for j in (0, 1)]
        l2 = [np.float32(lanes[2][j] + lanes[3][j]) for j in (0, 1)]
        l0 = [np.float32(l0[j] + l2[j]) for j in (0, 1)]
        want.append(np.float32(l0[0] + l0[1]))
    assert np.array_equal(s100.quarter_row_sum(p, h), np.array(want, np.float32))


def test_cli_release_option(tmp_path, capsys):
    assert cli_main(["attention", "plan", "batch=1,sq=1,sk=300,heads=16,d=256,kernel=fa4-sm100",
                     "--fa4-release", "4.0.0b27", "--json", str(tmp_path / "p.json")]) == 0
    import json
    rec = json.loads((tmp_path / "p.json").read_text())
    assert rec["rescale_threshold"] == 0.0 and len(rec["emulated_columns"]) == 36
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        cli_main(["attention", "plan", "batch=1,sq=1,sk=300,heads=16,d=256", "--fa4-release", "b27"])
    assert exit_.value.code == 2
    assert "--fa4-release" in capsys.readouterr().err
