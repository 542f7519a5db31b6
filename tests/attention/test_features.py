"""fa4num.attention.forward's FA4 features against exact computations (bit-exactness on the H200 is in
tests/attention/test_features_golden.py): softcap, windows, sinks, varlen, pack-GQA, split-KV and FA4's combine,
fp8 descales, head_dim_v != head_dim, paged KV; b36's head-dim-256 x GQA-ratio rule; the rescale statistics on
hand-made rows; SM103's rescale exp2; bad options."""
import math

import ml_dtypes
import numpy as np
import pytest

from fa4num.attention import KERNELS, config, forward
from fa4num.attention.forward import combine_splits
from fa4num.attention.reference import attention_fp64, metrics, round_once
from fa4num.softmax import sm100

BF16 = ml_dtypes.bfloat16


def _qkv(b=1, sq=70, sk=150, h=2, hk=2, d=64, dv=None, seed=0, dtype=BF16, q_mult=1.0):
    rng = np.random.default_rng(seed)
    q = (rng.standard_normal((b, sq, h, d)) * q_mult).astype(np.float32).astype(dtype)
    k = rng.standard_normal((b, sk, hk, d)).astype(np.float32).astype(dtype)
    v = rng.standard_normal((b, sk, hk, dv or d)).astype(np.float32).astype(dtype)
    return q, k, v


def _bits(x):
    return np.ascontiguousarray(x).view(np.uint16)


def _close_to_fp64(res, ref, lse_ref, factor=3.0):
    fin = np.isfinite(lse_ref)
    assert np.array_equal(np.isfinite(res.lse), fin)
    assert np.abs(res.lse[fin] - lse_ref[fin]).max() < 1e-4
    floor = metrics(round_once(ref, BF16), ref).rel_l2
    assert metrics(res.out, ref).rel_l2 < factor * floor


# ---------------------------------------------------------------------------------------------- vs fp64
@pytest.mark.parametrize("kernel", ["fa4-sm90", "fa4-sm100"])
@pytest.mark.parametrize("kw", [dict(window_size=(20, 10)), dict(causal=True, window_size=(30, None)),
                                dict(window_size=(None, 5)), dict(learnable_sink=np.float32([1.5, -2.0])),
                                dict(causal=True, learnable_sink=np.float32([3.0, 0.5])),
                                dict(softcap=0.5, mode="statistical")])
def test_features_match_fp64(kernel, kw):
    q, k, v = _qkv(sq=150, sk=70) if kw.get("causal") else _qkv()
    res = forward(q, k, v, kernel=kernel, **kw)
    ref, lse = attention_fp64(q, k, v, **kw)
    _close_to_fp64(res, ref, lse, factor=30 if kw.get("softcap") else 3)


def test_sink_rows_without_keys_get_the_sink_as_lse():
    q, k, v = _qkv(sq=100, sk=30)
    sink = np.float32([0.25, -1.0])
    res = forward(q, k, v, causal=True, learnable_sink=sink)
    empty = np.arange(100) < 70           # rows i < sq - sk see no key
    assert (res.out.astype(np.float32)[0, empty] == 0).all()
    # LSE = (RN(sink*LOG2_E) + lg2(1)) * LN2: the sink's value within an ulp or two
    assert np.abs(res.lse[0][:, empty] - sink[:, None]).max() < 1e-6
    assert (res.stats.sink_share[0][:, empty] == 1).all() and (res.stats.sink_share[0][:, ~empty] < 1).all()


