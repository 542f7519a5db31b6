"""FA4's Hopper online softmax (``flash_attn/cute/softmax.py`` class ``Softmax`` with arch=80 reductions, as
``flash_fwd_sm90.py`` creates it), bit for bit, vectorised over rows.

Thread layout (wgmma m64nNk16 fp32 accumulator, ``quack.layout_utils.reshape_acc_to_mn``): the four lanes
q = 0..3 of a quad share a row; lane q holds columns 8j + 2q and 8j + 2q + 1 for j = 0 .. N/8 - 1, in that
order. Row max: exact, so only its NaN-ignoring ``max.f32`` matters. Row sum: each lane keeps its own partial
sum over all KV blocks (``fadd_reduce`` with arch < 100 = a sequential left fold), and ``finalize`` adds the
four partials with a butterfly (shuffle xor 1, then xor 2).

Per block (``Softmax.online_softmax``, PTX read from the compiled kernel):
  m = max(m_prev, max_j S);  m_safe = 0 if m == -inf else m
  x = fma.rn(S, scale_log2, -RN(m_safe * scale_log2))    # mul.f32 + sub.f32, contracted to FFMA by ptxas
  P = ex2.approx.ftz(x)
  row_scale = ex2.approx.ftz(RN(RN(m_prev - m_safe) * scale_log2))   (1.0 on the first block)
  lane sum: first block 0.0 + P0 + P1 + ...; later fma.rn(sum, row_scale, P0) + P1 + ...
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from fa4num.constants import LN2_F32, LOG2_E_F32
from fa4num.fp.scalar import f32_to_u32, fma_rn_f32, u32_to_f32
from fa4num.hw.mufu import ex2_ftz_bits_compact

from ._ops import _fmax, ex2_compact, f32, ffma, mufu

LANES = 4   # threads of a quad that share one accumulator row


@dataclass
class Sm90State:
    """Running statistics of a set of rows: the quad-reduced max and each lane's partial row sum."""
    row_max: np.ndarray   # (R,) float32, -inf before the first block
    row_sum: np.ndarray   # (R, 4) float32 per-lane partial sums

    @classmethod
    def empty(cls, rows: int) -> "Sm90State":
        return cls(np.full(rows, -np.inf, np.float32), np.zeros((rows, LANES), np.float32))


