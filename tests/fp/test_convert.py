"""fa4num.fp conversions: against gmpy2/MPFR rounding (precision, subnormals, overflow, then PTX's satfinite), and
against ml_dtypes wherever ml_dtypes has the same semantics (round to nearest even; fp8 only after clamping, since
ml_dtypes does not saturate). NaN bit patterns follow fa4num.fp.NAN_BITS (checked on the GPU by the golden
vectors)."""
from __future__ import annotations

import gmpy2
import ml_dtypes
import numpy as np
import pytest

import fa4num.fp as fp
from fa4num.fp.convert import FORMATS

FMTS = ("bf16", "fp16", "e4m3", "e5m2")
TO = {f: getattr(fp, "to_" + f) for f in FMTS}
FROM = {f: getattr(fp, "from_" + f) for f in FMTS}


def narrow_bits(y):
    return y.view(np.uint16 if y.dtype.itemsize == 2 else np.uint8).astype(np.int64)


def gmpy2_round(x, fmt):
    """RN of each float32 x in the format by MPFR (unbounded exponent above), then overflow/satfinite."""
    f = FORMATS[fmt]
    bias = (1 << (f.ebits - 1)) - 1
    qmin = 1 - bias - f.mant  # exponent of the smallest subnormal
    ctx = gmpy2.context(precision=f.mant + 1, emin=qmin + 1, emax=1 << 20, subnormalize=True)
    with gmpy2.context(precision=53):
        vals = list(map(gmpy2.mpfr, x.tolist()))
    with ctx:
        r = np.array([float(+v) for v in vals], np.float64)  # unary plus rounds into the context
    big = np.abs(r) > f.max_finite
    r[big] = np.sign(r[big]) * (f.max_finite if f.satfinite or not f.has_inf else np.inf)
    out = r.astype(f.dtype)  # exact: r is a value of the format (or ±inf)
    return np.where(np.isnan(x), fp.NAN_BITS[fmt], narrow_bits(out))


def adversarial(fmt, n, seed):
    """float32 values with mant+2 significant bits over the format's range: representable values, exact ties and
    quarter points, in the subnormal, normal and overflow ranges; plus random bit patterns."""
    f = FORMATS[fmt]
    rng = np.random.default_rng(seed)
    bias = (1 << (f.ebits - 1)) - 1
    sig = rng.integers(1 << (f.mant + 1), 1 << (f.mant + 2), n)
    e = rng.integers(1 - bias - f.mant - 3, bias + 3, n)
    x = np.ldexp(sig.astype(np.float64), e - (f.mant + 1)) * np.where(rng.random(n) < 0.5, -1, 1)
    x = x[np.abs(x) < 3e38].astype(np.float32)
    return np.concatenate([x, rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32),
                           np.float32([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan])])


@pytest.mark.parametrize("fmt", FMTS)
def test_matches_gmpy2_rounding(fmt):
    x = adversarial(fmt, 60_000, seed=1)
    got = narrow_bits(TO[fmt](x))
    ref = gmpy2_round(x, fmt)
    bad = np.flatnonzero(got != ref)
    assert bad.size == 0, [(hex(int(x[i:i + 1].view(np.uint32)[0])), hex(got[i]), hex(ref[i])) for i in bad[:5]]


@pytest.mark.parametrize("fmt", FMTS)
def test_matches_ml_dtypes_where_semantics_agree(fmt):
    f = FORMATS[fmt]
    rng = np.random.default_rng(2)
    x = rng.integers(0, 1 << 32, 1 << 21, dtype=np.uint64).astype(np.uint32)
    # every bf16 upper half with the lower halves that decide rounding
    hi = np.arange(1 << 16, dtype=np.uint32) << np.uint32(16)
    low = np.array([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF], np.uint32)
    x = np.concatenate([x, (hi[:, None] | low[None, :]).reshape(-1)]).view(np.float32)
    x = x[~np.isnan(x)]
    clamped = np.clip(x, -f.max_finite, f.max_finite) if f.satfinite else x
    with np.errstate(over="ignore"):  # overflow to inf is the expected result for bf16 / fp16
        ref = narrow_bits(clamped.astype(f.dtype))
    assert np.array_equal(narrow_bits(TO[fmt](x)), ref)


@pytest.mark.parametrize("fmt", FMTS)
def test_nan_and_saturation(fmt):
    f = FORMATS[fmt]
    nans = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFFFFFFF], np.uint32).view(np.float32)
    assert np.all(narrow_bits(TO[fmt](nans)) == fp.NAN_BITS[fmt])
    big = np.finfo(np.float32).max  # above every format's max + half an ulp
    edge = FROM[fmt](TO[fmt](np.float32([np.inf, -np.inf, big, -big])))
    top = f.max_finite if f.satfinite else np.inf
    assert list(edge) == [top, -top, top, -top]


