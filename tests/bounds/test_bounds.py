"""fa4num.bounds: the exp2 bound against exhaustive sweeps (cached, with a live recheck of slices), the MUFU
bounds against their models, and the attention bound against the H200 golden cases and the emulator."""
import math

import ml_dtypes
import numpy as np
import pytest

from fa4num.attention import forward
from fa4num.bounds import attention_error_bound, exp2_error_bound, mufu_error_bounds
from fa4num.bounds._observed import observed_exp2, observed_key
from fa4num.bounds.validate import check, golden_cases, golden_options
from fa4num.ex2 import Domain, fa4_implementation, sweep
from fa4num.fit.registry import read

_REG = {n: int(e["degree"]) for n, e in read()["entries"].items() if 1 <= int(e["degree"]) <= 5}
_CASES = [(d, None, "packed") for d in range(1, 6)] + [(3, None, "scalar"), (3, None, "asm")] + \
    [(deg, name, "packed") for name, deg in sorted(_REG.items())]
# one case per implementation (FA4's shipped entries are POLY_EX2 itself): the cache is keyed by the bits
_CASES = list({observed_key(degree=d, coeffs=c, variant=v): (d, c, v) for d, c, v in reversed(_CASES)}.values())


def _key(deg, coeffs, variant):
    return observed_key(degree=deg, coeffs=coeffs, variant=variant)


@pytest.mark.parametrize("deg,coeffs,variant", _CASES, ids=lambda c: str(c))
def test_exp2_bound_holds_and_is_within_10_percent_of_the_exhaustive_max(deg, coeffs, variant):
    obs = observed_exp2(_key(deg, coeffs, variant))
    if obs is None:
        pytest.skip("no cached exhaustive sweep yet (python3 -m fa4num.bounds._observed)")
    b = exp2_error_bound(deg, coeffs=coeffs, variant=variant)
    assert obs["max_rel"] <= b.relative <= 1.1 * obs["max_rel"], (b.relative, obs["max_rel"])
    assert b.ratio_to_observed == pytest.approx(b.relative / obs["max_rel"])


def test_exp2_cached_maximum_is_what_a_live_sweep_finds_at_its_argmax():
    obs = observed_exp2(observed_key(degree=3))
    if obs is None:
        pytest.skip("no cached sweep")
    x = obs["max_rel_x"]
    r = sweep(fa4_implementation(3), Domain(kind="bits", lo=x - 2.0 ** -12, hi=x + 2.0 ** -12, nans=False),
              xbins=0, progress=False)
    assert r.max_rel == pytest.approx(obs["max_rel"], rel=1e-9)
    assert r.max_rel_x == x


def test_exp2_bound_holds_on_a_slice_of_every_binade_of_the_fraction_rounding_range():
    # x in (-1/2, 0): f = RN(1 + x) rounds; the bound's Cody-Waite term covers it (every 97th bit pattern)
    b = exp2_error_bound(5)
    r = sweep(fa4_implementation(5), Domain(kind="bits", lo=-0.5, hi=-2.0 ** -30, nans=False, stride=97),
              xbins=0, progress=False)
    assert 0 < r.max_rel <= b.relative


def test_exp2_subnormal_absolute_bound():
    from fa4num.ex2 import fa4_emulated
    x = np.arange(-127.0, -126.0, 2.0 ** -17, dtype=np.float64).astype(np.float32)   # every fp32 there
    y = fa4_emulated(x).astype(np.float64)
    err = np.abs(y - np.exp2(x.astype(np.float64)))
    b = exp2_error_bound(3)
    assert err.max() <= b.absolute_subnormal <= 1.01 * err.max()


