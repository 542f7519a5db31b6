"""FA4's software exp2, bit for bit: a Cody-Waite split on the FADD units plus a Horner polynomial on the FMA units.

FA4 (flash_attn/cute/utils.py) computes 2^x for part of each softmax row without MUFU.EX2:

    a = max(x, -127)                  # max.f32 vs 0fC2FE0000; a NaN x is ignored -> -127
    r = add.rm(a, 0f4B400000)         # 1.5 * 2^23: the fp32 spacing there is 1, so r = 1.5*2^23 + floor(a)
    t = sub.rn(r, 0f4B400000)         # floor(a), exactly
    f = sub.rn(a, t)                  # fractional part in [0, 1] (rounds to 1.0 for tiny negative a)
    p = c_d; p = fma.rn(p, f, c_k)    # Horner, one rounding per step (k = d-1 .. 0)
    out.b32 = (r.b32 << 23) + p.b32   # shl.b32 + add.s32: the low bits of r hold floor(a)

Its three forms differ only in where PTX's ``.ftz`` sits (see VARIANTS). Every step here is the exact fp32
operation of fa4num.fp.scalar (round-to-odd exact rounding, NVIDIA's canonical NaN 0x7FFFFFFF, ftz as decided
there), and the final add is integer arithmetic on the bits modulo 2^32, so inputs FA4 never feeds it
(NaN, +-inf, x >= 128, subnormals) give what the GPU gives.

Speed: ``fast_steps`` computes the same bits with vectorisable native operations, proven equal for every input
except, with ftz arithmetic (asm form), where a Horner value falls below 2^-125 in magnitude (only with unusual
coefficients); it reports those inputs, which ``exact_steps`` recomputes with the fa4num.fp.scalar operations. A first
pass takes the floor form of add.rm, which covers x <= 2^22 (the softmax range); only if some input lies above
does a second pass use the general form.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numba import njit, prange

from fa4num.constants import EX2_CLAMP, EX2_ROUND_SHIFTER, POLY_EX2
from fa4num.fp import scalar
from fa4num.fp.arrays import as_float32, tensor_device, wrap
from fa4num.polys import resolve

__all__ = ["POLY_EX2", "VARIANTS", "Variant", "fa4_emulated", "poly_coeffs", "resolve_variant", "horner_tuple",
           "exact_steps", "fast_steps"]

# FA4's coefficient sets (utils.py POLY_EX2, c0 first) and the two constants of its instruction sequence:
# 0fC2FE0000 (the clamp) and 0f4B400000 = 2^23 + 2^22 (the rounding shifter, fp32_round_int); see fa4num.constants.
CLAMP = EX2_CLAMP
SHIFTER = EX2_ROUND_SHIFTER
# below this, add.rm(a, SHIFTER) == SHIFTER + floor(a) (see _add_rm_shifter)
_FAST_MAX = np.float32(4194304.0)
# ftz arithmetic equals plain IEEE arithmetic while no operand or result is below 2^-126; a Horner value of at
# least 2^-125 after rounding came from an exact value above 2^-126.
_FTZ_SAFE = np.float32(2.0 ** -125)
_SIGN = np.uint32(0x80000000)
_MIN_NORMAL32 = np.float32(2.0 ** -126)


@dataclass(frozen=True)
class Variant:
    """Where FA4 puts PTX's .ftz in one form of its exp2 emulation."""
    name: str
    fa4_function: str        # the function in flash_attn/cute/utils.py
    ftz_max: bool            # max.f32 vs -127
    ftz_round: bool          # add.rm.f32 with 0f4B400000
    ftz_arith: bool          # the two sub.rn and the Horner fma.rn
    description: str


VARIANTS = {
    "packed": Variant("packed", "ex2_emulation_2", False, False, False,
                      "SM100 softmax path: max.f32, add.rm.f32x2, sub.rn.f32x2, fma.rn.f32x2 (no ftz anywhere; "
                      "cute.arch.*_packed_f32x2 with the DSL default ftz=None)"),
    "scalar": Variant("scalar", "ex2_emulation", False, True, False,
                      "add.rm.ftz.f32 from inline PTX (add_round_down); max, sub and the NVVM-contracted "
                      "fma.rn.f32 without ftz"),
    "asm": Variant("asm", "e2e_asm2", True, True, True,
                   "all-PTX form: max.ftz, add.rm.ftz.f32x2, sub.rn.ftz.f32x2, fma.rn.ftz.f32x2"),
}


