"""The exact PTX each GPU-side operation runs, as strings for Triton's ``tl.inline_asm_elementwise``.

Pure Python (no torch, no Triton), so CPU code and tests can read which instruction a golden set came from.
Every operand is a 32-bit register (constraint ``r``) holding raw bits: inputs are the fp32 (or zero-extended
16-bit) bit patterns, the output is the result's bits zero-extended to 32 bits. PTX lets a ``.b32`` register
stand for an ``.f32`` operand, so no value ever passes through a float conversion outside the instruction.

Operand order of the packing conversions (PTX ISA, ``cvt``): ``cvt.rn.bf16x2.f32 d, a, b`` and
``cvt.rn.satfinite.e4m3x2.f32 d, a, b`` put ``a`` in the *upper* half of ``d`` and ``b`` in the lower half; the
golden sets run them with ``(a, b)`` as given, so the tests read that order off the hardware.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..constants import EX2_CLAMP, EX2_ROUND_SHIFTER, POLY_EX2_BITS

ROUNDINGS = ("rn", "rz", "rm", "rp")

EX2_VARIANTS = ("packed", "scalar", "asm")


@dataclass(frozen=True)
class Op:
    """One GPU operation: its name, how many 32-bit inputs it takes, and the PTX body ($0 = result)."""
    name: str
    n_in: int
    asm: str


def _imm(bits: int) -> str:
    """PTX hexadecimal fp32 immediate (exact bit pattern)."""
    return "0f%08X" % (bits & 0xFFFFFFFF)


def arith(op: str, rounding: str = "rn", ftz: bool = False) -> Op:
    """add/sub/mul/fma.{rounding}{.ftz}.f32 and max/min{.ftz}.f32 (max/min take no rounding)."""
    f = ".ftz" if ftz else ""
    if op in ("max", "min"):
        return Op(f"{op}{f}", 2, f"{op}{f}.f32 $0, $1, $2;")
    if rounding not in ROUNDINGS:
        raise ValueError(f"rounding must be one of {ROUNDINGS}, got {rounding!r}")
    if op in ("add", "sub", "mul"):
        return Op(f"{op}.{rounding}{f}", 2, f"{op}.{rounding}{f}.f32 $0, $1, $2;")
    if op == "fma":
        return Op(f"fma.{rounding}{f}", 3, f"fma.{rounding}{f}.f32 $0, $1, $2, $3;")
    raise ValueError(f"op must be add, sub, mul, fma, max or min, got {op!r}")


# Conversions. 16-bit results go through a .b16 register and are zero-extended (cvt.u32.u16).
CONVERSIONS = {
    "cvt.rn.bf16.f32": Op("cvt.rn.bf16.f32", 1,
                          "{ .reg .b16 h; cvt.rn.bf16.f32 h, $1; cvt.u32.u16 $0, h; }"),
    "cvt.rn.f16.f32": Op("cvt.rn.f16.f32", 1,
                         "{ .reg .b16 h; cvt.rn.f16.f32 h, $1; cvt.u32.u16 $0, h; }"),
    # FA4's P -> bf16 cast is the packed form (F2FP.BF16.F32.PACK_AB).
    "cvt.rn.bf16x2.f32": Op("cvt.rn.bf16x2.f32", 2, "cvt.rn.bf16x2.f32 $0, $1, $2;"),
    "cvt.rn.satfinite.e4m3x2.f32": Op("cvt.rn.satfinite.e4m3x2.f32", 2,
                                      "{ .reg .b16 h; cvt.rn.satfinite.e4m3x2.f32 h, $1, $2; cvt.u32.u16 $0, h; }"),
    "cvt.rn.satfinite.e5m2x2.f32": Op("cvt.rn.satfinite.e5m2x2.f32", 2,
                                      "{ .reg .b16 h; cvt.rn.satfinite.e5m2x2.f32 h, $1, $2; cvt.u32.u16 $0, h; }"),
    # Back to fp32: 16-bit input in the low half of $1.
    "cvt.f32.bf16": Op("cvt.f32.bf16", 1, "{ .reg .b16 h; cvt.u16.u32 h, $1; cvt.f32.bf16 $0, h; }"),
    "cvt.f32.f16": Op("cvt.f32.f16", 1, "{ .reg .b16 h; cvt.u16.u32 h, $1; cvt.f32.f16 $0, h; }"),
    # fp8 has no direct path to fp32 on sm_90: e4m3x2/e5m2x2 -> f16x2 (exact), then f16 -> f32 (exact).
    # The result is the f16x2 word: upper half from the upper byte, lower half from the lower byte.
    "cvt.rn.f16x2.e4m3x2": Op("cvt.rn.f16x2.e4m3x2", 1,
                              "{ .reg .b16 h; cvt.u16.u32 h, $1; cvt.rn.f16x2.e4m3x2 $0, h; }"),
    "cvt.rn.f16x2.e5m2x2": Op("cvt.rn.f16x2.e5m2x2", 1,
                              "{ .reg .b16 h; cvt.u16.u32 h, $1; cvt.rn.f16x2.e5m2x2 $0, h; }"),
}


def fp8_pair_neg(fmt: str) -> Op:
    """``cvt.rn.satfinite.{fmt}x2.f32 d, x, -x`` as a unary op (for exhaustive sweeps of the fp8 conversion):
    the upper byte is the conversion of x, the lower byte that of x with its sign bit flipped."""
    if fmt not in ("e4m3", "e5m2"):
        raise ValueError(f"fmt must be 'e4m3' or 'e5m2', got {fmt!r}")
    return Op(f"cvt.rn.satfinite.{fmt}x2.f32(x,-x)", 1,
              f"{{ .reg .b16 h; .reg .b32 n; xor.b32 n, $1, 0x80000000; "
              f"cvt.rn.satfinite.{fmt}x2.f32 h, $1, n; cvt.u32.u16 $0, h; }}")


# MUFU instructions. ptxas (Triton 3.6's, CUDA 13) compiles the .ftz forms to a bare MUFU.EX2 / MUFU.RCP /
# MUFU.LG2 and wraps the non-ftz forms in fp32 scaling code (see fa4num.hw.mufu for the exact SASS).
MUFU = {f"{fn}.approx{f}.f32": Op(f"{fn}.approx{f}.f32", 1, f"{fn}.approx{f}.f32 $0, $1;")
        for fn in ("ex2", "rcp", "lg2") for f in (".ftz", "")}


def ex2_emulation(variant: str, coeffs_bits) -> Op:
    """FA4's software exp2 as PTX, for any degree (len(coeffs_bits) - 1 >= 1) and fp32 coefficient bits c0..cd.

    - "asm": ``e2e_asm2`` (flash_attn/cute/utils.py, kept as a comment in softmax.py): every instruction .ftz.
    - "scalar": ``ex2_emulation``: ``add.rm.ftz.f32`` (its inline PTX) and non-ftz max/sub/fma.rn.
    - "packed": ``ex2_emulation_2`` (the SM100 softmax path) uses add.rm/sub.rn/fma.rn ``.f32x2``, which sm_90
      lacks; a packed op is two independent fp32 ops, so the scalar non-ftz twins are run here
      (max.f32, add.rm.f32, sub.rn.f32, fma.rn.f32).
    Steps: a = max(x, -127); r = a + 1.5*2^23 rounded down (floor(a) in the low mantissa bits); t = r - 1.5*2^23;
    f = a - t in [0, 1]; Horner p = (...(c_d*f + c_{d-1})*f ...) + c0 with one rounding per fma;
    result bits = (bits(r) << 23) + bits(p) (integer add puts floor(a) into the exponent field).
    """
    if variant not in EX2_VARIANTS:
        raise ValueError(f"variant must be one of {EX2_VARIANTS}, got {variant!r}")
    coeffs_bits = tuple(int(c) & 0xFFFFFFFF for c in coeffs_bits)
    deg = len(coeffs_bits) - 1
    if deg < 1:
        raise ValueError(f"coeffs_bits must hold at least 2 coefficients (degree >= 1), got {len(coeffs_bits)}")
    all_ftz = ".ftz" if variant == "asm" else ""
    add_rm = ".ftz" if variant in ("asm", "scalar") else ""
    c = [_imm(b) for b in coeffs_bits]
    clamp, shifter = (_imm(int(np.float32(v).view(np.uint32))) for v in (EX2_CLAMP, EX2_ROUND_SHIFTER))
    lines = [
        "{ .reg .f32 a, r, t, f, p; .reg .b32 rb, pb, e;",
        f"max{all_ftz}.f32 a, $1, {clamp};",
        f"add.rm{add_rm}.f32 r, a, {shifter};",
        f"sub.rn{all_ftz}.f32 t, r, {shifter};",
        f"sub.rn{all_ftz}.f32 f, a, t;",
        f"fma.rn{all_ftz}.f32 p, f, {c[deg]}, {c[deg - 1]};",
    ]
    lines += [f"fma.rn{all_ftz}.f32 p, p, f, {c[i]};" for i in range(deg - 2, -1, -1)]
    lines += ["mov.b32 rb, r;", "mov.b32 pb, p;", "shl.b32 e, rb, 23;", "add.s32 $0, e, pb;", "}"]
    name = f"ex2emu.{variant}." + "_".join("%08X" % b for b in coeffs_bits)
    return Op(name, 1, " ".join(lines))


def fa4_ex2_emulation(variant: str, degree: int = 3) -> Op:
    """:func:`ex2_emulation` with FA4's POLY_EX2 coefficients of the given degree (1..5)."""
    if degree not in POLY_EX2_BITS:
        raise ValueError(f"degree must be in 1..5 for FA4's coefficients, got {degree!r}")
    op = ex2_emulation(variant, POLY_EX2_BITS[degree])
    return Op(f"ex2emu.{variant}.fa4d{degree}", op.n_in, op.asm)
