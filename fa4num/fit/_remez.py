"""Remez exchange in mpmath for a polynomial with some coefficients fixed (built into the basis).

The approximant is p(x) = q(x) + sum_{k in free} c_k x^k, where q holds the fixed coefficients (FA4's
p(0) = 1 is q = 1, free = 1..n). The error is e(x) = p(x)/f(x) - 1 (relative) or p(x) - f(x) (absolute).
Each step solves p(x_i) - f(x_i) = (-1)^i E / w(x_i) at m+1 reference points (m = number of free
coefficients, w = 1/f or 1), then moves the reference to the alternating extrema of the new error.
When every free monomial vanishes at an endpoint (x^k, k >= 1, at x = 0) the error has a removable zero
there that no choice of coefficients can move, so that endpoint never enters the reference -- this is
exactly where Sollya's constrained fpminimax reports "degenerated system in a non Haar context".
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import flint
import mpmath
import numpy as np

from ._series import err_series, gw_ball
from ._target import Target, to_arb

PREC = 128  # bits of working precision: 38 digits, far below any error a degree <= 10 fit can reach


@dataclass(frozen=True)
class Problem:
    """What to approximate: ``target`` on [a, b] by a degree-``degree`` polynomial, coefficients in
    ``fixed`` ({power: value}) held, ``relative`` or absolute error, times an optional ``weight`` target.

    ``shift`` = s > 0 (relative error only) divides a zero of f at x = 0 out, as Sollya does with the fixed
    low monomials: the powers below s are fixed at 0, so p = x^s P(x) and f = x^s g(x) and the error
    p/f - 1 = P/g - 1 is finite at 0. Every evaluator below works on this reduced form: basis x^(k-s),
    target g, weight w/g (relative) or w (absolute); with s = 0 it is p/f - 1 and p - f as usual.
    """
    target: Target
    a: object
    b: object
    degree: int
    fixed: dict
    relative: bool
    weight: Target | None = None
    shift: int = 0
    # (g, w) rounded to float64 at the points gw_floats was asked for: the steps of one fit rank candidates on
    # grids that share most points (the equispaced part), and each fit builds its own Problem
    memo: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def free(self) -> list[int]:
        return [k for k in range(self.degree + 1) if k not in self.fixed]

    def full(self, free_coeffs) -> list:
        """Coefficient list c0..cn with the fixed ones inserted."""
        it = iter(free_coeffs)
        return [mpmath.mpf(self.fixed[k]) if k in self.fixed else mpmath.mpf(next(it))
                for k in range(self.degree + 1)]

    def g(self, x):
        """f(x) / x^shift, its limit f^(s)(0)/s! at x = 0."""
        if not self.shift:
            return self.target.mp(x)
        if x == 0:
            return mpmath.taylor(self.target.mp, mpmath.mpf(0), self.shift)[self.shift]
        return self.target.mp(x) / x ** self.shift

    def gw(self, x):
        """(g(x), w(x)) such that the error is w(x) * (P(x) - g(x)), P(x) = p(x) / x^shift."""
        gx = self.g(x)
        w = 1 / gx if self.relative else mpmath.mpf(1)
        if self.weight is not None:
            w = w * self.weight.mp(x)
        return gx, w

    def reduced(self, coeffs, x):
        """P(x) = sum c_k x^(k - shift) (the powers below shift are 0)."""
        p = mpmath.mpf(0)
        for c in reversed(coeffs[self.shift:]):
            p = p * x + c
        return p

    def error(self, coeffs, x):
        gx, w = self.gw(x)
        return w * (self.reduced(coeffs, x) - gx)

    def degenerate_at(self, x) -> bool:
        """All free monomials vanish at x: the error there does not depend on the free coefficients."""
        return x == 0 and self.shift not in self.free


@dataclass(frozen=True)
class RemezResult:
    coeffs: list          # mpf, c0..cn
    level: object         # |E| at the final reference (mpf)
    max_error: object     # sup |e| found by the final extremum search (mpf)
    extrema: list         # the alternating reference points (mpf; mirrored to -x too for a folded problem)
    zeros: list           # the zeros of the error between them: p interpolates f there
    iterations: int


def _initial_reference(prob: Problem, m: int) -> list:
    a, b = mpmath.mpf(prob.a), mpmath.mpf(prob.b)
    lo_bad, hi_bad = prob.degenerate_at(a), prob.degenerate_at(b)
    # Chebyshev extrema; shift by half a step away from an endpoint where the basis is degenerate.
    if lo_bad and hi_bad:
        ts = [(i + 0.5) / (m + 1) for i in range(m + 1)]
    elif lo_bad:
        ts = [(i + 1) / (m + 1) for i in range(m + 1)]
    elif hi_bad:
        ts = [i / (m + 1) for i in range(m + 1)]
    else:
        ts = [i / m for i in range(m + 1)] if m > 0 else [0.5]
    return [a + (b - a) * (1 - mpmath.cos(mpmath.pi * t)) / 2 for t in ts]


def _solve(prob: Problem, ref: list, flip: bool = False):
    free = prob.free
    m = len(free)
    A = mpmath.matrix(m + 1, m + 1)
    rhs = mpmath.matrix(m + 1, 1)
    q = [mpmath.mpf(prob.fixed.get(k, 0)) for k in range(prob.degree + 1)]
    s = prob.shift
    for i, x in enumerate(ref):
        gx, w = prob.gw(x)
        for j, k in enumerate(free):
            A[i, j] = x ** (k - s) * w
        # flip: the error has a forced zero of odd order at an interior x = 0, so it is sign(x) e that
        # alternates (e = |x|^t w (Q - h) sign(x)^t with a Haar basis Q: the weighted Chebyshev problem)
        A[i, m] = (-1) ** i * (-1 if flip and x < 0 else 1)
        qx = mpmath.polyval(q[s:][::-1], x)
        rhs[i] = (gx - qx) * w
    sol = mpmath.lu_solve(A, rhs)
    return prob.full([sol[j] for j in range(m)]), sol[m]


def _brent_max(g, lo, hi, tol, maxiter: int = 200):
    """Maximise g on [lo, hi] (g unimodal there) by Brent's method: parabolic interpolation through the
    three best points, with a golden-section step whenever the parabola is not trusted; stops when the
    bracket is within ``tol``. Returns (max value, its abscissa), the bracket ends included."""
    cgold = (3 - mpmath.sqrt(5)) / 2
    a, b = lo, hi
    x = w = v = a + cgold * (b - a)
    fx = fw = fv = -g(x)
    d = e = mpmath.mpf(0)
    for _ in range(maxiter):
        m = (a + b) / 2
        if abs(x - m) <= 2 * tol - (b - a) / 2:
            break
        golden = True
        if abs(e) > tol:
            r = (x - w) * (fx - fv)
            q = (x - v) * (fx - fw)
            p = (x - v) * q - (x - w) * r
            q = 2 * (q - r)
            if q > 0:
                p = -p
            q = abs(q)
            e_prev, e = e, d
            if abs(p) < abs(q * e_prev / 2) and q * (a - x) < p < q * (b - x):
                d = p / q
                if (x + d) - a < 2 * tol or b - (x + d) < 2 * tol:
                    d = tol if m >= x else -tol
                golden = False
        if golden:
            e = (a - x) if x >= m else (b - x)
            d = cgold * e
        u = x + d if abs(d) >= tol else x + (tol if d >= 0 else -tol)
        fu = -g(u)
        if fu <= fx:
            if u >= x:
                a = x
            else:
                b = x
            v, w, x, fv, fw, fx = w, x, u, fw, fx, fu
        else:
            if u < x:
                a = u
            else:
                b = u
            if fu <= fw or w == x:
                v, w, fv, fw = w, u, fw, fu
            elif fu <= fv or v == x or v == w:
                v, fv = u, fu
    return max([(-fx, x), (g(a), a), (g(b), b)])


def local_extrema(prob: Problem, coeffs, *, points: int | None = None, extra=(), flip: bool = False):
    """Every local extremum of the error, one per sign segment: list of (x, e(x)) sorted by x.

    ``flip``: the segments are those of sign(x) e (a forced zero of odd order at an interior x = 0, see
    _solve); a segment across 0 gives the larger of its two peaks, one on each side.

    A scan on ``points`` equispaced points (plus ``extra``) brackets each segment's peak, which is then
    refined to 2^-60 of the interval width or closer (the peak value is then exact to ~1e-30 relative).
    Where f (and the weight) is an expression that also takes flint balls, the scan runs in float64 numpy
    (it only has to find the sign runs and the largest point of each, far above float64's noise: where
    the error is not, the scan runs in mpmath) and each peak is refined by a safeguarded Newton iteration
    on e' = 0 in ball arithmetic (a few Taylor evaluations per peak: _newton_peak); otherwise the scan
    runs in mpmath and the peaks are refined by Brent's method.
    """
    a, b = mpmath.mpf(prob.a), mpmath.mpf(prob.b)
    n = points or max(256, 64 * (prob.degree + 2))
    fast = _fast_scan(prob, coeffs, n, extra)
    if fast is not None:
        xs, es, noise = fast
        tol = (b - a) * mpmath.mpf(2) ** -60
        old = flint.ctx.prec
        flint.ctx.prec = PREC + 32   # before to_arb: its power of two is rounded to the context's precision
        try:
            cs = [to_arb(c) for c in coeffs]
            out = []
            for run in _sign_runs(_flipped(xs, es, flip), noise):
                i = max(run, key=lambda j: abs(es[j]))
                lo, hi = _side(xs, i, flip)
                sign = 1 if es[i] > 0 else -1
                # a scan point above both neighbours by more than the noise: the peak is inside the bracket
                # (e unimodal there), and the parabola through the three points starts Newton next to it
                start, inside = mpmath.mpf(xs[i]), False
                if 0 < i < len(xs) - 1:
                    (x0, x1, x2), (y0, y1, y2) = xs[i - 1:i + 2], (sign * v for v in es[i - 1:i + 2])
                    inside = y1 - y0 > 2 * max(noise[i - 1:i + 2]) and y1 - y2 > 2 * max(noise[i - 1:i + 2])
                    den = (x1 - x0) * (y1 - y2) - (x1 - x2) * (y1 - y0)
                    if inside and den != 0:
                        v = x1 - ((x1 - x0) ** 2 * (y1 - y2) - (x1 - x2) ** 2 * (y1 - y0)) / (2 * den)
                        start = mpmath.mpf(v) if x0 < v < x2 else start
                out.append(_newton_peak(prob, cs, lo, hi, start, sign, tol, inside=inside))
            return out
        finally:
            flint.ctx.prec = old
    xs = sorted(set([a + (b - a) * i / n for i in range(n + 1)] + [mpmath.mpf(x) for x in extra]))
    es = [prob.error(coeffs, x) for x in xs]
    tol = (b - a) * mpmath.mpf(2) ** -60
    out = []
    for run in _sign_runs(_flipped(xs, es, flip), [0] * len(es)):
        i = max(run, key=lambda j: abs(es[j]))
        lo, hi = _side(xs, i, flip)
        sign = 1 if es[i] > 0 else -1
        val, x = _brent_max(lambda t: sign * prob.error(coeffs, t), lo, hi, tol)
        out.append((x, sign * val))
    return out


def _flipped(xs, es, flip: bool) -> list:
    """sign(x) e(x) where ``flip`` (see local_extrema), else e."""
    return [-e if flip and x < 0 else e for x, e in zip(xs, es)]


def _side(xs, i: int, flip: bool):
    """The bracket [x_(i-1), x_(i+1)] of the scan's peak x_i as mpf, cut at 0 where ``flip`` (e vanishes
    there and changes sign, so it is unimodal only on x_i's side)."""
    lo, hi = mpmath.mpf(xs[max(i - 1, 0)]), mpmath.mpf(xs[min(i + 1, len(xs) - 1)])
    if flip and lo < 0 < hi:
        lo, hi = (lo, mpmath.mpf(0)) if xs[i] < 0 else (mpmath.mpf(0), hi)
    return lo, hi


