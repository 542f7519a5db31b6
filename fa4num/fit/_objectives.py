"""Objectives measured through the bit-exact FA4 exp2 emulation (fa4num.ex2.fa4_emulated, packed variant =
``ex2_emulation_2`` of flash_attn/cute/utils.py, the SM100 softmax path), and the searches that use them.

evaluated_error(coeffs)
    max over EVERY fp32 x in [0, 1) (bit patterns 0x00000000-0x3F7FFFFF, 1,065,353,216 inputs) of
    |P(x)/2^x - 1|, P the emulated fp32 result; 2^x in float64 (error ~1e-16, far below what is measured).
bf16_mismatch_share(coeffs)
    share of the softmax domain x in [-127, 0], under the uniform (Lebesgue) measure, whose bf16 P
    (cvt.rn.bf16.f32 of the emulated P, fa4num.fp.to_bf16) differs from the correctly rounded bf16 of 2^x.
    Every fp32 x stands for the length it occupies (its spacing), so the share is exact on the fp32 lattice:
      * x in [-126, -1]: P = 2^n p(f) and RN_bf16(2^x) = 2^n RN_bf16(2^f) with n = floor(x), f = x - n exact,
        so within the binade 2^(k-1) <= |x| < 2^k (spacing 2^(k-24)) the share is the share over every
        fraction f in [0, 1) on the grid 2^(k-24); these grids are sub-grids of the 2^-23 grid, which is
        evaluated once (8,388,608 fractions) and averaged per binade with weights 1, 2, 4, 8, 16, 32, 62;
      * x in [-127, -126): every fp32 value evaluated directly (P is subnormal; weight 1);
      * x in (-1, 0): every fp32 value in each binade 2^-(j+1) <= |x| < 2^-j, j = 0..23, evaluated directly
        (the fraction f = RN(1 + x) is rounded there; weights 2^-(j+1)); |x| < 2^-24 (a 3.7e-10 share of the
        domain) is left out.
    ``value`` is the share over [-126, 0) and ``value_with_subnormal`` over [-127, 0). On [-127, -126) FA4's
    exponent add produces a mis-decoded subnormal (0.m * 2^-126 instead of 1.m * 2^-127) for ANY polynomial,
    so about 99.5 % of that slice mismatches whatever the coefficients; it is reported but is not what a
    coefficient search can change. ``parts`` holds the share of each piece.
"""
from __future__ import annotations

import functools
from fractions import Fraction

import flint
import numpy as np
from numba import njit, prange

from fa4num.fp.reference import exp2_cr_bf16
from fa4num.fp.scalar import f32_to_u32, f64_to_u64 as _f64_to_u64, u64_to_f64 as _u64_to_f64

from fa4num.ex2 import fa4_emulated
from fa4num.fp import exp2_cr
from fa4num.fp.convert import f32_to_bf16_bits

from ._certify import _float_up
from ._remez import Problem
from ._series import err_series
from ._target import EXP2, to_arb

_EVAL_INPUTS = 0x3F800000  # fp32 bit patterns of [0, 1)
_CHUNK = 1 << 24


@functools.lru_cache(maxsize=1)   # 32 MB, built on first use rather than at import (the fit CLI may not need it)
def _frac_grid() -> np.ndarray:
    """k * 2^-23 for k < 2^23, in fp32 (exact: k has at most 23 bits and the scaling is a power of two)."""
    return np.arange(1 << 23, dtype=np.float32) * np.float32(2.0 ** -23)



# 1/k! for the Taylor polynomial of exp at 0, degree 13: for 0 <= t <= ln 2 its remainder is below
# t^14/14! * e^t < 2e-13, so the polynomial gives 2^x to a relative 2e-13 (plus float64 rounding, ~1e-15)
_EXP_TAYLOR = np.array([1.0 / np.prod(np.arange(1, k + 1, dtype=np.float64)) for k in range(14)])
_SCREEN_SLACK = 1e-12   # > |screened error - true error| (2e-13 truncation + float64 rounding)


@njit(cache=True, inline="always")
def _screened(xi, pi, taylor):
    """|p/2^x - 1| with 2^x from the Taylor polynomial (no libm call, so loops over it vectorise)."""
    tt = np.float64(xi) * 0.6931471805599453
    approx = taylor[13]
    for k in range(12, -1, -1):
        approx = approx * tt + taylor[k]
    return abs(np.float64(pi) / approx - 1.0)


