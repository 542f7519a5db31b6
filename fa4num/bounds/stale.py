"""A proved lower bound on what the stale max costs in the worst case (docs/bounds.md, section 5.9).

The construction: softmax_scale = ln 2 (scale_log2 = RN(RN(ln 2) LOG2_E) = 1 exactly), one query row q = e_0 + h e_1,
tile_n + 1 keys. Key tile_n, alone in the block FA4 visits first, has score 0 and v = 0; key 0 has score h and
value v0; keys 1..tile_n-1 have score -200 (x <= -127: both exp2 paths give P = 0 exactly) and v = 0. At any
threshold tau >= h (SM100, ``update_row_max``) the row keeps the stale max 0 and casts P_0 = ex2(h) ~ 2^h to bf16;
at tau = 0 it rescales and casts P_0 = ex2(0) ~ 1. Every other step is exact or enclosed by its hardware bound, so
the output of each run is known to lie in an interval; where both ends round to one bf16 value the output is that
value, and its distance to o* = v0 / (1 + 2^(-lambda h)) is computed in 60-digit arithmetic.
"""
from __future__ import annotations

import math

import ml_dtypes
import mpmath
import numpy as np

from fa4num.softmax import scale_log2_of

from .attention import _row_sum_depth, _sw_bound
from .exp2 import mufu_error_bounds

__all__ = ["peaked_rows", "stale_max_construction", "stale_max_lower_bound"]

_BF = ml_dtypes.bfloat16


def stale_max_construction(height, v0, *, head_dim=64, tile_n=128):
    """(q, k, v) of the construction (bf16, shape (1, n, 1, head_dim)); ``height`` and ``v0`` must be bf16 values.

    Parameters
    ----------
    height : float
        The score h of key 0 above the first block's max 0 (0 < h; a bf16 value).
    v0 : float
        Every entry of key 0's value row (a bf16 value).
    head_dim, tile_n : int
        Head dimension (>= 2) and FA4's KV block width.

    Returns
    -------
    tuple of numpy.ndarray

    Examples
    --------
    >>> q, k, v = stale_max_construction(6.28125, 1.125)
    >>> q.shape, k.shape
    ((1, 1, 1, 64), (1, 129, 1, 64))
    """
    if not (float(height) > 0 and float(np.float32(height).astype(_BF)) == float(height)):
        raise ValueError(f"height must be a positive bf16 value, got {height!r}")
    if float(np.float32(v0).astype(_BF)) != float(v0) or not math.isfinite(float(v0)):
        raise ValueError(f"v0 must be a finite bf16 value, got {v0!r}")
    n = tile_n + 1
    q = np.zeros((1, 1, 1, head_dim), np.float32)
    k = np.zeros((1, n, 1, head_dim), np.float32)
    v = np.zeros((1, n, 1, head_dim), np.float32)
    q[0, 0, 0, 0], q[0, 0, 0, 1] = 1.0, height
    k[0, 1:tile_n, 0, 0] = -200.0
    k[0, 0, 0, 1] = 1.0
    v[0, 0, 0, :] = v0
    return tuple(a.astype(_BF) for a in (q, k, v))


def peaked_rows(seed, *, rows=64, head_dim=64, tile_n=128):
    """The random stale-max family of docs/bounds.md section 5.9: softmax_scale ln 2 (scores in log2 units); the
    block FA4 visits first has max 0 and scores on a 1/16 grid in [-3, 0]; the other block holds one key 4-6 above
    it (per row, on a 1/64 grid), so a threshold of 8 keeps the stale max and casts that key's P = 2^(4..6) to bf16,
    where threshold 0 rescales and casts it as 1.

    Parameters
    ----------
    seed : int
    rows, head_dim, tile_n : int
        Query rows, head dimension (>= 2) and FA4's KV block width (2 tile_n keys).

    Returns
    -------
    tuple of numpy.ndarray
        (q, k, v), bf16, shape (1, n, 1, head_dim); v ~ N(0, 1).

    Examples
    --------
    >>> q, k, v = peaked_rows(0, rows=4)
    >>> q.shape, k.shape
    ((1, 4, 1, 64), (1, 256, 1, 64))
    """
    rng = np.random.default_rng(seed)
    q, k = np.zeros((1, rows, 1, head_dim), np.float32), np.zeros((1, 2 * tile_n, 1, head_dim), np.float32)
    q[0, :, 0, 0] = 1.0
    q[0, :, 0, 1] = np.round(rng.uniform(4, 6, rows) * 64) / 64
    k[0, :, 0, 0] = np.round(rng.uniform(-3, 0, 2 * tile_n) * 16) / 16
    k[0, tile_n, 0, 0] = 0.0
    peak = rng.integers(0, tile_n)
    k[0, peak, 0, 0], k[0, peak, 0, 1] = 0.0, 1.0
    v = rng.standard_normal((1, 2 * tile_n, 1, head_dim), dtype=np.float32)
    return tuple(a.astype(_BF) for a in (q, k, v))


def _rn_bf16(x: mpmath.mpf) -> float:
    """Round to nearest even bf16 of a real (exact: float64 holds x to 53 bits, and bf16 RN of that float64 is
    the RN of x unless x lies within 2^-53 relative of a bf16 midpoint, which the caller's interval excludes)."""
    return float(np.float32(float(x)).astype(_BF)) if abs(float(x)) < 2.0 ** 100 else math.nan