@pytest.mark.parametrize("degree", [1, 3, 5])
def test_exp2_polynomial_term_is_certified_without_the_fitter(degree):
    """The bound's polynomial term (its own arb enclosure on [0, 1]) lies between the fitter's certified lower
    bound of the sup and 1.01 times its certified upper bound."""
    from fa4num.ex2 import poly_coeffs
    from fa4num.fit import sup_norm
    cert = sup_norm("2^x", [float(c) for c in poly_coeffs(degree)], (0.0, 1.0), error="relative")
    term = exp2_error_bound(degree).terms["polynomial"]
    assert cert.certified_lower <= term <= 1.01 * cert.certified_bound


def test_exp2_bound_does_not_import_the_fitter():
    import subprocess
    import sys
    code = ("import sys; from fa4num.bounds import exp2_error_bound; exp2_error_bound(3); "
            "print(any(m.startswith('fa4num.fit') for m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"


def test_exp2_bound_terms_and_errors():
    b = exp2_error_bound(3)
    t = b.terms
    assert t["polynomial"] >= t["polynomial_reached"] * 0.999 and t["exponent_insertion"] == 0
    assert 2.0 ** -26 < t["cody_waite"] < 2.0 ** -24 * math.log(2) * 2
    assert t["q0_range"][0] >= 1.0 and t["q0_range"][1] < 2.0
    with pytest.raises(ValueError, match="domain"):
        exp2_error_bound(3, domain=(0.0, 200.0))
    with pytest.raises(ValueError, match="variant"):
        exp2_error_bound(3, variant="fast")
    with pytest.raises(ValueError, match="subintervals"):
        exp2_error_bound(3, subintervals=3)


def test_mufu_bounds_hold_on_random_inputs_and_are_attained_by_the_tables():
    from fa4num.hw import mufu_ex2, mufu_rcp
    mb = mufu_error_bounds("sm90")
    rng = np.random.default_rng(1)
    x = rng.uniform(-126, 16, 2_000_000).astype(np.float32)
    rel = np.abs(mufu_ex2(x).astype(np.float64) / np.exp2(x.astype(np.float64)) - 1)
    assert rel.max() <= mb.ex2_relative
    g = (np.arange(1 << 23) * 2.0 ** -23).astype(np.float32)
    rel_t = np.abs(mufu_ex2(-g).astype(np.float64) / np.exp2(-g.astype(np.float64)) - 1)
    assert rel_t.max() >= 0.5 * mb.ex2_relative
    m = rng.uniform(1e-30, 1e30, 1_000_000).astype(np.float32)
    assert (np.abs(mufu_rcp(m).astype(np.float64) * m - 1) <= mb.rcp_relative).all()


_GOLD = golden_cases()


@pytest.mark.parametrize("case", _GOLD, ids=lambda c: f"{c[1].split('_h200')[0]}:{c[0]}")
def test_attention_bound_holds_on_every_h200_golden_case(case):
    name, _f, spec, q, k, v, vals, idx, lse = case
    c = check(q, k, v, vals, lse, name=name, source="h200", idx=idx, **golden_options(spec))
    assert (c.out_violations, c.lse_violations) == (0, 0), c
    if c.max_observed > 0:
        assert c.ratio_max <= 10, c


def test_h200_golden_covers_softcap_nonfinite_and_odd_scales():
    """No forward golden case is skipped: the 8 softcap ones are bounded finitely, and every element the kernel
    returned non-finite has bound +inf (the golden test above counts any other non-finite result a violation)."""
    softcap = [c for c in _GOLD if c[2].get("softcap")]
    assert len(softcap) == 8
    odd = [c for c in _GOLD if c[0].startswith(("nonfinite_", "scale_negative", "scale_huge"))]
    assert len(odd) == 10
    for name, _f, spec, q, k, v, vals, idx, lse in softcap[:2] + odd[:5]:
        c = check(q, k, v, vals, lse, name=name, source="h200", idx=idx, **golden_options(spec))
        nonfinite = int((~np.isfinite(np.asarray(vals, np.float64))).sum())
        assert (c.out_violations, c.lse_violations) == (0, 0) and c.unbounded >= nonfinite, c
        if spec.get("softcap"):
            assert c.unbounded == 0 and 1 < c.ratio_max <= 10, c
        if (spec.get("softmax_scale") or 1) < 0:
            assert c.unbounded == c.elements, c


@pytest.mark.parametrize("kernel,opts", [("fa4-sm90", {"softcap": 5.0}),
                                         ("fa4-sm90", {"softcap": 30.0, "window_size": (40, 3)}),
                                         ("fa4-sm100", {"softcap": 15.0, "ex2_emu_freq": 2, "ex2_emu_start_frg": 0})])
def test_attention_bound_holds_with_softcap(kernel, opts):
    q, k, v = _inputs(19, 96, 200, 64, qmult=3.0, outlier=True)
    r = forward(q, k, v, kernel=kernel, causal=True, **opts)
    c = check(q, k, v, r.out, r.lse, kernel=kernel, causal=True, **opts)
    assert (c.out_violations, c.lse_violations, c.unbounded) == (0, 0, 0), c
    b = attention_error_bound(q, k, v, kernel=kernel, causal=True, full_terms=True, **opts)
    assert b.terms["softcap"] > 0
    # the exact attention is that of the capped scores cap tanh(S scale / cap)
    cap = opts["softcap"]
    s = cap * np.tanh(np.einsum("bihd,bjhd->bhij", q.astype(np.float64), k.astype(np.float64)) / 8.0 / cap)
    sq, sk = s.shape[-2:]
    s = np.where(np.arange(sk)[None, :] <= np.arange(sq)[:, None] + sk - sq, s, -np.inf)
    if "window_size" in opts:
        s = np.where(np.arange(sk)[None, :] >= np.arange(sq)[:, None] + sk - sq - 40, s, -np.inf)
    lse = np.log(np.exp(s - s.max(-1, keepdims=True)).sum(-1)) + s.max(-1)
    np.testing.assert_allclose(b.lse_exact, lse, rtol=1e-12)


def test_attention_bound_with_non_finite_inputs_and_odd_scales():
    q, k, v = _inputs(23, 64, 150, 32, heads=2)
    q[0, 5, 1, 3] = np.nan
    k[0, 40, 0, 0] = np.inf
    v[0, 100, 1, 7] = -np.inf
    r = forward(q, k, v, causal=True)
    b = attention_error_bound(q, k, v, causal=True)
    c = check(q, k, v, r.out, r.lse, causal=True, bound=b)
    assert (c.out_violations, c.lse_violations) == (0, 0), c
    bad = ~np.isfinite(np.asarray(r.out, np.float64))
    assert bad.any() and np.isinf(b.out[bad]).all() and np.isnan(b.out_exact[bad]).all()
    # head 0: every row sees key 40 (causal, seqlen_k - seqlen_q = 86), so none is bounded; head 1 keeps a finite
    # bound off the NaN query's row and V's column 7
    assert np.isinf(b.out[0, :, 0]).all() and np.isinf(b.out[0, :, 1, 7]).all()
    assert np.isfinite(b.out[0, 6:, 1, :7]).all() and np.isfinite(b.out[0, :5, 1, 8:]).all()
    # a negative scale: exact attention of -q and |scale|, no finite bound; a huge one: rows past the analysis
    q, k, v = _inputs(29, 32, 64, 32)
    neg, pos = attention_error_bound(q, k, v, softmax_scale=-0.1), attention_error_bound(-q, k, v, softmax_scale=0.1)
    np.testing.assert_array_equal(neg.out_exact, pos.out_exact)
    assert np.isinf(neg.out).all() and np.isinf(neg.lse).all()
    r = forward(q, k, v, softmax_scale=1e30)
    c = check(q, k, v, r.out, r.lse, softmax_scale=1e30)
    assert (c.out_violations, c.lse_violations) == (0, 0) and c.unbounded > 0, c


def _inputs(seed, sq, sk, d, *, dtype=ml_dtypes.bfloat16, qmult=1.0, outlier=False, heads=1):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((1, sq, heads, d), dtype=np.float32) * np.float32(qmult)
    k = rng.standard_normal((1, sk, heads, d), dtype=np.float32)
    v = rng.standard_normal((1, sk, heads, d), dtype=np.float32)
    if outlier:
        q[..., 3] *= 20
        k[..., 3] *= 5
        k[:, 0] *= 4    # an attention sink
    return q.astype(dtype), k.astype(dtype), v.astype(dtype)


@pytest.mark.parametrize("kernel,dtype,opts,qmult,outlier,causal", [
    ("fa4-sm90", ml_dtypes.bfloat16, {}, 3.0, True, True),
    ("fa4-sm100", ml_dtypes.bfloat16, {"ex2_emu_freq": 2, "ex2_emu_res": 2, "ex2_emu_start_frg": 0}, 2.0, False,
     False),
    ("fa4-sm100", ml_dtypes.bfloat16, {"rescale_threshold": 16.0, "ex2_emu_freq": 4, "ex2_emu_start_frg": 0}, 4.0,
     True, True),
    ("fa4-sm100", np.float16, {"rescale_threshold": 0.0}, 1.0, False, False),
    ("fa4-sm100", ml_dtypes.float8_e4m3fn, {}, 1.0, True, False),
    ("fa4-sm100", ml_dtypes.float8_e5m2, {"coeffs": "fa4num-minimax-deg4", "ex2_emu_freq": 2,
                                          "ex2_emu_start_frg": 0}, 1.0, False, True),
])
def test_attention_bound_holds_on_the_emulator(kernel, dtype, opts, qmult, outlier, causal):
    q, k, v = _inputs(7, 96, 160, 64, dtype=dtype, qmult=qmult, outlier=outlier)
    r = forward(q, k, v, kernel=kernel, causal=causal, **opts)
    c = check(q, k, v, r.out, r.lse, kernel=kernel, causal=causal, **opts)
    assert (c.out_violations, c.lse_violations) == (0, 0), c
    assert c.max_bound >= c.max_observed > 0


def test_attention_bound_result_fields_and_probabilistic_variant():
    q, k, v = _inputs(3, 40, 70, 32, heads=2)
    b = attention_error_bound(q, k, v, kernel="fa4-sm100", delta=1e-3, full_terms=True)
    assert b.out.shape == q.shape and b.lse.shape == (1, 2, 40)
    assert (b.out_probabilistic <= b.out).all() and (b.out > 0).all()
    assert set(b.terms) >= {"s_gemm", "scale_exponent", "exp2_mufu", "exp2_software", "rescale", "p_cast",
                            "row_sum", "pv_gemm", "rcp", "out_cast"}
    # by default neither the probabilistic variant nor the GEMM terms: the same worst-case bound, cheaper
    plain = attention_error_bound(q, k, v, kernel="fa4-sm100")
    assert plain.out_probabilistic is None and "s_gemm" not in plain.terms and "scale_exponent" not in plain.terms
    for name in ("out", "lse", "out_exact", "lse_exact"):
        assert np.array_equal(getattr(plain, name), getattr(b, name)), name
    assert {n: plain.terms[n] for n in plain.terms} == {n: b.terms[n] for n in plain.terms}
    assert b.a_priori["bound"] >= b.out.max()
    exact = np.einsum("bhij,bjhd->bihd", _softmax(q, k), v.astype(np.float64))
    np.testing.assert_allclose(b.out_exact, exact, rtol=1e-12, atol=1e-14)


def _softmax(q, k):
    s = np.einsum("bihd,bjhd->bhij", q.astype(np.float64), k.astype(np.float64)) / math.sqrt(q.shape[-1])
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_attention_bound_rejects_bad_arguments():
    q, k, v = _inputs(0, 8, 8, 16)
    with pytest.raises(ValueError, match="kernel"):
        attention_error_bound(q, k, v, kernel="fa3")
    with pytest.raises(ValueError, match="delta"):
        attention_error_bound(q, k, v, delta=2.0)
    with pytest.raises(TypeError, match="softmax_scale"):
        attention_error_bound(q, k, v, softmax_scale="0.1")
    with pytest.raises(ValueError, match="softcap"):
        attention_error_bound(q, k, v, softcap=-1.0)
    with pytest.raises(ValueError, match="unknown option"):
        attention_error_bound(q, k, v, bogus=1)


def test_cli_bounds(capsys):
    from fa4num.cli import main
    assert main(["bounds", "exp2", "--degree", "2"]) == 0
    assert "relative bound" in capsys.readouterr().out
    assert main(["bounds", "attention", "--shape", "1,32,1,32"]) == 0
    assert "ratio" in capsys.readouterr().out


@pytest.mark.parametrize("kernel,causal,window", [("fa4-sm90", False, (20, 5)), ("fa4-sm100", True, (33, None)),
                                                  ("fa4-sm100", False, (None, 0))])
def test_attention_bound_holds_with_sliding_windows(kernel, causal, window):
    q, k, v = _inputs(11, 260, 150, 64, qmult=2.0, outlier=True)    # seqlen_q > seqlen_k: the first rows see nothing
    opts = {"window_size": window} if kernel == "fa4-sm90" else {"window_size": window, "ex2_emu_freq": 2,
                                                                 "ex2_emu_start_frg": 0}
    r = forward(q, k, v, kernel=kernel, causal=causal, **opts)
    c = check(q, k, v, r.out, r.lse, kernel=kernel, causal=causal, **opts)
    assert (c.out_violations, c.lse_violations) == (0, 0), c
    b = attention_error_bound(q, k, v, kernel=kernel, causal=causal, **opts)
    # rows whose window is empty: out 0 and LSE -inf in both the kernel and the bound's exact attention
    empty = ~np.isfinite(b.lse_exact)
    assert empty.any() and not empty.all()
    assert (np.asarray(r.lse)[empty] == -np.inf).all() and (b.out[:, empty[0, 0]] == 0).all()


@pytest.mark.parametrize("kernel,sink_scale", [("fa4-sm90", 3.0), ("fa4-sm100", 3.0), ("fa4-sm100", 40.0)])
def test_attention_bound_holds_with_a_learnable_sink(kernel, sink_scale):
    q, k, v = _inputs(13, 200, 130, 64, heads=2, qmult=2.0)   # causal with seqlen_q > seqlen_k: rows with no key
    sink = np.array([sink_scale, -sink_scale], np.float32)
    opts = {"learnable_sink": sink} if kernel == "fa4-sm90" else {"learnable_sink": sink, "ex2_emu_freq": 2,
                                                                  "ex2_emu_start_frg": 0}
    r = forward(q, k, v, kernel=kernel, causal=True, **opts)
    c = check(q, k, v, r.out, r.lse, kernel=kernel, causal=True, **opts)
    assert (c.out_violations, c.lse_violations) == (0, 0), c
    b = attention_error_bound(q, k, v, kernel=kernel, causal=True, **opts)
    empty = ~np.isfinite(_softmax_lse(q, k, causal=True))
    assert empty.any() and (b.lse_exact[:, :, empty] == sink[None, :, None]).all()
    with pytest.raises(ValueError, match="learnable_sink"):
        attention_error_bound(q, k, v, kernel=kernel, learnable_sink=np.zeros(3, np.float32))


def _softmax_lse(q, k, *, causal):
    s = np.einsum("bihd,bjhd->bhij", q.astype(np.float64), k.astype(np.float64))[0, 0]
    sq, sk = s.shape
    if causal:
        s = np.where(np.arange(sk)[None, :] <= np.arange(sq)[:, None] + sk - sq, s, -np.inf)
    return s.max(axis=1)


@pytest.mark.parametrize("kernel", ["fa4-sm90", "fa4-sm100"])
def test_attention_bound_holds_on_varlen_batches(kernel):
    cu_q, cu_k = np.array([0, 70, 71, 230], np.int32), np.array([0, 90, 150, 300], np.int32)
    q, k, v = (a[0] for a in _inputs(17, 230, 300, 64, heads=2, qmult=2.0, outlier=True))
    opts = dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=160, max_seqlen_k=150)
    r = forward(q, k, v, kernel=kernel, causal=True, **opts)
    c = check(q, k, v, r.out, r.lse, kernel=kernel, causal=True, **opts)
    assert (c.out_violations, c.lse_violations) == (0, 0), c
    # each sequence is its own problem: the bound of a sequence alone is the varlen bound's slice
    b = attention_error_bound(q, k, v, kernel=kernel, causal=True, **opts)
    one = attention_error_bound(q[None, 71:230], k[None, 150:300], v[None, 150:300], kernel=kernel, causal=True)
    assert b.out.shape == q.shape and b.lse.shape == (2, 230)
    np.testing.assert_allclose(b.out_exact[71:230], one.out_exact[0])
    with pytest.raises(ValueError, match="cu_seqlens_k"):
        attention_error_bound(q, k, v, kernel=kernel, cu_seqlens_q=cu_q)