def _sign_runs(es, noise) -> list:
    """The scan grouped into maximal runs of one sign: lists of indices. Values within their noise of 0
    (exact zeros in mpmath) have no sign and join the neighbouring run."""
    runs, cur, cur_sign = [], [], 0
    for i, (e, z) in enumerate(zip(es, noise)):
        s = (e > z) - (e < -z)
        if s == 0:
            continue
        if cur_sign and s != cur_sign:
            runs.append(cur)
            cur = []
        cur.append(i)
        cur_sign = s
    if cur:
        runs.append(cur)
    return runs


_NOISE_FLOOR = 1e-3   # the float64 scan is used only while the error reaches 1000 times its own noise or more


def _fast_scan(prob: Problem, coeffs, n: int, extra):
    """(xs, e(xs), noise bound per point) as float lists from a float64 numpy scan, or None where f or the
    weight has no float64 form or takes no balls, or where the error is too close to float64's noise."""
    target, weight = prob.target, prob.weight
    if target.np is None or (weight is not None and weight.np is None) or not _takes_balls(prob):
        return None
    a, b = float(prob.a), float(prob.b)
    xs = np.unique(np.concatenate([a + (b - a) * np.arange(n + 1) / n,
                                   np.array([float(x) for x in extra], dtype=np.float64)]))
    xs = xs[(xs >= a) & (xs <= b)]
    s = prob.shift
    c = np.array([float(v) for v in coeffs[s:]])
    with np.errstate(all="ignore"):
        f = np.broadcast_to(np.asarray(target.np(xs), dtype=np.float64), xs.shape)
        g = f / xs ** s if s else f
        p = np.zeros_like(xs)
        size = np.zeros_like(xs)
        for v in c[::-1]:
            p = p * xs + v
            size = size * np.abs(xs) + abs(v)
        w = 1.0 / g if prob.relative else np.ones_like(xs)
        if weight is not None:
            w = w * np.broadcast_to(np.asarray(weight.np(xs), dtype=np.float64), xs.shape)
        es = w * (p - g)
        # float64 evaluation: a few ulps of each term, far more than the rounding of the coefficients to
        # float (1e-16 relative) and of the libm calls (< 1 ulp)
        noise = 64 * np.finfo(np.float64).eps * (np.abs(w) * (size + np.abs(g)))
    bad = ~(np.isfinite(es) & np.isfinite(noise))
    if np.any(bad):
        with mpmath.workprec(PREC):
            for i in np.flatnonzero(bad):
                es[i] = float(prob.error(coeffs, mpmath.mpf(xs[i])))
                noise[i] = 0.0
    top = np.max(np.abs(es))
    if not np.isfinite(top) or top * _NOISE_FLOOR < np.max(noise):
        return None
    return xs.tolist(), es.tolist(), noise.tolist()


