"""Correctly rounded references (fa4num.fp.exp2_cr / log2_cr / rcp_cr) against gmpy2/MPFR, rounding once into
float32 or bfloat16: random inputs over each function's whole range, inputs whose exact result lies next to a
rounding midpoint (where a float64 shortcut or a detour through float32 would go wrong), every entry of the
hard-case tables, and the special values."""
from __future__ import annotations

import gmpy2
import ml_dtypes
import numpy as np
import pytest

import fa4num.fp as fp
from fa4num.fp import reference as ref

FUNCS = ("exp2", "log2", "rcp")
TARGETS = ("float32", "bfloat16")
API = {"exp2": fp.exp2_cr, "log2": fp.log2_cr, "rcp": fp.rcp_cr}
SCALAR = {("exp2", "float32"): ref.exp2_cr_f32, ("exp2", "bfloat16"): ref.exp2_cr_bf16,
          ("log2", "float32"): ref.log2_cr_f32, ("log2", "bfloat16"): ref.log2_cr_bf16,
          ("rcp", "float32"): ref.rcp_cr_f32, ("rcp", "bfloat16"): ref.rcp_cr_bf16}


def as_f32(y):
    return y.astype(np.float32) if y.dtype == ml_dtypes.bfloat16 else y


def check(func, target, x):
    x = np.ascontiguousarray(x, np.float32)
    got = np.asarray(API[func](x, target))
    want = ref.gmpy2_reference(func, x, target).view(np.uint32)  # bf16 values (or the NaN) held in float32
    if target == "bfloat16":  # compare bf16 bits: the upper half of the float32 that holds the bf16 value
        got, want = got.view(np.uint16), (want >> np.uint32(16)).astype(np.uint16)
    else:
        got = got.view(np.uint32)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, [(repr(x[i]), repr(got[i]), repr(want[i])) for i in bad[:5]]


