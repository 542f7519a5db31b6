"""fa4num.fp arithmetic against gmpy2/MPFR (binary32), plus the NVIDIA rules MPFR does not define.

What is checked where (see also experiments/fp_oracle_check.py):
- here, live against gmpy2: CI_CASES cases per op and per rounding mode (rn/rz/rm/rp), no ftz;
- here, against committed digests: the 10^6 cases per op and mode of experiments/fp_oracle_check.py, whose gmpy2
  results were computed once offline; fa4num.fp's results on the regenerated operands must hash to them;
- ftz has no CPU oracle: only its consistency with the non-ftz results is checked here; the GPU's flush rule is
  checked against golden vectors (tests/top/test_golden.py, tests/gpu/test_golden_gpu.py).
"""
from __future__ import annotations

import hashlib
import re
import json
from pathlib import Path

import numpy as np
import pytest

import fa4num.fp as fp
from fa4num.fp.cases import SPECIAL_VALUES, arith_cases
from fa4num.fp.oracle import gmpy2_arith_modes

OPS = ("add", "sub", "mul", "fma")
MODES = ("rn", "rz", "rm", "rp")
CI_CASES = 100_000
CANON = 0x7FFFFFFF
ORACLE_CHECK = Path(fp.__file__).with_name("data") / "oracle_check.json"


def bits(x):
    return np.asarray(x, np.float32).view(np.uint32)


@pytest.fixture(scope="module", params=OPS)
def oracle(request):
    op = request.param
    operands = arith_cases(op, CI_CASES, seed=7)
    return op, operands, gmpy2_arith_modes(op, *operands)


@pytest.mark.parametrize("mode", MODES)
def test_matches_gmpy2(oracle, mode):
    op, operands, refs = oracle
    got = getattr(fp, op)(*operands, rounding=mode)
    bad = np.flatnonzero(bits(got) != bits(refs[mode]))
    examples = [[hex(int(bits(x[i]))) for x in (*operands, got, refs[mode])] for i in bad[:5]]
    assert bad.size == 0, f"{op}.{mode}: {bad.size} mismatches of {CI_CASES}, e.g. (operands, got, gmpy2) {examples}"


@pytest.mark.parametrize("op", OPS)
def test_million_cases_match_offline_gmpy2_digests(op):
    record = json.loads(ORACLE_CHECK.read_text())
    operands = arith_cases(op, record["n"], seed=record["seed"])
    h = hashlib.sha256()
    for a in operands:
        h.update(a.view(np.uint8).tobytes())
    entry = record["ops"][op]
    assert h.hexdigest() == entry["operands_sha256"], "case generator changed: rerun experiments/fp_oracle_check.py"
    for mode in MODES:
        assert entry["modes"][mode]["mismatches"] == 0
        got = getattr(fp, op)(*operands, rounding=mode)
        assert hashlib.sha256(bits(got).tobytes()).hexdigest() == entry["modes"][mode]["gmpy2_sha256"], \
            f"{op}.{mode} differs from gmpy2 on the {record['n']} offline cases"


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("ftz", [False, True])
def test_every_nan_is_canonical(op, ftz):
    k = 3 if op == "fma" else 2
    grids = np.meshgrid(*([SPECIAL_VALUES] * k), indexing="ij")
    operands = [g.reshape(-1) for g in grids]
    for mode in MODES:
        got = getattr(fp, op)(*operands, rounding=mode, ftz=ftz)
        nan = np.isnan(got)
        assert nan.any()
        assert np.all(bits(got[nan]) == CANON)


def _flush(x):
    x = np.asarray(x, np.float32)
    return np.where(np.abs(x) < np.float32(2.0 ** -126), np.copysign(np.float32(0), x), x).astype(np.float32)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("mode", MODES)
def test_ftz_is_flush_of_exact_result(op, mode):
    """With .ftz the result is the non-ftz result on flushed inputs, flushed, except within one subnormal step of
    2^-126 where rounding with or without a bounded exponent can differ (decided by the golden vectors)."""
    operands = arith_cases(op, 20_000, seed=11)
    got = getattr(fp, op)(*operands, rounding=mode, ftz=True)
    plain = getattr(fp, op)(*[_flush(x) for x in operands], rounding=mode)
    expect = _flush(plain)
    near_boundary = np.abs(np.abs(plain.astype(np.float64)) - 2.0 ** -126) <= 2.0 ** -149
    same = (bits(got) == bits(expect)) | near_boundary
    assert same.all(), np.flatnonzero(~same)[:5]
    subnormal = (np.abs(got) < 2.0 ** -126) & (got != 0)
    assert not subnormal.any()


def test_exact_zero_signs():
    z, nz = np.float32(0.0), np.float32(-0.0)
    for mode in MODES:
        neg = mode == "rm"
        assert bits(fp.add(z, z, rounding=mode)) == 0
        assert bits(fp.add(nz, nz, rounding=mode)) == 0x80000000
        assert bits(fp.add(z, nz, rounding=mode)) == (0x80000000 if neg else 0)
        assert bits(fp.sub(np.float32(1.5), np.float32(1.5), rounding=mode)) == (0x80000000 if neg else 0)
        assert bits(fp.fma(np.float32(2), np.float32(3), np.float32(-6), rounding=mode)) == (
            0x80000000 if neg else 0)


