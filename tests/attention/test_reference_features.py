"""The fp64 references (fa4num.attention.reference.attention_fp64 and backward_fp64) with every option the
forward takes: softcap, sliding windows, learnable sinks, varlen, GQA, pack-GQA, against an independent torch
float64 model of the same definition differentiated by autograd (the sink as an extra logit with no value row,
masks bottom-right aligned as FA4 aligns them)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from fa4num.attention.masking import without_wide_sides
from fa4num.attention.reference import attention_fp64, backward_fp64

BF16 = ml_dtypes.bfloat16


def _seq(sq, sk, h, hk, d, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(BF16) for shape in ((sq, h, d), (sk, hk, d), (sk, hk, d), (sq, h, d))]


def _torch_model(q, k, v, do, *, scale, softcap=0.0, window=(None, None), sink=None):
    """out, lse, and the gradients dq, dk, dv, dsink of sum(out * do) for one sequence (q: (sq, h, d))."""
    sq, h, _ = q.shape
    sk, hk, _ = k.shape
    tq, tk, tv = (torch.tensor(x.astype(np.float64), requires_grad=True) for x in (q, k, v))
    ts = torch.tensor(np.zeros(h) if sink is None else sink.astype(np.float64), requires_grad=True)
    kk, vv = (t.repeat_interleave(h // hk, dim=1) for t in (tk, tv))
    s = torch.einsum("ihd,jhd->hij", tq, kk) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    i, j = np.arange(sq)[:, None], np.arange(sk)[None, :]
    diag = i + sk - sq                                        # bottom-right alignment
    left, right = window
    hidden = np.zeros((sq, sk), bool)
    if left is not None:
        hidden |= j < diag - left
    if right is not None:
        hidden |= j > diag + right
    s = s.masked_fill(torch.from_numpy(hidden), float("-inf"))
    if sink is not None:
        s = torch.cat([s, ts[:, None, None].expand(h, sq, 1)], dim=-1)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.nan_to_num(torch.exp(s - lse[..., None]), nan=0.0)
    out = torch.einsum("hij,jhd->ihd", p[..., :sk], vv)
    grads = torch.autograd.grad(out, (tq, tk, tv, ts), torch.tensor(do.astype(np.float64)), allow_unused=True)
    dsink = None if sink is None else grads[3].numpy()
    return out.detach().numpy(), lse.detach().numpy(), [g.numpy() for g in grads[:3]], dsink


FEATURES = {
    "softcap": dict(softcap=3.0),
    "window-sym": dict(window_size=(9, 9)),
    "window-causal": dict(causal=True, window_size=(12, None)),
    "window-right-only": dict(window_size=(None, 4)),
    "sink": dict(learnable_sink=np.float32([1.5, -2.0, 0.5, 3.0])),
    "sink-causal-softcap-window": dict(causal=True, softcap=2.0, window_size=(7, None),
                                       learnable_sink=np.float32([0.0, 1.0, -1.0, 4.0])),
}


def _torch_kwargs(kw):
    window = kw.get("window_size", (None, None))
    if kw.get("causal"):
        window = (window[0], 0)
    return dict(softcap=kw.get("softcap", 0.0), window=window, sink=kw.get("learnable_sink"))


@pytest.mark.parametrize("name", sorted(FEATURES))
def test_forward_and_backward_match_torch_autograd(name):
    kw = FEATURES[name]
    q, k, v, do = _seq(sq=30, sk=45, h=4, hk=2, d=16, seed=len(name))
    scale = 0.3
    out, lse = attention_fp64(q[None], k[None], v[None], softmax_scale=scale, **kw)
    g = backward_fp64(q[None], k[None], v[None], do[None], softmax_scale=scale, **kw)
    t_out, t_lse, (dq, dk, dv), dsink = _torch_model(q, k, v, do, scale=scale, **_torch_kwargs(kw))
    np.testing.assert_allclose(out[0], t_out, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(lse[0], t_lse, rtol=1e-12)
    for got, want in ((g.dq[0], dq), (g.dk[0], dk), (g.dv[0], dv)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    if dsink is None:
        assert g.dsink is None
    else:
        np.testing.assert_allclose(g.dsink, dsink, rtol=1e-10, atol=1e-12)


def test_varlen_is_the_sequences_one_by_one():
    """Varlen (an empty query sequence, a sequence without keys, GQA, sink, window): each sequence's out, lse
    and gradients are those of the sequence alone; dsink is their sum."""
    lq, lk = [20, 0, 9, 33], [25, 14, 0, 33]
    parts = [_seq(a, b, 4, 1, 16, seed=i) for i, (a, b) in enumerate(zip(lq, lk))]
    q, k, v, do = (np.concatenate([p[n] for p in parts]) for n in range(4))
    cq, ck = np.int32([0, *np.cumsum(lq)]), np.int32([0, *np.cumsum(lk)])
    kw = dict(causal=True, window_size=(10, None), learnable_sink=np.float32([0.5, -1.0, 2.0, 0.0]))
    out, lse = attention_fp64(q, k, v, cu_seqlens_q=cq, cu_seqlens_k=ck, max_seqlen_q=33, **kw)
    g = backward_fp64(q, k, v, do, cu_seqlens_q=cq, cu_seqlens_k=ck, max_seqlen_k=40, **kw)
    assert out.shape == (sum(lq), 4, 16) and lse.shape == (4, sum(lq)) and g.dsink.shape == (4,)
    dsink = np.zeros(4)
    for i, (pq, pk, pv, pdo) in enumerate(parts):
        rq, rk = slice(cq[i], cq[i + 1]), slice(ck[i], ck[i + 1])
        # alone, a sequence shorter than the window (here the one without keys) takes None for that side:
        # a wider window is refused, and masks nothing
        kw1 = {**kw, "window_size": without_wide_sides(kw["window_size"], seqlen_q=len(pq), seqlen_k=len(pk))}
        o1, l1 = attention_fp64(pq[None], pk[None], pv[None], **kw1)
        g1 = backward_fp64(pq[None], pk[None], pv[None], pdo[None], **kw1)
        assert np.array_equal(out[rq], o1[0]) and np.array_equal(lse[:, rq], l1[0])
        assert np.array_equal(g.dq[rq], g1.dq[0]) and np.array_equal(g.dk[rk], g1.dk[0])
        assert np.array_equal(g.dv[rk], g1.dv[0])
        dsink += g1.dsink
    np.testing.assert_allclose(g.dsink, dsink, rtol=1e-12)
    # the sequence with no keys: out 0, lse = the sink's logit, and (no value row) no gradient for q
    r = slice(cq[2], cq[3])
    assert (out[r] == 0).all() and np.allclose(lse[:, r], kw["learnable_sink"][:, None])
    assert (g.dq[r] == 0).all()


def test_pack_gqa_changes_nothing_exact():
    q, k, v, do = (x[None] for x in _seq(sq=17, sk=23, h=6, hk=2, d=16, seed=9))
    runs = [attention_fp64(q, k, v, causal=True, pack_gqa=p) for p in (None, True, False)]
    assert all(np.array_equal(r[0], runs[0][0]) and np.array_equal(r[1], runs[0][1]) for r in runs)
    grads = [backward_fp64(q, k, v, do, pack_gqa=p) for p in (None, True, False)]
    assert all(np.array_equal(x.dk, grads[0].dk) for x in grads)


def test_kernel_knobs_pass_and_misspelt_options_raise():
    """One dict of options drives the emulator and its reference; a typo must not be silently ignored."""
    q, k, v, do = (x[None] for x in _seq(sq=8, sk=8, h=2, hk=2, d=16, seed=1))
    base, _ = attention_fp64(q, k, v, window_size=(2, 2))
    knobs, _ = attention_fp64(q, k, v, window_size=(2, 2), kernel="fa4-sm100", mode="statistical", tile_n=64,
                              num_splits=2, rescale_threshold=0.0)
    assert np.array_equal(base, knobs)
    backward_fp64(q, k, v, do, deterministic=False, gemm="exact")
    with pytest.raises(ValueError, match="windowsize"):
        attention_fp64(q, k, v, windowsize=(2, 2))
    with pytest.raises(ValueError, match="softcapp"):
        backward_fp64(q, k, v, do, softcapp=1.0)
