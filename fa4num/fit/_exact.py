"""method="exact": the best coefficient set in a format, with a proof that no other set in the format beats it.

Problem: minimise E(c) = sup_[a,b] |e_c(x)| over every c whose free coefficients are numbers of the format.
For any finite grid X, E_X(c) = max_X |e_c(x_i)| <= E(c), and E_X is convex and piecewise linear in c. So
once an incumbent c* has a certified upper bound U >= E(c*), every set that could beat it lies in the polytope
    R(X, U) = { c real : |w(x_i) (P_c(x_i) - g(x_i))| <= U  for every x_i in X },
and the proof is: enumerate the format's points inside R (branch and bound on LP relaxations), then show that
each of them other than c* has a rigorous lower bound above U.

Enumeration (a depth-first branch and bound, one coordinate per level): at a node the first j coordinates
are fixed to format numbers; two LPs (scipy's HiGHS) give the least and greatest value of coordinate j+1
over R with those fixed, and every format number in that range becomes a child (none: the node is pruned).
The last coordinate's range is the intersection of one interval per grid point, so leaves need no LP.
Coordinates are scaled to units of their format spacing at the incumbent, so the LPs are well conditioned.
The LP is solved in floating point; every range is widened by 1e-6 spacing and R by a relative 1e-7, far
more than the solver's tolerances (1e-10) and the float64 rounding of the constraint data (1e-16 relative
to f), so the enumeration cannot drop a point of R -- the tests re-check this independently (brute force
over a box at low degree, a MILP on a different grid at degree 5).

Cutting planes: a coarse grid makes R large (many candidates whose error between grid points is large).
Each round adds the points where the candidates reach their maximum error to the grid and enumerates again
with the best certified bound so far, until the candidate list stops shrinking.

Rivals' lower bounds are |e_c(x)| at one exact point x in python-flint ball arithmetic (rigorous), the
winner's upper bound comes from fa4num.fit's certified sup norm (_certify) with a tolerance of 1e-9.
"""
from __future__ import annotations

import math
import time

import flint
import mpmath
import numpy as np

from ._certify import certify, point_error_lower
from ._formats import Format
from ._records import CERT_TOL, LP_SLACK, RANGE_SLACK, BoundedSearch, ExactCertificate, Rival
from ._remez import PREC, Problem, gw_floats, sup_error
from ._series import gw_ball
from ._target import takes_balls
from ._witness import box_rows, node_record

class _Region:
    """The scaled constraints |r_i + A_i u| <= 1 of R(X, U), with c_k = base_k + scale_k u_k."""

    def __init__(self, prob: Problem, grid, base: dict, scale: dict):
        self.prob, self.free = prob, prob.free
        self.grid = [float(x) for x in grid]
        self.base = dict(base)
        self.scale = dict(scale)
        s = prob.shift
        c = [float(prob.fixed[k]) if k in prob.fixed else float(base[k]) for k in range(prob.degree + 1)]
        # each entry at 128 bits, rounded once to float64: in ball arithmetic where f takes balls (ten
        # times faster), else in mpmath
        r, A = [], []
        if takes_balls(prob.target) and (prob.weight is None or takes_balls(prob.weight)):
            old = flint.ctx.prec
            flint.ctx.prec = PREC
            try:
                for x in self.grid:
                    xb = flint.arb(x)
                    g, w = gw_ball(prob, xb)
                    p = flint.arb(0)
                    for v in reversed(c[s:]):
                        p = p * xb + v
                    r.append(float((w * (p - g)).mid()))
                    A.append([float((flint.arb(scale[k]) * xb ** (k - s) * w).mid()) for k in self.free])
            finally:
                flint.ctx.prec = old
        else:
            with mpmath.workprec(PREC):
                for x in self.grid:
                    x = mpmath.mpf(x)
                    g, w = prob.gw(x)
                    p = sum(mpmath.mpf(c[k]) * x ** (k - s) for k in range(s, prob.degree + 1))
                    r.append(float(w * (p - g)))
                    A.append([float(mpmath.mpf(scale[k]) * x ** (k - s) * w) for k in self.free])
        self.r0 = np.array(r)
        self.A0 = np.array(A)

    def rescale(self, scales: dict):
        for k, q in scales.items():
            j = self.free.index(k)
            self.A0[:, j] *= q / self.scale[k]
            self.scale[k] = q

    def cut(self, bound: float):
        self.bound = float(bound)
        U = bound * (1 + LP_SLACK)
        self.r = self.r0 / U
        self.A = self.A0 / U


