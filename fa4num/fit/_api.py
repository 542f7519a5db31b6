"""fit() and fit_exp2(): minimax polynomials with coefficients in a machine format, certified.

Pipeline:
1. real-coefficient optimum: Remez exchange with the fixed coefficients in the basis (_remez);
2. rounding to the format: round-to-nearest and the Brisebarre–Chevillard lattice point (_lattice), then a
   search of the +-r-ulp neighbourhood of both, ranked on the objective (method="remez"), then (minimax
   objective) the exact search's branch and bound on shrinking error cuts, which never returns a worse set
   and reaches lattice points far outside the neighbourhood (_exact.bounded_search; no proof), from the
   better of that set and the fit without the highest power padded with a 0 (so adding a power never makes
   the result worse);
3. method="exact" (the default, through "auto", up to 5 free coefficients): a complete branch-and-bound over
   the format's coefficient lattice that proves the winner optimal (_exact); where that region is too big,
   "auto" falls back to step 2;
4. the winner's sup norm in mpmath and a rigorous bound in ball arithmetic (_certify).
method="fpminimax" stops after the lattice step (Sollya's fpminimax with a constrained part, which Sollya
itself cannot run on this problem); method="fa4" regenerates FA4's POLY_EX2 recipe (see fit_exp2).
"""
from __future__ import annotations

import datetime
import functools
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import mpmath
import numpy as np

from . import sollya
from ._certify import certify
from ._exact import TooManySets, bounded_search, exact_search
from ._formats import FORMATS, Format, get_format
from ._lattice import GridScorer, lattice_round, neighbourhood
from ._records import FitResult, Optimum
from ._remez import PREC, Problem, folds, one_parity, remez, sup_error
from ._target import EXP2, check_target, make_target, takes_balls, zero_order

ERRORS = ("relative", "absolute")
OBJECTIVES = ("minimax", "evaluated", "bf16")
METHODS = ("auto", "exact", "remez", "fpminimax", "fa4")
EXACT_AUTO_MAX_FREE = 5   # method="auto" runs the exact search up to this many free coefficients (seconds)
MAX_DEGREE = 10
# search radius in units of each coefficient's spacing, by degree: the neighbourhood has (2r+1)^n points
SEARCH_RADIUS = {1: 8, 2: 6, 3: 4, 4: 3, 5: 2, 6: 2, 7: 1, 8: 1, 9: 1, 10: 1}


def _check_args(degree, interval, error, coeff_format, objective, method):
    if isinstance(degree, bool) or not isinstance(degree, (int, np.integer)) or not 1 <= degree <= MAX_DEGREE:
        raise ValueError(f"degree: must be an integer in 1-{MAX_DEGREE} or a list of monomial powers, "
                         f"got {degree!r}")
    try:
        a, b = (float(v) for v in interval)
    except (TypeError, ValueError):
        raise ValueError(f"interval: expected (a, b) with a < b, got {interval!r}") from None
    if not (math.isfinite(a) and math.isfinite(b)) or not a < b:
        raise ValueError(f"interval: expected finite (a, b) with a < b, got {interval!r}")
    if error not in ERRORS:
        raise ValueError(f"error: must be one of {ERRORS}, got {error!r}")
    if coeff_format not in FORMATS:
        raise ValueError(f"coeff_format: must be one of {tuple(FORMATS)}, got {coeff_format!r}")
    if objective not in OBJECTIVES:
        raise ValueError(f"objective: must be one of {OBJECTIVES}, got {objective!r}")
    if method not in METHODS:
        raise ValueError(f"method: must be one of {METHODS}, got {method!r}")
    return a, b


def _monomials(degree):
    """degree as an int n (powers 0..n) or a Sollya-style monomial list [|1, 3, 5|]: (n, powers)."""
    if isinstance(degree, (list, tuple, range, np.ndarray)):
        powers = [int(k) if isinstance(k, (int, np.integer)) and not isinstance(k, bool) else None for k in degree]
        if not powers or None in powers or len(set(powers)) != len(powers) or min(powers) < 0 \
                or max(powers) > MAX_DEGREE:
            raise ValueError(f"degree: a monomial list needs distinct integer powers in 0-{MAX_DEGREE}, "
                             f"got {list(degree)!r}")
        return max(powers), sorted(powers)
    return degree, None


def _check_fixed(fixed, degree, fmt: Format, powers=None) -> dict:
    fixed = dict(fixed or {})
    for k, v in fixed.items():
        if not isinstance(k, (int, np.integer)) or not 0 <= k <= degree:
            raise ValueError(f"fixed: power {k!r} outside 0-{degree}")
        if powers is not None and k in powers:
            raise ValueError(f"fixed: power {k} is also in the monomial list {powers}")
        fixed[k] = fmt.check(v, f"fixed[{k}]")
    if powers is not None:   # the powers left out of the list are 0, as in Sollya
        fixed.update({k: 0.0 for k in range(degree + 1) if k not in powers and k not in fixed})
    if len(fixed) > degree:
        raise ValueError(f"fixed: {len(fixed)} fixed coefficients leave nothing to fit at degree {degree}")
    return {int(k): v for k, v in sorted(fixed.items())}