def gw_floats(prob: Problem, xs, *, prec: int = PREC):
    """(g, w) of Problem.gw at the float points ``xs``, each computed at ``prec`` bits and rounded to float64:
    in ball arithmetic where f (and the weight) takes balls (ten times faster than mpmath), else in mpmath."""
    xs = [float(x) for x in xs]
    memo = prob.memo
    todo = [x for x in dict.fromkeys(xs) if (x, prec) not in memo]
    if todo and _takes_balls(prob):
        old = flint.ctx.prec
        flint.ctx.prec = prec
        try:
            for x in todo:
                g, w = gw_ball(prob, flint.arb(x))
                memo[x, prec] = (float(g.mid()), float(w.mid()))
        finally:
            flint.ctx.prec = old
    elif todo:
        with mpmath.workprec(prec):
            for x in todo:
                g, w = prob.gw(mpmath.mpf(x))
                memo[x, prec] = (float(g), float(w))
    gw = [memo[x, prec] for x in xs]
    return np.array([g for g, _ in gw]), np.array([w for _, w in gw])


def _takes_balls(prob: Problem) -> bool:
    from ._target import takes_balls
    return takes_balls(prob.target) and (prob.weight is None or takes_balls(prob.weight))


def _newton_peak(prob: Problem, cs, lo, hi, start, sign: int, tol, *, inside: bool = False):
    """(x, e(x)) at the largest sign * e on [lo, hi] (e unimodal there): an end where sign * e' points out
    of the bracket, else the root of e' by Newton's method on the ball Taylor coefficients of e (midpoints),
    safeguarded by bisection on the sign of e' so that it never leaves the bracket. ``inside``: the caller
    knows that sign * e is larger inside than at both ends (so e' changes sign in between)."""
    def taylor(x, length):
        ser = err_series(prob, cs, to_arb(x), length)
        return [mpmath.mpf(ser[j]) for j in range(length)]

    if inside:
        cands = []
    else:
        t_lo, t_hi = taylor(lo, 2), taylor(hi, 2)
        cands = [(sign * t_lo[0], lo), (sign * t_hi[0], hi)]
        inside = sign * t_lo[1] > 0 and sign * t_hi[1] < 0
    if inside:
        left, right = lo, hi
        x = start if lo < start < hi else (lo + hi) / 2
        for _ in range(200):
            t = taylor(x, 3)
            d, curv = sign * t[1], sign * t[2]
            if d == 0:
                break
            if d > 0:
                left = x
            else:
                right = x
            nx = x - d / (2 * curv) if curv < 0 else None
            if nx is None or not left < nx < right:
                nx = (left + right) / 2
            step, x = abs(nx - x), nx
            if step <= tol or right - left <= tol:
                break
        cands.append((sign * taylor(x, 1)[0], x))
    val, x = max(cands)
    return x, sign * val


