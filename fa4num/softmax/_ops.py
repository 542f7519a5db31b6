"""Elementwise fp32 operations of the softmax stage, vectorised, with the rounding each PTX instruction uses.

``ffma`` is ``fma.rn.f32`` (one rounding, gradual underflow: the softmax's FMAs carry no ``.ftz``);
plain float32 numpy arithmetic is ``add/sub/mul.rn.f32``. MUFU results (``ex2/rcp/lg2.approx.ftz.f32``) come
from the table models in :mod:`fa4num.hw`, looked up at call time so that the hardware models stay in one place.
"""
from __future__ import annotations

import math

import numpy as np
from numba import vectorize

from fa4num.fp._core import fma_rn_f32

LN2_F32 = np.float32(math.log(2.0))          # 0x3F317218, the constant FA4 multiplies lg2 by
LOG2_E_F32 = np.float32(math.log2(math.e))   # 0x3FB8AA3B, utils.LOG2_E as a Float32 constant


@vectorize(["float32(float32, float32, float32)"], cache=True)
def ffma(a, b, c):
    """a*b + c rounded once to nearest even (PTX fma.rn.f32 / SASS FFMA)."""
    return fma_rn_f32(a, b, c)


def f32(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def mufu(name: str, arch: str):
    """The fa4num.hw table model of MUFU.<name> (ex2, rcp or lg2) with .ftz, as a function of an fp32 array."""
    from fa4num import hw  # the "gpu" helper's package; imported here so softmax never caches a stale model
    fn = getattr(hw, f"mufu_{name}")

    def call(x):
        x = f32(x)
        return f32(fn(x, arch=arch, ftz=True)).reshape(x.shape)
    return call


def scale_log2_of(softmax_scale) -> np.float32:
    """softmax_scale * LOG2_E as the kernel computes it: both Float32, one RN multiply
    (utils.compute_softmax_scale_log2; the kernel argument softmax_scale is a Float32)."""
    return np.float32(np.float32(softmax_scale) * LOG2_E_F32)
