"""The completeness witness of method="exact", and its check with no LP solver.

The exact search proves that every coefficient set of the format with error <= U lies in the polytope
R(X, U) = { c : |w(x_i) (P_c(x_i) - g(x_i))| <= U, x_i in X } and lists R's format points by a branch and
bound over integer coordinates y (c = base + scale * (T y), T unimodular) in which each node fixes
y_0..y_(j-1) and an LP gives the range of y_j. An LP's answer is proved by its dual: at the optimal vertex,
multipliers lambda >= 0 on d = m - j tight constraints s_i (a_i . y + b_i) <= U whose combination is -y_j
(least) or +y_j (greatest), so that y_j >= -sum lambda_i (U - s_i (b_i + a_i,fixed . y_fixed)); an empty
slice by a Farkas combination (d + 1 constraints, lambda >= 0, the y's cancel, the bounds sum below 0).

The witness stores, per node, those constraints (grid point, side) and their multipliers (floats), and m
rows for a box. The verifier (:func:`verify`) rebuilds every constraint in ball arithmetic (python-flint,
128 bits) from the problem's definition; bounds every |y_c| over R by inverting the box rows in ball
arithmetic (loose, which is enough: it only multiplies residuals of 1e-15); then, at each
node, takes the stored multipliers as exact numbers (>= 0), computes the combination's residual rho (the
part of it that is not +-y_j) in balls and bounds rho . y by the box (Neumaier and Shcherbina's rigorous
LP bound, so multipliers from a floating-point solver, or from a degenerate vertex, are enough); walks the
same tree, and checks that every format point it reaches is the winner or a rival whose certified lower
bound exceeds the winner's certified upper bound. That the integer points reach every set of the format is
checked too: T unimodular, every grid point inside [a, b], and each coefficient's range over R (proved the
same way from its own combinations) of one sign, where the format's numbers are multiples of the lattice's
step from its base. No LP is solved, and nothing the prover computed in
floating point is trusted: a wrong witness can only make the check fail.
"""
from __future__ import annotations

import math
from fractions import Fraction

import flint
import mpmath
import numpy as np

WITNESS_PREC = 128
_DUAL_TOL = 1e-9   # a dual multiplier below this share of the largest is taken as 0 (not a tight row)


def node_record(Br: np.ndarray, shift: np.ndarray, rng) -> dict | None:
    """The witness record of one node of the enumeration (fa4num.fit._exact.enumerate_region): the slice
    -1 <= shift + Br v <= 1 (the region's rows scaled by its cut, v the coordinates not yet fixed) and the
    range the prover found, (least, greatest, v at least, v at greatest) or, with one coordinate left,
    (least, greatest); None for an empty slice. Returns {"lo": comb, "hi": comb} or {"empty": comb}, a comb
    {"rows": [[grid index, side], ...], "lam": [multiplier, ...]}; None where no tight rows combine to the
    bound (the record is then missing and the certificate has no witness)."""
    n, d = Br.shape
    if d == 1:
        return _node_1d(Br[:, 0], shift)
    if rng is None:
        return {"empty": _farkas(Br, shift)}
    rec = {}
    for key, sign, v in (("lo", 1.0, rng[2]), ("hi", -1.0, rng[3])):
        comb = _dual(Br, shift, v, sign)
        if comb is None:
            return None
        rec[key] = comb
    return rec


def _dual(Br, shift, v, sign):
    """Constraints tight at v whose outward normals combine, with multipliers >= 0, to -sign e_0 (v minimises
    sign * v_0): the LP's optimality proof, d rows at a vertex (fewer where the optimum is a face: a row at
    x = 0 involves the constant term alone). Tried over the tight rows' subsets, strictly positive
    multipliers first (a zero one adds a row that proves nothing)."""
    import itertools
    n, d = Br.shape
    act = shift + Br @ v
    gap = 1 - np.abs(act)
    tight = [int(i) for i in np.argsort(gap)[:d + 4] if gap[i] <= 1e-7]
    target = np.zeros(d)
    target[0] = -sign
    fallback = None
    for k in [d] + list(range(1, d)):
        for combo in itertools.islice(itertools.combinations(tight, k), 200):
            sides = [1 if act[i] > 0 else -1 for i in combo]
            N = Br[list(combo)] * np.array(sides)[:, None]
            lam, *_ = np.linalg.lstsq(N.T, target, rcond=None)
            if np.linalg.norm(N.T @ lam - target) > 1e-9 or np.any(lam < -1e-9 * np.max(np.abs(lam))):
                continue
            comb = {"rows": [[i, sd] for i, sd in zip(combo, sides)], "lam": np.maximum(lam, 0.0).tolist()}
            if np.all(lam > 1e-9 * np.max(np.abs(lam))):
                return comb
            fallback = fallback or comb
    return fallback


