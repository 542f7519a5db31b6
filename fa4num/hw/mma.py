"""Tensor-core accumulation models for the GEMMs of attention: S = Q K^T and O = C + P V.

``mma_chain(a, b, c)`` returns the fp32 matrix D with D[i, j] = C[i, j] + sum_k a[i, k] * b[j, k], computed
the way a chain of MMA instructions computes it: the K axis is cut into consecutive chunks of ``chunk``
elements (one ``wgmma ... k16`` / ``tcgen05.mma`` K step each) and every chunk folds into the running fp32
accumulator with one *fused* sum.

Models (``model=``):

``"wgmma"`` -- the Hopper/Blackwell fused dot-product-add measured by MMA-Sim (Xie et al., arXiv 2511.10909;
docs/notes/emulation-and-accuracy.md) and confirmed on the H200 for bf16 wgmma (docs/notes/h200-measurements.md):

  1. products a*b are exact; each term carries the exponent e_a + e_b of its factors (significands in [1, 2),
     subnormals pinned to the format's minimum exponent), so a product's significand lies in [1, 4);
     a zero term carries the exponent ``e_zero`` (-133 for an fp32 accumulator);
  2. all terms and C are aligned to the largest exponent E and truncated toward zero to F fraction bits
     below 2^E (F = 25 for 16-bit inputs on Hopper and Blackwell);
  3. the truncated terms are summed exactly and the result is rounded toward zero to fp32 (+0 for zero).

``"exact"`` -- the products summed with no intermediate rounding (float64 with Neumaier compensation, which
is exact for 16-bit inputs unless the terms span more than ~2^100) and rounded once to fp32 (RN), per chunk
chain as well: each chunk adds C exactly and rounds once.

``"blas"`` -- float32 matrix products through BLAS (torch/numpy); the fast statistical mode, not bit-exact.

Architecture differences are data (``ACCUMULATORS``), not branches.

Speed: the wgmma model with 16-term chunks (16-bit inputs) first runs in float32/int32 lanes (8 per AVX2
vector; see ``_wgmma_rows_f32`` for why that is exact over the exponent range attention meets) and falls back to
the general float64 kernel for the whole call when a chunk leaves that range (inf/NaN, ``|terms|`` near 2^126, or
nonzero terms all below 2^-102). Both kernels release the GIL and run serially; ``mma_chain`` splits large calls
by rows over threads, and callers that run many small GEMMs (the attention emulators) parallelise above them.
"""
from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from numba import njit, prange

from fa4num.fp.dtypes import DTYPES
from fa4num.fp.scalar import f32_to_u32, f64_to_u64, u32_to_f32, u64_to_f64

MODELS = ("wgmma", "exact", "blas")


@dataclass(frozen=True)
class Accumulator:
    """One MMA instruction family's fused-sum parameters (MMA-Sim simulator/nv.py tables)."""
    fraction_bits: int   # F: bits kept below the largest exponent when terms are aligned
    chunk_bytes: int     # K elements per fused sum = chunk_bytes // input element size (L_max)
    e_zero: int          # exponent a zero term carries into the alignment (fp32 accumulator)


# Hopper wgmma and Blackwell tcgen05 for 16-bit and 8-bit inputs with an fp32 accumulator; Hopper fp8 wgmma
# keeps only 13 bits (F = 13) -- FA4's SM90 path never runs fp8, so it is not listed.
ACCUMULATORS = {
    "sm90": Accumulator(fraction_bits=25, chunk_bytes=32, e_zero=-133),
    "sm100": Accumulator(fraction_bits=25, chunk_bytes=32, e_zero=-133),
}

_ZERO_EXP = -10000   # marks a zero factor; any product with it lands below _ZERO_THRESHOLD (and fits int16)
_ZERO_THRESHOLD = -2000
_SPECIAL_EXP = 600    # above any finite product's or fp32 accumulator's exponent (<= 2 * 127 + 1)


def _dtype_name(a: np.ndarray) -> str:
    name = np.dtype(a.dtype).name
    if name not in DTYPES:
        raise ValueError(f"input dtype must be one of {tuple(DTYPES)}, got {name}")
    return name


