"""Polynomial fitter: minimax with coefficients in fp32/bf16/fp16, certified bounds, FA4 regeneration.

    >>> from fa4num.fit import fit_exp2
    >>> r = fit_exp2(3)            # p(0) = 1, fp32 coefficients, relative error on [0, 1]
    >>> r.coeffs[0], r.max_error < 8.57e-5, r.max_error <= r.certified_bound
    (1.0, True, True)
"""
from ._api import FitResult, Optimum, SupNorm, fit, fit_exp2, sup_norm
from ._certify import Certificate
from ._formats import FORMATS, Format, get_format
from .registry import describe, export, load_poly, poly_entry

__all__ = ["fit", "fit_exp2", "sup_norm", "FitResult", "Optimum", "SupNorm", "Certificate", "FORMATS", "Format", "get_format",
           "load_poly", "poly_entry", "describe", "export", "evaluated_error", "bf16_mismatch_share"]


def __getattr__(name):
    # the emulation objectives import numba kernels: load them on first use only
    if name in ("evaluated_error", "bf16_mismatch_share"):
        from . import _objectives
        return getattr(_objectives, name)
    raise AttributeError(f"module 'fa4num.fit' has no attribute {name!r}")