def stale_max_lower_bound(height, v0, *, threshold=8.0, tile_n=128):
    """Proved errors of the construction at ``threshold`` (>= height) and at threshold 0, for fa4-sm100 in bf16.

    Parameters
    ----------
    height, v0 : float
        As :func:`stale_max_construction`.
    threshold : float
        The stale run's rescale_threshold (>= height, so the max 0 is kept).
    tile_n : int
        FA4's KV block width.

    Returns
    -------
    dict
        "stale" and "fresh" (threshold 0): each None when the enclosure does not settle the output's bf16 value,
        else {"out": the output, "error": |out - o*| (every kernel within the hardware models gives exactly
        this)}; "o_exact": o*; "lower_bound": the stale run's error (the proved lower bound on the worst case at
        ``threshold``); "enclosures": the output intervals; "cast": the stale run's cast interval of key 0's P and
        its bf16 value g (None when the ends round apart).

    Examples
    --------
    >>> r = stale_max_lower_bound(6.28125, 1.125)
    >>> round(r["lower_bound"], 7), round(r["fresh"]["error"], 7)
    (0.0064685, 0.001344)
    """
    h, v = float(height), float(v0)
    if not 0 < h <= float(threshold):
        raise ValueError(f"height must be in (0, threshold] = (0, {threshold}], got {height!r}")
    if float(scale_log2_of(math.log(2))) != 1.0:
        raise ValueError("the construction needs scale_log2 = 1 exactly")
    mpmath.mp.dps = 60
    mb = mufu_error_bounds("sm90")
    eps = max(mb.ex2_relative, _sw_bound(3, None, float(threshold) + 1.0).relative)
    u = mpmath.mpf(2) ** -24
    D = int(_row_sum_depth(True, 2, tile_n)) + 1
    gD = (1 + u) ** D - 1
    rcp = mpmath.mpf(mb.rcp_relative)
    lam = mpmath.mpf(math.log(2)) / mpmath.log(2)        # softmax_scale (a float64) times log2 e, exactly
    # the exact output: key 0 (score h, value v0) against key tile_n (score 0) and the tile_n - 1 keys at -200,
    # whose exact weights 2^(-lambda (200 + h)) are tiny but not 0 (the kernel's P of them is 0)
    o_star = v / (1 + mpmath.power(2, -lam * h) + (tile_n - 1) * mpmath.power(2, -lam * (200 + h)))
    E = mpmath.mpf(eps)
    tiny = mpmath.mpf(2) ** -60                          # slack for the 60-digit evaluation

    def settle(num_lo, num_hi, den_lo, den_hi):
        lo = num_lo / den_hi * (1 - rcp) * (1 - u) * (1 - tiny)
        hi = num_hi / den_lo * (1 + rcp) * (1 + u) * (1 + tiny)
        y_lo, y_hi = _rn_bf16(lo), _rn_bf16(hi)
        return (float(lo), float(hi)), (y_lo if y_lo == y_hi else None)

    def row(P0_lo, P0_hi, other_lo, other_hi, g):
        # O = g v0 exactly (one nonzero 8 x 8-bit product per chunk, exact under truncation to 25 bits; RZ of an
        # fp32 value is exact); the row sum (P0 + the other's P) (1 +- gamma_D); out = RN(O rcp(l)) RN_bf16
        num = mpmath.mpf(g) * abs(v)
        enc, y = settle(num, num, (P0_lo + other_lo) * (1 - gD), (P0_hi + other_hi) * (1 + gD))
        if y is not None and v < 0:
            enc, y = (-enc[1], -enc[0]), -y
        return enc, y

    out = {"o_exact": float(o_star), "enclosures": {}}
    # stale run: P0 = ex2(h) (x = RN(h * 1 + RN(0 * 1)) = h exactly), key tile_n's P = ex2(0)
    p = mpmath.power(2, h)
    g_lo, g_hi = _rn_bf16(p * (1 - E)), _rn_bf16(p * (1 + E))
    out["cast"] = {"lo": float(p * (1 - E)), "hi": float(p * (1 + E)), "g": g_lo if g_lo == g_hi else None}
    runs = {}
    if g_lo == g_hi:
        runs["stale"] = row(p * (1 - E), p * (1 + E), 1 - E, 1 + E, g_lo)
    # fresh run (threshold 0): max raised to h, P0 = ex2(RN(h - RN(h))) = ex2(0), cast to 1; key tile_n's P
    # ex2(0) times alpha = ex2(RN(RN(0 - h) * 1)) = ex2(-h), and RN(l alpha) inside gamma_D
    a = mpmath.power(2, -h)
    mufu = mpmath.mpf(mb.ex2_relative)
    if _rn_bf16(1 - E) == _rn_bf16(1 + E) == 1.0:
        runs["fresh"] = row(1 - E, 1 + E, (1 - E) * a * (1 - mufu), (1 + E) * a * (1 + mufu), 1.0)
    for name in ("stale", "fresh"):
        if name in runs and runs[name][1] is not None:
            enc, y = runs[name]
            out["enclosures"][name] = enc
            out[name] = {"out": y, "error": float(abs(mpmath.mpf(y) - o_star))}
        else:
            out[name] = None
    out["lower_bound"] = out["stale"]["error"] if out["stale"] else None
    return out
