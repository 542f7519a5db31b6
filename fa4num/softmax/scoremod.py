"""FA4's score modifications that run before the mask: the tanh soft cap (``utils.create_softcap_scoremod``,
applied through ``softmax.apply_score_mod_inner``), and its derivative for the backward
(``utils.create_softcap_scoremod_bwd``).

With a score_mod the kernels keep ``softmax_scale`` apart (``utils.compute_softmax_scale_log2``): the score is
first multiplied by ``softmax_scale`` (FMUL, RN), the mod runs on that, and the softmax then uses
``scale_log2 = LOG2_E`` (the Float32 constant 0x3FB8AA3B) instead of ``softmax_scale * LOG2_E``.
Soft cap: ``softcap * tanh(score / softcap)`` with ``tanh.approx.f32`` (``cute.math.tanh(fastmath=True)``) and
an IEEE division by the Python-float cap (``div.rn.f32``).
"""
from __future__ import annotations

import numpy as np

from ._ops import LOG2_E_F32, f32, ffma, mufu

SCALE_LOG2_WITH_SCOREMOD = LOG2_E_F32


def tanh_is_exact(arch="sm90") -> bool:
    """True when the soft cap's ``tanh.approx.f32`` has a bit-exact model for ``arch`` (a table set name, "libm"
    or a ``fa4num.hw.MufuModel``; else libm's tanh stands in and softcap results are close to, not equal to,
    the kernel's)."""
    from fa4num import hw
    return hw.mufu_model(arch).exact("tanh")


def softcap_scores(s, *, softcap: float, softmax_scale, arch: str = "sm90") -> np.ndarray:
    """The soft-capped score FA4 feeds to the softmax: RN(softcap * tanh(RN(RN(s * softmax_scale) / softcap))).

    s: float32 scores (Q K^T from the tensor cores). softmax_scale: the Float32 scale (times q/k descale on
    SM100 fp8). Returns float32 of s's shape; the softmax must then use :data:`SCALE_LOG2_WITH_SCOREMOD`.

    Examples
    --------
    >>> float(softcap_scores(np.float32([0.0]), softcap=30.0, softmax_scale=0.125, arch="libm")[0])
    0.0
    """
    if not softcap > 0:
        raise ValueError(f"softcap must be > 0, got {softcap}")
    with np.errstate(invalid="ignore", over="ignore"):
        return softcap_of(f32(s) * np.float32(softmax_scale), softcap=softcap, arch=arch)


def softcap_of(x, *, softcap: float, arch: str = "sm90") -> np.ndarray:
    """The soft cap of already scaled float32 scores ``x`` (the score_mod of ``create_softcap_scoremod``):
    RN(softcap * tanh.approx(RN(x / softcap))).

    Parameters
    ----------
    x : float32 array_like
        RN(S * softmax_scale).
    softcap : float
    arch : str
        The MUFU model (a table set of fa4num.hw, or "libm").

    Returns
    -------
    numpy.ndarray of float32

    Examples
    --------
    >>> float(softcap_of(np.float32([0.0]), softcap=30.0, arch="libm")[0])
    0.0
    """
    cap = np.float32(softcap)
    with np.errstate(invalid="ignore", over="ignore"):
        y = (f32(x) / cap).astype(np.float32)
        return (cap * mufu("tanh", arch)(y)).astype(np.float32)


def softcap_grad(grad, s, *, softcap: float, softmax_scale, arch: str = "sm90") -> np.ndarray:
    """``create_softcap_scoremod_bwd``: grad * (1 - t*t) with t = tanh.approx(RN(RN(s*softmax_scale)/softcap));
    1 - t*t is one FFMA (ptxas contracts the mul.f32 + sub.f32). The chain rule's softmax_scale factor is
    applied by the backward kernel, not here."""
    with np.errstate(invalid="ignore", over="ignore"):
        return softcap_grad_of(grad, f32(s) * np.float32(softmax_scale), softcap=softcap, arch=arch)


def softcap_grad_of(grad, x, *, softcap: float, arch: str = "sm90") -> np.ndarray:
    """:func:`softcap_grad` of already scaled float32 scores ``x`` (the score_mod_bwd of
    ``create_softcap_scoremod_bwd``): RN(grad * fma(-t, t, 1)), t = tanh.approx(RN(x / softcap)).

    Parameters
    ----------
    grad : float32 array_like
        dS.
    x : float32 array_like
        RN(S * softmax_scale) of the unmodified score.
    softcap : float
    arch : str

    Returns
    -------
    numpy.ndarray of float32

    Examples
    --------
    >>> float(softcap_grad_of(np.float32([2.0]), np.float32([0.0]), softcap=30.0, arch="libm")[0])
    2.0
    """
    cap = np.float32(softcap)
    with np.errstate(invalid="ignore", over="ignore"):
        t = mufu("tanh", arch)((f32(x) / cap).astype(np.float32))
        return (f32(grad) * ffma(-t, t, np.float32(1))).astype(np.float32)
