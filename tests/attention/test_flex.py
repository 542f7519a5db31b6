"""FlexAttention's front door in fa4num (fa4num.attention.flex): score_mod / mask_mod / aux tensors / block
sparsity in plan(), the forward (both kernels) and the SM90 backward; the built-ins against a float64 reference;
the identities FA4's source implies (softcap as a score_mod, windows as a mask_mod, dense vs sparse); refusals
and bad input. The bits against the real kernel: test_flex_golden.py."""
import math

import ml_dtypes
import numpy as np
import pytest

from fa4num.attention import backward, flex, forward, plan, plan_of, same_bits
from fa4num.softmax import ffma

KERNELS = ("fa4-sm90", "fa4-sm100")
BF = ml_dtypes.bfloat16


def _qkv(sq, sk, h=2, hk=2, d=64, seed=0, n=3, mult=1.0):
    rng = np.random.default_rng(seed)
    shapes = [(1, sq, h, d), (1, sk, hk, d), (1, sk, hk, d), (1, sq, h, d)][:n]
    return [(rng.standard_normal(s) * (mult if i == 0 else 1)).astype(BF) for i, s in enumerate(shapes)]


def _u(a):
    return np.asarray(a).view(np.uint16 if np.asarray(a).dtype.itemsize == 2 else np.uint32)


def _same(a, b):
    return bool((_u(a.out) == _u(b.out)).all() and (_u(a.lse) == _u(b.lse)).all())


