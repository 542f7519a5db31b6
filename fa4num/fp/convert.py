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

from dataclasses import dataclass

import ml_dtypes
import numpy as np
from numba import njit, prange

from fa4num.constants import FP8_MAX

from .arrays import flat as _flat, is_tensor, as_float32, flat_broadcast, tensor_device, wrap
from .scalar import CANONICAL_NAN_BITS, f32_to_u32

__all__ = ["to_bf16", "to_fp16", "to_e4m3", "to_e5m2", "to_bf16x2", "to_fp16x2", "to_e4m3x2", "to_e5m2x2",
           "from_bf16", "from_fp16", "from_e4m3", "from_e5m2", "from_bf16x2", "from_fp16x2", "from_e4m3x2",
           "from_e5m2x2", "NAN_BITS", "NAN_FROM_NARROW", "FORMATS"]

# NaN produced by cvt from float32 on the H200: positive, all payload bits set (like the fp32 0x7FFFFFFF).
NAN_BITS = {"bf16": 0x7FFF, "fp16": 0x7FFF, "e4m3": 0x7F, "e5m2": 0x7F}
# NaN produced when widening fp16 / e4m3 / e5m2 to float32 (cvt.f32.f16 on the H200).
NAN_FROM_NARROW = int(CANONICAL_NAN_BITS)


@dataclass(frozen=True)
class Format:
    """A narrow binary format with IEEE-style bias and subnormals."""
    name: str
    dtype: type          # the numpy / ml_dtypes dtype of its arrays
    mant: int            # stored mantissa bits
    ebits: int           # exponent bits
    max_finite: float
    has_inf: bool
    satfinite: bool      # PTX requires .satfinite for this conversion (e4m3x2 / e5m2x2)

    @property
    def width(self) -> int:
        return 1 + self.ebits + self.mant


FORMATS = {
    "bf16": Format("bf16", ml_dtypes.bfloat16, 7, 8, float(ml_dtypes.finfo(ml_dtypes.bfloat16).max), True, False),
    "fp16": Format("fp16", np.float16, 10, 5, 65504.0, True, False),
    # e4m3 (OCP "e4m3fn"): no inf; S.1111.111 is NaN, so the largest finite value is 1.75 * 2^8 = 448
    "e4m3": Format("e4m3", ml_dtypes.float8_e4m3fn, 3, 4, FP8_MAX["float8_e4m3fn"], False, True),
    "e5m2": Format("e5m2", ml_dtypes.float8_e5m2, 2, 5, FP8_MAX["float8_e5m2"], True, True),
}
# module-level constants, frozen into the numba kernels below
_NAN_BF16 = NAN_BITS["bf16"]
_FP16, _E4M3, _E5M2 = FORMATS["fp16"], FORMATS["e4m3"], FORMATS["e5m2"]


def _spec(f):
    max_bits = int(np.array(f.max_finite, f.dtype).view(np.uint16 if f.width == 16 else np.uint8))
    return f.mant, f.ebits, max_bits, f.has_inf, f.satfinite, NAN_BITS[f.name]


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
    """float32 -> float16 as ``cvt.rn.f16.f32``: round to nearest even, overflow to inf, subnormals kept."""
    return _narrow(x, "fp16")


def to_e4m3(x):
    """float32 -> fp8 e4m3 (e4m3fn) as one half of ``cvt.rn.satfinite.e4m3x2.f32``: round to nearest even,
    saturate to ±448 (±inf too), NaN -> NaN. Returns an ml_dtypes.float8_e4m3fn array."""
    return _narrow(x, "e4m3")


def to_e5m2(x):
    """float32 -> fp8 e5m2 as one half of ``cvt.rn.satfinite.e5m2x2.f32``: round to nearest even, saturate to
    ±57344 (±inf too), NaN -> NaN. Returns an ml_dtypes.float8_e5m2 array."""
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
    """``cvt.rn.bf16x2.f32 d, a, b``: d[31:16] = bf16(a), d[15:0] = bf16(b). Returns uint32 (int32 tensor)."""
    return _pack(a, b, "bf16")


