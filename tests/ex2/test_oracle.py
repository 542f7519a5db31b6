"""fa4_emulated against an independent oracle: the same instruction sequence evaluated step by step with gmpy2
(MPFR in an IEEE binary32 context), which rounds each operation correctly by construction.

Only the PTX semantics are taken from fa4num.fp.scalar's policy flags (how .ftz decides tininess); every rounding
is MPFR's."""
from __future__ import annotations

import gmpy2
import numpy as np
import pytest

from fa4num.ex2 import POLY_EX2, fa4_emulated, poly_coeffs
from fa4num.fp import scalar

MIN_NORMAL = gmpy2.mpfr(2) ** -126
CANONICAL_NAN = 0x7FFFFFFF
_ROUND = {"rn": gmpy2.RoundToNearest, "rm": gmpy2.RoundDown}


def _ctx(rounding, *, unbounded=False):
    if unbounded:  # 24-bit significand, exponent range wide enough that nothing under- or overflows
        return gmpy2.context(precision=24, emin=-10000, emax=10000, subnormalize=False, round=_ROUND[rounding])
    ctx = gmpy2.ieee(32)
    ctx.round = _ROUND[rounding]
    return ctx


CTX = {r: _ctx(r) for r in _ROUND}
CTX_UNBOUNDED = {r: _ctx(r, unbounded=True) for r in _ROUND}
EXACT = gmpy2.context(precision=2000, emin=-100000, emax=100000)  # exact for a*b+c on fp32 operands
OPS = {"add": lambda c, a, b: c.add(a, b), "sub": lambda c, a, b: c.sub(a, b),
       "fma": lambda c, a, b, d: c.fma(a, b, d)}


def to_mpfr(x: np.float32):
    return gmpy2.mpfr(float(x), 24)


def to_f32(v) -> np.float32:
    if gmpy2.is_nan(v):
        return np.array(CANONICAL_NAN, dtype=np.uint32).view(np.float32)[()]
    return np.float32(float(v))


def signed_zero(negative: bool):
    return gmpy2.mpfr("-0") if negative else gmpy2.mpfr(0)


def flush(v):
    if gmpy2.is_finite(v) and v != 0 and abs(v) < MIN_NORMAL:
        return signed_zero(v < 0)
    return v


def ieee_op(name, args, rounding, ftz):
    """One PTX arithmetic instruction: args combined exactly, rounded once to binary32, .ftz as
    fa4num.fp.scalar decides (tininess after or before rounding)."""
    op = OPS[name]
    if ftz:
        args = [flush(a) for a in args]
    if any(gmpy2.is_nan(a) for a in args):
        return gmpy2.nan()
    r = op(CTX[rounding], *args)
    if not ftz or not gmpy2.is_finite(r) or abs(r) >= 2 * MIN_NORMAL:
        return r
    exact = op(EXACT, *args)
    if exact == 0:
        return r
    if scalar.FTZ_TININESS_AFTER_ROUNDING:
        tiny = abs(op(CTX_UNBOUNDED[rounding], *args)) < MIN_NORMAL
    else:
        tiny = abs(exact) < MIN_NORMAL
    return signed_zero(exact < 0) if tiny else op(CTX_UNBOUNDED[rounding], *args)


def ptx_max(a, b, ftz):
    """max{.ftz}.f32: a NaN operand is ignored."""
    if ftz:
        a, b = flush(a), flush(b)
    if gmpy2.is_nan(a):
        return b
    if gmpy2.is_nan(b):
        return a
    return a if a > b else b  # the clamp -127 is never equal to a zero, so the signed-zero rule is not needed


# .ftz on (max, add.rm, sub.rn, fma.rn), read off the PTX of each form (docs/notes/fa4-numerics.md section A),
# written out here rather than taken from fa4num.ex2.VARIANTS so that the test checks that table too.
FTZ = {"packed": (False, False, False, False),   # ex2_emulation_2: cute.arch packed f32x2 ops, ftz=None
       "scalar": (False, True, False, False),    # ex2_emulation: only the inline-PTX add.rm.ftz.f32
       "asm": (True, True, True, True)}          # e2e_asm2: every instruction .ftz