def _ref64(q, k, v, *, keep=None, bias=None, scale=None):
    """float64 attention of one batch entry with a (heads, sq, sk) keep mask and additive bias."""
    qf, kf, vf = (np.asarray(x, np.float64)[0] for x in (q, k, v))
    g = qf.shape[1] // kf.shape[1]
    kf, vf = np.repeat(kf, g, axis=1), np.repeat(vf, g, axis=1)
    s = np.einsum("ihd,jhd->hij", qf, kf) * (1 / math.sqrt(qf.shape[-1]) if scale is None else scale)
    if bias is not None:
        s = s + bias
    if keep is not None:
        s = np.where(keep, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    p = np.exp(s - m)
    return np.einsum("hij,jhd->ihd", p / p.sum(-1, keepdims=True), vf)


# ---------------------------------------------------------------------------------------------- built-ins
@pytest.mark.parametrize("kernel", KERNELS)
def test_builtin_masks_match_float64(kernel):
    sq = sk = 200
    q, k, v = _qkv(sq, sk, seed=1)
    doc = np.repeat(np.arange(3, dtype=np.int32), [70, 90, 40])[None]
    i, j = np.arange(sq)[:, None], np.arange(sk)[None, :]
    cases = [(flex.causal_mask(), None, j <= i), (flex.sliding_window_mask(16, 4), None, (j >= i - 16) & (j <= i + 4)),
             (flex.prefix_lm_mask(50), None, ((i < 50) & (j < 50)) | (i >= j)),
             (flex.document_mask(), [doc], doc[0][:, None] == doc[0][None, :])]
    for mod, aux, keep in cases:
        r = forward(q, k, v, mask_mod=mod, aux_tensors=aux, kernel=kernel)
        err = np.abs(np.asarray(r.out, np.float64)[0] - _ref64(q, k, v, keep=keep[None])).max()
        assert err < 2e-2, (mod.__name__, err)


@pytest.mark.parametrize("kernel", KERNELS)
def test_builtin_score_mods_match_float64(kernel):
    sq, sk, h = 150, 180, 4
    q, k, v = _qkv(sq, sk, h=h, hk=h, seed=2)
    slopes = flex.alibi_slopes(h)
    dist = np.abs(np.arange(sq)[:, None] - np.arange(sk)[None, :]).astype(np.float64)
    for mod, aux, bias in ((flex.alibi_mod(), [slopes], -slopes.astype(np.float64)[:, None, None] * dist),
                           (flex.rel_bias_mod(), None, dist[None]),
                           (flex.rel_bias_mod(clamp=8), None, np.minimum(dist, 8)[None]),
                           (flex.alibi_exp2_mod(), None, -np.exp2(-(np.arange(h) + 1.0))[:, None, None] * dist)):
        r = forward(q, k, v, score_mod=mod, aux_tensors=aux, kernel=kernel)
        ref = _ref64(q, k, v, bias=bias)
        assert np.abs(np.asarray(r.out, np.float64)[0] - ref).max() < 2e-2, mod.__name__


@pytest.mark.parametrize("kernel", KERNELS)
def test_softcap_as_score_mod_is_the_softcap_option(kernel):
    q, k, v = _qkv(130, 260, seed=3, mult=3.0)
    a = forward(q, k, v, softcap=7.5, kernel=kernel)
    b = forward(q, k, v, score_mod=flex.softcap_mod(7.5), kernel=kernel)
    assert _same(a, b)


def test_softcap_as_score_mod_backward_is_the_softcap_option():
    q, k, v, do = _qkv(100, 140, seed=4, n=4, mult=2.0)
    f = forward(q, k, v, softcap=5.0)
    a = backward(q, k, v, f.out, do, f.lse, softcap=5.0)
    b = backward(q, k, v, f.out, do, f.lse, score_mod=flex.softcap_mod(5.0), score_mod_bwd=flex.softcap_mod_bwd(5.0))
    assert all((_u(x) == _u(y)).all() for x, y in ((a.dq, b.dq), (a.dk, b.dk), (a.dv, b.dv)))


@pytest.mark.parametrize("kernel", KERNELS)
def test_window_as_mask_mod_is_the_window_option(kernel):
    """A dense mask_mod visits every KV block (FA4 prunes none); the blocks the window skips are fully masked
    and add nothing, so the bits are the window's."""
    q, k, v = _qkv(300, 300, seed=5)
    for w in ((32, 0), (None, 0), (20, 20)):
        a = forward(q, k, v, window_size=w, kernel=kernel)
        b = forward(q, k, v, mask_mod=flex.sliding_window_mask(*w), kernel=kernel)
        assert _same(a, b), w


def test_mask_mod_backward_matches_the_window_backward():
    q, k, v, do = _qkv(150, 200, seed=6, n=4)
    f = forward(q, k, v, window_size=(40, 8))
    a = backward(q, k, v, f.out, do, f.lse, window_size=(40, 8))
    b = backward(q, k, v, f.out, do, f.lse, mask_mod=flex.sliding_window_mask(40, 8))
    assert all((_u(x) == _u(y)).all() for x, y in ((a.dq, b.dq), (a.dk, b.dk), (a.dv, b.dv)))


def test_score_mod_changes_the_scale_log2():
    """With any score_mod (even the identity) the kernel applies softmax_scale first and exponentiates with
    LOG2_E (utils.compute_softmax_scale_log2): other bits than the plain call's (for a scale that is not a
    power of two), the same values to rounding."""
    q, k, v = _qkv(130, 250, seed=7, d=128)
    a = forward(q, k, v)
    b = forward(q, k, v, score_mod=lambda s, b, h, q_idx, kv_idx, seqlen_info, aux_tensors: s)
    assert not _same(a, b)
    assert np.abs(np.asarray(a.out, np.float32) - np.asarray(b.out, np.float32)).max() < 2e-2


def test_scaled_add_is_one_ffma_with_the_scale():
    acc = np.float32([[1.0 + 2 ** -20, 3.0]])
    scale = np.float32(1 / 3)
    bias = np.float32([[7.0, 1.0]])
    fl = flex.Flex(score_mod=flex.rel_bias_mod())
    got = flex.apply_score_mod(acc, fl, softmax_scale=scale, batch=0, heads=np.array([0]), q_idx=np.array([7]),
                               kv_idx=np.array([0, 6]), seqinfo=flex.SeqlenInfo(8, 8), arch="sm90")
    assert (got == ffma(acc, scale, bias)).all()
    fl = flex.Flex(score_mod=flex.rel_bias_mod(contract=False))
    got = flex.apply_score_mod(acc, fl, softmax_scale=scale, batch=0, heads=np.array([0]), q_idx=np.array([7]),
                               kv_idx=np.array([0, 6]), seqinfo=flex.SeqlenInfo(8, 8), arch="sm90")
    assert (got == (acc * scale).astype(np.float32) + bias).all()


def test_mask_mod_sees_logical_heads_under_pack_gqa():
    """A head-dependent mask gives the same bits with pack-GQA on and off (SM90 rows are independent), and head 0
    (unmasked) differs from the causal heads."""
    q, k, v = _qkv(100, 100, h=4, hk=2, seed=8)

    def mask(b, h, q_idx, kv_idx, seqlen_info, aux_tensors):
        return (h % 2 == 0) | (kv_idx <= q_idx)
    a = forward(q, k, v, mask_mod=mask, pack_gqa=True)
    b = forward(q, k, v, mask_mod=mask, pack_gqa=False)
    assert _same(a, b)
    full, causal = forward(q, k, v), forward(q, k, v, causal=True)
    assert (_u(a.out[:, :, 0]) == _u(full.out[:, :, 0])).all() and (_u(a.out[:, :, 1]) == _u(causal.out[:, :, 1])).all()


def test_aux_scalars_are_passed_when_given():
    q, k, v = _qkv(64, 64, seed=9)

    def mask(b, h, q_idx, kv_idx, seqlen_info, aux_tensors, aux_scalars):
        return kv_idx < aux_scalars[0]
    a = forward(q, k, v, mask_mod=mask, aux_scalars=(10,))
    b = forward(q[:, :, :, :], k[:, :10], v[:, :10])
    assert (_u(a.out) == _u(b.out)).all()


# ---------------------------------------------------------------------------------------------- block sparsity
@pytest.mark.parametrize("kernel", KERNELS)
def test_sparse_causal_equals_dense(kernel):
    q, k, v = _qkv(384, 384, seed=10)
    p = plan(q, k, v, mask_mod=flex.causal_mask(), kernel=kernel)
    t = flex.block_sparse_tensors(flex.causal_mask(), batch=1, heads=2, seqlen_q=384, seqlen_k=384,
                                  block_size=(p.opts.tile_m if kernel == "fa4-sm100" else 128, 128))
    a = forward(q, k, v, mask_mod=flex.causal_mask(), block_sparse_tensors=t, kernel=kernel)
    assert _same(a, forward(problem=p))
    assert _same(a, forward(q, k, v, causal=True, kernel=kernel))


@pytest.mark.parametrize("kernel", KERNELS)
def test_sparse_document_mask_differs_from_dense_as_the_planner_says(kernel):
    s = 768      # a long document: full blocks between partial ones, for 128- and 256-row M blocks
    q, k, v = _qkv(s, s, seed=11)
    doc = np.repeat(np.arange(3, dtype=np.int32), [100, 600, 68])[None]
    m = flex.document_mask()
    dense = plan(q, k, v, mask_mod=m, aux_tensors=[doc], kernel=kernel)
    bq = dense.opts.tile_m if kernel == "fa4-sm100" else 128
    kw = dict(batch=1, heads=2, seqlen_q=s, seqlen_k=s, block_size=(bq, 128), aux_tensors=[doc])
    sparse = plan(q, k, v, mask_mod=m, aux_tensors=[doc], kernel=kernel,
                  block_sparse_tensors=flex.block_sparse_tensors(m, **kw))
    r = same_bits(sparse, dense)
    assert r.rows_equal < r.rows                      # the orders differ: some rows get other bits
    assert not any(x.differs == {} and not x.equal for x in r.row_results)   # never unpredicted
    assert "mask blocks, then its full blocks" in plan_of(sparse).reasons["visits"]
    # every nonempty block listed as a mask block, ascending: the dense order, the dense bits
    nofull = plan(q, k, v, mask_mod=m, aux_tensors=[doc], kernel=kernel,
                  block_sparse_tensors=flex.block_sparse_tensors(m, full_blocks=False, **kw))
    assert _same(forward(problem=nofull), forward(problem=dense))


def test_sparse_backward_visits_partial_then_full_query_blocks():
    """The backward's KV block visits its partial query blocks, then its full ones, each in list order: a long
    document cut by block edges puts full blocks after a later partial one, and dK/dV (chained over the query
    blocks in that order) differ from the dense backward; a causal mask gives the dense bits."""
    s = 640
    q, k, v, do = _qkv(s, s, seed=19, n=4, d=128)
    doc = np.repeat(np.arange(3, dtype=np.int32), [100, 480, 60])[None]
    for m, aux, equal in ((flex.document_mask(), [doc], False), (flex.causal_mask(), None, True)):
        kw = dict(batch=1, heads=2, seqlen_q=s, seqlen_k=s, block_size=(128, 128), aux_tensors=aux)
        f = forward(q, k, v, mask_mod=m, aux_tensors=aux)
        # deterministic=False: FA4's SM90 block-sparse backward has no deterministic mode (its dQ atomics do not
        # change dK/dV, compared here)
        dense = backward(q, k, v, f.out, do, f.lse, mask_mod=m, aux_tensors=aux, deterministic=False)
        sparse = backward(q, k, v, f.out, do, f.lse, mask_mod=m, aux_tensors=aux, deterministic=False,
                          block_sparse_tensors_bwd=flex.block_sparse_tensors(m, q_direction=True, **kw))
        same = all((_u(x) == _u(y)).all() for x, y in ((dense.dk, sparse.dk), (dense.dv, sparse.dv)))
        assert same == equal, m.__name__
        assert np.abs(np.asarray(dense.dk, np.float32) - np.asarray(sparse.dk, np.float32)).max() < 0.1


def test_sparse_visiting_order():
    from fa4num.attention.schedule import sparse_visits
    assert sparse_visits([1, 3], [0, 2]) == [(3, True, True), (1, True, False), (2, False, True), (0, False, False)]
    assert sparse_visits([], [0, 1]) == [(1, False, True), (0, False, False)]


def test_an_empty_sparse_tile_writes_zeros_and_minus_inf():
    q, k, v = _qkv(256, 256, seed=12)
    t = flex.block_sparse_tensors(flex.causal_mask(), batch=1, heads=2, seqlen_q=256, seqlen_k=256,
                                  block_size=(128, 128))
    t["mask_block_cnt"][:, :, 1] = 0
    t["full_block_cnt"][:, :, 1] = 0
    r = forward(q, k, v, mask_mod=flex.causal_mask(), block_sparse_tensors=t)
    assert (np.asarray(r.out[0, 128:], np.float32) == 0).all() and (r.lse[0, :, 128:] == -np.inf).all()
    assert (r.lse[0, :, :128] > -np.inf).all()


def test_block_sparse_picks_fa4s_sm90_tile():
    q, k, v = _qkv(256, 256, seed=13)
    t = flex.block_sparse_tensors(flex.causal_mask(), batch=1, heads=2, seqlen_q=256, seqlen_k=256,
                                  block_size=(128, 128))
    assert plan(q, k, v).opts.tile_m == 192                     # hd 64: 192 x 128
    assert plan(q, k, v, mask_mod=flex.causal_mask(), block_sparse_tensors=t).opts.tile_m == 128


def test_block_sparse_turns_sm100_2cta_off():
    """interface.py: the 2-CTA kernel needs ``not use_block_sparsity``; the dense mask_mod call of the same
    problem runs it (hd 128, not causal, several M blocks)."""
    q = np.zeros((1, 1024, 2, 128), BF)
    m = flex.causal_mask()
    t = flex.block_sparse_tensors(m, batch=1, heads=2, seqlen_q=1024, seqlen_k=1024, block_size=(256, 128))
    assert plan(q, q, q, kernel="fa4-sm100", mask_mod=m).opts.use_2cta_instrs
    sparse = plan(q, q, q, kernel="fa4-sm100", mask_mod=m, block_sparse_tensors=t)
    assert not sparse.opts.use_2cta_instrs and sparse.opts.tile_m == 256
    assert "block sparsity" in plan_of(sparse).reasons["ctas"]


# ---------------------------------------------------------------------------------------------- refusals
def test_refusals_name_the_argument():
    q, k, v, do = _qkv(64, 64, seed=14, n=4)
    m = flex.causal_mask()
    t = flex.block_sparse_tensors(m, batch=1, heads=2, seqlen_q=64, seqlen_k=64, block_size=(128, 128))
    with pytest.raises(ValueError, match="softcap and score_mod"):
        plan(q, k, v, softcap=2.0, score_mod=flex.softcap_mod(2.0))
    with pytest.raises(ValueError, match="mask_mod cannot be combined with causal"):
        plan(q, k, v, causal=True, mask_mod=m)
    with pytest.raises(ValueError, match="block_size\\[1\\] must equal"):
        plan(q, k, v, mask_mod=m, block_sparse_tensors={**t, "block_size": (128, 256)})
    with pytest.raises(ValueError, match="block_sparse_tensors with learnable_sink"):
        plan(q, k, v, mask_mod=m, block_sparse_tensors=t, learnable_sink=np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="block_sparse_tensors.mask_block_cnt/_idx must be"):
        plan(q, k, v, mask_mod=m, block_sparse_tensors={**t, "mask_block_cnt": t["mask_block_cnt"][:, :, :0]})
    with pytest.raises(ValueError, match="block_sparse_tensors.mask_block_idx entries"):
        plan(q, k, v, mask_mod=m, block_sparse_tensors={**t, "mask_block_idx": t["mask_block_idx"] + 5})
    with pytest.raises(ValueError, match="score_mod_bwd needs a score_mod"):
        plan(q, k, v, score_mod_bwd=flex.passthrough_bwd())
    f = forward(q, k, v, mask_mod=m, block_sparse_tensors=t)
    tb = flex.block_sparse_tensors(m, batch=1, heads=2, seqlen_q=64, seqlen_k=64, block_size=(128, 64),
                                   q_direction=True)
    with pytest.raises(ValueError, match="block_sparse_tensors_bwd.block_size must be"):
        backward(q, k, v, f.out, do, f.lse, mask_mod=m, block_sparse_tensors_bwd=tb)
    with pytest.raises(ValueError, match="score_mod_bwd is required"):
        backward(q, k, v, f.out, do, f.lse, score_mod=flex.rel_bias_mod())
    with pytest.raises(ValueError, match="mask_mod in the backward: modelled for kernel='fa4-sm90' only"):
        backward(q, k, v, f.out, do, f.lse, mask_mod=m, kernel="fa4-sm100")


def test_consumers_without_mods_refuse_them():
    from fa4num.attention.reference import backward_fp64
    q, k, v = _qkv(64, 64, seed=15)
    p = plan(q, k, v, score_mod=flex.rel_bias_mod(), mask_mod=flex.causal_mask())
    # (the GPU twin runs the built-ins: tests/attention/test_twin.py; attention_error_bound bounds them:
    # tests/bounds/test_flex_bounds.py; attention_fp64 applies them: tests/top/test_cli.py)
    for fn in (lambda: backward_fp64(dout=q, problem=p),):
        with pytest.raises(ValueError, match="score_mod/mask_mod: .* does not model FlexAttention"):
            fn()


def test_forward_torch_refuses_mods():
    torch = pytest.importorskip("torch")
    from fa4num.attention import forward_torch
    x = torch.ones(1, 64, 2, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="mask_mod: forward_torch does not model"):
        forward_torch(x, x, x, mask_mod=flex.causal_mask())


# ---------------------------------------------------------------------------------------------- bad input
def test_bad_mods_are_clear_errors():
    q, k, v = _qkv(64, 64, seed=16)
    with pytest.raises(TypeError, match="score_mod must be None or a callable"):
        plan(q, k, v, score_mod="tanh")
    with pytest.raises(TypeError, match="score_mod must return float32"):
        forward(q, k, v, score_mod=lambda s, *a, **kw: s.astype(np.float64))
    with pytest.raises(ValueError, match="score_mod must return an array of the score's shape"):
        forward(q, k, v, score_mod=lambda s, *a, **kw: s[:, :1])
    with pytest.raises(TypeError, match="mask_mod must return booleans"):
        forward(q, k, v, mask_mod=lambda b, h, qi, ki, info, aux: ki - qi)
    with pytest.raises(ValueError, match="mask_mod must return booleans broadcastable"):
        forward(q, k, v, mask_mod=lambda b, h, qi, ki, info, aux: np.ones((3, 5), bool))
    with pytest.raises(TypeError, match="aux_tensors must be a list"):
        plan(q, k, v, mask_mod=flex.document_mask(), aux_tensors=np.zeros((1, 64), np.int32))


def test_an_out_of_range_read_is_explained():
    """A mask reading a captured array (not an aux tensor) at the padded keys of the last block: FA4 wraps
    indices only for aux tensors, so the read is out of range; the error says why."""
    q, k, v = _qkv(100, 100, seed=17)
    doc = np.zeros(100, np.int32)
    with pytest.raises(ValueError, match="mask_mod indexed out of range.*only when aux_tensors are given"):
        forward(q, k, v, mask_mod=lambda b, h, qi, ki, info, aux: doc[qi] == doc[ki])
    ok = forward(q, k, v, mask_mod=lambda b, h, qi, ki, info, aux: aux[0][qi] == aux[0][ki], aux_tensors=[doc])
    assert _same(ok, forward(q, k, v))


def test_statistical_mode_runs_the_mods():
    q, k, v = _qkv(100, 120, seed=18)
    a = forward(q, k, v, mask_mod=flex.causal_mask(), score_mod=flex.softcap_mod(4.0), mode="statistical")
    b = forward(q, k, v, mask_mod=flex.causal_mask(), score_mod=flex.softcap_mod(4.0))
    assert np.abs(np.asarray(a.out, np.float32) - np.asarray(b.out, np.float32)).max() < 2e-2
