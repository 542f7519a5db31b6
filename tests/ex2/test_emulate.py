"""fa4_emulated: edge cases derived from the instruction sequence, fast path == exact path, argument errors."""
from __future__ import annotations

import numpy as np
import pytest

from fa4num.ex2 import POLY_EX2, VARIANTS, fa4_emulated, poly_coeffs
from fa4num.fp import CANONICAL_NAN_BITS

F32 = np.float32


def bits(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float32).view(np.uint32)


def horner_at_one(coeffs) -> F32:
    """p(1) as FA4's Horner fma chain computes it: fma(p, 1, c) = p + c rounded once."""
    p = F32(coeffs[-1])
    for c in reversed(coeffs[:-1]):
        p = F32(p + F32(c))
    return p


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_nan_input_gives_plus_zero(variant):
    """max.f32 ignores a NaN operand: the clamp turns NaN into -127, which gives exactly +0."""
    x = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FFFFFFF], dtype=np.uint32).view(np.float32)
    assert np.all(bits(fa4_emulated(x, variant=variant)) == 0)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_plus_inf_gives_canonical_nan_bits(variant):
    """frac = inf - inf is NaN (canonical 0x7FFFFFFF), and inf's bits shifted left by 23 are 0."""
    assert bits(fa4_emulated(np.array([np.inf], F32), variant=variant))[0] == CANONICAL_NAN_BITS


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_at_or_below_minus_127_gives_plus_zero(variant):
    x = np.array([-127.0, -127.5, -150.0, -1e30, -np.inf, -np.finfo(F32).max], dtype=F32)
    assert np.all(bits(fa4_emulated(x, variant=variant)) == 0)


@pytest.mark.parametrize("degree", sorted(POLY_EX2))
def test_integers_are_exact_powers_of_two(degree):
    k = np.arange(-126, 128).astype(F32)
    assert np.array_equal(fa4_emulated(k, degree), np.ldexp(F32(1), k.astype(int)).astype(F32))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("degree", sorted(POLY_EX2))
def test_between_minus_127_and_minus_126_is_the_wrong_denormal(variant, degree):
    """The exponent field becomes 0, so the bits of p(f) decode as the subnormal (p(f) - 1) * 2^-126 instead of
    p(f) * 2^-127. f = x + 127 is exact here, and p(f) is the emulation at f (floor 0)."""
    x = (F32(-127) + np.linspace(0.001, 0.999, 257).astype(F32)).astype(F32)
    f = (x + F32(127)).astype(F32)
    p = fa4_emulated(f, degree, variant=variant).astype(np.float64)
    want = ((p - 1.0) * 2.0 ** -126).astype(F32)
    got = fa4_emulated(x, degree, variant=variant)
    assert np.array_equal(bits(got), bits(want))
    assert np.all(np.abs(got) < np.finfo(F32).tiny)


@pytest.mark.parametrize("degree", sorted(POLY_EX2))
def test_tiny_negative_gives_half_of_p_at_one(degree):
    """floor(x) = -1 and 1 + x rounds to 1.0, so the result is p(1)/2 (not 1): FA4's near-zero error."""
    coeffs = poly_coeffs(degree)
    x = np.array([-1e-30, -2.0 ** -25, -(2.0 ** -126)], dtype=F32)
    want = F32(horner_at_one(coeffs) / F32(2))
    for variant in VARIANTS:
        assert np.all(fa4_emulated(x, degree, variant=variant) == want)


def test_negative_subnormal_depends_on_ftz():
    """Without ftz (packed) a negative subnormal floors to -1 -> p(1)/2; the ftz forms flush it to -0 -> 1.0."""
    x = np.array([0x80000001, 0x807FFFFF], dtype=np.uint32).view(np.float32)
    assert np.all(fa4_emulated(x, variant="packed") == F32(horner_at_one(poly_coeffs(3)) / F32(2)))
    assert np.all(fa4_emulated(x, variant="scalar") == F32(1))
    assert np.all(fa4_emulated(x, variant="asm") == F32(1))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("degree", sorted(POLY_EX2))
def test_fast_path_equals_exact_sequence_on_random_bits(variant, degree):
    rng = np.random.default_rng(degree)
    x = np.concatenate([rng.integers(0, 2 ** 32, 1 << 18, dtype=np.uint64).astype(np.uint32).view(F32),
                        rng.uniform(-130, 130, 1 << 16).astype(F32),
                        rng.uniform(2.0 ** 22 - 64, 2.0 ** 22 + 64, 1 << 12).astype(F32)])
    fast = fa4_emulated(x, degree, variant=variant)
    exact = fa4_emulated(x, degree, variant=variant, exact_only=True)
    assert np.array_equal(bits(fast), bits(exact))


def test_shape_and_torch_roundtrip():
    torch = pytest.importorskip("torch")
    x = np.linspace(-20, 0, 24, dtype=F32).reshape(2, 3, 4)
    y = fa4_emulated(x)
    assert y.shape == x.shape and y.dtype == F32
    t = fa4_emulated(torch.from_numpy(x))
    assert isinstance(t, torch.Tensor) and np.array_equal(t.numpy(), y)


def test_custom_coeffs_equal_builtin_set():
    x = np.random.default_rng(0).uniform(-30, 5, 4096).astype(F32)
    coeffs = tuple(float(c) for c in POLY_EX2[4])
    assert np.array_equal(bits(fa4_emulated(x, 4, coeffs=coeffs)), bits(fa4_emulated(x, 4)))


# --- bad arguments --------------------------------------------------------------------------------------
def test_degree_without_fa4_set_raises():
    with pytest.raises(ValueError, match="degree"):
        fa4_emulated(np.zeros(3, F32), 6)
    with pytest.raises(ValueError, match="degree"):
        fa4_emulated(np.zeros(3, F32), 0)


def test_degree_and_coeffs_length_must_agree():
    with pytest.raises(ValueError, match=r"degree: coeffs has 5 values \(degree 4\), got degree=3"):
        fa4_emulated(np.zeros(3, F32), 3, coeffs=POLY_EX2[4])


def test_coefficient_not_fp32_raises():
    coeffs = (1.0, 0.1, 0.2, 0.3)  # 0.1 has no exact fp32 value
    with pytest.raises(ValueError, match=r"coeffs: c1 = 0\.1 is not exactly an fp32 number"):
        fa4_emulated(np.zeros(3, F32), 3, coeffs=coeffs)
    with pytest.raises(ValueError, match=r"coeffs: c0 = inf"):
        fa4_emulated(np.zeros(3, F32), 1, coeffs=(np.inf, 1.0))


@pytest.mark.parametrize("x", [np.zeros(3, np.float64), np.zeros(3, np.float16), np.zeros(3, np.int32),
                               [0.1, 0.2]])
def test_wrong_dtype_raises(x):
    with pytest.raises(ValueError, match="x"):
        fa4_emulated(x)


def test_unknown_variant_raises():
    with pytest.raises(ValueError, match="variant must be one of .*asm.*packed.*scalar"):
        fa4_emulated(np.zeros(3, F32), variant="fast")