def _shift(target, a, b, fixed, degree, relative) -> int:
    """How many powers of x to divide out of p and f (relative error of an f with a zero at x = 0)."""
    if not relative or not a <= 0 <= b:
        return 0
    z = zero_order(target)
    if z == 0:
        return 0
    s0 = next((k for k in range(degree + 1) if fixed.get(k, None) != 0.0), degree + 1)
    if s0 < z:
        low = ", ".join(f"{k}: 0.0" for k in range(z))
        raise ValueError(f"f: {target.name} has a zero of order {z} at x=0, so the relative error p/f - 1 is "
                         f"undefined there unless p vanishes as fast: fix the low coefficients "
                         f"(fixed={{{low}}}) or leave those powers out of the monomial list")
    return z


def _check_haar(prob: Problem) -> None:
    """Refuse powers of one parity around 0 for an f without that parity (not a Haar system), and a problem
    whose error at an interior x = 0 no free coefficient can move and the fixed ones do
    not make 0 (odd powers only for an f with f(0) != 0, say): every polynomial then has the same error
    there, a floor the exchange cannot level (Sollya: "degenerated system in a non Haar context")."""
    sign = one_parity(prob)
    if sign is not None and not folds(prob):
        kind = "even" if sign > 0 else "odd"
        after = f" after dividing out x^{prob.shift}" if prob.shift else ""
        raise ValueError(f"degree: the free powers {prob.free} are all {kind}{after}, so around x=0 each takes "
                         f"the same magnitude at x and -x: not a Haar system for {prob.target.name}, which is not "
                         f"{kind} there (less the fixed part), so no alternation characterises the best set; use "
                         f"powers of both parities, or an interval on one side of 0")
    if not prob.a < 0 < prob.b or min(k - prob.shift for k in prob.free) == 0:
        return
    with mpmath.workprec(PREC):
        q = [mpmath.mpf(prob.fixed.get(k, 0)) for k in range(prob.degree + 1)]
        e0 = prob.error(q, mpmath.mpf(0))
        scale = abs(prob.gw(mpmath.mpf(0))[0]) + abs(prob.gw(mpmath.mpf(prob.b))[0])
        if abs(e0) <= mpmath.mpf(2) ** -100 * scale:
            return
    raise ValueError(f"degree: no free power is nonzero at x=0 (the lowest is x^{min(prob.free)}), so every "
                     f"polynomial has the same error there, {float(e0):.6g}, set by the fixed coefficients; "
                     f"include power {prob.shift} in the monomial list or fix c{prob.shift} to the value of "
                     f"{prob.target.name} there")


def _remez_checked(prob):
    """remez(), with the cause named when a double-precision callable stops it from levelling."""
    with mpmath.workprec(PREC):
        y = prob.target.mp(mpmath.mpf(prob.a) + (mpmath.mpf(prob.b) - prob.a) / 3)
    noisy = isinstance(y, (float, np.floating))
    try:
        # a levelling Remez converges in under 10 exchanges; a noisy f never does, so fail early
        return remez(prob, maxiter=20) if noisy else remez(prob)
    except RuntimeError as exc:
        if noisy:
            raise ValueError(f"f: {prob.target.name} returns float64 values (53 bits): their rounding noise "
                             f"(~1e-16 relative) is above what the Remez exchange must resolve here ({exc}); "
                             f"pass an mpmath callable (e.g. mpmath.sin) or an expression string "
                             f"(e.g. 'sin(x)'), which are evaluated at 128 bits") from None
        raise ValueError(f"degree: the Remez exchange for {prob.target.name} with the free powers {prob.free} on "
                         f"[{prob.a:g}, {prob.b:g}] did not converge ({exc}): these powers are not a Haar system "
                         f"there (a symmetric interval needs powers of one parity matching f's, a zero of the "
                         f"error that no coefficient moves must be at x=0); change the monomial list or the "
                         f"interval") from None


