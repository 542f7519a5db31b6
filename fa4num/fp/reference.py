"""Correctly rounded references: 2^x, log2(x) and 1/x for float32 inputs, rounded once to float32 or bfloat16.

"Correctly rounded" means round-to-nearest-even of the exact real result, straight into the target format (never
through float32 on the way to bfloat16), with gradual underflow and overflow to inf.

How (fast and rigorous):
1. y = the float64 value from libm (exp2, log2) or from IEEE division (1/x, error <= 1/2 ulp64).
2. Round y to the target. This is the correct rounding of the exact value unless a midpoint of the target format
   lies within K_RUN = 64 ulp64 of y; that test costs a few flops and flags roughly one input in 4 million for a
   float32 target (one in 10^12 for bfloat16). The assumption is that libm's exp2/log2 err by less than K_RUN
   ulp64 (glibc documents <= 1-2 ulp for both).
3. 1/x never needs it: no midpoint lies within 2^-50 (relative) of 1/x for float32 x (see rcp_rounded).
   Flagged exp2/log2 inputs are resolved from a table of every float32 input whose float64 value lies within
   K_TABLE = 256 ulp64 of a midpoint (built once over all 2^32 inputs by fa4num/fp/_tables.py, each entry rounded
   by gmpy2/MPFR), and, in the array functions, by gmpy2 for anything the table lacks (a libm far off the one the
   table was built with).

The scalar kernels (exp2_cr_f32, exp2_cr_bf16, log2_cr_f32, log2_cr_bf16, rcp_cr_f32, rcp_cr_bf16) are numba
functions for use inside other njit loops (e.g. the exhaustive exp2 sweep). Each returns (value, ok): value is a
float32 (for the bf16 kernels, the bf16 value held exactly in a float32; its bits >> 16 are the bf16 bits) and
ok is False only when the input needed the slow path and the table did not have it, in which case the caller
must use the array function (or gmpy2) for that input.

Specials: NaN -> NaN (0x7FFFFFFF, 0x7FFF for bf16); exp2: +inf -> +inf, -inf -> +0, ±0 -> 1; log2: ±0 -> -inf,
x < 0 -> NaN, +inf -> +inf, 1 -> +0; rcp: ±0 -> ±inf, ±inf -> ±0.
"""
from __future__ import annotations

import math
from pathlib import Path

import ml_dtypes
import numpy as np
from numba import njit, prange

from .arrays import flat as _flat, as_float32, tensor_device, wrap
from .scalar import CANONICAL_NAN_BITS, f32_to_u32, f64_to_u64, u32_to_f32, u64_to_f64

__all__ = ["exp2_cr", "log2_cr", "rcp_cr", "exp2_cr_f32", "exp2_cr_bf16", "exp2_cr_f32_bf16", "log2_cr_f32", "log2_cr_bf16",
           "rcp_cr_f32", "rcp_cr_bf16", "round_f64", "round_f64_fast", "K_RUN", "K_TABLE", "TARGETS"]

K_RUN = 64      # ulp64: a float64 value this close to a midpoint is resolved exactly
K_TABLE = 256   # ulp64: the hard-case tables hold every input this close (covers libms within 96 ulp64)
TABLE_PATH = Path(__file__).with_name("data") / "cr_hard_cases.npz"

# target formats: (precision in bits, exponent of the smallest subnormal)
TARGETS = {"float32": (24, -149), "bfloat16": (8, -133)}
_F32_PREC, _F32_QMIN = TARGETS["float32"]
_BF16_PREC, _BF16_QMIN = TARGETS["bfloat16"]
# exp2(x) < 2^(qmin - 2), i.e. below half the smallest subnormal by a margin: the result rounds to +0
_EXP2_F32_CUT = float(_F32_QMIN - 2)
_EXP2_BF16_CUT = float(_BF16_QMIN - 2)


