"""ulp_distance on the monotone integer line, and the bit views."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import fa4num.fp as fp


def test_consecutive_floats_are_one_apart_across_zero_and_infinity():
    def walk(start, n):
        xs = [np.float32(start)]
        while len(xs) <= n and xs[-1] != np.inf:
            with np.errstate(over="ignore"):  # max -> inf is a step of the line
                xs.append(np.nextafter(xs[-1], np.float32(np.inf)))
        return np.array(xs, np.float32)

    for start in (-np.inf, np.uint32(0x80000003).view(np.float32), np.nextafter(np.finfo(np.float32).max, 0)):
        a = walk(start, 6)
        d = fp.ulp_distance(a[1:], a[:-1], signed=True)
        # nextafter steps -min -> -0 -> ... ; -0 and +0 are one point of the line
        assert list(d) == [0 if (x == 0 and y == 0) else 1 for x, y in zip(a[1:], a[:-1])]


def test_matches_integer_positions():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 0x7F800001, 10000, dtype=np.int64) * np.where(rng.random(10000) < 0.5, -1, 1)
    b = rng.integers(0, 0x7F800001, 10000, dtype=np.int64) * np.where(rng.random(10000) < 0.5, -1, 1)

    def to_f32(pos):
        return np.where(pos < 0, (-pos) | 0x80000000, pos).astype(np.uint32).view(np.float32)

    assert np.array_equal(fp.ulp_distance(to_f32(a), to_f32(b), signed=True), a - b)
    assert np.array_equal(fp.ulp_distance(to_f32(a), to_f32(b)), np.abs(a - b))
    assert fp.ulp_distance(np.float32(0.0), np.float32(-0.0)) == 0
    assert fp.ulp_distance(np.float32(np.inf), np.float32(np.finfo(np.float32).max)) == 1


def test_nan_rule():
    nan, qnan = np.float32(np.nan), np.uint32(0xFFC00001).view(np.float32)
    d = fp.ulp_distance(np.float32([nan, nan, 1.0]), np.float32([qnan, 1.0, nan]), signed=True)
    assert list(d) == [0, fp.NAN_DISTANCE, -fp.NAN_DISTANCE]
    assert fp.NAN_DISTANCE > fp.ulp_distance(np.float32(-np.inf), np.float32(np.inf))


def test_bfloat16_and_float16():
    one = np.array([1.0], ml_dtypes.bfloat16)
    nxt = (one.view(np.uint16) + 1).view(ml_dtypes.bfloat16)
    assert fp.ulp_distance(nxt, one) == 1
    assert fp.ulp_distance(-one, one, signed=True) == -2 * 0x3F80
    h = np.float16([1.0, -2.0])
    assert list(fp.ulp_distance(h, h[::-1], signed=True)) == [0x3C00 + 0x4000, -(0x3C00 + 0x4000)]


def test_bits_round_trip():
    x = np.float32([1.0, -0.0, np.inf])
    assert list(fp.as_bits(x)) == [0x3F800000, 0x80000000, 0x7F800000]
    assert np.array_equal(fp.from_bits(fp.as_bits(x)), x)
    b = fp.to_bf16(x)
    assert fp.as_bits(b).dtype == np.uint16
    assert np.array_equal(fp.from_bits(fp.as_bits(b), "bfloat16").view(np.uint16), b.view(np.uint16))


@pytest.mark.parametrize("call, match", [
    (lambda: fp.ulp_distance(np.zeros(2), np.zeros(2)), "a must have dtype one of"),
    (lambda: fp.ulp_distance(np.zeros(2, np.float32), np.zeros(2, np.float16)), "same dtype"),
    (lambda: fp.ulp_distance(np.zeros(2, np.float32), np.zeros(2, np.float32), signed=1), "signed must be"),
    (lambda: fp.from_bits(np.zeros(2, np.uint16)), "4 bytes per element"),
    (lambda: fp.from_bits(np.zeros(2, np.uint32), "float64"), "dtype must be one of"),
    (lambda: fp.as_bits(np.zeros(2)), "x must have dtype one of"),
])
def test_bad_arguments(call, match):
    with pytest.raises(ValueError, match=match):
        call()