def sup_error(prob: Problem, coeffs, *, points: int | None = None, extra=()):
    """(max |e|, argmax) over [a, b] by scan and refinement (not rigorous: see certify())."""
    with mpmath.workprec(PREC):
        coeffs = [mpmath.mpf(c) for c in coeffs]
        ext = local_extrema(prob, coeffs, points=points, extra=extra)
        x, e = max(ext, key=lambda t: abs(t[1]))
        return abs(e), x


def _pick_alternating(ext, m):
    """m+1 consecutive extrema (signs alternate by construction) containing the largest one, the window
    with the largest smallest peak."""
    if len(ext) < m + 1:
        raise RuntimeError(f"Remez: only {len(ext)} sign changes for {m} free coefficients (not a Haar system?)")
    big = max(range(len(ext)), key=lambda i: abs(ext[i][1]))
    windows = [ext[s:s + m + 1] for s in range(len(ext) - m) if s <= big < s + m + 1]
    return max(windows, key=lambda w: min(abs(e) for _, e in w))


def _pad(prob: Problem, coeffs, ext, count: int):
    """Too few sign changes: an iterate from a degenerate reference (a symmetric one for an odd or even f
    gives E = 0). Add the endpoints, then midpoints of the widest gaps, to get ``count`` points; the next
    solve on this unsymmetric set is regular, and later iterations restore the alternation."""
    a, b = mpmath.mpf(prob.a), mpmath.mpf(prob.b)
    xs = sorted({x for x, _ in ext} | {x for x in (a, b) if not prob.degenerate_at(x)})
    while len(xs) < count:
        i = max(range(len(xs) - 1), key=lambda j: xs[j + 1] - xs[j])
        xs.insert(i + 1, (xs[i] + xs[i + 1]) / 2)
    return [(x, prob.error(coeffs, x)) for x in xs]


