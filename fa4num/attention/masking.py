"""Which keys a query sees, and which KV blocks FA4 visits: causal, sliding-window (local) and sequence-length
masks with FA4's alignment, and the block ranges of ``block_info.py`` ``BlockInfo`` (forward and backward).

FA4 (flash-attn-4 4.0.0b36) aligns every mask to the bottom-right corner: with ``offset = seqlen_k -
seqlen_q``, key ``j`` is visible from query ``i`` iff ``j < seqlen_k`` and
``i + offset - window_left <= j <= i + offset + window_right`` (a bound that is None is absent). ``causal`` is
the window (None, 0). ``interface.py`` ``_resolve_causal_local_window`` puts the options in canonical form
(:func:`resolve_window`); ``mask.py`` ``AttentionMask.apply_mask`` (SM90) and ``apply_mask_sm100`` apply them
and ``block_info.py`` ``BlockInfo.get_n_block_min_max`` / ``get_m_block_min_max`` bound the KV (query) blocks
a tile visits. A window side larger than the sequence masks nothing on that side; FA4 accepts it, fa4num
refuses it (:func:`check_window_range`) so that a window meant for longer sequences is not silently a no-op:
pass None for "no bound", which FA4 computes with the same bits (tested). A window so large that the kernel's
Int32 index arithmetic would wrap is refused too.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Window:
    """Canonical masking options (``_resolve_causal_local_window``): ``causal`` and ``local`` exclude each
    other; ``left``/``right`` are the window sizes (None = unbounded) and only matter when ``local``."""
    causal: bool
    local: bool
    left: int | None
    right: int | None

    @property
    def masked(self) -> bool:
        return self.causal or self.local


def _check_window_size(window_size) -> tuple:
    try:
        left, right = window_size
    except (TypeError, ValueError):
        raise ValueError(f"window_size must be a pair (left, right) of ints or None, got {window_size!r}") from None
    for side, w in (("left", left), ("right", right)):
        if w is not None and (isinstance(w, bool) or not isinstance(w, (int, np.integer))):
            raise ValueError(f"window_size {side} must be an int or None, got {w!r}")
    return (None if left is None else int(left)), (None if right is None else int(right))


def resolve_window(causal: bool = False, window_size=(None, None)) -> Window:
    """FA4's canonical form of (causal, window_size) (``interface.py`` ``_resolve_causal_local_window``).

    Both sizes negative means no window; ``causal`` sets the right size to 0; (None, 0) is plain causal and any
    other window is local. A single negative size (the other one not negative) is rejected here: FA4 passes
    it to the kernel, whose mask then hides keys it should show.

    Examples
    --------
    >>> resolve_window(True, (64, None))
    Window(causal=False, local=True, left=64, right=0)
    >>> resolve_window(False, (None, 0))
    Window(causal=True, local=False, left=None, right=None)
    """
    left, right = _check_window_size(window_size)
    if left is not None and right is not None and left < 0 and right < 0:
        left = right = None
    for side, w in (("left", left), ("right", right)):
        if w is not None and w < 0:
            raise ValueError(f"window_size {side} must be >= 0 or None (both negative means no window), got {w}")
    if causal:
        right = 0
    if left is None and right is None:
        return Window(False, False, None, None)
    if left is None and right == 0:
        return Window(True, False, None, None)
    return Window(False, True, left, right)


INT32_MAX = 2 ** 31 - 1
# the widest tile a kernel adds to the window's Int32 offsets (BlockInfo: (n_block + 1) * tile_n; SM100's 2-CTA
# tile_m = 2 * 2 * 128)
_MAX_TILE = 512


def check_window_range(window: Window, *, seqlen_q: int, seqlen_k: int) -> None:
    """Refuse a window side larger than the sequence or beyond FA4's Int32 mask arithmetic.

    With FA4's bottom-right alignment the left side limits ``diag - j``, at most ``seqlen_k - 1``, and the
    right side limits ``j - diag``, at most ``seqlen_q - 1`` (``diag = i + seqlen_k - seqlen_q``): a left side
    above ``seqlen_k`` or a right side above ``seqlen_q`` (the longest sequence, for varlen) masks nothing.
    FA4 (``interface.py``) accepts it; fa4num refuses it, naming the argument, because such a window is most
    likely a model's window applied to a shorter sequence by mistake, and ``None`` ("no bound") gives the same
    bits. ``mask.py`` ``AttentionMask.apply_mask`` also adds ``window_size_right`` to (and subtracts
    ``window_size_left`` from) the Int32 ``causal_row_offset = 1 + seqlen_k - n_block * tile_n - seqlen_q``
    plus the row index, and ``BlockInfo.get_m_block_min_max`` adds ``window_size_left`` to ``(n_block + 1) *
    tile_n + seqlen_q - seqlen_k``: a side above ``2**31 - 1 - seqlen_q - seqlen_k - 512`` could wrap there
    (only reachable with sequences near 2**30 tokens).

    Raises
    ------
    ValueError
        naming ``window_size``, the side and the allowed range.

    Examples
    --------
    >>> check_window_range(resolve_window(False, (100, 0)), seqlen_q=100, seqlen_k=100)   # as wide as it: ok
    >>> check_window_range(resolve_window(False, (4096, 0)), seqlen_q=100, seqlen_k=100)
    Traceback (most recent call last):
    ...
    ValueError: window_size left must be in [0, 100] (seqlen_k, the longest key sequence), got 4096: a wider window masks nothing on that side; pass None for no bound (the same bits; masking.without_wide_sides does it)
    """
    if not window.local:
        return
    wrap = INT32_MAX - int(seqlen_q) - int(seqlen_k) - _MAX_TILE
    for side, w, name, n in (("left", window.left, "seqlen_k", int(seqlen_k)),
                             ("right", window.right, "seqlen_q", int(seqlen_q))):
        if w is None:
            continue
        if w > n:
            raise ValueError(f"window_size {side} must be in [0, {n}] ({name}, the longest "
                             f"{'key' if side == 'left' else 'query'} sequence), got {w}: a wider window masks "
                             f"nothing on that side; pass None for no bound (the same bits; "
                             f"masking.without_wide_sides does it)")
        if w > wrap:
            raise ValueError(f"window_size {side} must be in [0, {wrap}] with seqlen_q={seqlen_q} and "
                             f"seqlen_k={seqlen_k}: FA4 adds it to Int32 row offsets, which would wrap; got {w}")


def without_wide_sides(window_size, *, seqlen_q: int, seqlen_k: int) -> tuple:
    """``window_size`` with each side wider than the sequence replaced by None (no bound), the call that
    :func:`check_window_range`'s refusal asks for: left above ``seqlen_k`` or right above ``seqlen_q`` (the
    longest sequence, for varlen) masks nothing, and FA4 gives the same bits either way (checked on the H200,
    ``tests/attention/test_window_refusal_golden.py``). Use it explicitly when applying a model's fixed window to
    shorter sequences.

    Examples
    --------
    >>> without_wide_sides((4096, 0), seqlen_q=100, seqlen_k=100)
    (None, 0)
    >>> without_wide_sides((64, 4096), seqlen_q=100, seqlen_k=100)
    (64, None)
    """
    left, right = _check_window_size(window_size)
    return (None if left is not None and left > seqlen_k else left,
            None if right is not None and right > seqlen_q else right)


def visible(rows, cols, *, seqlen_q: int, seqlen_k: int, window: Window) -> np.ndarray:
    """Boolean mask, True where key ``cols`` is visible from query ``rows`` (broadcast together; indices within
    one sequence). Keys at or beyond seqlen_k are never visible.

    Examples
    --------
    >>> w = resolve_window(False, (1, 0))
    >>> visible(np.arange(3)[:, None], np.arange(3)[None, :], seqlen_q=3, seqlen_k=3, window=w).astype(int)
    array([[1, 0, 0],
           [1, 1, 0],
           [0, 1, 1]])
    """
    rows = np.asarray(rows, np.int64)
    cols = np.asarray(cols, np.int64)
    ok = (cols >= 0) & (cols < seqlen_k)
    diag = rows + (seqlen_k - seqlen_q)
    if window.causal:
        ok = ok & (cols <= diag)
    elif window.local:
        if window.right is not None:
            ok = ok & (cols <= diag + window.right)
        if window.left is not None:
            ok = ok & (cols >= diag - window.left)
    return ok


def key_range(rows, *, seqlen_q: int, seqlen_k: int, window: Window) -> tuple[np.ndarray, np.ndarray]:
    """(first, last) key each query row sees (bottom-right aligned, within [0, seqlen_k)), int64 arrays of rows'
    shape: the visible keys of a row are one interval (:func:`visible`); a row with none has first > last.

    Examples
    --------
    >>> w = resolve_window(False, (1, 0))
    >>> [a.tolist() for a in key_range(np.arange(3), seqlen_q=3, seqlen_k=3, window=w)]
    [[0, 0, 1], [0, 1, 2]]
    """
    rows = np.asarray(rows, np.int64)
    diag = rows + (seqlen_k - seqlen_q)
    first = np.zeros_like(rows)
    last = np.full_like(rows, seqlen_k - 1)
    if window.causal:
        last = np.minimum(last, diag)
    elif window.local:
        if window.right is not None:
            last = np.minimum(last, diag + window.right)
        if window.left is not None:
            first = np.maximum(first, diag - window.left)
    return first, last


def window_offsets(window: Window, *, seqlen_q: int, seqlen_k: int) -> tuple[int, int]:
    """(left, right): query i sees keys diag - left .. diag + right (diag = i + seqlen_k - seqlen_q, within
    [0, seqlen_k)), as :func:`visible` says, for kernels that take the window as two offsets; an open side gets
    seqlen_q + seqlen_k + 1, a width no key reaches.

    Examples
    --------
    >>> window_offsets(resolve_window(True), seqlen_q=4, seqlen_k=6), window_offsets(resolve_window(False, (2, None)),
    ...                                                                              seqlen_q=4, seqlen_k=6)
    ((11, 0), (2, 11))
    """
    big = seqlen_q + seqlen_k + 1
    if window.causal:
        return big, 0
    if window.local:
        return (big if window.left is None else int(window.left)), (big if window.right is None else int(window.right))
    return big, big


def visible_count(rows, *, seqlen_q: int, seqlen_k: int, window: Window) -> np.ndarray:
    """How many keys each query row sees: ``visible(rows[:, None], arange(seqlen_k)[None, :], ...).sum(axis=1)``
    from :func:`key_range`, O(rows) instead of O(rows * seqlen_k).

    Examples
    --------
    >>> w = resolve_window(False, (1, 0))
    >>> visible_count(np.arange(3), seqlen_q=3, seqlen_k=3, window=w).tolist()
    [1, 2, 2]
    """
    first, last = key_range(rows, seqlen_q=seqlen_q, seqlen_k=seqlen_k, window=window)
    return np.maximum(last - first + 1, 0)


def _cdiv(a, b):
    return -(-a // b)


def n_block_range(m_block: int, *, tile_m: int, tile_n: int, seqlen_q: int, seqlen_k: int, window: Window,
                  qhead_per_kvhead_packgqa: int = 1, split_idx: int = 0, num_splits: int = 1,
                  n_blocks_per_split: int | None = None) -> tuple[int, int]:
    """(n_block_min, n_block_max) that the forward visits for query block ``m_block``
    (``BlockInfo.get_n_block_min_max``). With pack-GQA the M tile holds ``qhead_per_kvhead_packgqa`` heads
    per query row (packed row = row * qhead_per_kvhead + head). ``num_splits > 1``: the range of split
    ``split_idx`` (ceil-divided, or ``n_blocks_per_split`` blocks each when FA4's ``seqlen_k_per_split`` fixes
    them; a split can be empty, n_block_min >= n_block_max).

    Examples
    --------
    >>> n_block_range(0, tile_m=128, tile_n=128, seqlen_q=300, seqlen_k=300, window=resolve_window(True))
    (0, 1)
    """
    n_max = _cdiv(seqlen_k, tile_n)
    g = qhead_per_kvhead_packgqa
    if window.causal or (window.local and window.right is not None):
        m_idx_max = (m_block + 1) * tile_m
        if g > 1:
            m_idx_max = _cdiv(m_idx_max, g)
        n_idx = m_idx_max + seqlen_k - seqlen_q
        n_idx_right = n_idx if window.causal else n_idx + window.right
        n_max = min(n_max, _cdiv(n_idx_right, tile_n))
    n_min = 0
    if window.local and window.left is not None:
        m_idx_min = m_block * tile_m
        if g > 1:
            m_idx_min = m_idx_min // g
        n_min = max((m_idx_min + seqlen_k - seqlen_q - window.left) // tile_n, 0)
    if num_splits > 1:
        per = n_blocks_per_split
        if per is None:
            per = 0 if n_max <= n_min else (n_max - n_min + num_splits - 1) // num_splits
        n_min = n_min + split_idx * per
        n_max = min(n_min + per, n_max)
    return n_min, n_max


def m_block_range(n_block: int, *, tile_m: int, tile_n: int, seqlen_q: int, seqlen_k: int,
                  window: Window) -> tuple[int, int]:
    """(m_block_min, m_block_max) of the query blocks that see KV block ``n_block``
    (``BlockInfo.get_m_block_min_max``, the backward's loop)."""
    m_max = _cdiv(seqlen_q, tile_m)
    m_min = 0
    if window.causal or (window.local and window.right is not None):
        m_idx = n_block * tile_n + seqlen_q - seqlen_k
        m_idx_right = m_idx if window.causal else m_idx - window.right
        m_min = max(m_min, m_idx_right // tile_m)
    if window.local and window.left is not None:
        m_idx = (n_block + 1) * tile_n + seqlen_q - seqlen_k
        m_max = min(m_max, _cdiv(m_idx + window.left, tile_m))
    return m_min, m_max


def check_cu_seqlens(cu, name: str, *, total: int | None = None) -> np.ndarray:
    """Validate a cu_seqlens array (int, 1-D, starts at 0, non-decreasing, ends at ``total`` when given)."""
    a = np.asarray(cu)
    if a.ndim != 1 or a.size < 2 or not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"{name} must be a 1-D integer array of batch + 1 >= 2 offsets, got shape {a.shape} "
                         f"dtype {a.dtype}")
    a = a.astype(np.int64)
    if a[0] != 0 or (np.diff(a) < 0).any():
        raise ValueError(f"{name} must start at 0 and be non-decreasing, got {a.tolist()}")
    if total is not None and a[-1] != total:
        raise ValueError(f"{name}[-1] must equal the number of tokens ({total}), got {int(a[-1])}")
    return a