def resolve_variant(variant) -> Variant:
    """The Variant (where PTX's .ftz sits) of one form of FA4's exp2 emulation, by name.

    Parameters
    ----------
    variant : {"packed", "scalar", "asm"}
        "packed" = ex2_emulation_2 (SM100 softmax path, no ftz), "scalar" = ex2_emulation (add.rm.ftz only),
        "asm" = e2e_asm2 (every step .ftz).

    Returns
    -------
    Variant

    Raises
    ------
    ValueError
        For any other value.

    Examples
    --------
    >>> v = resolve_variant("scalar")
    >>> v.fa4_function, v.ftz_max, v.ftz_round, v.ftz_arith
    ('ex2_emulation', False, True, False)
    >>> resolve_variant("fast")
    Traceback (most recent call last):
        ...
    ValueError: variant must be one of ['asm', 'packed', 'scalar'], got 'fast'
    """
    if not isinstance(variant, str) or variant not in VARIANTS:
        raise ValueError(f"variant must be one of {sorted(VARIANTS)}, got {variant!r}")
    return VARIANTS[variant]


def poly_coeffs(degree=3, *, coeffs=None) -> tuple:
    """The polynomial of one ex2 emulation as a tuple of np.float32, c0 first (FA4's POLY_EX2 order).

    Parameters
    ----------
    degree : int or None
        >= 1; without ``coeffs`` one of FA4's POLY_EX2 degrees (1..5). None with ``coeffs``: the degree the
        coefficients have.
    coeffs : str, sequence of real numbers, optional
        None: FA4's POLY_EX2[degree]. Otherwise anything fa4num.polys.resolve takes: a polys/ set name, a
        text "c0,c1,..." (decimals or 0x fp32 bits) or a sequence; each value exactly an fp32 number (nothing
        is rounded silently), degree + 1 of them.

    Returns
    -------
    tuple of numpy.float32, length degree + 1

    Raises
    ------
    ValueError
        For a bad degree, a wrong number of coefficients, or a coefficient that is not finite and exact in fp32.

    Examples
    --------
    >>> [float(c) for c in poly_coeffs(3)]
    [1.0, 0.6951461434364319, 0.22756439447402954, 0.07711908966302872]
    >>> c = poly_coeffs(1, coeffs=(1.0, 0.5))
    >>> [float(a) for a in c], c[0].dtype.name
    ([1.0, 0.5], 'float32')
    >>> len(poly_coeffs(None, coeffs="fa4num-minimax-deg5"))
    6
    >>> poly_coeffs(1, coeffs=(1.0, 0.1))
    Traceback (most recent call last):
        ...
    ValueError: coeffs: c1 = 0.1 is not exactly an fp32 number; ...
    """
    if coeffs is None or degree is not None:
        if isinstance(degree, bool) or not isinstance(degree, numbers.Integral) or degree < 1:
            raise ValueError(f"degree must be an integer >= 1 (FA4's POLY_EX2 has degrees {sorted(POLY_EX2)}), "
                             f"got {degree!r}")
        degree = int(degree)
    if coeffs is None:
        if degree not in POLY_EX2:
            raise ValueError(f"degree must be one of {sorted(POLY_EX2)} without coeffs (FA4's POLY_EX2), got "
                             f"{degree}; pass coeffs=(c0, ..., c{degree}) for other degrees")
        return tuple(np.float32(c) for c in POLY_EX2[degree])
    return tuple(np.float32(c) for c in resolve(coeffs, degree=degree).coeffs)


# --- scalar kernels (reversed coefficient tuple rc = (c_d, ..., c0): Horner order) --------------------------
@njit(cache=True, inline="always")
def _flush(v):
    """PTX .ftz on an operand: a subnormal becomes a zero of its sign (select form, vectorises)."""
    tiny = abs(v) < _MIN_NORMAL32 and v != np.float32(0.0)
    return scalar.u32_to_f32(scalar.f32_to_u32(v) & _SIGN) if tiny else v


