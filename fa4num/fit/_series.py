"""Taylor coefficients of the approximation error in python-flint ball arithmetic, at a point or over a ball:
what the certificate (_certify) bounds and what the extremum search (_remez.local_extrema) runs Newton's
method on. A leaf module (flint only), so that both can import it."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import flint

if TYPE_CHECKING:
    from ._remez import Problem


def g_series(prob: Problem, x: flint.arb, length: int) -> flint.arb_series:
    """Taylor coefficients of g = f / x^shift at x (a point or a ball), each enclosing g_j(xi) for xi in x.

    Where x reaches 0 the quotient cannot be formed; there the integral form of Taylor's remainder,
    g(x) = 1/(s-1)! int_0^1 (1-t)^(s-1) f^(s)(t x) dt, gives g_j(xi) in f_(s+j)(hull(0, x)): the Taylor
    coefficients of f itself over the hull of 0 and the ball, shifted by s."""
    s = prob.shift
    t = flint.arb_series([x, 1], prec=length)
    if not s:
        return prob.target.ball(t)
    # away from 0 on either side (a negative x too: its hull with 0 would be a wide ball, not g(x))
    if not x.contains(0) and x.rad() * 8 < abs(x).lower():
        return prob.target.ball(t) / t ** s
    hull = x.union(flint.arb(0))
    fser = prob.target.ball(flint.arb_series([hull, 1], prec=length + s))
    return flint.arb_series([fser[s + j] for j in range(length)], prec=length)


def err_series(prob: Problem, coeffs_arb, x: flint.arb, length: int) -> flint.arb_series:
    """Taylor coefficients e_0..e_(length-1) of the error w (P - g) at x (a point or a ball), coefficients
    given as balls, c0 first."""
    t = flint.arb_series([x, 1], prec=length)
    p = flint.arb_series([coeffs_arb[-1]], prec=length)
    for c in reversed(coeffs_arb[prob.shift:-1]):
        p = p * t + c
    g = g_series(prob, x, length)
    if prob.relative and g[0].contains(0):
        # over a wide ball the enclosure of g can reach 0 (tanh's through exp, the quotient's Taylor form
        # near 0) where g does not: an unbounded error here, so the certificate bisects the piece
        return flint.arb_series([flint.arb(0, math.inf)] * length, prec=length)
    e = p / g - 1 if prob.relative else p - g
    if prob.weight is not None:
        e = e * prob.weight.ball(t)
    return e


def _value(v) -> flint.arb:
    """The constant term of a ball series, or the ball itself (an expression such as "1" gives a number)."""
    return v[0] if isinstance(v, flint.arb_series) else flint.arb(v)


def gw_ball(prob: Problem, x: flint.arb):
    """(g(x), w(x)) as balls: the reduced target and the error's weight of Problem.gw, at the context's
    precision."""
    g = g_series(prob, x, 1)[0]
    w = 1 / g if prob.relative else flint.arb(1)
    if prob.weight is not None:
        w = w * _value(prob.weight.ball(flint.arb_series([x, 1], prec=1)))
    return g, w