def split_exponents(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(value as float64, exponent as int16) for every element, as the wgmma model aligns terms.

    exponent = floor(log2|x|) for normal x, the format's minimum exponent for subnormals (their significands
    are scaled to it), and a large negative marker (-10000) for zeros.

    Parameters
    ----------
    a : array
        bfloat16, float16, float8_e4m3fn, float8_e5m2 or float32 (any shape).

    Returns
    -------
    (values, exponents) : (float64 array, int16 array), both of a's shape
        The values are exact (every input format fits in float64).

    Raises
    ------
    ValueError
        For any other dtype.

    Examples
    --------
    >>> import ml_dtypes, numpy as np
    >>> v, e = split_exponents(np.array([3.0, 2.0 ** -130, 0.0], ml_dtypes.bfloat16))
    >>> v.tolist()[0], e.tolist()
    (3.0, [1, -126, -10000])
    """
    name = _dtype_name(a)
    x = np.asarray(a).astype(np.float64)   # exact: every input format fits in float64
    e = np.empty(x.shape, np.int16)
    # subnormal significands are scaled to the exponent of the smallest normal number
    _exponents(x.reshape(-1), e.reshape(-1), DTYPES[name].min_normal_exp)
    return x, e


@njit(cache=True)
def _exponents(x, e, min_exp):
    for i in range(x.shape[0]):
        ex = np.int16(((f64_to_u64(x[i]) >> np.uint64(52)) & np.uint64(0x7FF)) - np.uint64(1023))
        e[i] = np.int16(_ZERO_EXP) if x[i] == 0.0 else max(ex, np.int16(min_exp))


@dataclass(frozen=True)
class MmaOperand:
    """An MMA input split once into float64 values and int16 alignment exponents, for reuse across many
    ``mma_chain`` calls (attention multiplies the same Q and K block by many tiles). ``role="b"`` operands are
    stored transposed, (K, N), the layout the kernel streams. ``x32`` holds the same values as float32 (exact for
    every input format) for the fast kernel."""
    x: np.ndarray
    e: np.ndarray
    dtype: str
    role: str
    x32: np.ndarray = None

    @property
    def shape(self) -> tuple[int, int]:
        """The logical (rows, K) shape, as the array it was made from."""
        return self.x.shape if self.role == "a" else self.x.shape[::-1]

    def rows(self, sl: slice) -> "MmaOperand":
        """The operand of rows ``sl`` of an "a" operand (a view: no copy, no new split)."""
        if self.role != "a":
            raise ValueError(f"rows() needs an operand with role 'a', got role {self.role!r}")
        return MmaOperand(self.x[sl], self.e[sl], self.dtype, self.role, self.x32[sl])


def mma_operand(x, *, role: str = "a") -> MmaOperand:
    """Prepare ``x`` once (values, exponents, layout) for repeated ``mma_chain`` calls with the same operand.

    Parameters
    ----------
    x : 2-D array
        (M, K) for role "a", (N, K) for role "b"; bfloat16, float16, float8_e4m3fn, float8_e5m2 (or float32).
    role : {"a", "b"}
        Which side of ``mma_chain`` it will be passed as (role "b" is stored transposed).

    Returns
    -------
    MmaOperand

    Raises
    ------
    ValueError
        For another role, a non-2-D x, or an unsupported dtype.

    Examples
    --------
    >>> import ml_dtypes, numpy as np
    >>> q = np.ones((4, 16), ml_dtypes.bfloat16)
    >>> k = mma_operand(np.ones((8, 16), ml_dtypes.bfloat16), role="b")
    >>> float(mma_chain(q, k)[0, 0])
    16.0
    """
    if role not in ("a", "b"):
        raise ValueError(f"role must be 'a' or 'b', got {role!r}")
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"x must be 2-D, got shape {x.shape}")
    v, e = split_exponents(x)
    if role == "b":
        v, e = np.ascontiguousarray(v.T), np.ascontiguousarray(e.T)
    return MmaOperand(v, e, _dtype_name(x), role, v.astype(np.float32))


@njit(cache=True, inline="always")
def _rz_to_f32(v):
    """Round a float64 toward zero to fp32 (normal: keep 24 significant bits; subnormal: multiples of 2^-149;
    above the largest finite value: the largest finite value, as RZ never overflows to inf). Written as
    selects (no branches, no libm call) so that the loops calling it vectorise."""
    # v is a normal float64 here, so clearing the low 29 of its 52 fraction bits truncates it to 24 bits
    r = u64_to_f64(f64_to_u64(v) & np.uint64(0xFFFFFFFFE0000000))
    tiny = np.trunc(v * 2.0 ** 149) * 2.0 ** -149
    r = tiny if abs(v) < 1.1754943508222875e-38 else r
    r = min(max(r, -3.4028234663852886e38), 3.4028234663852886e38)
    r = 0.0 if v == 0.0 else r        # the hardware returns +0 for an exact zero sum
    r = r if abs(v) < math.inf else v   # an inf term (or inf - inf = NaN) passes through, no RZ clamp
    return np.float32(r)


_ROW_BLOCK = 32   # rows per block of the general kernel: one K chunk of b (16 x N float64 + int16) stays in L1


@njit(cache=True, nogil=True)
def _wgmma_general(ax, ae, bxt, bet, c, out, chunk, frac_bits, e_zero, i0, i1):
    """Rows i0..i1 of D, in blocks of ``_ROW_BLOCK`` rows (see ``_wgmma_rows``); every input is allowed."""
    for r0 in range(i0, i1, _ROW_BLOCK):
        _wgmma_rows(ax, ae, bxt, bet, c, out, chunk, frac_bits, e_zero, r0, min(r0 + _ROW_BLOCK, i1))


# Range of the alignment exponent E over which ``_wgmma_rows_f32`` is exact (F <= 25, chunks of 16 terms):
# 2^(F - E) and 2^(E - F) are normal float32 scales for E in [-101, 120], and the truncated sum, below 2^(E + 6),
# stays finite. A chunk whose E is smaller (its nonzero terms all below 2^-101) or larger, or that meets an
# inf/NaN, sends the whole call to the general kernel.
_FAST_E_MIN = -101
_FAST_E_MAX = 120
# sum of terms + trunc(C 2^(F-E)) (|.| < 2^26) must stay below 2^31 - 2^7, where float32(|sum|) is below 2^31
# (and so converts back to int32 exactly)
_INT_LIMIT = 2 ** 31 - 2 ** 26 - 2 ** 7
_FAST_CHUNK = 16   # K elements per fused sum of the fast kernel (16-bit inputs); 16 terms below 2^27 fit int32


@njit(cache=True, nogil=True)
def _wgmma_rows_f32(a32, ae, b32t, bet, c, out, frac_bits, e_zero, i0, i1):
    """Rows i0..i1 of the wgmma chain with chunks of 16 terms (K a multiple of 16: pad with zero terms), in
    float32/int32 lanes; returns False (``out`` then undefined) where a chunk leaves the range in which this
    equals ``_wgmma_rows``.

    Why it is exact: a product of two 16-bit inputs has at most 22 significant bits, so a * b is exact in
    float32 (or, for |a b| < 2^-133, so small that it truncates to 0 either way, as E >= -101), and so is the
    product with the power of two 2^(F - E). ``cvttps2dq`` (int32 conversion, which truncates toward zero) then
    gives the term's truncation to F bits below 2^E exactly, |term| < 2^27, and 16 of them sum exactly in
    int32. C's truncation (|.| < 2^26) is added after an overflow check; the sum S is rounded toward zero to
    24 significant bits (float32(|S|) rounds to nearest: one ulp less where that rounded up) and scaled by
    2^(E - F) in its exponent field, exactly (the result is a normal number: E - F >= -126).

    Speed: per chunk, one loop over the N columns per two terms takes the products' exponent max in int16 lanes
    (16 per AVX2 vector), then one loop over the N columns does the rest of a column's work (scale, the 16 terms
    with the chunk's K loop unrolled, rounding) in registers, 8 columns per vector. A column that leaves the
    range is marked by a NaN in the accumulator (which every later chunk keeps: its exponent field is 255),
    rather than by a flag array, whose extra stores would stop LLVM from vectorising the loop."""
    kdim = a32.shape[1]
    n = b32t.shape[1]
    acc = np.empty(n, np.float32)
    pmax = np.empty(n, np.int16)
    bad = np.int32(0)
    for i in range(i0, i1):
        for j in range(n):
            acc[j] = c[i, j]
        for k0 in range(0, kdim, _FAST_CHUNK):
            # the products' largest exponent (a zero factor's marker keeps its products below -2000), two terms
            # per pass over the columns
            e0, e1 = ae[i, k0], ae[i, k0 + 1]
            for j in range(n):
                pmax[j] = max(np.int16(e0 + bet[k0, j]), np.int16(e1 + bet[k0 + 1, j]))
            for k in range(k0 + 2, k0 + _FAST_CHUNK, 2):
                e0, e1 = ae[i, k], ae[i, k + 1]
                for j in range(n):
                    pmax[j] = max(pmax[j], max(np.int16(e0 + bet[k, j]), np.int16(e1 + bet[k + 1, j])))
            for j in range(n):
                v = acc[j]
                # the accumulator's exponent (subnormals pinned at -126, zero at e_zero; inf/NaN give 128)
                ev = np.int32(np.int32((f32_to_u32(v) >> np.uint32(23)) & np.uint32(0xFF)) - np.int32(127))
                ev = max(ev, np.int32(-126)) if v != 0 else np.int32(e_zero)
                pm = np.int32(pmax[j])
                e = max(pm, ev)
                # outside [E_MIN, E_MAX] the scales below are wrong, unless every term and C is zero (then
                # any scale gives +0, as the general kernel does)
                out_of_range = np.int32(e > _FAST_E_MAX) | (
                    np.int32(e < _FAST_E_MIN) & (np.int32(v != 0) | np.int32(pm > _ZERO_THRESHOLD)))
                e = max(e, np.int32(_FAST_E_MIN))
                scale = u32_to_f32(np.uint32(np.int32(127 + frac_bits) - e) << np.uint32(23))
                ctr = np.int32(v * scale)
                s = np.int32(0)
                for kk in range(_FAST_CHUNK):
                    s = np.int32(s + np.int32(a32[i, k0 + kk] * b32t[k0 + kk, j] * scale))
                out_of_range |= np.int32(s > _INT_LIMIT) | np.int32(s < -_INT_LIMIT)
                t = np.int32(s + ctr)
                neg = t < 0
                x = np.int32(-t) if neg else t
                y = np.float32(x)
                yb = np.int32(f32_to_u32(y))
                yb = np.int32(yb - np.int32(np.int32(y) > x))                      # RN -> RZ
                yb = np.int32(yb + np.int32(np.int32(e - np.int32(frac_bits)) << 23))  # times 2^(E - F)
                r = u32_to_f32(np.uint32(yb))
                r = -r if neg else r
                r = r if x != 0 else np.float32(0)     # the hardware returns +0 for an exact zero sum
                acc[j] = np.float32(np.nan) if out_of_range != 0 else r
        for j in range(n):
            out[i, j] = acc[j]
            bad |= np.int32(acc[j] != acc[j])
    return bad == 0


def _pad_k(x, e, axis):
    """(x, e) with zero terms appended along the K axis up to a multiple of ``_FAST_CHUNK``: a zero term adds
    nothing, and its exponent marker lies below every other term's."""
    extra = -x.shape[axis] % _FAST_CHUNK
    if not extra:
        return x, e
    pad = [(0, 0), (0, 0)]
    pad[axis] = (0, extra)
    return np.pad(x, pad), np.pad(e, pad, constant_values=_ZERO_EXP)


