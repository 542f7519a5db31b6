"""Rigorous error bounds of FA4's software exp2 (any degree, coefficients and PTX form) and of the MUFU model.

The software exp2 (flash_attn/cute/utils.py ``ex2_emulation_2``, emulated by fa4num.ex2.emulate) is

    a = max(x, -127);  r = add.rm(a, 1.5*2^23);  t = r - 1.5*2^23;  f = RN(a - t)
    q_d = c_d;  q_k = RN(q_{k+1} * f + c_k)   (k = d-1 .. 0, fma.rn)
    out.bits = (r.bits << 23) + q_0.bits

and its error on a normal result splits into (docs/bounds.md proves each):
- Cody-Waite split: t = floor(a) exactly, and f = a - floor(a) exactly except for a in (-1/2, 0), where
  f = RN(1 + a) is within 2^-25 of the true fraction (Sterbenz elsewhere);
- polynomial approximation |p(f)/2^f - 1|, enclosed with python-flint arb (mean-value form on subintervals);
  the largest enclosure over the subintervals of [0, 1] certifies its sup there (no fitter needed);
- Horner rounding: a running error bound e_k = e_{k+1} |f| + halfulp(y_k) over each subinterval, with the
  half-ulp of the binade the exact intermediate y_k can reach there (not the crude 3u);
- exponent insertion: exact (integer add on the exponent field) while q_0 is in [1, 2) and n >= -126;
- ftz: flushed subnormal inputs (asm form) and flushed Horner values (absolute 2^-126).
The bound is the maximum over subintervals of the sum of these terms *on that subinterval*, so it follows the
error curve instead of adding the sup of each term.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np
from flint import arb

from fa4num.ex2 import poly_coeffs
from fa4num.ex2.emulate import horner_tuple, resolve_variant

__all__ = ["Exp2Bound", "exp2_error_bound", "mufu_error_bounds", "MufuBounds"]

_SUBINTERVALS = 1024
# (1/2, 1) is where f = RN(1 + a) rounds (a in (-1/2, 0)); its spacing there is 2^-24, so |f - f*| <= 2^-25
_CW_ROUND = 2.0 ** -25
_MIN_NORMAL = 2.0 ** -126


def _up(a: arb) -> float:
    """The smallest float >= every point of ball ``a`` (outward rounding)."""
    hi = a.upper()
    f = float(hi)
    if arb(f) < hi:
        f = math.nextafter(f, math.inf)
    return f


def _mag(a: arb) -> float:
    """Upper bound of |a| over the ball, as a float rounded up."""
    return _up(abs(a))


def _down(v: float) -> float:
    return math.nextafter(v, -math.inf)


def _upf(v: float) -> float:
    return math.nextafter(v, math.inf)


def _two_sum(a: float, b: float):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _directed(op, a: float, b: float, up: bool) -> float:
    """a*b or a+b rounded down/up: round-to-nearest, then one step where the exact error says so."""
    if op == "mul":
        s = a * b
        err = math.fma(a, b, -s) if hasattr(math, "fma") else float(
            __import__("fractions").Fraction(a) * __import__("fractions").Fraction(b) - __import__("fractions").Fraction(s))
    else:
        s, err = _two_sum(a, b)
    if up and err > 0:
        return _upf(s)
    if not up and err < 0:
        return _down(s)
    return s


def _imul_add(qlo, qhi, flo, fhi, c):
    """Outward-rounded [qlo, qhi] * [flo, fhi] + c (real interval arithmetic on floats)."""
    lo = min(_directed("mul", q, f, False) for q in (qlo, qhi) for f in (flo, fhi))
    hi = max(_directed("mul", q, f, True) for q in (qlo, qhi) for f in (flo, fhi))
    return _directed("add", lo, c, False), _directed("add", hi, c, True)


def _horner3(cs, x):
    """(p, p', p'') at x (arb), Horner on coefficients c_0..c_d."""
    p = d1 = d2 = arb(0)
    for c in reversed(cs):
        d2 = d2 * x + 2 * d1
        d1 = d1 * x + p
        p = p * x + c
    return p, d1, d2


def _halfulp(ymax: float, ftz: bool) -> float:
    """Largest |RN32(y) - y| for |y| <= ymax: half an ulp of ymax's binade; subnormal: 2^-150, or with .ftz
    the flush of a value below 2^-126 (absolute 2^-126)."""
    if ymax < _MIN_NORMAL:
        return _MIN_NORMAL if ftz else 2.0 ** -150
    e = math.floor(math.log2(ymax))
    if 2.0 ** e > ymax:       # log2 rounding at a power of two
        e -= 1
    if 2.0 ** (e + 1) <= ymax:
        e += 1
    return 2.0 ** (e - 24)


@dataclass(frozen=True)
class Exp2Bound:
    """A rigorous bound of FA4's software exp2 error, with its terms.

    Attributes
    ----------
    relative : float
        ``>= |ex2(x)/2^x - 1|`` for every fp32 x in the domain whose result is normal (x >= -126).
    absolute_subnormal : float
        ``>= |ex2(x) - 2^x|`` for every fp32 x in the domain with 2^x < 2^-126.
    terms : dict
        Per source, each its largest value over the pieces (they peak on different pieces, so they do not add up
        to ``relative``): "polynomial" (certified sup over [0, 1]: the largest enclosure on its subintervals), "polynomial_reached" (sup of the enclosure over
        the fractions reached), "cody_waite" (relative, from f = RN(1 + a)), "horner" (largest half-ulp of each
        Horner step), "horner_running" (the running rounding bound, relative to 2^f), "exponent_insertion", "ftz". "at_argmax": the terms as computed on the piece ``argmax_f``
        where ``relative`` is attained ("polynomial", "horner" (running rounding bound), "cody_waite",
        "exponent_insertion", and "ftz" when the flush is the largest): they sum to ``relative`` up to outward
        rounding.
    argmax_f : tuple
        The fraction subinterval (lo, hi) where ``relative`` is attained.
    """
    relative: float
    absolute_subnormal: float
    terms: dict
    degree: int
    coeffs: tuple
    variant: str
    domain: tuple
    argmax_f: tuple
    observed: dict | None = field(default=None, compare=False)

    @property
    def ratio_to_observed(self) -> float | None:
        """bound / exhaustive observed maximum (cached sweep), when one exists for these arguments."""
        if not self.observed:
            return None
        return self.relative / self.observed["max_rel"]


def _check_domain(domain):
    try:
        lo, hi = (float(v) for v in domain)
    except (TypeError, ValueError):
        raise ValueError(f"domain must be a pair (lo, hi) of floats, got {domain!r}") from None
    if not (lo <= hi) or math.isnan(lo) or hi >= 128.0:
        raise ValueError(f"domain must satisfy lo <= hi < 128 (FA4's exp2 wraps the exponent from 128 on), got "
                         f"{domain!r}")
    return lo, hi


def exp2_error_bound(degree=3, *, coeffs=None, variant="packed", domain=(-127.0, 0.0),
                     subintervals: int = _SUBINTERVALS) -> Exp2Bound:
    """Rigorous error bound of FA4's software exp2 (fa4num.ex2.fa4_emulated with the same arguments).

    Parameters
    ----------
    degree : int
        Polynomial degree (FA4's POLY_EX2 for 1..5 when ``coeffs`` is None).
    coeffs : sequence of fp32 numbers or str, optional
        c0..c_degree, or anything fa4num.polys.resolve takes (a set name, "c0,c1,...").
    variant : {"packed", "scalar", "asm"}
        The PTX form (see fa4num.ex2.VARIANTS).
    domain : (float, float)
        The inputs x (closed interval of fp32 values); hi < 128.
    subintervals : int
        Pieces of the fraction interval [0, 1] the running analysis works on (more: tighter, slower).

    Returns
    -------
    Exp2Bound

    Examples
    --------
    >>> from fa4num.bounds import exp2_error_bound
    >>> b = exp2_error_bound(3)
    >>> 8.76e-5 < b.relative < 1.1 * 8.769e-5
    True
    """
    v = resolve_variant(variant)
    lo, hi = _check_domain(domain)
    if isinstance(subintervals, bool) or not isinstance(subintervals, int) or not 16 <= subintervals <= 1 << 16:
        raise ValueError(f"subintervals must be an integer in [16, 65536], got {subintervals!r}")
    c32 = poly_coeffs(degree, coeffs=coeffs)
    deg = len(c32) - 1
    # the kernel's coefficients: flushed when the fma carries .ftz (fa4num.ex2.emulate.horner_tuple)
    rc = horner_tuple(c32, v)                    # c_d, ..., c_0
    cs = [arb(float(c)) for c in reversed(rc)]   # c_0 .. c_d, exact
    ftz = v.ftz_arith

    # which x are there: normal results need n = floor(x) >= -126; subnormal ones x < -126
    has_normal = hi >= -126.0
    has_sub = lo < -126.0
    cw_round = lo < 0.0 and hi > -0.5          # some a in (-1/2, 0): f = RN(1 + a)
    # fractions reached: [0, 1] (f = 1 from tiny negative a); with add.rm.ftz but no max.ftz (scalar form) a
    # negative subnormal a has floor 0 after the flush and f = a in (-2^-126, 0)
    pieces = [(i / subintervals, (i + 1) / subintervals) for i in range(subintervals)]
    if v.ftz_round and not v.ftz_max and lo < 0.0 and hi > -_MIN_NORMAL:
        pieces.append((-_MIN_NORMAL, 0.0))

    ln2 = arb.const_log2()
    best, arg = 0.0, (0.0, 0.0)
    at_arg = {}
    poly_reached = poly_unit = cw_term = horner_run = 0.0
    horner_terms = [0.0] * deg
    q0_lo, q0_hi = math.inf, -math.inf
    abs_sub = 0.0
    for a_lo, a_hi in pieces:
        fa, fb = arb(a_lo), arb(a_hi)
        ball = (fa + fb) / 2 + arb(0, (a_hi - a_lo) / 2)
        fmax = max(abs(a_lo), abs(a_hi))
        # exact Horner partials p_k on the piece and the running rounding error e_k (|q_k - p_k(f)| <= e_k)
        p = cs[deg]
        e = 0.0
        q_lo = q_hi = float(rc[0])
        for k in range(deg - 1, -1, -1):
            p = p * ball + cs[k]
            # range of the exact y_k = q_{k+1} f + c_k: plain interval arithmetic on the computed q_{k+1}
            y_lo, y_hi = _imul_add(q_lo, q_hi, a_lo, a_hi, float(rc[deg - k]))
            ymax = min(_mag(p) + e * fmax, max(abs(y_lo), abs(y_hi)))
            h = _halfulp(ymax, ftz)
            q_lo, q_hi = _directed("add", y_lo, -h, False), _directed("add", y_hi, h, True)
            e = math.fsum([e * fmax, h]) * (1 + 2.0 ** -50)
            horner_terms[deg - 1 - k] = max(horner_terms[deg - 1 - k], h)
        # RN is monotone and 1 is an fp32 number: y_0 >= 1 gives q_0 >= 1; y_0 < 2 - 2^-24 gives q_0 < 2
        q0_lo = min(q0_lo, 1.0 if y_lo >= 1.0 else y_lo - h)
        q0_hi = max(q0_hi, y_hi if y_hi < 2.0 - 2.0 ** -24 else 2.0)
        low_q0 = y_lo < 1.0
        # approximation error by a second-order mean-value form: with r = p 2^-f - 1,
        # |r(f)| <= |r(mid)| + rad (|r'(mid)| + rad sup|r''|), r' = (p' - ln2 p) 2^-f,
        # r'' = (p'' - 2 ln2 p' + ln2^2 p) 2^-f (ball enclosures of r'' are loose, but they are multiplied by rad^2)
        mid = (fa + fb) / 2
        rad = (a_hi - a_lo) / 2
        pm, dpm, d2pm = _horner3(cs, mid)
        pb, dpb, d2pb = _horner3(cs, ball)
        wmid = (-mid * ln2).exp()
        rmid = pm * wmid - 1
        r1mid = (dpm - ln2 * pm) * wmid
        r2 = (d2pb - 2 * ln2 * dpb + ln2 * ln2 * pb) * (-ball * ln2).exp()
        approx = _mag(rmid) + rad * (_mag(r1mid) + rad * _mag(r2))
        dp = dpb
        rounding = _up(arb(e) * (-arb(a_lo) * ln2).exp())
        total = approx + rounding
        horner_run = max(horner_run, rounding)
        parts = {"polynomial": approx, "horner": rounding, "cody_waite": 0.0, "exponent_insertion": 0.0}
        if cw_round and a_hi > 0.5:
            # result q0 2^(n) vs 2^(n + f*), |f - f*| <= 2^-25: |(1 + t) 2^(f - f*) - 1| <= t + (1 + t)(2^(2^-25) - 1)
            extra = _up((1 + arb(total)) * ((arb(_CW_ROUND) * ln2).exp() - 1))
            cw_term = max(cw_term, extra)
            parts["cody_waite"] = extra
            total = total + extra
        if low_q0 and lo < -125.0 and hi >= -126.0:
            # x in [-126, -125) with q0 < 1: exponent field 126 - 126 = 0, the bits decode as the subnormal
            # (2 q0 - 1) 2^-126 instead of q0 2^-125... relative error (2 q0 - 1) 2^-f - 1 (mean-value form again)
            r2mid = (2 * pm - 1) * (-mid * ln2).exp() - 1
            r2prime = (2 * dp - ln2 * (2 * p - 1)) * (-ball * ln2).exp()
            sub_enc = (_mag(r2mid) + _mag(r2prime) * (a_hi - a_lo) / 2 + _up(2 * arb(e) * (-arb(a_lo) * ln2).exp()))
            if sub_enc > total:
                # the subnormal decode's enclosure replaces the sum on this piece
                parts = {"polynomial": 0.0, "horner": 0.0, "cody_waite": 0.0, "exponent_insertion": sub_enc}
                total = sub_enc
        poly_reached = max(poly_reached, approx)
        if a_lo >= 0.0:
            poly_unit = max(poly_unit, approx)
        if total > best:
            best, arg, at_arg = total, (a_lo, a_hi), parts
        if has_sub and a_lo >= 0.0:
            # x in [-127, -126): exponent field 0, so the bits decode as the subnormal (q0 - 1) 2^-126 instead of
            # q0 2^-127 (0.m 2^-126); |(q0 - 1) 2^-126 - 2^(f - 127)| = 2^-127 |2 (p - 1) - 2^f| + 2^-126 e
            d = 2 * (p - 1) - (ball * ln2).exp()
            abs_sub = max(abs_sub, _up((abs(d) * arb(2.0) ** -127) + arb(e) * arb(2.0) ** -126))
    if has_normal and not (q0_lo >= 0.5 and q0_hi < 2.0):
        raise ValueError(f"coeffs: the computed polynomial leaves [1/2, 2) (range [{q0_lo}, {q0_hi}]), so adding "
                         "n << 23 to its bits is not 2^n times it; this bound covers polynomials with values in "
                         "[1/2, 2)")
    ftz_term = 0.0
    if v.ftz_max and lo < 0.0 and hi > -_MIN_NORMAL:
        # max.ftz turns a subnormal x into 0, so the result is exactly 1 = 2^x (1 + O(2^-126 ln 2))
        ftz_term = _up((arb(_MIN_NORMAL) * ln2).exp() - 1)
    relative = max(best, ftz_term) if has_normal else 0.0
    if ftz_term > best:
        at_arg = {"polynomial": 0.0, "horner": 0.0, "cody_waite": 0.0, "exponent_insertion": 0.0, "ftz": ftz_term}
    if has_sub:
        # x < -127: the clamp gives +0 (bits 0x3F800000 - 127 << 23), error 2^x < 2^-127
        abs_sub = max(abs_sub, 2.0 ** -127 if lo < -127.0 else 0.0)
    terms = {"polynomial": poly_unit, "polynomial_reached": poly_reached, "cody_waite": cw_term,
             "horner": horner_terms, "horner_running": horner_run, "exponent_insertion": 0.0, "ftz": ftz_term,
             "at_argmax": at_arg,
             "q0_range": (q0_lo, q0_hi)}
    from ._observed import observed_exp2, observed_key
    obs = None
    if domain == (-127.0, 0.0) or tuple(domain) == (-126.0, 0.0):
        try:
            obs = observed_exp2(observed_key(degree=deg, coeffs=coeffs, variant=variant))
        except ValueError:
            obs = None
    return Exp2Bound(relative=relative, absolute_subnormal=abs_sub, terms=terms, degree=deg,
                     coeffs=tuple(float(c) for c in c32), variant=variant, domain=(lo, hi), argmax_f=arg,
                     observed=obs)


@dataclass(frozen=True)
class MufuBounds:
    """Error bounds of the MUFU models (fa4num.hw), from their tables.

    Attributes
    ----------
    ex2_relative : float
        ``>= |ex2(x)/2^x - 1|`` for every fp32 x whose result is at least 2^-126 (both tables, every entry, the
        truncated argument bits at both ends).
    ex2_flush : float
        Results below 2^-126 are flushed to +0: absolute error < 2^-126.
    rcp_relative : float
        ``>= |rcp(x) x - 1|`` for every normal x with a normal result.
    lg2_table_abs : tuple
        (e >= 0 table, e < 0 table): largest ``|table - log2|`` on [1, 2) and [1/2, 1).
    """
    arch: str
    ex2_relative: float
    ex2_flush: float
    rcp_relative: float
    lg2_table_abs: tuple

    def lg2_absolute(self, exponent_max: int) -> float:
        """``|lg2(x) - log2(x)|`` for x in [2^-e, 2^(e+1)) with e = exponent_max: the table error plus the RZ
        rounding of the fixed-point sum (one fp32 ulp of the result's magnitude)."""
        mag = max(abs(int(exponent_max)), 1) + 1
        return max(self.lg2_table_abs) + 2.0 ** (math.floor(math.log2(mag)) + 1 - 23)


def mufu_error_bounds(arch: str = "sm90") -> MufuBounds:
    """Bounds of MUFU ex2/rcp/lg2 from the measured tables of ``arch``, computed exhaustively from the table
    structure (fa4num.hw.mufu docstring): ex2(+-(k + g 2^-23 + r)) = T[g] 2^(+-k) with r in [0, 2^-23) the
    truncated bits, so the relative error is T[g] 2^-(+-(g 2^-23 + r)) - 1, largest at r = 0 or r -> 2^-23;
    rcp(m 2^e) = R[m] 2^-e, so R[m] 1.m - 1 (exact in float64); lg2 tables against log2 on [1/2, 2).

    Parameters
    ----------
    arch : str
        The measured table set (fa4num.hw.available_archs); computed once per arch.

    Returns
    -------
    MufuBounds
        ``ex2_relative``, ``ex2_flush``, ``rcp_relative``, ``lg2_table_abs`` and :meth:`MufuBounds.lg2_absolute`.

    Examples
    --------
    >>> from fa4num.bounds import mufu_error_bounds
    >>> b = mufu_error_bounds("sm90")
    >>> b.ex2_relative < 2.5e-7 and b.rcp_relative < 1.2e-7
    True
    """
    return _mufu_error_bounds(arch)


@functools.lru_cache(maxsize=None)   # exhaustive over the tables: once per arch
def _mufu_error_bounds(arch: str) -> MufuBounds:
    from fa4num.hw import mufu_ex2, mufu_lg2, mufu_rcp
    g = np.arange(1 << 23, dtype=np.float64)
    f = g * 2.0 ** -23
    fx = f.astype(np.float32)
    # float64 exp2/log2 are accurate to a few 2^-53: 1e-15 covers that with room
    slack = 1e-15
    tp = mufu_ex2(fx, arch=arch, ftz=True).astype(np.float64)
    tn = mufu_ex2(-fx, arch=arch, ftz=True).astype(np.float64)
    ex2 = 0.0
    for r in (0.0, 2.0 ** -23):
        ex2 = max(ex2, float(np.max(np.abs(tp * np.exp2(-(f + r)) - 1))),
                  float(np.max(np.abs(tn * np.exp2(f + r) - 1))))
    m = (1.0 + f).astype(np.float32)
    rc = mufu_rcp(m, arch=arch, ftz=True).astype(np.float64)
    rcp = float(np.max(np.abs(rc * m.astype(np.float64) - 1)))   # exact products (24 x 24 bits)
    l0 = mufu_lg2(m, arch=arch, ftz=True).astype(np.float64)
    lm1 = mufu_lg2((m.astype(np.float64) * 0.5).astype(np.float32), arch=arch, ftz=True).astype(np.float64)
    e0 = float(np.max(np.abs(l0 - np.log2(m.astype(np.float64)))))
    e1 = float(np.max(np.abs(lm1 - np.log2(m.astype(np.float64) * 0.5))))
    out = MufuBounds(arch, ex2 + slack, _MIN_NORMAL, rcp, (e0 + slack, e1 + slack))
    return out
