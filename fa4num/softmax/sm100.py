"""FA4's Blackwell softmax stage (``flash_attn/cute/softmax.py`` class ``SoftmaxSm100``, driven by
``flash_fwd_sm100.py`` ``softmax_step`` and ``correction_loop``), bit for bit, vectorised over rows.

One thread owns one full row of the S tile (tcgen05 32x32b loads), so every reduction is within a thread:
``fmax_reduce`` / ``fadd_reduce`` with arch = 100 (utils.py). Per KV block:
  1. ``update_row_max``: m_new = max(m_old, S row) (exact, NaN-ignoring); m_safe = m_new or 0 if -inf;
     acc_scale_ = RN(RN(m_old - m_safe) * scale_log2) (FADD then FMUL); acc_scale = ex2.approx.ftz(acc_scale_);
     with rescale_threshold > 0 and acc_scale_ >= -rescale_threshold: keep m_old, acc_scale = 1 (lazy rescale).
     First block: no scale (the correction warps are not signalled).
  2. ``scale_subtract_rowmax``: bias = max_offset - m_safe * scale_log2, which ptxas contracts to one FFMA
     (fma.rn(-m_safe, scale_log2, max_offset)); x = fma.rn.f32x2(S, scale_log2, bias).
  3. ``apply_exp2_convert``: per 32-column fragment j and even k, columns (k, k+1) use ``ex2_emulation_2``
     (the packed software exp2, fa4num.ex2 variant "packed") iff freq > 0 and k % freq >= freq - res and
     start_frg <= j < frg_cnt - 1; all others MUFU ex2.approx.ftz. Then P -> the input dtype (cvt.rn, fp8 with
     .satfinite).
  4. ``update_row_sum``: row_sum = fadd_reduce(P fp32, init = RN(row_sum * acc_scale)) with 4 packed (8 scalar)
     accumulators, add.rn.f32x2 (no FMA: the init product is a separate FMUL).
Correction warps: O <- RN(O * acc_scale) before the next P V (a lane whose scale is 1.0 is unchanged, so the
warp ballot is invisible). Final: scale = rcp.approx.ftz(row_sum, 1.0 if zero/NaN); O * scale (RN) -> out dtype;
LSE = RN(RN(fma.rn(m, scale_log2, RN(lg2.approx.ftz(row_sum) - max_offset))) * LN2), -inf if zero/NaN.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from fa4num.ex2.emulate import exact_steps, fast_steps, horner_tuple, poly_coeffs, resolve_variant
from fa4num.fp.scalar import f32_to_u32, fma_rn_f32, u32_to_f32
from fa4num.hw.mufu import ex2_bits_compact, ex2_ftz_bits_compact

from fa4num.constants import LN2_F32, LOG2_E_F32

from ._ops import _fmax, f32, ffma, mufu
from .lazy import lazy_rescale, lazy_rescale_rows

FRAGMENT = 32   # frg_tile in apply_exp2_convert


@dataclass
class Sm100State:
    """The SM100 softmax's running state per row: the stored (possibly stale) max, the row sum, the exact max."""

    row_max: np.ndarray   # (R,) float32, the stored (possibly stale) max; -inf before the first block
    row_sum: np.ndarray   # (R,) float32
    true_max: np.ndarray  # (R,) float32, the exact running max (for the stale-max lag statistic only)

    @classmethod
    def empty(cls, rows: int) -> "Sm100State":
        return cls(np.full(rows, -np.inf, np.float32), np.zeros(rows, np.float32),
                   np.full(rows, -np.inf, np.float32))


@dataclass
class Sm100Step:
    """What one KV block did to each row."""
    p: np.ndarray            # (R, N) float32 P = 2^x before the cast
    acc_scale: np.ndarray    # (R,) float32 factor applied to O and row_sum (1.0 when skipped or first)
    rescaled: np.ndarray     # (R,) bool: O multiplied by acc_scale != 1 path (not first, not skipped)
    skipped: np.ndarray      # (R,) bool: the max grew but stayed within rescale_threshold
    lag: np.ndarray          # (R,) float32 (true max - stored max) * scale_log2 after this block


