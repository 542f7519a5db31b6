"""FA4's software exp2 (any degree and coefficients; the packed, scalar and asm forms) and the exhaustive sweep
engine that measures an exp2 implementation against the correctly rounded 2^x over all fp32 inputs."""
from .emulate import POLY_EX2, VARIANTS, Variant, fa4_emulated, poly_coeffs

__all__ = ["POLY_EX2", "VARIANTS", "Variant", "fa4_emulated", "poly_coeffs"]