def _lp_range(region: _Region, j: int, fixed_u: np.ndarray, bases: dict | None = None, key=None, start=None):
    """(least, greatest) u_j over R with u_0..u_(j-1) = fixed_u; None when infeasible.

    The monomial columns are nearly parallel (a thin polytope), so the LP is posed in the variables
    y = R v of a QR factorisation A_rest = Q R: its constraint matrix has orthonormal columns, and u_j is the
    linear form (R^-T e_0) . y.

    The LPs are tiny (at most 5 variables, about a hundred constraints) and come in long runs of near
    copies, so they are solved by an active-set (primal simplex) walk over the polytope's vertices
    (_walk) started from a feasible point: y = 0 (the incumbent, when this LP's slice holds it) or the
    vertex of an earlier LP (``bases``, with ``key`` saying which LP this is: each LP's optimal vertex is
    remembered as the grid points whose constraints are tight there). The walk ends at a vertex whose
    multipliers prove it optimal (the LP's optimality conditions, to 1e-9, the tolerance HiGHS is asked
    for). Where no feasible start is known, or the walk fails, HiGHS (scipy) solves the LP.

    ``start``: a feasible point of this slice in the variables A_rest acts on, when the caller has one (a
    node's parent does, see enumerate_region). Returns (least, greatest, the points in those variables
    where they are reached).
    """
    A_fix, A_rest = region.A[:, :j], region.A[:, j:]
    shift = region.r + A_fix @ fixed_u
    Q, R = np.linalg.qr(A_rest)
    e0 = np.zeros(R.shape[0])
    e0[0] = 1.0
    z = np.linalg.solve(R.T, e0)
    norm = np.linalg.norm(z)
    index = {x: i for i, x in enumerate(region.grid)}
    out = []
    for sign in (1.0, -1.0):
        c = sign * z / norm
        # feasible starting points: earlier LPs' optimal vertices (this LP's own first, then the others':
        # often the same vertex), the caller's point, the incumbent y = 0; the walk starts from the lowest
        starts = []
        if bases is not None and key is not None:
            known = list(bases.get((key, sign), ()))[:2]
            known += [v for k2, vs in bases.items() if k2 != (key, sign) for v in vs[:1]
                      if len(v) == Q.shape[1] and v not in known]
            starts = [_vertex(Q, shift, index, basis) for basis in known[:6]]
        if start is not None:
            starts.append((R @ start, []))
        starts.append((np.zeros(Q.shape[1]), []))
        feasible = [(float(c @ y0), i) for i, (y0, _) in enumerate(starts)
                    if y0 is not None and np.all(np.abs(Q @ y0 + shift) <= 1 + _VERTEX_TOL)]
        y = _walk(Q, shift, c, *starts[min(feasible)[1]]) if feasible else None
        if y is None:
            y = _highs_min(Q, shift, c)
            if y is None:
                return None
        if bases is not None and key is not None:
            basis = _tight_basis(Q, shift, y, region.grid)
            if basis is not None:
                known = bases.setdefault((key, sign), [])
                if basis in known:
                    known.remove(basis)
                known.insert(0, basis)
                del known[4:]
        out.append((sign * float(c @ y) * norm, np.linalg.solve(R, y)))
    return out[0][0], out[1][0], out[0][1], out[1][1]


_VERTEX_TOL = 1e-9


def _vertex(Q, shift, index: dict, basis):
    """(y, working set) at the vertex where the constraints of ``basis`` ((grid point, side) pairs) are
    tight, or (None, None) when a point is not on this grid or the rows are singular."""
    rows = [index.get(x) for x, _ in basis]
    if None in rows or len(rows) != Q.shape[1]:
        return None, None
    sides = [sd for _, sd in basis]
    try:
        y = np.linalg.solve(Q[rows], np.array(sides) - shift[rows])
    except np.linalg.LinAlgError:
        return None, None
    return y, list(zip(rows, sides))


