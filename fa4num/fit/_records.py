"""The records the fitter returns (FitResult and what it holds), in a module of the standard library only:
a FitResult read back from the user cache (fa4num.fit._memo) needs no numpy, mpmath or flint to exist."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

# the exact search's slacks (fa4num.fit._exact applies them; every ExactCertificate records them)
LP_SLACK = 1e-7        # R is enlarged by this relative amount ...
RANGE_SLACK = 1e-6     # ... and every coordinate range by this many format spacings
CERT_TOL = 1e-9        # relative gap allowed between the winner's certified upper and lower bounds


@dataclass(frozen=True)
class Rival:
    """A format point of the searched region other than the winner, and why it loses."""
    coeffs: tuple            # c0..cn
    certified_lower: float   # rigorous lower bound of its sup error (ball arithmetic at ``at``)
    at: float                # the exact point where that bound was evaluated


@dataclass(frozen=True)
class ExactCertificate:
    """What method="exact" proved: every set in the format with error <= ``bound`` lies in the region, the
    region's format points are the winner and ``rivals``, and each rival's certified lower bound exceeds
    the winner's certified upper bound (``unresolved`` lists the rivals for which that failed: ties).

    region_grid   the grid X (exact floats) defining the region R(X, bound) (see the module docstring)
    bound         U: the certified upper bound the region was cut with (>= winner_upper)
    box           {power: (least, greatest)} format numbers of R's projection on each free coefficient
    candidates    number of format points found in the region (the winner included)
    winner_upper  certified upper bound of the winner's sup error; winner_lower its certified lower bound
    nodes, lps    branch-and-bound nodes visited and LPs solved (all rounds); rounds: cutting-plane rounds
    witness       what fa4num.fit.verify_certificate re-checks completeness from, with no LP (write it with
                  fa4num.fit.write_certificate)
    """
    region_grid: tuple
    bound: float
    box: dict
    candidates: int
    winner_upper: float
    winner_lower: float
    rivals: tuple
    unresolved: tuple
    nodes: int
    lps: int
    rounds: int
    seconds: float
    slack: dict = field(default_factory=lambda: {"lp_relative": LP_SLACK, "range_spacings": RANGE_SLACK,
                                                 "certify_rel_tol": CERT_TOL})
    # the completeness witness (fa4num.fit._witness): the enumeration's coordinates and, per node, the rows
    # of its LPs' dual (or Farkas) combinations; None where it was not built (ties, unresolved rivals)
    witness: dict | None = field(default=None, compare=False, repr=False)

    @property
    def proven(self) -> bool:
        return not self.unresolved


@dataclass(frozen=True)
class BoundedSearch:
    """What :func:`bounded_search` did: the branch and bound of method="exact" run on shrinking cuts.

    cuts        each cut U tried, in order, with its outcome: the number of sets found, "none" or "too many"
                (the region held more sets or nodes than allowed)
    floor       the highest cut that came back empty while the whole lattice was searched: no set in the
                format has an error below it (on the region's grid, so rigorously); None if there was none
    candidates  sets found and ranked, all cuts together
    complete    whether every cut searched the format's whole lattice (False where a coefficient's range
                held 0 and only the multiples of its coarsest spacing were listed)
    improved    whether it found a set better than the incumbent it was given
    nodes, lps  branch-and-bound nodes visited and LPs solved
    """
    cuts: tuple
    floor: float | None
    candidates: int
    complete: bool
    improved: bool
    nodes: int
    lps: int
    seconds: float


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

    Attributes
    ----------
    coeffs
        The coefficients c0..cn as Python floats, each exactly a number of ``coeff_format``.
    max_error
        Sup over the interval of ``|p/f - 1|`` (relative) or ``|p - f|`` (absolute), real arithmetic.
    argmax
        Where that sup is reached.
    certified_bound
        Rigorous upper bound of max_error (ball arithmetic with subdivision); None when the target cannot be
        evaluated on balls.
    certified_lower
        Rigorous lower bound found on the way.
    optimum
        The real-coefficient optimum with the same fixed coefficients.
    objective_value
        The objective's own score of ``coeffs`` (max_error for "minimax").
    path
        What produced the coefficients: "exact" (proven optimal, see ``exact``), "remez+lattice+search",
        "remez+lattice" (fpminimax), "sollya" or "own-fpminimax" (method "fa4").
    monomials
        The powers that were fitted (free), as Sollya's ``[|...|]``.
    weight
        The weight's name, if any.
    exact
        Method "exact": the ExactCertificate (region searched, candidates, each rival's certified error); None
        otherwise.
    bounded
        Method "remez" (and "auto" where the exact search is too big): the BoundedSearch record of the branch
        and bound on shrinking cuts that ran after the neighbourhood search.
    regeneration
        Method "fa4" only: ``{"sollya": coeffs or None, "own": coeffs, "bit_identical": bool or None}``.
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
    monomials: tuple = ()
    weight: str | None = None
    exact: ExactCertificate | None = None
    bounded: BoundedSearch | None = None

    @property
    def proven_optimal(self) -> bool:
        """Whether the exact search proved that no other set in the format has a smaller max_error."""
        return self.exact is not None and self.exact.proven

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        if self.exact is not None:
            d["exact"]["region_grid"] = len(self.exact.region_grid)   # the count; the points are in .exact
            d["exact"]["box"] = {str(k): v for k, v in self.exact.box.items()}
            witness = self.exact.witness
            d["exact"]["witness"] = None if witness is None else len(witness["nodes"])   # the node count
        d["coeffs_hex"] = [c.hex() for c in self.coeffs]
        d["fixed"] = {str(k): v for k, v in self.fixed.items()}
        return d
