"""Polynomial fitter: minimax with coefficients in fp32/bf16/fp16, certified bounds, FA4 regeneration.

    >>> from fa4num.fit import fit_exp2
    >>> r = fit_exp2(3)            # p(0) = 1, fp32 coefficients, relative error on [0, 1]
    >>> r.coeffs, r.max_error, r.certified_bound
"""
from ._api import FitResult, Optimum, fit, fit_exp2
from ._certify import Certificate
from ._formats import FORMATS, Format, get_format

__all__ = ["fit", "fit_exp2", "FitResult", "Optimum", "Certificate", "FORMATS", "Format", "get_format"]