# --- soundness regressions (issue 24): each construction broke the bound (a finite bound exceeded, or an
# exception) before the fix

@pytest.mark.parametrize("kernel", ["fa4-sm90", "fa4-sm100"])
def test_attention_bound_is_inf_where_the_pv_accumulator_overflows(kernel):
    # 64 equal weights (q = 0) with v = 2^127: O = 64 * 2^127 saturates in fp32
    q = np.zeros((1, 4, 1, 64), ml_dtypes.bfloat16)
    k = np.zeros((1, 64, 1, 64), ml_dtypes.bfloat16)
    v = np.full((1, 64, 1, 64), 2.0 ** 127, ml_dtypes.bfloat16)
    r = forward(q, k, v, kernel=kernel)
    b = attention_error_bound(q, k, v, kernel=kernel)
    c = check(q, k, v, r.out, r.lse, kernel=kernel, bound=b)
    assert (c.out_violations, c.lse_violations) == (0, 0), c
    assert np.isinf(b.out).all() and np.isfinite(b.out_exact).all()
    # half the keys: O = 32 * 2^127 still overflows; v = 2^100 does not, and stays finitely bounded
    v = np.full((1, 64, 1, 64), 2.0 ** 100, ml_dtypes.bfloat16)
    r = forward(q, k, v, kernel=kernel)
    c = check(q, k, v, r.out, r.lse, kernel=kernel)
    assert (c.out_violations, c.lse_violations, c.unbounded) == (0, 0, 0), c


