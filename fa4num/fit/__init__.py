"""Polynomial fitter: minimax with coefficients in fp32/bf16/fp16, certified bounds, FA4 regeneration.

    >>> from fa4num.fit import fit_exp2
    >>> r = fit_exp2(3)            # p(0) = 1, fp32 coefficients, relative error on [0, 1]
    >>> r.coeffs[0], r.max_error < 8.57e-5, r.max_error <= r.certified_bound
    (1.0, True, True)
"""
import importlib

# name -> the module that defines it. Loaded on first use (PEP 562), so that a module of this package that
# needs none of them (the registry reader, the `fa4num fit` command on a cache hit) imports no fitter: mpmath,
# flint and the fitter's modules take a few tenths of a second, the emulation objectives numba.
_EXPORTS = {
    "fit": "_api", "fit_exp2": "_api", "sup_norm": "_api", "FitResult": "_records", "Optimum": "_records",
    "SupNorm": "_api", "Certificate": "_certify", "FORMATS": "_formats", "Format": "_formats",
    "get_format": "_formats", "load_poly": "registry", "poly_entry": "registry", "describe": "registry",
    "export": "registry", "write_certificate": "_api", "verify_certificate": "_api", "CertificateCheck": "_api", "evaluated_error": "_objectives", "bf16_mismatch_share": "_objectives",
    # the most free coefficients for which method="auto" runs the exact search (the paper's fitter section names it)
    "EXACT_AUTO_MAX_FREE": "_api",
}

__all__ = list(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'fa4num.fit' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
