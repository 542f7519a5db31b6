"""The CPU emulator that models each GPU operation, as ``fn(*uint32 bit arrays) -> uint32 bit array``.

Used by the golden-vector tests (CPU only) and by ``fa4num gpu verify`` (next to the GPU). A golden set's
``meta`` (fa4num.gpu.capture.golden_plan) says which operation it holds; :func:`emulator` maps it to the
fa4num.fp / fa4num.ex2 / fa4num.hw function. Needs no GPU, torch or Triton.
"""
from __future__ import annotations

import numpy as np


def _f(x):
    return np.ascontiguousarray(x, np.uint32).view(np.float32)


def _u(x):
    return np.ascontiguousarray(np.asarray(x)).view(np.uint32) if np.asarray(x).dtype.itemsize == 4 \
        else np.asarray(x).view(np.uint16 if np.asarray(x).dtype.itemsize == 2 else np.uint8).astype(np.uint32)


def _narrow_dtype(fmt):
    import ml_dtypes
    return {"bf16": ml_dtypes.bfloat16, "fp16": np.float16, "e4m3": ml_dtypes.float8_e4m3fn,
            "e5m2": ml_dtypes.float8_e5m2}[fmt]


def _f16_bits_of_f32(x32):
    """fp16 bits of fp32 values that fp16 holds exactly (fp8 values); NaN -> 0x7FFF (NVIDIA's fp16 NaN)."""
    bits = x32.astype(np.float16).view(np.uint16).astype(np.uint32)
    return np.where(np.isnan(x32), np.uint32(0x7FFF), bits)


def emulator(meta: dict):
    """``fn(*operands)`` for the operation described by a golden set's ``meta``."""
    from .. import fp
    op = meta["op"]
    if op in ("add", "sub", "mul", "fma"):
        f = getattr(fp, op)
        return lambda *xs: _u(f(*map(_f, xs), rounding=meta["rounding"], ftz=meta["ftz"]))
    if op in ("max", "min"):
        f = getattr(fp, op)
        return lambda a, b: _u(f(_f(a), _f(b), ftz=meta["ftz"]))
    if op.startswith("to_"):
        fmt = op[3:]
        if meta.get("packed") == "hi=x,lo=-x":          # fa4num.gpu.ptx.fp8_pair_neg
            f = getattr(fp, f"to_{fmt}x2")
            return lambda x: np.asarray(f(_f(x), _f(x ^ np.uint32(0x80000000)))).astype(np.uint32)
        if meta.get("packed"):
            f = getattr(fp, f"to_{fmt}x2")
            return lambda a, b: np.asarray(f(_f(a), _f(b))).astype(np.uint32)
        f = getattr(fp, op)
        return lambda x: _u(f(_f(x)))
    if op.startswith("from_"):
        fmt = op[5:]
        f = getattr(fp, op)
        dt = _narrow_dtype(fmt)
        if fmt in ("bf16", "fp16"):
            return lambda x: _u(f((x & np.uint32(0xFFFF)).astype(np.uint16).view(dt)))

        def fp8_to_f16x2(x):
            # cvt.rn.f16x2.{e4m3x2,e5m2x2}: each byte widened to fp16 (exact), hi byte -> hi half
            hi = f(((x >> np.uint32(8)) & np.uint32(0xFF)).astype(np.uint8).view(dt))
            lo = f((x & np.uint32(0xFF)).astype(np.uint8).view(dt))
            return (_f16_bits_of_f32(np.asarray(hi)) << np.uint32(16)) | _f16_bits_of_f32(np.asarray(lo))
        return fp8_to_f16x2
    if op == "ex2emu":
        from ..ex2 import fa4_emulated
        coeffs = [float(np.uint32(c).view(np.float32)) for c in meta["coeffs_bits"]]
        return lambda x: _u(fa4_emulated(_f(x), meta["degree"], coeffs=coeffs, variant=meta["variant"]))
    if op == "mufu":
        from .. import hw
        f = getattr(hw, f"mufu_{meta['fn']}")
        return lambda x: _u(f(_f(x), ftz=meta["ftz"], arch=meta.get("arch", "sm90")))
    raise ValueError(f"no emulator for golden op {op!r}")


def _bits_view(a):
    """The bits of an emulator's result array without a copy (uint32 / uint16 / uint8 by item size)."""
    return a.view({4: np.uint32, 2: np.uint16, 1: np.uint8}[a.dtype.itemsize])


def sweep_emulator(meta: dict):
    """``(fn, neg_pair)`` for an exhaustive unary sweep: ``fn(x)`` takes the float32 inputs and returns the
    emulator's result bits in the result's own width (a view, no widening copy), for fa4num.gpu.compare.

    For the fp8 ops run as ``cvt...x2.f32 d, x, -x`` (``packed == "hi=x,lo=-x"``) ``fn`` is the single conversion
    (fa4num.fp.to_e4m3 / to_e5m2, of which to_e4m3x2 / to_e5m2x2 are the byte packing) and ``neg_pair`` is True:
    the sweep then feeds a block of inputs together with its sign-flipped twin block, so each conversion is
    computed once and checked in both byte positions (compare.count_mismatches_neg_pair)."""
    from .. import fp
    op = meta["op"]
    if meta.get("packed") == "hi=x,lo=-x":
        f = getattr(fp, op)
        return (lambda x: _bits_view(f(x))), True
    if op.startswith("to_") and not meta.get("packed"):
        f = getattr(fp, op)
        return (lambda x: _bits_view(f(x))), False
    if op in ("ex2emu", "mufu"):
        g = emulator(meta)
        return (lambda x: _bits_view(g(x.view(np.uint32)))), False
    raise ValueError(f"no exhaustive-sweep emulator for {meta!r}: unary ex2emu, mufu and to_* ops only")
