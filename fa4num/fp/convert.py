"""Conversions between float32 and the narrow formats FA4 uses, with the GPU's semantics.

    to_bf16(x)    cvt.rn.bf16.f32              round to nearest even; overflow -> inf; subnormals kept
    to_fp16(x)    cvt.rn.f16.f32               round to nearest even; overflow -> inf; subnormals kept
    to_e4m3(x)    cvt.rn.satfinite.e4m3x2.f32  round to nearest even; |x| > 448 and ±inf -> ±448
    to_e5m2(x)    cvt.rn.satfinite.e5m2x2.f32  round to nearest even; |x| > 57344 and ±inf -> ±57344
and the packed forms to_bf16x2 / to_fp16x2 / to_e4m3x2 / to_e5m2x2 (a, b) with PTX's operand order:
``cvt.rn.bf16x2.f32 d, a, b`` puts a in the upper half of d and b in the lower half.

The widening conversions from_bf16 / from_fp16 / from_e4m3 / from_e5m2 are exact (every narrow value is a
float32). FA4 widens bf16 with a 16-bit shift, which keeps a NaN's payload; the others make NaN_FROM_NARROW.

Rounding is done here in one step on the float32's fields (integer arithmetic: the dropped significand bits
against half a unit of the kept ones, ties to even); overflow and saturation are then applied. ml_dtypes gives
the same finite values but neither saturates nor makes the GPU's NaN bits; the tests compare with it where both
agree.

NaN bit patterns written by the GPU are constants here (NAN_BITS): a NaN input gives that pattern whatever its
sign and payload. The H200 golden vectors (tests/golden/convert.json.xz) confirm them for cvt.rn.bf16.f32,
cvt.rn.f16.f32, cvt.rn.bf16x2.f32 and cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32, and confirm from_bf16 (a shift that
keeps the payload) and from_fp16 (cvt.f32.f16: NaN -> 0x7FFFFFFF). PTX has no direct fp8 -> f32 cvt (it widens
e4m3x2/e5m2x2 to f16x2), so from_e4m3 / from_e5m2 give the values of that path, with NaN -> NAN_FROM_NARROW.
"""
from __future__ import annotations


import numpy as np
from numba import njit, prange


from .dtypes import DTYPES
from .arrays import flat as _flat, is_tensor, as_float32, flat_broadcast, tensor_device, wrap
from .scalar import CANONICAL_NAN_BITS, f32_to_u32

__all__ = ["to_bf16", "to_fp16", "to_e4m3", "to_e5m2", "to_bf16x2", "to_fp16x2", "to_e4m3x2", "to_e5m2x2",
           "from_bf16", "from_fp16", "from_e4m3", "from_e5m2", "from_bf16x2", "from_fp16x2", "from_e4m3x2",
           "from_e5m2x2", "NAN_BITS", "NAN_FROM_NARROW", "FORMATS"]

# NaN produced by cvt from float32 on the H200: positive, all payload bits set (like the fp32 0x7FFFFFFF).
NAN_BITS = {"bf16": 0x7FFF, "fp16": 0x7FFF, "e4m3": 0x7F, "e5m2": 0x7F}
# NaN produced when widening fp16 / e4m3 / e5m2 to float32 (cvt.f32.f16 on the H200).
NAN_FROM_NARROW = int(CANONICAL_NAN_BITS)


# the narrow formats of fa4num.fp.dtypes by their short names (mant, ebits, max_finite, has_inf, satfinite)
FORMATS = {d.short: d for d in DTYPES.values() if d.width < 32}
# module-level constants, frozen into the numba kernels below
_NAN_BF16 = NAN_BITS["bf16"]
_FP16, _E4M3, _E5M2 = FORMATS["fp16"], FORMATS["e4m3"], FORMATS["e5m2"]


def _spec(f):
    max_bits = int(np.array(f.max_finite, f.dtype).view(f.bits_dtype))
    return f.mant, f.ebits, max_bits, f.has_inf, f.satfinite, NAN_BITS[f.short]


_FP16_SPEC, _E4M3_SPEC, _E5M2_SPEC = _spec(_FP16), _spec(_E4M3), _spec(_E5M2)


