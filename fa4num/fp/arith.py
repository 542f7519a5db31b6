"""Elementwise IEEE binary32 arithmetic with NVIDIA's conventions, on arrays.

Each function mirrors one PTX instruction (SASS in brackets) and runs the scalar kernel of fa4num.fp.scalar in a
numba parallel loop:

    add(a, b)     add{.rnd}{.ftz}.f32   [FADD]        sub(a, b)   sub{.rnd}{.ftz}.f32   [FADD, b negated]
    mul(a, b)     mul{.rnd}{.ftz}.f32   [FMUL]        fma(a,b,c)  fma{.rnd}{.ftz}.f32   [FFMA]
    max(a, b)     max{.ftz}.f32         [FMNMX]       min(a, b)   min{.ftz}.f32         [FMNMX]

``rounding`` is one of "rn", "rz", "rm", "rp" (PTX .rn/.rz/.rm/.rp); ``ftz=True`` adds .ftz (subnormal inputs
and results become zeros of the same sign). Every NaN that an operation produces has the bits 0x7FFFFFFF.

The packed forms add_f32x2, sub_f32x2, mul_f32x2 and fma_f32x2 mirror PTX add/sub/mul/fma{.rnd}{.ftz}.f32x2
(sm_100+), which FA4's exp2 emulation uses (flash_attn/cute/utils.py, ``ex2_emulation_2`` and ``e2e_asm2``):
each is two independent fp32 operations, one per 32-bit half of a .b64 register, with no interaction between
the halves.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from . import scalar
from .scalar import RM, RN, RP, RZ
from .arrays import as_float32, check_ftz, check_rounding, flat_broadcast, tensor_device, wrap

__all__ = ["add", "sub", "mul", "fma", "max", "min", "add_f32x2", "sub_f32x2", "mul_f32x2", "fma_f32x2"]


# --- parallel loops over the scalar kernels (flat, contiguous float32 arrays) ------------------------------
# The loops run over chunks in parallel; within a chunk, the rounding mode and ftz are tested once and each of the
# eight (mode, ftz) cases has its own serial loop calling the kernel with constant arguments, so numba/LLVM fold
# the mode and ftz tests out of the kernel (3-4x faster for the directed modes than testing them per element;
# numba.literally would do the same at a ~25 ms dispatch cost per call). The loops index with unsigned ints, so
# numba adds no negative-index wraparound test and LLVM can vectorise them (RN: ~3x faster).
_CHUNK = 4096


@njit(inline="always")
def _chunk_end(k, n):
    end = (k + 1) * _CHUNK
    return end if end < n else n


@njit(inline="always")
def _binary_chunk(kernel, a, b, out, lo, hi, mode, ftz):
    if ftz:
        if mode == RN:
            for i in range(np.uint64(lo), np.uint64(hi)):
                out[i] = kernel(a[i], b[i], RN, True)
        elif mode == RZ:
            for i in range(np.uint64(lo), np.uint64(hi)):
                out[i] = kernel(a[i], b[i], RZ, True)
        elif mode == RM:
            for i in range(np.uint64(lo), np.uint64(hi)):
                out[i] = kernel(a[i], b[i], RM, True)
        else:
            for i in range(np.uint64(lo), np.uint64(hi)):
                out[i] = kernel(a[i], b[i], RP, True)
    else:
        if mode == RN:
            for i in range(np.uint64(lo), np.uint64(hi)):
                out[i] = kernel(a[i], b[i], RN, False)
        elif mode == RZ:
            for i in range(np.uint64(lo), np.uint64(hi)):
                out[i] = kernel(a[i], b[i], RZ, False)
        elif mode == RM:
            for i in range(np.uint64(lo), np.uint64(hi)):
                out[i] = kernel(a[i], b[i], RM, False)
        else:
            for i in range(np.uint64(lo), np.uint64(hi)):
                out[i] = kernel(a[i], b[i], RP, False)


@njit(inline="always")
def _fma_chunk(a, b, c, out, lo, hi, mode, ftz):
    if ftz:
        if mode == RN:
            for i in range(np.uint64(lo), np.uint64(hi)):
                out[i] = scalar.f32_fma(a[i], b[i], c[i], RN, True)
        elif mode == RZ:
            for i in range(np.uint64(lo), np.uint64(hi)):
                out[i] = scalar.f32_fma(a[i], b[i], c[i], RZ, True)
        elif mode == RM:
            for i in range(np.uint64(lo), np.uint64(hi)):
                out[i] = scalar.f32_fma(a[i], b[i], c[i], RM, True)
        else:
            for i in range(np.uint64(lo), np.uint64(hi)):
                out[i] = scalar.f32_fma(a[i], b[i], c[i], RP, True)
    else:
        if mode == RN:
            for i in range(np.uint64(lo), np.uint64(hi)):
                out[i] = scalar.f32_fma(a[i], b[i], c[i], RN, False)
        elif mode == RZ:
            for i in range(np.uint64(lo), np.uint64(hi)):
                out[i] = scalar.f32_fma(a[i], b[i], c[i], RZ, False)
        elif mode == RM:
            for i in range(np.uint64(lo), np.uint64(hi)):
                out[i] = scalar.f32_fma(a[i], b[i], c[i], RM, False)
        else:
            for i in range(np.uint64(lo), np.uint64(hi)):
                out[i] = scalar.f32_fma(a[i], b[i], c[i], RP, False)


@njit(inline="always")
def _minmax_chunk(kernel, a, b, out, lo, hi, ftz):
    if ftz:
        for i in range(np.uint64(lo), np.uint64(hi)):
            out[i] = kernel(a[i], b[i], True)
    else:
        for i in range(np.uint64(lo), np.uint64(hi)):
            out[i] = kernel(a[i], b[i], False)


@njit(parallel=True, cache=True)
def _add_loop(a, b, out, mode, ftz):
    n = out.size
    for k in prange((n + _CHUNK - 1) // _CHUNK):
        _binary_chunk(scalar.f32_add, a, b, out, k * _CHUNK, _chunk_end(k, n), mode, ftz)


@njit(parallel=True, cache=True)
def _sub_loop(a, b, out, mode, ftz):
    n = out.size
    for k in prange((n + _CHUNK - 1) // _CHUNK):
        _binary_chunk(scalar.f32_sub, a, b, out, k * _CHUNK, _chunk_end(k, n), mode, ftz)


@njit(parallel=True, cache=True)
def _mul_loop(a, b, out, mode, ftz):
    n = out.size
    for k in prange((n + _CHUNK - 1) // _CHUNK):
        _binary_chunk(scalar.f32_mul, a, b, out, k * _CHUNK, _chunk_end(k, n), mode, ftz)


@njit(parallel=True, cache=True)
def _fma_loop(a, b, c, out, mode, ftz):
    n = out.size
    for k in prange((n + _CHUNK - 1) // _CHUNK):
        _fma_chunk(a, b, c, out, k * _CHUNK, _chunk_end(k, n), mode, ftz)


@njit(parallel=True, cache=True)
def _max_loop(a, b, out, ftz):
    n = out.size
    for k in prange((n + _CHUNK - 1) // _CHUNK):
        _minmax_chunk(scalar.f32_max, a, b, out, k * _CHUNK, _chunk_end(k, n), ftz)


@njit(parallel=True, cache=True)
def _min_loop(a, b, out, ftz):
    n = out.size
    for k in prange((n + _CHUNK - 1) // _CHUNK):
        _minmax_chunk(scalar.f32_min, a, b, out, k * _CHUNK, _chunk_end(k, n), ftz)


def _run(loop, names, operands, extra, pair=False):
    device = tensor_device(*operands)
    arrays = [as_float32(x, n) for x, n in zip(operands, names)]
    shape, flats = flat_broadcast(*arrays)
    if pair and (len(shape) == 0 or shape[-1] != 2):
        raise ValueError(f"f32x2 operands ({', '.join(names)}) must broadcast to a shape ending in 2 "
                         f"(the two halves of a .b64 register), got {shape}")
    out = np.empty(flats[0].size, dtype=np.float32)
    loop(*flats, out, *extra)
    return wrap(out.reshape(shape), device)


# --- public functions ---------------------------------------------------------------------------------------
def add(a, b, *, rounding="rn", ftz=False):
    """a + b rounded once, as PTX ``add{.rnd}{.ftz}.f32``.

    Parameters
    ----------
    a, b : float32 array, torch float32 tensor, or exactly representable Python numbers
        Broadcast against each other; never rounded on the way in.
    rounding : {"rn", "rz", "rm", "rp"}
        PTX's rounding modifier.
    ftz : bool
        PTX's ``.ftz``: subnormal operands and results become zeros of their sign.

    Returns
    -------
    float32 array (a tensor on the inputs' device for tensor inputs)

    Examples
    --------
    >>> import numpy as np
    >>> one, half_ulp = np.float32(1.0), np.float32(2 ** -24)
    >>> float(add(one, half_ulp)), float(add(one, half_ulp, rounding="rp")) == 1 + 2 ** -23   # a tie: to even
    (1.0, True)
    """
    return _run(_add_loop, ("a", "b"), (a, b), (check_rounding(rounding), check_ftz(ftz)))


def sub(a, b, *, rounding="rn", ftz=False):
    """a - b rounded once, as PTX ``sub{.rnd}{.ftz}.f32``.

    Parameters
    ----------
    a, b : float32 array, torch float32 tensor, or exactly representable Python numbers
        Broadcast against each other; never rounded on the way in.
    rounding : {"rn", "rz", "rm", "rp"}
        PTX's rounding modifier.
    ftz : bool
        PTX's ``.ftz``: subnormal operands and results become zeros of their sign.

    Returns
    -------
    float32 array (a tensor on the inputs' device for tensor inputs)

    Examples
    --------
    >>> import numpy as np
    >>> float(sub(np.float32(1.0), np.float32(2 ** -24))) == 1 - 2 ** -24    # exact: below 1 the ulp halves
    True
    """
    return _run(_sub_loop, ("a", "b"), (a, b), (check_rounding(rounding), check_ftz(ftz)))


def mul(a, b, *, rounding="rn", ftz=False):
    """a * b rounded once, as PTX ``mul{.rnd}{.ftz}.f32``.

    Parameters
    ----------
    a, b : float32 array, torch float32 tensor, or exactly representable Python numbers
        Broadcast against each other; never rounded on the way in.
    rounding : {"rn", "rz", "rm", "rp"}
        PTX's rounding modifier.
    ftz : bool
        PTX's ``.ftz``: subnormal operands and results become zeros of their sign.

    Returns
    -------
    float32 array (a tensor on the inputs' device for tensor inputs)

    Examples
    --------
    >>> import numpy as np
    >>> a, b = np.float32(2 ** -100), np.float32(2 ** -30)
    >>> float(mul(a, b)) == 2 ** -130, float(mul(a, b, ftz=True))        # a subnormal result, flushed by .ftz
    (True, 0.0)
    """
    return _run(_mul_loop, ("a", "b"), (a, b), (check_rounding(rounding), check_ftz(ftz)))


def fma(a, b, c, *, rounding="rn", ftz=False):
    """a * b + c with a single rounding, as PTX ``fma{.rnd}{.ftz}.f32``.

    Parameters
    ----------
    a, b, c : float32 array, torch float32 tensor, or exactly representable Python numbers
        Broadcast against each other; never rounded on the way in.
    rounding : {"rn", "rz", "rm", "rp"}
        PTX's rounding modifier.
    ftz : bool
        PTX's ``.ftz``: subnormal operands and results become zeros of their sign (tininess after rounding).

    Returns
    -------
    float32 array (a tensor on the inputs' device for tensor inputs)

    Examples
    --------
    >>> import numpy as np
    >>> a = np.float32(1 + 2 ** -12)
    >>> float(fma(a, a, np.float32(-1.0))) == 2 ** -11 + 2 ** -24      # one rounding: exactly a*a - 1
    True
    >>> float(mul(a, a) - np.float32(1.0)) == 2 ** -11                 # two roundings lose the 2^-24
    True
    >>> float(fma(np.float32(1), np.float32(1), np.float32(2 ** -30), rounding="rp")) == 1 + 2 ** -23
    True
    """
    return _run(_fma_loop, ("a", "b", "c"), (a, b, c), (check_rounding(rounding), check_ftz(ftz)))


def max(a, b, *, ftz=False):  # noqa: A001 -- the PTX name
    """PTX ``max{.ftz}.f32``: a NaN operand is ignored (the other is returned), two NaNs give 0x7FFFFFFF.
    The ±0 rule is fa4num.fp.scalar.SIGNED_ZERO_ORDERED.

    Parameters
    ----------
    a, b : float32 array, torch float32 tensor, or exactly representable Python numbers
        Broadcast against each other.
    ftz : bool
        PTX's ``.ftz``: subnormal operands become zeros of their sign first.

    Returns
    -------
    float32 array (a tensor on the inputs' device for tensor inputs)

    Examples
    --------
    >>> import numpy as np
    >>> nan = np.float32("nan")
    >>> float(max(nan, np.float32(1.0))), hex(int(np.asarray(max(nan, nan)).view(np.uint32)))
    (1.0, '0x7fffffff')
    """
    return _run(_max_loop, ("a", "b"), (a, b), (check_ftz(ftz),))


def min(a, b, *, ftz=False):  # noqa: A001 -- the PTX name
    """PTX ``min{.ftz}.f32``: a NaN operand is ignored (the other is returned), two NaNs give 0x7FFFFFFF.

    Parameters
    ----------
    a, b : float32 array, torch float32 tensor, or exactly representable Python numbers
        Broadcast against each other.
    ftz : bool
        PTX's ``.ftz``: subnormal operands become zeros of their sign first.

    Returns
    -------
    float32 array (a tensor on the inputs' device for tensor inputs)

    Examples
    --------
    >>> import numpy as np
    >>> float(min(np.float32(-0.0), np.float32(0.0))), float(min(np.float32("nan"), np.float32(2.0)))
    (-0.0, 2.0)
    """
    return _run(_min_loop, ("a", "b"), (a, b), (check_ftz(ftz),))


def add_f32x2(a, b, *, rounding="rn", ftz=False):
    """PTX ``add{.rnd}{.ftz}.f32x2 d, a, b`` (sm_100+): two independent fp32 adds, one per 32-bit half.

    Element [..., 0] is the low 32-bit half of the .b64 register (``mov.b64 r, {x, y}`` puts x there); each half
    is rounded once, as ``add`` rounds it, and the halves never interact.

    Parameters
    ----------
    a, b : float32 arrays (or torch float32 tensors, or exact Python numbers)
        Broadcast to a shape (..., 2): [..., 0] is the low half of the .b64 register, [..., 1] the high half.
    rounding : {"rn", "rz", "rm", "rp"}
        PTX's rounding modifier, applied to both halves.
    ftz : bool
        PTX's ``.ftz``: subnormal operands and results become zeros of their sign.

    Returns
    -------
    float32 array of the broadcast shape (a tensor on the inputs' device for tensor inputs)

    Raises
    ------
    ValueError
        When an operand is not float32, the operands do not broadcast to a shape ending in 2, or rounding / ftz
        is not one of the allowed values.

    Examples
    --------
    >>> import numpy as np
    >>> add_f32x2(np.array([1.0, 2.0], np.float32), np.float32(2 ** -24), rounding="rp")   # each half rounds up
    array([1.0000001, 2.0000002], dtype=float32)
    """
    return _run(_add_loop, ("a", "b"), (a, b), (check_rounding(rounding), check_ftz(ftz)), pair=True)


def sub_f32x2(a, b, *, rounding="rn", ftz=False):
    """PTX ``sub{.rnd}{.ftz}.f32x2 d, a, b`` (sm_100+): two independent fp32 subtractions a - b.

    Halves as in add_f32x2; each rounded once.

    Parameters
    ----------
    a, b : float32 arrays (or torch float32 tensors, or exact Python numbers)
        Broadcast to a shape (..., 2): [..., 0] is the low half of the .b64 register, [..., 1] the high half.
    rounding : {"rn", "rz", "rm", "rp"}
        PTX's rounding modifier, applied to both halves.
    ftz : bool
        PTX's ``.ftz``: subnormal operands and results become zeros of their sign.

    Returns
    -------
    float32 array of the broadcast shape (a tensor on the inputs' device for tensor inputs)

    Raises
    ------
    ValueError
        When an operand is not float32, the operands do not broadcast to a shape ending in 2, or rounding / ftz
        is not one of the allowed values.

    Examples
    --------
    >>> import numpy as np
    >>> sub_f32x2(np.array([[1.0, 2.0]], np.float32), np.array([[2 ** -24, 2 ** -23]], np.float32), rounding="rz")
    array([[0.99999994, 1.9999999 ]], dtype=float32)
    """
    return _run(_sub_loop, ("a", "b"), (a, b), (check_rounding(rounding), check_ftz(ftz)), pair=True)


def mul_f32x2(a, b, *, rounding="rn", ftz=False):
    """PTX ``mul{.rnd}{.ftz}.f32x2 d, a, b`` (sm_100+): two independent fp32 products.

    Halves as in add_f32x2; each rounded once.

    Parameters
    ----------
    a, b : float32 arrays (or torch float32 tensors, or exact Python numbers)
        Broadcast to a shape (..., 2): [..., 0] is the low half of the .b64 register, [..., 1] the high half.
    rounding : {"rn", "rz", "rm", "rp"}
        PTX's rounding modifier, applied to both halves.
    ftz : bool
        PTX's ``.ftz``: subnormal operands and results become zeros of their sign.

    Returns
    -------
    float32 array of the broadcast shape (a tensor on the inputs' device for tensor inputs)

    Raises
    ------
    ValueError
        When an operand is not float32, the operands do not broadcast to a shape ending in 2, or rounding / ftz
        is not one of the allowed values.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([2 ** -70, 2 ** -70], np.float32)
    >>> mul_f32x2(x, x), mul_f32x2(x, x, ftz=True)   # 2^-140 is subnormal: .ftz flushes it
    (array([7.17e-43, 7.17e-43], dtype=float32), array([0., 0.], dtype=float32))
    """
    return _run(_mul_loop, ("a", "b"), (a, b), (check_rounding(rounding), check_ftz(ftz)), pair=True)


def fma_f32x2(a, b, c, *, rounding="rn", ftz=False):
    """PTX ``fma{.rnd}{.ftz}.f32x2 d, a, b, c`` (sm_100+): two independent fused multiply-adds a * b + c.

    Halves as in add_f32x2; each rounded once. FA4's Horner steps (``fma_packed_f32x2`` in
    flash_attn/cute/utils.py) use the .rn form.

    Parameters
    ----------
    a, b, c : float32 arrays (or torch float32 tensors, or exact Python numbers)
        Broadcast to a shape (..., 2): [..., 0] is the low half of the .b64 register, [..., 1] the high half.
    rounding : {"rn", "rz", "rm", "rp"}
        PTX's rounding modifier, applied to both halves.
    ftz : bool
        PTX's ``.ftz``: subnormal operands and results become zeros of their sign.

    Returns
    -------
    float32 array of the broadcast shape (a tensor on the inputs' device for tensor inputs)

    Raises
    ------
    ValueError
        When an operand is not float32, the operands do not broadcast to a shape ending in 2, or rounding / ftz
        is not one of the allowed values.

    Examples
    --------
    >>> import numpy as np
    >>> e = np.float32(1 + 2 ** -12)
    >>> fma_f32x2(np.array([e, e], np.float32), e, np.array([-1.0, 0.0], np.float32))   # 2^-11 + 2^-24 kept
    array([4.8834085e-04, 1.0004883e+00], dtype=float32)
    """
    return _run(_fma_loop, ("a", "b", "c"), (a, b, c), (check_rounding(rounding), check_ftz(ftz)), pair=True)