def to_fp16x2(a, b):
    """``cvt.rn.f16x2.f32 d, a, b``: d[31:16] = f16(a), d[15:0] = f16(b). Returns uint32 (int32 tensor)."""
    return _pack(a, b, "fp16")


def to_e4m3x2(a, b):
    """``cvt.rn.satfinite.e4m3x2.f32 d, a, b``: d[15:8] = e4m3(a), d[7:0] = e4m3(b). Returns uint16."""
    return _pack(a, b, "e4m3")


def to_e5m2x2(a, b):
    """``cvt.rn.satfinite.e5m2x2.f32 d, a, b``: d[15:8] = e5m2(a), d[7:0] = e5m2(b). Returns uint16."""
    return _pack(a, b, "e5m2")


# --- widening ----------------------------------------------------------------------------------------------
def _narrow_input(x, fmt, name="x"):
    """Bits of a narrow-format array (ml_dtypes dtype or the matching torch dtype); ValueError otherwise."""
    f = FORMATS[fmt]
    bits_dtype = np.uint16 if f.width == 16 else np.uint8
    if is_tensor(x):
        import torch
        want = {"bf16": torch.bfloat16, "fp16": torch.float16, "e4m3": torch.float8_e4m3fn,
                "e5m2": torch.float8_e5m2}[fmt]
        if x.dtype != want:
            raise ValueError(f"{name} must be a {want} tensor, got {x.dtype}")
        signed = torch.int16 if f.width == 16 else torch.uint8
        return x.detach().cpu().contiguous().view(signed).numpy().view(bits_dtype)
    arr = np.asarray(x)
    if arr.dtype != np.dtype(f.dtype):
        raise ValueError(f"{name} must have dtype {np.dtype(f.dtype).name}, got {arr.dtype}")
    return arr.view(bits_dtype)


def _widen_bits(bits, fmt):
    """float32 values of narrow-format bits (exact), NaN -> NAN_FROM_NARROW except bf16 (shift)."""
    f = FORMATS[fmt]
    if fmt == "bf16":
        return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)
    out = bits.view(f.dtype).astype(np.float32)  # exact: every narrow value is a float32
    out[np.isnan(out)] = np.uint32(NAN_FROM_NARROW).view(np.float32)
    return out


def _widen(x, fmt):
    return wrap(_widen_bits(_narrow_input(x, fmt), fmt), tensor_device(x))


def from_bf16(x):
    """bfloat16 -> float32, exact: the bits shifted left by 16 (as FA4/CUTLASS widen bf16; NaN payload kept)."""
    return _widen(x, "bf16")


def from_fp16(x):
    """float16 -> float32 (``cvt.f32.f16``), exact; NaN -> NAN_FROM_NARROW."""
    return _widen(x, "fp16")


def from_e4m3(x):
    """fp8 e4m3 -> float32, exact; NaN -> NAN_FROM_NARROW."""
    return _widen(x, "e4m3")


def from_e5m2(x):
    """fp8 e5m2 -> float32, exact; NaN -> NAN_FROM_NARROW."""
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
    """Unpack ``cvt.rn.bf16x2.f32 d, a, b`` results: returns (a, b) as float32, a from d[31:16]."""
    return _unpack(d, "bf16", "d")


def from_fp16x2(d):
    """Unpack f16x2: returns (a, b) as float32, a from d[31:16]."""
    return _unpack(d, "fp16", "d")


def from_e4m3x2(d):
    """Unpack e4m3x2: returns (a, b) as float32, a from d[15:8]."""
    return _unpack(d, "e4m3", "d")


def from_e5m2x2(d):
    """Unpack e5m2x2: returns (a, b) as float32, a from d[15:8]."""
    return _unpack(d, "e5m2", "d")