@njit(cache=True)
def round_f32_to_format(x, mant, ebits, max_bits, has_inf, satfinite, nan_bits):
    """Bits (as uint32) of float32 x rounded to nearest even in the format with ``mant`` mantissa and ``ebits``
    exponent bits (IEEE-style bias and subnormals), for formats whose smallest subnormal is far above float32's
    (fp16, fp8). Overflow gives inf, or ±max finite (bits ``max_bits``) when ``satfinite`` or the format has no
    inf (then ±inf saturates too); a NaN gives ``nan_bits``. Integer arithmetic on the float32 fields."""
    if x != x:
        return np.uint32(nan_bits)
    b = f32_to_u32(x)
    sign = (b >> np.uint32(31)) << np.uint32(mant + ebits)
    m = b & np.uint32(0x7FFFFFFF)
    bias = (1 << (ebits - 1)) - 1
    if m < np.uint32(0x00800000):  # ±0 or a float32 subnormal: far below half the smallest subnormal
        return sign
    if m >= np.uint32(0x7F800000):  # ±inf
        bits = np.uint32(max_bits + 1)
    else:
        e32 = np.int64(m >> np.uint32(23)) - 127
        sig = np.int64((m & np.uint32(0x007FFFFF)) | np.uint32(0x00800000))  # 24-bit significand
        drop = 23 - mant
        if e32 < 1 - bias:  # subnormal in the target: drop more bits, exponent field 0
            drop += (1 - bias) - e32
            base = np.int64(0)
        else:  # biased exponent field, minus the implicit bit that q will carry
            base = ((e32 + bias) << mant) - (np.int64(1) << mant)
        if drop > 24:
            return sign
        q = sig >> drop
        rem = sig & ((np.int64(1) << drop) - 1)
        half = np.int64(1) << (drop - 1)
        if rem > half or (rem == half and (q & 1) == 1):
            q += 1  # a carry out of the significand moves into the exponent field, as it should
        bits = np.uint32(base + q)
    if bits > np.uint32(max_bits):
        if satfinite or not has_inf:
            bits = np.uint32(max_bits)
        else:
            bits = np.uint32(((1 << ebits) - 1) << mant)
    return sign | bits


@njit(cache=True)
def f32_to_bf16_bits(x):
    """cvt.rn.bf16.f32 on bits: add 0x7FFF plus the lowest kept bit and truncate (round half to even), which also
    rounds into inf on overflow and keeps subnormals."""
    if x != x:
        return np.uint16(_NAN_BF16)
    b = f32_to_u32(x)
    return np.uint16((b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16))



@njit(cache=True)
def f32_to_fp16_bits(x):
    """cvt.rn.f16.f32."""
    return np.uint16(round_f32_to_format(x, *_FP16_SPEC))


@njit(cache=True)
def f32_to_e4m3_bits(x):
    """One half of cvt.rn.satfinite.e4m3x2.f32."""
    return np.uint8(round_f32_to_format(x, *_E4M3_SPEC))


@njit(cache=True)
def f32_to_e5m2_bits(x):
    """One half of cvt.rn.satfinite.e5m2x2.f32."""
    return np.uint8(round_f32_to_format(x, *_E5M2_SPEC))



@njit(parallel=True, cache=True)
def _bf16_loop(x, out):
    for i in prange(x.size):
        out[i] = f32_to_bf16_bits(x[i])


@njit(parallel=True, cache=True)
def _fp16_loop(x, out):
    for i in prange(x.size):
        out[i] = f32_to_fp16_bits(x[i])


@njit(parallel=True, cache=True)
def _e4m3_loop(x, out):
    for i in prange(x.size):
        out[i] = f32_to_e4m3_bits(x[i])


@njit(parallel=True, cache=True)
def _e5m2_loop(x, out):
    for i in prange(x.size):
        out[i] = f32_to_e5m2_bits(x[i])


_LOOPS = {"bf16": (_bf16_loop, np.uint16), "fp16": (_fp16_loop, np.uint16), "e4m3": (_e4m3_loop, np.uint8),
          "e5m2": (_e5m2_loop, np.uint8)}


def _narrow_bits(x, fmt, name="x"):
    arr = as_float32(x, name)
    flat = _flat(arr)
    loop, bits_dtype = _LOOPS[fmt]
    out = np.empty(flat.size, dtype=bits_dtype)
    loop(flat, out)
    return out.reshape(arr.shape)


def _narrow(x, fmt):
    return wrap(_narrow_bits(x, fmt).view(FORMATS[fmt].dtype), tensor_device(x))