# --- rounding a float64 approximation once, with the midpoint test ------------------------------------------
@njit(cache=True)
def round_f64(y, prec, qmin, k_ulp):
    """Round positive finite float64 y to nearest even with ``prec`` bits and smallest quantum 2^qmin.

    The exponent is unbounded above (the caller maps results >= 2^128 to inf); below, results are quantised to
    2^qmin (gradual underflow). Numba scalar kernel.

    Parameters
    ----------
    y : float64
        Positive, finite.
    prec : int
        Target precision in bits (24 for float32, 8 for bfloat16: TARGETS).
    qmin : int
        Exponent of the target's smallest subnormal (-149 for float32, -133 for bfloat16).
    k_ulp : float or int
        Half-width, in ulp64(y), of the window around a target midpoint that makes the result "hard".

    Returns
    -------
    (rounded, hard) : (float64, bool)
        hard means a midpoint of the target lies within k_ulp ulp64(y) of y, so an approximation error that large
        could change the result.

    Examples
    --------
    >>> round_f64(1.0 + 2.0 ** -24, 24, -149, 64)   # an exact float32 midpoint: ties to even, and hard
    (1.0, True)
    >>> round_f64(1.0 + 2.0 ** -22, 24, -149, 64)
    (1.000000238418579, False)
    """
    e1 = math.frexp(y)[1]  # y in [2^(e1-1), 2^e1)
    qe = e1 - prec
    if qe < qmin:
        qe = qmin
    t = math.ldexp(y, -qe)  # exact: y in units of the target's quantum
    frac = t - math.floor(t)
    hard = abs(frac - 0.5) <= math.ldexp(float(k_ulp), e1 - 53 - qe)
    return math.ldexp(np.rint(t), qe), hard


@njit(cache=True)
def round_f64_fast(y, prec, qmin, k_ulp):
    """round_f64 on the bits of y where the result is normal in the target (falls back to round_f64 below).

    The low 53 - prec bits of y's significand are its distance past the last kept bit, in ulp64, so the midpoint
    test and the rounding are integer operations. Numba scalar kernel; same arguments and result as round_f64.

    Parameters
    ----------
    y : float64
        Positive, finite.
    prec, qmin : int
        Target precision and smallest-subnormal exponent (TARGETS).
    k_ulp : int
        Midpoint window half-width in ulp64.

    Returns
    -------
    (rounded, hard) : (float64, bool)

    Examples
    --------
    >>> round_f64_fast(1.0 + 2.0 ** -24, 24, -149, 64), round_f64_fast(1.0 + 3 * 2.0 ** -24, 24, -149, 64)
    ((1.0, True), (1.000000238418579, True))
    """
    b = f64_to_u64(y)
    if (b >> np.uint64(52)) < np.uint64(1023 + qmin + prec - 1):  # below the target's smallest normal
        return round_f64(y, prec, qmin, k_ulp)
    drop = np.uint64(53 - prec)
    half = np.uint64(1) << (drop - np.uint64(1))
    low = b & ((np.uint64(1) << drop) - np.uint64(1))
    hard = abs(np.int64(low) - np.int64(half)) <= k_ulp
    # round half to even on the bits; a carry into the exponent is the right result (up to 2^128 -> inf)
    rb = (b + (half - np.uint64(1)) + ((b >> drop) & np.uint64(1))) & ~((np.uint64(1) << drop) - np.uint64(1))
    return u64_to_f64(rb), hard


@njit(cache=True)
def _lookup(xs, ys, x):
    key = f32_to_u32(x)
    i = np.searchsorted(xs, key)
    if i < xs.size and xs[i] == key:
        return ys[i], True
    return np.float32(0.0), False


# --- exp2 ------------------------------------------------------------------------------------------------
@njit(cache=True)
def exp2_approx(x, prec, qmin, cut, k_ulp):
    """(rounded 2^x as float32, hard) from libm's float64 exp2; see round_f64."""
    if x != x:
        return u32_to_f32(CANONICAL_NAN_BITS), False
    if x >= 128.0:  # 2^x >= 2^128: overflow (also +inf)
        return np.float32(np.inf), False
    if x < cut:  # also -inf
        return np.float32(0.0), False
    r, hard = round_f64_fast(math.exp2(np.float64(x)), prec, qmin, k_ulp)
    return np.float32(r), hard


# --- log2 ------------------------------------------------------------------------------------------------
@njit(cache=True)
def log2_approx(x, prec, qmin, k_ulp):
    """(rounded log2(x) as float32, hard) from libm's float64 log2; see round_f64."""
    if x != x or x < 0.0:
        return u32_to_f32(CANONICAL_NAN_BITS), False
    if x == 0.0:
        return np.float32(-np.inf), False
    if x == np.inf:
        return np.float32(np.inf), False
    y = math.log2(np.float64(x))
    if y == 0.0:  # x == 1 exactly (log2 is never 0 elsewhere)
        return np.float32(0.0), False
    r, hard = round_f64_fast(abs(y), prec, qmin, k_ulp)
    return np.float32(r if y > 0.0 else -r), hard