def test_attention_bound_takes_the_forwards_options_from_plan():
    from fa4num.attention import plan
    # SM100 with GQA and pack_gqa=False: 16 software-exp2 columns (10 under FA4's default pack-GQA)
    q, k, v = _inputs(31, 64, 256, 128, heads=4, qmult=3.0)
    k, v = k[:, :, :1], v[:, :, :1]
    args = dict(kernel="fa4-sm100", pack_gqa=False)
    p = plan(q, k, v, **args)
    assert p.opts.ex2_emu_freq == 16 and plan(q, k, v, kernel="fa4-sm100").opts.ex2_emu_freq == 10
    b = attention_error_bound(problem=p)
    assert b.options["ex2_emu_freq"] == 16 and b.options == attention_error_bound(q, k, v, **args).options
    r = forward(problem=p)
    c = check(q, k, v, r.out, r.lse, bound=b)
    assert (c.out_violations, c.lse_violations, c.unbounded) == (0, 0, 0), c


@pytest.mark.parametrize("kernel", ["fa4-sm90", "fa4-sm100"])
def test_attention_bound_is_inf_for_a_scale_that_vanishes_in_fp32(kernel):
    q, k, v = _inputs(37, 16, 40, 64)
    for scale in (1e-46, 0.0, -1e-46, math.inf):
        r = forward(q, k, v, kernel=kernel, softmax_scale=scale)
        b = attention_error_bound(q, k, v, kernel=kernel, softmax_scale=scale)
        c = check(q, k, v, r.out, r.lse, kernel=kernel, softmax_scale=scale, bound=b)
        assert (c.out_violations, c.lse_violations) == (0, 0), (scale, c)
        assert np.isinf(b.out).all() and np.isinf(b.lse).all()
    assert np.isnan(np.asarray(forward(q, k, v, kernel=kernel, softmax_scale=1e-46).out, np.float64)).any()
    # the smallest scales whose fp32 scale_log2 is nonzero keep a finite, holding bound
    r = forward(q, k, v, kernel=kernel, softmax_scale=1e-40)
    c = check(q, k, v, r.out, r.lse, kernel=kernel, softmax_scale=1e-40)
    assert (c.out_violations, c.lse_violations, c.unbounded) == (0, 0, 0), c


