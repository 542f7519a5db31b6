"""Fused exhaustive-sweep checks of ``fa4num gpu verify`` (CPU only, numba): emulate and compare in one loop.

In an exhaustive sweep the input of element i is a pure function of i (fp32 bit pattern ``base + i`` mod 2^32),
so each loop here computes the emulator's result for that pattern in registers and compares it with the GPU's
output word directly: no input array, no emulator-output array, one read of the GPU buffer. The former path
(fa4num.gpu.compare: iota, then the emulator writing its output, then a compare reading both back) moved about
20 bytes per input; these loops move 4.

The per-element models are the scalar numba kernels of the emulators themselves -- fa4num.ex2.emulate
(``fast_steps`` / ``exact_steps``, FA4 utils.py ex2_emulation*), fa4num.hw.mufu (``ex2_ftz_bits`` ... ``lg2_bits``,
MUFU.EX2/RCP/LG2 and ptxas's non-ftz wrappers) and fa4num.fp.convert (``f32_to_*_bits``, cvt.rn{.satfinite}) --
so a fused count equals the count of the unfused path by construction; tests/gpu/test_fused.py checks that, with
planted bit flips, on the CPU.

Each ``count(starts, gpu)`` returns the number of mismatching elements of one sweep step. Only the count is
computed in parallel; the first mismatching indexes (rare: 0 is the expected count) are found by the unfused
path (fa4num.gpu.verify), which materialises the emulator output of that one step.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import njit, prange

from ..ex2 import emulate as _ex2   # fast_steps, exact_steps, horner_tuple: public kernels
from ..fp.scalar import f32_to_u32 as _b32, u32_to_f32 as _f32
from ..fp.convert import f32_to_bf16_bits, f32_to_e4m3_bits, f32_to_e5m2_bits, f32_to_fp16_bits
from ..hw import mufu as _mufu     # the public scalar kernels *_bits
from .ops import PACK_NEG, OpSpec

_MASK32 = 0xFFFFFFFF
_SIGN = np.uint32(0x80000000)
# the positive fp32 patterns in [_NARROW_END, _NARROW_STOP) (2^22 < x <= +inf) leave the floor form of add.rm
# (ex2's narrow fast path flags them; the wide one computes them); NaN patterns above clamp to -127
_NARROW_END = 0x4A800001
_NARROW_STOP = 0x7F800001


# ---- FA4's exp2 emulation ---------------------------------------------------------------------------------
def _make_ex2_fast(ftz_max: bool, ftz_round: bool, ftz_arith: bool, degree: int, wide: bool):
    """Fused fast path of one form and degree (flags, degree and the add.rm form are closure constants, as in
    fa4num.ex2.emulate's narrow loops, so Horner unrolls and the loop vectorises). Counts the elements that
    mismatch OR that the fast path cannot vouch for (``bad``: with ``wide`` False x > 2^22, with ftz arithmetic
    Horner values below 2^-125); a non-zero count is settled by _ex2_exact_count."""
    def count(base, gpu, rc):
        n = 0
        for i in prange(gpu.size):
            x = _f32(np.uint32((base + i) & _MASK32))
            v, bad = _ex2.fast_steps(x, rc, ftz_max, ftz_round, ftz_arith, wide, degree)
            n += bad | (_b32(v) != gpu[i])
        return n
    # numba names a function's cache index after its qualified name: the narrow and the wide loops get one each,
    # so that the verify warm-up can compile them in two processes side by side (one writer per index)
    count.__qualname__ += "_wide" if wide else "_narrow"
    return njit(parallel=True, cache=True, nogil=True)(count)


@njit(parallel=True, cache=True, nogil=True)
def _ex2_exact_count(base, gpu, rc, ftz_max, ftz_round, ftz_arith):
    """Mismatches of one step by fa4_emulated's full rule: the wide fast path (every a >= -127), and the exact
    PTX sequence wherever that path reports it cannot vouch for the result (ftz arithmetic below 2^-125)."""
    n = 0
    for i in prange(gpu.size):
        x = _f32(np.uint32((base + i) & _MASK32))
        v, bad = _ex2.fast_steps(x, rc, ftz_max, ftz_round, ftz_arith, True)
        if bad:
            v = _ex2.exact_steps(x, rc, ftz_max, ftz_round, ftz_arith)
        n += _b32(v) != gpu[i]
    return n


@lru_cache(maxsize=None)
def _ex2_fast(flags: tuple, degree: int, wide: bool):
    return _make_ex2_fast(*flags, degree, wide)


def _ex2_loops(spec: OpSpec):
    """(narrow, wide, rc, flags) of one ex2emu spec: the fused fast loops of its form and degree."""
    v = _ex2.resolve_variant(spec.variant)
    coeffs = np.array(spec.coeffs_bits, np.uint32).view(np.float32)
    rc = _ex2.horner_tuple(tuple(coeffs), v)
    flags = (v.ftz_max, v.ftz_round, v.ftz_arith)
    return _ex2_fast(flags, spec.degree, False), _ex2_fast(flags, spec.degree, True), rc, flags


def _ex2_counter(spec: OpSpec):
    narrow, wide, rc, flags = _ex2_loops(spec)

    def count(starts, gpu):
        (s,) = starts
        # the narrow (floor) form of add.rm is exact outside the positive range (2^22, +inf]; a step reaching
        # into it takes the wide form (exact for every input); either flags what it cannot vouch for
        fast = narrow if s + gpu.size <= _NARROW_END or s >= _NARROW_STOP else wide
        if fast(s, gpu, rc) == 0:
            return 0
        return int(_ex2_exact_count(s, gpu, rc, *flags))
    return count


# ---- MUFU models (fa4num.hw.mufu) --------------------------------------------------------------------------
# One function per instruction form (not a run-time ftz flag): each compiles on its own (side by side in the
# warm-up workers, each into its own cache index) and its loop holds only the code of its own form.
@njit(parallel=True, cache=True, nogil=True)
def _ex2_ftz_count(base, gpu, tpos, tneg):
    """ex2.approx.ftz.f32 (MUFU.EX2)."""
    n = 0
    for i in prange(gpu.size):
        n += _mufu.ex2_ftz_bits(np.uint32((base + i) & _MASK32), tpos, tneg) != gpu[i]
    return n


@njit(parallel=True, cache=True, nogil=True)
def _ex2_full_count(base, gpu, tpos, tneg):
    """ex2.approx.f32: fa4num.hw.mufu.ex2_bits written as the SASS has it, predicated FMULs around one MUFU.EX2
    (``FSETP.GEU p, x, -126; @!p FMUL x, x, 0.5; MUFU.EX2 y, x; @!p FMUL y, y, y``): one inlined table lookup
    instead of two branches with one each, so the loop runs about as fast as the .ftz one."""
    n = 0
    for i in prange(gpu.size):
        b = np.uint32((base + i) & _MASK32)
        x = _f32(b)
        low = x < np.float32(-126.0)
        r = _mufu.ex2_ftz_bits(_b32(x * np.float32(0.5)) if low else b, tpos, tneg)
        y = _f32(r)
        n += (_mufu.canonical_nan_bits(_b32(y * y)) if low else r) != gpu[i]
    return n


@njit(parallel=True, cache=True, nogil=True)
def _rcp_ftz_count(base, gpu, trcp):
    """rcp.approx.ftz.f32 (MUFU.RCP)."""
    n = 0
    for i in prange(gpu.size):
        n += _mufu.rcp_ftz_bits(np.uint32((base + i) & _MASK32), trcp) != gpu[i]
    return n


@njit(parallel=True, cache=True, nogil=True)
def _rcp_full_count(base, gpu, trcp):
    """rcp.approx.f32 (ptxas's scaling around MUFU.RCP at both ends)."""
    n = 0
    for i in prange(gpu.size):
        n += _mufu.rcp_bits(np.uint32((base + i) & _MASK32), trcp) != gpu[i]
    return n


@njit(parallel=True, cache=True, nogil=True)
def _lg2_ftz_count(base, gpu, l0, lm1):
    """lg2.approx.ftz.f32 (MUFU.LG2)."""
    n = 0
    for i in prange(gpu.size):
        n += _mufu.lg2_ftz_bits(np.uint32((base + i) & _MASK32), l0, lm1) != gpu[i]
    return n


@njit(parallel=True, cache=True, nogil=True)
def _lg2_full_count(base, gpu, l0, lm1):
    """lg2.approx.f32 (ptxas's 2^24 scaling of subnormal inputs around MUFU.LG2)."""
    n = 0
    for i in prange(gpu.size):
        n += _mufu.lg2_bits(np.uint32((base + i) & _MASK32), l0, lm1) != gpu[i]
    return n


_EX2_TABLES, _LG2_TABLES = ("ex2_pos", "ex2_neg"), ("lg2_e0", "lg2_e-1")
_MUFU = {("ex2", True): (_ex2_ftz_count, _EX2_TABLES), ("ex2", False): (_ex2_full_count, _EX2_TABLES),
         ("rcp", True): (_rcp_ftz_count, ("rcp",)), ("rcp", False): (_rcp_full_count, ("rcp",)),
         ("lg2", True): (_lg2_ftz_count, _LG2_TABLES), ("lg2", False): (_lg2_full_count, _LG2_TABLES)}


def _mufu_counter(spec: OpSpec):
    loop, names = _MUFU[(spec.fn, bool(spec.ftz))]
    t = spec.mufu_tables()
    tables = tuple(t[k] for k in names)
    return lambda starts, gpu: int(loop(starts[0], gpu, *tables))


# ---- conversions (fa4num.fp.convert) -----------------------------------------------------------------------
@njit(parallel=True, cache=True, nogil=True)
def _bf16_count(base, gpu):
    """cvt.rn.bf16.f32, zero-extended to 32 bits by the GPU kernel (cvt.u32.u16)."""
    n = 0
    for i in prange(gpu.size):
        n += np.uint32(f32_to_bf16_bits(_f32(np.uint32((base + i) & _MASK32)))) != gpu[i]
    return n


@njit(parallel=True, cache=True, nogil=True)
def _fp16_count(base, gpu):
    """cvt.rn.f16.f32, zero-extended to 32 bits."""
    n = 0
    for i in prange(gpu.size):
        n += np.uint32(f32_to_fp16_bits(_f32(np.uint32((base + i) & _MASK32)))) != gpu[i]
    return n


@njit(cache=True, inline="always")
def _pair8(hi, lo):
    return (np.uint32(hi) << np.uint32(8)) | np.uint32(lo)


@njit(parallel=True, cache=True, nogil=True)
def _e4m3_neg_pair_count(base, gpu):
    """``cvt.rn.satfinite.e4m3x2.f32 d, x, -x`` over [block at base | the same block with the sign flipped]
    (gpu holds 2h words): x's conversion goes in the high byte of its own word and in the low byte of its twin's,
    so each conversion is computed once per input, as in fa4num.gpu.compare.count_mismatches_neg_pair."""
    h = gpu.size // 2
    n = 0
    for i in prange(h):
        b = np.uint32((base + i) & _MASK32)
        p = f32_to_e4m3_bits(_f32(b))
        q = f32_to_e4m3_bits(_f32(b ^ _SIGN))
        n += (gpu[i] != _pair8(p, q)) + (gpu[i + h] != _pair8(q, p))
    return n


@njit(parallel=True, cache=True, nogil=True)
def _e5m2_neg_pair_count(base, gpu):
    """As :func:`_e4m3_neg_pair_count` for ``cvt.rn.satfinite.e5m2x2.f32 d, x, -x``."""
    h = gpu.size // 2
    n = 0
    for i in prange(h):
        b = np.uint32((base + i) & _MASK32)
        p = f32_to_e5m2_bits(_f32(b))
        q = f32_to_e5m2_bits(_f32(b ^ _SIGN))
        n += (gpu[i] != _pair8(p, q)) + (gpu[i + h] != _pair8(q, p))
    return n


def _neg_pair(loop):
    def count(starts, gpu):
        s, twin = starts
        if twin != s ^ 0x80000000 or gpu.size % 2:
            raise ValueError(f"a neg-pair step is a block and its sign-flipped twin of equal size, got starts "
                             f"{[hex(v) for v in starts]} and {gpu.size} words")
        return int(loop(s, gpu))
    return count


def parts(spec: OpSpec) -> tuple:
    """Names of the separately compiled pieces of ``spec``'s fused check, for :func:`warm` (ex2: the narrow and
    wide fast loops and the exact fix-up are three numba functions; every other op has one)."""
    return ("narrow", "wide", "exact") if spec.op == "ex2emu" else ("all",)


def warm(spec: OpSpec, part: str = "all") -> None:
    """Compile (or load from the numba cache) one piece of ``spec``'s fused check by running it on 256 inputs."""
    gpu = np.zeros(256, np.uint32)
    if part not in parts(spec):
        raise ValueError(f"part must be one of {parts(spec)} for {spec.op}, got {part!r}")
    if spec.op == "ex2emu":
        narrow, wide, rc, flags = _ex2_loops(spec)
        if part == "exact":
            _ex2_exact_count(0x3F800000, gpu, rc, *flags)
        else:
            (narrow if part == "narrow" else wide)(0x3F800000, gpu, rc)
        return
    counter(spec)((0x3F800000, 0xBF800000) if spec.packed == PACK_NEG else (0x3F800000,), gpu)


def counter(spec: OpSpec):
    """``count(starts, gpu) -> int`` for one exhaustive-sweep op (fa4num.gpu.verify.exhaustive_plan), or None
    when no fused loop exists for it (the sweep then takes the unfused path). ``starts`` are the first input
    patterns of the blocks laid end to end in ``gpu`` (uint32 words): one block, or for the fp8 neg-pair ops a
    block and its sign-flipped twin."""
    if not isinstance(spec, OpSpec):
        raise ValueError(f"spec must be an fa4num.gpu.ops.OpSpec, got {type(spec).__name__}")
    op = spec.op
    if op == "ex2emu":
        return _ex2_counter(spec)
    if op == "mufu":
        return _mufu_counter(spec)
    if op in ("to_bf16", "to_fp16") and not spec.packed:
        loop = _bf16_count if op == "to_bf16" else _fp16_count
        return lambda starts, gpu: int(loop(starts[0], gpu))
    if spec.packed == PACK_NEG:
        return _neg_pair(_e4m3_neg_pair_count if op == "to_e4m3" else _e5m2_neg_pair_count)
    return None
