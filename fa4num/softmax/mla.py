"""FA4's MLA softmax (``flash_fwd_mla_sm100.py`` / ``flash_fwd_mla_1cta_sm100.py`` ``softmax_step`` and
``correction_loop``), the 128-key mainloop, bit for bit from source (not run on a Blackwell GPU).

The MLA kernels call the same ``SoftmaxSm100`` methods as the dense SM100 forward (fa4num.softmax.sm100), with
three differences the dense emulator does not have, all read in FA4 4.0.0b36's source:

1. Two threads per row. The 64 x 128 S tile of a CTA sits in TMEM in the "Layout E" packing (64 rows on 128 lanes,
   ``_acc_tmem_layout``: element (m, j + 64 h) at lane m + 64 h, column j), so thread (row m, half h) loads the
   64 contiguous columns [64 h, 64 h + 64) of the row (register i = column 64 h + i, as ``apply_bitmask`` and
   ``mask.py`` ``apply_mask_sm100``'s bitmask branch index them). ``compute_row_max_local`` takes each half's max
   (seeded with the stored max), the halves are exchanged through shared memory and combined with ``max``; then
   ``update_row_max_from_local``.
2. ``update_row_max_from_local`` computes the factor with ``cute.math.exp2(acc_scale_)`` without fastmath, i.e.
   ``ex2.approx.f32`` without .ftz (the dense ``update_row_max`` uses the .ftz form). The lazy-rescale test is the
   same rule (:func:`fa4num.softmax.lazy.lazy_rescale_rows`), with the threshold the interface passes: 8.0, or 0.0
   for sparse-MLA training (``interface.py`` ``mla_fwd_rescale_threshold``).
3. ``apply_exp2_convert`` is called with its defaults (``ex2_emu_freq=0``): every exp2 on MUFU, no software exp2.
   Each thread's ``update_row_sum`` folds its own 64 columns (``fadd_reduce``, eight accumulators, init =
   RN(half_sum * acc_scale)) into its own half sum, carried across all KV blocks; ``correction_loop`` adds the two
   at the end, row_sum = RN(row_sum0 + row_sum1), then the dense epilogue (rcp.approx, lg2.approx, the sink).

The steps themselves are fa4num.softmax.sm100's: :func:`~fa4num.softmax.sm100.update_row_max`,
:func:`~fa4num.softmax.sm100.scale_subtract_rowmax`, :func:`~fa4num.softmax.sm100.apply_exp2_convert`,
:func:`~fa4num.softmax.sm100.update_row_sum`, :func:`~fa4num.softmax.sm100.finalize`; this module only arranges
them as the MLA kernels do.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import sm100 as _sm100
from ._ops import f32

HALVES = 2          # threads per row (Layout E datapath halves)
HALF_COLUMNS = 64   # columns of a 128-key block each thread owns


@dataclass
class MlaState(_sm100.Sm100State):
    """:class:`fa4num.softmax.sm100.Sm100State` with the two threads' half row sums (``row_sum`` unused until
    :func:`finalize` adds them)."""

    half_sums: np.ndarray = None   # (R, 2) float32: thread (row, h)'s softmax.row_sum[0]

    @classmethod
    def empty(cls, rows: int) -> "MlaState":
        base = _sm100.Sm100State.empty(rows)
        return cls(base.row_max, base.row_sum, base.true_max, np.zeros((rows, HALVES), np.float32))


def softmax_step(s, state: MlaState, *, scale_log2, is_first: bool, rescale_threshold: float = 8.0,
                 max_offset: int = 0, arch="sm90", block_max=None) -> _sm100.Sm100Step:
    """One 128-key block of the MLA softmax warps (``flash_fwd_mla_sm100.py`` ``softmax_step``). Updates ``state``.

    Parameters
    ----------
    s : (R, 128) float32
        Scores of the block, masked entries -inf (the sparse bitmask already applied).
    state : MlaState
    scale_log2, rescale_threshold : float
        FA4's ``softmax_scale_log2`` and the MLA threshold (8.0, or 0.0 for sparse-MLA training).
    is_first : bool
    max_offset : int
        0 for 16-bit inputs (the 1-CTA kernel's fp8 path uses 8; fa4num does not model it).
    arch : str or fa4num.hw.MufuModel
        The MUFU model.
    block_max : (R,) float32, optional
        ``np.fmax.reduce(s, axis=1)`` if the caller has it: the max of the two halves' maxima is the same
        value (``max`` is exact and NaN-ignoring in any order).

    Returns
    -------
    fa4num.softmax.sm100.Sm100Step

    Examples
    --------
    >>> st = MlaState.empty(1)
    >>> s = np.zeros((1, 128), np.float32)
    >>> step = softmax_step(s, st, scale_log2=np.float32(1.0), is_first=True)
    >>> st.half_sums.tolist(), float(step.p[0, 0])
    ([[64.0, 64.0]], 1.0)
    """
    from fa4num import hw
    model = hw.mufu_model(arch)
    s = f32(s)
    if s.shape[1] != HALVES * HALF_COLUMNS:
        raise ValueError(f"an MLA block has {HALVES * HALF_COLUMNS} keys, got {s.shape[1]}")
    sl2 = np.float32(scale_log2)
    m_blk = np.fmax.reduce(s, axis=1) if block_max is None else f32(block_max)
    with np.errstate(invalid="ignore"):
        # update_row_max_from_local: cute.math.exp2 without fastmath -> ex2.approx.f32 (no .ftz)
        m_safe, acc_scale, rescaled, skipped = _sm100.update_row_max(
            m_blk, state, scale_log2=sl2, is_first=is_first, rescale_threshold=np.float32(rescale_threshold),
            mufu=model, scale_ex2_ftz=False)
    x = _sm100.scale_subtract_rowmax(s, m_safe, scale_log2=sl2, max_offset=np.float32(max_offset))
    p = _sm100.apply_exp2_convert(x, mufu=model, emulate=None)
    for h in range(HALVES):
        cols = slice(h * HALF_COLUMNS, (h + 1) * HALF_COLUMNS)
        state.half_sums[:, h] = _sm100.update_row_sum(p[:, cols], state.half_sums[:, h], acc_scale,
                                                      is_first=is_first)
    with np.errstate(invalid="ignore"):
        lag = (state.true_max.astype(np.float64) - state.row_max) * np.float64(sl2)
    lag = np.where(np.isfinite(lag), lag, 0).astype(np.float32)
    return _sm100.Sm100Step(p, acc_scale, rescaled, skipped, lag)


def finalize(state: MlaState, *, scale_log2, max_offset: int = 0, arch="sm90", sink=None, v_descale=1.0):
    """``correction_loop``'s epilogue: row_sum = RN(row_sum0 + row_sum1), then
    :func:`fa4num.softmax.sm100.finalize` (the sink, rcp.approx.ftz, LSE through lg2.approx; the MLA kernel writes
    ``row_max * scale_log2 + lg2`` without the ``- max_offset`` term, the same value for max_offset 0).

    Parameters
    ----------
    state : MlaState
    scale_log2 : float32
    max_offset : int
    arch : str or fa4num.hw.MufuModel
    sink : (R,) float32, optional
        The learnable sink of each row's head.
    v_descale : float

    Returns
    -------
    (scale, lse) : (R,) float32 each

    Examples
    --------
    >>> st = MlaState.empty(1)
    >>> st.row_max[:] = 0; st.half_sums[:] = 1.0
    >>> [float(x[0]) for x in finalize(st, scale_log2=np.float32(1.0))]
    [0.5, 0.6931471824645996]
    """
    whole = _sm100.Sm100State(state.row_max, f32(state.half_sums[:, 0] + state.half_sums[:, 1]), state.true_max)
    return _sm100.finalize(whole, scale_log2=scale_log2, max_offset=max_offset, arch=arch, sink=sink,
                           v_descale=v_descale)


__all__ = ["MlaState", "softmax_step", "finalize", "HALVES", "HALF_COLUMNS"]
