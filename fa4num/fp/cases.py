"""Deterministic random and adversarial float32 operands for testing arithmetic against an oracle or a GPU.

``arith_cases(op, n, seed=...)`` returns the operands of n cases for op in add/sub/mul/fma, a pure function of
(op, n, seed) so that a test, a one-off oracle run and a GPU capture all see the same inputs without storing
them. The cases are a fixed mix of families (CASE_FAMILIES), each aimed at a place where rounding goes wrong:

  bits          uniformly random bit patterns (NaN, inf, zeros and subnormals included)
  values        random signs and significands, exponents in [-30, 30] (ordinary rounding)
  ties          short significands whose exact result has one bit too many: exact midpoints, in every mode
  cancel        operands of nearly opposite value (a + b, a*b + c near -a*b): massive cancellation, exact zeros
  subnormal     exact results near or below 2^-126 (gradual underflow, flush boundary)
  overflow      exact results near or above the largest float32
  specials      every pairing of ±0, ±inf, NaN, ±min subnormal, ±min normal, ±max, ±1
"""
from __future__ import annotations

import numpy as np

from fa4num.golden import SPECIAL_BITS

__all__ = ["arith_cases", "CASE_FAMILIES", "SPECIAL_VALUES"]

CASE_FAMILIES = ("bits", "values", "ties", "cancel", "subnormal", "overflow", "specials")
_ARITY = {"add": 2, "sub": 2, "mul": 2, "fma": 3}

# the specials family: ±0, ±inf, NaN, ±1, ±min subnormal, ±min normal, ±max, ±max subnormal, -NaN, a signalling
# NaN -- picked, in this order, from the one list of fp32 special operands (fa4num.golden.SPECIAL_BITS)
SPECIAL_VALUES = np.array([SPECIAL_BITS[i] for i in (0, 1, 28, 29, 30, 12, 13, 2, 3, 6, 7, 24, 25, 4, 5, 31, 32)],
                          np.uint32).view(np.float32)


def _from_parts(rng, n, sig_bits, exp_lo, exp_hi):
    """Random signed values with ``sig_bits`` significant bits and exponents in [exp_lo, exp_hi] (float64,
    exact in float32 when the exponent range stays normal)."""
    sig = rng.integers(1 << (sig_bits - 1), 1 << sig_bits, n).astype(np.float64)
    exp = rng.integers(exp_lo, exp_hi + 1, n)
    sign = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    return sign * np.ldexp(sig, exp - (sig_bits - 1))


def _f32(x):
    """float64 -> float32 by round-to-nearest; the families use it only to build operands."""
    return np.asarray(x, np.float64).astype(np.float32)