@njit(parallel=True, cache=True)
def _screen_max(x, p):
    nthreads = 64
    part = np.zeros(nthreads)
    step = (x.size + nthreads - 1) // nthreads
    taylor = _EXP_TAYLOR
    for t in prange(nthreads):
        # max over the int64 bits of the errors (>= 0, NaN skipped as before): an integer max reduction
        # vectorises without fastmath, a float max with NaN rules does not
        acc = np.int64(0)
        for i in range(t * step, min(x.size, (t + 1) * step)):
            e = _screened(x[i], p[i], taylor)
            acc = max(acc, np.int64(_f64_to_u64(e if e == e else 0.0)))
        part[t] = _u64_to_f64(np.uint64(acc))
    return part.max()


@njit(parallel=True, cache=True)
def _screen_mask(x, p, threshold, mask):
    taylor = _EXP_TAYLOR
    for i in prange(x.size):
        mask[i] = _screened(x[i], p[i], taylor) >= threshold


def _screen_hits(x, p, threshold):
    """Indices whose screened error reaches ``threshold`` (few: the neighbourhood of the max)."""
    mask = np.empty(x.size, np.bool_)
    _screen_mask(x, p, threshold, mask)
    return np.flatnonzero(mask)


def _max_rel(x, p, best_so_far):
    """(max |p/2^x - 1|, its index) over x in [0, 1], or (best_so_far, -1) when nothing beats it.

    The screened errors are within _SCREEN_SLACK of the true ones, so only inputs whose screened error
    reaches the screened max minus twice the slack can hold the true max: those are recomputed with
    float64 exp2 (libm, < 1 ulp)."""
    if x.size == 0:
        return best_so_far, -1
    top = _screen_max(x, p)
    if top + _SCREEN_SLACK <= best_so_far:
        return best_so_far, -1
    idx = _screen_hits(x, p, top - 2 * _SCREEN_SLACK)
    exact = np.abs(p[idx].astype(np.float64) / np.exp2(x[idx].astype(np.float64)) - 1.0)
    j = int(np.argmax(exact))
    if exact[j] <= best_so_far:
        return best_so_far, -1
    return float(exact[j]), int(idx[j])


def evaluated_error(coeffs, *, inputs: str = "all") -> dict:
    """Max relative error of FA4's fp32 evaluation of ``coeffs`` (c0 first) over fp32 inputs in [0, 1).

    inputs="all": every fp32 in [0, 1) (the definition); inputs="grid": the 2^-23 grid k*2^-23 (8,388,608
    values, every fp32 in [0.5, 1) and a share of the smaller ones), a fast proxy.

    With inputs="all" the inputs are cut into pieces of 2^16 consecutive fp32 values, each with a rigorous
    bound of the error over it (_piece_bounds: a Taylor bound of the real-arithmetic error plus the Horner
    rounding bound); the pieces are evaluated by decreasing bound, and a piece whose bound is below the max
    found cannot hold the max and is not run through the emulator. ``evaluated`` counts the inputs that were,
    ``bounded`` says what the bounds covered ({"pieces", "inputs", "bound": the largest bound skipped}) or is
    None. The result is the exhaustive one (same value, same argmax: among equal errors, the one the
    exhaustive pass meets first, see _argmax_key), for degree 3 about 30x fewer emulated inputs.

    Parameters
    ----------
    coeffs : sequence of float
        c0 first, exact fp32 values (as fa4num.ex2.fa4_emulated takes them).
    inputs : {"all", "grid"}

    Returns
    -------
    dict
        "value" (the max relative error), "argmax", "inputs" (inputs covered), "evaluated" (inputs run through
        the emulator), "bounded" (None, or what the per-piece bounds covered: {"pieces", "inputs", "bound"}), "definition".

    Raises
    ------
    ValueError
        For another ``inputs``.

    Examples
    --------
    >>> from fa4num.fit.registry import fa4_sets
    >>> r = evaluated_error(fa4_sets()[3], inputs="grid")
    >>> round(r["value"], 9), r["inputs"], r["bounded"]
    (8.7688e-05, 8388608, None)
    >>> evaluated_error(fa4_sets()[3], inputs="some")
    Traceback (most recent call last):
        ...
    ValueError: inputs: must be 'all' or 'grid', got 'some'
    """
    if inputs not in ("all", "grid"):
        raise ValueError(f"inputs: must be 'all' or 'grid', got {inputs!r}")
    return dict(_evaluated_error(tuple(float(c) for c in coeffs), inputs))


_PIECE = 1 << 14   # fp32 bit patterns per piece: 2^14 divides 2^23, so no piece straddles a binade