@njit(cache=True)
def exact_steps(x, rc, ftz_max, ftz_round, ftz_arith):
    """FA4's exp2 of one float32, each step the exact PTX operation from fa4num.fp.scalar.

    Mirrors flash_attn/cute/utils.py ``ex2_emulation`` / ``ex2_emulation_2`` / ``e2e_asm2`` step by step: max vs
    -127, add.rm with 0f4B400000, two sub.rn, Horner fma.rn, then shl.b32 + add.s32 on the bits (module
    docstring). Numba scalar kernel (callable from Python; the array function is fa4_emulated).

    Parameters
    ----------
    x : float32
    rc : tuple of float32
        Coefficients in Horner order (c_d, ..., c0), from horner_tuple.
    ftz_max, ftz_round, ftz_arith : bool
        The Variant's .ftz flags: on the max, on the add.rm, on the subs and fmas.

    Returns
    -------
    float32

    Examples
    --------
    >>> import numpy as np
    >>> v = VARIANTS["packed"]
    >>> rc = horner_tuple(poly_coeffs(3), v)
    >>> float(exact_steps(np.float32(-1.0), rc, v.ftz_max, v.ftz_round, v.ftz_arith))
    0.5
    >>> bool(exact_steps(np.float32(-0.3), rc, False, False, False) == fa4_emulated(np.float32(-0.3)))
    True
    """
    a = scalar.f32_max(x, CLAMP, ftz_max)                            # cute.arch.fmax / max{.ftz}.f32
    r = scalar.f32_add(a, SHIFTER, scalar.RM, ftz_round)              # add_round_down / add.rm{.ftz}
    t = scalar.f32_sub(r, SHIFTER, scalar.RN, ftz_arith)              # x_rounded_back, sub.rn
    f = scalar.f32_sub(a, t, scalar.RN, ftz_arith)                    # x_frac, sub.rn
    p = rc[0]
    for k in range(1, len(rc)):
        p = scalar.f32_fma(p, f, rc[k], scalar.RN, ftz_arith)         # evaluate_polynomial(_2): fma.rn
    # combine_int_frac_ex2: shl.b32 then add.s32, wrapping modulo 2^32
    return scalar.u32_to_f32((scalar.f32_to_u32(r) << np.uint32(23)) + scalar.f32_to_u32(p))


@njit(cache=True, inline="always")
def _add_rm_shifter(a):
    """add.rm.f32(a, SHIFTER) for any a >= -127 (+inf included; the clamp has removed NaN), branch-free.

    a <= 2^22: a + SHIFTER lies in [2^23, 2^24], where fp32 values are 1 apart, so rounding down is the floor.
    a > 2^22: a and SHIFTER (a multiple of 2^22) have all their bits within 53 places while a < 2^74, so their
    float64 sum s is exact; above that s = RN64(a + SHIFTER) stays within [a, a + ulp32(a)), whose fp32 floor is
    a either way. Rounding s to fp32 (nearest) and stepping down where that went above s gives RM32(s)."""
    small = SHIFTER + np.floor(a)
    s = np.float64(a) + np.float64(SHIFTER)
    big = np.float32(s)
    if np.float64(big) > s:   # then big is positive and finite, so the fp32 below it has its bits minus one
        big = scalar.u32_to_f32(scalar.f32_to_u32(big) - np.uint32(1))
    return small if a <= _FAST_MAX else big


