"""fa4num.hw.mma: prepared operands give the same bits as raw arrays; inf/NaN terms follow IEEE sums."""
import ml_dtypes
import numpy as np
import pytest

from fa4num.hw.mma import MmaOperand, mma_chain, mma_operand


def _bits(x):
    return np.asarray(x, np.float32).view(np.uint32)


def test_prepared_operands_and_row_views_match_raw_arrays():
    rng = np.random.default_rng(3)
    a = (rng.standard_normal((70, 48)) * 2.0 ** rng.integers(-20, 21, (70, 48))).astype(ml_dtypes.bfloat16)
    b = (rng.standard_normal((33, 48)) * 2.0 ** rng.integers(-20, 21, (33, 48))).astype(ml_dtypes.bfloat16)
    c = rng.standard_normal((70, 33)).astype(np.float32)
    ref = mma_chain(a, b, c)
    pa, pb = mma_operand(a), mma_operand(b, role="b")
    assert isinstance(pa, MmaOperand) and pb.shape == b.shape
    assert np.array_equal(_bits(mma_chain(pa, pb, c)), _bits(ref))
    assert np.array_equal(_bits(mma_chain(pa.rows(slice(10, 50)), b, c[10:50])), _bits(ref[10:50]))
    with pytest.raises(ValueError, match="role"):
        mma_chain(pb, pa)


def test_inf_and_nan_terms_give_ieee_specials():
    a = np.zeros((4, 16), ml_dtypes.bfloat16)
    b = np.ones((1, 16), ml_dtypes.bfloat16)
    a[0, 3] = np.inf                          # inf + finite terms -> inf
    a[1, 0], a[1, 5] = np.inf, -np.inf        # inf - inf -> NaN
    a[2, 2] = 3.0                             # finite row, for contrast
    a[3, 7] = -np.inf
    b2 = b.copy()
    d = mma_chain(a, b2, np.full((4, 1), 1.5, np.float32))
    assert d[0, 0] == np.inf and np.isnan(d[1, 0]) and d[2, 0] == 4.5 and d[3, 0] == -np.inf
    b2[0, 3] = 0                              # inf * 0 -> NaN
    assert np.isnan(mma_chain(a[:1], b2)[0, 0])
