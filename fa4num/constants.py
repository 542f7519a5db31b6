"""FA4's numerical constants, one copy each (a leaf module: numpy only, imported by every layer).

Sources are flash-attn-4 4.0.0b36, ``flash_attn/cute/utils.py`` unless said otherwise. Each value is written as
its fp32 bit pattern where FA4 writes one (or where a decimal literal could be read two ways), so that no decimal
parsing is involved; the float forms are derived from the bits.

Examples
--------
>>> hex(POLY_EX2_BITS[3][1])
'0x3f31f519'
>>> POLY_EX2[1][0], float(EX2_CLAMP), FP8_MAX["float8_e4m3fn"]
(1.0, -127.0, 448.0)
"""
from __future__ import annotations

import numpy as np

__all__ = ["POLY_EX2_BITS", "POLY_EX2", "EX2_CLAMP", "EX2_ROUND_SHIFTER", "LOG2_E_F32", "LN2_F32", "FP8_MAX"]


def _f32(bits: int) -> np.float32:
    return np.array(bits, dtype=np.uint32).view(np.float32)[()]


# POLY_EX2 (utils.py): Sollya fpminimax of 2^x on [0, 1], relative error, fp32 coefficients, c0 fixed to 1;
# degree -> (c0, ..., cd) bit patterns. FA4's degree 0 is the float 1.0, not a tuple, so ex2_emulation cannot use
# it; it is left out here.
POLY_EX2_BITS = {
    1: (0x3F800000, 0x3F6C28C5),
    2: (0x3F800000, 0x3F2A70E4, 0x3EA903CA),
    3: (0x3F800000, 0x3F31F519, 0x3E6906A4, 0x3D9DF09D),
    4: (0x3F800000, 0x3F316B3F, 0x3E77150E, 0x3D55EA42, 0x3C5C1E37),
    5: (0x3F800000, 0x3F31725F, 0x3E75ED73, 0x3D6490D6, 0x3C13B1A6, 0x3AF4DB16),
}
POLY_EX2 = {d: tuple(float(_f32(b)) for b in bits) for d, bits in POLY_EX2_BITS.items()}

# ex2_emulation*: the clamp 0fC2FE0000 = -127 (max.f32) and the rounding shifter 0f4B400000 = 1.5 * 2^23
# (fp32_round_int / add.rm), whose low mantissa bits receive floor(x).
EX2_CLAMP = _f32(0xC2FE0000)
EX2_ROUND_SHIFTER = _f32(0x4B400000)

# utils.LOG2_E as the Float32 the kernels multiply softmax_scale by (compute_softmax_scale_log2), and ln 2 in fp32
# (the constant FA4 multiplies lg2 by for the natural-log LSE).
LOG2_E_F32 = _f32(0x3FB8AA3B)
LN2_F32 = _f32(0x3F317218)

# Largest finite values of the fp8 formats (OCP e4m3fn: S.1111.111 is NaN, so 1.75 * 2^8; e5m2: 1.75 * 2^15),
# keyed by the torch / ml_dtypes dtype name; cvt.rn.satfinite saturates to these.
FP8_MAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}
