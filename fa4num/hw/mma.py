"""Tensor-core accumulation models for the GEMMs of attention: S = Q K^T and O = C + P V.

``mma_chain(a, b, c)`` returns the fp32 matrix D with D[i, j] = C[i, j] + sum_k a[i, k] * b[j, k], computed
the way a chain of MMA instructions computes it: the K axis is cut into consecutive chunks of ``chunk``
elements (one ``wgmma ... k16`` / ``tcgen05.mma`` K step each) and every chunk folds into the running fp32
accumulator with one *fused* sum.

Models (``model=``):

``"wgmma"`` -- the Hopper/Blackwell fused dot-product-add measured by MMA-Sim (Xie et al., arXiv 2511.10909;
reference/emulation-and-accuracy.md §4) and confirmed on the H200 for bf16 wgmma (h200-measurements.md §4):
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
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit, prange

from fa4num.fp._core import f64_to_u64, u64_to_f64

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

# exponent of the smallest normal number of each input format: subnormal significands are scaled to it
_MIN_EXP = {"bfloat16": -126, "float16": -14, "float8_e4m3fn": -6, "float8_e5m2": -14, "float32": -126}
_ZERO_EXP = -20000   # marks a zero factor; any product with it lands far below _ZERO_THRESHOLD
_ZERO_THRESHOLD = -2000


def _dtype_name(a: np.ndarray) -> str:
    name = np.dtype(a.dtype).name
    if name not in _MIN_EXP:
        raise ValueError(f"input dtype must be one of {tuple(_MIN_EXP)}, got {name}")
    return name


def split_exponents(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(value as float64, exponent as int32) for every element; exponent = floor(log2|x|) for normal x, the
    format's minimum exponent for subnormals, and a large negative marker for zeros."""
    name = _dtype_name(a)
    x = np.asarray(a).astype(np.float64)   # exact: every input format fits in float64
    _, e = np.frexp(x)
    e = (e - 1).astype(np.int32)
    e = np.maximum(e, np.int32(_MIN_EXP[name]))
    e[x == 0] = _ZERO_EXP
    return x, e


@njit(cache=True, inline="always")
def _rz_to_f32(v):
    """Round a float64 toward zero to fp32 (normal: keep 24 significant bits; subnormal: multiples of 2^-149;
    above the largest finite value: the largest finite value, as RZ never overflows to inf)."""
    if v == 0.0:
        return np.float32(0.0)        # the hardware returns +0 for an exact zero sum
    if not math.isfinite(v):
        return np.float32(v)          # an inf term (or inf - inf = NaN) passes through, no RZ clamp
    m, ex = math.frexp(v)             # v = m * 2^ex, 0.5 <= |m| < 1
    if ex - 1 < -126:
        r = np.trunc(v * 2.0 ** 149) * 2.0 ** -149
    else:
        r = np.trunc(m * 16777216.0) * 2.0 ** (ex - 24)
    if r > 3.4028234663852886e38:
        r = 3.4028234663852886e38
    elif r < -3.4028234663852886e38:
        r = -3.4028234663852886e38
    return np.float32(r)


