"""fa4num.attention.forward: input handling, FA4's layout and masking conventions, the modes and knobs, and
accuracy against the fp64 reference. Bit-exactness against the H200 is in tests/attention/test_golden.py."""
import ml_dtypes
import numpy as np
import pytest
import torch

from fa4num.attention import forward, inputs
from fa4num.attention.reference import (attention_fa_reference, attention_fp64, fa_rule, metrics,
                                        round_once)

BF16 = ml_dtypes.bfloat16


def _case(**kw):
    base = dict(name="t", kind="normal", batch=1, seqlen_q=96, seqlen_k=160, heads=2, heads_kv=2,
                head_dim=64, causal=False, seed=3)
    base.update(kw)
    spec = inputs.CaseSpec(**base)
    return spec, inputs.make_inputs(spec)


def _bits(x):
    return np.ascontiguousarray(x).view(np.uint16)


# ---------------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("change,match", [
    (lambda q, k, v: (q[0], k, v), "q must be 4-D"),
    (lambda q, k, v: (q, k[:, :10], v), "matching batch, seqlen_k"),
    (lambda q, k, v: (q, np.concatenate([k, k]), np.concatenate([v, v])), "batch"),
    (lambda q, k, v: (q, k[..., :32], v[..., :32]), "head_dim"),
    (lambda q, k, v: (np.concatenate([q, q[:, :, :1]], axis=2), k, v), "multiple of k/v heads"),
    (lambda q, k, v: (q.astype(np.float32), k.astype(np.float32), v.astype(np.float32)), "dtype"),
    (lambda q, k, v: (q, k.astype(np.float16), v), "share one dtype"),
])
def test_bad_shapes_and_dtypes_raise(change, match):
    _, (q, k, v) = _case()
    with pytest.raises(ValueError, match=match):
        forward(*change(q, k, v))


@pytest.mark.parametrize("d,kernel", [(12, "fa4-sm90"), (264, "fa4-sm90"), (192, "fa4-sm100")])
def test_unsupported_head_dim_raises(d, kernel):
    q = np.zeros((1, 8, 1, d), BF16)
    with pytest.raises(ValueError, match="head_dim"):
        forward(q, q, q, kernel=kernel)


def test_fp8_only_on_sm100():
    _, (q, k, v) = _case()
    q8, k8, v8 = (x.astype(np.float32).astype(ml_dtypes.float8_e4m3fn) for x in (q, k, v))
    with pytest.raises(ValueError, match="not supported by kernel 'fa4-sm90'"):
        forward(q8, k8, v8)
    assert forward(q8, k8, v8, kernel="fa4-sm100").out.dtype == BF16


@pytest.mark.parametrize("name", ["q", "k", "v"])
def test_nan_or_inf_input_raises_only_when_asked(name):
    _, qkv = _case()
    qkv = dict(zip("qkv", (x.copy() for x in qkv)))
    qkv[name][0, 5, 1, 7] = np.nan if name != "v" else np.inf
    with pytest.raises(ValueError, match=f"^{name} contains NaN or inf"):
        forward(qkv["q"], qkv["k"], qkv["v"], nonfinite="raise")
    r = forward(qkv["q"], qkv["k"], qkv["v"])       # default: the kernel's bits (golden tests check them)
    assert not np.isfinite(r.out.astype(np.float32)).all()


@pytest.mark.parametrize("kw,match", [
    (dict(kernel="fa3"), "kernel"), (dict(mode="fast"), "mode"), (dict(tile_n=100), "tile_n"),
    (dict(rescale_threshold=4.0), "unknown option"), (dict(gemm="tf32"), "gemm"),
    (dict(softmax_scale=float("nan")), "softmax_scale"),
    (dict(kernel="fa4-sm100", rescale_threshold=200.0), "max_offset \\+ rescale_threshold"),
])
def test_bad_options_raise(kw, match):
    _, (q, k, v) = _case()
    with pytest.raises(ValueError, match=match):
        forward(q, k, v, **kw)


