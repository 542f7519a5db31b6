"""fit() and fit_exp2(): minimax polynomials with coefficients in a machine format, certified.

Pipeline (method="remez", the default):
1. real-coefficient optimum: Remez exchange with the fixed coefficients in the basis (_remez);
2. rounding to the format: round-to-nearest and the Brisebarre–Chevillard lattice point (_lattice), then a
   search of the +-r-ulp neighbourhood of both, ranked on the objective;
3. the winner's sup norm in mpmath and a rigorous bound in ball arithmetic (_certify).
method="fpminimax" stops after the lattice step (Sollya's fpminimax with a constrained part, which Sollya
itself cannot run on this problem); method="fa4" regenerates FA4's POLY_EX2 recipe (see fit_exp2).
"""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field

import mpmath
import numpy as np

from . import _sollya
from ._certify import certify
from ._formats import FORMATS, Format, get_format
from ._lattice import GridScorer, lattice_round, neighbourhood
from ._remez import PREC, Problem, remez, sup_error
from ._target import EXP2, check_target, make_target, takes_balls

ERRORS = ("relative", "absolute")
OBJECTIVES = ("minimax", "evaluated", "bf16")
METHODS = ("remez", "fpminimax", "fa4")
MAX_DEGREE = 8
# search radius in units of each coefficient's spacing, by degree: the neighbourhood has (2r+1)^n points
SEARCH_RADIUS = {1: 8, 2: 6, 3: 4, 4: 3, 5: 2, 6: 2, 7: 1, 8: 1}


@dataclass(frozen=True)
class Optimum:
    """The real-coefficient best approximation (what rounding to a format is measured against)."""
    coeffs: tuple      # c0..cn as decimal strings, 30 significant digits
    max_error: float
    iterations: int

    @property
    def coeffs_float(self) -> tuple:
        return tuple(float(c) for c in self.coeffs)


@dataclass(frozen=True)
class FitResult:
    """A fitted coefficient set and how good it is.

    coeffs           c0..cn as Python floats, each exactly a number of ``coeff_format``
    max_error        sup over the interval of |p/f - 1| (relative) or |p - f| (absolute), real arithmetic
    argmax           where that sup is reached
    certified_bound  rigorous upper bound of max_error (ball arithmetic with subdivision); None when the
                     target cannot be evaluated on balls
    certified_lower  rigorous lower bound found on the way
    optimum          the real-coefficient optimum with the same fixed coefficients
    objective_value  the objective's own score of ``coeffs`` (max_error for "minimax")
    path             what produced the coefficients: "remez+lattice+search", "remez+lattice" (fpminimax),
                     "sollya" or "own-fpminimax" (method "fa4")
    regeneration     method "fa4" only: {"sollya": coeffs or None, "own": coeffs, "bit_identical": bool|None}
    """
    coeffs: tuple
    degree: int
    function: str
    interval: tuple
    error: str
    coeff_format: str
    fixed: dict
    objective: str
    method: str
    path: str
    max_error: float
    argmax: float
    certified_bound: float | None
    certified_lower: float | None
    optimum: Optimum
    objective_value: float
    metrics: dict = field(default_factory=dict)
    regeneration: dict | None = None
    timings: dict = field(default_factory=dict)
    provenance: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["coeffs_hex"] = [c.hex() for c in self.coeffs]
        d["fixed"] = {str(k): v for k, v in self.fixed.items()}
        return d


def _check_args(degree, interval, error, coeff_format, objective, method):
    if isinstance(degree, bool) or not isinstance(degree, (int, np.integer)) or not 1 <= degree <= MAX_DEGREE:
        raise ValueError(f"degree: must be an integer in 1-{MAX_DEGREE}, got {degree!r}")
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