def to_bf16(x):
    """float32 -> bfloat16 as ``cvt.rn.bf16.f32``: round to nearest even, overflow to inf, subnormals kept, NaN ->
    NAN_BITS["bf16"].

    Parameters
    ----------
    x : float32 array or torch float32 tensor

    Returns
    -------
    ml_dtypes.bfloat16 array (a torch.bfloat16 tensor for a tensor input)

    Examples
    --------
    >>> import numpy as np
    >>> to_bf16(np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8], np.float32)).astype(np.float32)   # ties to even
    array([1.     , 1.015625], dtype=float32)
    """
    return _narrow(x, "bf16")


def to_fp16(x):
    """float32 -> float16 as ``cvt.rn.f16.f32``: round to nearest even, overflow to inf, subnormals kept,
    NaN -> NAN_BITS["fp16"].

    Parameters
    ----------
    x : float32 array, torch float32 tensor, or Python numbers exact in float32
        Values to convert (any shape); a float64 array or an inexact number raises ValueError (no silent rounding).

    Returns
    -------
    numpy float16 array of x's shape (a torch.float16 tensor on x's device for a tensor input)

    Raises
    ------
    ValueError
        When x is not float32 (see Parameters).

    Examples
    --------
    >>> import numpy as np
    >>> to_fp16(np.array([1 + 2 ** -11, 65520.0, 2 ** -24], np.float32))   # tie to even, overflow, subnormal
    array([1.e+00,    inf, 6.e-08], dtype=float16)
    """
    return _narrow(x, "fp16")


def to_e4m3(x):
    """float32 -> fp8 e4m3 (e4m3fn) as ``cvt.rn.satfinite.e4m3x2.f32``: (one half of it) round to nearest even,
    saturate to ±448 (±inf too, e4m3fn has no inf), NaN -> NaN (bits NAN_BITS["e4m3"]).

    Parameters
    ----------
    x : float32 array, torch float32 tensor, or Python numbers exact in float32
        Values to convert (any shape); a float64 array or an inexact number raises ValueError (no silent rounding).

    Returns
    -------
    ml_dtypes.float8_e4m3fn array of x's shape (a torch.float8_e4m3fn tensor on x's device for a tensor input)

    Raises
    ------
    ValueError
        When x is not float32 (see Parameters).

    Examples
    --------
    >>> import numpy as np
    >>> to_e4m3(np.array([1.0625, 1000.0, -np.inf], np.float32)).astype(np.float32)   # tie to even, saturation
    array([   1.,  448., -448.], dtype=float32)
    """
    return _narrow(x, "e4m3")


def to_e5m2(x):
    """float32 -> fp8 e5m2 as ``cvt.rn.satfinite.e5m2x2.f32``: (one half of it) round to nearest even, saturate
    to ±57344 (±inf too, as .satfinite asks), NaN -> NaN (bits NAN_BITS["e5m2"]).

    Parameters
    ----------
    x : float32 array, torch float32 tensor, or Python numbers exact in float32
        Values to convert (any shape); a float64 array or an inexact number raises ValueError (no silent rounding).

    Returns
    -------
    ml_dtypes.float8_e5m2 array of x's shape (a torch.float8_e5m2 tensor on x's device for a tensor input)

    Raises
    ------
    ValueError
        When x is not float32 (see Parameters).

    Examples
    --------
    >>> import numpy as np
    >>> to_e5m2(np.array([1.125, 1e6, np.inf], np.float32)).astype(np.float32)   # tie to even, saturation
    array([1.0000e+00, 5.7344e+04, 5.7344e+04], dtype=float32)
    """
    return _narrow(x, "e5m2")


def _pack(a, b, fmt):
    device = tensor_device(a, b)
    shape, (fa, fb) = flat_broadcast(as_float32(a, "a"), as_float32(b, "b"))
    hi, lo = _narrow_bits(fa, fmt, "a"), _narrow_bits(fb, fmt, "b")
    wide, shift = (np.uint32, 16) if FORMATS[fmt].width == 16 else (np.uint16, 8)
    d = (hi.astype(wide) << wide(shift)) | lo.astype(wide)
    if device is not None:
        import torch
        signed = np.int32 if wide is np.uint32 else np.int16
        return torch.from_numpy(d.reshape(shape).view(signed)).to(device)
    return d.reshape(shape)