@pytest.mark.parametrize("kernel", ["fa4-sm90", "fa4-sm100"])
def test_attention_bound_with_a_sink_on_rows_without_keys_at_a_tiny_scale(kernel):
    # causal, seqlen_q = 64 > seqlen_k = 16: 48 rows see no key (and the last-key index is below -sk);
    # SM100 computes such a row's max as RN(sink RN(LOG2_E / scale_log2)), which overflows at scale 1e-40
    q, k, v = _inputs(41, 64, 16, 64)
    sink = np.array([3.0], np.float32)
    for scale in (1e-40, 1e-30):
        r = forward(q, k, v, kernel=kernel, causal=True, softmax_scale=scale, learnable_sink=sink)
        b = attention_error_bound(q, k, v, kernel=kernel, causal=True, softmax_scale=scale, learnable_sink=sink)
        c = check(q, k, v, r.out, r.lse, bound=b)
        assert (c.out_violations, c.lse_violations) == (0, 0), (scale, c)
        empty = np.arange(64) < 48
        overflow = kernel == "fa4-sm100" and scale == 1e-40
        assert np.isinf(b.lse[0, 0, empty]).all() == overflow and np.isfinite(b.lse[0, 0, ~empty]).all()


def test_row_sum_depth_is_the_emulators_combine_order():
    """Lemma 3 (docs/bounds.md, section 5.5), SM100: the depth of every P in the row sum, counted by replaying
    the emulator's own row-sum code (fa4num.softmax.sm100) on values that count their roundings."""
    from fa4num.bounds.attention import _row_sum_depth
    from fa4num.softmax import sm100

    class Depth:
        """A value that records the most roundings any of its inputs went through (adding 0 is exact)."""
        def __init__(self, d):
            self.d = d

        def __add__(self, o):
            if not isinstance(o, Depth):
                return self if o == 0 else Depth(self.d + 1)
            return Depth(max(self.d, o.d) + 1)

        __radd__ = __add__

        def __mul__(self, o):
            return Depth(self.d + 1)

        __rmul__ = __mul__

    for tn in (64, 128):
        for blocks in (1, 2, 5):
            rs = Depth(0)
            for blk in range(blocks):
                p = np.array([Depth(0) for _ in range(tn)], dtype=object)
                rs = sm100._update_row_sum_row.py_func(p, rs, Depth(0), blk == 0)
            assert rs.d == _row_sum_depth(True, blocks, tn), (tn, blocks, rs.d)
            # the old count, blocks (tile_n/8 + 1) + 3, missed the per-block combine
            assert blocks == 1 or rs.d > blocks * (tn // 8 + 1) + 3


@pytest.mark.parametrize("kernel,dims", [("fa4-sm100", (192, 128)), ("fa4-sm90", (64, 32)),
                                         ("fa4-sm90", (128, 256))])
def test_attention_bound_with_head_dim_v_unlike_head_dim(kernel, dims):
    d, dv = dims
    q, k, _ = _inputs(43, 64, 200, d, qmult=2.0, outlier=True)
    v = _inputs(44, 1, 200, dv)[2]
    r = forward(q, k, v, kernel=kernel, causal=True)
    b = attention_error_bound(q, k, v, kernel=kernel, causal=True)
    assert b.out.shape == (1, 64, 1, dv)
    c = check(q, k, v, r.out, r.lse, bound=b)
    assert (c.out_violations, c.lse_violations, c.unbounded) == (0, 0, 0), c


@pytest.mark.parametrize("kernel", ["fa4-sm90", "fa4-sm100"])
def test_attention_bound_with_paged_kv_and_refusals(kernel):
    rng = np.random.default_rng(47)
    kp, vp = (rng.standard_normal((6, 64, 2, 64)).astype(ml_dtypes.bfloat16) for _ in range(2))
    q = rng.standard_normal((2, 50, 2, 64)).astype(ml_dtypes.bfloat16)
    pt = np.array([[3, 1, 5], [0, 2, 4]], np.int32)
    r = forward(q, kp, vp, kernel=kernel, page_table=pt, causal=True)
    c = check(q, kp, vp, r.out, r.lse, kernel=kernel, page_table=pt, causal=True)
    assert (c.out_violations, c.lse_violations, c.unbounded) == (0, 0, 0), c
    # varlen q over paged KV
    qv, cu_q = q[:, :45].reshape(90, 2, 64), np.array([0, 30, 90], np.int32)
    r = forward(qv, kp, vp, kernel=kernel, page_table=pt, cu_seqlens_q=cu_q, causal=True)
    c = check(qv, kp, vp, r.out, r.lse, kernel=kernel, page_table=pt, cu_seqlens_q=cu_q, causal=True)
    assert (c.out_violations, c.lse_violations, c.unbounded) == (0, 0, 0), c
    q, k, v = _inputs(0, 8, 300, 64)
    if kernel == "fa4-sm100":      # split-KV runs in the forward; the bound refuses it by name
        with pytest.raises(ValueError, match="num_splits"):
            attention_error_bound(q, k, v, kernel=kernel, num_splits=2)
    with pytest.raises(ValueError, match="head_dim"):   # what the kernel refuses, as forward does
        attention_error_bound(q[..., :12], k[..., :12], v, kernel=kernel)


def _peaked_rows(seed):
    """The stale-max family of docs/bounds.md section 5.9 (fa4num.bounds.stale.peaked_rows)."""
    from fa4num.bounds.stale import peaked_rows
    return peaked_rows(seed)


def test_attention_bound_sees_the_stale_max():
    """Threshold 0 casts the arg-max's P exactly (it is 2^0 up to the exponent's roundings), threshold 8 casts
    2^(4..6) with a bf16 rounding error: the bounds must differ (issue 24: they were identical), both holding."""
    q, k, v = _peaked_rows(53)
    worst = {}
    for thr in (0.0, 8.0):
        args = dict(kernel="fa4-sm100", softmax_scale=math.log(2), rescale_threshold=thr)
        r = forward(q, k, v, **args)
        b = attention_error_bound(q, k, v, **args)
        c = check(q, k, v, r.out, r.lse, bound=b)
        assert (c.out_violations, c.lse_violations, c.unbounded) == (0, 0, 0), (thr, c)
        worst[thr] = (c.max_bound, c.max_observed)
    assert worst[8.0][0] >= 1.2 * worst[0.0][0], worst