def _walk(Q, shift, c, y, work, max_steps: int = 200):
    """argmin c.y over {-1 - shift <= Q y <= 1 - shift} by a primal active-set walk from the feasible point
    ``y`` with the tight constraints ``work`` ((row, side) pairs): move along -c projected on the working
    set's null space to the first constraint met (it joins the set); where that projection vanishes, the
    multipliers of c on the set's normals say whether the point is optimal, or which constraint to
    release. None when ``y`` is not feasible or the walk does not settle (degenerate cycling)."""
    if y is None:
        return None
    act = Q @ y + shift
    if np.any(np.abs(act) > 1 + _VERTEX_TOL):
        return None
    work = list(work)
    scale = np.linalg.norm(c)
    for _ in range(max_steps):
        if work:
            N = Q[[i for i, _ in work]] * np.array([sd for _, sd in work])[:, None]   # outward normals
            mu, *_ = np.linalg.lstsq(N.T, -c, rcond=None)
            # at a vertex (as many tight constraints as variables) there is no direction left
            d = np.zeros_like(c) if len(work) >= len(c) else -c - N.T @ mu
        else:
            mu, d = np.zeros(0), -c
        if np.linalg.norm(d) <= 1e-9 * scale:
            # -c is a combination of the working normals: optimal when every multiplier is >= 0
            worst = int(np.argmin(mu)) if len(mu) else -1
            if worst < 0 or mu[worst] >= -_VERTEX_TOL * scale:
                return y
            del work[worst]
            continue
        rate = Q @ d
        room = np.where(rate > 0, 1 - act, -1 - act)       # distance to the bound met when moving along d
        with np.errstate(divide="ignore", invalid="ignore"):
            step = np.where(np.abs(rate) > 1e-14 * np.linalg.norm(d), room / rate, np.inf)
        for i, _ in work:
            step[i] = np.inf
        i = int(np.argmin(step))
        if not np.isfinite(step[i]):
            return None          # unbounded along d: not this LP (R is bounded); let HiGHS say why
        y = y + max(step[i], 0.0) * d
        act = Q @ y + shift
        work.append((i, 1.0 if rate[i] > 0 else -1.0))
    return None


def _tight_basis(Q, shift, y, grid):
    """The tight constraints at the LP solution y as (grid point, side) pairs, when there are exactly as many
    as variables (a non-degenerate vertex); else None."""
    act = Q @ y + shift
    up, lo = np.flatnonzero(np.abs(act - 1) <= _VERTEX_TOL), np.flatnonzero(np.abs(act + 1) <= _VERTEX_TOL)
    if len(up) + len(lo) != Q.shape[1]:
        return None
    return tuple([(grid[i], 1.0) for i in up] + [(grid[i], -1.0) for i in lo])


def _highs_min(Q, shift, c):
    """argmin c.y over {-1 - shift <= Q y <= 1 - shift} by HiGHS (scipy), None when infeasible."""
    from scipy.optimize import linprog
    # HiGHS's default choice can stop on these thin polytopes with "numerical difficulties" (status 4; seen with
    # scipy 1.17 at 1e-10 tolerances) where its interior-point method (with crossover to a vertex) solves them
    for method in ("highs", "highs-ipm"):
        res = linprog(c, A_ub=np.vstack([Q, -Q]), b_ub=np.concatenate([1 - shift, 1 + shift]),
                      bounds=(None, None), method=method, options={"primal_feasibility_tolerance": 1e-10,
                                                                   "dual_feasibility_tolerance": 1e-10})
        if res.status == 2:
            return None
        if res.status == 0:
            return res.x
    raise RuntimeError(f"exact search: LP failed (status {res.status}: {res.message})")


