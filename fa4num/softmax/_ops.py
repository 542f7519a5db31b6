"""Elementwise fp32 operations of the softmax stage, vectorised, with the rounding each PTX instruction uses.

``ffma`` is ``fma.rn.f32`` (one rounding, gradual underflow: the softmax's FMAs carry no ``.ftz``);
plain float32 numpy arithmetic is ``add/sub/mul.rn.f32``. MUFU results (``ex2/rcp/lg2.approx.ftz.f32``) come
from the table models in :mod:`fa4num.hw`, looked up at call time so that the hardware models stay in one place.
"""
from __future__ import annotations

import numpy as np
from numba import njit, vectorize

from fa4num.constants import LN2_F32 as LN2_F32  # re-exported: sm90/sm100 read it with the ops
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


_TINY = np.float32(2.0 ** -126)
_LIBM = {"ex2": np.exp2, "rcp": np.reciprocal, "lg2": np.log2, "tanh": np.tanh}


def _flush(x):
    return np.where(np.abs(x) < _TINY, np.float32(0), x).astype(np.float32)


def _libm(name):
    """numpy's float32 exp2 / reciprocal / log2 with the .ftz flushes: within ~2 ulp of MUFU, not bit-exact
    (the fast statistical mode)."""
    fn = _LIBM[name]
    if name == "ex2":
        def ex2(x):
            # exp2 of a subnormal is 1 either way, so only the result needs the flush; results are >= 0
            with np.errstate(over="ignore"):
                y = np.exp2(f32(x))
            y[y < _TINY] = 0
            return y
        return ex2

    def call(x):
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            return _flush(fn(_flush(f32(x))))
    return call


def has_mufu(name: str, arch: str) -> bool:
    """Whether fa4num.hw has a bit-exact model of MUFU.<name> (``arch == "libm"`` always answers True)."""
    if arch == "libm":
        return True
    from fa4num import hw
    if name == "tanh":
        return hw.tanh_table_available(arch)
    return hasattr(hw, f"mufu_{name}")


def mufu(name: str, arch: str, *, ftz: bool = True):
    """MUFU.<name> as a function of an fp32 array: fa4num.hw's bit-exact table model, or libm (statistical).

    ex2, rcp, lg2, and tanh where fa4num.hw has a measured table. ``ftz=False`` gives the non-.ftz form ptxas
    builds around the instruction. With arch == "libm" (or no model for ``name`` on ``arch``) the function is
    numpy's float32 exp2 / reciprocal / log2 / tanh with the .ftz flushes: within ~2 ulp of MUFU, not bit-exact.

    Parameters
    ----------
    name : {"ex2", "rcp", "lg2", "tanh"}
    arch : str
        A table set of fa4num.hw (e.g. "sm90"), or "libm".
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
    from fa4num import hw  # the "gpu" helper's package; imported here so softmax never caches a stale model
    if arch == "libm" or not has_mufu(name, arch):
        return _libm(name)
    fn = getattr(hw, f"mufu_{name}")

    def call(x):
        x = f32(x)
        return f32(fn(x, arch=arch, ftz=ftz)).reshape(x.shape)
    return call


def ex2_compact(arch: str):
    """The compact ex2 tables of ``arch`` (``fa4num.hw.mufu.CompactEx2``) for the fused numba kernels of the
    softmax stages, or None where they do not apply (arch "libm", or a table set without a compact form): the
    callers then take their array-at-a-time path. Looked up per call, like :func:`mufu`."""
    if arch == "libm":
        return None
    from fa4num import hw
    return hw.load_tables(arch).ex2_compact


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
    operand is ignored."""
    if a != a:
        return b
    if b != b:
        return a
    return a if a > b else b