def fit(f, degree, interval=(0.0, 1.0), *, error: str = "relative", coeff_format: str = "fp32",
        fixed: dict | None = None, weight=None, objective: str = "minimax", method: str = "auto",
        certify_bound: bool = True, radius: int | None = None, bnb: bool = True) -> FitResult:
    """Minimax polynomial for ``f`` on ``interval`` with coefficients in ``coeff_format``.

    Parameters
    ----------
    f : str or callable
        Expression in x (``"2^x"``, ``"exp(x)"``, ``"log2(1+x)"``, ``"sin(x)"``) or a callable taking mpmath
        numbers (and flint ball series, for the certificate). Expressions are evaluated at 128 bits and in
        ball arithmetic, so the bounds are rigorous; a float64 callable (``math.sin``) works only where
        its rounding noise is far below the error sought.
    degree : int or list of int
        n (all powers 0..n, n <= 10) or a monomial list as Sollya's ``[|1,3,5|]``; powers left out are 0.
        Powers of one parity on an interval around 0 need an f of that parity (less the fixed part): the
        problem is then the same on [0, max(-a, b)], where it is solved; otherwise it is refused (not a
        Haar system). With every power on a symmetric interval (absolute error), an f whose part of one
        parity is a polynomial of the format (GELU's tanh form: x/2) gets that part exactly and the other
        parity fitted alone, which is optimal by symmetry.
    interval : (a, b)
    error : {"relative", "absolute"}
        p/f - 1 or p - f. Relative error of an f with a zero at x = 0 divides the zero out (p/f = P/g with
        p = x^s P, f = x^s g), as Sollya does, provided p vanishes there too (``fixed={0: 0.0}`` or a
        monomial list without 0).
    coeff_format : {"fp32", "bf16", "fp16", "e4m3"}
    fixed : dict, optional
        {power: value} held fixed (exact in the format).
    weight : str or callable, optional
        w(x) multiplying the error (as Sollya's remez weight).
    objective : {"minimax", "evaluated", "bf16"}
        "evaluated" and "bf16" are for 2^x on [0, 1] (see fit_exp2).
    method : {"auto", "exact", "remez", "fpminimax", "fa4"}
        "exact": complete branch-and-bound over the format's lattice, returning the proven best set and its
        certificate (``.exact``); "remez": optimum, lattice rounding, neighbourhood search; "fpminimax":
        optimum and lattice rounding only; "fa4": FA4's fpminimax call (c0 in a 1-bit format; Sollya if
        installed). "auto" is "exact" for the minimax objective with at most 5 free coefficients and a
        certifiable f, "remez" otherwise.
    certify_bound : bool
        Compute the rigorous bound (needed by "exact").
    radius : int, optional
        Neighbourhood search radius in coefficient spacings (default by degree, SEARCH_RADIUS).
    bnb : bool
        method "remez": after the neighbourhood search, run the branch and bound of "exact" on shrinking
        error cuts (``fa4num.fit._exact.bounded_search``; it never returns a worse set, and proves nothing
        about optimality). False stops at the neighbourhood search.

    Returns
    -------
    FitResult

    Examples
    --------
    >>> from fa4num.fit import fit
    >>> r = fit("sin(x)", [1, 3, 5], (0, 0.785398), error="relative")
    >>> r.monomials, r.proven_optimal, r.max_error < 2e-6    # odd monomials only: 1.51e-6
    ((1, 3, 5), True, True)
    """
    n, powers = _monomials(degree)
    a, b = _check_args(n, interval, error, coeff_format, objective, method)
    target = make_target(f)
    weight_t = make_target(weight) if weight is not None else None
    fmt = get_format(coeff_format)
    fixed = _check_fixed(fixed, n, fmt, powers)
    degree = n
    exp2_unit = target.name == EXP2.name and (a, b) == (0.0, 1.0)
    if objective != "minimax":
        if not exp2_unit or error != "relative" or weight is not None:
            raise ValueError(f"objective: {objective!r} measures FA4's exp2 kernel, so it needs f='2^x', "
                             f"interval (0, 1), error='relative' and no weight")
        if method not in ("remez", "auto"):
            raise ValueError(f"objective: {objective!r} needs method='remez' (a search)")
    if radius is not None and (not isinstance(radius, int) or not 0 <= radius <= 64):
        raise ValueError(f"radius: must be an integer in 0-64, got {radius!r}")
    if method == "fa4" and (powers is not None or weight is not None):
        raise ValueError("method: 'fa4' is FA4's own call (every power, no weight)")
    t_start = time.perf_counter()
    timings = {}
    relative = error == "relative"
    shift = _shift(target, a, b, fixed, degree, relative)
    check_target(target, a, b, relative=relative, zero_at_origin=shift)
    if weight_t is not None:
        check_target(weight_t, a, b, relative=False)
    prob = Problem(target, a, b, degree, fixed, relative, weight_t, shift)
    _check_haar(prob)
    certifiable = takes_balls(target) and (weight_t is None or takes_balls(weight_t))
    auto = method == "auto"
    if auto:
        method = "exact" if (objective == "minimax" and len(prob.free) <= EXACT_AUTO_MAX_FREE
                             and certifiable and certify_bound) else "remez"
    if method == "exact" and not (certifiable and certify_bound):
        raise ValueError("method: 'exact' proves optimality in ball arithmetic, which needs certify_bound=True "
                         "and an f (and weight) that take flint balls: pass an expression string, or use "
                         "method='remez'")
    t0 = time.perf_counter()
    try:
        opt = _remez_checked(prob)
    except ZeroDivisionError:   # mpmath's solver: the alternation system is singular at working precision
        raise ValueError(f"interval: the Remez system for {target.name} of degree {degree} on ({a:g}, {b:g}) is "
                         "numerically singular (f varies too much over it); fit a shorter interval and use "
                         "range reduction, as FA4 does with [0, 1]") from None
    timings["remez"] = time.perf_counter() - t0
    optimum = Optimum(tuple(mpmath.nstr(c, 30) for c in opt.coeffs), float(opt.max_error), opt.iterations)

    regeneration = exact = bounded = None
    t0 = time.perf_counter()
    exact_set = _exact_polynomial(prob, opt, fmt) if method not in ("fa4", "fpminimax") else None
    part = None
    split = _parity_split(prob, opt, fmt) if method in ("exact", "remez") and objective == "minimax" \
        and weight is None and exact_set is None else None
    if split is not None:
        # the other parity's part of f is a polynomial in the format: the best set has exactly it (see
        # _parity_split), so the fit of the remaining powers alone (fewer coefficients: the exact search,
        # usually) is the answer
        rest = [k for k in prob.free if k not in split]
        try:
            part = fit(f, rest, (a, b), error=error, coeff_format=coeff_format,
                       fixed={**{k: v for k, v in prob.fixed.items() if v != 0.0}, **split},
                       method="auto" if auto else method, certify_bound=certify_bound, radius=radius, bnb=bnb)
        except (ValueError, RuntimeError):   # the reduced problem has no fit of its own: the full search
            part = None
    if method == "fa4":
        coeffs, path, regeneration = _fa4_recipe(target, degree, (a, b), error, fmt, timings)
        prob = Problem(target, a, b, degree, {}, relative)   # FA4's recipe fixes nothing: c0 is a 1-bit number
    elif exact_set is not None:
        coeffs, path = exact_set, "exact (f is a polynomial of the format: the error is 0)"
    elif part is not None:
        coeffs = list(part.coeffs) + [0.0] * (degree + 1 - len(part.coeffs))
        fixed_text = ", ".join(f"c{k}={v:g}" for k, v in split.items())
        path = f"parity split ({fixed_text}, f's part of that parity): {part.path} on the powers {rest}"
    else:
        formats = {k: fmt for k in prob.free}
        lat = lattice_round(prob, opt.coeffs, opt.zeros, formats)
        if method == "fpminimax":
            coeffs, path = lat, "remez+lattice"
        else:
            rn = prob.full([fmt.round(opt.coeffs[k]) for k in prob.free])
            # the exact search only needs a good incumbent: a small neighbourhood is enough
            default_radius = SEARCH_RADIUS[degree] if method == "remez" else 1
            bases = [lat, [float(c) for c in rn]]
            zero = _negligible(prob, opt)
            if zero:
                bases += [[0.0 if k in zero else c for k, c in enumerate(base)] for base in bases]
            coeffs = _search(prob, fmt, opt, bases, default_radius if radius is None else radius, objective)
            path = "remez+lattice+search"
            skipped = ""
            if method == "exact":
                timings["search"] = time.perf_counter() - t0
                try:
                    coeffs, exact = exact_search(prob, fmt, opt, [float(c) for c in coeffs])
                    timings["exact"] = exact.seconds
                    path = "exact"
                except TooManySets as exc:
                    if not auto:
                        raise
                    # ties (a flat error) make the proof too long: fall back to the bounded search, say so
                    method, skipped = "remez", f" (exact search skipped: {exc})"
            if method == "remez" and objective == "minimax" and bnb:
                seed = _lower_degree_seed(f, prob, (a, b), error, coeff_format, weight,
                                          "auto" if auto else method, certify_bound)
                if seed is not None and sup_error(prob, seed, extra=opt.extrema)[0] < \
                        sup_error(prob, coeffs, extra=opt.extrema)[0]:
                    coeffs = seed
                coeffs, bounded = bounded_search(prob, fmt, opt, [float(c) for c in coeffs])
                timings["bounded_search"] = bounded.seconds
                path = "remez+lattice+search+bnb"
            path += skipped
    timings["rounding"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    max_error, argmax = sup_error(prob, coeffs, extra=opt.extrema)
    timings["sup_norm"] = time.perf_counter() - t0
    cert_up = cert_lo = None
    if exact is not None:
        cert_up, cert_lo = exact.winner_upper, exact.winner_lower
    elif certify_bound and certifiable and exact_set is None:   # an error of 0 has no relative tolerance
        t0 = time.perf_counter()
        cert = certify(prob, coeffs, extrema=[argmax])
        timings["certify"] = time.perf_counter() - t0
        cert_up, cert_lo = cert.upper, cert.lower
        max_error, argmax = _consistent(prob, coeffs, max_error, argmax, cert)
    if cert_up is not None and cert_up < float(max_error) * (1 - 1e-12):
        raise RuntimeError(f"certified bound {cert_up!r} below the observed max {float(max_error)!r}")
    metrics = {}
    objective_value = float(max_error)
    if objective != "minimax":
        from ._objectives import measure
        metrics[objective] = measure(objective, coeffs)
        objective_value = metrics[objective]["value"]
    timings["total"] = time.perf_counter() - t_start
    return FitResult(tuple(float(c) for c in coeffs), degree, target.name, (a, b), error, fmt.name,
                     fixed if method != "fa4" else {}, objective, method, path, float(max_error),
                     float(argmax), cert_up, cert_lo, optimum, objective_value, metrics, regeneration,
                     timings, _provenance(), tuple(prob.free), None if weight_t is None else weight_t.name,
                     exact, bounded)


@functools.lru_cache(maxsize=1)
def _process_provenance() -> dict:
    from fa4num.provenance import provenance
    return provenance()


def _provenance() -> dict:
    """fa4num.provenance's record with the date of this fit. The rest (code revision, packages: two git
    calls and a scan of the installed distributions, 50 ms) is read once per process: what a process runs
    is the code it imported at the revision it imported it from."""
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return {**_process_provenance(), "date": now}


def _lower_degree_seed(f, prob: Problem, interval, error, coeff_format, weight, method, certify_bound):
    """The fit without the highest free power (same settings), its coefficients padded with 0 there: a set
    of this problem's format too, so the bounded search, which never returns a worse set than it is given,
    returns one at least as good as the lower degree's. None when only one power is free."""
    free = prob.free
    fixed = {k: v for k, v in prob.fixed.items() if v != 0.0}
    if len(free) < 2 or any(k > free[-1] for k in fixed):
        return None
    try:
        lower = fit(f, free[:-1], interval, error=error, coeff_format=coeff_format, fixed=fixed or None,
                    weight=weight, method=method, certify_bound=certify_bound)
    except (ValueError, RuntimeError):   # the lower degree has no fit of its own (a singular system, say)
        return None
    coeffs = [0.0] * (prob.degree + 1)
    for k, c in enumerate(lower.coeffs):
        coeffs[k] = c
    return coeffs


def _exact_polynomial(prob: Problem, opt, fmt: Format) -> list | None:
    """The set itself when f is a polynomial of the format (x^3 with the powers 1, 3): the real optimum's
    error is 0 and so is its rounding's (to the working precision's rounding, 1e-38), which no search
    improves. None otherwise."""
    if opt.max_error >= 1e-30:
        return None
    coeffs = [float(c) for c in prob.full([fmt.round(opt.coeffs[k]) for k in prob.free])]
    return coeffs if sup_error(prob, coeffs)[0] < 1e-30 else None


def _parity_split(prob: Problem, opt, fmt: Format) -> dict | None:
    """{power: value} for the free powers of one parity when, on an interval symmetric about 0 with absolute
    error, f's part of that parity, (f(x) -+ f(-x)) / 2, is exactly the polynomial of those powers with the
    real optimum's coefficients rounded to the format (GELU's tanh form: x/2 plus an even function). Then
    every set's error is e = e_even + e_odd and max(|e_even + e_odd|, |e_even - e_odd|) >= |e_even| at each
    x and -x, so the best set takes that part exactly and only the other parity is left to fit. None when
    there is no such split."""
    a, b = mpmath.mpf(prob.a), mpmath.mpf(prob.b)
    if prob.relative or prob.shift or not (b > 0 and a == -b):
        return None
    for parity in (1, 0):
        powers = [k for k in prob.free if k % 2 == parity]
        if not powers or len(powers) == len(prob.free) or any(k % 2 == parity and v != 0
                                                              for k, v in prob.fixed.items()):
            continue
        zero = _negligible(prob, opt)   # the optimum's rounding noise (1e-12) stands for 0
        split = {k: 0.0 if k in zero else fmt.round(opt.coeffs[k]) for k in powers}
        with mpmath.workprec(PREC):
            ok = True
            for t in (mpmath.mpf(1) / 7, mpmath.mpf(3) / 5, mpmath.mpf(1)):
                x = b * t
                part = (prob.target.mp(x) + (-1 if parity else 1) * prob.target.mp(-x)) / 2
                poly = sum(mpmath.mpf(v) * x ** k for k, v in split.items())
                if abs(part - poly) > mpmath.mpf(2) ** -100 * (1 + abs(part)):
                    ok = False
                    break
        if ok:
            return split
    return None


def _negligible(prob: Problem, opt) -> set:
    """Free powers whose optimal coefficient changes the error by less than 1e-3 of the optimum's error
    anywhere on the interval: the even powers of an odd f - f(0) on an interval symmetric about 0 (GELU's
    erf), whose optimal coefficients are 0 but come out of the exchange as rounding noise (1e-10). Their
    format numbers near 0 are dense, so rounding never lands on the 0 that fpminimax's points imply; the
    search gets the bases with those coefficients set to 0 as well."""
    a, b = float(prob.a), float(prob.b)
    s = prob.shift
    with mpmath.workprec(64):
        wmax = max(abs(prob.gw(mpmath.mpf(x))[1]) for x in np.linspace(a, b, 33))
        reach = max(abs(a), abs(b))
        return {k for k in prob.free if abs(opt.coeffs[k]) * reach ** (k - s) * wmax < 1e-3 * opt.max_error}


def _search(prob: Problem, fmt: Format, opt, bases, radius: int, objective: str) -> list:
    """Best set in the +-radius neighbourhoods of ``bases``, ranked on the objective."""
    with mpmath.workprec(PREC):
        steps = {k: float(fmt.quantum(opt.coeffs[k])) for k in prob.free}
    scorer = GridScorer(prob, opt.extrema)
    keep = 8 if objective == "minimax" else 48
    ranked = []
    for base in bases:
        ranked += neighbourhood(base, steps, radius, scorer, keep=keep)
    # candidates whose perturbation crossed into a coarser binade are rounded back into the format
    cands = []
    for _, c in sorted(ranked, key=lambda t: t[0]):
        c = fmt.round_array(c).tolist()
        for k, v in prob.fixed.items():
            c[k] = v
        if c not in cands:
            cands.append(c)
    # the bases themselves (the lattice point: what fpminimax returns) always reach the final comparison
    finalists = cands[:4] + [list(b) for b in bases if list(b) not in cands[:4]]
    best = min(finalists, key=lambda c: sup_error(prob, c, extra=opt.extrema)[0])
    if objective == "minimax":
        return best
    from ._objectives import search
    return search(objective, [best] + [c for c in cands if c != best], prob=prob, fmt=fmt, extrema=opt.extrema)


def _fa4_recipe(target, degree, interval, error, fmt: Format, timings):
    """FA4's POLY_EX2 recipe: fpminimax(f, n, [|1, P...|], I, error) -- Sollya when installed, and always
    fa4num's own implementation of it (free-c0 minimax, lattice at its interpolation points, c0 given a
    1-bit format so it snaps to a power of two)."""
    a, b = interval
    prob_free = Problem(target, a, b, degree, {}, error == "relative")
    t0 = time.perf_counter()
    free_opt = remez(prob_free)
    formats = {0: get_format(1)}
    formats.update({k: fmt for k in range(1, degree + 1)})
    own = lattice_round(prob_free, free_opt.coeffs, free_opt.zeros, formats)
    timings["own_fpminimax"] = time.perf_counter() - t0
    sollya_coeffs = None
    if sollya.available() and isinstance(target.name, str):
        function = "exp(x*log(2.0))" if target.name == EXP2.name else target.name.replace("**", "^")
        t0 = time.perf_counter()
        sollya_coeffs = sollya.fpminimax_fa4(degree, interval=interval, error=error,
                                              precision=fmt.precision, function=function)
        timings["sollya"] = time.perf_counter() - t0
        for k, c in enumerate(sollya_coeffs):
            (formats[k] if k else get_format(1)).check(c, f"sollya c{k}")
    regeneration = {"sollya": sollya_coeffs, "own": own,
                    "bit_identical": None if sollya_coeffs is None else sollya_coeffs == own}
    if sollya_coeffs is not None:
        return sollya_coeffs, "sollya", regeneration
    return own, "own-fpminimax", regeneration


def fit_exp2(degree: int = 3, *, interval=(0.0, 1.0), error: str = "relative", coeff_format: str = "fp32",
             objective: str = "minimax", method: str = "auto", fixed: dict | None = None,
             certify_bound: bool = True, radius: int | None = None, bnb: bool = True) -> FitResult:
    """Coefficients for FA4's software exp2: p(frac) ~ 2^frac on [0, 1] with p(0) = 1 (``fixed={0: 1.0}``).

    FA4 (``flash_attn/cute/utils.py``, ``ex2_emulation_2``) computes 2^x = 2^floor(x) * p(x - floor(x)) with
    p evaluated by fp32 FMA Horner and POLY_EX2 coefficients. objective::

      "minimax"    sup of |p/2^x - 1| in real arithmetic (the default, what Sollya optimises)
      "evaluated"  max relative error of the fp32 FMA Horner evaluation, fa4num.ex2.fa4_emulated, over every
                   fp32 input in [0, 1) (see fa4num.fit.evaluated_error)
      "bf16"       share of the softmax domain x in [-127, 0] whose bf16 P differs from the correctly rounded
                   bf16 of 2^x (see fa4num.fit.bf16_mismatch_share for exactly which inputs)

    method="fa4" regenerates POLY_EX2 with FA4's Sollya call (c0 from a 1-bit format, so ``fixed`` is not
    used); ``.regeneration`` says whether fa4num's own fpminimax reproduced Sollya's bits.

    Parameters
    ----------
    degree : int or list of int
        n (powers 0..n) or a monomial list, as :func:`fit` takes it.
    interval : (a, b)
        Default [0, 1], FA4's fraction range.
    error : {"relative", "absolute"}
    coeff_format : {"fp32", "bf16", "fp16", "e4m3"} or int
        The coefficients' format (:func:`get_format`).
    objective : {"minimax", "evaluated", "bf16"}
        See above.
    method : {"auto", "exact", "remez", "fpminimax", "fa4"}
        As :func:`fit` (``"auto"``: the proven-optimal "exact" search where it is small enough).
    fixed : dict, optional
        {power: value} held fixed; default {0: 1.0} (p(0) = 1, as FA4's sets).
    certify_bound : bool
        Compute the rigorous bound (needed by "exact").
    radius : int, optional
        Neighbourhood search radius in coefficient spacings.
    bnb : bool
        method "remez": the branch and bound after the neighbourhood search.

    Returns
    -------
    FitResult
        .coeffs (c0 first, exact in coeff_format), .max_error, .certified_bound, .path, ...

    Raises
    ------
    ValueError
        For an argument outside its allowed values (the message names it).

    Examples
    --------
    >>> r = fit_exp2(3)
    >>> r.coeffs, r.path
    ((1.0, 0.6951168179512024, 0.22764486074447632, 0.07706715166568756), 'exact')
    >>> r.max_error < 8.57e-5, r.max_error <= r.certified_bound
    (True, True)
    """
    if fixed is None:
        fixed = {0: 1.0}
    return fit(EXP2, degree, interval, error=error, coeff_format=coeff_format, fixed=fixed,
               objective=objective, method=method, certify_bound=certify_bound, radius=radius, bnb=bnb)


@dataclass(frozen=True)
class SupNorm:
    """sup over the interval of the error of a given polynomial: ``max_error`` found by search (mpmath),
    ``certified_bound`` >= the true sup (ball arithmetic), ``certified_lower`` <= it."""
    max_error: float
    argmax: float
    certified_bound: float | None
    certified_lower: float | None


def sup_norm(f, coeffs, interval=(0.0, 1.0), *, error: str = "relative", rel_tol: float = 1e-4) -> SupNorm:
    """The error of the polynomial ``coeffs`` (c0 first) against ``f`` on ``interval``, with a certificate
    (like Sollya's ``supnorm``).

    Parameters
    ----------
    f : str or callable
        As :func:`fit` takes it (``"2^x"``, ``"exp(x)"``, ... or a callable on mpmath numbers).
    coeffs : sequence of numbers
        c0 first, finite.
    interval : (a, b)
    error : {"relative", "absolute"}
        ``|p/f - 1|`` or ``|p - f|``.
    rel_tol : float
        How close the certified lower and upper bounds must close in.

    Returns
    -------
    SupNorm
        .max_error and .argmax (search), .certified_bound >= the true sup >= .certified_lower (ball arithmetic;
        None when f cannot be evaluated on balls).

    Raises
    ------
    ValueError
        For no coefficients, a non-finite coefficient, or a bad interval / error.

    Examples
    --------
    >>> from fa4num.fit.registry import fa4_sets
    >>> s = sup_norm("2^x", fa4_sets()[3])
    >>> round(s.max_error, 9), s.certified_lower <= s.max_error <= s.certified_bound
    (8.763e-05, True)
    """
    degree = len(coeffs) - 1
    if degree < 0:
        raise ValueError("coeffs: need at least one coefficient")
    for k, c in enumerate(coeffs):
        if isinstance(c, (int, float, np.number)) and not math.isfinite(c):
            raise ValueError(f"coeffs: c{k} = {c!r} is not a finite number")
    a, b = _check_args(max(degree, 1), interval, error, "fp32", "minimax", "remez")
    target = make_target(f)
    coeffs = [float(c) if isinstance(c, (int, float, np.floating)) else c for c in coeffs]
    # an f with a zero at 0 (relative error): the polynomial's zero low coefficients divide it out
    zeros = {k: 0.0 for k in range(degree + 1) if coeffs[k] == 0}
    shift = _shift(target, a, b, zeros, degree, error == "relative")
    check_target(target, a, b, relative=error == "relative", zero_at_origin=shift)
    prob = Problem(target, a, b, degree, {}, error == "relative", None, shift)
    max_error, argmax = sup_error(prob, coeffs)
    up = lo = None
    if takes_balls(target):
        cert = certify(prob, coeffs, extrema=[argmax], rel_tol=rel_tol)
        up, lo = cert.upper, cert.lower
        max_error, argmax = _consistent(prob, coeffs, max_error, argmax, cert)
    return SupNorm(float(max_error), float(argmax), up, lo)


def _consistent(prob, coeffs, max_error, argmax, cert):
    """The certificate evaluates the error on a finer, adaptive subdivision than the scan: when it saw a
    larger error (a peak narrower than the scan's spacing), refine the search around that point."""
    if cert.lower <= max_error:
        return max_error, argmax
    x = cert.lower_at
    width = (float(prob.b) - float(prob.a)) * 2.0 ** -20
    near = [min(max(x + d * width, float(prob.a)), float(prob.b)) for d in (-1, -0.5, 0, 0.5, 1)]
    return sup_error(prob, coeffs, extra=near)


CERTIFICATE_SCHEMA = "fa4num-fit-certificate/1"


def write_certificate(result: FitResult, path) -> Path:
    """Write the proof that ``result`` is optimal in its format (method "exact") as a JSON file that
    :func:`verify_certificate` re-checks with no LP solver: the problem, the winner, each rival with the
    point its certified lower bound is taken at, and the enumeration's completeness witness (per node, the
    grid constraints whose dual combination bounds it).

    Parameters
    ----------
    result : FitResult
        A proven fit (``result.proven_optimal``) of an expression string (a callable cannot be written).
    path : str or Path

    Returns
    -------
    Path

    Raises
    ------
    ValueError
        When the result is not proven optimal, carries no witness, or its f or weight is not an expression.

    Examples
    --------
    >>> import tempfile, os
    >>> r = fit_exp2(2)
    >>> p = write_certificate(r, os.path.join(tempfile.mkdtemp(), "exp2-2.json"))
    >>> verify_certificate(p).valid
    True
    """
    exact = result.exact
    if exact is None or not exact.proven or exact.witness is None:
        raise ValueError("result: only a proven fit (method 'exact', no unresolved rival) has a certificate")
    for what, name in (("f", result.function), ("weight", result.weight)):
        if name is not None and not isinstance(name, str):
            raise ValueError(f"{what}: a certificate needs an expression string, not a callable")
    data = {"schema": CERTIFICATE_SCHEMA, "function": result.function, "degree": result.degree,
            "interval": list(result.interval), "error": result.error, "coeff_format": result.coeff_format,
            "fixed": {str(k): v for k, v in result.fixed.items()}, "weight": result.weight,
            "coeffs": list(result.coeffs), "winner_upper": exact.winner_upper,
            "rivals": [{"coeffs": list(r.coeffs), "certified_lower": r.certified_lower, "at": r.at}
                       for r in exact.rivals],
            "witness": exact.witness}
    path = Path(path)
    path.write_text(json.dumps(data) + "\n")
    return path


@dataclass(frozen=True)
class CertificateCheck:
    """What :func:`verify_certificate` found: ``valid`` and, when not, the ``reason``; ``nodes`` and ``points``
    re-checked; ``winner_upper`` the winner's certified bound recomputed."""
    valid: bool
    reason: str
    nodes: int = 0
    points: int = 0
    winner_upper: float | None = None


def verify_certificate(path) -> CertificateCheck:
    """Re-check a certificate written by :func:`write_certificate`, with no LP: rebuild the problem, certify
    the winner's error in ball arithmetic, then walk the enumeration tree from the witness, proving each
    node's range from its dual rows (ball arithmetic) and each rival's loss from its certified lower bound
    (fa4num.fit._witness).

    Parameters
    ----------
    path : str or Path

    Returns
    -------
    CertificateCheck
        ``valid`` True when every step holds; else False with the ``reason`` (a file that cannot be read, a
        problem that does not parse, a node whose witness fails, a format point not accounted for, ...).

    Examples
    --------
    >>> import tempfile, os, json
    >>> p = write_certificate(fit_exp2(2), os.path.join(tempfile.mkdtemp(), "c.json"))
    >>> d = json.loads(open(p).read()); d["coeffs"][1] = float.fromhex("0x1.5p-1")
    >>> _ = open(p, "w").write(json.dumps(d))
    >>> verify_certificate(p).valid
    False
    """
    from ._witness import Invalid, verify
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        return CertificateCheck(False, f"cannot read {path}: {exc}")
    if not isinstance(data, dict) or data.get("schema") != CERTIFICATE_SCHEMA:
        return CertificateCheck(False, f"not a {CERTIFICATE_SCHEMA} file")
    try:
        target = make_target(data["function"])
        weight = make_target(data["weight"]) if data["weight"] is not None else None
        degree = int(data["degree"])
        a, b = (float(v) for v in data["interval"])
        fmt = get_format(data["coeff_format"])
        fixed = {int(k): fmt.check(v, f"fixed[{k}]") for k, v in data["fixed"].items()}
        coeffs = [float(c) for c in data["coeffs"]]
        relative = data["error"] == "relative"
        if len(coeffs) != degree + 1 or data["error"] not in ERRORS:
            raise ValueError("coeffs: the degree, coefficients and error kind disagree")
        for k, c in enumerate(coeffs):
            if k in fixed and c != fixed[k]:
                raise ValueError(f"coeffs: c{k} is not the fixed value")
            fmt.check(c, f"c{k}")
        rivals = {tuple(float(c) for c in r["coeffs"]): float(r["at"]) for r in data["rivals"]}
        shift = _shift(target, a, b, fixed, degree, relative)
        check_target(target, a, b, relative=relative, zero_at_origin=shift)
        prob = Problem(target, a, b, degree, fixed, relative, weight, shift)
        up = certify(prob, coeffs, extrema=[float(data["witness"]["grid"][0])], rel_tol=1e-9).upper
        counts = verify(prob, fmt, coeffs, rivals, data["witness"], winner_upper=up)
    except Invalid as exc:
        return CertificateCheck(False, str(exc))
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        return CertificateCheck(False, f"malformed certificate: {exc}")
    return CertificateCheck(True, "", counts["nodes"], counts["points"], up)