def _rows(marginals: np.ndarray, n: int) -> dict:
    """The rows of nonzero dual value (HiGHS's marginals of A_ub = [Br; -Br]) and their multipliers, the
    largest first."""
    dual = -np.asarray(marginals)[:2 * n]
    top = np.max(dual) if dual.size else 0.0
    idx = np.flatnonzero(dual > _DUAL_TOL * top)
    idx = idx[np.argsort(-dual[idx])]
    return {"rows": [[int(i % n), 1 if i < n else -1] for i in idx], "lam": (dual[idx] / dual[idx[0]]).tolist()}


def _farkas(Br, shift) -> dict:
    """A Farkas combination proving the slice empty: the dual of the phase-1 LP min t s.t.
    s (shift + Br v) <= 1 + t (HiGHS; an empty slice is rare: the prover met one only where its own LP
    went to HiGHS too)."""
    from scipy.optimize import linprog
    n, d = Br.shape
    ones = np.ones((n, 1))
    A_ub = np.block([[Br, -ones], [-Br, -ones]])
    b_ub = np.concatenate([1 - shift, 1 + shift])
    c = np.zeros(d + 1)
    c[-1] = 1.0
    res = linprog(c, A_ub=A_ub, b_ub=b_ub, bounds=(None, None), method="highs")
    if res.status != 0:
        raise RuntimeError(f"witness: phase-1 LP failed ({res.message})")
    return _rows(res.ineqlin.marginals, n)


def _node_1d(a: np.ndarray, shift: np.ndarray) -> dict:
    """One coordinate left: the range is an intersection of intervals; its ends are two rows."""
    zero = a == 0
    if np.any(np.abs(shift[zero]) > 1):
        i = int(np.flatnonzero(zero & (np.abs(shift) > 1))[0])
        return {"empty": {"rows": [[i, 1 if shift[i] > 1 else -1]], "lam": [1.0]}}
    nz = np.flatnonzero(~zero)
    t1, t2 = (-1 - shift[nz]) / a[nz], (1 - shift[nz]) / a[nz]
    lows, highs = np.minimum(t1, t2), np.maximum(t1, t2)
    i_lo, i_hi = int(nz[np.argmax(lows)]), int(nz[np.argmin(highs)])
    # the lower end comes from the side whose normal s a points down (s a < 0), the upper from s a > 0
    s_lo, s_hi = (-1 if a[i_lo] > 0 else 1), (1 if a[i_hi] > 0 else -1)
    lo = {"rows": [[i_lo, s_lo]], "lam": [1.0 / abs(a[i_lo])]}
    hi = {"rows": [[i_hi, s_hi]], "lam": [1.0 / abs(a[i_hi])]}
    if np.max(lows) > np.min(highs):
        return {"empty": {"rows": [[i_lo, s_lo], [i_hi, s_hi]], "lam": [1.0, abs(a[i_lo]) / abs(a[i_hi])]}}
    return {"lo": lo, "hi": hi}


def box_rows(B: np.ndarray) -> list:
    """m grid rows of B (the region's rows in the coordinates y) that are well conditioned together, picked
    greedily (each the row farthest from the span of those before it): the verifier inverts them in ball
    arithmetic to bound every |y_c| over R, the box that absorbs the residual of a combination."""
    n, m = B.shape
    rows, Q = [], np.zeros((0, m))
    norms = np.linalg.norm(B, axis=1, keepdims=True)
    R = np.divide(B, norms, out=np.zeros_like(B), where=norms > 0)   # a zero row (x = 0, no c0) is never picked
    for _ in range(m):
        res = R - (R @ Q.T) @ Q
        i = int(np.argmax(np.linalg.norm(res, axis=1)))
        rows.append(i)
        Q = np.vstack([Q, res[i] / np.linalg.norm(res[i])])
    return rows


