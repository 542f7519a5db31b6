"""Bit views and ulp distance on the monotone integer line of a floating-point format.

Ordering the bit patterns of a format as integers (non-negative values as they are, negative values as minus
their magnitude bits) gives a line on which consecutive finite values are 1 apart, +0 and -0 are both 0, and
±inf sit one step beyond ±max finite. ulp_distance(a, b) is the difference of the two positions: the number of
representable values one must step over to go from b to a.

NaN: two NaNs are 0 apart (whatever their payloads); a NaN against a non-NaN is NAN_DISTANCE (2^32, larger than
any distance between two non-NaN float32), with the sign of ``a``'s side when ``signed=True``: +NAN_DISTANCE if a
is the NaN, -NAN_DISTANCE if b is.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from .arrays import is_tensor, flat_broadcast

__all__ = ["ulp_distance", "as_bits", "from_bits", "NAN_DISTANCE"]

NAN_DISTANCE = 1 << 32

_BITS = {np.dtype(np.float32): np.uint32, np.dtype(ml_dtypes.bfloat16): np.uint16,
         np.dtype(np.float16): np.uint16, np.dtype(ml_dtypes.float8_e4m3fn): np.uint8,
         np.dtype(ml_dtypes.float8_e5m2): np.uint8}
_BY_NAME = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16,
            "float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2}
_ULP_DTYPES = ("float32", "bfloat16", "float16")


def _as_numpy(x):
    if is_tensor(x):
        import torch
        x = x.detach().cpu()
        if x.dtype == torch.bfloat16:
            return x.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        return x.numpy()
    return np.asarray(x)


def as_bits(x) -> np.ndarray:
    """The bit patterns of a float32 / bfloat16 / float16 / fp8 array, as unsigned integers of the same width.

    A view, not a copy, for numpy inputs; a torch tensor is copied to the CPU first.

    Parameters
    ----------
    x : array or torch tensor of dtype float32, bfloat16, float16, float8_e4m3fn or float8_e5m2

    Returns
    -------
    uint32 / uint16 / uint8 array of x's shape

    Raises
    ------
    ValueError
        When x has another dtype (float64 included).

    Examples
    --------
    >>> import numpy as np, ml_dtypes
    >>> [hex(b) for b in as_bits(np.array([1.0, -0.0], np.float32)).tolist()]
    ['0x3f800000', '0x80000000']
    >>> as_bits(np.array([1.0], ml_dtypes.bfloat16)), as_bits(np.array([448.0], ml_dtypes.float8_e4m3fn))
    (array([16256], dtype=uint16), array([126], dtype=uint8))
    """
    arr = _as_numpy(x)
    if arr.dtype not in _BITS:
        raise ValueError(f"x must have dtype one of {sorted(_BY_NAME)}, got {arr.dtype}")
    return arr.view(_BITS[arr.dtype])


def from_bits(bits, dtype="float32") -> np.ndarray:
    """The values with the given bit patterns: the inverse of as_bits.

    Parameters
    ----------
    bits : integer array (unsigned or signed) with the format's width (4 bytes for float32, 2 for bfloat16 /
        float16, 1 for fp8)
    dtype : {"float32", "bfloat16", "float16", "float8_e4m3fn", "float8_e5m2"}
        The format to read the bits as.

    Returns
    -------
    array of bits' shape with that dtype (float32, ml_dtypes.bfloat16, ...), a view of a contiguous copy

    Raises
    ------
    ValueError
        When dtype is not one of the above, or bits is not an integer array of the format's width.

    Examples
    --------
    >>> import numpy as np
    >>> from_bits(np.array([0x3F800000, 0x7F800000, 1], np.uint32))   # 1, inf, the smallest subnormal
    array([1.e+00,    inf, 1.e-45], dtype=float32)
    >>> b = from_bits(np.array([0x3FC0], np.uint16), "bfloat16")
    >>> b.astype(np.float32).tolist(), b.dtype.name
    ([1.5], 'bfloat16')
    """
    if dtype not in _BY_NAME:
        raise ValueError(f"dtype must be one of {sorted(_BY_NAME)}, got {dtype!r}")
    target = np.dtype(_BY_NAME[dtype])
    arr = np.asarray(bits)
    if arr.dtype.kind not in "iu" or arr.dtype.itemsize != target.itemsize:
        raise ValueError(f"bits must be an integer array of {target.itemsize} bytes per element for {dtype}, "
                         f"got {arr.dtype}")
    return np.ascontiguousarray(arr).view(target)


def _line(bits: np.ndarray, width: int) -> np.ndarray:
    """Position of each bit pattern on the monotone integer line."""
    b = bits.astype(np.int64)
    sign = np.int64(1) << (width - 1)
    magnitude = b & (sign - 1)
    return np.where(b & sign, -magnitude, magnitude)


def ulp_distance(a, b, *, signed=False) -> np.ndarray:
    """Distance between a and b in units in the last place of their format: float32, bfloat16 or float16 arrays
    (both of the same dtype; broadcasting applies). Returns int64: ``|pos(a) - pos(b)|``, or pos(a) - pos(b) with
    ``signed=True``. See the module docstring for ±0, ±inf and NaN.

    Parameters
    ----------
    a, b : float32, bfloat16 or float16 arrays (or torch tensors) of one dtype
    signed : bool
        Return pos(a) - pos(b) instead of its absolute value.

    Returns
    -------
    int64 array of the broadcast shape

    Examples
    --------
    >>> import numpy as np
    >>> one = np.float32(1.0)
    >>> int(ulp_distance(one, np.nextafter(one, np.float32(2)))), int(ulp_distance(np.float32(0.0), np.float32(-0.0)))
    (1, 0)
    >>> int(ulp_distance(np.float32(-2 ** -149), np.float32(2 ** -149)))   # across zero: -min, 0, +min
    2
    """
    if not isinstance(signed, (bool, np.bool_)):
        raise ValueError(f"signed must be True or False, got {signed!r}")
    x, y = _as_numpy(a), _as_numpy(b)
    for name, arr in (("a", x), ("b", y)):
        if arr.dtype.name not in _ULP_DTYPES:
            raise ValueError(f"{name} must have dtype one of {list(_ULP_DTYPES)}, got {arr.dtype}")
    if x.dtype != y.dtype:
        raise ValueError(f"a and b must have the same dtype, got {x.dtype} and {y.dtype}")
    shape, (fx, fy) = flat_broadcast(x, y)
    width = 8 * x.dtype.itemsize
    bx, by = fx.view(_BITS[x.dtype]), fy.view(_BITS[x.dtype])
    d = _line(bx, width) - _line(by, width)
    nx = np.isnan(fx.astype(np.float32))
    ny = np.isnan(fy.astype(np.float32))
    d = np.where(nx & ny, 0, np.where(nx, NAN_DISTANCE, np.where(ny, -NAN_DISTANCE, d)))
    if not signed:
        d = np.abs(d)
    return d.astype(np.int64).reshape(shape)