@njit(cache=True, parallel=True)
def _chain_wgmma(ax, ae, bxt, bet, c, out, chunk, frac_bits, e_zero):
    """Rows of D in parallel; within a row every loop runs over the N columns (contiguous in b^T), so the
    alignment max and the truncated sums vectorise."""
    m, kdim = ax.shape
    n = bxt.shape[1]
    for i in prange(m):
        acc = np.empty(n, np.float64)
        emax = np.empty(n, np.int64)
        scale = np.empty(n, np.float64)
        s = np.empty(n, np.float64)
        anyzero = np.empty(n, np.bool_)
        for j in range(n):
            acc[j] = c[i, j]
        for k0 in range(0, kdim, chunk):
            k1 = min(k0 + chunk, kdim)
            for j in range(n):
                # the accumulator's exponent (fp32 subnormals pinned at -126; zero carries e_zero)
                v = acc[j]
                ex = np.int64((f64_to_u64(v) >> np.uint64(52)) & np.uint64(0x7FF)) - 1023
                emax[j] = max(ex, -126) if v != 0.0 else e_zero
                anyzero[j] = False
            for k in range(k0, k1):
                ea = ae[i, k]
                for j in range(n):
                    t = ea + bet[k, j]
                    if t > emax[j]:
                        emax[j] = t
                    anyzero[j] |= t < _ZERO_THRESHOLD
            for j in range(n):
                if anyzero[j] and emax[j] < e_zero:
                    emax[j] = e_zero
                # 2^(F - E) built from its bits; every term times it is exact in float64
                scale[j] = u64_to_f64(np.uint64(1023 + frac_bits - emax[j]) << np.uint64(52))
                s[j] = np.trunc(acc[j] * scale[j])
            for k in range(k0, k1):
                a = ax[i, k]
                for j in range(n):
                    s[j] += np.trunc(a * bxt[k, j] * scale[j])
            for j in range(n):
                acc[j] = np.float64(_rz_to_f32(s[j] / scale[j]))
        for j in range(n):
            out[i, j] = np.float32(acc[j])


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


def chunk_elements(dtype, arch: str = "sm90") -> int:
    """K elements per fused sum for inputs of ``dtype`` (16 for 16-bit, 32 for 8-bit inputs)."""
    return ACCUMULATORS[arch].chunk_bytes // np.dtype(dtype).itemsize


def mma_chain(a, b, c=None, *, model: str = "wgmma", arch: str = "sm90", chunk: int | None = None) -> np.ndarray:
    """D = C + a @ b.T as a chain of tensor-core MMA steps (see the module docstring for the models).

    a: (M, K) and b: (N, K) arrays of one input format (bfloat16, float16, float8_e4m3fn, float8_e5m2);
    c: (M, N) float32 accumulator or None (zero-initialised, as ``wgmma`` with scale-d = 0).
    chunk: K elements per instruction (default: ``chunk_elements(a.dtype, arch)``).
    Returns float32 (M, N).
    """
    if model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}, got {model!r}")
    if arch not in ACCUMULATORS:
        raise ValueError(f"arch must be one of {tuple(ACCUMULATORS)}, got {arch!r}")
    a = np.asarray(a)
    b = np.asarray(b)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"a and b must be (M, K) and (N, K); got {a.shape} and {b.shape}")
    if a.dtype != b.dtype:
        raise ValueError(f"a and b must have one dtype; got {a.dtype} and {b.dtype}")
    _dtype_name(a)
    m, n = a.shape[0], b.shape[0]
    if c is None:
        c = np.zeros((m, n), np.float32)
    else:
        c = np.ascontiguousarray(c, dtype=np.float32)
        if c.shape != (m, n):
            raise ValueError(f"c must have shape {(m, n)}, got {c.shape}")
    if model == "blas":
        return c + np.asarray(a, np.float32) @ np.asarray(b, np.float32).T
    acc = ACCUMULATORS[arch]
    if chunk is None:
        chunk = chunk_elements(a.dtype, arch)
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    out = np.empty((m, n), np.float32)
    if model == "exact":
        _chain_exact(np.ascontiguousarray(a, dtype=np.float64), np.ascontiguousarray(b, dtype=np.float64),
                     c, out, chunk)
        return out
    ax, ae = split_exponents(a)
    bx, be = split_exponents(b)
    _chain_wgmma(ax, ae, np.ascontiguousarray(bx.T), np.ascontiguousarray(be.T), c, out, chunk,
                 acc.fraction_bits, acc.e_zero)
    return out


__all__ = ["ACCUMULATORS", "Accumulator", "MODELS", "chunk_elements", "mma_chain", "split_exponents"]