def _last_range(region: _Region, fixed_u: np.ndarray):
    """The last coordinate's range: one interval per grid point, intersected (no LP needed)."""
    m = region.A.shape[1]
    shift = region.r + region.A[:, :m - 1] @ fixed_u
    a = region.A[:, m - 1]
    lo, hi = -np.inf, np.inf
    nz = a != 0
    if np.any(np.abs(shift[~nz]) > 1):
        return None
    t1, t2 = (-1 - shift[nz]) / a[nz], (1 - shift[nz]) / a[nz]
    lo, hi = max(lo, np.max(np.minimum(t1, t2))), min(hi, np.min(np.maximum(t1, t2)))
    return (lo, hi) if lo <= hi else None


def _reduce(A: np.ndarray) -> np.ndarray:
    """A unimodular T (integer, det +-1) whose columns are an LLL-reduced basis of Z^m in the metric
    |A u|: in the coordinates y = T^-1 u the thin polytope R becomes round, so that branching one
    coordinate at a time meets few integers per level (Lenstra's idea)."""
    import flint
    _, R = np.linalg.qr(A)
    rows = R.T                                   # row i: the image of the unit vector e_i
    big = np.max(np.abs(rows))
    scale = 2.0 ** (60 - int(np.floor(np.log2(big))))
    basis = flint.fmpz_mat([[int(round(v * scale)) for v in row] for row in rows])
    _, U = basis.lll(transform=True)
    m = A.shape[1]
    return np.array([[int(U[i, j]) for j in range(m)] for i in range(m)], dtype=np.int64).T


class TooManySets(ValueError):
    """The region holds more sets than the search is allowed to list; ``found``: those listed before it
    stopped (free-coefficient tuples, all in the region), when it stopped during the enumeration."""

    def __init__(self, message, found=()):
        super().__init__(message)
        self.found = list(found)


def region_box(region: _Region, bases: dict | None = None, stats: dict | None = None):
    """{power: (least, greatest)} of the coefficient over R(X, U) (its cut already set), None when R is
    empty: the box of ExactCertificate, two LPs per free coefficient."""
    box = {}
    for k in region.free:
        j = region.free.index(k)
        perm = [j] + [i for i in range(len(region.free)) if i != j]
        sub = _Region.__new__(_Region)
        sub.r, sub.A, sub.grid = region.r, region.A[:, perm], region.grid
        rng = _last_range(sub, np.zeros(0)) if len(perm) == 1 else _lp_range(sub, 0, np.zeros(0), bases, ("box", k))
        if stats is not None:
            stats["lps"] += 0 if len(perm) == 1 else 2
        if rng is None:
            return None
        b, q = mpmath.mpf(region.base[k]), mpmath.mpf(region.scale[k])
        box[k] = (float(b + q * rng[0]), float(b + q * rng[1]))
    return box