def to_bf16x2(a, b):
    """``cvt.rn.bf16x2.f32 d, a, b``: d[31:16] = bf16(a), d[15:0] = bf16(b).

    Each half is rounded as ``to_bf16`` does; a goes to the upper half, as PTX orders the operands.

    Parameters
    ----------
    a, b : float32 arrays, torch float32 tensors, or Python numbers exact in float32
        Broadcast together.

    Returns
    -------
    uint32 array of the broadcast shape (an int32 tensor on a's device when an input is a tensor)

    Raises
    ------
    ValueError
        When a or b is not float32, or they cannot be broadcast together.

    Examples
    --------
    >>> import numpy as np
    >>> hex(int(to_bf16x2(np.float32(1.0), np.float32(-2.0))))
    '0x3f80c000'
    """
    return _pack(a, b, "bf16")


def to_fp16x2(a, b):
    """``cvt.rn.f16x2.f32 d, a, b``: d[31:16] = fp16(a), d[15:0] = fp16(b).

    Each half is rounded as ``to_fp16`` does; a goes to the upper half, as PTX orders the operands.

    Parameters
    ----------
    a, b : float32 arrays, torch float32 tensors, or Python numbers exact in float32
        Broadcast together.

    Returns
    -------
    uint32 array of the broadcast shape (an int32 tensor on a's device when an input is a tensor)

    Raises
    ------
    ValueError
        When a or b is not float32, or they cannot be broadcast together.

    Examples
    --------
    >>> import numpy as np
    >>> hex(int(to_fp16x2(np.float32(1.0), np.float32(-2.0))))
    '0x3c00c000'
    """
    return _pack(a, b, "fp16")


def to_e4m3x2(a, b):
    """``cvt.rn.satfinite.e4m3x2.f32 d, a, b``: d[15:8] = e4m3(a), d[7:0] = e4m3(b).

    Each half is rounded as ``to_e4m3`` does; a goes to the upper half, as PTX orders the operands.

    Parameters
    ----------
    a, b : float32 arrays, torch float32 tensors, or Python numbers exact in float32
        Broadcast together.

    Returns
    -------
    uint16 array of the broadcast shape (an int16 tensor on a's device when an input is a tensor)

    Raises
    ------
    ValueError
        When a or b is not float32, or they cannot be broadcast together.

    Examples
    --------
    >>> import numpy as np
    >>> [hex(d) for d in to_e4m3x2(np.array([1.0, 448.0], np.float32), np.float32(1e4)).tolist()]   # 1e4 saturates
    ['0x387e', '0x7e7e']
    """
    return _pack(a, b, "e4m3")


def to_e5m2x2(a, b):
    """``cvt.rn.satfinite.e5m2x2.f32 d, a, b``: d[15:8] = e5m2(a), d[7:0] = e5m2(b).

    Each half is rounded as ``to_e5m2`` does; a goes to the upper half, as PTX orders the operands.

    Parameters
    ----------
    a, b : float32 arrays, torch float32 tensors, or Python numbers exact in float32
        Broadcast together.

    Returns
    -------
    uint16 array of the broadcast shape (an int16 tensor on a's device when an input is a tensor)

    Raises
    ------
    ValueError
        When a or b is not float32, or they cannot be broadcast together.

    Examples
    --------
    >>> import numpy as np
    >>> hex(int(to_e5m2x2(np.float32(1.0), np.float32(-np.inf))))   # -inf saturates to -57344
    '0x3cfb'
    """
    return _pack(a, b, "e5m2")


# --- widening ----------------------------------------------------------------------------------------------
def _narrow_input(x, fmt, name="x"):
    """Bits of a narrow-format array (ml_dtypes dtype or the matching torch dtype); ValueError otherwise."""
    f = FORMATS[fmt]
    bits_dtype = f.bits_dtype
    if is_tensor(x):
        import torch
        want = f.torch_dtype
        if x.dtype != want:
            raise ValueError(f"{name} must be a {want} tensor, got {x.dtype}")
        signed = torch.int16 if f.width == 16 else torch.uint8
        return x.detach().cpu().contiguous().view(signed).numpy().view(bits_dtype)
    arr = np.asarray(x)
    if arr.dtype != f.dtype:
        raise ValueError(f"{name} must have dtype {f.dtype.name}, got {arr.dtype}")
    return arr.view(bits_dtype)