# --- rcp: IEEE division is correctly rounded in float64, and a hard case is decided exactly -----------------
@njit(cache=True)
def rcp_rounded(x, prec, qmin):
    """Correctly rounded 1/x (x float32) with ``prec`` bits and smallest quantum 2^qmin, as float32."""
    if x != x:
        return u32_to_f32(CANONICAL_NAN_BITS)
    if x == 0.0:
        return np.float32(np.inf) if (f32_to_u32(x) >> np.uint32(31)) == 0 else np.float32(-np.inf)
    if x == np.inf or x == -np.inf:
        return np.float32(0.0) if x > 0.0 else np.float32(-0.0)
    # One rounding from y = RN64(1/|x|) is already correct. Write |x| = X 2^e and a midpoint of the target
    # m 2^f with X, m odd integers below 2^24 and 2^25: then |1/|x| - mid| * |x| = |2^G - X m| / 2^G with
    # G = -(e + f), and X m is odd (and is not 1: mid = 2^f would need |x| = 2^150), so near a midpoint this is at
    # least 2^-G >= 2^-50. y lies within 2^-53 of 1/|x|: no midpoint lies between them or on y.
    r = round_f64_fast(1.0 / abs(np.float64(x)), prec, qmin, 0)[0]
    v = np.float32(r)
    return v if x > 0.0 else -v


@njit(cache=True)
def rcp_cr_f32(x):
    """Correctly rounded 1/x to float32; never needs the slow path (see rcp_rounded), so ok is True.

    Numba scalar kernel (callable from Python too), for use inside other njit loops such as the exhaustive sweep.

    Parameters
    ----------
    x : float32

    Returns
    -------
    (value, ok) : (float32, bool)
        value is RN_f32(1/x) (±0 -> ±inf, ±inf -> ±0); ok is False only when x needed the slow path and the
        hard-case table lacks it (then use the array function rcp_cr, which asks gmpy2).

    Examples
    --------
    >>> import numpy as np
    >>> rcp_cr_f32(np.float32(3.0)), rcp_cr_f32(np.float32(-0.0))
    ((0.3333333432674408, True), (-inf, True))
    """
    return rcp_rounded(x, _F32_PREC, _F32_QMIN), True


@njit(cache=True)
def rcp_cr_bf16(x):
    """Correctly rounded 1/x to bfloat16, held exactly in a float32; ok is always True.

    Numba scalar kernel (callable from Python too), for use inside other njit loops such as the exhaustive sweep.

    Parameters
    ----------
    x : float32

    Returns
    -------
    (value, ok) : (float32, bool)
        value is RN_bf16(1/x) as a float32; ok is False only when x needed the slow path and the
        hard-case table lacks it (then use the array function rcp_cr(x, "bfloat16"), which asks gmpy2).

    Examples
    --------
    >>> import numpy as np
    >>> rcp_cr_bf16(np.float32(3.0))
    (0.333984375, True)
    """
    return rcp_rounded(x, _BF16_PREC, _BF16_QMIN), True


# --- hard-case tables ---------------------------------------------------------------------------------------
def _load_tables():
    """{name: (sorted uint32 input bits, float32 results)}; empty tables when the file is absent (the array
    functions then resolve every hard case with gmpy2, and the scalar kernels report ok=False)."""
    names = ("exp2_float32", "exp2_bfloat16", "log2_float32", "log2_bfloat16")
    empty = (np.zeros(0, np.uint32), np.zeros(0, np.float32))
    if not TABLE_PATH.exists():
        return {n: empty for n in names}
    with np.load(TABLE_PATH) as z:
        return {n: (np.ascontiguousarray(z[n + "_x"]), np.ascontiguousarray(z[n + "_y"])) for n in names}


_TABLES = _load_tables()
_EXP2_F32_X, _EXP2_F32_Y = _TABLES["exp2_float32"]
_EXP2_BF16_X, _EXP2_BF16_Y = _TABLES["exp2_bfloat16"]
_LOG2_F32_X, _LOG2_F32_Y = _TABLES["log2_float32"]
_LOG2_BF16_X, _LOG2_BF16_Y = _TABLES["log2_bfloat16"]