@pytest.mark.parametrize("fmt", FMTS)
def test_widening_is_exact_and_round_trips(fmt):
    f = FORMATS[fmt]
    all_bits = np.arange(1 << f.width, dtype=np.uint16 if f.width == 16 else np.uint8)
    v = all_bits.view(f.dtype)
    wide = FROM[fmt](v)
    assert wide.dtype == np.float32
    ok = ~np.isnan(wide)
    assert np.array_equal(wide[ok].view(np.uint32), v[ok].astype(np.float32).view(np.uint32))
    back = ok & ~(np.isinf(wide) & f.satfinite)  # satfinite sends ±inf to ±max
    assert np.array_equal(narrow_bits(TO[fmt](wide[back])), all_bits[back].astype(np.int64))
    if fmt == "bf16":  # a 16-bit shift keeps the NaN's payload
        assert np.array_equal(wide[~ok].view(np.uint32), all_bits[~ok].astype(np.uint32) << 16)
    else:
        assert np.all(wide[~ok].view(np.uint32) == fp.NAN_FROM_NARROW)


@pytest.mark.parametrize("fmt", FMTS)
def test_packed_x2_puts_a_in_the_upper_half(fmt):
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal(1000).astype(np.float32) * 100 for _ in range(2))
    d = getattr(fp, f"to_{fmt}x2")(a, b)
    width = FORMATS[fmt].width
    assert d.dtype == (np.uint32 if width == 16 else np.uint16)
    assert np.array_equal(d >> width, narrow_bits(TO[fmt](a)).astype(d.dtype))
    assert np.array_equal(d & ((1 << width) - 1), narrow_bits(TO[fmt](b)).astype(d.dtype))
    ua, ub = getattr(fp, f"from_{fmt}x2")(d)
    assert np.array_equal(ua, FROM[fmt](TO[fmt](a))) and np.array_equal(ub, FROM[fmt](TO[fmt](b)))


@pytest.mark.parametrize("fmt", FMTS)
def test_packed_x2_round_trips_a_scalar(fmt):
    """0-d inputs (one packed register) unpack to float32 scalars in every format, NaN included (the e4m3/e5m2/
    fp16 widening once failed on a 0-d input)."""
    for a, b in ((np.float32(1.5), np.float32(-2.0)), (np.float32(np.nan), np.float32(0.25))):
        ua, ub = getattr(fp, f"from_{fmt}x2")(getattr(fp, f"to_{fmt}x2")(a, b))
        assert np.ndim(ua) == np.ndim(ub) == 0 and np.asarray(ua).dtype == np.float32
        assert np.array_equal(ua, FROM[fmt](TO[fmt](np.float32([a])))[0], equal_nan=True)
        assert ub == FROM[fmt](TO[fmt](np.float32([b])))[0]


def test_known_bf16_ties():
    x = np.float32([1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, 1e-40, -0.0])
    assert list(narrow_bits(fp.to_bf16(x))) == [0x3F80, 0x3F82, 0x0001, 0x8000]
    assert fp.to_bf16x2(np.float32(1.0), np.float32(2.0)) == 0x3F804000


def test_torch_tensors_keep_their_kind():
    torch = pytest.importorskip("torch")
    x = torch.randn(1000) * 1000
    y = fp.to_bf16(x)
    assert y.dtype == torch.bfloat16 and torch.equal(y, x.to(torch.bfloat16))
    assert torch.equal(fp.from_bf16(y), y.float())
    assert fp.to_e4m3(x).dtype == torch.float8_e4m3fn
    assert torch.equal(fp.from_e5m2(fp.to_e5m2(x)), torch.from_numpy(fp.from_e5m2(fp.to_e5m2(x.numpy()))))


@pytest.mark.parametrize("call, match", [
    (lambda: fp.to_bf16(np.zeros(3)), "x must have dtype float32, got float64"),
    (lambda: fp.to_e4m3(np.zeros(3, np.float16)), "x must have dtype float32"),
    (lambda: fp.from_bf16(np.zeros(3, np.float32)), "x must have dtype bfloat16"),
    (lambda: fp.from_e5m2(np.zeros(3, ml_dtypes.float8_e4m3fn)), "x must have dtype float8_e5m2"),
    (lambda: fp.to_fp16x2(np.zeros(2, np.float32), np.zeros(2)), "b must have dtype float32"),
    (lambda: fp.from_bf16x2(np.zeros(2, np.float32)), "packed bf16x2"),
])
def test_bad_arguments_name_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()