def test_directed_overflow_saturates_or_not():
    big = np.float32(3e38)
    top = np.float32(np.finfo(np.float32).max)
    assert np.isinf(fp.add(big, big, rounding="rn"))
    assert fp.add(big, big, rounding="rz") == top
    assert fp.add(big, big, rounding="rm") == top
    assert np.isinf(fp.add(big, big, rounding="rp"))
    assert fp.mul(-big, big, rounding="rp") == -top


def test_max_min_nan_and_zero_rules():
    nan, other_nan = np.float32(np.nan), np.uint32(0xFFC00001).view(np.float32)
    a = np.array([nan, 1.0, nan, 0.0, -0.0, 2.0], np.float32)
    b = np.array([3.0, nan, other_nan, -0.0, 0.0, -5.0], np.float32)
    mx, mn = fp.max(a, b), fp.min(a, b)
    assert list(mx[[0, 1, 5]]) == [3.0, 1.0, 2.0] and list(mn[[0, 1, 5]]) == [3.0, 1.0, -5.0]
    assert bits(mx[2]) == CANON and bits(mn[2]) == CANON
    if fp.scalar.SIGNED_ZERO_ORDERED:
        assert list(bits(mx[3:5])) == [0, 0] and list(bits(mn[3:5])) == [0x80000000, 0x80000000]
    else:
        assert list(bits(mx[3:5])) == list(bits(a[3:5])) and list(bits(mn[3:5])) == list(bits(a[3:5]))


def test_max_min_match_numpy_on_ordered_values():
    x, y = arith_cases("add", 50_000, seed=3)
    ordinary = ~np.isnan(x) & ~np.isnan(y) & (x != y)
    assert np.array_equal(fp.max(x, y)[ordinary], np.maximum(x, y)[ordinary])
    assert np.array_equal(fp.min(x, y)[ordinary], np.minimum(x, y)[ordinary])
    fx, fy = _flush(x), _flush(y)
    ordinary = ~np.isnan(x) & ~np.isnan(y) & (fx != fy)
    assert np.array_equal(bits(fp.max(x, y, ftz=True)[ordinary]), bits(np.maximum(fx, fy)[ordinary]))


@pytest.mark.parametrize("op", OPS)
def test_f32x2_is_two_independent_ops(op):
    operands = [x[:2000].reshape(-1, 2) for x in arith_cases(op, 2000, seed=5)]
    for mode in MODES:
        packed = getattr(fp, op + "_f32x2")(*operands, rounding=mode, ftz=True)
        lanes = [getattr(fp, op)(*[x[:, j] for x in operands], rounding=mode, ftz=True) for j in (0, 1)]
        assert np.array_equal(bits(packed), bits(np.stack(lanes, axis=1)))
    with pytest.raises(ValueError, match="f32x2"):
        getattr(fp, op + "_f32x2")(*[np.zeros(3, np.float32)] * len(operands))


def test_broadcasting_and_scalars():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert fp.add(x, np.float32(1)).shape == (2, 3)
    assert np.array_equal(fp.mul(x, [2.0, 2.0, 2.0]), x * 2)
    assert np.array_equal(fp.fma(x, 2.0, x[:1]), x * 2 + x[:1])
    with pytest.raises(ValueError, match="broadcast"):
        fp.add(x, np.zeros(4, np.float32))


def test_torch_in_torch_out():
    torch = pytest.importorskip("torch")
    a = torch.tensor([1.0, 2.0, 2.0 ** -140])
    out = fp.mul(a, a, rounding="rp")
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    assert out.tolist()[:2] == [1.0, 4.0] and out.tolist()[2] == 2.0 ** -149
    with pytest.raises(ValueError, match="float32"):
        fp.add(a.double(), a)


@pytest.mark.parametrize("call, match", [
    (lambda: fp.add(np.zeros(2), np.zeros(2, np.float32)), "a must have dtype float32, got float64"),
    (lambda: fp.fma(*[np.zeros(2, np.float32)] * 2, np.zeros(2, np.float16)), "c must have dtype float32"),
    (lambda: fp.mul(np.zeros(2, np.float32), 0.1), "not exactly representable"),
    (lambda: fp.add(np.zeros(2, np.float32), 1.0, rounding="rne"), "rounding must be one of"),
    (lambda: fp.sub(np.zeros(2, np.float32), 1.0, rounding=0), "rounding must be one of"),
    (lambda: fp.fma(*[np.zeros(2, np.float32)] * 3, ftz="yes"), "ftz must be True or False"),
    (lambda: fp.max(np.zeros(2, np.float32), 1.0, ftz=1), "ftz must be True or False"),
    (lambda: fp.add("1", 1.0), "a must be"),
    # lists are converted only when they hold real numbers: no string, bool or complex is coerced
    (lambda: fp.add(["1.5"], 1.0), "a must hold real numbers, got '1.5' (str) in a list"),
    (lambda: fp.add([2.0, True], 1.0), "a must hold real numbers, got True (bool) in a list"),
    (lambda: fp.add(1.0, (1j,)), "b must hold real numbers, got 1j (complex) in a tuple"),
    (lambda: fp.add([[1.0, None]], 1.0), "a must hold real numbers, got None (NoneType) in a list"),
    (lambda: fp.add([[1.0], [2.0, 3.0]], 1.0), "a must hold real numbers, got [1.0] (list) in a list"),
])
def test_bad_arguments_name_the_argument(call, match):
    with pytest.raises(ValueError, match=re.escape(match)):
        call()


def test_value_beyond_fp32_is_refused_without_a_warning():
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # numpy's "overflow encountered in cast" used to precede the refusal
        with pytest.raises(ValueError, match="x holds values that are not exactly representable"):
            fp.to_bf16(1e300)