# ---------------------------------------------------------------------------------------------- conventions
def test_torch_inputs_give_torch_outputs_with_the_same_bits():
    _, (q, k, v) = _case()
    t = [torch.from_numpy(x.view(np.int16)).view(torch.bfloat16) for x in (q, k, v)]
    rn = forward(q, k, v)
    rt = forward(*t)
    assert isinstance(rt.out, torch.Tensor) and rt.out.dtype == torch.bfloat16 and rt.lse.dtype == torch.float32
    assert np.array_equal(rt.out.view(torch.int16).numpy(), _bits(rn.out).view(np.int16))
    assert np.array_equal(rt.lse.numpy().view(np.uint32), rn.lse.view(np.uint32))


@pytest.mark.parametrize("kernel", ["fa4-sm90", "fa4-sm100"])
def test_gqa_equals_repeated_kv_heads(kernel):
    _, (q, k, v) = _case(heads=4, heads_kv=1, head_dim=128, causal=True, seqlen_q=140)
    r1 = forward(q, k, v, causal=True, kernel=kernel)
    r2 = forward(q, np.repeat(k, 4, axis=2), np.repeat(v, 4, axis=2), causal=True, kernel=kernel,
                 **({} if kernel == "fa4-sm90" else {"ex2_emu_freq": r1.options.ex2_emu_freq}))
    assert np.array_equal(_bits(r1.out), _bits(r2.out))
    assert np.array_equal(r1.lse, r2.lse)


@pytest.mark.parametrize("kernel", ["fa4-sm90", "fa4-sm100"])
def test_causal_is_bottom_right_aligned_and_empty_rows_are_zero(kernel):
    _, (q, k, v) = _case(seqlen_q=200, seqlen_k=70, head_dim=128)
    r = forward(q, k, v, causal=True, kernel=kernel)
    ref, lse = attention_fp64(q, k, v, causal=True)
    empty = np.isinf(lse)
    assert empty.sum() == 2 * 130          # rows i < sq - sk see no key
    assert (r.lse[empty] == -np.inf).all() and np.isfinite(r.lse[~empty]).all()
    assert (r.out.astype(np.float32)[:, :130] == 0).all()
    assert np.abs(r.lse[~empty] - lse[~empty]).max() < 1e-5
    assert metrics(r.out, ref).rel_l2 < 1e-2


def test_softmax_scale_is_applied():
    _, (q, k, v) = _case()
    r = forward(q, k, v, softmax_scale=0.3)
    ref, lse = attention_fp64(q, k, v, softmax_scale=0.3)
    assert np.abs(r.lse - lse).max() < 1e-5 and metrics(r.out, ref).rel_l2 < 1e-2


# ---------------------------------------------------------------------------------------------- accuracy
@pytest.mark.parametrize("kernel,d,causal", [("fa4-sm90", 64, False), ("fa4-sm90", 256, True),
                                              ("fa4-sm100", 128, False), ("fa4-sm100", 128, True)])
def test_accuracy_passes_fa_rule_and_is_near_the_rounding_floor(kernel, d, causal):
    _, (q, k, v) = _case(head_dim=d, causal=causal, seqlen_q=150, seqlen_k=300)
    r = forward(q, k, v, causal=causal, kernel=kernel)
    ref, _ = attention_fp64(q, k, v, causal=causal)
    out_ref, out_pt = attention_fa_reference(q, k, v, causal=causal)
    assert fa_rule(r.out, out_ref, out_pt).passed
    floor = metrics(round_once(ref, BF16), ref).rel_l2
    assert metrics(r.out, ref).rel_l2 < 2 * floor


def test_round_once_is_a_single_rounding():
    x = np.array([1 + 2.0 ** -8 + 2.0 ** -40])      # ml_dtypes via fp32 rounds twice and gets 1.0
    assert round_once(x, BF16).astype(np.float64)[0] == 1 + 2.0 ** -7