def test_varlen_equals_separate_sequences():
    rng = np.random.default_rng(5)
    lq, lk = [30, 1, 77], [50, 40, 77]
    parts = [_qkv(sq=a, sk=b, h=4, hk=2, seed=i) for i, (a, b) in enumerate(zip(lq, lk))]
    q = np.concatenate([p[0][0] for p in parts])
    k = np.concatenate([p[1][0] for p in parts])
    v = np.concatenate([p[2][0] for p in parts])
    cq = np.int32([0, *np.cumsum(lq)])
    ck = np.int32([0, *np.cumsum(lk)])
    sink = rng.standard_normal(4).astype(np.float32)
    res = forward(q, k, v, causal=True, cu_seqlens_q=cq, cu_seqlens_k=ck, learnable_sink=sink,
                  window_size=(20, None))
    assert res.out.shape == (sum(lq), 4, 64) and res.lse.shape == (4, sum(lq))
    for i, (qq, kk, vv) in enumerate(parts):
        one = forward(qq, kk, vv, causal=True, learnable_sink=sink, window_size=(20, None))
        assert np.array_equal(_bits(res.out[cq[i]:cq[i + 1]]), _bits(one.out[0]))
        assert np.array_equal(res.lse[:, cq[i]:cq[i + 1]].view(np.uint32), one.lse[0].view(np.uint32))
    ref, lse = attention_fp64(q, k, v, causal=True, cu_seqlens_q=cq, cu_seqlens_k=ck, learnable_sink=sink,
                              window_size=(20, None))
    assert np.abs(res.lse - lse).max() < 1e-4


def test_window_stats_count_hidden_keys():
    q, k, v = _qkv(sq=50, sk=80)
    res = forward(q, k, v, window_size=(10, 3))
    off = 80 - 50
    i = np.arange(50)
    lo, hi = np.maximum(i + off - 10, 0), np.minimum(i + off + 3, 79)
    assert np.array_equal(res.stats.masked_by_window[0, 0], 80 - (hi - lo + 1))


def test_pack_gqa_changes_no_bit_without_masking_nan():
    q, k, v = _qkv(sq=90, sk=300, h=6, hk=2, d=128)
    on = forward(q, k, v, causal=True, pack_gqa=True)
    off = forward(q, k, v, causal=True, pack_gqa=False)
    assert on.options.pack_gqa and not off.options.pack_gqa
    assert np.array_equal(_bits(on.out), _bits(off.out)) and np.array_equal(on.lse, off.lse)


def test_paged_kv_changes_nothing_numerically():
    """Paged KV only changes where keys are read from: the same bits as the gathered contiguous K/V."""
    q, k, v = _qkv(b=2, sq=40, sk=256, h=2, hk=1, d=64)
    page = 64
    rng = np.random.default_rng(1)
    order = rng.permutation(8)                                 # 2 sequences x 4 pages, shuffled in the pool
    kp = np.zeros((8, page, 1, 64), BF16)
    vp = np.zeros((8, page, 1, 64), BF16)
    table = order.reshape(2, 4).astype(np.int32)
    for b in range(2):
        for j in range(4):
            kp[table[b, j]] = k[b, j * page:(j + 1) * page]
            vp[table[b, j]] = v[b, j * page:(j + 1) * page]
    for kernel in ("fa4-sm90", "fa4-sm100"):
        a = forward(q, k, v, causal=True, kernel=kernel)
        p = forward(q, kp, vp, causal=True, kernel=kernel, page_table=table)
        assert np.array_equal(_bits(a.out), _bits(p.out)) and np.array_equal(a.lse, p.lse)


# ---------------------------------------------------------------------------------------------- SM100 extras
def test_combine_matches_the_exact_merge():
    rng = np.random.default_rng(2)
    ns, r, dv = 5, 40, 128
    op = rng.standard_normal((ns, r, dv)).astype(np.float32)
    lp = (rng.standard_normal((ns, r)) * 4).astype(np.float32)
    lp[1, :10] = -np.inf                                        # empty splits
    lp[:, 0] = -np.inf                                          # a row with no key at all
    out, lse = combine_splits(op, lp)
    l64 = lp.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        exact_lse = np.log(np.exp(l64).sum(axis=0))
        w = np.exp(l64 - exact_lse[None])
    exact = np.nansum(w[..., None] * op, axis=0)
    assert lse[0] == -np.inf and (out[0] == 0).all()
    assert np.abs(lse[1:] - exact_lse[1:]).max() < 4e-6 * np.abs(exact_lse[1:]).max()
    assert np.abs(out[1:] - exact[1:]).max() < 1e-5 * np.abs(exact).max()


