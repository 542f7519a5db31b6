"""FA4's software exp2 (any degree and coefficients; the packed, scalar and asm forms) and the exhaustive sweep
engine that measures an exp2 implementation against the correctly rounded 2^x over all fp32 inputs::

    fa4_emulated(x, degree=3, *, coeffs=None, variant="packed")    bit-exact FA4 exp2 (emulate.py)
    sweep(impl, domain) -> SweepResult                             ulp / bf16 statistics (engine.py)
    fa4_implementation(...), mufu_implementation(...), Domain(...) what a sweep runs, and over which inputs
    report_sections(ctx) in report.py                              its sections of `fa4num report` (fa4num.report)
"""
from .emulate import POLY_EX2, VARIANTS, Variant, fa4_emulated, poly_coeffs
from .engine import Domain, Implementation, SweepResult, fa4_implementation, mufu_implementation, sweep


__all__ = ["POLY_EX2", "VARIANTS", "Variant", "fa4_emulated", "poly_coeffs", "Domain", "Implementation",
           "SweepResult", "fa4_implementation", "mufu_implementation", "sweep"]