def enumerate_region(region: _Region, fmt: Format, bound: float, *, max_nodes: int, max_sets: int = 20_000,
                     sublattice: bool = False, bases: dict | None = None, hint: dict | None = None,
                     witness: dict | None = None):
    """Every format point in R(X, bound): (list of free-coefficient tuples, box, nodes, lps).

    ``witness``: a dict that receives, per node (its prefix y_0..y_(j-1), comma-joined), the rows of the
    dual combinations proving its range (fa4num.fit._witness.node_record).

    ``hint``: a dict filled by the enumeration of a region that contains this one (the previous round of
    exact_search: a finer grid and a cut no higher, same base and scale), and updated here. Its box then
    stands for this region's in deciding the spacing of each coefficient (an outer box that passed those
    tests passes them for any region inside it; a finer spacing than needed only adds lattice points that
    the leaves drop), and its coordinate order is kept when the reduced basis is the same (the order only
    decides how fast the enumeration goes): the box and width LPs are then not solved again. The box
    returned is then the hint's (exact_search computes the last round's own box at the end).

    Points are integer vectors u (c_k = base_k + scale_k u_k, scale_k the finest spacing of the format over
    the coefficient's range) in the reduced coordinates u = T y; those that are numbers of the format are
    kept. A coefficient whose range holds 0 has format numbers of every binade down to the subnormals, too
    many to list: ``sublattice=False`` refuses (TooManySets), ``sublattice=True`` takes only the multiples
    of one spacing for it (see below), so the points returned are then a subset (``region.complete`` is set
    to False)."""
    region.complete = True
    region.cut(bound)
    free = region.free
    m = len(free)
    stats = {"nodes": 0, "lps": 0}

    def ranges(B, keys):
        out = []
        for j in range(m):
            perm = [j] + [i for i in range(m) if i != j]
            sub = _Region.__new__(_Region)
            sub.r, sub.A, sub.grid = region.r, B[:, perm], region.grid
            out.append(_last_range(sub, np.zeros(0)) if m == 1 else
                       _lp_range(sub, 0, np.zeros(0), bases, keys[j])[:2])
            stats["lps"] += 0 if m == 1 else 2
        return out

    if hint is not None and "box" in hint:
        box = hint["box"]
    else:
        box = region_box(region, bases, stats)
        if box is None:
            return [], {}, stats["nodes"], stats["lps"]
        if hint is not None:
            hint["box"] = box
    # a range that reaches into a smaller binade holds numbers of a finer spacing: refine that scale
    finer, rebase = {}, {}
    for k, (lo, hi) in box.items():
        if lo <= 0 <= hi:
            if not sublattice:
                raise TooManySets(f"method: the exact search region lets c{k} be 0 (its sign is not "
                                  f"determined); leave x^{k} out of the monomials or use method='remez'")
            # multiples of one spacing counted from 0 (a number of every format): those of the binade of the
            # incumbent's value, but at most 2^6 binades below the range's largest magnitude (the numbers
            # that are not of the format, in coarser binades, are dropped at the leaves)
            top = max(abs(lo), abs(hi))
            rebase[k] = float(fmt.quantum(max(abs(region.base[k]), top * 2.0 ** -6)))
            continue
        q = float(fmt.quantum(min(abs(lo), abs(hi))))
        if q < region.scale[k]:
            finer[k] = q
    if rebase:
        base = {**region.base, **{k: 0.0 for k in rebase}}
        scale = {**region.scale, **finer, **rebase}
        complete_grid = region.grid
        region.__init__(region.prob, complete_grid, base, scale)
        region.complete = False
        region.cut(bound)
    elif finer:
        region.rescale(finer)
        region.cut(bound)
    T = _reduce(region.A)
    if hint is not None and hint.get("T") is not None and np.array_equal(hint["T"], T):
        order = hint["order"]
    else:
        B = region.A @ T
        widths = [hi - lo for lo, hi in ranges(B, [("width", tuple(T[:, j].tolist())) for j in range(m)])]
        order = np.argsort(widths)
        if hint is not None:
            hint.update(T=T, order=order)
    T = T[:, order]
    region.T = T   # the coordinates u = T y of the enumeration, for the completeness witness (_witness)
    B = region.A @ T
    sub = _Region.__new__(_Region)
    sub.r, sub.A, sub.grid = region.r, B, region.grid
    found = []
    base = np.array([region.base[k] for k in free])
    scale = np.array([region.scale[k] for k in free])

    def visit(j, fixed_y, start=None):
        stats["nodes"] += 1
        if stats["nodes"] > max_nodes:
            raise TooManySets(f"method: the exact search visited more than {max_nodes} nodes; use method='remez'",
                              found)
        if j == m - 1:
            rng = _last_range(sub, np.array(fixed_y, dtype=float))
        else:
            rng = _lp_range(sub, j, np.array(fixed_y, dtype=float), bases, ("node", j), start)
            stats["lps"] += 2
        if witness is not None:
            shift = sub.r + sub.A[:, :j] @ np.array(fixed_y, dtype=float)
            witness[",".join(map(str, fixed_y))] = node_record(sub.A[:, j:], shift, rng)
        if rng is None:
            return
        # a lazy range: a region that is huge in some direction (a coefficient free to be 0) can hold more
        # integers than memory; the node and set limits stop the search long before it is listed
        ys = range(int(np.ceil(rng[0] - RANGE_SLACK)), int(np.floor(rng[1] + RANGE_SLACK)) + 1)
        if j < m - 1:
            lo, hi, v_lo, v_hi = rng
            for y in ys:
                # a feasible point of the child's slice: on the segment between this slice's extreme points
                t = (y - lo) / (hi - lo) if hi > lo else 0.0
                child = (v_lo + t * (v_hi - v_lo))[1:] if 0.0 <= t <= 1.0 else None
                visit(j + 1, fixed_y + [y], child)
            return
        if len(found) + len(ys) > max_sets:
            raise TooManySets(f"method: the exact search region holds more than {max_sets} coefficient sets "
                              f"within the incumbent's error: the error is flat in some direction (typically "
                              f"set at one point by one coefficient, so many sets tie); use method='remez'", found)
        ys = np.arange(ys.start, ys.stop)
        Y = np.column_stack([np.repeat(np.array(fixed_y, dtype=np.int64)[None, :], len(ys), axis=0), ys])
        C = base + (Y @ T.T) * scale      # exact: integers times powers of two, well inside float64
        ok = np.all(fmt.round_array(C) == C, axis=1)
        found.extend(tuple(row) for row in C[ok].tolist())

    visit(0, [])
    return found, box, stats["nodes"], stats["lps"]


