"""Rounding real coefficients to a format: the Brisebarre–Chevillard lattice step of fpminimax, and a
neighbourhood search scored on the objective.

Lattice step (Brisebarre & Chevillard, "Efficient polynomial L-infinity approximations", ARITH 2007):
with each free coefficient written c_k = z_k * Q_k (Q_k its format's spacing at the minimax value, z_k an
integer), make p - q interpolate f - q at m chosen points x_j as closely as possible: the vectors
b_k = (Q_k x_j^k w_j)_j span a lattice and t = ((f(x_j) - q(x_j)) w_j)_j is the target, so the integer
vector z is a closest-vector problem, solved approximately by LLL (python-flint) and Babai's nearest
plane. The points are the zeros of the minimax error, where the real optimum interpolates f.
"""
from __future__ import annotations

import itertools

import flint
import mpmath
import numpy as np

from ._formats import Format
from ._remez import PREC, Problem, gw_floats


def lattice_round(prob: Problem, minimax_coeffs, points, formats: dict[int, Format]) -> list:
    """fpminimax's rounding: full coefficient list c0..cn (fixed ones kept), free ones in their formats.

    ``formats`` maps each free power to its Format; ``points`` are m = len(prob.free) abscissae.
    """
    free = prob.free
    m = len(free)
    if len(points) != m:
        raise ValueError(f"points: need {m} interpolation points, got {len(points)}")
    values = [minimax_coeffs[k] for k in free]
    for _ in range(4):
        # a lattice coefficient can leave the binade its spacing was taken from: take the spacing at the new
        # value and solve again (fpminimax does the same), rounding only if that does not settle
        coeffs = _lattice_step(prob, values, points, formats)
        values = [coeffs[k] for k in free]
        if all(formats[k].representable(coeffs[k]) for k in free):
            return [float(c) for c in coeffs]
    return [formats[k].round(c) if k in formats else float(c) for k, c in enumerate(coeffs)]


def _lattice_step(prob: Problem, values, points, formats):
    free = prob.free
    m = len(free)
    with mpmath.workprec(PREC):
        quanta = [formats[k].quantum(v) for k, v in zip(free, values)]
        q = [mpmath.mpf(prob.fixed.get(k, 0)) for k in range(prob.degree + 1)]
        rows = [[None] * m for _ in range(m)]
        target = []
        s = prob.shift
        for j, x in enumerate(points):
            x = mpmath.mpf(x)
            gx, w = prob.gw(x)
            target.append((gx - mpmath.polyval(q[s:][::-1], x)) * w)
            for i, k in enumerate(free):
                rows[i][j] = quanta[i] * x ** (k - s) * w
        smallest = min(abs(v) for row in rows for v in row if v != 0)
        scale = mpmath.mpf(2) ** (60 - int(mpmath.floor(mpmath.log(smallest, 2))))
        basis = flint.fmpz_mat([[int(mpmath.nint(v * scale)) for v in row] for row in rows])
        reduced, transform = basis.lll(transform=True)
        red = [[mpmath.mpf(int(reduced[i, j])) for j in range(m)] for i in range(m)]
        # Babai's nearest plane on the reduced basis (Gram-Schmidt in mpmath)
        gs = []
        for i in range(m):
            v = list(red[i])
            for g in gs:
                mu = mpmath.fdot(red[i], g) / mpmath.fdot(g, g)
                v = [a - mu * b for a, b in zip(v, g)]
            gs.append(v)
        resid = [t * scale for t in target]
        y = [0] * m
        for i in reversed(range(m)):
            c = int(mpmath.nint(mpmath.fdot(resid, gs[i]) / mpmath.fdot(gs[i], gs[i])))
            y[i] = c
            resid = [a - c * b for a, b in zip(resid, red[i])]
        z = [sum(y[i] * int(transform[i, k]) for i in range(m)) for k in range(m)]
        coeffs = list(q)
        for i, k in enumerate(free):
            coeffs[k] = z[i] * quanta[i]
        return coeffs


class GridScorer:
    """Fast float64 scoring of many nearby coefficient sets by their max |error| on a fixed grid.

    The grid is dense (``points``) plus a cluster around each extremum of the reference error, where the
    maxima of all nearby candidates sit. Used to rank candidates; the winner's error is then recomputed in
    mpmath (sup_error) and certified.
    """

    def __init__(self, prob: Problem, extrema, *, points: int = 1024):
        a, b = float(prob.a), float(prob.b)
        xs = [np.linspace(a, b, points + 1)]
        width = (b - a) / points
        for x in extrema:
            xs.append(np.clip(float(x) + width * np.linspace(-2, 2, 41), a, b))
        self.x = np.unique(np.concatenate(xs))
        self.f, self.w = gw_floats(prob, self.x)
        # x^(k - shift) for k >= shift; the powers below the shift are fixed at 0 and contribute nothing
        s = prob.shift
        self.powers = np.concatenate([np.zeros((self.x.size, s)),
                                      np.vander(self.x, prob.degree + 1 - s, increasing=True)], axis=1)

    def errors(self, coeffs: np.ndarray) -> np.ndarray:
        """coeffs (..., n+1) -> max |e| over the grid for each set."""
        p = np.asarray(coeffs) @ self.powers.T
        return np.max(np.abs((p - self.f) * self.w), axis=-1)


def neighbourhood(base, steps: dict[int, float], radius: int, scorer: GridScorer, *, keep: int = 8):
    """Every set base + d_k * steps[k] with |d_k| <= radius for the powers in ``steps``, ranked by the
    scorer: the ``keep`` best as (score, coeffs) pairs."""
    powers = sorted(steps)
    base = np.asarray(base, dtype=np.float64)
    offsets = np.array(list(itertools.product(range(-radius, radius + 1), repeat=len(powers))), dtype=np.float64)
    best = []
    for chunk in np.array_split(offsets, max(1, len(offsets) // 4096)):
        cand = np.repeat(base[None, :], len(chunk), axis=0)
        for j, k in enumerate(powers):
            cand[:, k] += chunk[:, j] * steps[k]
        s = scorer.errors(cand)
        order = np.argsort(s)[:keep]
        best += [(float(s[i]), cand[i].tolist()) for i in order]
    best.sort(key=lambda t: t[0])
    return best[:keep]