def emulated_columns(n: int, *, freq: int, res: int = 4, start_frg: int = 0) -> np.ndarray:
    """Boolean mask over the n columns of a block: True where ``apply_exp2_convert`` uses the software exp2.

    FA4's SM100 softmax (``softmax.py`` ``apply_exp2_convert``) walks the row in fragments of FRAGMENT columns and,
    within each, sends the last ``res`` columns of every group of ``freq`` (decided per element pair) to the
    FMA-unit polynomial; the last fragment and those before ``start_frg`` use MUFU.EX2 only.

    Parameters
    ----------
    n : int
        Block width (tile_n), a multiple of FRAGMENT.
    freq : int
        ``ex2_emu_freq`` (0: no software exp2).
    res : int
        ``ex2_emu_res``.
    start_frg : int
        ``ex2_emu_start_frg``.

    Returns
    -------
    numpy.ndarray of bool, shape (n,)

    Raises
    ------
    ValueError
        When n is not a multiple of FRAGMENT or an option is negative.

    Examples
    --------
    >>> m = emulated_columns(128, freq=16, res=4)
    >>> int(m.sum()), np.flatnonzero(m)[:4].tolist()
    (24, [12, 13, 14, 15])
    >>> emulated_columns(100, freq=16)
    Traceback (most recent call last):
        ...
    ValueError: block width must be a multiple of 32, got 100
    """
    if n % FRAGMENT:
        raise ValueError(f"block width must be a multiple of {FRAGMENT}, got {n}")
    if freq < 0 or res < 0 or start_frg < 0:
        raise ValueError(f"ex2_emu_freq, ex2_emu_res, ex2_emu_start_frg must be >= 0; got {freq}, {res}, "
                         f"{start_frg}")
    frg_cnt = n // FRAGMENT
    col = np.arange(n)
    j, k = col // FRAGMENT, (col % FRAGMENT) & ~1   # fragment index and the pair's even element
    if freq == 0:
        return np.zeros(n, bool)
    return (k % freq >= freq - res) & (j < frg_cnt - 1) & (j >= start_frg)


def fadd_reduce(p: np.ndarray, init) -> np.ndarray:
    """``utils.fadd_reduce`` with arch >= 100 and N % 8 == 0: accumulators A0..A7 (A0 seeded with init + r0,
    A1 with 0.0 + r1), A_m += r[i + m] for i = 8, 16, ...; then (A0,A1)+=(A2,A3), (A4,A5)+=(A6,A7),
    (A0,A1)+=(A4,A5), return A0 + A1. All add.rn (FADD2 lanes are independent RN adds)."""
    n = p.shape[1]
    if n % 8:
        raise ValueError(f"row length must be a multiple of 8 for the arch-100 reduction, got {n}")
    p = f32(p)
    acc = p[:, :8].copy()      # the eight accumulators side by side: the same adds, one array op per step
    if init is not None:
        acc[:, 0] = f32(init) + p[:, 0]
        acc[:, 1] = np.float32(0) + p[:, 1]
    for i in range(8, n, 8):
        acc += p[:, i:i + 8]
    a0, a1 = acc[:, 0] + acc[:, 2], acc[:, 1] + acc[:, 3]
    a4, a5 = acc[:, 4] + acc[:, 6], acc[:, 5] + acc[:, 7]
    a0, a1 = a0 + a4, a1 + a5
    return a0 + a1