def _fine_errors(prob: Problem, cands: np.ndarray, grid: np.ndarray, g: np.ndarray, w: np.ndarray):
    """float64 |e| of every candidate on ``grid``: (max, argmax point) per candidate."""
    s = prob.shift
    powers = np.vander(grid, prob.degree + 1 - s, increasing=True).T
    best, where = np.empty(len(cands)), np.empty(len(cands))
    for lo in range(0, len(cands), 1024):
        e = np.abs((cands[lo:lo + 1024, s:] @ powers - g) * w)
        i = np.argmax(e, axis=1)
        best[lo:lo + 1024], where[lo:lo + 1024] = e[np.arange(len(i)), i], grid[i]
    return best, where


def _fine_grid(prob: Problem, extrema, points: int = 1024):
    """Where candidates are ranked: equispaced plus a dense cluster at each extremum of the optimum (the
    candidates' peaks sit next to them). float64 arithmetic is enough to rank errors of 1e-10 and more."""
    a, b = float(prob.a), float(prob.b)
    xs = [np.linspace(a, b, points + 1)]
    for x in extrema:
        xs.append(np.clip(float(x) + (b - a) * np.linspace(-2, 2, 129) / points, a, b))
    grid = np.unique(np.concatenate(xs))
    return (grid, *gw_floats(prob, grid))


