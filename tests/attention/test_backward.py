"""fa4num.attention.backward: options, layouts, invariants, and the fp64 reference gradients (the bit-exact
comparison with the H200 is tests/attention/test_backward_golden.py)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from fa4num.attention import backward, forward
from fa4num.attention.backward import sm90_bwd_tile, sm100_bwd_tile
from fa4num.attention.reference import backward_fp64, backward_metrics

BF16 = ml_dtypes.bfloat16


def _inputs(b=1, sq=70, sk=90, h=2, hk=1, d=64, dt=BF16, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((b, sq, h, d)).astype(dt)
    k = rng.standard_normal((b, sk, hk, d)).astype(dt)
    v = rng.standard_normal((b, sk, hk, d)).astype(dt)
    do = rng.standard_normal((b, sq, h, d)).astype(dt)
    return q, k, v, do


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint16)


@pytest.fixture(scope="module")
def small():
    q, k, v, do = _inputs()
    fw = forward(q, k, v, causal=True)
    return q, k, v, do, fw


def test_tiles_follow_interface_table():
    assert [(t.tile_m, t.tile_n) for t in map(sm90_bwd_tile, (64, 96, 128, 192, 256))] == \
        [(128, 128), (64, 128), (80, 128), (64, 96), (64, 48)]
    assert sm90_bwd_tile(128, local=True).tile_m == 64
    with pytest.raises(ValueError, match="head_dim"):
        sm90_bwd_tile(512)


def test_against_fp64_reference(small):
    """The emulated gradients are close to the exact ones (bf16 output rounding plus the kernel's own error)."""
    q, k, v, do, fw = small
    g = backward(q, k, v, fw.out, do, fw.lse, causal=True)
    ref = backward_fp64(q, k, v, do, causal=True)
    m = backward_metrics(g, ref)
    for name in ("dq", "dk", "dv"):
        assert m[name].rel_l2 < 2e-2, (name, m[name])
        assert m[name].cosine > 0.999
    # the statistical mode (fp32 BLAS GEMMs, numpy exp2) is close to the bit-exact one, not equal
    st = backward(q, k, v, fw.out, do, fw.lse, causal=True, mode="statistical")
    assert backward_metrics(st, ref)["dq"].rel_l2 < 2e-2


def test_fp64_reference_matches_torch_autograd():
    q, k, v, do = _inputs(sq=40, sk=56, h=4, hk=2, d=32, seed=3)
    ref = backward_fp64(q, k, v, do, causal=True, window_size=(20, None))
    tq, tk, tv = (torch.tensor(x.astype(np.float64), requires_grad=True) for x in (q, k, v))
    kk, vv = (t.repeat_interleave(2, dim=2) for t in (tk, tv))
    s = torch.einsum("bihd,bjhd->bhij", tq, kk) / np.sqrt(32)
    i, j = np.arange(40)[:, None], np.arange(56)[None, :]
    diag = i + 56 - 40
    hidden = torch.from_numpy((j > diag) | (j < diag - 20))
    p = torch.softmax(s.masked_fill(hidden, float("-inf")), dim=-1)
    out = torch.einsum("bhij,bjhd->bihd", p, vv)
    gq, gk, gv = torch.autograd.grad(out, (tq, tk, tv), torch.tensor(do.astype(np.float64)))
    for mine, theirs in ((ref.dq, gq), (ref.dk, gk), (ref.dv, gv)):
        np.testing.assert_allclose(mine, theirs.numpy(), rtol=1e-10, atol=1e-12)


def test_torch_in_torch_out(small):
    q, k, v, do, fw = small
    g = backward(q, k, v, fw.out, do, fw.lse, causal=True)
    t = lambda a: torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)  # noqa: E731
    gt = backward(t(q), t(k), t(v), t(fw.out), t(do), torch.from_numpy(fw.lse), causal=True)
    assert gt.dq.dtype == torch.bfloat16 and gt.dk.shape == k.shape
    for a, b in ((g.dq, gt.dq), (g.dk, gt.dk), (g.dv, gt.dv)):
        assert np.array_equal(_bits(a), b.view(torch.int16).numpy().view(np.uint16))