def update_row_max(m_blk, state: Sm100State, *, scale_log2, is_first: bool, rescale_threshold, mufu,
                   scale_ex2_ftz: bool = True):
    """``softmax.py`` ``SoftmaxSm100.update_row_max``: the new stored max and O's rescale factor, per row.

    The lazy-rescale decision is :func:`fa4num.softmax.lazy.lazy_rescale_rows` (the specification); the factor
    is acc_scale = ex2.approx.ftz(acc_scale_) from ``mufu``, 1 where the stale max is kept and on the first
    block (the correction warps are not signalled). Updates ``state.row_max`` and ``state.true_max``.

    Parameters
    ----------
    m_blk : (R,) float32
        The block's row maxima (``fmax_reduce``: max.f32, NaN ignored).
    state : Sm100State
    scale_log2, rescale_threshold : float32
    is_first : bool
    mufu : fa4num.hw.MufuModel
    scale_ex2_ftz : bool
        False: the factor through ``ex2.approx.f32`` without .ftz (SM103, ``update_row_max_from_local``).

    Returns
    -------
    (m_safe, acc_scale, rescaled, skipped) : (R,) float32, float32, bool, bool
        The max the exponent subtracts, O's factor, whether O is multiplied by a factor != 1 path (not first,
        not kept), whether the max grew but stayed within the threshold.
    """
    m_old = state.row_max
    state.true_max = m_blk if is_first else np.fmax(state.true_max, m_blk)
    m_new, m_safe, acc_scale_, keep = lazy_rescale_rows(m_old, m_blk, scale_log2=scale_log2,
                                                        rescale_threshold=rescale_threshold, is_first=is_first)
    state.row_max = m_new
    rows = m_new.shape[0]
    if is_first:
        return m_safe, np.ones(rows, np.float32), np.zeros(rows, bool), np.zeros(rows, bool)
    acc_scale = np.where(keep, np.float32(1), mufu.ex2(acc_scale_, ftz=scale_ex2_ftz)).astype(np.float32)
    return m_safe, acc_scale, ~keep, keep & (m_blk > m_old)


def scale_subtract_rowmax(s, m_safe, *, scale_log2, max_offset, fused_bias: bool = True):
    """``softmax.py`` ``SoftmaxSm100.scale_subtract_rowmax``: x = fma.rn(S, scale_log2, bias) per element.

    bias = max_offset - m_safe * scale_log2, which ptxas contracts to one FFMA (fma.rn(-m_safe, scale_log2,
    max_offset)); fused_bias=False rounds the product first (two roundings), for studies.

    Parameters
    ----------
    s : (R, N) float32
    m_safe : (R,) float32
    scale_log2, max_offset : float32
    fused_bias : bool

    Returns
    -------
    (R, N) float32
    """
    if fused_bias:
        bias = ffma(-m_safe, scale_log2, max_offset)
    else:
        bias = max_offset - m_safe * scale_log2
    return ffma(s, scale_log2, bias[:, None])


def apply_exp2_convert(x, *, mufu, emulate=None, poly_degree: int = 3, coeffs=None):
    """``softmax.py`` ``SoftmaxSm100.apply_exp2_convert``: P = 2^x in fp32, before its conversion.

    MUFU ex2.approx.ftz from ``mufu`` on every column but the ``emulate`` ones, which use ``ex2_emulation_2``
    (fa4num.ex2's variant "packed", no .ftz). The conversion P -> the input dtype (cvt.rn, fp8 .satfinite) is
    the attention layer's, which keeps P's dtype.

    Parameters
    ----------
    x : (R, N) float32
    mufu : fa4num.hw.MufuModel
    emulate : (N,) bool, optional
        From :func:`emulated_columns` (None: all MUFU).
    poly_degree, coeffs
        The software exp2's polynomial (``fa4num.ex2.poly_coeffs``).

    Returns
    -------
    (R, N) float32
    """
    from fa4num.ex2 import fa4_emulated
    p = mufu.ex2(x)
    if emulate is not None and emulate.any():
        p[:, emulate] = fa4_emulated(np.ascontiguousarray(x[:, emulate]), poly_degree, coeffs=coeffs,
                                     variant="packed")
    return p


def update_row_sum(p, row_sum, acc_scale, *, is_first: bool):
    """``softmax.py`` ``SoftmaxSm100.update_row_sum``: row_sum = fadd_reduce(P, init = RN(row_sum * acc_scale)).

    The init product is a separate FMUL (no FMA); :func:`fadd_reduce` gives the eight-accumulator order. The
    first block has no init.

    Parameters
    ----------
    p : (R, N) float32
    row_sum, acc_scale : (R,) float32
    is_first : bool

    Returns
    -------
    (R,) float32
    """
    return fadd_reduce(p, None if is_first else row_sum * acc_scale)