def _zero(prob, coeffs, lo, hi, flip: bool = False):
    """The sign change of the error (of sign(x) e where ``flip``) in [lo, hi] (Illinois regula falsi)."""
    def err(x):
        e = prob.error(coeffs, x)
        return -e if flip and x < 0 else e

    flo, fhi = err(lo), err(hi)
    side = 0
    for _ in range(200):
        x = (lo * fhi - hi * flo) / (fhi - flo)
        fx = err(x)
        if fx == 0 or hi - lo < abs(hi) * mpmath.mpf(2) ** -100:
            return x
        if (fx > 0) == (fhi > 0):
            hi, fhi = x, fx
            if side == 1:
                flo /= 2
            side = 1
        else:
            lo, flo = x, fx
            if side == -1:
                fhi /= 2
            side = -1
    return x


def _fold(prob: Problem) -> Problem | None:
    """The same problem on [0, max(-a, b)] when a < 0 < b and |e(-x)| = |e(x)| for every choice of the free
    coefficients (their powers x^(k - shift) of one parity, the reduced target g minus the fixed part q of
    that parity, |w| even: an odd f with odd powers, an even f with even powers, GELU's tanh form less a
    fixed x/2): then sup over [a, b] of |e| is its sup over [0, max(-a, b)]. The system around 0 is not a
    Haar system (each basis function takes the same value, up to sign, at x and -x), so the exchange
    cannot level there; on [0, c] it is (x^2 is monotonic) and the best approximation is the same. None
    when the problem has no such symmetry (see one_parity)."""
    a, b = mpmath.mpf(prob.a), mpmath.mpf(prob.b)
    sign = one_parity(prob)
    if sign is None:
        return None
    c = min(-a, b)
    q = [mpmath.mpf(prob.fixed.get(k, 0)) for k in range(prob.degree + 1)]
    for t in (mpmath.mpf(1) / 7, mpmath.mpf(2) / 5, mpmath.mpf(5) / 8, mpmath.mpf(9) / 10, mpmath.mpf(1)):
        x = c * t
        (gp, wp), (gm, wm) = prob.gw(x), prob.gw(-x)
        hp, hm = gp - prob.reduced(q, x), gm - prob.reduced(q, -x)
        tiny = mpmath.mpf(2) ** (-PREC + 24)
        if abs(hm - sign * hp) > tiny * (abs(gp) + abs(hp)) or abs(abs(wm) - abs(wp)) > tiny * abs(wp):
            return None
    return replace(prob, a=mpmath.mpf(0), b=max(-a, b), memo={})


