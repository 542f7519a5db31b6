"""Scalar numba kernels for IEEE binary32 arithmetic with NVIDIA's conventions: fa4num's scalar-kernel tier.

Every function here is a plain ``@njit`` scalar function on ``float32`` values, meant to be inlined into the
vectorised loops of fa4num.fp, fa4num.ex2, fa4num.hw, fa4num.softmax and fa4num.gpu; the names in ``__all__``
are public (other layers build their own loops from them and from the kernels fa4num.ex2.emulate and
fa4num.hw.mufu publish on top). Rounding modes are small ints
(RN=0, RZ=1, RM=2, RP=3: PTX's ``.rn .rz .rm .rp``); ``ftz`` mirrors PTX's ``.ftz`` qualifier.

How a directed or fused result is rounded exactly: the exact result v of a+b, a*b or a*b+c with fp32 operands is
held as an unevaluated float64 pair (s, e) with s = RN64(v) and e = v - s exactly (the product of two fp32 values
is exact in float64; TwoSum gives e). Rounding s to odd at float64 precision (Boldo & Melquiond, IEEE TC 2008)
and then to float32 with round-to-nearest-even gives RN32(v) without double rounding, because 53 >= 24 + 2; the
directed modes step that result one ulp where it lies on the wrong side of v.

NaN: every NaN an operation makes (NaN operands included) comes out as NVIDIA's canonical NaN, bits 0x7FFFFFFF.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

__all__ = ["RN", "RZ", "RM", "RP", "ROUNDING_MODES", "CANONICAL_NAN_BITS", "FTZ_TININESS_AFTER_ROUNDING",
           "SIGNED_ZERO_ORDERED", "f32_to_u32", "u32_to_f32", "f64_to_u64", "u64_to_f64", "fma_rn_f32",
           "canonical_nan", "flush_subnormal", "next_up", "next_down", "round_pair", "round_pair_ftz", "f32_add",
           "f32_sub", "f32_mul", "f32_fma", "f32_max", "f32_min"]

RN, RZ, RM, RP = 0, 1, 2, 3
ROUNDING_MODES = {"rn": RN, "rz": RZ, "rm": RM, "rp": RP}

CANONICAL_NAN_BITS = np.uint32(0x7FFFFFFF)

# --- behaviours the PTX manual leaves open; each is decided here, in one place. Both settings below were confirmed
# on an H200 (sm_90): the golden vectors in tests/golden/fp.json.xz match them, and fail with the other setting
# (mul/fma .ftz for the first, max/min for the second) ---------------------------------------------------------
# .ftz results: True = round with an unbounded exponent, then flush below 2^-126 ("tininess after rounding");
# False = flush when the exact result is below 2^-126 ("before rounding"). See round_pair_ftz.
FTZ_TININESS_AFTER_ROUNDING = True
# max/min of +0 and -0 (equal values): True = max gives +0 and min gives -0 whatever the operand order (IEEE
# 754-2019 maximum/minimum); False = the first operand a is returned. See _zero_tie.
SIGNED_ZERO_ORDERED = True
# numba's on-disk cache does not notice a change here from code compiled in other modules: after editing these two
# flags, delete the __pycache__ folders under fa4num/ before re-running.
_MIN_NORMAL = 2.0 ** -126
# ftz rounding is done on the significand with an unbounded exponent: results are scaled into the normal range
# by 2^_FTZ_SHIFT (exact in float64), rounded to 24 bits, and flushed if they land below 2^-126.
_FTZ_SHIFT = 64
_FTZ_UP = 2.0 ** _FTZ_SHIFT


# --- bit casts and the hardware FMA, as LLVM intrinsics (numba has no scalar view) -------------------------
@intrinsic
def f32_to_u32(typingctx, x):
    """Bits of a float32 as a uint32 (LLVM bitcast; no NaN canonicalisation, payload kept).

    Numba intrinsic: callable only from ``@njit`` code (``typingctx`` is numba's typing context, passed by numba).

    Parameters
    ----------
    x : float32

    Returns
    -------
    uint32

    Examples
    --------
    >>> import numpy as np
    >>> from numba import njit
    >>> bits = njit(lambda v: f32_to_u32(v))
    >>> hex(bits(np.float32(-1.5))), hex(bits(np.uint32(0x7FC00001).view(np.float32)))
    ('0xbfc00000', '0x7fc00001')
    """
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))
    return types.uint32(types.float32), codegen


@intrinsic
def u32_to_f32(typingctx, x):
    """The float32 with the given bits (LLVM bitcast).

    Numba intrinsic: callable only from ``@njit`` code (``typingctx`` is numba's typing context, passed by numba).

    Parameters
    ----------
    x : uint32

    Returns
    -------
    float32

    Examples
    --------
    >>> import numpy as np
    >>> from numba import njit
    >>> value = njit(lambda b: u32_to_f32(b))
    >>> value(np.uint32(0x3F800000)), value(np.uint32(1))   # 1.0 and the smallest subnormal
    (1.0, 1.401298464324817e-45)
    """
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.uint32), codegen


@intrinsic
def f64_to_u64(typingctx, x):
    """Bits of a float64 as a uint64 (LLVM bitcast), for the round-to-odd steps of round_pair.

    Numba intrinsic: callable only from ``@njit`` code (``typingctx`` is numba's typing context, passed by numba).

    Parameters
    ----------
    x : float64

    Returns
    -------
    uint64

    Examples
    --------
    >>> import numpy as np
    >>> from numba import njit
    >>> bits = njit(lambda v: f64_to_u64(v))
    >>> hex(bits(1.0))
    '0x3ff0000000000000'
    """
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))
    return types.uint64(types.float64), codegen


@intrinsic
def u64_to_f64(typingctx, x):
    """The float64 with the given bits (LLVM bitcast).

    Numba intrinsic: callable only from ``@njit`` code (``typingctx`` is numba's typing context, passed by numba).

    Parameters
    ----------
    x : uint64

    Returns
    -------
    float64

    Examples
    --------
    >>> import numpy as np
    >>> from numba import njit
    >>> value = njit(lambda b: u64_to_f64(b))
    >>> value(np.uint64(0x3FF0000000000001)) == 1 + 2 ** -52
    True
    """
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())
    return types.float64(types.uint64), codegen


@intrinsic
def fma_rn_f32(typingctx, a, b, c):
    """``llvm.fma.f32``: a*b + c rounded once to nearest even, gradual underflow.

    On x86 this is VFMADD (IEEE fusedMultiplyAdd), what PTX ``fma.rn.f32`` (FFMA) computes without .ftz.
    Numba intrinsic: callable only from ``@njit`` code (``typingctx`` is numba's typing context, passed by numba).

    Parameters
    ----------
    a, b, c : float32

    Returns
    -------
    float32

    Examples
    --------
    >>> import numpy as np
    >>> from numba import njit
    >>> fused = njit(lambda a, b, c: fma_rn_f32(a, b, c))
    >>> e = np.float32(1 + 2 ** -12)
    >>> float(fused(e, e, np.float32(-1.0))) == 2 ** -11 + 2 ** -24   # the exact a*b - 1
    True
    """
    def codegen(context, builder, signature, args):
        f32 = ir.FloatType()
        fn = builder.module.declare_intrinsic("llvm.fma", [f32], ir.FunctionType(f32, [f32, f32, f32]))
        return builder.call(fn, args)
    return types.float32(types.float32, types.float32, types.float32), codegen


@njit(cache=True)
def canonical_nan():
    """NVIDIA's canonical NaN as a float32: bits 0x7FFFFFFF, what every NaN-producing PTX fp32 op writes.

    Parameters
    ----------
    None

    Returns
    -------
    float32 NaN with bits CANONICAL_NAN_BITS

    Examples
    --------
    >>> import numpy as np
    >>> hex(int(np.float32(canonical_nan()).view(np.uint32)))
    '0x7fffffff'
    """
    return u32_to_f32(CANONICAL_NAN_BITS)


@njit(cache=True)
def _nan_to_canonical(x):
    if x != x:
        return u32_to_f32(CANONICAL_NAN_BITS)
    return x


@njit(cache=True)
def flush_subnormal(x):
    """PTX .ftz on an input or a result: a subnormal becomes a zero of the same sign.

    Parameters
    ----------
    x : float32

    Returns
    -------
    float32: x, or ±0 when x is subnormal (zeros, normals, inf and NaN pass unchanged)

    Examples
    --------
    >>> import numpy as np
    >>> flush_subnormal(np.float32(-2 ** -140)), flush_subnormal(np.float32(2 ** -126))
    (-0.0, 1.1754943508222875e-38)
    """
    if x != 0.0 and abs(x) < np.float32(_MIN_NORMAL):
        return u32_to_f32(f32_to_u32(x) & np.uint32(0x80000000))
    return x


@njit(cache=True)
def next_up(x):
    """Smallest float32 above x (IEEE nextUp), for the directed roundings of round_pair.

    Parameters
    ----------
    x : float32, finite or -inf (not NaN, not +inf: the bit step would leave the format)

    Returns
    -------
    float32; ±0 -> the smallest positive subnormal

    Examples
    --------
    >>> import numpy as np
    >>> next_up(np.float32(1.0)) == 1 + 2 ** -23, next_up(np.float32(-0.0))
    (True, 1.401298464324817e-45)
    """
    b = f32_to_u32(x)
    if x == 0.0:
        return u32_to_f32(np.uint32(1))
    if x > 0.0:
        return u32_to_f32(b + np.uint32(1))
    return u32_to_f32(b - np.uint32(1))


@njit(cache=True)
def next_down(x):
    """Largest float32 below x (IEEE nextDown), for the directed roundings of round_pair.

    Parameters
    ----------
    x : float32, finite or +inf (not NaN, not -inf)

    Returns
    -------
    float32; ±0 -> the negative subnormal of smallest magnitude

    Examples
    --------
    >>> import numpy as np
    >>> next_down(np.float32(1.0)) == 1 - 2 ** -24, next_down(np.float32(0.0))
    (True, -1.401298464324817e-45)
    """
    b = f32_to_u32(x)
    if x == 0.0:
        return u32_to_f32(np.uint32(0x80000001))
    if x > 0.0:
        return u32_to_f32(b - np.uint32(1))
    return u32_to_f32(b + np.uint32(1))


@njit(cache=True)
def round_pair(s, e, mode):
    """float32 rounding, in ``mode``, of the exact value s + e held as a float64 pair.

    s is rounded to odd at 53 bits using e's sign (no double rounding, since 53 >= 24 + 2), converted to float32 by
    round to nearest even (gradual underflow, overflow to inf), and for RZ/RM/RP stepped one ulp when that lies on
    the wrong side of s + e. The core of every f32_* kernel below.

    Parameters
    ----------
    s : float64
        RN64(s + e): finite and nonzero.
    e : float64
        The exact remainder: 0, or ``|e| <= ulp64(s)/2`` (a TwoSum error or an exact product's 0).
    mode : int
        RN, RZ, RM or RP.

    Returns
    -------
    float32

    Examples
    --------
    >>> r = [round_pair(1.0, -2.0 ** -60, m) for m in (RN, RZ, RM, RP)]   # just below 1
    >>> [float(v) == w for v, w in zip(r, (1.0, 1 - 2 ** -24, 1 - 2 ** -24, 1.0))]
    [True, True, True, True]
    """
    if e != 0.0:
        # round to odd at 53 bits: a float64 with an odd last bit is never a float32, and lies strictly
        # between the same two float32 neighbours as s + e
        sb = f64_to_u64(s)
        if (sb & np.uint64(1)) == np.uint64(0):
            if (e > 0.0) == (s > 0.0):
                sb += np.uint64(1)
            else:
                sb -= np.uint64(1)
            s = u64_to_f64(sb)
    r = np.float32(s)  # fptrunc: round to nearest even, gradual underflow, overflow to inf
    if mode == RN:
        return r
    r64 = np.float64(r)
    if mode == RM or (mode == RZ and s > 0.0):
        if r64 > s:
            r = next_down(r)
    else:  # RP, or RZ on a negative value
        if r64 < s:
            r = next_up(r)
    return r


@njit(cache=True)
def _tiny_before_rounding(s, e):
    """|s + e| < 2^-126 for the exact pair (s = RN64(s + e)): s itself is below, or s sits on 2^-126 and e points
    toward zero."""
    a = abs(s)
    return a < _MIN_NORMAL or (a == _MIN_NORMAL and e != 0.0 and (e > 0.0) != (s > 0.0))


@njit(cache=True)
def round_pair_ftz(s, e, mode):
    """Like round_pair, for a PTX .ftz result: a result below 2^-126 becomes a zero of the result's sign.

    When a result counts as "below 2^-126" is set in one place, FTZ_TININESS_AFTER_ROUNDING::

        True  -- round to 24 bits with an unbounded exponent, then flush if below 2^-126 (a value just under 2^-126
                 that rounds up to 2^-126 survives);
        False -- flush whenever the exact value is below 2^-126 (tininess before rounding).

    The H200 rounds first (golden vectors in tests/golden/fp.json.xz).

    Parameters
    ----------
    s, e : float64
        The exact value as in round_pair (s = RN64(s + e), finite, nonzero).
    mode : int
        RN, RZ, RM or RP.

    Returns
    -------
    float32, a normal number, ±0 or ±inf

    Examples
    --------
    >>> round_pair_ftz(2.0 ** -130, 0.0, RN), round_pair(2.0 ** -130, 0.0, RN)   # flushed vs gradual underflow
    (0.0, 7.346839692639297e-40)
    >>> float(round_pair_ftz(2.0 ** -126 * (1 - 2.0 ** -25), 0.0, RN)) == 2.0 ** -126   # rounds up first: kept
    True
    """
    tiny = abs(s) < 2.0 * _MIN_NORMAL
    if tiny and not FTZ_TININESS_AFTER_ROUNDING and _tiny_before_rounding(s, e):
        return np.float32(0.0) if s > 0.0 else np.float32(-0.0)
    # Exact scaling by 2^64 moves every tiny |s| >= 2^-190 into the normal range, where round_pair rounds to 24
    # bits; smaller values flush whatever their rounding. The result is then r * 2^-64: below 2^-126 when r's
    # exponent field is below 65, else r's bits with the exponent field lowered by 64. One round_pair call and
    # integer steps keep this small enough for LLVM to inline and specialise on ``mode`` (a version with two
    # calls and float steps ran every .ftz operation about 6x slower).
    scale = _FTZ_UP if tiny else 1.0
    r = round_pair(s * scale, e * scale, mode)
    if not tiny:
        return r
    rb = f32_to_u32(r)
    if ((rb >> np.uint32(23)) & np.uint32(0xFF)) < np.uint32(_FTZ_SHIFT + 1):
        return u32_to_f32(rb & np.uint32(0x80000000))  # a zero with the sign of the result
    return u32_to_f32(rb - np.uint32(_FTZ_SHIFT << 23))


@njit(cache=True)
def _finish(s, e, mode, ftz):
    if ftz:
        return round_pair_ftz(s, e, mode)
    return round_pair(s, e, mode)


@njit(cache=True)
def _exact_zero(x_is_negative, y_is_negative, mode):
    """Sign of an exact zero sum x + y (IEEE 754 §6.3): +0 + +0 = +0 and -0 + -0 = -0 in every mode; a sum of
    opposite signs (including an exact cancellation) is +0, or -0 when rounding toward -inf."""
    if x_is_negative == y_is_negative:
        return np.float32(-0.0) if x_is_negative else np.float32(0.0)
    if mode == RM:
        return np.float32(-0.0)
    return np.float32(0.0)


@njit(cache=True)
def _signbit64(x):
    return (f64_to_u64(x) >> np.uint64(63)) != np.uint64(0)


@njit(cache=True, inline="always")
def f32_add(a, b, mode, ftz):
    """PTX ``add{.rnd}{.ftz}.f32`` (FADD): a + b rounded once; NaN results are the canonical NaN.

    Parameters
    ----------
    a, b : float32
    mode : int
        RN, RZ, RM or RP (PTX .rn/.rz/.rm/.rp); a compile-time constant in FA4-style loops.
    ftz : bool
        PTX .ftz: subnormal operands and a subnormal result become zeros of their sign.

    Returns
    -------
    float32

    Examples
    --------
    >>> import numpy as np
    >>> one, tiny = np.float32(1.0), np.float32(2 ** -30)
    >>> f32_add(one, tiny, RN, False), f32_add(one, tiny, RP, False) == 1 + 2 ** -23
    (1.0, True)
    >>> f32_add(np.float32(1.0), np.float32(-1.0), RM, False)   # exact cancellation rounding down: -0
    -0.0
    """
    if ftz:
        a = flush_subnormal(a)
        b = flush_subnormal(b)
    elif mode == RN:
        return _nan_to_canonical(a + b)  # native float32 add is IEEE RN with gradual underflow
    x = np.float64(a)
    y = np.float64(b)
    s = x + y
    if not np.isfinite(s):
        return _nan_to_canonical(np.float32(s))
    if s == 0.0:
        if x == 0.0 and y == 0.0:
            return _exact_zero(_signbit64(x), _signbit64(y), mode)
        return _exact_zero(False, True, mode)  # exact cancellation
    bp = s - x
    e = (x - (s - bp)) + (y - bp)  # TwoSum: s + e == x + y exactly
    return _finish(s, e, mode, ftz)


@njit(cache=True, inline="always")
def f32_sub(a, b, mode, ftz):
    """PTX ``sub{.rnd}{.ftz}.f32`` (FADD with b negated): a + (-b), rounded once (negation is exact).

    Parameters
    ----------
    a, b : float32
    mode : int
        RN, RZ, RM or RP (PTX .rn/.rz/.rm/.rp); a compile-time constant in FA4-style loops.
    ftz : bool
        PTX .ftz: subnormal operands and a subnormal result become zeros of their sign.

    Returns
    -------
    float32

    Examples
    --------
    >>> import numpy as np
    >>> f32_sub(np.float32(1.0), np.float32(2 ** -30), RZ, False) == 1 - 2 ** -24
    True
    """
    return f32_add(a, -b, mode, ftz)


@njit(cache=True, inline="always")
def f32_mul(a, b, mode, ftz):
    """PTX ``mul{.rnd}{.ftz}.f32`` (FMUL): a * b rounded once (the float64 product is exact).

    Parameters
    ----------
    a, b : float32
    mode : int
        RN, RZ, RM or RP (PTX .rn/.rz/.rm/.rp); a compile-time constant in FA4-style loops.
    ftz : bool
        PTX .ftz: subnormal operands and a subnormal result become zeros of their sign.

    Returns
    -------
    float32

    Examples
    --------
    >>> import numpy as np
    >>> x = np.float32(2 ** -70)
    >>> f32_mul(x, x, RN, False), f32_mul(x, x, RN, True)   # subnormal product; .ftz flushes it
    (7.174648137343064e-43, 0.0)
    """
    if ftz:
        a = flush_subnormal(a)
        b = flush_subnormal(b)
    elif mode == RN:
        return _nan_to_canonical(a * b)
    p = np.float64(a) * np.float64(b)
    if not np.isfinite(p):
        return _nan_to_canonical(np.float32(p))
    if p == 0.0:
        return np.float32(p)
    return _finish(p, 0.0, mode, ftz)


@njit(cache=True, inline="always")
def f32_fma(a, b, c, mode, ftz):
    """PTX ``fma{.rnd}{.ftz}.f32`` (FFMA): a*b + c with one rounding.

    Parameters
    ----------
    a, b, c : float32
    mode : int
        RN, RZ, RM or RP (PTX .rn/.rz/.rm/.rp); a compile-time constant in FA4-style loops.
    ftz : bool
        PTX .ftz: subnormal operands and a subnormal result become zeros of their sign.

    Returns
    -------
    float32

    Examples
    --------
    >>> import numpy as np
    >>> e = np.float32(1 + 2 ** -12)
    >>> float(f32_fma(e, e, np.float32(-1.0), RN, False)) == 2 ** -11 + 2 ** -24   # the exact a*b - 1
    True
    """
    if ftz:
        a = flush_subnormal(a)
        b = flush_subnormal(b)
        c = flush_subnormal(c)
    elif mode == RN:
        return _nan_to_canonical(fma_rn_f32(a, b, c))
    p = np.float64(a) * np.float64(b)  # exact
    z = np.float64(c)
    s = p + z
    if not np.isfinite(s):
        return _nan_to_canonical(np.float32(s))
    if s == 0.0:
        if p == 0.0 and z == 0.0:
            return _exact_zero(_signbit64(p), _signbit64(z), mode)
        return _exact_zero(False, True, mode)  # exact cancellation
    bp = s - p
    e = (p - (s - bp)) + (z - bp)
    return _finish(s, e, mode, ftz)


@njit(cache=True)
def _zero_tie(a, b, want_negative):
    """max/min of two equal values: only +0 and -0 can differ (see SIGNED_ZERO_ORDERED)."""
    if not SIGNED_ZERO_ORDERED:
        return a
    a_negative = (f32_to_u32(a) >> np.uint32(31)) != np.uint32(0)
    return a if a_negative == want_negative else b


@njit(cache=True)
def f32_max(a, b, ftz):
    """PTX ``max{.ftz}.f32`` (FMNMX): a NaN operand is ignored; two NaNs give the canonical NaN.

    max(+0, -0) is +0 in either order (SIGNED_ZERO_ORDERED, confirmed on an H200).

    Parameters
    ----------
    a, b : float32
    ftz : bool
        PTX .ftz: subnormal operands are flushed before comparing.

    Returns
    -------
    float32

    Examples
    --------
    >>> import numpy as np
    >>> f32_max(np.float32("nan"), np.float32(1.0), False), f32_max(np.float32(-0.0), np.float32(0.0), False)
    (1.0, 0.0)
    """
    if ftz:
        a = flush_subnormal(a)
        b = flush_subnormal(b)
    if a != a:
        return _nan_to_canonical(b)
    if b != b:
        return a
    if a == b:
        return _zero_tie(a, b, False)
    return a if a > b else b


@njit(cache=True)
def f32_min(a, b, ftz):
    """PTX ``min{.ftz}.f32`` (FMNMX): a NaN operand is ignored; two NaNs give the canonical NaN.

    min(+0, -0) is -0 in either order (SIGNED_ZERO_ORDERED, confirmed on an H200).

    Parameters
    ----------
    a, b : float32
    ftz : bool
        PTX .ftz: subnormal operands are flushed before comparing.

    Returns
    -------
    float32

    Examples
    --------
    >>> import numpy as np
    >>> f32_min(np.float32(0.0), np.float32(-0.0), False), f32_min(np.float32(2 ** -140), np.float32(0.0), True)
    (-0.0, 0.0)
    """
    if ftz:
        a = flush_subnormal(a)
        b = flush_subnormal(b)
    if a != a:
        return _nan_to_canonical(b)
    if b != b:
        return a
    if a == b:
        return _zero_tie(a, b, True)
    return a if a < b else b