def test_combine_of_one_split_is_the_split():
    rng = np.random.default_rng(3)
    op = rng.standard_normal((1, 16, 64)).astype(np.float32)
    lp = rng.standard_normal((1, 16)).astype(np.float32)
    out, lse = combine_splits(op, lp)
    assert np.array_equal(out, op[0])          # scale = ex2(0) * (1 / 1) = 1 exactly
    assert np.abs(lse - lp[0]).max() < 1e-6


@pytest.mark.parametrize("kw", [dict(), dict(causal=True), dict(learnable_sink=np.float32([0.5, 2.0]))])
def test_split_kv_is_close_to_unsplit_and_exact(kw):
    q, k, v = _qkv(sq=100, sk=700, d=128)
    one = forward(q, k, v, kernel="fa4-sm100", **kw)
    three = forward(q, k, v, kernel="fa4-sm100", num_splits=3, **kw)
    assert three.num_splits == 3 and not three.options.use_2cta_instrs
    assert (three.stats.kv_blocks.sum() == one.stats.kv_blocks.sum())
    ref, lse = attention_fp64(q, k, v, **kw)
    _close_to_fp64(three, ref, lse)
    d = np.abs(three.out.astype(np.float64) - one.out.astype(np.float64))
    assert d.max() <= 2 ** -6 * np.abs(ref).max() and 0 < (d == 0).mean() < 1   # merged differently, not worse


def test_fp8_descales_scale_scores_and_output():
    q, k, v = _qkv(sq=64, sk=256, d=128, hk=1, h=2)
    q8, k8, v8 = (x.astype(np.float32).astype(ml_dtypes.float8_e4m3fn) for x in (q, k, v))
    ds = dict(q_descale=np.float32([[0.5]]), k_descale=np.float32([[0.25]]), v_descale=np.float32([[4.0]]))
    res = forward(q8, k8, v8, kernel="fa4-sm100", **ds)
    ref, lse = attention_fp64(q8, k8, v8, **ds)
    fin = np.isfinite(lse)
    assert np.abs(res.lse[fin] - lse[fin]).max() < 1e-3
    assert metrics(res.out, ref).rel_l2 < 0.05
    plain = forward(q8, k8, v8, kernel="fa4-sm100")
    assert not np.array_equal(res.lse, plain.lse)


def test_head_dim_v_differs():
    q, k, v = _qkv(sq=100, sk=200, d=192, dv=128)
    for kernel in ("fa4-sm90", "fa4-sm100"):
        res = forward(q, k, v, kernel=kernel)
        assert res.out.shape == (1, 100, 2, 128)
        ref, lse = attention_fp64(q, k, v)
        _close_to_fp64(res, ref, lse)


