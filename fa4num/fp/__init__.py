"""fa4num.fp: bit-exact IEEE binary32 / bf16 / fp16 / fp8 arithmetic on arrays, with NVIDIA's conventions.

Modules::

    arith      add, sub, mul, fma (rounding "rn"/"rz"/"rm"/"rp", ftz), max, min; packed *_f32x2 forms
    convert    to_bf16 / to_fp16 / to_e4m3 / to_e5m2 (+ x2 packed forms) and back (from_*)
    ulp        ulp_distance, as_bits, from_bits
    reference  exp2_cr, log2_cr, rcp_cr: correctly rounded float32 / bfloat16 references (and numba scalar
               kernels exp2_cr_f32, exp2_cr_bf16, log2_cr_f32, ... for use inside other njit loops)
    dtypes     the one table of formats (DTYPES, dtype_info): names, numpy/ml_dtypes/torch/PTX, max finite, min
               normal exponent, unit roundoff, mantissa bits
    cases      deterministic random and adversarial operands (for oracles and GPU captures)
    oracle     gmpy2/MPFR binary32 oracle for add/sub/mul/fma in every rounding mode
    scalar     the scalar-kernel tier: numba ``@njit`` functions on one float32 (f32_add/sub/mul/fma/max/min with
               RN/RZ/RM/RP ints and ftz, fma_rn_f32, bit casts f32_to_u32/u32_to_f32/f64_to_u64/u64_to_f64,
               canonical_nan) for the vectorised loops of fa4num.ex2, fa4num.hw, fa4num.softmax and fa4num.gpu
    arrays     array plumbing for functions that take numpy arrays or torch tensors (as_float32, tensor_device,
               wrap, is_tensor, flat_broadcast): never rounds an input silently

Every NaN an arithmetic operation makes has the bits 0x7FFFFFFF (NVIDIA's canonical NaN).

How it is checked (numbers in experiments/results and fa4num/fp/data):

- add/sub/mul/fma in rn/rz/rm/rp against gmpy2/MPFR on 10^6 random and adversarial cases each
  (experiments/fp_oracle_check.py; CI re-checks them through the committed digests, plus 10^5 live);
- every op, mode, ftz and conversion against the golden vectors captured on an H200 (tests/golden, which settle
  the flush rule of .ftz, max/min of ±0 and the NaN bit patterns);
- conversions on all 2^32 float32 inputs against ml_dtypes (experiments/fp_convert_exhaustive.py);
- the references on all 2^32 inputs (settled in numba) and against gmpy2 (experiments/fp_reference_sweep.py).
"""
from .scalar import CANONICAL_NAN_BITS, RM, RN, RP, RZ, ROUNDING_MODES
from .arith import add, add_f32x2, fma, fma_f32x2, max, min, mul, mul_f32x2, sub, sub_f32x2
from .convert import (NAN_BITS, NAN_FROM_NARROW, from_bf16, from_bf16x2, from_e4m3, from_e4m3x2, from_e5m2,
                      from_e5m2x2, from_fp16, from_fp16x2, to_bf16, to_bf16x2, to_e4m3, to_e4m3x2, to_e5m2,
                      to_e5m2x2, to_fp16, to_fp16x2)
from .dtypes import DTYPES, DType, dtype_info
from .reference import exp2_cr, log2_cr, rcp_cr
from .ulp import NAN_DISTANCE, as_bits, from_bits, ulp_distance

__all__ = ["add", "sub", "mul", "fma", "max", "min", "add_f32x2", "sub_f32x2", "mul_f32x2", "fma_f32x2",
           "to_bf16", "to_fp16", "to_e4m3", "to_e5m2", "to_bf16x2", "to_fp16x2", "to_e4m3x2", "to_e5m2x2",
           "from_bf16", "from_fp16", "from_e4m3", "from_e5m2", "from_bf16x2", "from_fp16x2", "from_e4m3x2",
           "from_e5m2x2", "exp2_cr", "log2_cr", "rcp_cr", "ulp_distance", "as_bits", "from_bits", "NAN_BITS",
           "NAN_FROM_NARROW", "NAN_DISTANCE", "CANONICAL_NAN_BITS", "ROUNDING_MODES", "RN", "RZ", "RM", "RP", "DTYPES",
           "DType", "dtype_info"]