@njit(cache=True, inline="always")
def _acc_exponent(v, e_zero):
    """Exponent the fp32 accumulator carries into the alignment: subnormals pinned at -126, zero at e_zero."""
    ex = np.int16(((f64_to_u64(v) >> np.uint64(52)) & np.uint64(0x7FF)) - np.uint64(1023))
    return max(ex, np.int16(-126)) if v != 0.0 else np.int16(e_zero)


@njit(cache=True, nogil=True)
def _wgmma_rows(ax, ae, bxt, bet, c, out, chunk, frac_bits, e_zero, i0, i1):
    """Rows i0..i1 of the wgmma chain. The loops over the N columns are innermost and branch-free, so LLVM
    vectorises them: the alignment exponent max in int16 lanes, the truncated sums in float64 lanes. Every
    float64 operation here is exact (16-bit products, power-of-two scales, integer sums below 2^33), so the
    order of the sums cannot change the result."""
    kdim = ax.shape[1]
    n = bxt.shape[1]
    rows = i1 - i0
    acc = np.empty((rows, n), np.float64)
    eacc = np.empty((rows, n), np.int16)
    emax = np.empty(n, np.int16)
    scale = np.empty(n, np.float64)
    unscale = np.empty(n, np.float64)
    s = np.empty(n, np.float64)
    zb = np.empty(n, np.bool_)
    for r in range(rows):
        for j in range(n):
            acc[r, j] = c[i0 + r, j]
            eacc[r, j] = _acc_exponent(acc[r, j], e_zero)
    # a zero product carries e_zero into the max; that matters only if e_zero > -126, as the accumulator
    # already carries at least min(-126, e_zero) (true of every table entry, which skips this work)
    zero_terms = e_zero > -126
    for k0 in range(0, kdim, chunk):
        k1 = min(k0 + chunk, kdim)
        for j in range(n):
            zb[j] = False
        if zero_terms:
            for k in range(k0, k1):
                for j in range(n):
                    zb[j] |= bet[k, j] < _ZERO_THRESHOLD
        for r in range(rows):
            i = i0 + r
            for j in range(n):
                emax[j] = eacc[r, j]
            for k in range(k0, k1):
                ea = ae[i, k]
                for j in range(n):
                    emax[j] = max(emax[j], np.int16(ea + bet[k, j]))
            if zero_terms:
                za = False
                for k in range(k0, k1):
                    za |= ae[i, k] < _ZERO_THRESHOLD
                for j in range(n):
                    if (za or zb[j]) and emax[j] < e_zero:
                        emax[j] = np.int16(e_zero)
            for j in range(n):
                # 2^(F - E) and 2^(E - F) built from their bits; every term times them is exact in float64.
                # E > _SPECIAL_EXP only where an inf/NaN takes part: scale 1, and IEEE's inf/NaN sums decide
                e = np.int64(min(emax[j], np.int16(_SPECIAL_EXP)))
                sp = e == _SPECIAL_EXP
                scale[j] = 1.0 if sp else u64_to_f64(np.uint64(1023 + frac_bits - e) << np.uint64(52))
                unscale[j] = 1.0 if sp else u64_to_f64(np.uint64(1023 - frac_bits + e) << np.uint64(52))
                s[j] = np.trunc(acc[r, j] * scale[j])
            for k in range(k0, k1):
                a = ax[i, k]
                for j in range(n):
                    s[j] += np.trunc(a * bxt[k, j] * scale[j])
            for j in range(n):
                v = np.float64(_rz_to_f32(s[j] * unscale[j]))
                acc[r, j] = v
                eacc[r, j] = _acc_exponent(v, e_zero)
    for r in range(rows):
        for j in range(n):
            out[i0 + r, j] = np.float32(acc[r, j])