@njit(cache=True, inline="always")
def fast_steps(x, rc, ftz_max, ftz_round, ftz_arith, wide, degree=-1):
    """The same bits as exact_steps from vectorisable native operations, with a flag where that is not proven.

    Branch-free so that the loop vectorises. The add.rm is _add_rm_shifter (exact for every a >= -127, inf
    included) when ``wide``, else only its floor branch, and then inputs with a > 2^22 are reported; t = r -
    SHIFTER and f = a - t are plain RN subs (never subnormal: f is 0 or at least 2^-24); fma.rn is the hardware
    FMA. With ftz arithmetic (asm form) this holds only while every Horner value has magnitude >= 2^-125 (no
    operand or result is subnormal; coefficients are flushed beforehand), other inputs are reported too.
    Numba scalar kernel, inlined into the sweep loops.

    Parameters
    ----------
    x : float32
    rc : tuple of float32
        Coefficients in Horner order (c_d, ..., c0), from horner_tuple.
    ftz_max, ftz_round, ftz_arith : bool
        The Variant's .ftz flags.
    wide : bool
        Use the add.rm form valid for every input (else only for a <= 2^22, the softmax range).
    degree : int
        The polynomial degree as a compile-time constant (lets LLVM unroll Horner), or -1 for len(rc) - 1.

    Returns
    -------
    (value, bad) : (float32, bool)
        When bad is False, value has exact_steps' bits; when True, value is junk and the caller must use
        exact_steps for this input.

    Examples
    --------
    >>> import numpy as np
    >>> v = VARIANTS["asm"]
    >>> rc = horner_tuple(poly_coeffs(3), v)
    >>> y, bad = fast_steps(np.float32(-0.25), rc, v.ftz_max, v.ftz_round, v.ftz_arith, False)
    >>> bad, y == exact_steps(np.float32(-0.25), rc, v.ftz_max, v.ftz_round, v.ftz_arith)
    (False, True)
    >>> fast_steps(np.float32(1e7), rc, v.ftz_max, v.ftz_round, v.ftz_arith, False)[1]   # above 2^22: reported
    True
    """
    xin = _flush(x) if ftz_max else x
    a = xin if xin > CLAMP else CLAMP            # max(x, -127): NaN compares false -> -127
    ar = _flush(a) if ftz_round else a
    r = _add_rm_shifter(ar) if wide else SHIFTER + np.floor(ar)
    t = r - SHIFTER
    f = a - t
    p = rc[0]
    smallest = abs(p)
    # a compile-time degree (the hot loops pass one) lets LLVM unroll Horner and vectorise the whole loop
    for k in range(1, (len(rc) if degree < 0 else degree + 1)):
        p = scalar.fma_rn_f32(p, f, rc[k])
        smallest = min(smallest, abs(p))
    if p != p:                                   # inf - inf in f (x = +inf), or overflowing coefficients
        p = scalar.canonical_nan()
    bad = (ftz_arith and smallest < _FTZ_SAFE) or (not wide and a > _FAST_MAX)
    return scalar.u32_to_f32((scalar.f32_to_u32(r) << np.uint32(23)) + scalar.f32_to_u32(p)), bad


def _make_narrow_loop(ftz_max: bool, ftz_round: bool, ftz_arith: bool, degree: int):
    """The hot loop for one form and degree, its ftz flags and degree compile-time constants (closure cells,
    which numba's cache keys on), so that the flush and underflow tests of the other forms cost nothing and the
    Horner loop unrolls (the loop then vectorises: about 2x faster than with a run-time degree). A serial loop
    that releases the GIL, run on slices by threads (``_run_threaded``): it compiles about 3x faster than a
    prange loop, which matters because every form and degree is a separate specialisation."""
    @njit(nogil=True, cache=True)
    def narrow(x, rc, out):
        """Fast path, floor form of add.rm (covers x <= 2^22, the softmax range); returns how many it missed."""
        nbad = 0
        for i in range(x.size):
            v, b = fast_steps(x[i], rc, ftz_max, ftz_round, ftz_arith, False, degree)
            out[i] = v
            nbad += b
        return nbad
    return narrow


_MIN_SLICE = 1 << 16   # below this a thread hand-off costs more than it saves
_POOL = []