def _widen_bits(bits, fmt):
    """float32 values of narrow-format bits (exact), NaN -> NAN_FROM_NARROW except bf16 (shift)."""
    f = FORMATS[fmt]
    if fmt == "bf16":
        return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)
    # exact: every narrow value is a float32. astype of a 0-d view gives a numpy scalar, which cannot be
    # assigned into: work on an array, and give a 0-d input back as a scalar as the bf16 branch does
    out = np.asarray(bits.view(f.dtype).astype(np.float32))
    out[np.isnan(out)] = np.uint32(NAN_FROM_NARROW).view(np.float32)
    return out[()]


def _widen(x, fmt):
    return wrap(_widen_bits(_narrow_input(x, fmt), fmt), tensor_device(x))


def from_bf16(x):
    """bfloat16 -> float32, exact (every bfloat16 value is a float32): the bits shifted left by 16, as
    FA4/CUTLASS widen bf16, so a NaN keeps its sign and payload.

    Parameters
    ----------
    x : ml_dtypes.bfloat16 array or torch.bfloat16 tensor
        Values to widen (any shape); any other dtype raises ValueError (no implicit conversion).

    Returns
    -------
    float32 array of x's shape (a float32 tensor on x's device for a tensor input)

    Raises
    ------
    ValueError
        When x does not have the dtype above.

    Examples
    --------
    >>> import numpy as np, ml_dtypes
    >>> from_bf16(np.array([1.5, -0.0], ml_dtypes.bfloat16))
    array([ 1.5, -0. ], dtype=float32)
    >>> hex(int(from_bf16(np.array([0xFFC1], np.uint16).view(ml_dtypes.bfloat16)).view(np.uint32)[0]))  # payload kept
    '0xffc10000'
    """
    return _widen(x, "bf16")


def from_fp16(x):
    """float16 -> float32, exact (every float16 value is a float32): ``cvt.f32.f16``; a NaN becomes
    NAN_FROM_NARROW (0x7FFFFFFF, as the H200 writes it).

    Parameters
    ----------
    x : numpy float16 array or torch.float16 tensor
        Values to widen (any shape); any other dtype raises ValueError (no implicit conversion).

    Returns
    -------
    float32 array of x's shape (a float32 tensor on x's device for a tensor input)

    Raises
    ------
    ValueError
        When x does not have the dtype above.

    Examples
    --------
    >>> import numpy as np
    >>> from_fp16(np.array([2 ** -24, 65504.0], np.float16))
    array([5.9604645e-08, 6.5504000e+04], dtype=float32)
    >>> hex(int(from_fp16(np.array([np.nan], np.float16)).view(np.uint32)[0]))
    '0x7fffffff'
    """
    return _widen(x, "fp16")


def from_e4m3(x):
    """fp8 e4m3 (e4m3fn) -> float32, exact (every e4m3 value is a float32): the values PTX's only path
    (``cvt.rn.f16x2.e4m3x2`` then ``cvt.f32.f16``) gives; a NaN becomes NAN_FROM_NARROW.

    Parameters
    ----------
    x : ml_dtypes.float8_e4m3fn array or torch.float8_e4m3fn tensor
        Values to widen (any shape); any other dtype raises ValueError (no implicit conversion).

    Returns
    -------
    float32 array of x's shape (a float32 tensor on x's device for a tensor input)

    Raises
    ------
    ValueError
        When x does not have the dtype above.

    Examples
    --------
    >>> import numpy as np, ml_dtypes
    >>> from_e4m3(np.array([448.0, 2 ** -9], ml_dtypes.float8_e4m3fn))
    array([4.480000e+02, 1.953125e-03], dtype=float32)
    """
    return _widen(x, "e4m3")


def from_e5m2(x):
    """fp8 e5m2 -> float32, exact (every fp8 e5m2 value is a float32): the values PTX's only path
    (``cvt.rn.f16x2.e5m2x2`` then ``cvt.f32.f16``) gives; a NaN becomes NAN_FROM_NARROW.

    Parameters
    ----------
    x : ml_dtypes.float8_e5m2 array or torch.float8_e5m2 tensor
        Values to widen (any shape); any other dtype raises ValueError (no implicit conversion).

    Returns
    -------
    float32 array of x's shape (a float32 tensor on x's device for a tensor input)

    Raises
    ------
    ValueError
        When x does not have the dtype above.

    Examples
    --------
    >>> import numpy as np, ml_dtypes
    >>> from_e5m2(np.array([57344.0, -np.inf], ml_dtypes.float8_e5m2))
    array([57344.,   -inf], dtype=float32)
    """
    return _widen(x, "e5m2")