def _check_fixed(fixed, degree, fmt: Format) -> dict:
    fixed = dict(fixed or {})
    for k, v in fixed.items():
        if not isinstance(k, (int, np.integer)) or not 0 <= k <= degree:
            raise ValueError(f"fixed: power {k!r} outside 0-{degree}")
        fixed[k] = fmt.check(v, f"fixed[{k}]")
    if len(fixed) > degree:
        raise ValueError(f"fixed: {len(fixed)} fixed coefficients leave nothing to fit at degree {degree}")
    return {int(k): v for k, v in sorted(fixed.items())}


def fit(f, degree: int, interval=(0.0, 1.0), *, error: str = "relative", coeff_format: str = "fp32",
        fixed: dict | None = None, objective: str = "minimax", method: str = "remez",
        certify_bound: bool = True, radius: int | None = None) -> FitResult:
    """Minimax polynomial of ``degree`` for ``f`` on ``interval`` with coefficients in ``coeff_format``.

    f            expression string in x (``"2^x"``, ``"exp(x)"``, ``"log1p(x)"``; finite at every point of the
                 interval, so no removable singularities like log1p(x)/x at 0) or a callable taking
                 mpmath numbers (and flint ball series, for the certificate)
    error        "relative" (p/f - 1) or "absolute" (p - f)
    coeff_format "fp32", "bf16" or "fp16"
    fixed        {power: value} held fixed (exact in the format); default none
    objective    "minimax" (sup norm in real arithmetic); "evaluated" and "bf16" are for 2^x on [0, 1]
                 (see fit_exp2)
    method       "remez" (optimum, lattice rounding, neighbourhood search), "fpminimax" (optimum and
                 lattice rounding only), "fa4" (FA4's fpminimax call: c0 in a 1-bit format; Sollya if installed)
    radius       neighbourhood search radius in coefficient spacings (default by degree, SEARCH_RADIUS)
    """
    a, b = _check_args(degree, interval, error, coeff_format, objective, method)
    target = make_target(f)
    fmt = get_format(coeff_format)
    fixed = _check_fixed(fixed, degree, fmt)
    exp2_unit = target.name == EXP2.name and (a, b) == (0.0, 1.0)
    if objective != "minimax":
        if not exp2_unit or error != "relative":
            raise ValueError(f"objective: {objective!r} measures FA4's exp2 kernel, so it needs f='2^x', "
                             f"interval (0, 1) and error='relative'")
        if method != "remez":
            raise ValueError(f"method: objective {objective!r} needs method='remez' (a search)")
    if radius is not None and (not isinstance(radius, int) or not 0 <= radius <= 64):
        raise ValueError(f"radius: must be an integer in 0-64, got {radius!r}")
    t_start = time.perf_counter()
    timings = {}
    relative = error == "relative"
    check_target(target, a, b, relative=relative)
    prob = Problem(target, a, b, degree, fixed, relative)
    t0 = time.perf_counter()
    try:
        opt = remez(prob)
    except ZeroDivisionError:   # mpmath's solver: the alternation system is singular at working precision
        raise ValueError(f"interval: the Remez system for {target.name} of degree {degree} on ({a:g}, {b:g}) is "
                         "numerically singular (f varies too much over it); fit a shorter interval and use "
                         "range reduction, as FA4 does with [0, 1]") from None
    timings["remez"] = time.perf_counter() - t0
    optimum = Optimum(tuple(mpmath.nstr(c, 30) for c in opt.coeffs), float(opt.max_error), opt.iterations)

    regeneration = None
    t0 = time.perf_counter()
    if method == "fa4":
        coeffs, path, regeneration = _fa4_recipe(target, degree, (a, b), error, fmt, timings)
        prob = Problem(target, a, b, degree, {}, relative)   # FA4's recipe fixes nothing: c0 is a 1-bit number
    else:
        formats = {k: fmt for k in prob.free}
        lat = lattice_round(prob, opt.coeffs, opt.zeros, formats)
        if method == "fpminimax":
            coeffs, path = lat, "remez+lattice"
        else:
            rn = prob.full([fmt.round(opt.coeffs[k]) for k in prob.free])
            coeffs = _search(prob, fmt, opt, [lat, [float(c) for c in rn]],
                             SEARCH_RADIUS[degree] if radius is None else radius, objective)
            path = "remez+lattice+search"
    timings["rounding"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    max_error, argmax = sup_error(prob, coeffs, extra=opt.extrema)
    timings["sup_norm"] = time.perf_counter() - t0
    cert_up = cert_lo = None
    if certify_bound and takes_balls(target):
        t0 = time.perf_counter()
        cert = certify(prob, coeffs, extrema=[argmax])
        timings["certify"] = time.perf_counter() - t0
        cert_up, cert_lo = cert.upper, cert.lower
        max_error, argmax = _consistent(prob, coeffs, max_error, argmax, cert)
        if cert_up < float(max_error) * (1 - 1e-12):
            raise RuntimeError(f"certified bound {cert_up!r} below the observed max {float(max_error)!r}")
    metrics = {}
    objective_value = float(max_error)
    if objective != "minimax":
        from ._objectives import measure
        metrics[objective] = measure(objective, coeffs)
        objective_value = metrics[objective]["value"]
    timings["total"] = time.perf_counter() - t_start
    from fa4num.provenance import provenance
    return FitResult(tuple(float(c) for c in coeffs), degree, target.name, (a, b), error, fmt.name,
                     fixed if method != "fa4" else {}, objective, method, path, float(max_error),
                     float(argmax), cert_up, cert_lo, optimum, objective_value, metrics, regeneration,
                     timings, provenance())


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
    if _sollya.available() and isinstance(target.name, str):
        function = "exp(x*log(2.0))" if target.name == EXP2.name else target.name.replace("**", "^")
        t0 = time.perf_counter()
        sollya_coeffs = _sollya.fpminimax_fa4(degree, interval=interval, error=error,
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
             objective: str = "minimax", method: str = "remez", fixed: dict | None = None,
             certify_bound: bool = True, radius: int | None = None) -> FitResult:
    """Coefficients for FA4's software exp2: p(frac) ~ 2^frac on [0, 1] with p(0) = 1 (``fixed={0: 1.0}``).

    FA4 (``flash_attn/cute/utils.py``, ``ex2_emulation_2``) computes 2^x = 2^floor(x) * p(x - floor(x)) with
    p evaluated by fp32 FMA Horner and POLY_EX2 coefficients. objective:
      "minimax"    sup of |p/2^x - 1| in real arithmetic (the default, what Sollya optimises)
      "evaluated"  max relative error of the fp32 FMA Horner evaluation, fa4num.ex2.fa4_emulated, over every
                   fp32 input in [0, 1) (see fa4num.fit.evaluated_error)
      "bf16"       share of the softmax domain x in [-127, 0] whose bf16 P differs from the correctly rounded
                   bf16 of 2^x (see fa4num.fit.bf16_mismatch_share for exactly which inputs)
    method="fa4" regenerates POLY_EX2 with FA4's Sollya call (c0 from a 1-bit format, so ``fixed`` is not
    used); ``.regeneration`` says whether fa4num's own fpminimax reproduced Sollya's bits.
    """
    if fixed is None:
        fixed = {0: 1.0}
    return fit(EXP2, degree, interval, error=error, coeff_format=coeff_format, fixed=fixed,
               objective=objective, method=method, certify_bound=certify_bound, radius=radius)


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
    (like Sollya's ``supnorm``); ``rel_tol`` is how close the certified bounds must close in."""
    degree = len(coeffs) - 1
    if degree < 0:
        raise ValueError("coeffs: need at least one coefficient")
    for k, c in enumerate(coeffs):
        if isinstance(c, (int, float, np.number)) and not math.isfinite(c):
            raise ValueError(f"coeffs: c{k} = {c!r} is not a finite number")
    a, b = _check_args(max(degree, 1), interval, error, "fp32", "minimax", "remez")
    target = make_target(f)
    check_target(target, a, b, relative=error == "relative")
    prob = Problem(target, a, b, degree, {}, error == "relative")
    coeffs = [float(c) if isinstance(c, (int, float, np.floating)) else c for c in coeffs]
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