@functools.lru_cache(maxsize=64)   # a search and its final report measure the winner once
def _evaluated_error(coeffs: tuple, inputs: str, prune: bool = True, lo_bits: int = 0,
                     hi_bits: int = _EVAL_INPUTS) -> dict:
    """evaluated_error over the fp32 bit patterns [lo_bits, hi_bits) (multiples of _PIECE); prune=False
    runs every input through the emulator (the definition, for the tests)."""
    degree = len(coeffs) - 1
    c = tuple(coeffs)
    definition = ("max |P/2^x - 1| over " + ("every fp32 x in [0, 1)" if inputs == "all"
                                              else "x = k*2^-23, k < 2^23"))
    if inputs == "grid":
        e, i = _max_rel(_frac_grid(), fa4_emulated(_frac_grid(), degree, coeffs=c), 0.0)
        return {"value": e, "argmax": float(_frac_grid()[i]) if i >= 0 else 0.0, "inputs": _frac_grid().size,
                "evaluated": _frac_grid().size, "bounded": None, "definition": definition}
    if lo_bits % _PIECE or hi_bits % _PIECE or not 0 <= lo_bits < hi_bits <= _EVAL_INPUTS:
        raise ValueError(f"lo_bits, hi_bits: multiples of {_PIECE} in [0, {_EVAL_INPUTS}]")
    count = hi_bits - lo_bits
    best, arg, evaluated, skipped = 0.0, None, 0, None
    if not prune:
        # largest inputs first, in chunks (the order _argmax_key describes)
        for end in range(hi_bits, lo_bits, -_CHUNK):
            bits = np.arange(max(end - _CHUNK, lo_bits), end, dtype=np.uint32)
            best, arg = _merge_max(c, bits, best, arg, hi_bits)
            evaluated += bits.size
    else:
        starts, bounds = _piece_bounds(c, lo_bits, hi_bits)
        order = np.argsort(-bounds, kind="stable")
        # the pieces most likely to hold the max first (their max prunes the rest), then every piece whose
        # bound reaches it, 256 pieces (2^24 inputs) at a time
        batches = [order[:16]]
        rest = order[16:]
        done = np.zeros(starts.size, dtype=bool)
        while batches:
            sel = batches.pop()
            bits = (starts[sel, None] + np.arange(_PIECE, dtype=np.uint32)[None, :]).ravel()
            best, arg = _merge_max(c, bits, best, arg, hi_bits)
            evaluated += bits.size
            done[sel] = True
            if not batches:
                rest = rest[bounds[rest] >= best]
                batches = [rest[k:k + 256] for k in range(0, rest.size, 256)][::-1]
                rest = rest[:0]
        if not done.all():
            skipped = {"pieces": int((~done).sum()), "inputs": int((~done).sum()) * _PIECE,
                       "bound": float(bounds[~done].max())}
    argmax = float(np.uint32(arg).view(np.float32)) if arg is not None else 0.0
    return {"value": best, "argmax": argmax, "inputs": count, "evaluated": evaluated, "bounded": skipped,
            "definition": definition}