@pytest.mark.parametrize("kernel", ["fa4-sm90", "fa4-sm100"])
def test_statistical_mode_is_close_to_bit_exact(kernel):
    _, (q, k, v) = _case(head_dim=128, seqlen_q=200, seqlen_k=400, q_mult=2.0)
    exact = forward(q, k, v, kernel=kernel)
    stat = forward(q, k, v, kernel=kernel, mode="statistical")
    assert stat.options.gemm == "blas" and stat.options.mufu_arch == "libm"
    diff = np.abs(exact.out.astype(np.float64) - stat.out.astype(np.float64))
    assert diff.max() <= 4 * 2.0 ** -8 * np.abs(exact.out.astype(np.float64)).max()
    assert (diff == 0).mean() > 0.9
    assert np.abs(exact.lse - stat.lse).max() < 1e-5


def test_exact_gemm_model_differs_from_wgmma_only_in_last_bits():
    _, (q, k, v) = _case(head_dim=128, seqlen_k=300)
    w = forward(q, k, v)
    e = forward(q, k, v, gemm="exact")
    d = np.abs(w.out.astype(np.float64) - e.out.astype(np.float64))
    assert d.max() <= 2.0 ** -7 * np.abs(w.out.astype(np.float64)).max()
    assert (d == 0).mean() > 0.9 and (d > 0).any()


# ---------------------------------------------------------------------------------------------- SM100 knobs
def test_sm100_knobs_and_stats():
    _, (q, k, v) = _case(head_dim=128, seqlen_q=300, seqlen_k=512, q_mult=3.0)
    r = forward(q, k, v, kernel="fa4-sm100")
    o = r.options
    assert (o.use_2cta_instrs, o.ex2_emu_freq, o.ex2_emu_start_frg, o.rescale_threshold) == (True, 10, 1, 8.0)
    st = r.stats
    assert st.kv_blocks.shape == (1, 2, 300) and (st.kv_blocks == 4).all()
    assert (st.exp2_emulated == 4 * 24).all() and (st.exp2_mufu == 4 * 104).all()
    assert st.rescales_avoided.sum() > 0 and 0 < st.max_lag.max() <= 8 and st.gemm == "tcgen05"
    none = forward(q, k, v, kernel="fa4-sm100", ex2_emu_freq=0, rescale_threshold=0.0)
    assert none.stats.exp2_emulated.sum() == 0 and none.stats.rescales_avoided.sum() == 0
    assert none.stats.rescales_done.sum() > st.rescales_done.sum()
    assert (none.stats.rescale_events == none.stats.rescales_done).all()
    assert (_bits(none.out) != _bits(r.out)).any()
    deg1 = forward(q, k, v, kernel="fa4-sm100", coeffs="fa4-deg1")
    assert deg1.options.poly_degree == 1


def test_sm100_fp8_saturation_is_counted():
    """With fp8's max_offset 8 plus a lag of up to 4 (FA4's 2026-04 setting, #2577), e4m3 P saturates at 448."""
    _, (q, k, v) = _case(head_dim=128, seqlen_q=64, seqlen_k=512, q_mult=2.0)
    q8, k8, v8 = (x.astype(np.float32).astype(ml_dtypes.float8_e5m2) for x in (q, k, v))
    ok = forward(q8, k8, v8, kernel="fa4-sm100")
    assert ok.options.max_offset == 8 and ok.options.rescale_threshold == 0.0
    assert ok.stats.p_saturated.sum() == 0
    q4, k4, v4 = (x.astype(np.float32).astype(ml_dtypes.float8_e4m3fn) for x in (q, k, v))
    with pytest.raises(ValueError, match="max_offset"):
        forward(q4, k4, v4, kernel="fa4-sm100", rescale_threshold=4.0)


@pytest.mark.parametrize("causal", [False, True])
def test_sm100_head_dim_256_uses_the_2cta_tuning_entry(causal):
    _, (q, k, v) = _case(head_dim=256, causal=causal, seqlen_q=130, seqlen_k=260)
    r = forward(q, k, v, causal=causal, kernel="fa4-sm100")
    assert (r.options.use_2cta_instrs, r.options.ex2_emu_freq, r.options.ex2_emu_start_frg) == (True, 14, 0)
    assert (r.stats.exp2_emulated == r.stats.kv_blocks * 24).all()
    ref, _ = attention_fp64(q, k, v, causal=causal)
    assert metrics(r.out, ref).rel_l2 < 2 * metrics(round_once(ref, BF16), ref).rel_l2