@njit(cache=True, parallel=True)
def _chain_exact(ax, bx, c, out, chunk):
    m, kdim = ax.shape
    n = bx.shape[0]
    for i in prange(m):
        for j in range(n):
            acc = c[i, j]
            for k0 in range(0, kdim, chunk):
                k1 = min(k0 + chunk, kdim)
                s = np.float64(acc)
                comp = 0.0
                for k in range(k0, k1):
                    p = ax[i, k] * bx[j, k]
                    t = s + p
                    if abs(s) >= abs(p):
                        comp += (s - t) + p
                    else:
                        comp += (p - t) + s
                    s = t
                acc = np.float32(s + comp)
            out[i, j] = acc


@njit(cache=True, nogil=True)
def _sgemm_kernel(a, bt, out):
    for i in range(a.shape[0]):
        for k in range(a.shape[1]):
            x = a[i, k]
            for j in range(bt.shape[1]):
                out[i, j] += x * bt[k, j]     # mul.rn then add.rn (no FMA contraction), k in order


def sgemm(a, b, c=None) -> np.ndarray:
    """float32 ``c + (a @ b.T)`` on one thread, without the GIL: each product rounded, added in k order from
    0, and the sum added to c.

    The statistical mode's GEMM for the many small tiles of attention: a multithreaded BLAS call on a
    128 x 128 x 128 tile costs more in thread hand-offs (and, on a busy machine, in spinning threads) than the
    arithmetic, and callers already run tiles in parallel.

    Parameters
    ----------
    a : (M, K) array
        Any real dtype, converted to float32.
    b : (N, K) array
        Any real dtype, converted to float32.
    c : (M, N) array, optional
        Added (in float32) to the product sum.

    Returns
    -------
    numpy.ndarray, float32, shape (M, N)

    Raises
    ------
    ValueError
        When a and b are not (M, K) and (N, K).

    Examples
    --------
    >>> float(sgemm(np.ones((2, 3)), np.full((4, 3), 0.5), np.ones((2, 4)))[1, 2])
    2.5
    """
    a = np.asarray(a, np.float32)
    b = np.asarray(b, np.float32)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"a and b must be (M, K) and (N, K); got {a.shape} and {b.shape}")
    out = np.zeros((a.shape[0], b.shape[0]), np.float32)
    _sgemm_kernel(np.ascontiguousarray(a), np.ascontiguousarray(b.T), out)
    return out if c is None else (c + out).astype(np.float32)