def _unpack(d, fmt, name):
    f = FORMATS[fmt]
    if is_tensor(d):
        device = d.device
        d = d.detach().cpu().numpy()
    else:
        device = None
        d = np.asarray(d)
    wide, shift = (np.uint32, 16) if f.width == 16 else (np.uint16, 8)
    if d.dtype.itemsize != np.dtype(wide).itemsize or d.dtype.kind not in "iu":
        raise ValueError(f"{name} must be a {np.dtype(wide).name} array of packed {fmt}x2 values, got {d.dtype}")
    d = d.view(wide)
    mask = wide((1 << shift) - 1)
    hi = ((d >> wide(shift)) & mask).astype(np.uint16 if f.width == 16 else np.uint8)
    lo = (d & mask).astype(hi.dtype)
    return wrap(_widen_bits(hi, fmt), device), wrap(_widen_bits(lo, fmt), device)


def from_bf16x2(d):
    """Unpack ``cvt.rn.bf16x2.f32 d, a, b`` results: returns (a, b) as float32, a from d[31:16], b from d[15:0].

    Each half is widened as ``from_bf16`` widens it (exact).

    Parameters
    ----------
    d : uint32 array, or a signed integer array / tensor of the same width
        Packed pairs (any shape).

    Returns
    -------
    (a, b) : tuple of float32 arrays of d's shape (tensors on d's device for a tensor input)

    Raises
    ------
    ValueError
        When d is not an integer array of 32 bits.

    Examples
    --------
    >>> import numpy as np
    >>> hi, lo = from_bf16x2(to_bf16x2(np.float32(1.0), np.float32(-3.0)))
    >>> float(hi), float(lo), hi.dtype.name
    (1.0, -3.0, 'float32')
    """
    return _unpack(d, "bf16", "d")


def from_fp16x2(d):
    """Unpack ``cvt.rn.f16x2.f32 d, a, b`` results: returns (a, b) as float32, a from d[31:16], b from d[15:0].

    Each half is widened as ``from_fp16`` widens it (exact).

    Parameters
    ----------
    d : uint32 array, or a signed integer array / tensor of the same width
        Packed pairs (any shape).

    Returns
    -------
    (a, b) : tuple of float32 arrays of d's shape (tensors on d's device for a tensor input)

    Raises
    ------
    ValueError
        When d is not an integer array of 32 bits.

    Examples
    --------
    >>> import numpy as np
    >>> from_fp16x2(np.array([0x3C00C000], np.uint32))
    (array([1.], dtype=float32), array([-2.], dtype=float32))
    """
    return _unpack(d, "fp16", "d")


def from_e4m3x2(d):
    """Unpack ``cvt.rn.satfinite.e4m3x2.f32 d, a, b`` results: (a, b) as float32, a from d[15:8], b from d[7:0].

    Each half is widened as ``from_e4m3`` widens it (exact).

    Parameters
    ----------
    d : uint16 array, or a signed integer array / tensor of the same width
        Packed pairs (any shape).

    Returns
    -------
    (a, b) : tuple of float32 arrays of d's shape (tensors on d's device for a tensor input)

    Raises
    ------
    ValueError
        When d is not an integer array of 16 bits.

    Examples
    --------
    >>> import numpy as np
    >>> from_e4m3x2(to_e4m3x2(np.array([0.5], np.float32), np.float32(1000.0)))   # 1000 saturated to 448
    (array([0.5], dtype=float32), array([448.], dtype=float32))
    """
    return _unpack(d, "e4m3", "d")


def from_e5m2x2(d):
    """Unpack ``cvt.rn.satfinite.e5m2x2.f32 d, a, b`` results: (a, b) as float32, a from d[15:8], b from d[7:0].

    Each half is widened as ``from_e5m2`` widens it (exact).

    Parameters
    ----------
    d : uint16 array, or a signed integer array / tensor of the same width
        Packed pairs (any shape).

    Returns
    -------
    (a, b) : tuple of float32 arrays of d's shape (tensors on d's device for a tensor input)

    Raises
    ------
    ValueError
        When d is not an integer array of 16 bits.

    Examples
    --------
    >>> import numpy as np
    >>> from_e5m2x2(np.array([0x3CC0], np.uint16))
    (array([1.], dtype=float32), array([-2.], dtype=float32))
    """
    return _unpack(d, "e5m2", "d")
