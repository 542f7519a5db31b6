"""The one table of the floating-point formats fa4num works in: names, array types and the numbers every layer
needs (largest finite value, smallest normal exponent, unit roundoff, mantissa bits).

Each format has one canonical name, the one FA4 and torch use ("bfloat16", "float16", "float8_e4m3fn",
"float8_e5m2", "float32"), a short name (fa4num.fp.convert's "bf16", "fp16", "e4m3", "e5m2", "f32"), its PTX
type name, and its numpy / ml_dtypes dtype. :func:`dtype_info` accepts any of these spellings, a numpy or
ml_dtypes dtype, a torch dtype or its string ("torch.bfloat16"). The numbers are derived from the format
(mantissa and exponent bits) and checked against ml_dtypes.finfo by tests/fp/test_dtypes.py.
"""
from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

__all__ = ["DType", "DTYPES", "dtype_info"]


@dataclass(frozen=True)
class DType:
    """One binary floating-point format (IEEE-style bias, subnormals).

    ``name`` canonical (torch / FA4), ``short`` fa4num.fp.convert's, ``ptx`` the PTX type (``cvt.rn.<ptx>.f32``),
    ``dtype`` the numpy / ml_dtypes dtype of its arrays, ``bits_dtype`` the unsigned integer of its width,
    ``mant`` stored mantissa bits, ``ebits`` exponent bits, ``has_inf`` (e4m3fn has none), ``satfinite``
    whether PTX's conversion from f32 requires ``.satfinite`` (the fp8 pairs).
    """
    name: str
    short: str
    ptx: str
    dtype: np.dtype
    bits_dtype: np.dtype
    mant: int
    ebits: int
    has_inf: bool
    satfinite: bool

    @property
    def width(self) -> int:
        """Bits per element."""
        return 1 + self.ebits + self.mant

    @property
    def bias(self) -> int:
        return (1 << (self.ebits - 1)) - 1

    @property
    def min_normal_exp(self) -> int:
        """Exponent of the smallest normal number, 1 - bias (-126, -14, -6, -14, -126)."""
        return 1 - self.bias

    @property
    def max_exp(self) -> int:
        """Exponent of the largest finite number (e4m3fn: its top binade holds finite numbers, less its NaN)."""
        return (1 << self.ebits) - 1 - self.bias - (1 if self.has_inf else 0)

    @property
    def max_finite(self) -> float:
        """The largest finite value (bf16 3.39e38, fp16 65504, e4m3fn 448, e5m2 57344)."""
        # e4m3fn: S.1111.111 is NaN, so its top binade ends one step below 2 (1.75 * 2^8 = 448)
        top = 2.0 - 2.0 ** -self.mant * (1 if self.has_inf else 2)
        return top * 2.0 ** self.max_exp

    @property
    def unit_roundoff(self) -> float:
        """u = 2^-(mant + 1): round to nearest's relative error bound for normal results."""
        return 2.0 ** -(self.mant + 1)

    @property
    def subnormal_half_spacing(self) -> float:
        """Half the spacing of the subnormals, 2^(min_normal_exp - mant - 1): the absolute error bound of round
        to nearest below the normal range."""
        return 2.0 ** (self.min_normal_exp - self.mant - 1)

    @property
    def torch_dtype(self):
        """The torch dtype (torch imported on use)."""
        import torch
        return getattr(torch, self.name)


def _d(name, short, ptx, dtype, bits, mant, ebits, has_inf=True, satfinite=False):
    return DType(name, short, ptx, np.dtype(dtype), np.dtype(bits), mant, ebits, has_inf, satfinite)


DTYPES = {d.name: d for d in (
    _d("bfloat16", "bf16", "bf16", ml_dtypes.bfloat16, np.uint16, 7, 8),
    _d("float16", "fp16", "f16", np.float16, np.uint16, 10, 5),
    _d("float8_e4m3fn", "e4m3", "e4m3", ml_dtypes.float8_e4m3fn, np.uint8, 3, 4, has_inf=False, satfinite=True),
    _d("float8_e5m2", "e5m2", "e5m2", ml_dtypes.float8_e5m2, np.uint8, 2, 5, satfinite=True),
    _d("float32", "f32", "f32", np.float32, np.uint32, 23, 8),
)}
_ALIASES = {**{d.short: d for d in DTYPES.values()}, **{f"torch.{d.name}": d for d in DTYPES.values()},
            "fp32": DTYPES["float32"], "half": DTYPES["float16"], "e4m3fn": DTYPES["float8_e4m3fn"]}


def dtype_info(dtype) -> DType:
    """The table entry of a format, from any of its spellings.

    Parameters
    ----------
    dtype : str, numpy / ml_dtypes dtype or torch dtype
        "bfloat16" / "bf16" / "torch.bfloat16", np.float16, ml_dtypes.float8_e4m3fn, torch.float8_e5m2, ...

    Returns
    -------
    DType

    Raises
    ------
    ValueError
        For a format not in :data:`DTYPES`.

    Examples
    --------
    >>> d = dtype_info("bf16")
    >>> d.name, d.max_finite == float(ml_dtypes.finfo(ml_dtypes.bfloat16).max), d.unit_roundoff == 2.0 ** -8
    ('bfloat16', True, True)
    >>> dtype_info(np.float16).max_finite, dtype_info("float8_e4m3fn").max_finite, dtype_info("e5m2").min_normal_exp
    (65504.0, 448.0, -14)
    >>> dtype_info("int8")
    Traceback (most recent call last):
        ...
    ValueError: dtype must be one of ['bfloat16', 'float16', 'float8_e4m3fn', 'float8_e5m2', 'float32'] (or an alias), got 'int8'
    """
    if isinstance(dtype, str):
        key = dtype
    elif type(dtype).__module__ == "torch":
        key = str(dtype)
    else:
        try:
            key = np.dtype(dtype).name
        except TypeError:
            key = None
    found = DTYPES.get(key) or _ALIASES.get(key)
    if found is None:
        raise ValueError(f"dtype must be one of {list(DTYPES)} (or an alias), got {dtype!r}")
    return found