@njit(cache=True)
def exp2_cr_f32(x):
    """Correctly rounded 2^x to float32 (round to nearest even, gradual underflow, overflow to inf).

    Numba scalar kernel (callable from Python too), for use inside other njit loops such as the exhaustive sweep.

    Parameters
    ----------
    x : float32

    Returns
    -------
    (value, ok) : (float32, bool)
        value is RN_f32(2^x); ok is False only when x needed the slow path and the
        hard-case table lacks it (then use the array function exp2_cr, which asks gmpy2).

    Examples
    --------
    >>> import numpy as np
    >>> exp2_cr_f32(np.float32(-1.5)), exp2_cr_f32(np.float32(128.0))
    ((0.3535533845424652, True), (inf, True))
    """
    v, hard = exp2_approx(x, _F32_PREC, _F32_QMIN, _EXP2_F32_CUT, K_RUN)
    if hard:
        return _lookup(_EXP2_F32_X, _EXP2_F32_Y, x)
    return v, True


@njit(cache=True)
def exp2_cr_bf16(x):
    """Correctly rounded 2^x to bfloat16, held exactly in a float32 (its bits >> 16 are the bf16 bits).

    Numba scalar kernel (callable from Python too), for use inside other njit loops such as the exhaustive sweep.

    Parameters
    ----------
    x : float32

    Returns
    -------
    (value, ok) : (float32, bool)
        value is RN_bf16(2^x) as a float32; ok is False only when x needed the slow path and the
        hard-case table lacks it (then use the array function exp2_cr(x, "bfloat16"), which asks gmpy2).

    Examples
    --------
    >>> import numpy as np
    >>> v, ok = exp2_cr_bf16(np.float32(0.01))
    >>> float(v), ok, hex(int(np.float32(v).view(np.uint32)))
    (1.0078125, True, '0x3f810000')
    """
    v, hard = exp2_approx(x, _BF16_PREC, _BF16_QMIN, _EXP2_BF16_CUT, K_RUN)
    if hard:
        return _lookup(_EXP2_BF16_X, _EXP2_BF16_Y, x)
    return v, True


_TINY = 2.0 ** -26     # |x| below this: 2^x rounds to 1 in fp32 and bf16
_LN2 = math.log(2.0)


@njit(cache=True, inline="always")
def exp2_cr_f32_bf16(x):
    """Correctly rounded 2^x to float32 and to bfloat16 from one libm call, for sweeps that need both.

    The float64 value is libm's exp2 (for relative errors; 1 + x ln2 where |x| < 2^-26, no libm call below the
    underflow cut). The results equal exp2_cr_f32 and exp2_cr_bf16 wherever ok. Numba scalar kernel (inlined into
    the njit loops that call it; callable from Python too).

    Parameters
    ----------
    x : float32

    Returns
    -------
    (r32, rbf16, y, ok) : (float32, float32, float64, bool)
        RN_f32(2^x); RN_bf16(2^x) held in a float32; libm's float64 2^x; ok is False when a hard case is not in the
        tables (then use :func:`exp2_cr`, which asks gmpy2).

    Examples
    --------
    >>> import numpy as np
    >>> exp2_cr_f32_bf16(np.float32(0.5))
    (1.4142135381698608, 1.4140625, 1.4142135623730951, True)
    """
    if x != x:
        nan = u32_to_f32(CANONICAL_NAN_BITS)
        return nan, nan, np.float64(np.nan), True
    if x >= np.float32(128.0):
        return np.float32(np.inf), np.float32(np.inf), np.inf, True
    if x < np.float32(_F32_QMIN - 2):   # 2^x below a quarter of the smallest subnormal (also -inf)
        return np.float32(0.0), np.float32(0.0), 0.0, True     # (no libm call: its underflow path is slow)
    if abs(x) < np.float32(_TINY):
        # 2^x is within 2|x| ln2 < 2^-26 of 1: both roundings give 1, far from any midpoint (1 - 2^-25 for fp32)
        return np.float32(1.0), np.float32(1.0), 1.0 + np.float64(x) * _LN2, True
    y = math.exp2(np.float64(x))
    r, hard = round_f64_fast(y, _F32_PREC, _F32_QMIN, K_RUN)
    r32 = np.float32(r)
    ok = True
    if hard:
        r32, ok = _lookup(_EXP2_F32_X, _EXP2_F32_Y, x)
    if x < np.float32(_BF16_QMIN - 2):
        rb = np.float32(0.0)
    else:
        r, hard = round_f64_fast(y, _BF16_PREC, _BF16_QMIN, K_RUN)
        rb = np.float32(r)
        if hard:
            rb, ok_b = _lookup(_EXP2_BF16_X, _EXP2_BF16_Y, x)
            ok = ok and ok_b
    return r32, rb, y, ok