def _family(name, op, rng, n):
    k = _ARITY[op]
    if name == "bits":
        return [rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32) for _ in range(k)]
    if name == "values":
        return [_f32(_from_parts(rng, n, 24, -30, 30)) for _ in range(k)]
    if name == "ties":
        if op == "mul":  # 12-bit x 13-bit significands: 24- or 25-bit products, a quarter of them exact midpoints
            return [_f32(_from_parts(rng, n, 12, -20, 20)), _f32(_from_parts(rng, n, 13, -20, 20))]
        if op == "fma":
            a, b = _f32(_from_parts(rng, n, 12, -10, 10)), _f32(_from_parts(rng, n, 12, -10, 10))
            shift = rng.integers(-26, 2, n)
            c = _f32(np.ldexp(_from_parts(rng, n, 12, 0, 0), shift) * np.abs(a.astype(np.float64) * b))
            return [a, b, c]
        # add/sub: b is an odd multiple of half an ulp of a (and small multiples): exact midpoints
        a = _f32(_from_parts(rng, n, 24, -20, 20))
        ulp = np.spacing(np.abs(a)).astype(np.float64)
        b = _f32(np.ldexp(rng.integers(-7, 8, n) * 2 + 1, -1) * ulp * np.ldexp(1.0, rng.integers(-3, 1, n)))
        return [a, b if op == "add" else -b]
    if name == "cancel":
        if op == "fma":
            a, b = _f32(_from_parts(rng, n, 24, -20, 20)), _f32(_from_parts(rng, n, 24, -20, 20))
            p = a.astype(np.float64) * b.astype(np.float64)
            c = -_f32(p)  # c = -RN(a*b): the exact sum is the rounding error of the product (or 0)
            step = rng.integers(-3, 4, n).astype(np.int32)
            c = (c.view(np.int32) + step).view(np.float32)  # and neighbours of it
            return [a, b, c]
        a = _f32(_from_parts(rng, n, 24, -20, 20))
        b = (-a).view(np.int32) + rng.integers(-4, 5, n).astype(np.int32)
        b = b.view(np.float32)
        return [a, b] if op == "add" else [a, -b]
    if name == "subnormal":
        if op == "mul":  # exponent sum in [-155, -120]
            e = rng.integers(-155, -119, n)
            ea = rng.integers(-100, -20, n)
            return [_f32(_from_parts(rng, n, 24, 0, 0) * np.ldexp(1.0, ea)),
                    _f32(_from_parts(rng, n, 24, 0, 0) * np.ldexp(1.0, e - ea))]
        if op == "fma":
            e = rng.integers(-155, -119, n)
            ea = rng.integers(-100, -20, n)
            a = _f32(_from_parts(rng, n, 24, 0, 0) * np.ldexp(1.0, ea))
            b = _f32(_from_parts(rng, n, 24, 0, 0) * np.ldexp(1.0, e - ea))
            c = _f32(_from_parts(rng, n, 24, -150, -120))
            return [a, b, c]
        # add/sub: operands around 2^-126 with opposite signs, or subnormal operands
        a = _f32(_from_parts(rng, n, 24, -140, -120))
        b = _f32(-a * (1 + np.ldexp(rng.integers(-64, 65, n), -rng.integers(1, 24, n))))
        return [a, b] if op == "add" else [a, -b]
    if name == "overflow":
        if op == "mul":
            e = rng.integers(125, 130, n)
            ea = rng.integers(20, 100, n)
            return [_f32(_from_parts(rng, n, 24, 0, 0) * np.ldexp(1.0, ea)),
                    _f32(_from_parts(rng, n, 24, 0, 0) * np.ldexp(1.0, e - ea))]
        if op == "fma":
            e = rng.integers(125, 130, n)
            ea = rng.integers(20, 100, n)
            return [_f32(_from_parts(rng, n, 24, 0, 0) * np.ldexp(1.0, ea)),
                    _f32(_from_parts(rng, n, 24, 0, 0) * np.ldexp(1.0, e - ea)),
                    _f32(_from_parts(rng, n, 24, 120, 127))]
        a = np.abs(_from_parts(rng, n, 24, 126, 127))
        b = np.abs(_from_parts(rng, n, 24, 100, 127))
        s = np.where(rng.random(n) < 0.5, -1.0, 1.0)
        return [_f32(s * a), _f32(s * b if op == "add" else -s * b)]
    if name == "specials":
        idx = rng.integers(0, SPECIAL_VALUES.size, (k, n))
        return [SPECIAL_VALUES[i] for i in idx]
    raise ValueError(f"family must be one of {CASE_FAMILIES}, got {name!r}")


def arith_cases(op, n, *, seed=0):
    """Operands of n deterministic test cases for op, the families of CASE_FAMILIES mixed in equal shares.

    The first families get the remainder of n / 7. A pure function of (op, n, seed), so a test, an oracle run and a
    GPU capture all see the same inputs without storing them.

    Parameters
    ----------
    op : {"add", "sub", "mul", "fma"}
    n : int
        Number of cases (>= 0).
    seed : int
        Seed of numpy's default_rng (combined with op).

    Returns
    -------
    tuple of float32 arrays of shape (n,)
        (a, b), or (a, b, c) for fma.

    Raises
    ------
    ValueError
        For an unknown op or a negative / non-int n.

    Examples
    --------
    >>> a, b, c = arith_cases("fma", 14, seed=1)
    >>> a.dtype, a.shape, len(arith_cases("add", 3))
    (dtype('float32'), (14,), 2)
    """
    if op not in _ARITY:
        raise ValueError(f"op must be one of {sorted(_ARITY)}, got {op!r}")
    if not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    rng = np.random.default_rng([seed, sorted(_ARITY).index(op)])
    sizes = [n // len(CASE_FAMILIES) + (i < n % len(CASE_FAMILIES)) for i in range(len(CASE_FAMILIES))]
    parts = [_family(f, op, rng, m) for f, m in zip(CASE_FAMILIES, sizes)]
    return tuple(np.ascontiguousarray(np.concatenate([p[j] for p in parts]), dtype=np.float32)
                 for j in range(_ARITY[op]))