def _argmax_key(bits: np.ndarray, hi_bits: int) -> np.ndarray:
    """Which of several inputs with the same (largest) error is the argmax: the one an exhaustive pass meets
    first, going through chunks of 2^24 bit patterns from the top down and each chunk upwards."""
    bits = bits.astype(np.int64)
    return ((hi_bits - 1 - bits) // _CHUNK) * (1 << 32) + bits


def _merge_max(coeffs, bits: np.ndarray, best: float, arg, hi_bits: int):
    """(max, argmax bits) of the error over ``bits`` merged with the (best, arg) found so far."""
    x = bits.view(np.float32)
    p = fa4_emulated(x, len(coeffs) - 1, coeffs=coeffs)
    err = np.abs(p.astype(np.float64) / np.exp2(x.astype(np.float64)) - 1.0)
    top = float(err.max()) if err.size else 0.0
    if top < best or top == 0.0:
        return best, arg
    tied = bits[err == top]
    if top == best and arg is not None:
        tied = np.append(tied, np.uint32(arg))
    return top, int(tied[np.argmin(_argmax_key(tied, hi_bits))])


def _piece_bounds(coeffs: tuple, lo_bits: int = 0, hi_bits: int = _EVAL_INPUTS):
    """(first bit pattern, rigorous bound of |P/2^x - 1| over its inputs) for each piece of _PIECE
    consecutive fp32 values in [lo_bits, hi_bits).

    |P/2^x - 1| <= |e(x)| + |P(x) - p(x)| (2^x >= 1 on [0, 1)), e = p/2^x - 1 the real-arithmetic error; on a
    piece of centre m and half-width r, |e(x)| <= |e(m)| + |e'(m)| r + |e''(m)| r^2/2 + M3 r^3/6 (Taylor),
    M3 >= sup |e'''| on [0, 1] (ball arithmetic), e(m), e'(m), e''(m) in float64 (error < 1e-15, covered by
    the 1e-14 added, which also covers the float64 rounding of the measured errors); |P - p| is the Horner
    rounding bound on [0, top of the piece]. (A piece holds 2^14 inputs: r <= 2^-11, so M3 r^3/6 is below 1e-11 M3.)"""
    starts = np.arange(lo_bits, hi_bits, _PIECE, dtype=np.uint32)
    lo = starts.view(np.float32).astype(np.float64)
    hi = (starts + np.uint32(_PIECE - 1)).view(np.float32).astype(np.float64)
    m, r = (lo + hi) / 2, (hi - lo) / 2
    p, dp, ddp = np.zeros_like(m), np.zeros_like(m), np.zeros_like(m)
    for v in reversed(coeffs):
        ddp = ddp * m + 2 * dp
        dp = dp * m + p
        p = p * m + v
    y, ln2 = np.exp2(-m), np.log(2.0)
    e = p * y - 1.0
    de = (dp - ln2 * p) * y
    dde = (ddp - 2 * ln2 * dp + ln2 * ln2 * p) * y
    taylor = np.abs(e) + np.abs(de) * r + np.abs(dde) * r * r / 2 + _third_derivative_bound(coeffs) * r ** 3 / 6
    return starts, taylor + _horner_rounding_bounds(coeffs, hi) + 1e-14


def _horner_rounding_bounds(coeffs, tops: np.ndarray) -> np.ndarray:
    """_horner_rounding_bound at each of ``tops`` (each bounds |P - p| on [0, top]), in float64: every term
    is positive, so the float64 roundings (a few dozen at most, each a relative 2^-53) are covered by
    enlarging the result by a relative 1e-12."""
    u, eta = 2.0 ** -24, 2.0 ** -150
    cs = np.abs(np.array(coeffs, dtype=np.float64))
    e = np.zeros_like(tops)
    for k in range(len(cs) - 2, -1, -1):
        q = np.zeros_like(tops)
        for j in range(len(cs) - 1, k - 1, -1):
            q = q * tops + cs[j]
        e = (1 + u) * tops * e + u * q + eta
    return e * (1 + 1e-12)


def _third_derivative_bound(coeffs: tuple, pieces: int = 64) -> float:
    """A rigorous upper bound of |e'''| on [0, 1], e = p/2^x - 1 (ball arithmetic on ``pieces`` sub-intervals)."""
    prob = Problem(EXP2, 0.0, 1.0, len(coeffs) - 1, {}, True)
    old = flint.ctx.prec
    flint.ctx.prec = 128
    try:
        cs = [to_arb(v) for v in coeffs]
        balls = [(flint.arb(i) / pieces).union(flint.arb(i + 1) / pieces) for i in range(pieces)]
        return max(_float_up(6 * abs(err_series(prob, cs, ball, 4)[3])) for ball in balls)
    finally:
        flint.ctx.prec = old


_U32 = Fraction(1, 2 ** 24)      # unit roundoff of fp32 round-to-nearest
_ETA32 = Fraction(1, 2 ** 150)   # half the spacing of fp32 subnormals: absolute error of an underflowing RN


def _horner_rounding_bound(coeffs, top: float) -> Fraction:
    """Upper bound of |P(x) - p(x)| for x in [0, top], P FA4's fp32 Horner (fma.rn each step), p exact.

    On [0, 1) FA4's Cody-Waite split gives f = x exactly and the exponent add adds 0 (r = 0f4B400000, whose
    bits shifted left by 23 vanish modulo 2^32), so the output is the Horner value itself. With q_k(x) =
    sum_{j>=k} c_j x^(j-k) and e_k >= |P_k - q_k|, one fma.rn step gives
    e_k <= x e_(k+1) + u (|q_k| + x e_(k+1)) + eta, computed here in exact rational arithmetic."""
    x = Fraction(top)
    cs = [Fraction(v) for v in coeffs]
    e = Fraction(0)
    for k in range(len(cs) - 2, -1, -1):
        q = sum(abs(cs[j]) * x ** (j - k) for j in range(k, len(cs)))
        e = (1 + _U32) * x * e + _U32 * q + _ETA32
    return e


# binade 2^(k-1) <= |x| < 2^k, k = 1..7, clipped at |x| = 126: its fractions are the multiples of 2^(k-24),
# i.e. every 2^(k-1)-th point of the 2^-23 grid; its weight is its length
_BINADE_WEIGHTS = np.array([min(2 ** k, 126) - 2 ** (k - 1) for k in range(1, 8)], dtype=np.float64)
# below this |x| (x < 0), 2^x > 1 - 2^-9 ln 2 > 1 - 2^-9, the bf16 midpoint under 1.0, so RN_bf16(2^x) = 1.0
_ONE_BELOW = 2.0 ** -9


@njit(cache=True)
def _ref_steps(x, out):
    """Fill ``out`` with the bits of RN_bf16(2^x) for a monotone ``x``; False when some evaluated point is a
    hard case of exp2_cr_bf16 (then nothing is promised about ``out``).

    RN_bf16(2^x) is monotone in x, so over a monotone array it is a step function with few steps (bf16 has
    128 values per binade): where it takes the same value at both ends of a stretch it takes it on the whole
    stretch. Bisecting the stretches whose ends differ finds every step with a few thousand correctly rounded
    evaluations instead of one per input."""
    n = x.size
    v0, ok0 = exp2_cr_bf16(x[0])
    v1, ok1 = exp2_cr_bf16(x[n - 1])
    if not (ok0 and ok1):
        return False
    stack = [(0, n - 1, f32_to_u32(v0) >> 16, f32_to_u32(v1) >> 16)]
    while stack:
        lo, hi, a, b = stack.pop()
        if a == b:
            out[lo:hi + 1] = a
        elif hi - lo <= 1:
            out[lo] = a
            out[hi] = b
        else:
            m = (lo + hi) // 2
            vm, ok = exp2_cr_bf16(x[m])
            if not ok:
                return False
            c = f32_to_u32(vm) >> 16
            stack.append((lo, m, a, c))
            stack.append((m, hi, c, b))
    return True


def _ref_bits(x: np.ndarray) -> np.ndarray:
    """Bits of RN_bf16(2^x), fa4num.fp.exp2_cr (correctly rounded once from 2^x), for a monotone ``x``: from
    its steps (_ref_steps), or every element through exp2_cr where a step search met a hard case."""
    out = np.empty(x.size, np.uint16)
    if x.size and _ref_steps(x, out):
        return out
    return exp2_cr(x, dtype="bfloat16").view(np.uint16)


@functools.lru_cache(maxsize=1)
def _frac_reference() -> np.ndarray:
    return _ref_bits(_frac_grid())


@njit(parallel=True, cache=True)
def _binade_counts(p, ref):
    """Mismatches of bf16(p[i]) vs ref[i] on each sub-grid i % 2^s == 0, s = 0..6 (one pass)."""
    nthreads = 64
    counts = np.zeros((nthreads, 7), dtype=np.int64)
    step = (p.size + nthreads - 1) // nthreads
    for t in prange(nthreads):
        for i in range(t * step, min(p.size, (t + 1) * step)):
            if f32_to_bf16_bits(p[i]) != ref[i]:
                for s in range(7):
                    if i & ((1 << s) - 1) == 0:
                        counts[t, s] += 1
    return counts.sum(axis=0)


@njit(parallel=True, cache=True)
def _count_mismatch(p, ref):
    n = 0
    for i in prange(p.size):
        n += f32_to_bf16_bits(p[i]) != ref[i]
    return n


def _binade_shares(coeffs) -> np.ndarray:
    """Mismatch share of each binade 2^(k-1) <= |x| < 2^k, k = 1..7 (x in [-126, -1]), from one pass over
    the 2^-23 fraction grid (see the module docstring)."""
    p = fa4_emulated(_frac_grid(), len(coeffs) - 1, coeffs=tuple(coeffs))
    counts = _binade_counts(p, _frac_reference())
    return counts / np.array([_frac_grid().size >> s for s in range(7)], dtype=np.float64)


def _frac_share(coeffs) -> float:
    """Mismatch share over x in [-126, -1] (uniform measure)."""
    return float(np.dot(_BINADE_WEIGHTS, _binade_shares(coeffs)) / _BINADE_WEIGHTS.sum())


def _bf16_one_certain(coeffs: tuple, f_lo: float, f_hi: float) -> bool:
    """Whether FA4's bf16 P is 1.0 for every x in a binade of (-2^-9, 0), whose fractions f = RN(1 + x) lie in
    [f_lo, f_hi]: there RN_bf16(2^x) = 1.0 (see _ONE_BELOW), so such a binade has no mismatch.

    With floor(x) = -1 the exponent add halves the Horner value P(f) (r = 0f4B3FFFFF, whose bits shifted left
    by 23 are -2^23 modulo 2^32), and bf16 rounds P(f)/2 to 1.0 exactly when P(f) is in [2 - 2^-8, 2 + 2^-7]
    (both ends are ties that go to 1.0, the even neighbour). P(f) lies within the Horner rounding bound of the
    exact p(f), which ball arithmetic encloses over [f_lo, f_hi]."""
    f = to_arb(f_lo).union(to_arb(f_hi))
    q = flint.arb(0)
    for v in reversed(coeffs):
        q = q * f + to_arb(v)
    slack = to_arb(float(_horner_rounding_bound(coeffs, f_hi)) * 2)  # float() may round down: doubled
    return bool(q - slack >= 2 - flint.arb(2) ** -8 and q + slack <= 2 + flint.arb(2) ** -7)


def bf16_mismatch_share(coeffs, *, domain: str = "softmax") -> dict:
    """Share of x whose bf16 P differs from RN_bf16(2^x), uniform measure (module docstring for the inputs).

    domain="softmax": x in [-126, 0) (``value``), and with the coefficient-independent [-127, -126) piece
    (``value_with_subnormal``: there FA4's bit add yields a mis-decoded subnormal for any polynomial, see
    docs/notes/fa4-numerics.md section A); domain="frac": only x in [-126, -1], the proxy used in searches.

    Parameters
    ----------
    coeffs : sequence of float
        c0 first, exact fp32 values.
    domain : {"softmax", "frac"}

    Returns
    -------
    dict
        "value" (the share), "parts" (the share of each piece of the domain), "definition"; with
        domain="softmax" also "value_with_subnormal".

    Raises
    ------
    ValueError
        For another ``domain``.

    Examples
    --------
    >>> from fa4num.fit.registry import fa4_sets
    >>> r = bf16_mismatch_share(fa4_sets()[3], domain="frac")
    >>> round(r["value"], 6), r["parts"]["[-2,-1)"] > 0
    (0.009957, True)
    """
    c = tuple(coeffs)
    degree = len(c) - 1
    if domain not in ("softmax", "frac"):
        raise ValueError(f"domain: must be 'softmax' or 'frac', got {domain!r}")
    binades = _binade_shares(c)
    share = float(np.dot(_BINADE_WEIGHTS, binades) / _BINADE_WEIGHTS.sum())
    weight = float(_BINADE_WEIGHTS.sum())
    parts = {f"[-{min(2 ** k, 126)},-{2 ** (k - 1)})": float(v) for k, v in enumerate(binades, start=1)}
    parts["[-126,-1]"] = share
    if domain == "frac":
        return {"value": share, "parts": parts,
                "definition": "uniform measure on x in [-126, -1], exact on the fp32 lattice"}
    num, total = share * weight, weight
    # x in (-1, 0): every fp32 value of each binade 2^-(j+1) <= |x| < 2^-j, j = 0..23
    for j in range(24):
        if 2.0 ** -j <= _ONE_BELOW and _bf16_one_certain(c, 1.0 - 2.0 ** -j, 1.0 - 2.0 ** -(j + 1)):
            parts[f"[-2^-{j},-2^-{j + 1})"] = 0.0
            total += 2.0 ** -(j + 1)
            continue
        # -2^-(j+1) and below, as the bit patterns of 2^-(j+1) and up with the sign bit set
        lo_bits = np.float32(-(2.0 ** -(j + 1))).view(np.uint32)
        x = np.arange(lo_bits, lo_bits + (1 << 23), dtype=np.uint32).view(np.float32)
        if 2.0 ** -j <= _ONE_BELOW:
            ref = np.full(x.size, np.float32(1.0).view(np.uint32) >> 16, dtype=np.uint16)
        else:
            ref = _ref_bits(x)
        part = _count_mismatch(fa4_emulated(x, degree, coeffs=c), ref) / x.size
        parts[f"[-2^-{j},-2^-{j + 1})"] = part
        num, total = num + 2.0 ** -(j + 1) * part, total + 2.0 ** -(j + 1)
    value = num / total
    # x in [-127, -126): every fp32 value (spacing 2^-17)
    x = (-127.0 + np.arange(1 << 17, dtype=np.float64) * 2.0 ** -17).astype(np.float32)
    sub = _count_mismatch(fa4_emulated(x, degree, coeffs=c), _ref_bits(x)) / x.size
    parts["[-127,-126)"] = sub
    return {"value": value, "value_with_subnormal": (num + sub) / (total + 1.0), "parts": parts,
            "definition": "uniform measure on x in [-126, -2^-24] (value) and [-127, -2^-24] "
                          "(value_with_subnormal), exact on the fp32 lattice"}


def measure(objective: str, coeffs) -> dict:
    """The objective's full measurement of one coefficient set (the definitions above)."""
    if objective == "evaluated":
        return evaluated_error(coeffs)
    if objective == "bf16":
        return bf16_mismatch_share(coeffs)
    raise ValueError(f"objective: {objective!r} has no emulation measurement (use 'evaluated' or 'bf16')")


def _near_extrema(extrema, half_width: int = 1 << 19) -> np.ndarray:
    """The 2^-23 grid plus every fp32 within ``half_width`` ulps of each extremum of the real-arithmetic
    error: where the evaluated error peaks (its maximum is a real-arithmetic peak plus rounding)."""
    parts = [_frac_grid()]
    for x in extrema:
        b = int(np.float32(float(x)).view(np.uint32))
        parts.append(np.arange(max(b - half_width, 0), min(b + half_width, _EVAL_INPUTS),
                               dtype=np.uint32).view(np.float32))
    return np.concatenate(parts)


def search(objective: str, candidates, *, prob, fmt, extrema=()) -> list:
    """Pick the coefficient set for an emulation objective.

    ``candidates``: the minimax fit first, then its neighbourhood by increasing real-arithmetic error.
    evaluated: FA4's fp32 Horner adds about half an ulp at each fma result, carried to the output by the
        later multiplications by x (_rounding_model). The evaluated error is then close to |e(x)| + u(x)
        (within 0.1 % for FA4's sets), which a linear program minimises over real coefficients (the
        evaluation-aware fit of Arzelier, Brehard and Joldes, ARITH 2019, in its simplest, linearised
        form); its coefficients are rounded by the lattice step at the zeros of its error and by a +-3-ulp
        search on the model. Those sets and the minimax candidates are ranked on every fp32 input near the
        peaks (plus the 2^-23 grid); the best replaces the minimax fit only if its max over every fp32
        input in [0, 1) is lower.
    bf16: the mismatch share of x in [-126, -1] is, to first order, 2^7 * mean |p(f) - 2^f| over f in
        [0, 1) (a bf16 midpoint lies between p and 2^f with probability |p - 2^f| / 2^-7), so the start is
        the L1-optimal polynomial (a linear program, scipy HiGHS) with the fixed coefficients, rounded; a
        pattern search in coefficient spacings then lowers the exact share (the "frac" proxy). The minimax
        fit is kept if it is better.
    """
    if objective == "evaluated":
        return _search_evaluated(candidates, prob, fmt, extrema)
    if objective == "bf16":
        start = [fmt.round(v) for v in _l1_optimum(prob)]
        for k, v in prob.fixed.items():
            start[k] = v
        best, score = _pattern_search(start, prob, fmt, _frac_share)
        return best if score < _frac_share(candidates[0]) else list(candidates[0])
    raise ValueError(f"objective: unknown {objective!r}")


_MODEL_POINTS = 4001


def _rounding_model(coeffs, x: np.ndarray) -> np.ndarray:
    """u(x): first-order bound of the relative rounding error of FA4's fp32 Horner evaluation at x.

    Step k of evaluate_polynomial (utils.py) rounds h_k = h_{k+1} x + c_k once (fma.rn): an error of at
    most half an fp32 ulp of h_k, multiplied by x^k on its way to the output; divided by 2^x."""
    n = len(coeffs) - 1
    h = np.full_like(x, coeffs[n])
    u = np.zeros_like(x)
    for k in range(n - 1, -1, -1):
        h = h * x + coeffs[k]
        half_ulp = np.ldexp(1.0, np.frexp(np.abs(h))[1] - 25)   # 2^(e - 24) / 2 for |h| in [2^e, 2^(e+1))
        u += half_ulp * x ** k
    return u / np.exp2(x)


def _model_lp(prob, u: np.ndarray, x: np.ndarray) -> list:
    """Real coefficients minimising max |e(x_i)| + u(x_i) (relative error, fixed coefficients kept); the
    rows are scaled to units of 2^-24 so that HiGHS's 1e-7 feasibility tolerance is far below the errors."""
    from scipy.optimize import linprog
    free = prob.free
    y = np.exp2(x)
    fixed_part = sum(v * x ** k for k, v in prob.fixed.items()) if prob.fixed else np.zeros_like(x)
    scale = 2.0 ** 24
    V = np.stack([x ** k / y for k in free], axis=1) * scale
    t0 = (fixed_part / y - 1.0) * scale
    ones = np.ones((x.size, 1))
    A = np.block([[V, -ones], [-V, -ones]])
    b = np.r_[-t0 - u * scale, t0 - u * scale]
    res = linprog(np.r_[np.zeros(len(free)), 1.0], A_ub=A, b_ub=b, bounds=[(None, None)] * (len(free) + 1),
                  method="highs")
    if not res.success:
        raise RuntimeError(f"evaluation-aware LP failed: {res.message}")
    return [float(c) for c in prob.full(res.x[:len(free)])]


def _search_evaluated(candidates, prob, fmt, extrema) -> list:
    import mpmath

    from ._lattice import lattice_round, neighbourhood
    x = np.linspace(float(prob.a), float(prob.b), _MODEL_POINTS)
    minimax = list(candidates[0])
    u = _rounding_model(minimax, x)
    real = _model_lp(prob, u, x)
    # the zeros of the LP fit's error (away from a removable zero at a fixed c0), where the lattice step
    # makes the rounded polynomial interpolate 2^x
    e = np.polyval(real[::-1], x) / np.exp2(x) - 1.0
    inner = np.flatnonzero(np.sign(e[2:]) != np.sign(e[1:-1])) + 1
    zeros = [(x[i] * e[i + 1] - x[i + 1] * e[i]) / (e[i + 1] - e[i]) for i in inner]
    bases = [[fmt.round(v) if k in prob.free else v for k, v in enumerate(real)]]
    if len(zeros) == len(prob.free):
        bases.append(lattice_round(prob, [mpmath.mpf(v) for v in real], zeros, {k: fmt for k in prob.free}))
    scorer = _ModelScorer(x, u)
    steps = {k: float(fmt.quantum(bases[0][k])) for k in prob.free}
    pool = [list(c) for c in candidates[:4]]
    for base in bases:
        pool += [fmt.round_array(c).tolist() for _, c in neighbourhood(base, steps, 3, scorer, keep=4)]
    peaks = list(extrema) + list(x[_local_maxima(np.abs(e))])   # |e| is smooth: n + 1 peaks or so
    near = _near_extrema(peaks)
    near_max = {tuple(c): _max_rel(near, fa4_emulated(near, len(c) - 1, coeffs=tuple(c)), 0.0)[0] for c in pool}
    best = min(pool, key=lambda c: near_max[tuple(c)])
    if best == minimax:
        return minimax
    # a max over part of the inputs is a lower bound of the max over all: when the winner's full max is
    # below the minimax fit's partial max, the minimax fit cannot be better and needs no full sweep
    if evaluated_error(best)["value"] <= near_max[tuple(minimax)]:
        return best
    return min([best, minimax], key=lambda c: evaluated_error(c)["value"])


class _ModelScorer:
    """max over the model grid of |e| + u, for GridScorer-style ranking in _lattice.neighbourhood."""

    def __init__(self, x, u):
        self.powers = np.vander(x, None, increasing=True)
        self.y = np.exp2(x)
        self.u = u

    def errors(self, coeffs):
        coeffs = np.asarray(coeffs)
        p = coeffs @ self.powers[:, :coeffs.shape[-1]].T
        return np.max(np.abs(p / self.y - 1.0) + self.u, axis=-1)


def _local_maxima(v: np.ndarray) -> np.ndarray:
    return np.flatnonzero((v[1:-1] >= v[:-2]) & (v[1:-1] >= v[2:])) + 1


def _l1_optimum(prob, points: int = 2001) -> list:
    """Real coefficients minimising mean |p(f) - 2^f| over ``points`` equispaced f (linear program)."""
    from scipy.optimize import linprog
    from scipy.sparse import bmat, identity
    f = np.linspace(float(prob.a), float(prob.b), points)
    y = np.exp2(f)
    free = prob.free
    fixed_part = sum(v * f ** k for k, v in prob.fixed.items()) if prob.fixed else np.zeros_like(f)
    scale = 2.0 ** 14   # errors of ~1e-4 become ~1: far above HiGHS's 1e-7 tolerances
    V = np.stack([f ** k for k in free], axis=1) * scale
    t = (y - fixed_part) * scale
    eye = identity(points, format="csr")
    A = bmat([[V, -eye], [-V, -eye]], format="csr")
    cost = np.r_[np.zeros(len(free)), np.ones(points)]
    res = linprog(cost, A_ub=A, b_ub=np.r_[t, -t], bounds=[(None, None)] * len(free) + [(0, None)] * points,
                  method="highs")
    if not res.success:
        raise RuntimeError(f"L1 fit failed: {res.message}")
    return [float(c) for c in prob.full(res.x[:len(free)])]


def _pattern_search(coeffs, prob, fmt, score, steps=(1024, 256, 64, 16, 4, 1)):
    """Coordinate pattern search: move one free coefficient by +-step spacings while the score drops."""
    c = list(coeffs)
    best = score(c)
    for step in steps:
        improved = True
        while improved:
            improved = False
            for k in prob.free:
                for d in (1, -1):
                    cand = list(c)
                    cand[k] = fmt.round(c[k] + d * step * float(fmt.quantum(c[k])))
                    s = score(cand)
                    if s < best:
                        best, c, improved = s, cand, True
    return c, best