class Invalid(Exception):
    """The witness does not prove what the certificate claims; the message says where."""


def verify(prob, fmt, winner, rivals, witness: dict, *, winner_upper: float) -> dict:
    """Re-check completeness from the witness alone (ball arithmetic, no LP): every format point in
    R(X, bound) is the winner or one of ``rivals`` ({coeffs tuple: point}) whose rigorous lower bound,
    recomputed here, exceeds ``winner_upper`` (itself recomputed by the caller). Raises Invalid with the
    reason; returns counts {"nodes", "points"}."""
    from ._certify import point_error_lower
    from ._series import gw_ball
    from ._target import to_arb
    T = [[int(v) for v in row] for row in witness["T"]]
    m = len(T)
    free = prob.free
    if len(witness["base"]) != m or len(witness["scale"]) != m or len(free) != m:
        raise Invalid("witness: its dimensions do not match the problem's free coefficients")
    base, scale = [float(v) for v in witness["base"]], [float(v) for v in witness["scale"]]
    U = float(witness["bound"])
    if not winner_upper <= U:
        raise Invalid(f"the winner's certified bound {winner_upper!r} exceeds the region's cut {U!r}")
    nodes = witness["nodes"]
    old = flint.ctx.prec
    flint.ctx.prec = WITNESS_PREC
    try:
        s = prob.shift
        full_base = [float(prob.fixed.get(k, 0.0)) for k in range(prob.degree + 1)]
        for k, v in zip(free, base):
            full_base[k] = v
        rows_a, rows_b, rows_u = [], [], []   # a row in y = T^-1 u, its constant, the row in u
        a, b = float(prob.a), float(prob.b)
        if not all(a <= float(x) <= b for x in witness["grid"]):
            raise Invalid("witness: a grid point lies outside the interval (its constraint would not hold)")
        if abs(int(flint.fmpz_mat(T).det())) != 1:
            raise Invalid("witness: T is not unimodular (its integer points would miss sets of the format)")
        for x in witness["grid"]:
            xb = to_arb(float(x))
            g, w = gw_ball(prob, xb)
            p = flint.arb(0)
            for c in reversed(full_base[s:]):
                p = p * xb + to_arb(c)
            au = [to_arb(scale[i]) * xb ** (k - s) * w for i, k in enumerate(free)]
            rows_u.append(au)
            rows_a.append([sum((au[i] * T[i][col] for i in range(m)), flint.arb(0)) for col in range(m)])
            rows_b.append(w * (p - g))
        Ub = to_arb(U)
        counts = {"nodes": 0, "points": 0}
        winner = tuple(float(c) for c in winner)

        def rows_of(comb):
            try:
                rows = [(int(i), int(sd)) for i, sd in comb["rows"]]
                lam = [float(v) for v in comb["lam"]]
            except (KeyError, TypeError, ValueError):
                raise Invalid("witness: a malformed combination") from None
            if len(lam) != len(rows) or any(not 0 <= i < len(rows_a) or sd not in (-1, 1) for i, sd in rows) \
                    or any(not (v >= 0 and math.isfinite(v)) for v in lam):
                raise Invalid("witness: a combination with a bad row or a negative multiplier")
            return rows, lam

        def rhs(i, side, fixed):
            """U - s (b_i + a_i . y) over the fixed coordinates ``fixed`` ({column: value})."""
            return Ub - side * (rows_b[i] + sum((rows_a[i][c] * y for c, y in fixed.items()), flint.arb(0)))

        # the box: |y_c| over R, from m rows inverted in ball arithmetic (a_i . y = t_i with |t_i + b_i| <= U)
        try:
            picks = [int(i) for i in witness["box"]]
            N = flint.arb_mat([rows_a[i] for i in picks])
            Ninv = N.inv()
        except (ZeroDivisionError, IndexError, ValueError, TypeError):
            raise Invalid("witness: the box rows are singular or malformed") from None
        if len(picks) != m:
            raise Invalid("witness: the box needs one row per coordinate")
        t = [flint.arb(-rows_b[i].mid(), 0) + flint.arb(0, 1) * Ub + flint.arb(0, rows_b[i].rad()) for i in picks]
        box = [abs(sum((Ninv[c, i] * t[i] for i in range(m)), flint.arb(0))).upper() for c in range(m)]
        if not all(v.is_finite() for v in box):
            raise Invalid("witness: the box is unbounded")
        _check_lattice(witness, fmt, rows_u, rows_b, Ub, T, box, base, scale)

        def combination(comb, prefix):
            """(alpha, S'): alpha y_j <= S' for every y of R with the prefix fixed, from the stored multipliers:
            alpha = sum lam s a_(i,j), S' = sum lam (U - s (b_i + a_i,fixed . y_fixed)) + sum_c |rho_c| box_c
            over the coordinates c > j still free (rho_c = sum lam s a_(i,c), whose exact value is ~0)."""
            rows, lam = rows_of(comb)
            j = len(prefix)
            fixed = dict(enumerate(prefix))
            lams = [to_arb(v) for v in lam]
            alpha = sum((lv * side * rows_a[i][j] for lv, (i, side) in zip(lams, rows)), flint.arb(0))
            S = sum((lv * rhs(i, side, fixed) for lv, (i, side) in zip(lams, rows)), flint.arb(0))
            for c in range(j + 1, m):
                rho = sum((lv * side * rows_a[i][c] for lv, (i, side) in zip(lams, rows)), flint.arb(0))
                S += abs(rho).upper() * box[c]
            return alpha, S

        def leaf(prefix):
            counts["points"] += 1
            u = [sum(T[i][col] * prefix[col] for col in range(m)) for i in range(m)]
            vals = [Fraction(b) + Fraction(q) * ui for b, q, ui in zip(base, scale, u)]
            coeffs = [float(prob.fixed.get(k, 0.0)) for k in range(prob.degree + 1)]
            for k, v in zip(free, vals):
                if Fraction(float(v)) != v or not fmt.representable(float(v)):
                    return   # not a number of the format: not a candidate
                coeffs[k] = float(v)
            c = tuple(coeffs)
            if c == winner:
                return
            if c not in rivals:
                raise Invalid(f"the format point {list(c)} lies in the region but is neither the winner nor a "
                              f"listed rival")
            at = rivals[c]
            if not point_error_lower(prob, list(c), at) > winner_upper:
                raise Invalid(f"rival {list(c)}: its error at x={at!r} does not exceed the winner's bound")

        def visit(prefix):
            if len(prefix) == m:
                leaf(prefix)
                return
            counts["nodes"] += 1
            rec = nodes.get(",".join(map(str, prefix)))
            if rec is None:
                raise Invalid(f"node {prefix}: no witness (the prover did not visit it)")
            if "empty" in rec:
                # a Farkas combination: alpha y_j <= S' with alpha = 0 up to its residual, bounded by the box
                alpha, S = combination(rec["empty"], prefix)
                if not S + abs(alpha).upper() * box[len(prefix)] < 0:
                    raise Invalid(f"node {prefix}: the Farkas combination does not prove the slice empty")
                return
            a_lo, s_lo = combination(rec["lo"], prefix)
            a_hi, s_hi = combination(rec["hi"], prefix)
            if not (a_lo < 0 and a_hi > 0):
                raise Invalid(f"node {prefix}: the combinations do not bound y_{len(prefix)}")
            lo_i, hi_i = _ceil((s_lo / a_lo).lower()), _floor((s_hi / a_hi).upper())
            if hi_i - lo_i > 1_000_000:
                raise Invalid(f"node {prefix}: the proven range is not bounded usefully")
            for y in range(lo_i, hi_i + 1):
                visit(prefix + [y])

        with mpmath.workprec(WITNESS_PREC):
            visit([])
        return counts
    finally:
        flint.ctx.prec = old