def softmax_step(s, state: Sm100State, *, scale_log2, is_first: bool, rescale_threshold: float = 8.0,
                 max_offset: int = 0, emulate=None, poly_degree: int = 3, coeffs=None, arch="sm90",
                 fused_bias: bool = True, scale_ex2_ftz: bool = True, block_max=None) -> Sm100Step:
    """One KV block of the SM100 softmax warp (``softmax_step`` in flash_fwd_sm100.py). Updates ``state``.

    The four steps of ``SoftmaxSm100`` in order: :func:`update_row_max` (the lazy rescale), then
    :func:`scale_subtract_rowmax`, :func:`apply_exp2_convert` and :func:`update_row_sum`.
    s: (R, N) float32 scores, masked entries -inf. emulate: (N,) bool mask from :func:`emulated_columns`
    (None: all MUFU). arch: the MUFU model (a ``fa4num.hw.MufuModel`` or its name: the measured H200 tables are
    "sm90", "libm" the statistical mode); with a bit-exact model and N % 8 == 0 the block runs as one numba
    kernel over the rows (:func:`_softmax_step_rows`: the same steps, row by row), otherwise step by step on
    arrays. fused_bias=False computes bias = RN(max_offset - RN(m*scale_log2)) (two roundings), for studies.
    scale_ex2_ftz=False: the rescale factor through the non-fast-math exp2 (``ex2.approx.f32`` without .ftz),
    as SM103 computes it (softmax.py ``update_row_max_from_local``, ``cute.math.exp2(acc_scale_)``).
    block_max: the block's row maxima ``np.fmax.reduce(s, axis=1)`` when the caller has them already (the forward
    does, for its counters), so that the (R, N) reduction runs once per block; None: computed here.
    """
    from fa4num import hw
    model = hw.mufu_model(arch)
    s = f32(s)
    sl2 = np.float32(scale_log2)
    thr = np.float32(rescale_threshold)
    offset = np.float32(max_offset)
    rows = s.shape[0]
    tabs = model.ex2_compact if s.shape[1] and s.shape[1] % 8 == 0 else None
    if tabs is not None:
        rc = horner_tuple(poly_coeffs(poly_degree, coeffs=coeffs), resolve_variant("packed"))
        emu = np.zeros(s.shape[1], np.bool_) if emulate is None else np.asarray(emulate, np.bool_)
        p = np.empty(s.shape, np.float32)
        acc_scale = np.empty(rows, np.float32)
        rescaled, skipped = np.empty(rows, np.bool_), np.empty(rows, np.bool_)
        lag = np.empty(rows, np.float32)
        row_max, row_sum = np.array(state.row_max, np.float32), np.array(state.row_sum, np.float32)
        true_max = np.array(state.true_max, np.float32)
        # fmax_reduce: max.f32 ignores NaN; exact, in any order
        m_blk = np.fmax.reduce(s, axis=1) if block_max is None else f32(block_max)
        _softmax_step_rows(np.ascontiguousarray(s), m_blk, row_max, row_sum, true_max, sl2, is_first, thr,
                           offset, emu, rc, fused_bias, scale_ex2_ftz, tabs.knots, tabs.packed, tabs.offsets, p,
                           acc_scale, rescaled, skipped, lag)
        state.row_max, state.row_sum, state.true_max = row_max, row_sum, true_max
        return Sm100Step(p, acc_scale, rescaled, skipped, lag)
    if block_max is not None:
        m_blk = f32(block_max)
    else:
        m_blk = np.fmax.reduce(s, axis=1) if s.shape[1] else np.full(rows, -np.inf, np.float32)
    with np.errstate(invalid="ignore"):
        m_safe, acc_scale, rescaled, skipped = update_row_max(m_blk, state, scale_log2=sl2, is_first=is_first,
                                                              rescale_threshold=thr, mufu=model,
                                                              scale_ex2_ftz=scale_ex2_ftz)
    x = scale_subtract_rowmax(s, m_safe, scale_log2=sl2, max_offset=offset, fused_bias=fused_bias)
    p = apply_exp2_convert(x, mufu=model, emulate=emulate, poly_degree=poly_degree, coeffs=coeffs)
    state.row_sum = update_row_sum(p, state.row_sum, acc_scale, is_first=is_first)
    with np.errstate(invalid="ignore"):
        lag = (state.true_max.astype(np.float64) - state.row_max) * np.float64(sl2)
    lag = np.where(np.isfinite(lag), lag, 0).astype(np.float32)
    return Sm100Step(p, acc_scale, rescaled, skipped, lag)