@njit(cache=True)
def log2_cr_f32(x):
    """Correctly rounded log2(x) to float32 (x < 0 -> NaN, ±0 -> -inf, 1 -> +0).

    Numba scalar kernel (callable from Python too), for use inside other njit loops such as the exhaustive sweep.

    Parameters
    ----------
    x : float32

    Returns
    -------
    (value, ok) : (float32, bool)
        value is RN_f32(log2 x); ok is False only when x needed the slow path and the
        hard-case table lacks it (then use the array function log2_cr, which asks gmpy2).

    Examples
    --------
    >>> import numpy as np
    >>> log2_cr_f32(np.float32(8.0)), log2_cr_f32(np.float32(3.0))
    ((3.0, True), (1.5849624872207642, True))
    """
    v, hard = log2_approx(x, _F32_PREC, _F32_QMIN, K_RUN)
    if hard:
        return _lookup(_LOG2_F32_X, _LOG2_F32_Y, x)
    return v, True


@njit(cache=True)
def log2_cr_bf16(x):
    """Correctly rounded log2(x) to bfloat16, held exactly in a float32.

    Numba scalar kernel (callable from Python too), for use inside other njit loops such as the exhaustive sweep.

    Parameters
    ----------
    x : float32

    Returns
    -------
    (value, ok) : (float32, bool)
        value is RN_bf16(log2 x) as a float32; ok is False only when x needed the slow path and the
        hard-case table lacks it (then use the array function log2_cr(x, "bfloat16"), which asks gmpy2).

    Examples
    --------
    >>> import numpy as np
    >>> log2_cr_bf16(np.float32(3.0))
    (1.5859375, True)
    """
    v, hard = log2_approx(x, _BF16_PREC, _BF16_QMIN, K_RUN)
    if hard:
        return _lookup(_LOG2_BF16_X, _LOG2_BF16_Y, x)
    return v, True


# --- the oracle for the slow path ---------------------------------------------------------------------------
def gmpy2_context(target: str):
    """MPFR context whose rounding is the target format's: precision, subnormals, overflow to inf."""
    import gmpy2  # imported where used: a GPU machine that runs fa4num's emulators may lack it
    prec, qmin = TARGETS[target]
    # MPFR writes numbers as 0.1xxx * 2^e: the smallest subnormal 2^qmin is 0.1 * 2^(qmin+1)
    return gmpy2.context(precision=prec, emin=qmin + 1, emax=128, subnormalize=True,
                         round=gmpy2.RoundToNearest)


def gmpy2_reference(func: str, x: np.ndarray, target: str) -> np.ndarray:
    """Correctly rounded func(x) for each float32 x by MPFR (slow: ~0.1-0.5 M elem/s); float32 out."""
    import gmpy2
    op = {"exp2": gmpy2.exp2, "log2": gmpy2.log2, "rcp": lambda v: 1 / v}[func]
    # convert outside the target's context: inside it gmpy2 rounds the new mpfr to the target (even when given a
    # precision); float32 -> Python float -> 53-bit mpfr in a default context is exact
    with gmpy2.context(precision=53):
        args = list(map(gmpy2.mpfr, np.asarray(x, np.float32).reshape(-1).tolist()))
    with gmpy2_context(target):
        out = np.array([float(op(v)) for v in args], np.float64).astype(np.float32)
    out[np.isnan(out)] = np.uint32(CANONICAL_NAN_BITS).view(np.float32)
    return out.reshape(np.shape(x))


# --- array functions ----------------------------------------------------------------------------------------
@njit(parallel=True, cache=True)
def _exp2_f32_loop(x, out, ok):
    for i in prange(x.size):
        out[i], ok[i] = exp2_cr_f32(x[i])


@njit(parallel=True, cache=True)
def _exp2_bf16_loop(x, out, ok):
    for i in prange(x.size):
        out[i], ok[i] = exp2_cr_bf16(x[i])