def lane_columns(n: int) -> np.ndarray:
    """(4, n/4) column indices each lane of a quad holds, in the lane's register order."""
    if n % 8:
        raise ValueError(f"block width must be a multiple of 8 (wgmma n8 groups), got {n}")
    cols = np.arange(n).reshape(n // 8, LANES, 2)      # [j, q, e] -> 8j + 2q + e
    return cols.transpose(1, 0, 2).reshape(LANES, n // 4)


def online_softmax(s, state: Sm90State, *, scale_log2, is_first: bool, arch: str = "sm90",
                   ffma_exponent: bool = True, block_max=None) -> tuple[np.ndarray, np.ndarray]:
    """One KV block of ``Softmax.online_softmax`` (softmax.py). Updates ``state`` in place.

    s: (R, N) float32 scores with masked entries already -inf. Returns (P fp32 (R, N), row_scale (R,)).
    ffma_exponent=False evaluates the exponent as two roundings, RN(RN(S*scale) - RN(m*scale)) (the PTX
    before ptxas contraction), for studies.
    With a bit-exact MUFU model and the FFMA exponent, the block runs as one numba kernel over the rows
    (:func:`_online_softmax_rows`, the same operations in the same order); otherwise array by array.
    block_max: the block's row maxima ``np.fmax.reduce(s, axis=1)`` when the caller has them already (the forward
    does, for its counters), so that the (R, N) reduction runs once per block; None: computed here.
    """
    s = f32(s)
    sl2 = np.float32(scale_log2)
    tabs = ex2_compact(arch) if ffma_exponent and s.shape[1] and s.shape[1] % 8 == 0 else None
    if tabs is not None:
        p = np.empty(s.shape, np.float32)
        row_scale = np.empty(s.shape[0], np.float32)
        row_max = np.array(state.row_max, np.float32)
        row_sum = np.array(state.row_sum, np.float32)
        # fmax_reduce + warp_reduction_max (max.f32 ignores NaN; exact, so the order does not matter), by numpy's
        # vectorised reduction
        m_blk = np.fmax.reduce(s, axis=1) if block_max is None else f32(block_max)
        _online_softmax_rows(np.ascontiguousarray(s), m_blk, row_max, row_sum, sl2, is_first, tabs.knots,
                             tabs.packed, tabs.offsets, p, row_scale)
        state.row_max, state.row_sum = row_max, row_sum
        return p, row_scale
    ex2 = mufu("ex2", arch)
    # fmax_reduce + warp_reduction_max: max.f32 ignores NaN; exact, so the order does not matter
    if block_max is not None:
        m_blk = f32(block_max)
    else:
        m_blk = np.fmax.reduce(s, axis=1) if s.shape[1] else np.full(s.shape[0], -np.inf, np.float32)
    m_prev = state.row_max
    m = m_blk if is_first else np.fmax(m_blk, m_prev)
    state.row_max = m.astype(np.float32)
    m_safe = np.where(m == -np.inf, np.float32(0), m).astype(np.float32)
    t = m_safe * sl2
    if ffma_exponent:
        x = ffma(s, sl2, -t[:, None])
    else:
        x = s * sl2 - t[:, None]
    p = ex2(x)
    if is_first:
        row_scale = np.ones(s.shape[0], np.float32)
    else:
        row_scale = ex2((m_prev - m_safe) * sl2)
    lanes = p[:, lane_columns(s.shape[1])]            # (R, 4, N/4)
    if is_first:
        acc = lanes[:, :, 0] + np.float32(0)
    else:
        acc = ffma(state.row_sum, row_scale[:, None], lanes[:, :, 0])
    for i in range(1, lanes.shape[2]):
        acc = acc + lanes[:, :, i]
    state.row_sum = acc
    return p, row_scale


@njit(cache=True, nogil=True)
def _online_softmax_rows(s, m_blks, row_max, row_sum, sl2, is_first, knots, packed, offsets, p, row_scale):
    """:func:`online_softmax`'s array path, row by row, given the block's row maxima (row_max, row_sum updated in
    place; P and row_scale written): the running max, x = fma.rn(S, scale_log2, -RN(m_safe * scale_log2)),
    P = ex2.approx.ftz(x) through the compact MUFU tables, row_scale, and the four lanes' sums (lane q adds
    columns 8j + 2q, 8j + 2q + 1 in register order). One pass over the tile instead of a dozen numpy passes,
    without the GIL."""
    r, n = s.shape
    for i in range(r):
        m_blk = m_blks[i]
        m_prev = row_max[i]
        m = m_blk if is_first else _fmax(m_blk, m_prev)
        row_max[i] = m
        m_safe = np.float32(0) if m == -np.inf else m
        neg_t = -(m_safe * sl2)
        for j in range(n):
            x = fma_rn_f32(s[i, j], sl2, neg_t)
            p[i, j] = u32_to_f32(ex2_ftz_bits_compact(f32_to_u32(x), knots, packed, offsets))
        if is_first:
            rs = np.float32(1)
        else:
            rs = u32_to_f32(ex2_ftz_bits_compact(f32_to_u32((m_prev - m_safe) * sl2), knots, packed, offsets))
        row_scale[i] = rs
        for q in range(LANES):
            c0 = 2 * q
            acc = p[i, c0] + np.float32(0) if is_first else fma_rn_f32(row_sum[i, q], rs, p[i, c0])
            acc = acc + p[i, c0 + 1]
            for c in range(c0 + 8, n, 8):
                acc = acc + p[i, c]
                acc = acc + p[i, c + 1]
            row_sum[i, q] = acc


def finalize(state: Sm90State, *, scale_log2, arch: str = "sm90", sink=None) -> tuple[np.ndarray, np.ndarray]:
    """``Softmax.finalize``: (row_scale = rcp.approx.ftz(row_sum), LSE) per row.

    Butterfly over the quad: (l0 + l1) + (l2 + l3) (fp32 add is commutative, so every lane gets these bits).
    Without a sink: LSE = RN(fma.rn(m, scale_log2, lg2(row_sum)) * LN2).
    With a learnable sink (float32 per row, natural-log units): m_scaled = RN(m * scale_log2), or
    RN(sink * LOG2_E) for a row with no key (m = -inf); row_sum += ex2.approx.ftz(RN(RN(sink * LOG2_E) -
    m_scaled)); LSE = RN(RN(m_scaled + lg2(row_sum)) * LN2). No FMA contraction there: both products feed
    the select, which matches the H200's bits (an FFMA variant misses 7 of 2,500 sink LSEs).
    Zero or NaN row sum -> scale rcp(1.0), LSE -inf.
    """
    rs = state.row_sum
    total = (rs[:, 0] + rs[:, 1]) + (rs[:, 2] + rs[:, 3])
    m = state.row_max
    sl2 = np.float32(scale_log2)
    with np.errstate(invalid="ignore", over="ignore"):
        if sink is not None:
            sink = np.broadcast_to(f32(sink), m.shape)
            m_scaled = np.where(m == -np.inf, sink * LOG2_E_F32, m * sl2).astype(np.float32)
            total = total + mufu("ex2", arch)(sink * LOG2_E_F32 - m_scaled)
        zero_or_nan = (total == 0) | np.isnan(total)
        safe = np.where(zero_or_nan, np.float32(1), total).astype(np.float32)
        rcp = mufu("rcp", arch)(safe)
        lg = mufu("lg2", arch)(safe)
        if sink is None:
            lse = ffma(m, sl2, lg) * LN2_F32
        else:
            lse = (m_scaled + lg) * LN2_F32
    lse = np.where(zero_or_nan, np.float32(-np.inf), lse).astype(np.float32)
    return rcp, lse