def random_inputs(func, n, seed):
    rng = np.random.default_rng(seed)
    if func == "exp2":  # the whole non-trivial range, tiny |x|, and random bit patterns (NaN, ±inf, huge)
        tiny = rng.uniform(-1, 1, n // 4) * 2.0 ** -rng.integers(0, 40, n // 4)
        patterns = rng.integers(0, 1 << 32, n // 4, dtype=np.uint64).astype(np.uint32).view(np.float32)
        return np.concatenate([rng.uniform(-152, 129, n).astype(np.float32), tiny.astype(np.float32), patterns])
    bits = rng.integers(0, 0x7F800000, n, dtype=np.int64).astype(np.uint32)  # every positive finite float32
    x = bits.view(np.float32).astype(np.float64)
    if func == "log2":
        x = np.concatenate([x, 1 + rng.uniform(-2.0 ** -10, 2.0 ** -10, n // 4)])
    else:
        x = np.concatenate([x, -x[: n // 4]])
    return x.astype(np.float32)


def near_midpoints(func, target, n, seed):
    """x such that f(x) lands within about an fp32 ulp of a midpoint of the target format."""
    rng = np.random.default_rng(seed)
    prec = ref.TARGETS[target][0]
    e = {"exp2": rng.integers(-133, 128, n), "log2": rng.integers(-7, 8, n), "rcp": rng.integers(-127, 127, n)}[func]
    mid = np.ldexp(rng.integers(1 << (prec - 1), 1 << prec, n) + 0.5, e - (prec - 1))
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        x = {"exp2": np.log2(mid), "log2": np.exp2(mid), "rcp": 1 / mid}[func]
    x = x[np.isfinite(x) & (np.abs(x) < 3e38)].astype(np.float32)
    # and the float32 neighbours, to straddle the midpoint
    return np.concatenate([x, np.nextafter(x, np.float32(np.inf)), np.nextafter(x, np.float32(-np.inf))])


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("func", FUNCS)
def test_random_inputs_match_gmpy2(func, target):
    check(func, target, random_inputs(func, 20_000, seed=1))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("func", FUNCS)
def test_inputs_near_midpoints_match_gmpy2(func, target):
    check(func, target, near_midpoints(func, target, 10_000, seed=2))


@pytest.mark.parametrize("name", ["exp2_float32", "exp2_bfloat16", "log2_float32", "log2_bfloat16"])
def test_hard_case_tables_are_correct_and_complete(name):
    func, target = name.split("_")
    xs, ys = ref._TABLES[name]
    x = xs.view(np.float32)
    assert np.array_equal(ref.gmpy2_reference(func, x, target).view(np.uint32), ys.view(np.uint32))
    check(func, target, x)
    # the scalar kernel settles the table's inputs and random ones in numba (ok); experiments/fp_reference_sweep.py
    # checks this over all 2^32 inputs
    rng = np.random.default_rng(3)
    sample = np.concatenate([x, rng.integers(0, 1 << 32, 2000, dtype=np.uint64).astype(np.uint32).view(np.float32)])
    assert all(SCALAR[func, target](v)[1] for v in sample)


def test_scalar_kernels_equal_array_functions():
    x = np.concatenate([random_inputs("exp2", 500, 4), random_inputs("rcp", 500, 4)])
    for (func, target), kernel in SCALAR.items():
        values = np.array([kernel(v)[0] for v in x], np.float32).view(np.uint32)
        expect = API[func](x, target)
        if target == "bfloat16":  # the kernel holds the bf16 value in a float32: its upper half is the bf16
            assert np.array_equal(values >> 16, expect.view(np.uint16))
        else:
            assert np.array_equal(values, expect.view(np.uint32))


@pytest.mark.parametrize("target", TARGETS)
def test_specials(target):
    inf, nan = np.float32(np.inf), np.float32(np.nan)
    sub = np.uint32(1).view(np.float32)
    x = np.float32([0.0, -0.0, inf, -inf, nan, 1.0, -1.0, sub, 128.0, -160.0])
    e, l, r = (as_f32(API[f](x, target)) for f in FUNCS)
    assert list(e[[0, 1, 2, 3, 5, 8, 9]]) == [1, 1, np.inf, 0, 2, np.inf, 0]
    assert list(l[[0, 1, 2, 5, 7]]) == [-np.inf, -np.inf, np.inf, 0, -149]
    assert np.isnan(l[[3, 4, 6]]).all()
    assert list(r[[0, 1, 2, 3, 5, 6]]) == [np.inf, -np.inf, 0, 0, 1, -1]
    assert np.signbit(r[3]) and not np.signbit(r[2])
    assert np.isinf(r[7])  # 1 / 2^-149 overflows
    for y in (e, l, r):
        assert np.all(y[np.isnan(y)].view(np.uint32) >> (16 if target == "bfloat16" else 0)
                      == (0x7FFF if target == "bfloat16" else 0x7FFFFFFF))


def test_underflow_ties_round_to_even():
    # 2^-150 is exactly half the smallest float32 subnormal (tie -> 0); 2^-134 likewise for bfloat16
    assert fp.exp2_cr(np.float32([-150.0]))[0] == 0
    assert fp.exp2_cr(np.float32([-149.0]))[0] == np.float32(2.0 ** -149)
    assert float(fp.exp2_cr(np.float32([-134.0]), "bfloat16")[0]) == 0
    assert float(fp.exp2_cr(np.float32([-133.0]), "bfloat16")[0]) == 2.0 ** -133


def test_bfloat16_is_rounded_once():
    """Find inputs where rounding 2^x to float32 first and then to bf16 differs from rounding once, and check the
    reference rounds once."""
    x = near_midpoints("exp2", "bfloat16", 5000, seed=5)
    with gmpy2.context(gmpy2.ieee(32)):
        twice = np.array([float(gmpy2.exp2(gmpy2.mpfr(float(v), 53))) for v in x], np.float32)
    twice = fp.to_bf16(twice).astype(np.float32)
    once = fp.exp2_cr(x, "bfloat16").astype(np.float32)
    differs = twice != once
    assert differs.sum() > 10
    assert np.array_equal(once, ref.gmpy2_reference("exp2", x, "bfloat16"))


def test_bad_arguments():
    with pytest.raises(ValueError, match="dtype must be one of"):
        fp.exp2_cr(np.zeros(2, np.float32), "float16")
    with pytest.raises(ValueError, match="x must have dtype float32"):
        fp.log2_cr(np.zeros(2))