@njit(parallel=True, cache=True)
def _log2_f32_loop(x, out, ok):
    for i in prange(x.size):
        out[i], ok[i] = log2_cr_f32(x[i])


@njit(parallel=True, cache=True)
def _log2_bf16_loop(x, out, ok):
    for i in prange(x.size):
        out[i], ok[i] = log2_cr_bf16(x[i])


@njit(parallel=True, cache=True)
def _rcp_f32_loop(x, out, ok):
    for i in prange(x.size):
        out[i], ok[i] = rcp_cr_f32(x[i])


@njit(parallel=True, cache=True)
def _rcp_bf16_loop(x, out, ok):
    for i in prange(x.size):
        out[i], ok[i] = rcp_cr_bf16(x[i])


_LOOPS = {("exp2", "float32"): _exp2_f32_loop, ("exp2", "bfloat16"): _exp2_bf16_loop,
          ("log2", "float32"): _log2_f32_loop, ("log2", "bfloat16"): _log2_bf16_loop,
          ("rcp", "float32"): _rcp_f32_loop, ("rcp", "bfloat16"): _rcp_bf16_loop}


def _reference(func, x, dtype):
    if dtype not in TARGETS:
        raise ValueError(f"dtype must be one of {sorted(TARGETS)}, got {dtype!r}")
    arr = as_float32(x, "x")
    flat = _flat(arr)
    out = np.empty(flat.size, np.float32)
    ok = np.empty(flat.size, np.bool_)
    _LOOPS[func, dtype](flat, out, ok)
    if not ok.all():
        slow = np.flatnonzero(~ok)
        out[slow] = gmpy2_reference(func, flat[slow], dtype)
    if dtype == "bfloat16":  # the values are bf16 values: the upper 16 bits are exact
        out = (out.view(np.uint32) >> np.uint32(16)).astype(np.uint16).view(ml_dtypes.bfloat16)
    return wrap(out.reshape(arr.shape), tensor_device(x))


def exp2_cr(x, dtype="float32"):
    """2^x correctly rounded (nearest even) to ``dtype`` ("float32" or "bfloat16") from float32 x.

    Parameters
    ----------
    x : float32 array or torch float32 tensor
    dtype : {"float32", "bfloat16"}
        The target format; rounded once, straight from the exact value.

    Returns
    -------
    array of ``dtype`` (ml_dtypes bfloat16 for "bfloat16") of x's shape (a tensor on x's device for a tensor)

    Examples
    --------
    >>> import numpy as np
    >>> np.asarray(exp2_cr(np.array([0.5, -150.0], np.float32))).tolist()   # 2^-150: half the least subnormal, to even
    [1.4142135381698608, 0.0]
    >>> float(np.asarray(exp2_cr(np.array([0.5], np.float32), "bfloat16"))[0])
    1.4140625
    """
    return _reference("exp2", x, dtype)


def log2_cr(x, dtype="float32"):
    """log2(x) correctly rounded (nearest even) to ``dtype`` ("float32" or "bfloat16") from float32 x.

    Parameters
    ----------
    x : float32 array or torch float32 tensor
    dtype : {"float32", "bfloat16"}
        The target format; rounded once, straight from the exact value.

    Returns
    -------
    array of ``dtype`` (ml_dtypes bfloat16 for "bfloat16") of x's shape (a tensor on x's device for a tensor)

    Examples
    --------
    >>> import numpy as np
    >>> np.asarray(log2_cr(np.array([8.0, 0.0, -1.0], np.float32))).tolist()
    [3.0, -inf, nan]
    """
    return _reference("log2", x, dtype)


def rcp_cr(x, dtype="float32"):
    """1/x correctly rounded (nearest even) to ``dtype`` ("float32" or "bfloat16") from float32 x.

    Parameters
    ----------
    x : float32 array or torch float32 tensor
    dtype : {"float32", "bfloat16"}
        The target format; rounded once, straight from the exact value.

    Returns
    -------
    array of ``dtype`` (ml_dtypes bfloat16 for "bfloat16") of x's shape (a tensor on x's device for a tensor)

    Examples
    --------
    >>> import numpy as np
    >>> float(np.asarray(rcp_cr(np.array([3.0], np.float32)))[0])
    0.3333333432674408
    """
    return _reference("rcp", x, dtype)