def _u_combination(comb, k, rows_u, rows_b, Ub, ubox):
    """(alpha, S'): alpha u_k <= S' over R from a combination of the rows in u (c = base + scale u), the
    residual on the other u_l bounded by ``ubox``."""
    rows = [(int(i), int(sd)) for i, sd in comb["rows"]]
    lams = [to_arb_float(v) for v in comb["lam"]]
    if any(not 0 <= i < len(rows_u) or sd not in (-1, 1) for i, sd in rows) or not all(v >= 0 for v in lams):
        raise Invalid("witness: a malformed coefficient-range combination")
    m = len(ubox)
    alpha = sum((lv * sd * rows_u[i][k] for lv, (i, sd) in zip(lams, rows)), flint.arb(0))
    S = sum((lv * (Ub - sd * rows_b[i]) for lv, (i, sd) in zip(lams, rows)), flint.arb(0))
    for col in range(m):
        if col != k:
            rho = sum((lv * sd * rows_u[i][col] for lv, (i, sd) in zip(lams, rows)), flint.arb(0))
            S += abs(rho).upper() * ubox[col]
    return alpha, S


def _check_lattice(witness, fmt, rows_u, rows_b, Ub, T, box, base, scale):
    """Every number of the format that a coefficient takes over R is base_k + n scale_k, n an integer: the
    range of c_k over R (proved from the witness's combinations) has one sign, scale_k divides the format's
    spacing at its smallest magnitude and base_k is a multiple of scale_k. Then the integer points y (u = T y,
    T unimodular) reach every set of the format in R."""
    from fractions import Fraction as F
    m = len(T)
    ubox = [sum((abs(T[k][c]) * box[c] for c in range(m)), flint.arb(0)).upper() for k in range(m)]
    recs = witness.get("coeff_box")
    if not isinstance(recs, list) or len(recs) != m:
        raise Invalid("witness: no coefficient ranges")
    for k in range(m):
        rec = recs[k]
        if not isinstance(rec, dict) or "lo" not in rec or "hi" not in rec:
            raise Invalid(f"witness: no range for free coefficient {k}")
        a_lo, s_lo = _u_combination(rec["lo"], k, rows_u, rows_b, Ub, ubox)
        a_hi, s_hi = _u_combination(rec["hi"], k, rows_u, rows_b, Ub, ubox)
        if not (a_lo < 0 and a_hi > 0):
            raise Invalid(f"witness: the range combinations do not bound free coefficient {k}")
        q = to_arb_float(scale[k])
        lo = to_arb_float(base[k]) + q * (s_lo / a_lo)
        hi = to_arb_float(base[k]) + q * (s_hi / a_hi)
        if not (lo > 0 or hi < 0):
            raise Invalid(f"witness: free coefficient {k} may be 0 over the region (every binade's numbers)")
        smallest = min(abs(lo).lower(), abs(hi).lower(), key=lambda v: _exact(v))
        spacing = F(float(fmt.quantum(float(_exact(smallest)))))
        if scale[k] <= 0 or (spacing / F(scale[k])).denominator != 1 or (F(base[k]) / F(scale[k])).denominator != 1:
            raise Invalid(f"witness: free coefficient {k}'s lattice (base {base[k]!r}, step {scale[k]!r}) misses "
                          f"numbers of the format")


def to_arb_float(v: float) -> flint.arb:
    """A float as an exact ball."""
    from ._target import to_arb
    return to_arb(float(v))


def _ceil(v: flint.arb) -> int:
    if not v.is_finite():
        raise Invalid("a proven range end is not finite")
    return math.ceil(_exact(v))


def _floor(v: flint.arb) -> int:
    if not v.is_finite():
        raise Invalid("a proven range end is not finite")
    return math.floor(_exact(v))


def _exact(v: flint.arb) -> Fraction:
    """The exact value of a radius-0 ball (lower()/upper() return one) as a Fraction."""
    man, exp = v.mid().man_exp()
    return Fraction(int(man)) * (Fraction(2) ** int(exp))
