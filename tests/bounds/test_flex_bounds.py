"""attention_error_bound on FlexAttention calls (mask_mod, block sparsity, the built-in score_mods): 0 violations
on the H200 flex goldens (tests/golden/attention/fa4_sm90_flex_h200.npz, its sampled output rows and every LSE)
and on the emulator of both kernels; the stale-max analysis follows a block-sparse call's visiting order; a user
score_mod is refused by name."""
import importlib.util
import math
import pathlib
import sys

import ml_dtypes
import numpy as np
import pytest

from fa4num.attention import flex, forward, plan
from fa4num.bounds import attention_error_bound
from fa4num.bounds.validate import check

ROOT = pathlib.Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "attention" / "fa4_sm90_flex_h200.npz"


def _capture():
    spec = importlib.util.spec_from_file_location("flex_capture", ROOT / "experiments" / "gpu" / "flex_capture.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["flex_capture"] = mod
    spec.loader.exec_module(mod)
    return mod


cap = _capture()
# the capture's user callables (identity, times_two) have no bound: refused, tested below
_USER_MODS = ("identity", "times_two")


def _golden():
    if not GOLDEN.exists():
        return [], {}
    arrays, meta = cap.read(GOLDEN)
    recs = [r for r in meta["cases"] if "error" not in r and not r["case"]["backward"]
            and r["case"]["score_mod"] not in _USER_MODS]
    return recs, arrays


_RECS, _ARRAYS = _golden()


def _golden_args(case, arrs):
    kw = dict(softcap=case["softcap"] or 0.0, kernel="fa4-sm90", score_mod=cap.emulator_score_mod(case),
              mask_mod=cap.emulator_mask_mod(case), aux_tensors=arrs["aux"] or None, pack_gqa=case["pack_gqa"])
    if case["softmax_scale"] is not None:
        kw["softmax_scale"] = case["softmax_scale"]
    if "bs" in arrs:
        kw["block_sparse_tensors"] = arrs["bs"]
    return kw


@pytest.mark.skipif(not GOLDEN.exists(), reason="flex golden not captured (experiments/gpu/flex_capture.py)")
@pytest.mark.parametrize("rec", _RECS, ids=lambda r: r["case"]["name"])
def test_flex_bound_holds_on_the_h200_kernel(rec):
    case = rec["case"]
    name = case["name"]
    arrs = cap.case_inputs(case)
    q = arrs["q"]
    dv = arrs["v"].shape[-1]
    rows = cap.sample_index(q.shape[1])
    idx = np.ravel_multi_index(np.meshgrid(np.arange(q.shape[0]), rows, np.arange(q.shape[2]), np.arange(dv),
                                           indexing="ij"), (q.shape[0], q.shape[1], q.shape[2], dv)).reshape(-1)
    out = _ARRAYS[f"{name}.out_rows"].view(q.dtype).reshape(-1)
    c = check(q, arrs["k"], arrs["v"], out, _ARRAYS[f"{name}.lse"], idx=idx, name=name, source="h200",
              **_golden_args(case, arrs))
    assert (c.out_violations, c.lse_violations, c.unbounded, c.lse_unbounded) == (0, 0, 0, 0), c
    assert c.max_observed > 0


def _inputs(seed, sq, sk, h, hk, d=64, dtype=ml_dtypes.bfloat16, q_mult=1.0):
    rng = np.random.default_rng(seed)
    return ((rng.standard_normal((1, sq, h, d)) * q_mult).astype(dtype),
            rng.standard_normal((1, sk, hk, d)).astype(dtype), rng.standard_normal((1, sk, hk, d)).astype(dtype))


_DOCS = np.repeat(np.arange(3, dtype=np.int32), [50, 90, 60])[None]
_EMU = {
    "rel_bias": (dict(score_mod=flex.rel_bias_mod()), {}),
    "rel_bias_clamped_uncontracted": (dict(score_mod=flex.rel_bias_mod(clamp=16, contract=False),
                                           softmax_scale=0.3), {}),
    "alibi_gqa": (dict(score_mod=flex.alibi_mod(), aux_tensors=[flex.alibi_slopes(4)]), dict(h=4, hk=2)),
    "alibi_exp2_causal": (dict(score_mod=flex.alibi_exp2_mod(), mask_mod=flex.causal_mask()), dict(h=4)),
    "softcap_mod": (dict(score_mod=flex.softcap_mod(10.0)), dict(q_mult=3.0)),
    "window_mask": (dict(mask_mod=flex.sliding_window_mask(40, 8)), {}),
    "prefix_lm_mqa": (dict(mask_mod=flex.prefix_lm_mask(70)), dict(hk=1)),
    "document_fp16": (dict(mask_mod=flex.document_mask(), aux_tensors=[_DOCS]), dict(dtype=np.float16)),
}


@pytest.mark.parametrize("kernel", ["fa4-sm90", "fa4-sm100"])
@pytest.mark.parametrize("label", sorted(_EMU))
def test_flex_bound_holds_on_the_emulator(kernel, label):
    args, shape = _EMU[label]
    q, k, v = _inputs(7, 200, 200, shape.get("h", 2), shape.get("hk", 2), dtype=shape.get("dtype", ml_dtypes.bfloat16),
                      q_mult=shape.get("q_mult", 1.0))
    args = dict(args, kernel=kernel)
    r = forward(q, k, v, **args)
    c = check(q, k, v, r.out, r.lse, **args)
    assert (c.out_violations, c.lse_violations, c.unbounded) == (0, 0, 0), c
    assert 0 < c.max_observed <= c.max_bound


@pytest.mark.parametrize("kernel", ["fa4-sm90", "fa4-sm100"])
@pytest.mark.parametrize("mask", ["causal", "document"])
def test_block_sparse_bound_holds_on_the_emulator(kernel, mask):
    q, k, v = _inputs(11, 200, 200, 2, 2)
    mm, aux = (flex.causal_mask(), None) if mask == "causal" else (flex.document_mask(), [_DOCS])
    opts = plan(q, k, v, kernel=kernel, mask_mod=mm, aux_tensors=aux).opts
    bs = flex.block_sparse_tensors(mm, batch=1, heads=2, seqlen_q=200, seqlen_k=200, aux_tensors=aux,
                                   block_size=(opts.tile_m, opts.tile_n))
    args = dict(kernel=kernel, mask_mod=mm, aux_tensors=aux, block_sparse_tensors=bs)
    r = forward(q, k, v, **args)
    c = check(q, k, v, r.out, r.lse, **args)
    assert (c.out_violations, c.lse_violations, c.unbounded) == (0, 0, 0), c


def _keep_all(b_idx, h_idx, q_idx, kv_idx, seqlen_info, aux_tensors):
    return np.ones(np.broadcast_shapes(np.shape(q_idx), np.shape(kv_idx)), bool)


def test_stale_max_bound_follows_the_block_sparse_visiting_order():
    """The peaked-row family (fa4num.bounds.stale.peaked_rows): the dense call visits KV block 1 first and keeps
    the stale max at threshold 8 when the peak arrives in block 0; a sparse call listing block 0 as a mask block
    and block 1 as a full block visits the peak first (mask blocks, then full blocks), so no max is stale and the
    P-cast term (the one the stale max inflates) must shrink, both bounds holding."""
    from fa4num.bounds.stale import peaked_rows
    q, k, v = peaked_rows(53)
    base = dict(kernel="fa4-sm100", softmax_scale=math.log(2), rescale_threshold=8.0, mask_mod=_keep_all)
    opts = plan(q, k, v, **base).opts
    one = np.ones((1, 1, 1), np.int32)
    bs = {"mask_block_cnt": one, "mask_block_idx": np.array([[[[0, 0]]]], np.int32), "full_block_cnt": one,
          "full_block_idx": np.array([[[[1, 0]]]], np.int32), "block_size": (opts.tile_m, opts.tile_n)}
    worst = {}
    for label, extra in (("dense", {}), ("sparse", {"block_sparse_tensors": bs})):
        args = dict(base, **extra)
        r = forward(q, k, v, **args)
        c = check(q, k, v, r.out, r.lse, **args)
        assert (c.out_violations, c.lse_violations, c.unbounded) == (0, 0, 0), (label, c)
        worst[label] = attention_error_bound(q, k, v, **args).terms["p_cast"]
    assert worst["dense"] >= 1.5 * worst["sparse"], worst


def test_a_block_visited_twice_gets_no_finite_bound():
    q, k, v = _inputs(5, 64, 256, 1, 1)
    opts = plan(q, k, v, kernel="fa4-sm90", mask_mod=_keep_all).opts
    one = np.ones((1, 1, 1), np.int32)
    bs = {"mask_block_cnt": one, "mask_block_idx": np.array([[[[0, 0]]]], np.int32), "full_block_cnt": one * 2,
          "full_block_idx": np.array([[[[0, 1]]]], np.int32), "block_size": (opts.tile_m, opts.tile_n)}
    b = attention_error_bound(q, k, v, kernel="fa4-sm90", mask_mod=_keep_all, block_sparse_tensors=bs)
    assert np.isinf(b.out).all() and np.isinf(b.lse).all()


def test_a_user_score_mod_is_refused_by_name():
    q, k, v = _inputs(1, 16, 16, 1, 1)

    def times_two(score, b, h, q_idx, kv_idx, seqlen_info, aux_tensors):
        return (score * np.float32(2)).astype(np.float32)
    with pytest.raises(ValueError, match="score_mod.*times_two"):
        attention_error_bound(q, k, v, score_mod=times_two)


def test_the_backward_bound_refuses_flex_by_name():
    from fa4num.bounds import attention_backward_error_bound
    q, k, v = _inputs(2, 32, 32, 1, 1)
    r = forward(q, k, v, mask_mod=flex.causal_mask())
    with pytest.raises(ValueError, match="mask_mod: attention_backward_error_bound does not model"):
        attention_backward_error_bound(q, k, v, r.out, q, r.lse, mask_mod=flex.causal_mask())


@pytest.mark.parametrize("kernel", ["fa4-sm90", "fa4-sm100"])
def test_flex_bound_holds_on_varlen_sequences(kernel):
    """Each sequence's mods see its own lengths (SeqlenInfo) and local indices; a sink with a mask_mod."""
    rng = np.random.default_rng(9)
    q, k, v = (rng.standard_normal((330, 2, 64)).astype(ml_dtypes.bfloat16) for _ in range(3))
    cu = np.array([0, 130, 330], np.int32)
    for kw in (dict(mask_mod=flex.causal_mask(), score_mod=flex.alibi_exp2_mod()),
               dict(mask_mod=flex.prefix_lm_mask(40), learnable_sink=np.array([0.3, -0.5], np.float32))):
        args = dict(kw, kernel=kernel, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=200, max_seqlen_k=200)
        r = forward(q, k, v, **args)
        c = check(q, k, v, r.out, r.lse, **args)
        assert (c.out_violations, c.lse_violations, c.unbounded) == (0, 0, 0), (kw, c)