def exact_search(prob: Problem, fmt: Format, opt, incumbent, *, max_nodes: int = 20_000,
                 max_rounds: int = 6, with_witness: bool = True):
    """The proven best set in ``fmt`` (full list c0..cn) and its :class:`ExactCertificate`.

    ``with_witness``: attach the completeness witness (the dual rows of every node's LPs, _witness.build),
    which fa4num.fit.verify_certificate re-checks with no LP.

    ``opt``: the real-coefficient optimum (its extrema seed the grids); ``incumbent``: any set in the
    format (its certified error is the first cut)."""
    t0 = time.perf_counter()
    free = prob.free
    a, b = float(prob.a), float(prob.b)
    ext = [float(x) for x in opt.extrema]
    fine, fine_g, fine_w = _fine_grid(prob, ext)
    with mpmath.workprec(PREC):
        scale = {}
        for k in free:
            ref = incumbent[k] if incumbent[k] != 0 else opt.coeffs[k]
            scale[k] = float(fmt.quantum(ref if ref != 0 else 1.0))
    base = {k: float(incumbent[k]) for k in free}

    def full(vals):
        c = [float(prob.fixed.get(k, 0.0)) for k in range(prob.degree + 1)]
        for k, v in zip(free, vals):
            c[k] = v
        return c

    def upper_of(c):
        e, x = sup_error(prob, c, extra=ext)
        cert = certify(prob, c, extrema=[x], rel_tol=CERT_TOL)
        return cert.upper, cert.lower, x

    best = list(map(float, incumbent))
    best_up, best_lo, _ = upper_of(best)
    n0 = 16 * (len(free) + 1)
    grid = set(np.linspace(a, b, n0 + 1).tolist()) | set(ext)
    for x in ext:
        grid |= {min(max(x + d * (b - a) * 2.0 ** -k, a), b) for k in (8, 12) for d in (-1, 1)}
    nodes = lps = 0
    bases = {}   # optimal LP vertices, shared by the rounds (see _lp_range)
    hint = {}    # box and coordinate order, shared by the rounds: each round's region lies in the last one's
    prev = None
    for rnd in range(1, max_rounds + 1):
        region = _Region(prob, sorted(grid), base, scale)
        nodes_w = {} if with_witness else None
        found, box, nn, nl = enumerate_region(region, fmt, best_up, max_nodes=max_nodes, bases=bases, hint=hint,
                                              witness=nodes_w)
        nodes, lps = nodes + nn, lps + nl
        cands = np.array([full(v) for v in found]) if found else np.zeros((0, prob.degree + 1))
        if best not in cands.tolist():
            raise RuntimeError("exact search: the incumbent is not in its own region (LP tolerance?)")
        approx, where = _fine_errors(prob, cands, fine, fine_g, fine_w)
        order = np.argsort(approx)
        # the winner: the best of the few closest contenders by mpmath sup norm, then certified
        top = [cands[i].tolist() for i in order if approx[i] <= approx[order[0]] * (1 + 1e-6)][:4]
        contender = top[0] if len(top) == 1 else min(top, key=lambda c: sup_error(prob, c, extra=ext)[0])
        if contender != best:
            up, lo, _ = upper_of(contender)
            if up < best_up:
                best, best_up, best_lo = contender, up, lo
        if prev is not None and len(found) >= prev:
            break
        prev = len(found)
        # cutting planes: the points where the candidates peak
        grid |= set(where.tolist())
    if rnd > 1:   # the rounds after the first took the first round's box: the last region's own
        box = region_box(region, bases) or box
    rivals, unresolved = [], []
    for c, x in zip(cands.tolist(), where.tolist()):
        if c == best:
            continue
        lo = point_error_lower(prob, c, x)
        if lo <= best_up:
            _, x = sup_error(prob, c, extra=ext + [x])
            lo = point_error_lower(prob, c, float(x))
            x = float(x)
        rival = Rival(tuple(c), lo, x)
        (rivals if lo > best_up else unresolved).append(rival)
    rivals.sort(key=lambda r: r.certified_lower)
    witness = None
    if with_witness and not unresolved and None not in nodes_w.values():
        witness = _witness(region, nodes_w)
    cert = ExactCertificate(tuple(region.grid), region.bound, box, len(found), best_up, best_lo, tuple(rivals),
                            tuple(unresolved), nodes, lps, rnd, time.perf_counter() - t0, witness=witness)
    return best, cert


def _witness(region: _Region, nodes: dict) -> dict:
    """The completeness witness of the last enumeration of ``region`` (fa4num.fit._witness): its coordinates,
    the node records gathered by enumerate_region, the rows of the box and the combinations bounding each
    coefficient (which show that the lattice base + scale u holds every number of the format there)."""
    m = len(region.free)
    coeff_box = []   # the range of each coefficient over R, in u (c = base + scale u): two LPs each
    for j in range(m):
        perm = [j] + [i for i in range(m) if i != j]
        sub = _Region.__new__(_Region)
        sub.r, sub.A, sub.grid = region.r, region.A[:, perm], region.grid
        rng = _last_range(sub, np.zeros(0)) if m == 1 else _lp_range(sub, 0, np.zeros(0))
        coeff_box.append(node_record(sub.A, region.r, rng))
    return {"T": region.T.astype(int).tolist(), "base": [float(region.base[k]) for k in region.free],
            "scale": [float(region.scale[k]) for k in region.free], "grid": list(region.grid),
            "bound": float(region.bound), "box": box_rows(region.A @ region.T), "coeff_box": coeff_box,
            "nodes": nodes}