def _run_threaded(kernel, x, rc, out) -> int:
    """``kernel(x, rc, out)`` (a nogil loop returning a count) on slices of x in numba's thread count of
    threads; returns the summed count."""
    import numba
    nthreads = min(numba.get_num_threads(), max(1, x.size // _MIN_SLICE))
    if nthreads == 1:
        return kernel(x, rc, out)
    if not _POOL or _POOL[0]._max_workers < nthreads:
        from concurrent.futures import ThreadPoolExecutor
        _POOL[:] = [ThreadPoolExecutor(max_workers=nthreads, thread_name_prefix="fa4num-ex2")]
    bounds = np.linspace(0, x.size, nthreads + 1).astype(np.int64)
    parts = [_POOL[0].submit(kernel, x[a:b], rc, out[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
    return sum(f.result() for f in parts)


@lru_cache(maxsize=None)
def _narrow_loop(v: Variant, degree: int):
    """The hot loop of form ``v`` for polynomials of ``degree``, compiled on first use."""
    return _make_narrow_loop(v.ftz_max, v.ftz_round, v.ftz_arith, degree)


@njit(parallel=True, cache=True)
def _wide_loop(x, rc, out, ftz_max, ftz_round, ftz_arith):
    """Fast path for every input (add.rm of large a through float64); returns how many need the exact path."""
    nbad = 0
    for i in prange(x.size):
        v, b = fast_steps(x[i], rc, ftz_max, ftz_round, ftz_arith, True)
        out[i] = v
        nbad += b
    return nbad


@njit(parallel=True, cache=True)
def _fix_loop(x, rc, out, ftz_max, ftz_round, ftz_arith):
    """The exact sequence for the inputs the wide fast path cannot take (ftz arithmetic below 2^-125)."""
    for i in prange(x.size):
        if fast_steps(x[i], rc, ftz_max, ftz_round, ftz_arith, True)[1]:
            out[i] = exact_steps(x[i], rc, ftz_max, ftz_round, ftz_arith)


@njit(parallel=True, cache=True)
def _exact_loop(x, rc, out, ftz_max, ftz_round, ftz_arith):
    for i in prange(x.size):
        out[i] = exact_steps(x[i], rc, ftz_max, ftz_round, ftz_arith)


def horner_tuple(coeffs, variant: Variant) -> tuple:
    """c0-first fp32 coefficients -> the reversed tuple (c_d, ..., c0) the scalar kernels take, in Horner order.

    When the variant's fma has .ftz, subnormal coefficients are flushed to zeros of their sign once here (they are
    fma operands, so flushing them once is the same as flushing at every step).

    Parameters
    ----------
    coeffs : sequence of float32, c0 first
        As poly_coeffs returns them.
    variant : Variant
        From resolve_variant / VARIANTS.

    Returns
    -------
    tuple of numpy.float32

    Examples
    --------
    >>> import numpy as np
    >>> c = (np.float32(1.0), np.float32(2 ** -130))
    >>> packed, asm = horner_tuple(c, VARIANTS["packed"]), horner_tuple(c, VARIANTS["asm"])   # asm: fma.ftz
    >>> [float(a) for a in packed], [float(a) for a in asm], packed[0].dtype.name
    ([7.346839692639297e-40, 1.0], [0.0, 1.0], 'float32')
    """
    rc = tuple(np.float32(c) for c in reversed(coeffs))
    if variant.ftz_arith:
        rc = tuple(np.copysign(np.float32(0.0), c) if abs(c) < _MIN_NORMAL32 else c for c in rc)
    return rc


def fa4_emulated(x, degree=3, *, coeffs=None, variant="packed", exact_only=False):
    """FA4's software exp2 of each element of ``x``, bit-exact (flash_attn/cute/utils.py ex2_emulation*).

    Parameters
    ----------
    x : float32 array or torch float32 tensor
        Inputs are never cast: float64 raises ValueError.
    degree : int
        Polynomial degree; with ``coeffs=None`` one of 1..5 (FA4's POLY_EX2, default 3 as in FA4).
    coeffs : sequence of float or str, optional
        fp32 coefficients c0, ..., c_degree (c0 first, as POLY_EX2), or a polys/ registry entry name.
    variant : {"packed", "scalar", "asm"}
        "packed" (utils.py ex2_emulation_2, the SM100 softmax path, no ftz), "scalar" (ex2_emulation:
        add.rm.ftz, the rest without ftz), "asm" (e2e_asm2: every instruction .ftz).
    exact_only : bool
        Skip the vectorised fast path and run the fa4num.fp.scalar instruction sequence on every element
        (slower; the result is the same, which the tests check).

    Returns
    -------
    float32 array of x's shape (a tensor when x is one)

    Examples
    --------
    >>> import numpy as np
    >>> y = fa4_emulated(np.array([0.0, -1.0, -0.5], np.float32))
    >>> y[:2].tolist(), abs(float(y[2]) / 2 ** -0.5 - 1) < 9e-5      # exact at integers, 8.8e-5 at worst
    ([1.0, 0.5], True)
    """
    v = resolve_variant(variant)
    rc = horner_tuple(poly_coeffs(degree, coeffs=coeffs), v)
    device = tensor_device(x)
    arr = as_float32(x, "x")
    flat = np.ascontiguousarray(arr).reshape(-1)
    out = np.empty_like(flat)
    flags = (v.ftz_max, v.ftz_round, v.ftz_arith)
    if exact_only:
        _exact_loop(flat, rc, out, *flags)
    elif _run_threaded(_narrow_loop(v, len(rc) - 1), flat, rc, out) and _wide_loop(flat, rc, out, *flags):
        _fix_loop(flat, rc, out, *flags)
    result = out.reshape(np.shape(arr))
    if result.ndim == 0 and device is None and not isinstance(x, np.ndarray):
        result = result[()]
    return wrap(result, device)