def oracle(x: np.float32, coeffs, variant) -> int:
    """Bits of FA4's exp2 emulation of x: utils.py ex2_emulation(_2) / e2e_asm2, one MPFR-rounded step each."""
    ftz_max, ftz_add, ftz_sub, ftz_fma = FTZ[variant]
    shifter = gmpy2.mpfr(12582912)
    a = ptx_max(to_mpfr(x), gmpy2.mpfr(-127), ftz_max)
    r = ieee_op("add", [a, shifter], "rm", ftz_add)
    t = ieee_op("sub", [r, shifter], "rn", ftz_sub)
    f = ieee_op("sub", [a, t], "rn", ftz_sub)
    p = to_mpfr(np.float32(coeffs[-1]))
    for c in reversed(coeffs[:-1]):
        p = ieee_op("fma", [p, f, to_mpfr(np.float32(c))], "rn", ftz_fma)
    bits_r = int(np.array(to_f32(r)).view(np.uint32))
    bits_p = int(np.array(to_f32(p)).view(np.uint32))
    return ((bits_r << 23) + bits_p) & 0xFFFFFFFF


def special_inputs() -> np.ndarray:
    f = np.float32
    base = [0.0, -0.0, np.inf, -np.inf, 1.0, -1.0, 0.5, -0.5, 127.0, 128.0, 129.0, 255.0, 256.0, -126.0, -127.0,
            -128.0, -149.0, -150.0, 2.0 ** 22, 2.0 ** 23, 2.0 ** 24, -(2.0 ** 22), 1e30, -1e30, 3.4e38, -3.4e38,
            2.0 ** -126, -(2.0 ** -126), 2.0 ** -25, -(2.0 ** -25), 1e-8, -1e-8, -126.5, -126.999, 127.5, 127.999]
    vals = [f(v) for v in base] + [f(k) for k in range(-131, 132)]
    around = []
    for v in vals:
        if np.isfinite(v):
            around += [np.nextafter(v, f(np.inf)), np.nextafter(v, f(-np.inf))]
    bits = [0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00400000, 0x80400000,  # subnormals
            0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF, 0xFFFFFFFF]   # NaNs, quiet and signalling
    return np.concatenate([np.array(vals + around, dtype=np.float32),
                           np.array(bits, dtype=np.uint32).view(np.float32)])


def random_inputs(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    k = n // 4
    parts = [rng.integers(0, 2 ** 32, k, dtype=np.uint64).astype(np.uint32).view(np.float32),   # any bits
             rng.uniform(-130.0, 130.0, k).astype(np.float32),                                  # working range
             rng.uniform(-20.0, 0.0, k).astype(np.float32),                                     # softmax args
             (rng.choice([-1.0, 1.0], n - 3 * k) * 2.0 ** rng.uniform(-40, 0, n - 3 * k)).astype(np.float32)]
    return np.concatenate(parts)


def _check(x: np.ndarray, coeffs, variant, degree):
    want = np.array([oracle(v, coeffs, variant) for v in x], dtype=np.uint32)
    for exact_only in (False, True):
        got = fa4_emulated(x, degree, coeffs=coeffs, variant=variant, exact_only=exact_only).view(np.uint32)
        bad = np.flatnonzero(got != want)
        assert bad.size == 0, (f"{variant} deg {degree} exact_only={exact_only}: {bad.size} mismatches, e.g. "
                               + ", ".join(f"x={x[i]!r} ({x.view(np.uint32)[i]:#010x}): got {got[i]:#010x} want "
                                           f"{want[i]:#010x}" for i in bad[:5]))


@pytest.mark.parametrize("variant", sorted(FTZ))
def test_cubic_matches_gmpy2_oracle(variant):
    x = np.concatenate([special_inputs(), random_inputs(100_000, seed=3)])
    _check(x, tuple(float(c) for c in poly_coeffs(3)), variant, 3)


@pytest.mark.parametrize("variant", sorted(FTZ))
@pytest.mark.parametrize("degree", [d for d in sorted(POLY_EX2) if d != 3])
def test_other_degrees_match_gmpy2_oracle(variant, degree):
    x = np.concatenate([special_inputs(), random_inputs(6_000, seed=degree)])
    _check(x, POLY_EX2[degree], variant, degree)


@pytest.mark.parametrize("variant", sorted(FTZ))
def test_custom_coefficients_near_underflow_match_oracle(variant):
    """Coefficients that push Horner values into the subnormal range, where .ftz and the exact path matter."""
    f32 = np.float32
    coeffs = (float(f32(2.0 ** -127)), float(f32(-3.0 * 2.0 ** -126)), float(f32(2.0 ** -125)),
              float(f32(1.5 * 2.0 ** -130)), float(f32(-(2.0 ** -149))), float(f32(2.0 ** -124)), float(f32(0.75)))
    x = np.concatenate([special_inputs(), random_inputs(4_000, seed=11)])
    _check(x, coeffs, variant, len(coeffs) - 1)


def test_oracle_covers_every_variant():
    from fa4num.ex2 import VARIANTS
    assert set(FTZ) == set(VARIANTS)
