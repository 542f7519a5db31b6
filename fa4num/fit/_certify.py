"""Rigorous upper bound of the approximation error, sup over [a, b] of |e(x)|, in ball arithmetic.

[a, b] is cut into pieces; on a piece of centre m and half-width r the error is a Taylor polynomial of
order K at m (coefficients computed by python-flint's ``arb_series`` at the exact point m) plus a
remainder bounded with the same series evaluated on the whole piece as a ball:
    |e(m + t)| <= sum_{j<K} |e_j(m)| r^j + sup_{xi in piece} |e_K(xi)| r^K      (|t| <= r)
Pieces whose bound exceeds (1 + rel_tol) times the best rigorous lower bound (|e| at the piece centres and
at the caller's candidate extrema, also in ball arithmetic) are bisected until none does. The result is
an upper bound that is never below the true sup norm and, on exit, within rel_tol of a rigorous lower
bound. This is the technique of Sollya's ``supnorm`` (Chevillard, Harrison, Joldes, Lauter 2011) in its
simplest form: Taylor models with interval remainders and subdivision.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import flint
import mpmath

from ._remez import Problem
from ._series import err_series as _err_series
from ._target import to_arb


@dataclass(frozen=True)
class Certificate:
    """A rigorous enclosure of a sup norm: certified upper and lower bounds and where the lower one was found."""

    upper: float       # rigorous upper bound of sup |e| (rounded up to a float)
    lower: float       # rigorous lower bound (rounded down to a float)
    lower_at: float    # the point whose error gave ``lower``
    pieces: int        # pieces in the final subdivision
    order: int         # Taylor order K


def certify(prob: Problem, coeffs, *, extrema=(), rel_tol: float = 1e-4, order: int = 6, prec: int = 160,
            max_pieces: int = 200_000) -> Certificate:
    """Certified bound for the error of the polynomial ``coeffs`` (c0 first, exact floats or mpf).

    ``extrema``: where the caller found the largest errors; they only tighten the lower bound early.
    """
    old = flint.ctx.prec
    flint.ctx.prec = prec
    try:
        cs = [to_arb(c) for c in coeffs]
        a, b = mpmath.mpf(prob.a), mpmath.mpf(prob.b)
        lower, lower_at = 0.0, a
        for x in list(extrema) + [a, b]:
            v = _float_down(abs(_err_series(prob, cs, to_arb(x), 1)[0]))
            if v > lower:
                lower, lower_at = v, x
        with mpmath.workprec(prec):
            n0 = 16
            todo = [(a + (b - a) * i / n0, a + (b - a) * (i + 1) / n0) for i in range(n0)]
            done = []
            while todo:
                if len(todo) + len(done) > max_pieces:
                    raise RuntimeError(f"certify: more than {max_pieces} pieces (is the error function smooth?)")
                bounds = []
                for lo, hi in todo:
                    mid, rad = (lo + hi) / 2, (hi - lo) / 2
                    r = to_arb(rad)
                    taylor = _err_series(prob, cs, to_arb(mid), order)
                    piece = to_arb(lo).union(to_arb(hi))
                    ub = abs(_err_series(prob, cs, piece, order + 1)[order]) * r ** order
                    for j in range(order):
                        ub += abs(taylor[j]) * r ** j
                    v = _float_down(abs(taylor[0]))
                    if v > lower:
                        lower, lower_at = v, mid
                    bounds.append((lo, hi, _float_up(ub)))
                todo = []
                for lo, hi, ub in bounds:
                    if ub > lower * (1 + rel_tol):
                        mid = (lo + hi) / 2
                        todo += [(lo, mid), (mid, hi)]
                    else:
                        done.append(ub)
            return Certificate(max(done), lower, float(lower_at), len(done), order)
    finally:
        flint.ctx.prec = old


def _float_up(x: flint.arb) -> float:
    """A float >= every point of the ball x."""
    if not x.is_finite():
        return math.inf
    v = float(x.upper().mid())
    while not flint.arb(v) >= x.upper():
        v = math.nextafter(v, math.inf)
    return v


def _float_down(x: flint.arb) -> float:
    """A float <= every point of the ball x (x >= 0 here)."""
    v = float(x.lower().mid())
    while not flint.arb(v) <= x.lower():
        v = math.nextafter(v, -math.inf)
    return max(v, 0.0)


def point_error_lower(prob: Problem, coeffs, x) -> float:
    """A rigorous lower bound of sup |e|: |e(x)| at the exact point x, in ball arithmetic, rounded down."""
    old = flint.ctx.prec
    flint.ctx.prec = 160
    try:
        return _float_down(abs(_err_series(prob, [to_arb(c) for c in coeffs], to_arb(x), 1)[0]))
    finally:
        flint.ctx.prec = old
