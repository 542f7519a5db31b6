"""Fused compare loops for ``fa4num gpu verify`` (CPU only, numba): GPU bits against emulator bits, no copies.

The GPU returns every result zero-extended to 32 bits (fa4num.gpu.ptx); the emulators return bits in the
result's own width (uint32 for fp32, uint16 for bf16/fp16, uint8 for fp8). These loops read both as they are and
widen element by element, so no widened temporary of the emulator output is ever made. A count runs in parallel
(the common case: 0); the indexes of the first mismatches are found by a serial scan only when the count is not 0.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(parallel=True, cache=True, nogil=True)
def iota(start, out):
    """out[i] = (start + i) mod 2^32: the fp32 bit patterns of one chunk of an exhaustive sweep."""
    for i in prange(out.size):
        out[i] = np.uint32((start + i) & 0xFFFFFFFF)


@njit(parallel=True, cache=True, nogil=True)
def count_mismatches(gpu, emu):
    """How many i have gpu[i] (uint32) != emu[i] zero-extended to 32 bits (emu: uint32, uint16 or uint8)."""
    n = 0
    for i in prange(gpu.size):
        n += gpu[i] != np.uint32(emu[i])
    return n


@njit(cache=True, nogil=True)
def first_mismatches(gpu, emu, limit):
    """Indexes of the first ``limit`` mismatches of :func:`count_mismatches` (serial; only run when it found some)."""
    out = np.empty(limit, np.int64)
    k = 0
    for i in range(gpu.size):
        if gpu[i] != np.uint32(emu[i]):
            out[k] = i
            k += 1
            if k == limit:
                break
    return out[:k]


@njit(cache=True, inline="always")
def _pair8(hi, lo):
    return (np.uint32(hi) << np.uint32(8)) | np.uint32(lo)


@njit(parallel=True, cache=True, nogil=True)
def count_mismatches_neg_pair(gpu, e):
    """Mismatches of ``cvt.rn.satfinite.{e4m3,e5m2}x2.f32 d, x, -x`` over inputs [block | block with the sign
    flipped]: e holds the single fp8 conversion (uint8) of those 2h inputs, so the conversion of -x for input i
    of the first half is e[i + h] and vice versa; gpu[i] must be e[i] << 8 | e[i + h] and gpu[i + h] must be
    e[i + h] << 8 | e[i]. Every fp8 conversion is computed once and checked in both byte positions."""
    h = e.size // 2
    n = 0
    for i in prange(h):
        n += (gpu[i] != _pair8(e[i], e[i + h])) + (gpu[i + h] != _pair8(e[i + h], e[i]))
    return n


@njit(parallel=True, cache=True, nogil=True)
def neg_pair_words(e):
    """The packed words that :func:`count_mismatches_neg_pair` expects (uint32), for reporting mismatches."""
    h = e.size // 2
    out = np.empty(e.size, np.uint32)
    for i in prange(h):
        out[i] = _pair8(e[i], e[i + h])
        out[i + h] = _pair8(e[i + h], e[i])
    return out
