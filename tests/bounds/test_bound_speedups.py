"""The forward bound's fast paths give the bits of the plain ones (issue 24 item 6: faster, not different): the
S GEMM error by BLAS on the rows whose sums float64 holds exactly, and the tied-score Hoeffding sum in numba."""
import ml_dtypes
import numpy as np
import pytest

from fa4num.bounds import attention as ab


def _rows(seed, m, n, d, spread):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m + n, d)) * np.exp2(rng.integers(-spread, spread + 1, (m + n, d)))
    x = x.astype(ml_dtypes.bfloat16).astype(np.float64)
    return x[:m], x[m:]


@pytest.mark.parametrize("spread", [0, 12, 60])
def test_s_error_fast_path_has_the_kernels_bits(spread):
    Q, K = _rows(spread, 150, 170, 64, spread)
    first = np.zeros(150, np.int64)
    last = np.minimum(np.arange(150) + 20, 169)
    g = ab._gemm_model("wgmma", "sm90", "bfloat16", 64)
    trunc, rz = g.gamma - 2.0 ** -23, 2.0 ** -23
    d52 = 64 * 2.0 ** -52
    inexact = ab._inexact_rows(Q, K, 8)
    if spread == 0:
        assert not inexact.any()
    if spread == 60:
        assert inexact.any()
    Kt = np.ascontiguousarray(K.T)
    want = ab._s_error_kernel(Q, Kt, np.abs(Kt), g.chunk, trunc, rz, g.eta, first, last, True, ab._F64_SAFETY, d52)
    got = ab._s_error(Q, K, g, "wgmma", first, last, 8)
    for w, x in zip(want, got):
        assert np.array_equal(w, x)


def _grouped(S, w2, V):
    """The grouped evaluation, row by row in numpy (the code the numba path replaced)."""
    out = np.sqrt(w2 @ (V * V))
    srt = np.sort(S, axis=1)
    wa, aV = np.sqrt(w2), np.abs(V)
    for i in np.flatnonzero((srt[:, 1:] == srt[:, :-1]).any(axis=1)):
        o = np.argsort(S[i], kind="stable")
        s = S[i, o]
        starts = np.flatnonzero(np.concatenate([[True], s[1:] != s[:-1]]))
        g = np.add.reduceat(wa[i, o, None] * aV[o], starts, axis=0)
        out[i] = np.sqrt((g * g).sum(axis=0))
    return out


def test_tied_sum_has_the_grouped_bits():
    rng = np.random.default_rng(3)
    S = np.round(rng.standard_normal((60, 90)) * 8) / 8          # many ties
    w2 = rng.random((60, 90))
    S[:20, 50:] = 0.0
    w2[:20, 50:] = 0.0                                           # masked keys: zero scores of weight 0
    S[20:25] = rng.standard_normal((5, 90))                      # rows without a tie
    S[25:30, :50], S[25:30, 50:], w2[25:30, 50:] = rng.standard_normal((5, 50)), 0.0, 0.0   # only masked ties
    V = rng.standard_normal((90, 16))
    assert np.array_equal(ab._tied_root_sum_squares(S, w2, V), _grouped(S, w2, V))
