"""The sweep engine against a brute-force computation with fa4num.fp's array functions on small domains."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from fa4num import fp
from fa4num.ex2 import fa4_emulated
from fa4num.ex2 import engine as S
from fa4num.ex2.engine import Domain, Implementation, fa4_implementation, sweep
from fa4num.fp.reference import exp2_cr_f32_bf16


def domain_inputs(domain: Domain) -> np.ndarray:
    """The inputs of a domain, enumerated here with numpy (independently of the engine's kernels)."""
    parts = []
    for mode, start, stride, scale, count in domain.intervals():
        k = np.arange(count, dtype=np.int64)
        if mode == 0:
            parts.append(((start + k * stride) & 0xFFFFFFFF).astype(np.uint32).view(np.float32))
        else:
            parts.append(((start + k) * scale).astype(np.float32))
    return np.concatenate(parts)


def brute_force(x: np.ndarray, y: np.ndarray) -> dict:
    """The statistics the engine reports, from fa4num.fp's references, ulp distance and bf16 cast."""
    r32 = np.asarray(fp.exp2_cr(x, "float32"))
    rb = np.asarray(fp.exp2_cr(x, "bfloat16"))
    d = fp.ulp_distance(y, r32)
    nan_mis = np.isnan(y) != np.isnan(r32)
    yb = np.asarray(fp.to_bf16(y))
    both_nan_b = np.isnan(yb.astype(np.float32)) & np.isnan(rb.astype(np.float32))
    bf_d = fp.ulp_distance(yb, rb)
    bf = (~both_nan_b & (yb.view(np.uint16) != rb.view(np.uint16))) | nan_mis
    ok = ~nan_mis
    with np.errstate(all="ignore"):
        exact64 = np.exp2(x.astype(np.float64))
        normal = (np.abs(r32) >= 2.0 ** -126) & np.isfinite(r32) & np.isfinite(y) & ok
        rel = np.where(normal, np.abs(y.astype(np.float64) - exact64) / exact64, -1.0)
    dd = np.where(ok, d, -1)
    binade = x.view(np.uint32) >> 23
    return {"count": x.size, "exact": int((ok & (d == 0)).sum()), "max_ulp": int(dd.max()),
            "max_ulp_x": float(x[np.argmax(dd)]), "max_rel": float(rel.max()),
            "mean_ulp": float(d[ok].sum()) / max(int(ok.sum()), 1),
            "bf16": int(bf.sum()), "bf16_far": int((bf & (nan_mis | (bf_d > 1))).sum()), "nan": int(nan_mis.sum()),
            "hist": np.bincount(np.minimum(dd[ok], S.LINEAR_BINS), minlength=S.LINEAR_BINS + 1),
            "binade_count": np.bincount(binade, minlength=512), "binade_bf16": np.bincount(binade[bf], minlength=512),
            "binade_max": np.array([dd[binade == b].max() if (binade == b).any() else -1 for b in range(512)]),
            "rel": rel}


def check_against_brute_force(result, x, y):
    want = brute_force(x, y)
    assert result.count == want["count"]
    assert result.exact == want["exact"]
    assert result.max_ulp == want["max_ulp"]
    assert result.max_ulp_x == want["max_ulp_x"]
    assert math.isclose(result.mean_ulp, want["mean_ulp"], rel_tol=1e-12)
    assert math.isclose(result.max_rel, want["max_rel"], rel_tol=1e-12, abs_tol=0.0) or want["max_rel"] < 0
    assert result.bf16_mismatch == want["bf16"]
    assert result.bf16_mismatch_far == want["bf16_far"]
    assert result.nan_mismatch == want["nan"]
    lin = np.zeros(S.LINEAR_BINS + 1, np.int64)
    lin[:len(result.ulp_hist_linear)] = result.ulp_hist_linear
    lin[S.LINEAR_BINS] = sum(result.ulp_hist_log2.values())
    assert np.array_equal(lin, want["hist"])
    got_count = np.zeros(512, np.int64)
    got_bf = np.zeros(512, np.int64)
    got_max = np.full(512, -1)
    for row in result.binades:
        b = (256 if row["sign"] == "-" else 0) + row["exponent_field"]
        got_count[b], got_bf[b], got_max[b] = row["count"], row["bf16_mismatch"], row["max_ulp"]
    assert np.array_equal(got_count, want["binade_count"])
    assert np.array_equal(got_bf, want["binade_bf16"])
    assert np.array_equal(got_max, want["binade_max"])


DOMAINS = [
    Domain(lo=-1.0, hi=-0.99),                          # the softmax range, errors up to ~1400 ulp
    Domain(lo=-127.01, hi=-125.99),                     # wrong subnormals, clamp
    Domain(lo=127.5, hi=131.0),                         # exponent overflow into inf/NaN patterns
    Domain(lo=-2.0 ** -120, hi=2.0 ** -120, stride=1009),   # both zeros, subnormals, tiny values
    Domain(lo=2.0 ** 21, hi=2.0 ** 24, stride=65),      # the fast path's edge 2^22
    Domain(kind="grid", lo=-20.0, hi=8.0, grid_bits=10),
]


@pytest.mark.parametrize("domain", DOMAINS, ids=lambda d: d.describe())
@pytest.mark.parametrize("variant", ["packed", "asm"])
def test_fused_sweep_matches_brute_force(domain, variant):
    x = domain_inputs(domain)
    y = fa4_emulated(x, variant=variant)
    res = sweep(fa4_implementation(3, variant=variant), domain, chunk=1 << 16, progress=False)
    check_against_brute_force(res, x, y)


def test_special_values_sweep_matches_brute_force():
    """NaNs (every payload class), infinities and the largest finite values, through the array path."""
    bits = np.array([0x7F800001, 0x7FC00000, 0x7FFFFFFF, 0xFF800001, 0xFFC00000, 0xFFFFFFFF, 0x7F800000,
                     0xFF800000, 0x7F7FFFFF, 0xFF7FFFFF, 0, 0x80000000], dtype=np.uint32)
    x = bits.view(np.float32)
    impl = fa4_implementation(3)
    tot = S.Stats.zeros()
    pending = np.zeros((4, 16), np.uint32)
    r32 = np.ascontiguousarray(fp.exp2_cr(x, "float32"))
    rb = (np.asarray(fp.exp2_cr(x, "bfloat16")).view(np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)
    y = fa4_emulated(x)
    for src in (S.Source(S.SweepMode.GIVEN, x.size, xs=x, ys=y),
                S.Source(S.SweepMode.GIVEN_WITH_REFERENCE, x.size, xs=x, ys=y, r32s=r32, rbs=rb)):
        blocks = S.Stats.zeros((4,))
        S._sweep_chunk(src, S._NOT_FUSED, S.XBins(), blocks, pending)
        tot.merge(blocks)
    res = S._result(impl, Domain(), tot, 0, 0.0, lambda **k: {})
    doubled = np.concatenate([x, x])
    check_against_brute_force(res, doubled, np.concatenate([y, y]))


def test_array_implementation_path_equals_fused():
    """An implementation given as an array function (as the MUFU model is) gives the same statistics."""
    fused = fa4_implementation(2, variant="scalar")
    plain = Implementation("fa4-as-array", {}, fused.array_fn)
    dom = Domain(lo=-3.0, hi=-2.9)
    a = sweep(fused, dom, chunk=1 << 15, progress=False)
    b = sweep(plain, dom, chunk=1 << 15, progress=False)
    for name in ("count", "exact", "max_ulp", "max_ulp_x", "max_rel", "max_rel_x", "bf16_mismatch",
                 "bf16_mismatch_far", "nan_mismatch", "ulp_hist_linear", "ulp_hist_log2", "binades", "xbins"):
        assert getattr(a, name) == getattr(b, name), name


def test_unsettled_references_are_resolved_outside_numba():
    """Inputs handed to the gmpy2 path (as when the hard-case table lacks them) are counted like any other."""
    impl = fa4_implementation(3)
    x = np.random.default_rng(5).uniform(-30, 1, 300).astype(np.float32)
    blocks, tot = S.Stats.zeros((4,)), S.Stats.zeros()
    pending = np.zeros((4, S._PENDING_CAP), np.uint32)
    pending[1, :x.size] = x.view(np.uint32)
    blocks.total["unsettled"][1] = x.size
    S._settle_pending(impl, blocks, pending, tot, S.XBins())
    res = S._result(impl, Domain(), tot, 0, 0.0, lambda **k: {})
    check_against_brute_force(res, x, fa4_emulated(x))


def test_reference_kernel_equals_fp_exp2_cr():
    rng = np.random.default_rng(9)
    x = np.concatenate([rng.integers(0, 2 ** 32, 1 << 16, dtype=np.uint64).astype(np.uint32).view(np.float32),
                        np.arange(-160, 130, 0.25, dtype=np.float32),
                        (rng.choice([-1, 1], 4096) * 2.0 ** rng.uniform(-40, -20, 4096)).astype(np.float32)])
    got = np.array([exp2_cr_f32_bf16(v)[:2] for v in x], dtype=np.float32)
    want32 = np.asarray(fp.exp2_cr(x, "float32"))
    wantb = np.asarray(fp.exp2_cr(x, "bfloat16")).view(np.uint16)
    assert np.array_equal(got[:, 0].view(np.uint32), want32.view(np.uint32))
    # the bf16 result is held in a float32 whose upper 16 bits are the bf16 bits
    assert np.array_equal((got[:, 1].view(np.uint32) >> 16).astype(np.uint16), wantb)


def test_domain_enumeration():
    assert sum(iv[4] for iv in Domain().intervals()) == 1 << 32
    # both zeros plus every subnormal up to 2^-140 = 2^9 * 2^-149, on each side
    assert sum(iv[4] for iv in Domain(lo=-(2.0 ** -140), hi=2.0 ** -140).intervals()) == 2 * (2 ** 9 + 1)
    x = domain_inputs(Domain(lo=-1.0, hi=-0.5))
    assert x.min() == -1.0 and x.max() == -0.5 and np.unique(x).size == x.size == 2 ** 23 + 1


@pytest.mark.parametrize("end", [math.inf, -math.inf])
def test_domain_of_one_infinity_is_that_value(end):
    # [inf, inf] is +inf alone: not the 2^24 - 2 NaN patterns an all-inputs sweep adds, nor "all fp32 inputs"
    dom = Domain(lo=end, hi=end)
    x = domain_inputs(dom)
    assert x.size == 1 and x[0] == end
    assert "all fp32 inputs" not in dom.describe()


def test_json_and_figures(tmp_path):
    from fa4num.ex2.plots import plot_error_vs_x, plot_ulp_histogram
    res = sweep(fa4_implementation(3), Domain(lo=-2.0, hi=0.0, stride=4099), progress=False)
    res.to_json(tmp_path / "r.json")
    back = json.loads((tmp_path / "r.json").read_text())
    assert back["max_ulp"] == res.max_ulp and "code_revision" in back["provenance"]
    plot_error_vs_x(res, tmp_path / "a.png")
    plot_ulp_histogram(res, tmp_path / "b.png")
    assert (tmp_path / "a.png").stat().st_size > 0 and (tmp_path / "b.png").stat().st_size > 0


@pytest.mark.parametrize("kwargs, match", [
    ({"lo": 1.0, "hi": 0.0}, "lo"), ({"stride": 0}, "stride"), ({"kind": "grid"}, "grid"),
    ({"kind": "cube"}, "kind"), ({"kind": "grid", "lo": -1.0, "hi": 0.0, "grid_bits": 200}, "grid_bits")])
def test_bad_domains_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        sweep(fa4_implementation(), Domain(**kwargs), progress=False)


def test_bad_implementation_arguments_raise():
    with pytest.raises(ValueError, match="variant"):
        fa4_implementation(3, variant="vector")
    with pytest.raises(ValueError, match="degree"):
        fa4_implementation(7)