@njit(cache=True, nogil=True, inline="always")
def _ex2(x, ftz, knots, packed, offsets):
    b = f32_to_u32(x)
    return u32_to_f32(ex2_ftz_bits_compact(b, knots, packed, offsets) if ftz else
                      ex2_bits_compact(b, knots, packed, offsets))


@njit(cache=True, nogil=True, inline="always")
def _update_row_max_row(m_old, m_blk, sl2, rescale_threshold, is_first, ftz, knots, packed, offsets):
    """:func:`update_row_max` for one row: (m_new, m_safe, acc_scale, rescaled, skipped)."""
    m_new, m_safe, scale_, keep = lazy_rescale(m_old, m_blk, sl2, rescale_threshold, is_first)
    if is_first or keep:
        return m_new, m_safe, np.float32(1), False, keep and m_blk > m_old
    return m_new, m_safe, _ex2(scale_, ftz, knots, packed, offsets), True, False


@njit(cache=True, nogil=True, inline="always")
def _apply_exp2_convert_row(s, sl2, bias, emulate, rc, knots, packed, offsets, p):
    """:func:`scale_subtract_rowmax` and :func:`apply_exp2_convert` for one row, into p."""
    for j in range(s.shape[0]):
        x = fma_rn_f32(s[j], sl2, bias)
        if emulate[j]:
            # the floor form of add.rm covers x <= 2^22 (the softmax range); beyond it, the exact steps
            v, beyond = fast_steps(x, rc, False, False, False, False)
            p[j] = exact_steps(x, rc, False, False, False) if beyond else v
        else:
            p[j] = _ex2(x, True, knots, packed, offsets)


@njit(cache=True, nogil=True, inline="always")
def _update_row_sum_row(p, row_sum, scale, is_first):
    """:func:`update_row_sum` for one row: ``fadd_reduce``'s eight accumulators (A0 seeded with
    RN(row_sum * acc_scale) + P0, A1 with 0 + P1 unless first)."""
    n = p.shape[0]
    a0, a1, a2, a3 = p[0], p[1], p[2], p[3]
    a4, a5, a6, a7 = p[4], p[5], p[6], p[7]
    if not is_first:
        a0 = row_sum * scale + p[0]
        a1 = np.float32(0) + p[1]
    for c in range(8, n, 8):
        a0, a1, a2, a3 = a0 + p[c], a1 + p[c + 1], a2 + p[c + 2], a3 + p[c + 3]
        a4, a5, a6, a7 = a4 + p[c + 4], a5 + p[c + 5], a6 + p[c + 6], a7 + p[c + 7]
    a0, a1, a4, a5 = a0 + a2, a1 + a3, a4 + a6, a5 + a7
    return (a0 + a4) + (a1 + a5)


@njit(cache=True, nogil=True)
def _softmax_step_rows(s, m_blks, row_max, row_sum, true_max, sl2, is_first, rescale_threshold, max_offset,
                       emulate, rc, fused_bias, scale_ex2_ftz, knots, packed, offsets, p, acc_scale, rescaled, skipped,
                       lag):
    """:func:`softmax_step`'s four steps row by row, given the block's row maxima (state arrays updated in
    place, the step's arrays written): update_row_max (:func:`fa4num.softmax.lazy.lazy_rescale`), the FFMA
    bias and x = fma.rn(S, scale_log2, bias), P from ``ex2_emulation_2`` (fa4num.ex2's ``fast_steps``, or its
    ``exact_steps`` where the fast form reports an input beyond its range) on the emulated columns and MUFU.EX2
    (compact tables) elsewhere, and ``fadd_reduce``'s eight accumulators. One pass over the tile instead of a
    few dozen numpy passes, without the GIL."""
    for i in range(s.shape[0]):
        m_blk = m_blks[i]
        tm = m_blk if is_first else _fmax(true_max[i], m_blk)
        true_max[i] = tm
        m_new, m_safe, scale, rescaled[i], skipped[i] = _update_row_max_row(
            row_max[i], m_blk, sl2, rescale_threshold, is_first, scale_ex2_ftz, knots, packed, offsets)
        row_max[i] = m_new
        acc_scale[i] = scale
        bias = fma_rn_f32(-m_safe, sl2, max_offset) if fused_bias else max_offset - m_safe * sl2
        _apply_exp2_convert_row(s[i], sl2, bias, emulate, rc, knots, packed, offsets, p[i])
        row_sum[i] = _update_row_sum_row(p[i], row_sum[i], scale, is_first)
        d = (np.float64(tm) - np.float64(m_new)) * np.float64(sl2)
        lag[i] = np.float32(d) if abs(d) < np.inf else np.float32(0)