def chunk_elements(dtype, arch: str = "sm90") -> int:
    """K elements per fused sum (one MMA K step) for inputs of ``dtype``: 16 for 16-bit, 32 for 8-bit inputs.

    ``ACCUMULATORS[arch].chunk_bytes // itemsize``: a wgmma ``k16`` (tcgen05 likewise) consumes 32 bytes of K per
    instruction, and each such chunk folds into the fp32 accumulator with one fused sum (module docstring).

    Parameters
    ----------
    dtype : numpy dtype or its name
        The input format: "bfloat16", "float16", "float8_e4m3fn" or "float8_e5m2" (ml_dtypes names).
    arch : {"sm90", "sm100"}
        A key of ACCUMULATORS.

    Returns
    -------
    int

    Raises
    ------
    KeyError
        For an arch that ACCUMULATORS lacks.

    Examples
    --------
    >>> import ml_dtypes
    >>> chunk_elements("bfloat16"), chunk_elements(ml_dtypes.float8_e4m3fn, "sm100")
    (16, 32)
    """
    return ACCUMULATORS[arch].chunk_bytes // np.dtype(dtype).itemsize


def mma_chain(a, b, c=None, *, model: str = "wgmma", arch: str = "sm90", chunk: int | None = None) -> np.ndarray:
    """D = C + a @ b.T as a chain of tensor-core MMA steps (see the module docstring for the models).

    The K axis is cut into consecutive chunks of ``chunk`` elements, each folded into the running fp32
    accumulator with one fused sum: "wgmma" (Hopper/Blackwell: terms aligned to the largest exponent and
    truncated to 25 fraction bits, summed, rounded toward zero), "exact" (one RN rounding per chunk) or "blas"
    (float32 BLAS, statistical).

    Parameters
    ----------
    a : (M, K) array, or an ``mma_operand(..., role="a")``
        bfloat16, float16, float8_e4m3fn or float8_e5m2.
    b : (N, K) array of a's dtype, or an ``mma_operand(..., role="b")``
    c : (M, N) float32 array, optional
        The accumulator; None starts from zeros (``wgmma`` with scale-d = 0).
    model : {"wgmma", "exact", "blas"}
    arch : {"sm90", "sm100"}
        The ACCUMULATORS entry (fraction bits, chunk size, zero-term exponent).
    chunk : int, optional
        K elements per instruction (>= 1); default ``chunk_elements(a.dtype, arch)``.

    Returns
    -------
    numpy.ndarray, float32, shape (M, N)

    Raises
    ------
    ValueError
        For an unknown model or arch, operands of the wrong role, shape or dtype, or differing dtypes, a c of
        the wrong shape, or chunk < 1.

    Examples
    --------
    >>> import ml_dtypes, numpy as np
    >>> a = np.array([[2.0 ** 30, 1.0, -(2.0 ** 30)] + [0.0] * 13], ml_dtypes.bfloat16)
    >>> float(mma_chain(a, np.ones((1, 16), ml_dtypes.bfloat16))[0, 0])   # 1.0 lies below the 25 kept bits
    0.0
    >>> float(mma_chain(a, np.ones((1, 16), ml_dtypes.bfloat16), model="exact")[0, 0])
    1.0
    """
    if model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}, got {model!r}")
    if arch not in ACCUMULATORS:
        raise ValueError(f"arch must be one of {tuple(ACCUMULATORS)}, got {arch!r}")
    for name, x, role in (("a", a, "a"), ("b", b, "b")):
        if isinstance(x, MmaOperand) and x.role != role:
            raise ValueError(f"{name} must be an mma_operand with role {role!r}, got role {x.role!r}")
    a = a if isinstance(a, MmaOperand) else np.asarray(a)
    b = b if isinstance(b, MmaOperand) else np.asarray(b)
    if len(a.shape) != 2 or len(b.shape) != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"a and b must be (M, K) and (N, K); got {a.shape} and {b.shape}")
    a_dt = a.dtype if isinstance(a, MmaOperand) else _dtype_name(a)
    b_dt = b.dtype if isinstance(b, MmaOperand) else np.dtype(b.dtype).name
    if a_dt != b_dt:
        raise ValueError(f"a and b must have one dtype; got {a_dt} and {b_dt}")
    m, n = a.shape[0], b.shape[0]
    if c is None:
        c = np.zeros((m, n), np.float32)
    else:
        c = np.ascontiguousarray(c, dtype=np.float32)
        if c.shape != (m, n):
            raise ValueError(f"c must have shape {(m, n)}, got {c.shape}")
    if chunk is None:
        chunk = chunk_elements(a_dt, arch)
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    if model == "blas":
        return c + _values(a, "a").astype(np.float32) @ _values(b, "b").astype(np.float32).T
    out = np.empty((m, n), np.float32)
    if model == "exact":
        _chain_exact(np.ascontiguousarray(_values(a, "a")), np.ascontiguousarray(_values(b, "b")), c, out, chunk)
        return out
    acc = ACCUMULATORS[arch]
    pa = a if isinstance(a, MmaOperand) else mma_operand(a, role="a")
    pb = b if isinstance(b, MmaOperand) else mma_operand(b, role="b")
    _wgmma(pa, pb, c, out, chunk, acc)
    return out


