"""fa4num.attention.masking: FA4's window canonicalisation, bottom-right aligned masks and block ranges."""
import numpy as np
import pytest

from fa4num.attention.masking import (Window, check_cu_seqlens, m_block_range, n_block_range, resolve_window,
                                      visible)


@pytest.mark.parametrize("causal,ws,expect", [
    (False, (None, None), Window(False, False, None, None)),
    (True, (None, None), Window(True, False, None, None)),
    (False, (None, 0), Window(True, False, None, None)),
    (True, (64, None), Window(False, True, 64, 0)),
    (True, (64, 5), Window(False, True, 64, 0)),          # causal overrides the right size
    (False, (-1, -1), Window(False, False, None, None)),   # both negative: no window
    (False, (50, 50), Window(False, True, 50, 50)),
    (False, (None, 30), Window(False, True, None, 30)),
])
def test_resolve_window_follows_fa4(causal, ws, expect):
    assert resolve_window(causal, ws) == expect


@pytest.mark.parametrize("ws,match", [((-1, 3), "window_size left"), ((3,), "pair"), ((1.5, None), "int")])
def test_bad_window_raises(ws, match):
    with pytest.raises(ValueError, match=match):
        resolve_window(False, ws)


def _brute(sq, sk, w):
    """Visibility from the definition, one pair at a time."""
    off = sk - sq
    m = np.zeros((sq, sk), bool)
    for i in range(sq):
        for j in range(sk):
            lo = -np.inf if w[0] is None else i + off - w[0]
            hi = np.inf if w[1] is None else i + off + w[1]
            m[i, j] = lo <= j <= hi
    return m


@pytest.mark.parametrize("sq,sk", [(7, 11), (11, 7), (9, 9)])
@pytest.mark.parametrize("ws", [(None, 0), (3, 0), (2, 2), (None, 1), (4, None), (100, 100)])
def test_visible_matches_definition(sq, sk, ws):
    w = resolve_window(False, ws)
    got = visible(np.arange(sq)[:, None], np.arange(sk)[None, :], seqlen_q=sq, seqlen_k=sk, window=w)
    assert (got == _brute(sq, sk, ws)).all()


@pytest.mark.parametrize("sq,sk,ws,g", [(300, 300, (None, 0), 1), (400, 250, (80, 0), 1), (257, 400, (50, 50), 1),
                                        (150, 420, (40, 20), 1), (130, 200, (16, 8), 4), (90, 33, (None, 30), 1)])
def test_block_ranges_cover_every_visible_key(sq, sk, ws, g):
    """Every visible (row, key) pair lies in a visited block, and the range is tight enough that a block
    outside it holds no visible key: forward (n ranges per m block) and backward (m ranges per n block)."""
    w = resolve_window(False, ws)
    tm, tn = 128, 64
    vis = visible(np.arange(sq)[:, None], np.arange(sk)[None, :], seqlen_q=sq, seqlen_k=sk, window=w)
    rows = np.repeat(np.arange(sq), g)            # packed rows: row * g + head
    for mb in range(-(-sq * g // tm)):
        lo, hi = n_block_range(mb, tile_m=tm, tile_n=tn, seqlen_q=sq, seqlen_k=sk, window=w,
                               qhead_per_kvhead_packgqa=g)
        r = rows[mb * tm:(mb + 1) * tm]
        cols = np.nonzero(vis[r].any(axis=0))[0]
        if cols.size:
            assert lo <= cols.min() // tn and cols.max() // tn < hi
    if g == 1:
        for nb in range(-(-sk // tn)):
            lo, hi = m_block_range(nb, tile_m=tm, tile_n=tn, seqlen_q=sq, seqlen_k=sk, window=w)
            rws = np.nonzero(vis[:, nb * tn:(nb + 1) * tn].any(axis=1))[0]
            if rws.size:
                assert lo <= rws.min() // tm and rws.max() // tm < hi


def test_split_ranges_partition_the_blocks():
    w = resolve_window(False, (None, None))
    whole = n_block_range(0, tile_m=128, tile_n=128, seqlen_q=100, seqlen_k=1000, window=w)
    parts = [n_block_range(0, tile_m=128, tile_n=128, seqlen_q=100, seqlen_k=1000, window=w, split_idx=s,
                           num_splits=3) for s in range(3)]
    covered = [b for lo, hi in parts for b in range(lo, hi)]
    assert covered == list(range(*whole))


@pytest.mark.parametrize("cu,match", [([0, 5, 3], "non-decreasing"), ([1, 5], "start at 0"), ([[0, 1]], "1-D"),
                                      ([0.0, 1.0], "integer")])
def test_bad_cu_seqlens_raise(cu, match):
    with pytest.raises(ValueError, match=match):
        check_cu_seqlens(np.array(cu), "cu_seqlens_q")