def finalize(state: Sm100State, *, scale_log2, max_offset: int = 0, arch: str = "sm90", sink=None,
             v_descale=1.0):
    """Correction-warp epilogue: (scale, LSE) per row (flash_fwd_sm100.py ``correction_loop``).

    A learnable sink (float32 per row, natural-log units) is folded in first (softmax.py
    ``apply_learnable_sink``): a row with no key gets m = RN(sink * RN(LOG2_E / scale_log2)) and
    row_sum = 2^max_offset; otherwise row_sum += ex2.approx.ftz(RN(fma.rn(sink, LOG2_E, -RN(m * scale_log2))
    + max_offset)). Then scale = RN(rcp.approx.ftz(row_sum, 1.0 if zero/NaN) * v_descale) and
    LSE = RN(fma.rn(m, scale_log2, RN(lg2.approx.ftz(row_sum) - max_offset)) * LN2), -inf if zero/NaN.
    (Emulated from source, not run on a Blackwell GPU.)"""
    rs = state.row_sum
    m = state.row_max
    sl2 = np.float32(scale_log2)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if sink is not None:
            sink = np.broadcast_to(f32(sink), m.shape)
            empty = m == -np.inf
            x = ffma(sink, LOG2_E_F32, -(m * sl2)) + np.float32(max_offset)
            added = rs + mufu("ex2", arch)(x)
            m = np.where(empty, sink * (LOG2_E_F32 / sl2), m).astype(np.float32)
            rs = np.where(empty, np.float32(2.0 ** max_offset), added).astype(np.float32)
        zero_or_nan = (rs == 0) | np.isnan(rs)
        safe = np.where(zero_or_nan, np.float32(1), rs).astype(np.float32)
        scale = mufu("rcp", arch)(safe) * np.float32(v_descale)
        lg = mufu("lg2", arch)(safe) - np.float32(max_offset)
        lse = ffma(m, sl2, lg) * LN2_F32
    return scale.astype(np.float32), np.where(zero_or_nan, np.float32(-np.inf), lse).astype(np.float32)


# ---- the dedicated hd256 forward of 4.0.0b22-b33 (sm100_hd256_2cta_fmha_forward.py) ---------------------------
def quarter_row_sum(p, row_sum_scaled):
    """The dedicated hd256 kernel's row sum (``BlackwellFusedMultiHeadAttentionForward.softmax_step``): the row
    is cut into 4 quarters of N/4 columns; quarter f accumulates its column pairs (c, c + 1) into the two lanes
    of an ``add_packed_f32x2`` accumulator L_f, with L_0 seeded (h, h), h = RN(row_sum * acc_scale) where
    acc_scale carries a factor 1/2 (so the two lanes together hold the old sum) and L_1..L_3 seeded 0; then
    L_0 += L_1, L_2 += L_3, L_0 += L_2 (lane-wise), and the sum is L_0[0] + L_0[1]. All add.rn.

    Parameters
    ----------
    p : (R, N) float32, N a multiple of 8
    row_sum_scaled : (R,) float32, h

    Returns
    -------
    (R,) float32
    """
    p = f32(p)
    n = p.shape[1]
    if n % 8:
        raise ValueError(f"row length must be a multiple of 8 for the quarter reduction, got {n}")
    q = n // 4
    lanes = np.zeros((p.shape[0], 4, 2), np.float32)
    lanes[:, 0, 0] = lanes[:, 0, 1] = f32(row_sum_scaled)
    for c in range(0, q, 2):
        lanes += p[:, [c, c + 1, q + c, q + c + 1, 2 * q + c, 2 * q + c + 1, 3 * q + c, 3 * q + c + 1]].reshape(
            -1, 4, 2)
    l0 = lanes[:, 0] + lanes[:, 1]
    l2 = lanes[:, 2] + lanes[:, 3]
    l0 = l0 + l2
    return l0[:, 0] + l0[:, 1]


