"""FA4's software exp2 (any degree and coefficients; the packed, scalar and asm forms) and the exhaustive sweep
engine that measures an exp2 implementation against the correctly rounded 2^x over all fp32 inputs.

    fa4_emulated(x, degree=3, *, coeffs=None, variant="packed")    bit-exact FA4 exp2 (emulate.py)
    sweep(impl, domain) -> SweepResult                             ulp / bf16 statistics (engine.py)
    fa4_implementation(...), mufu_implementation(...), Domain(...) what a sweep runs, and over which inputs
    write_report(out_dir)                                          the `fa4num report` command (report.py)
"""
from .emulate import POLY_EX2, VARIANTS, Variant, fa4_emulated, poly_coeffs
from .engine import Domain, Implementation, SweepResult, fa4_implementation, mufu_implementation, sweep


def write_report(out_dir="fa4num-report", *, quick=False, progress=True):
    """Write the FA4 exp2 report (report.md, report.json, figures) into out_dir; see fa4num.ex2.report."""
    from .report import write_report as _write
    return _write(out_dir, quick=quick, progress=progress)


__all__ = ["POLY_EX2", "VARIANTS", "Variant", "fa4_emulated", "poly_coeffs", "Domain", "Implementation",
           "SweepResult", "fa4_implementation", "mufu_implementation", "sweep", "write_report"]
