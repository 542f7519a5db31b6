"""Unit checks of the softmax-stage building blocks against FA4's source-level definitions."""
import numpy as np
import pytest

from fa4num.softmax import sm90, sm100
from fa4num.softmax import ffma, scale_log2_of


def test_lane_columns_follow_the_wgmma_accumulator_layout():
    cols = sm90.lane_columns(32)
    # lane q holds columns 8j + 2q and 8j + 2q + 1, j = 0..3, in that register order
    assert cols[1].tolist() == [2, 3, 10, 11, 18, 19, 26, 27]
    assert sorted(cols.ravel().tolist()) == list(range(32))
    with pytest.raises(ValueError, match="multiple of 8"):
        sm90.lane_columns(12)


@pytest.mark.parametrize("freq,res,start,expect", [
    (10, 4, 1, [38, 39, 40, 41, 48, 49, 50, 51, 58, 59, 60, 61, 70, 71, 72, 73, 80, 81, 82, 83, 90, 91, 92, 93]),
    (16, 4, 1, [44, 45, 46, 47, 60, 61, 62, 63, 76, 77, 78, 79, 92, 93, 94, 95]),
    (32, 4, 1, [60, 61, 62, 63, 92, 93, 94, 95]),
    (0, 4, 1, []),
])
def test_emulated_columns_match_fa4_tuning_table(freq, res, start, expect):
    """docs/notes/fa4-numerics.md section B lists the emulated columns of each tuning-table entry."""
    assert np.flatnonzero(sm100.emulated_columns(128, freq=freq, res=res, start_frg=start)).tolist() == expect


def test_emulated_columns_never_touch_last_fragment():
    for freq in range(1, 33):
        mask = sm100.emulated_columns(128, freq=freq, res=min(4, freq), start_frg=0)
        assert not mask[96:].any()


def test_fadd_reduce_order_is_eight_interleaved_accumulators():
    rng = np.random.default_rng(0)
    p = (rng.random((64, 128)) * 2.0 ** rng.integers(-30, 1, (64, 128))).astype(np.float32)
    init = rng.random(64).astype(np.float32)
    got = sm100.fadd_reduce(p, init)
    for r in range(4):   # scalar re-statement of utils.fadd_reduce with arch 100
        acc = [np.float32(x) for x in p[r, :8]]
        acc[0] = np.float32(init[r] + p[r, 0])
        acc[1] = np.float32(np.float32(0) + p[r, 1])
        for i in range(8, 128, 8):
            for m in range(8):
                acc[m] = np.float32(acc[m] + p[r, i + m])
        a0, a1 = np.float32(acc[0] + acc[2]), np.float32(acc[1] + acc[3])
        a4, a5 = np.float32(acc[4] + acc[6]), np.float32(acc[5] + acc[7])
        assert got[r] == np.float32(np.float32(a0 + a4) + np.float32(a1 + a5))
    # a different order gives different bits somewhere: the order is observable
    assert (got != p.sum(axis=1, dtype=np.float32) + init).any()


def test_ffma_rounds_once():
    a = np.float32([1 + 2.0 ** -12])          # a*a - 1 = 2^-11 + 2^-24 exactly; RN(a*a) drops the 2^-24
    assert ffma(a, a, np.float32([-1]))[0] == np.float32(2.0 ** -11 + 2.0 ** -24)
    assert (a * a - np.float32(1))[0] == np.float32(2.0 ** -11)


def test_scale_log2_is_two_fp32_roundings():
    assert scale_log2_of(1 / np.sqrt(128)).view(np.uint32) == 0x3E0293EE


def _run_sm100(s_blocks, threshold):
    st = sm100.Sm100State.empty(s_blocks[0].shape[0])
    steps = [sm100.softmax_step(s, st, scale_log2=np.float32(1), is_first=i == 0, rescale_threshold=threshold)
             for i, s in enumerate(s_blocks)]
    return st, steps


def test_lazy_rescale_keeps_stale_max_within_threshold():
    first = np.zeros((3, 32), np.float32)
    second = np.zeros((3, 32), np.float32)
    second[:, 0] = [5.0, 8.0, 9.0]          # max grows by 5, 8 (kept: >= -8), 9 (rescale)
    st, steps = _run_sm100([first, second], 8.0)
    assert st.row_max.tolist() == [0.0, 0.0, 9.0]
    assert steps[1].skipped.tolist() == [True, True, False]
    assert steps[1].acc_scale[:2].tolist() == [1.0, 1.0] and steps[1].acc_scale[2] < 1
    assert steps[1].p[1, 0] == 256.0          # P reaches 2^threshold with the stale max
    assert steps[1].lag[:2].tolist() == [5.0, 8.0]
    st0, steps0 = _run_sm100([first, second], 0.0)
    assert st0.row_max.tolist() == [5.0, 8.0, 9.0] and not steps0[1].skipped.any()


def test_masked_rows_give_zero_sum_and_minus_inf_lse():
    s = np.full((2, 32), -np.inf, np.float32)
    s[1, 3] = 1.0
    st90 = sm90.Sm90State.empty(2)
    sm90.online_softmax(s, st90, scale_log2=np.float32(1), is_first=True)
    _, lse = sm90.finalize(st90, scale_log2=np.float32(1))
    assert lse[0] == -np.inf and np.isfinite(lse[1])
    st100, _ = _run_sm100([s], 8.0)
    _, lse = sm100.finalize(st100, scale_log2=np.float32(1))
    assert lse[0] == -np.inf and np.isfinite(lse[1])