def softmax_step_hd256_dedicated(s, state: Sm100State, *, scale_log2, is_first: bool, emulate=None,
                                 poly_degree: int = 3, coeffs=None, arch="sm90", block_max=None) -> Sm100Step:
    """One KV block of the dedicated hd256 kernel of flash-attn-4 4.0.0b22-b33
    (``sm100_hd256_2cta_fmha_forward.py`` ``softmax_step`` and ``correction_rescale``). Updates ``state``.

    No lazy rescale: m_new = max(m_old, block max), m_safe = m_new (0 if -inf); O's factor is
    ex2.approx.ftz(RN(scale_log2 * RN(m_old - m_safe))) on every block after the first (1.0 when the max did not
    grow); x = fma.rn(S, scale_log2, RN(RN(0 - m_safe) * scale_log2)); P from MUFU / ``ex2_emulation_2`` on the
    columns of :func:`emulated_columns` (the same rule); the row sum :func:`quarter_row_sum` seeded with
    RN(row_sum * RN(factor * 0.5)). (Emulated from source, not run on a Blackwell GPU.)
    """
    from fa4num import hw
    model = hw.mufu_model(arch)
    s = f32(s)
    sl2 = np.float32(scale_log2)
    m_blk = np.fmax.reduce(s, axis=1) if block_max is None else f32(block_max)
    with np.errstate(invalid="ignore", over="ignore"):
        m_old = state.row_max
        m_new = np.fmax(m_old, m_blk).astype(np.float32)
        m_safe = np.where(m_new == -np.inf, np.float32(0), m_new).astype(np.float32)
        factor = model.ex2(f32(sl2 * f32(m_old - m_safe)))
        x = ffma(s, sl2, f32(f32(np.float32(0) - m_safe) * sl2)[:, None])
        p = apply_exp2_convert(x, mufu=model, emulate=emulate, poly_degree=poly_degree, coeffs=coeffs)
        half = f32(factor * np.float32(0.5))
        state.row_sum = quarter_row_sum(p, f32(state.row_sum * half))
    state.row_max = m_new
    state.true_max = m_new
    rows = s.shape[0]
    acc = np.ones(rows, np.float32) if is_first else f32(factor)
    zeros = np.zeros(rows, np.float32)
    return Sm100Step(p, acc, np.full(rows, not is_first), np.zeros(rows, bool), zeros)


def finalize_hd256_dedicated(state: Sm100State, *, softmax_scale, arch: str = "sm90"):
    """The dedicated hd256 kernel's epilogue (``correction_epilog``, ``store_sum_max``): scale = RN(1 / row_sum)
    (an IEEE division, ``scale_output / row_sum`` with scale_output 1), 0 for a zero or NaN row sum; LSE =
    fma.rn(softmax_scale, m, RN(lg2.approx.ftz(row_sum) * LN2)) (``cute.math.log(fastmath=True)``, the
    multiply-add contracted as ptxas does for the SM100 bias), -inf for a zero or NaN row sum.
    (Emulated from source, not run on a Blackwell GPU.)"""
    rs = f32(state.row_sum)
    m = f32(state.row_max)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        zero_or_nan = (rs == 0) | np.isnan(rs)
        safe = np.where(zero_or_nan, np.float32(1), rs).astype(np.float32)
        scale = np.where(zero_or_nan, np.float32(0), np.float32(1) / safe).astype(np.float32)
        ln = f32(mufu("lg2", arch)(safe) * LN2_F32)
        lse = ffma(np.float32(softmax_scale), m, ln)
    return scale, np.where(zero_or_nan, np.float32(-np.inf), lse).astype(np.float32)
