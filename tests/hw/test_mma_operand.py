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


@pytest.mark.parametrize("dt", [ml_dtypes.bfloat16, np.float16])
def test_fast_kernel_equals_general_kernel_where_it_applies(dt):
    # the float32/int32 kernel must give the general kernel's bits wherever it does not hand the call over:
    # exponents near both ends of its range, zeros, same-sign sums near the int32 limit
    from fa4num.hw.mma import _pad_k, _wgmma_general, _wgmma_rows_f32
    rng = np.random.default_rng(11)
    ran = 0
    for trial in range(150):
        m, n, k = (int(x) for x in rng.integers(1, 40, 3))
        shift = int(rng.choice([0, -50, -52, 58, 60])) if dt is ml_dtypes.bfloat16 else int(rng.choice([0, -8, 6]))
        spread = int(rng.choice([0, 2, 6]))

        def draw(shape, sh):
            x = rng.standard_normal(shape) * 2.0 ** (rng.integers(-spread, spread + 1, shape) + sh)
            x[rng.random(shape) < rng.choice([0, 0.3, 0.9])] = 0
            return np.abs(x) if trial % 5 == 0 else x
        a = draw((m, k), shift).astype(np.float32).astype(dt)
        b = draw((k, n), shift).T.astype(np.float32).astype(dt)
        c = draw((m, n), int(rng.choice([0, 2 * shift, -101, -126, 119]))).astype(np.float32)
        if trial % 10 == 0:   # the largest significands, all one sign: sums next to 2^31
            a[:], b[:] = dt(1.9921875 if dt is ml_dtypes.bfloat16 else 1.9990234375), dt(1.9921875)
        pa, pb = mma_operand(a), mma_operand(b, role="b")
        fast, general = np.empty((m, n), np.float32), np.empty((m, n), np.float32)
        _wgmma_general(pa.x, pa.e, pb.x, pb.e, c, general, 16, 25, -133, 0, m)
        (a32, ae), (b32t, bet) = _pad_k(pa.x32, pa.e, 1), _pad_k(pb.x32, pb.e, 0)
        if _wgmma_rows_f32(a32, ae, b32t, bet, c, fast, 25, -133, 0, m):
            ran += 1
            assert np.array_equal(_bits(fast), _bits(general)), (trial, shift, spread)
    assert ran > 25
