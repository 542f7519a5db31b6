"""The forward bound's fast paths give the bits of the plain ones (issue 24 item 6: faster, not different): the
tied-score Hoeffding sum in numba equals the grouped numpy evaluation it replaced."""
import numpy as np

from fa4num.bounds import attention as ab


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