def bounded_search(prob: Problem, fmt: Format, opt, incumbent, *, max_nodes: int = 1500, max_sets: int = 4000,
                   tries: int = 8):
    """A set at least as good as ``incumbent`` (full list c0..cn) and the :class:`BoundedSearch` record.

    Where the complete search is too big (six or more free coefficients, a flat error, a coefficient whose
    sign is open), the same enumeration is run on the region R(X, U) cut at smaller U: a cut between the
    real optimum's error (no set can do better) and the incumbent's holds far fewer sets. Each cut either
    lists its sets (the best, by mpmath sup norm, replaces the incumbent if better, and the next cut is the
    new incumbent's error), comes back empty (no set does better than U: the next cut is higher), or is too
    big (the next cut is lower) -- a bisection in log scale on the error, ``tries`` enumerations at most.
    The lattice points near the optimum that the neighbourhood search and fpminimax's rounding miss (13-49
    spacings away at degree 5, issue 13) are what this finds: the LLL-reduced coordinates of the
    enumeration reach them directly."""
    t0 = time.perf_counter()
    free = prob.free
    a, b = float(prob.a), float(prob.b)
    ext = [float(x) for x in opt.extrema]
    fine, fine_g, fine_w = _fine_grid(prob, ext)

    def full(vals):
        c = [float(prob.fixed.get(k, 0.0)) for k in range(prob.degree + 1)]
        for k, v in zip(free, vals):
            c[k] = v
        return c

    best = [float(c) for c in incumbent]
    best_e = float(sup_error(prob, best, extra=ext)[0])
    start_e = best_e
    n0 = 16 * (len(free) + 1)
    grid = set(np.linspace(a, b, n0 + 1).tolist()) | set(ext)
    for x in ext:
        grid |= {min(max(x + d * (b - a) * 2.0 ** -k, a), b) for k in (8, 12) for d in (-1, 1)}
    lo, hi = float(opt.max_error), None          # every cut at or below lo came back complete
    target = best_e * (1 + 1e-9)
    cuts, floor, complete = [], None, True
    nodes = lps = total = 0
    bases = {}   # optimal LP vertices, shared by the cuts (see _lp_range)
    for _ in range(tries):
        with mpmath.workprec(PREC):
            scale = {k: float(fmt.quantum(best[k] if best[k] != 0 else (opt.coeffs[k] or 1)))
                     for k in free}
        region = _Region(prob, sorted(grid), {k: best[k] for k in free}, scale)
        stopped = False
        try:
            found, _, nn, nl = enumerate_region(region, fmt, target, max_nodes=max_nodes, max_sets=max_sets,
                                                sublattice=True, bases=bases)
            nodes, lps = nodes + nn, lps + nl
        except TooManySets as exc:
            # the sets listed before the search stopped are still sets with a small error on the grid
            found, stopped = exc.found, True
            nodes += max_nodes
        complete = complete and getattr(region, "complete", True)
        cuts.append((target, "too many" if stopped else len(found) or "none"))
        before = best_e
        if found:
            total += len(found)
            cands = np.array([full(v) for v in found])
            approx, where = _fine_errors(prob, cands, fine, fine_g, fine_w)
            for i in np.argsort(approx)[:4]:
                c = cands[i].tolist()
                if c != best:
                    e = float(sup_error(prob, c, extra=ext + [float(where[i])])[0])
                    if e < best_e:
                        best, best_e = c, e
            grid |= set(where.tolist())    # cutting planes: where the candidates peak
        if stopped:
            hi = target
            target = math.sqrt(lo * hi) if best_e >= before else best_e * (1 + 1e-9)
            if target >= hi:
                target = math.sqrt(lo * hi)
            if hi / lo - 1 < 1e-4:
                break
            continue
        lo = max(lo, target)
        if not found and region.complete:
            floor = target if floor is None else max(floor, target)   # no set in the format below this cut
        if target >= best_e and (region.complete or best_e >= before):
            # the whole region below the incumbent's error was listed (or, on a sub-lattice, the incumbent
            # it gave did not improve: a sub-lattice taken around a new incumbent is another one)
            break
        top = best_e * (1 + 1e-9) if hi is None else min(hi, best_e * (1 + 1e-9))
        target = top if found else math.sqrt(target * top)
    record = BoundedSearch(tuple(cuts), floor, total, complete, best_e < start_e, nodes, lps,
                           time.perf_counter() - t0)
    return best, record