def test_varlen_equals_separate_sequences():
    """Each varlen sequence is its own problem: packing two sequences gives the bits of two separate calls."""
    lens_q, lens_k = (33, 50), (40, 70)
    parts = [_inputs(sq=a, sk=b, h=2, hk=2, d=64, seed=10 + i) for i, (a, b) in enumerate(zip(lens_q, lens_k))]
    fws = [forward(q, k, v) for q, k, v, _ in parts]
    sep = [backward(q, k, v, f.out, do, f.lse) for (q, k, v, do), f in zip(parts, fws)]
    cat = lambda i: np.concatenate([p[i][0] for p in parts])  # noqa: E731
    out = np.concatenate([f.out[0] for f in fws])
    lse = np.concatenate([f.lse[0] for f in fws], axis=1)
    g = backward(cat(0), cat(1), cat(2), out, cat(3), lse,
                 cu_seqlens_q=np.array([0, 33, 83], np.int32), cu_seqlens_k=np.array([0, 40, 110], np.int32))
    for name in ("dq", "dk", "dv"):
        want = np.concatenate([getattr(r, name)[0] for r in sep])
        assert np.array_equal(_bits(getattr(g, name)), _bits(want)), name
    assert g.stats.dpsum.shape == (2, 83) and g.stats.q_blocks.shape == (2, 110)


def test_dq_order_only_changes_dq(small):
    q, k, v, do, fw = small        # causal: deterministic order is decreasing KV block
    det = backward(q, k, v, fw.out, do, fw.lse, causal=True)
    inc = backward(q, k, v, fw.out, do, fw.lse, causal=True, dq_order=(0,))
    assert np.array_equal(_bits(det.dk), _bits(inc.dk)) and np.array_equal(_bits(det.dv), _bits(inc.dv))
    q2, k2, v2, do2 = _inputs(sq=60, sk=300, seed=5)
    fw2 = forward(q2, k2, v2)
    a = backward(q2, k2, v2, fw2.out, do2, fw2.lse)
    b = backward(q2, k2, v2, fw2.out, do2, fw2.lse, dq_order=(2, 1, 0))
    assert np.array_equal(_bits(a.dv), _bits(b.dv))
    with pytest.raises(ValueError, match="dq_order"):
        backward(q2, k2, v2, fw2.out, do2, fw2.lse, dq_order=(0, 1))
    # int() would turn "random" into an error about 'r', and (2, 1.5, 0) or (True, 2, 0) into block indices
    for bad in ("random", (2, 1.5, 0), (True, 2, 0)):
        with pytest.raises(TypeError, match="dq_order must be None or a sequence of KV block indices"):
            backward(q2, k2, v2, fw2.out, do2, fw2.lse, dq_order=bad)
    assert np.array_equal(_bits(backward(q2, k2, v2, fw2.out, do2, fw2.lse, dq_order=np.array([2, 1, 0])).dq),
                          _bits(b.dq))


def test_stats(small):
    q, k, v, do, fw = small
    g = backward(q, k, v, fw.out, do, fw.lse, causal=True)
    # causal, 70 queries x 90 keys, tile 128 x 128: one KV block, every row adds one dQ tile
    assert (g.stats.kv_blocks == 1).all() and (g.stats.q_blocks == 1).all()
    d_direct = (fw.out.astype(np.float64) * do.astype(np.float64)).sum(axis=-1).transpose(0, 2, 1)
    np.testing.assert_allclose(g.stats.dpsum, d_direct, rtol=1e-5, atol=1e-5)
    assert set(g.stats.summary()) >= {"kv_blocks", "p_flushed"}


