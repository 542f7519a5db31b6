"""Coefficient formats: which real numbers a coefficient may take.

A format is a precision in bits (significand, hidden bit included) and a smallest normal exponent below
which the spacing stops shrinking (subnormals). The exponent range above is checked against the largest
finite value. "fp32", "bf16", "fp16" are the IEEE / bfloat16 formats a kernel loads its constants in, "e4m3" the
fp8 format of the Blackwell fp8 path; an
integer is a Sollya-style precision with unbounded exponent (FA4's recipe gives c0 the 1-bit format).
"""
from __future__ import annotations

from dataclasses import dataclass

import mpmath
import numpy as np


@dataclass(frozen=True)
class Format:
    """A binary floating-point format for coefficients: significand bits, smallest normal exponent, largest value."""

    name: str
    precision: int           # significand bits including the hidden one
    emin: int | None         # exponent of the smallest normal number (None: unbounded)
    max_value: float | None  # largest finite value (None: unbounded)

    def quantum(self, value) -> mpmath.mpf:
        """Spacing of this format's numbers around ``value`` (the unit in the last place)."""
        value = mpmath.mpf(value)
        e = int(mpmath.floor(mpmath.log(abs(value), 2))) if value != 0 else (self.emin if self.emin is not None else 0)
        # floor(log2) can be off by one at exact powers of two in floating point: fix with exact tests
        while value != 0 and abs(value) >= mpmath.mpf(2) ** (e + 1):
            e += 1
        while value != 0 and abs(value) < mpmath.mpf(2) ** e:
            e -= 1
        if self.emin is not None:
            e = max(e, self.emin)
        return mpmath.mpf(2) ** (e - self.precision + 1)

    def round(self, value) -> float:
        """Round to nearest (ties to even) in this format, returned as an exact Python float."""
        value = mpmath.mpf(value)
        if value == 0:
            return 0.0
        q = self.quantum(value)
        n = value / q
        r = mpmath.floor(n)
        if n - r > 0.5 or (n - r == 0.5 and int(r) % 2 == 1):
            r += 1
        return self.check(r * q, "value")  # r*q stays exact when it rounds up into the next binade

    def check(self, value, what: str) -> float:
        """``value`` as a float, after checking that it is exactly a number of this format."""
        value = mpmath.mpf(value)
        if self.max_value is not None and abs(value) > self.max_value:
            raise ValueError(f"{what}: {mpmath.nstr(value, 8)} overflows {self.name} (max {self.max_value})")
        if value != 0 and (value / self.quantum(value)) % 1 != 0:
            raise ValueError(f"{what}: {mpmath.nstr(value, 20)} is not a {self.name} number")
        return float(value)

    def round_array(self, values) -> np.ndarray:
        """Round float64 values to this format (one RN-even rounding through numpy's dtype casts)."""
        values = np.asarray(values, dtype=np.float64)
        if self.name in _NUMPY_DTYPES:
            return values.astype(_NUMPY_DTYPES[self.name]).astype(np.float64)
        if self.name in ("bf16", "e4m3"):
            # imported here: ml_dtypes 0.7 takes 0.7-1.5 s to import, and only a bf16 fit needs it
            import ml_dtypes
            # e4m3fn saturates nothing and has no inf: values beyond 448 become NaN, never a format number
            dtype = ml_dtypes.bfloat16 if self.name == "bf16" else ml_dtypes.float8_e4m3fn
            return values.astype(dtype).astype(np.float64)
        return np.vectorize(self.round, otypes=[np.float64])(values)

    def representable(self, value) -> bool:
        try:
            self.check(value, "value")
        except ValueError:
            return False
        return True


_NUMPY_DTYPES = {"fp32": np.float32, "fp16": np.float16}   # bf16: ml_dtypes, in round_array

FORMATS = {
    "fp32": Format("fp32", 24, -126, float.fromhex("0x1.fffffep127")),
    "bf16": Format("bf16", 8, -126, float.fromhex("0x1.fep127")),
    "fp16": Format("fp16", 11, -14, 65504.0),
    # OCP fp8 E4M3 (Blackwell's fp8 path): 3 stored bits, subnormals below 2^-6, 448 the largest (no inf)
    "e4m3": Format("e4m3", 4, -6, 448.0),
}


def get_format(spec) -> Format:
    """A coefficient format: ``"fp32" | "bf16" | "fp16"`` or an integer precision (Sollya style, unbounded
    exponent).

    Parameters
    ----------
    spec : str, int or Format
        A name of FORMATS (fp32, bf16, fp16, e4m3), a precision of 1-53 bits, or a Format (returned as is).

    Returns
    -------
    Format
        name, precision (significand bits with the hidden one), emin, max_value (None when unbounded).

    Raises
    ------
    ValueError
        For an unknown name, a bool, or a precision outside 1-53.

    Examples
    --------
    >>> get_format("bf16")
    Format(name='bf16', precision=8, emin=-126, max_value=3.3895313892515355e+38)
    >>> get_format(12).name, get_format(12).emin
    ('12-bit', None)
    >>> get_format(64)
    Traceback (most recent call last):
        ...
    ValueError: coeff_format: precision 64 out of range 1-53 bits
    """
    if isinstance(spec, Format):
        return spec
    if isinstance(spec, bool):
        raise ValueError(f"coeff_format: {spec!r} is not a format; use one of {sorted(FORMATS)} or bits 1-53")
    if isinstance(spec, int):
        if not 1 <= spec <= 53:
            raise ValueError(f"coeff_format: precision {spec} out of range 1-53 bits")
        return Format(f"{spec}-bit", spec, None, None)
    if spec in FORMATS:
        return FORMATS[spec]
    raise ValueError(f"coeff_format: unknown format {spec!r}; use one of {sorted(FORMATS)} or bits 1-53")
