"""fa4num.softmax.mla: the MLA kernels' arrangement of SoftmaxSm100's steps (two threads per row, no software
exp2, the rescale factor without .ftz), against fa4num.softmax.sm100's steps."""
import numpy as np

from fa4num import hw
from fa4num.softmax import mla, sm100


def _scores(rows, seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((rows, 128)) * 3).astype(np.float32)


def test_half_sums_are_two_folds_of_64_columns():
    """Each half sum is fadd_reduce over its 64 columns seeded with RN(half * acc_scale); P and the stored max are
    the dense step's with no emulated column."""
    st, ref = mla.MlaState.empty(32), sm100.Sm100State.empty(32)
    halves = np.zeros((32, 2), np.float32)
    for i, seed in enumerate((1, 2, 3)):
        s = _scores(32, seed) + np.float32(4 * i)     # the max grows: rescales and kept maxima both happen
        step = mla.softmax_step(s, st, scale_log2=np.float32(1.0), is_first=i == 0)
        d = sm100.softmax_step(s, ref, scale_log2=np.float32(1.0), is_first=i == 0, emulate=None,
                               scale_ex2_ftz=False)
        assert np.array_equal(step.p, d.p) and np.array_equal(st.row_max, ref.row_max)
        for h in range(2):
            halves[:, h] = sm100.update_row_sum(d.p[:, 64 * h:64 * h + 64], halves[:, h], d.acc_scale,
                                                is_first=i == 0)
    assert np.array_equal(st.half_sums, halves)
    assert not np.array_equal(halves[:, 0] + halves[:, 1], ref.row_sum)    # another order than the dense fold
    scale, lse = mla.finalize(st, scale_log2=np.float32(1.0))
    whole = sm100.Sm100State(st.row_max, halves[:, 0] + halves[:, 1], st.true_max)
    assert np.array_equal((scale, lse), sm100.finalize(whole, scale_log2=np.float32(1.0)))


def test_rescale_factor_is_not_flushed():
    """update_row_max_from_local: cute.math.exp2 without fastmath (ex2.approx.f32, no .ftz): a factor below 2^-126
    stays subnormal, where the dense step's ex2.approx.ftz gives 0."""
    st = mla.MlaState.empty(1)
    mla.softmax_step(np.zeros((1, 128), np.float32), st, scale_log2=np.float32(1.0), is_first=True)
    step = mla.softmax_step(np.full((1, 128), 130.0, np.float32), st, scale_log2=np.float32(1.0), is_first=False,
                            rescale_threshold=0.0)
    want = hw.mufu_model("sm90").ex2(np.float32([-130.0]), ftz=False)
    assert step.acc_scale[0] == want[0] and 0 < want[0] < np.finfo(np.float32).tiny