@pytest.mark.parametrize("kw,match", [
    (dict(kernel="fa4-sm80"), "kernel"),
    (dict(use_2cta_instrs=True), "use_2cta_instrs"),
    (dict(softcap=-5.0), "softcap"),
    (dict(mode="fast"), "mode"),
    (dict(gemm="tf32"), "gemm"),
    (dict(tile_m=40), "tile_m"),
    (dict(bogus=1), "unknown option"),
    (dict(softmax_scale=float("nan")), "softmax_scale"),
    (dict(cu_seqlens_q=[0, 70]), "cu_seqlens_q"),
])
def test_bad_options(small, kw, match):
    q, k, v, do, fw = small
    with pytest.raises(ValueError, match=match):
        backward(q, k, v, fw.out, do, fw.lse, **kw)


def test_bad_shapes(small):
    q, k, v, do, fw = small
    with pytest.raises(ValueError, match="lse"):
        backward(q, k, v, fw.out, do, fw.lse[:, :, :5])
    with pytest.raises(ValueError, match="dout"):
        backward(q, k, v, fw.out, do[:, :5], fw.lse)
    with pytest.raises(ValueError, match="dtype"):
        backward(q, k, v, fw.out, do.astype(np.float16), fw.lse)
    with pytest.raises(ValueError, match="multiple"):
        q3, k3, v3, do3 = _inputs(h=3, hk=2)
        backward(q3, k3, v3, q3, do3, np.zeros((1, 3, 70), np.float32))


def test_sm100_from_source():
    """fa4-sm100 (emulated from source, not run on a Blackwell GPU): the SM90 element arithmetic with SM100's
    128 x 128 tile; with 2-CTA instructions (head_dim >= 128) a cluster's 256 keys form one dQ reduction, so
    only dQ differs from the 1-CTA run (dK and dV are per-key chains over the same 128-row query blocks)."""
    assert sm100_bwd_tile(128).cta_group == 2 and sm100_bwd_tile(96).cta_group == 1
    with pytest.raises(ValueError, match="256"):
        sm100_bwd_tile(256)
    q, k, v, do = _inputs(sq=150, sk=300, h=2, hk=2, d=128, seed=7)
    fw = forward(q, k, v)
    one = backward(q, k, v, fw.out, do, fw.lse, kernel="fa4-sm100", use_2cta_instrs=False)
    ref90 = backward(q, k, v, fw.out, do, fw.lse, kernel="fa4-sm90", tile_m=128, tile_n=128)
    for name in ("dq", "dk", "dv"):
        assert np.array_equal(_bits(getattr(one, name)), _bits(getattr(ref90, name))), name
    two = backward(q, k, v, fw.out, do, fw.lse, kernel="fa4-sm100")
    assert two.options["cta_group"] == 2 and two.options["tile_n"] == 256
    assert np.array_equal(_bits(two.dk), _bits(one.dk)) and np.array_equal(_bits(two.dv), _bits(one.dv))
    assert not np.array_equal(_bits(two.dq), _bits(one.dq))
    ref = backward_fp64(q, k, v, do)
    assert backward_metrics(two, ref)["dq"].rel_l2 < 2e-2


def test_softcap_against_fp64_reference():
    """softcap: score_mod before the mask, its derivative on dS, exponent with LOG2_E alone (bits need a
    MUFU.TANH model; with libm's tanh standing in the result is close to the exact gradients)."""
    q, k, v, do = _inputs(sq=64, sk=80, h=2, hk=2, d=64, seed=9)
    q = (q.astype(np.float32) * 3).astype(BF16)
    fw = forward(q, k, v, softcap=5.0)
    g = backward(q, k, v, fw.out, do, fw.lse, softcap=5.0)
    ref = backward_fp64(q, k, v, do, softcap=5.0)
    plain = backward_fp64(q, k, v, do)
    m = backward_metrics(g, ref)
    for name in ("dq", "dk", "dv"):
        assert m[name].rel_l2 < 2e-2, (name, m[name])
    # the cap changes the gradients by far more than the emulation error
    assert backward_metrics(g, plain)["dq"].rel_l2 > 10 * m["dq"].rel_l2