# ---------------------------------------------------------------------------------------------- b36 rules
def _b36_rule(g, hd, sq, batch, heads, num_sms=148):
    """interface.py 4.0.0b36 lines ~996-1011 and ~1060-1099 (dense, no varlen, no split), written out."""
    pack = g > 1
    if hd == 256 and 128 % g != 0 and (sq > 128 or 2 * batch * heads <= num_sms):
        pack = False
    rows = sq * (g if pack else 1)
    q_stage = 2 if rows > 128 and hd != 256 else 1
    one_block = rows <= q_stage * 128
    decode = hd == 256 and 2 * batch * (heads // g if pack else heads) <= num_sms
    two_cta = (not one_block or decode) and (128 % g == 0 or not pack) and (hd == 256 or hd in (128, 192))
    return pack, two_cta


@pytest.mark.parametrize("g", range(1, 9))
@pytest.mark.parametrize("hd", [64, 128, 256])
@pytest.mark.parametrize("sq,batch,hk", [(100, 1, 2), (256, 1, 2), (100, 40, 4)])
def test_sm100_pack_gqa_and_2cta_follow_b36(g, hd, sq, batch, hk):
    heads = g * hk
    o = config.sm100_defaults(dtype="bfloat16", head_dim=hd, causal=False, seqlen_q=sq, qhead_per_kvhead=g,
                              batch=batch, heads=heads)
    assert (o.pack_gqa, o.use_2cta_instrs) == _b36_rule(g, hd, sq, batch, heads)
    if hd == 256 and o.use_2cta_instrs:
        assert (o.ex2_emu_freq, o.ex2_emu_start_frg) == (14, 0)     # _TUNING_CONFIG[(True, False, 256, False)]
    # SM90 always packs several q heads per KV head (its goldens hd256_gqa1..8 are bit-exact)
    assert KERNELS["fa4-sm90"].default_pack_gqa(qhead_per_kvhead=g) == (g > 1)


def test_issue_example_hd256_ratio3_turns_pack_gqa_off():
    q, k, v = _qkv(sq=256, sk=256, h=6, hk=2, d=256)
    r = forward(q, k, v, kernel="fa4-sm100")
    o = r.options
    assert (o.pack_gqa, o.use_2cta_instrs, o.ex2_emu_freq) == (False, True, 14)
    assert (r.stats.exp2_emulated > 0).all()


def test_sm90_local_tiles():
    assert config.sm90_tile(256, False, local=True) == (128, 64)
    assert config.sm90_tile(96, False, local=True) == (192, 128)
    assert config.sm90_tile(192, False, local=True) == (128, 96)


# ---------------------------------------------------------------------------------------------- stats


@pytest.mark.parametrize("kernel,thr,expect_done", [("fa4-sm90", None, [1, 2, 0, 3]),
                                                     ("fa4-sm100", 8.0, [0, 1, 0, 1]),
                                                     ("fa4-sm100", 0.0, [1, 2, 0, 3])])
def test_rescale_stats_on_hand_made_rows(kernel, thr, expect_done):
    """Four heads, one query row each, scale 1 (scale_log2 = log2 e): block maxima (in visit order, right to
    left) chosen so that the true max grows by 1 or by 20 (log2 units: 1.44, 28.9):
      head 0: 0, 1          -> 1 event;  SM100 thr 8 skips it (lag 1.44)
      head 1: 0, 20, 21     -> 2 events; thr 8 rescales at +20 only
      head 2: 5, 1, 0       -> no event
      head 3: 0, 1, 2, 30   -> 3 events; thr 8: 1 -> stale (lag 1.44), 2 -> stale (2.89), 30 -> rescale
    """
    maxima = [[0, 1], [0, 20, 21], [5, 1, 0], [0, 1, 2, 30]]
    tn = 128
    nblk = 4
    h, d = 4, 64
    q = np.zeros((1, 1, h, d), np.float32)
    q[0, 0, :, 0] = 1.0
    k = np.full((1, nblk * tn, h, d), 0, np.float32)
    k[0, :, :, 0] = -16.0
    for hh, mx in enumerate(maxima):
        # the i-th block visited (right to left) is block nblk - 1 - i; blocks a head does not use keep the
        # fill -16 and come last, below every maximum (no event)
        for i, m in enumerate(mx):
            k[0, (nblk - 1 - i) * tn, hh, 0] = m
    seqlen = nblk * tn
    v = np.ones((1, nblk * tn, h, d), np.float32)
    q, k, v = (x.astype(BF16) for x in (q, k, v))
    kw = {} if thr is None else dict(rescale_threshold=thr)
    res = forward(q, k[:, :seqlen], v[:, :seqlen], softmax_scale=1.0, kernel=kernel, **kw)
    st = res.stats
    events = np.array([1, 2, 0, 3])
    assert np.array_equal(st.rescale_events[0, :, 0], events)
    assert np.array_equal(st.rescales_done[0, :, 0], expect_done)
    assert np.array_equal(st.rescales_avoided[0, :, 0], events - np.array(expect_done))
    if kernel == "fa4-sm100" and thr:
        assert abs(st.max_lag[0, 3, 0] - 2 * math.log2(math.e)) < 1e-5


def test_sm103_rescale_factor_keeps_subnormals():
    """SM103's non-fast-math exp2 for acc_scale: a jump of more than 126 (log2 units) gives a subnormal factor
    instead of the .ftz zero."""
    s1 = np.zeros((1, 32), np.float32)
    s2 = np.full((1, 32), 130.0, np.float32)
    out = []
    for ftz in (True, False):
        st = sm100.Sm100State.empty(1)
        sm100.softmax_step(s1, st, scale_log2=np.float32(1), is_first=True, rescale_threshold=8.0)
        out.append(sm100.softmax_step(s2, st, scale_log2=np.float32(1), is_first=False, rescale_threshold=8.0,
                                      scale_ex2_ftz=ftz).acc_scale[0])
    assert out[0] == 0 and 0 < out[1] < 2.0 ** -126
    o = config.sm100_defaults(dtype="bfloat16", head_dim=128, causal=True, seqlen_q=256, qhead_per_kvhead=1,
                              is_sm103=True)
    assert o.ex2_emu_freq == 0 and o.is_sm103


# ---------------------------------------------------------------------------------------------- bad options
@pytest.mark.parametrize("kw,match", [
    (dict(softcap=-1.0), "softcap"), (dict(softcap=float("inf")), "softcap"),
    (dict(learnable_sink=np.zeros(3, np.float32)), "learnable_sink"),
    (dict(learnable_sink=np.zeros((2, 1), np.float32)), "learnable_sink"),
    (dict(window_size=(-1, 4)), "window_size left"), (dict(window_size=(5,)), "window_size"),
    (dict(num_splits=2), "num_splits"), (dict(nonfinite="ignore"), "nonfinite"),
    (dict(q_descale=np.ones((1, 2), np.float32)), "descale"),
    (dict(max_seqlen_q=10), "max_seqlen_q"), (dict(softmax_scale=float("nan")), "softmax_scale"),
])
def test_bad_options_name_the_argument(kw, match):
    q, k, v = _qkv(sq=20, sk=30)
    with pytest.raises(ValueError, match=match):
        forward(q, k, v, **kw)


@pytest.mark.parametrize("cu,match", [([0, 30, 20], "cu_seqlens_q"), ([0, 10], "cu_seqlens_q\\[-1\\]"),
                                      ([1, 20], "cu_seqlens_q")])
def test_bad_cu_seqlens(cu, match):
    q, k, v = _qkv(sq=20, sk=20)
    with pytest.raises(ValueError, match=match):
        forward(q[0], k[0], v[0], cu_seqlens_q=np.int32(cu), cu_seqlens_k=np.int32([0, 20]))


def test_window_as_wide_as_the_sequence_masks_nothing_and_wider_is_refused():
    """left = seqlen_k and right = seqlen_q are the widest sides accepted; they hide no key (masked_by_window
    is 0, the bits are those of no window). One more on either side is refused, naming window_size."""
    q, k, v = _qkv(sq=20, sk=30)
    wide = forward(q, k, v, window_size=(30, 20))
    full = forward(q, k, v)
    assert np.array_equal(_bits(wide.out), _bits(full.out)) and (wide.stats.masked_by_window == 0).all()
    for ws, side in (((31, 20), "left"), ((30, 21), "right")):
        with pytest.raises(ValueError, match=f"window_size {side} must be in"):
            forward(q, k, v, window_size=ws)


def test_split_kv_on_sm100_only_and_seqlen_k_zero():
    q, k, v = _qkv(sq=20, sk=0)
    sink = np.float32([0.5, -0.5])
    for kernel in ("fa4-sm90", "fa4-sm100"):
        r = forward(q, k, v, kernel=kernel, learnable_sink=sink)
        assert (r.out.astype(np.float32) == 0).all() and (r.lse[0] == sink[:, None]).all()
    out, lse = attention_fp64(q, k, v)
    assert (out == 0).all() and (lse == -np.inf).all()
