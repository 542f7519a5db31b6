"""method="exact": the proven best coefficient set, and its certificate re-checked by code that shares nothing
with the search (numpy grid errors, mpmath at 300 bits, brute force over lattice boxes, Sollya's supnorm and
fpminimax). Anchors: the optimum values found by an independent complete branch and bound (issue 13:
degree 3 8.5592021e-5, degree 5 8.2438488e-8) and Sollya's fpminimax errors for sin and log2(1+x)."""
from __future__ import annotations

import itertools
import math

import ml_dtypes
import mpmath
import numpy as np
import pytest

from fa4num.fit import fit, fit_exp2, sollya, sup_norm

needs_sollya = pytest.mark.skipif(not sollya.available(), reason="sollya not installed (apt-get install sollya)")

# issue 13's independent complete search over fp32 sets with p(0) = 1 (max relative error, real arithmetic)
INDEPENDENT_OPTIMUM = {3: 8.5592021e-5, 5: 8.2438488e-8}
DTYPES = {"fp32": np.float32, "bf16": ml_dtypes.bfloat16, "fp16": np.float16}


@pytest.fixture(scope="module")
def exact_fits():
    return {n: fit_exp2(n) for n in range(1, 6)}


def _grid_errors(coeffs: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """max over the grid of |p/2^x - 1| for each row of coeffs (c0 first), 2^x from mpmath."""
    f = np.array([float(mpmath.mpf(2) ** mpmath.mpf(x)) for x in grid])
    p = np.asarray(coeffs) @ np.vander(grid, coeffs.shape[1], increasing=True).T
    return np.max(np.abs(p / f - 1), axis=-1)


def _rel_error_300(coeffs, x) -> mpmath.mpf:
    with mpmath.workprec(300):
        x = mpmath.mpf(x)
        p = mpmath.polyval([mpmath.mpf(c) for c in reversed(coeffs)], x)
        return abs(p / mpmath.power(2, x) - 1)


def _box_points(cert, fmt: str, span: dict | None = None):
    """Every set of the format in the certificate's projection box (or in +-span[k] ulps of the winner)."""
    axes = []
    for k in sorted(cert.box):
        lo, hi = cert.box[k]
        dt = DTYPES[fmt]
        a = np.nextafter(dt(lo), dt(-np.inf)) if span is None else dt(lo)
        vals, v = [], a
        while float(v) <= hi or (span is not None and len(vals) < 1):
            vals.append(float(v))
            v = np.nextafter(v, dt(np.inf))
        axes.append(vals)
    return axes


@pytest.mark.parametrize("n", range(1, 6))
def test_exact_is_default_and_proven(exact_fits, n):
    r = exact_fits[n]
    assert r.path == "exact" and r.method == "exact" and r.proven_optimal
    assert r.coeffs[0] == 1.0 and all(float(np.float32(c)) == c for c in r.coeffs)
    cert = r.exact
    assert cert.winner_lower <= r.max_error <= cert.winner_upper <= cert.bound
    assert cert.winner_upper <= cert.winner_lower * (1 + 1e-8)
    assert cert.candidates == 1 + len(cert.rivals)
    if n in INDEPENDENT_OPTIMUM:
        assert r.max_error == pytest.approx(INDEPENDENT_OPTIMUM[n], rel=2e-8)


@pytest.mark.parametrize("n", range(1, 6))
def test_certificate_rechecked_independently(exact_fits, n):
    """(1) each rival loses: its error at its recorded point, recomputed in mpmath at 300 bits, exceeds the
    winner's certified upper bound; (2) the region holds every set of the format that could beat the winner:
    brute force over a box of sets, scored on the certificate's grid with numpy, finds no set below the bound
    that the certificate does not list (the whole projection box at degree <= 3, +-3 ulps of the winner at
    degree 4-5, where the box holds 10^7+ sets); (3) the winner's certified upper bound is >= its max error
    found by mpmath at 300 bits."""
    r = exact_fits[n]
    cert = r.exact
    for rival in cert.rivals:
        assert _rel_error_300(rival.coeffs, rival.at) > cert.winner_upper
    x_star = r.argmax
    assert _rel_error_300(r.coeffs, x_star) <= cert.winner_upper
    grid = np.array(cert.region_grid)
    listed = {tuple(r.coeffs)} | {tuple(rv.coeffs) for rv in cert.rivals}
    if n <= 3:
        axes = _box_points(cert, "fp32")
    else:
        axes = []
        for k in range(1, n + 1):
            v = np.float32(r.coeffs[k])
            pts = [v]
            for _ in range(3):
                pts = [np.nextafter(pts[0], np.float32(-1))] + pts + [np.nextafter(pts[-1], np.float32(2))]
            axes.append([float(p) for p in pts])
    sets = np.array([(1.0,) + c for c in itertools.product(*axes)])
    assert len(sets) < 2_000_000
    errs = np.concatenate([_grid_errors(chunk, grid) for chunk in np.array_split(sets, max(1, len(sets) // 20000))])
    inside = {tuple(c) for c in sets[errs <= cert.bound * (1 - 1e-9)].tolist()}
    assert inside <= listed
    assert tuple(r.coeffs) in inside or errs.min() > cert.bound * (1 - 1e-9)


def test_exact_beats_the_neighbourhood_search_where_it_was_not_optimal():
    """Degree 5: the +-2-ulp search's set (method='remez', bnb=False) is not optimal; the exact set is better
    and lies further away than that search reaches. The bounded branch and bound that method='remez' runs
    after the search by default reaches it."""
    searched = fit_exp2(5, method="remez", bnb=False)
    exact = fit_exp2(5)
    assert exact.exact.winner_upper < searched.certified_lower
    ulps = [abs(int(np.float32(a).view(np.int32)) - int(np.float32(b).view(np.int32)))
            for a, b in zip(exact.coeffs, searched.coeffs)]
    assert max(ulps) > 2
    bounded = fit_exp2(5, method="remez")
    assert bounded.coeffs == exact.coeffs and bounded.bounded.improved


@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
def test_exact_other_formats_whole_box(fmt):
    r = fit_exp2(3, coeff_format=fmt, method="exact")
    assert r.proven_optimal and all(float(DTYPES[fmt](c)) == c for c in r.coeffs)
    cert = r.exact
    sets = np.array([(1.0,) + c for c in itertools.product(*_box_points(cert, fmt))])
    errs = _grid_errors(sets, np.array(cert.region_grid))
    listed = {tuple(r.coeffs)} | {tuple(rv.coeffs) for rv in cert.rivals}
    assert {tuple(c) for c in sets[errs <= cert.bound * (1 - 1e-9)].tolist()} <= listed
    # no worse than the neighbourhood search
    assert r.max_error <= fit_exp2(3, coeff_format=fmt, method="remez").max_error * (1 + 1e-12)


def _sollya_fpminimax_error(f: str, monomials: str, interval: str) -> float:
    out = sollya.run(f"display=hexadecimal!; p = fpminimax({f}, {monomials}, [|SG...|], {interval}, relative); "
                     f"s = supnorm(p, {f}, {interval}, relative, 2^-30); print(sup(s));")
    return float.fromhex(out.split()[-1])


@needs_sollya
@pytest.mark.parametrize("f, interval, sollya_interval, fmt, bits", [
    ("cos(x)", (0.0, math.pi / 4), "[0;pi/4]", "bf16", 8),          # c1 ~ 0: its sign is open
    ("1/(1+exp(-x))", (-2.0, 2.0), "[-2;2]", "bf16", 8)])
def test_bounded_search_beats_fpminimax_where_the_exact_search_is_too_big(f, interval, sollya_interval, fmt,
                                                                        bits):
    """Six free coefficients: no proof, but the branch and bound on shrinking cuts lands below Sollya's
    fpminimax (the neighbourhood search alone did not), and never above the search's own set."""
    r = fit(f, 5, interval, coeff_format=fmt)
    assert r.path.startswith("remez+lattice+search+bnb") and not r.proven_optimal
    searched = fit(f, 5, interval, coeff_format=fmt, bnb=False)
    assert r.max_error <= searched.max_error
    out = sollya.run(f"display=hexadecimal!; p = fpminimax({f}, 5, [|{bits}...|], {sollya_interval}, relative);"
                     f" s = supnorm(p, {f}, {sollya_interval}, relative, 2^-30); print(sup(s));")
    sollya_error = float.fromhex(out.split()[-1])
    assert r.certified_bound < sollya_error < searched.max_error
    assert all(float(np.asarray(c, DTYPES[fmt])) == c for c in r.coeffs)


def test_bounded_search_never_worse_than_one_degree_less():
    """erf, bf16, powers 1-6 (no proof: the bounded search): its incumbent includes the powers 1-5 fit padded
    with a zero c6, so it is never worse than that fit (it was 0.0029957 against 0.0029947 before)."""
    five = fit("erf(x)", [1, 2, 3, 4, 5], (0.0, 1.0), coeff_format="bf16")
    six = fit("erf(x)", [1, 2, 3, 4, 5, 6], (0.0, 1.0), coeff_format="bf16")
    assert six.path.startswith("remez+lattice+search+bnb") and not six.proven_optimal
    assert six.max_error <= five.max_error and six.certified_bound <= five.certified_bound * (1 + 1e-9)


# issue 13: Sollya's fpminimax, degree 5, fp32 (SG) coefficients, relative error
SOLLYA_QUOTED = {"sin(x)": 2.980232e-7, "log2(1+x)": 5.672735e-5}


@pytest.mark.parametrize("f, interval, sollya_interval", [
    ("sin(x)", (0.0, math.pi / 4), "[0;pi/4]"), ("log2(1+x)", (0.0, 1.0), "[0;1]")])
def test_relative_error_with_a_zero_at_0(f, interval, sollya_interval):
    r = fit(f, 5, interval, error="relative", fixed={0: 0.0})
    assert r.coeffs[0] == 0.0 and r.certified_bound is not None
    assert r.certified_lower <= r.max_error <= r.certified_bound <= r.max_error * (1 + 1e-3)
    assert r.max_error <= SOLLYA_QUOTED[f] * (1 + 1e-6)
    if sollya.available():
        sollya_f = f.replace("log2(1+x)", "log2(1+x)")
        ref = _sollya_fpminimax_error(sollya_f, "[|1,2,3,4,5|]", sollya_interval)
        assert r.max_error <= ref * (1 + 1e-9)
        lo, hi = sollya.supnorm(r.coeffs, sollya_f, interval=interval, error="relative")
        assert lo * (1 - 1e-9) <= r.max_error <= hi * (1 + 1e-9)


def test_monomial_list_like_sollya():
    r = fit("sin(x)", [1, 3, 5], (0.0, math.pi / 4), error="relative")
    assert r.monomials == (1, 3, 5) and r.coeffs[0] == r.coeffs[2] == r.coeffs[4] == 0.0
    assert r.proven_optimal
    if sollya.available():
        assert r.max_error <= _sollya_fpminimax_error("sin(x)", "[|1,3,5|]", "[0;pi/4]") * (1 + 1e-9)
    # the certificate agrees with an independent sup norm of the same coefficients
    s = sup_norm("sin(x)", r.coeffs, (0.0, math.pi / 4), error="relative")
    assert s.certified_lower <= r.max_error <= s.certified_bound


def test_weight_turns_absolute_into_relative():
    """A weight 1/f on the absolute error is the relative error: same optimum, same level."""
    rel = fit("exp(x)", 3, (0.0, 1.0), error="relative", method="remez")
    wabs = fit("exp(x)", 3, (0.0, 1.0), error="absolute", weight="exp(-x)", method="remez")
    assert wabs.weight == "exp(-x)"
    assert wabs.optimum.max_error == pytest.approx(rel.optimum.max_error, rel=1e-9)
    assert wabs.max_error == pytest.approx(rel.max_error, rel=1e-6)


@pytest.mark.parametrize("f, degree, interval, kwargs, match", [
    (math.sin, 5, (0.0, math.pi / 4), dict(fixed={0: 0.0}), "float64.*mpmath"),
    ("sqrt(x)", 3, (0.0, 1.0), dict(error="absolute"), "sqrt-type"),
    ("sin(x)", 3, (0.0, 1.0), {}, "zero of order 1"),
    ("sin(x)", [1, 1, 3], (0.0, 1.0), {}, "monomial"),
    ("sin(x)", [1, 3], (0.0, 1.0), dict(fixed={3: 0.0}), "fixed"),
])
def test_errors_name_the_cause(f, degree, interval, kwargs, match):
    kwargs.setdefault("error", "relative")
    with pytest.raises(ValueError, match=match):
        fit(f, degree, interval, **kwargs)


@pytest.mark.parametrize("f, powers, interval, relative", [
    ("2^x", [1, 2, 3], (0.0, 1.0), True), ("sin(x)", [1, 3, 5], (0.0, 0.785398), True),
    ("tanh(0.7978845608028654*(x+0.044715*x^3))", [0, 1, 2, 3, 4], (0.0, 2.0), False)])
def test_peak_search_fast_path_equals_mpmath_path(monkeypatch, f, powers, interval, relative):
    """local_extrema's float64 scan + Newton on ball Taylor coefficients finds the peaks the mpmath scan +
    Brent finds: same count, same places to 1e-15, same values to 1e-25 relative (Brent stops at 2^-60)."""
    from fa4num.fit import _remez
    from fa4num.fit._target import make_target
    n = max(powers)
    fixed = {k: (1.0 if k == 0 and f == "2^x" else 0.0) for k in range(n + 1) if k not in powers}
    shift = 1 if f == "sin(x)" else 0
    prob = _remez.Problem(make_target(f), *interval, n, fixed, relative, None, shift)
    opt = _remez.remez(prob)
    coeffs = [c * (1 + mpmath.mpf(10) ** -6 * (-1) ** k) for k, c in enumerate(opt.coeffs)]  # not levelled
    with mpmath.workprec(_remez.PREC):
        fast = _remez.local_extrema(prob, coeffs)
        monkeypatch.setattr(_remez, "_fast_scan", lambda *args: None)
        slow = _remez.local_extrema(prob, coeffs)
    assert len(fast) == len(slow) >= len(prob.free)
    for (x1, e1), (x2, e2) in zip(fast, slow):
        assert abs(x1 - x2) <= 1e-15 and abs(e1 / e2 - 1) <= mpmath.mpf(10) ** -25


# scipy.optimize.linprog's statuses: only these two are proofs; 1 (iteration limit), 3 (unbounded: impossible
# here, the polytope is bounded) and 4 (numerical difficulties; HiGHS at 1e-10 tolerances gives it on the
# degree-5 LPs with scipy 1.17) prove nothing about the LP
_HIGHS_OPTIMAL, _HIGHS_INFEASIBLE = 0, 2
_LINPROG_STATUSES = {0, 1, 2, 3, 4}


def _kkt_optimal(Q, shift, c, y) -> bool:
    """y is feasible for |Q y + shift| <= 1 and minimises c.y over it: c = -G^T lam with lam >= 0 on the tight
    constraints (G their gradients), the LP optimality conditions checked by NNLS, independent of any solver."""
    from scipy.optimize import nnls
    s = Q @ y + shift
    if np.any(np.abs(s) > 1 + 1e-9):
        return False
    tight = np.abs(s) >= 1 - 1e-7
    if not tight.any():
        return False                          # an interior point minimises no nonzero linear form
    G = np.sign(s[tight])[:, None] * Q[tight]
    _, resid = nnls(G.T, -c)
    return resid <= 1e-9 * np.linalg.norm(c)


def test_lp_walk_equals_highs():
    """The exact search's LPs solved by the active-set walk (from the incumbent, then from the vertices it
    remembers) give HiGHS's optimum where HiGHS proves one (and infeasibility where it proves that); every
    range the walk reports is reached at a feasible point whose optimality conditions hold, whatever status
    HiGHS returned: the degree-5 region, every coordinate's range at the root and below."""
    from scipy.optimize import linprog

    from fa4num.fit import _exact, _remez
    from fa4num.fit._formats import get_format
    from fa4num.fit._target import EXP2
    prob = _remez.Problem(EXP2, 0.0, 1.0, 5, {0: 1.0}, True)
    best = fit_exp2(5)
    fmt = get_format("fp32")
    base = {k: best.coeffs[k] for k in prob.free}
    scale = {k: float(fmt.quantum(best.coeffs[k])) for k in prob.free}
    region = _exact._Region(prob, np.linspace(0, 1, 97).tolist(), base, scale)
    region.cut(best.certified_bound * 1.5)
    bases = {}
    compared = 0
    for j in range(len(prob.free) - 1):
        for fixed in (np.zeros(j), np.ones(j)):
            got = _exact._lp_range(region, j, fixed, bases, ("test", j))
            # HiGHS on the same well-conditioned form (y = R v, A_rest = Q R), as the search solved it before
            A_fix, A_rest = region.A[:, :j], region.A[:, j:]
            shift = region.r + A_fix @ fixed
            Q, R = np.linalg.qr(A_rest)
            z = np.linalg.solve(R.T, np.eye(R.shape[0])[0])
            for k, sign in enumerate((1.0, -1.0)):
                res = linprog(sign * z, A_ub=np.vstack([Q, -Q]), b_ub=np.concatenate([1 - shift, 1 + shift]),
                              bounds=(None, None), method="highs",
                              options={"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10})
                assert res.status in _LINPROG_STATUSES, (res.status, res.message)
                if res.status == _HIGHS_INFEASIBLE:
                    assert got is None
                    continue
                # the walk found the slice empty where HiGHS did not prove it: wrong (a slice holding the
                # incumbent is never empty)
                assert got is not None, (j, fixed, res.status, res.message)
                if res.status == _HIGHS_OPTIMAL:
                    assert abs(got[k] - sign * res.fun) <= 1e-7, (j, fixed, sign, got[k], sign * res.fun)
                    compared += 1
                # the walk's own answer, checked without HiGHS: its point reaches the range end it reports
                # (u_j is the point's first coordinate) and is optimal
                v = got[2 + k]
                assert abs(v[0] - got[k]) <= 1e-9 * max(1.0, abs(got[k]))
                assert _kkt_optimal(Q, shift, sign * z, R @ v), (j, fixed, sign)
    assert compared >= 1, "HiGHS proved no LP optimal: nothing was compared with it"