_PARALLEL_MACS = 1 << 22   # below this a thread hand-off costs more than it saves
_POOL = []


def _wgmma(pa: MmaOperand, pb: MmaOperand, c, out, chunk: int, acc: Accumulator) -> None:
    """Run the wgmma kernels on row slices: ``_wgmma_rows_f32`` where it applies, else (or where it reports a
    chunk out of its range) ``_wgmma_general``. Calls of at least ``_PARALLEL_MACS`` multiply-adds are cut into
    one row slice per numba thread (the kernels release the GIL)."""
    import numba
    m, kdim = pa.x.shape
    n = pb.x.shape[1]
    # the int32 bound needs chunks of 16 terms and F <= 25; an inf/NaN factor (exponent 1024) can meet a
    # zero one (NaN), which the fast kernel's exponent check does not see
    fast = (chunk == _FAST_CHUNK and acc.fraction_bits <= 25 and acc.e_zero <= -126
            and (pa.e.size == 0 or pa.e.max() < 1024) and (pb.e.size == 0 or pb.e.max() < 1024))
    if fast:
        a32, ae = _pad_k(pa.x32, pa.e, 1)
        b32t, bet = _pad_k(pb.x32, pb.e, 0)
    args = (c, out, chunk, acc.fraction_bits, acc.e_zero)

    def rows(i0, i1):
        if not (fast and _wgmma_rows_f32(a32, ae, b32t, bet, c, out, acc.fraction_bits, acc.e_zero, i0, i1)):
            _wgmma_general(pa.x, pa.e, pb.x, pb.e, *args, i0, i1)

    nthreads = min(numba.get_num_threads(), m // _ROW_BLOCK, max(1, m * n * kdim // _PARALLEL_MACS))
    if nthreads <= 1:
        rows(0, m)
        return
    if not _POOL or _POOL[0]._max_workers < nthreads:
        _POOL[:] = [ThreadPoolExecutor(max_workers=nthreads, thread_name_prefix="fa4num-mma")]
    bounds = np.linspace(0, m, nthreads + 1).astype(np.int64)
    for job in [_POOL[0].submit(rows, a, b) for a, b in zip(bounds[:-1], bounds[1:])]:
        job.result()


def _values(x, role):
    """float64 values of an operand in its logical (rows, K) layout."""
    if isinstance(x, MmaOperand):
        return x.x if role == "a" else x.x.T
    return np.asarray(x).astype(np.float64)


__all__ = ["ACCUMULATORS", "Accumulator", "MODELS", "MmaOperand", "chunk_elements", "mma_chain", "mma_operand",
           "sgemm", "split_exponents"]
