"""Elementwise fp32 operations of the softmax stage, vectorised, with the rounding each PTX instruction uses.

``ffma`` is ``fma.rn.f32`` (one rounding, gradual underflow: the softmax's FMAs carry no ``.ftz``);
plain float32 numpy arithmetic is ``add/sub/mul.rn.f32``. MUFU results (``ex2/rcp/lg2.approx.ftz.f32``) come
from the table models in :mod:`fa4num.hw`, looked up at call time so that the hardware models stay in one place.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit, vectorize

from fa4num.constants import LOG2_E_F32  # utils.LOG2_E as a Float32 constant
from fa4num.fp.scalar import fma_rn_f32


@vectorize(["float32(float32, float32, float32)"], cache=True)
def ffma(a, b, c):
    """a*b + c rounded once to nearest even (PTX ``fma.rn.f32`` / SASS FFMA), elementwise.

    A numba ufunc: broadcasts like numpy arithmetic; gradual underflow (the softmax's FMAs carry no .ftz).

    Parameters
    ----------
    a, b, c : float32 arrays or scalars

    Returns
    -------
    float32 array of the broadcast shape (a numpy float32 for scalar inputs)

    Examples
    --------
    >>> import numpy as np
    >>> e = np.float32(1 + 2 ** -12)
    >>> float(ffma(e, e, np.float32(-1.0))) == 2 ** -11 + 2 ** -24   # the product is not rounded first
    True
    """
    return fma_rn_f32(a, b, c)


def f32(x) -> np.ndarray:
    """x as a float32 numpy array (``np.asarray(x, dtype=np.float32)``: wider values are rounded to nearest).

    Parameters
    ----------
    x : array_like

    Returns
    -------
    numpy.ndarray of dtype float32, x's shape

    Examples
    --------
    >>> f32([1.0, 0.1])
    array([1. , 0.1], dtype=float32)
    """
    return np.asarray(x, dtype=np.float32)


def mufu(name: str, arch, *, ftz: bool = True):
    """MUFU.<name> as a function of an fp32 array: fa4num.hw's bit-exact table model, or libm (statistical).

    ex2, rcp, lg2, and tanh where fa4num.hw has a measured table (``fa4num.hw.MufuModel.fn``). ``ftz=False``
    gives the non-.ftz form ptxas builds around the instruction. With arch == "libm" (or no model for ``name``
    on ``arch``) the function is numpy's float32 exp2 / reciprocal / log2 / tanh with the .ftz flushes: within
    ~2 ulp of MUFU, not bit-exact.

    Parameters
    ----------
    name : {"ex2", "rcp", "lg2", "tanh"}
    arch : str or fa4num.hw.MufuModel
        A table set of fa4num.hw (e.g. "sm90"), "libm", or a model from ``fa4num.hw.mufu_model``.
    ftz : bool
        The .ftz form (table models only).

    Returns
    -------
    callable
        x (array_like) -> float32 array of x's shape.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([0.5, -130.0], np.float32)
    >>> mufu("ex2", "sm90")(x).tolist(), mufu("ex2", "libm")(x).tolist()
    ([1.4142135381698608, 0.0], [1.4142135381698608, 0.0])
    >>> float(mufu("ex2", "sm90", ftz=False)(x)[1]) == 2.0 ** -130
    True
    """
    from fa4num import hw  # looked up per call so that softmax never caches a stale model
    return hw.mufu_model(arch).fn(name, ftz=ftz)


def ex2_compact(arch):
    """The compact ex2 tables of ``arch`` (``fa4num.hw.mufu.CompactEx2``) for the fused numba kernels of the
    softmax stages, or None where they do not apply (arch "libm", or a table set without a compact form): the
    callers then take their array-at-a-time path. Looked up per call, like :func:`mufu`."""
    from fa4num import hw
    return hw.mufu_model(arch).ex2_compact


def scale_log2_of(softmax_scale) -> np.float32:
    """softmax_scale * LOG2_E as the kernel computes it: both Float32, one RN multiply.

    FA4's ``utils.compute_softmax_scale_log2`` (the kernel argument softmax_scale is a Float32).

    Parameters
    ----------
    softmax_scale : float
        Rounded to float32 first, as the kernel receives it.

    Returns
    -------
    numpy.float32

    Examples
    --------
    >>> float(scale_log2_of(1 / 128 ** 0.5))
    0.127517431974411
    """
    return np.float32(np.float32(softmax_scale) * LOG2_E_F32)


@njit(cache=True, nogil=True, inline="always")
def _fmax(a, b):
    """max.f32 as the fused softmax kernels take a row max (and as numpy's fmax, their array path): a NaN
    operand is ignored, and max(+0, -0) is +0 in either order (FMNMX orders the zeros, as
    ``fa4num.fp.scalar.f32_max``; seen on the H200 by tests/softmax/test_lazy_rule.py's GPU checks)."""
    if a != a:
        return b
    if b != b:
        return a
    if a > b:
        return a
    if b > a:
        return b
    return a if math.copysign(1.0, a) > 0 else b   # equal: only the zeros' signs can differ