def one_parity(prob: Problem):
    """+1 (even) or -1 (odd) when a < 0 < b and the free powers x^(k - shift) are all of that parity, else
    None: the case where the basis is not a Haar system around 0 (_fold solves it when f has that parity
    too; fa4num.fit refuses it otherwise)."""
    a, b = mpmath.mpf(prob.a), mpmath.mpf(prob.b)
    if not a < 0 < b:
        return None
    parity = {(k - prob.shift) % 2 for k in prob.free}   # the fixed part is in h = g - q, checked by _fold
    if len(parity) != 1:
        return None
    return -1 if parity.pop() else 1


def folds(prob: Problem) -> bool:
    """Whether remez() solves ``prob`` on its half interval (_fold)."""
    with mpmath.workprec(PREC):
        return _fold(prob) is not None


def _flip(prob: Problem) -> bool:
    """Whether the error has a zero at an interior x = 0 of odd order that no choice of the free
    coefficients removes: the lowest free power t = min(k - shift) >= 1 and the error of the fixed part
    alone, e_q = -w (g - q/x^shift), vanishes there to order z >= 1 (FA4's p(0) = 1 for 2^x on [-0.5, 0.5]:
    t = z = 1), so every error vanishes to order min(t, z)."""
    a, b = mpmath.mpf(prob.a), mpmath.mpf(prob.b)
    t = min(k - prob.shift for k in prob.free)
    if not a < 0 < b or t == 0:
        return False
    q = [mpmath.mpf(prob.fixed.get(k, 0)) for k in range(prob.degree + 1)]
    d = mpmath.taylor(lambda x: prob.error(q, x), mpmath.mpf(0), t)
    tiny = mpmath.mpf(2) ** (-PREC // 2) * (1 + max(abs(v) for v in d))
    z = next((j for j in range(t) if abs(d[j]) > tiny), t)
    return z % 2 == 1


def remez(prob: Problem, *, tol: float = 1e-12, maxiter: int = 60) -> RemezResult:
    """Best approximation (minimax) of ``prob`` with real coefficients.

    A problem symmetric about 0 is solved on its half interval (_fold; the extrema are mirrored back), a
    forced zero of odd order at an interior 0 is levelled on sign(x) e (_flip)."""
    m = len(prob.free)
    if m == 0:
        raise ValueError("fixed: every coefficient is fixed, nothing to fit")
    with mpmath.workprec(PREC):
        half = _fold(prob)
        if half is not None:
            r = _remez(half, m, tol, maxiter, False)
            mirrored = sorted({-x for x in r.extrema if x > 0} | set(r.extrema))
            return RemezResult(r.coeffs, r.level, r.max_error, mirrored, r.zeros, r.iterations)
        return _remez(prob, m, tol, maxiter, _flip(prob))


def _remez(prob: Problem, m: int, tol, maxiter: int, flip: bool) -> RemezResult:
    ref = _initial_reference(prob, m)
    for it in range(1, maxiter + 1):
        coeffs, level = _solve(prob, ref, flip)
        ext = local_extrema(prob, coeffs, extra=ref, flip=flip)
        if len(ext) < m + 1:
            ext = _pad(prob, coeffs, ext, m + 1)
        window = _pick_alternating(ext, m)
        emax = max(abs(e) for _, e in ext)
        emin = min(abs(e) for _, e in window)
        ref = [x for x, _ in window]
        if emax - emin <= tol * emax:
            break
    else:
        raise RuntimeError(f"Remez did not level the error in {maxiter} iterations "
                           f"(spread {float((emax - emin) / emax):.2e})")
    coeffs, level = _solve(prob, ref, flip)
    ext = local_extrema(prob, coeffs, extra=ref, flip=flip)
    emax = max(abs(e) for _, e in ext)
    window = _pick_alternating(ext, m)
    zeros = [_zero(prob, coeffs, window[i][0], window[i + 1][0], flip) for i in range(m)]
    return RemezResult(coeffs, abs(level), emax, [x for x, _ in window], zeros, it)
