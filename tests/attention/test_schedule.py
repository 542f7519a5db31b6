"""The reproducibility planner: plan_of (the forward's schedule), same_bits (which shared rows get the same bits,
and why not), seqused_q/k, seqlen_k_per_split, b36's split-KV rule, and the CLI commands around them."""
import json

import ml_dtypes
import numpy as np
import pytest

from fa4num.attention import forward, plan
from fa4num.attention.compare import CallSpec, plan_call, same_bits, ulp_distance
from fa4num.attention.reference import attention_fp64
from fa4num.attention.schedule import plan_of
from fa4num.cli import main


def _qkv(b=1, sq=100, sk=100, h=2, hk=None, d=64, dv=None, seed=0):
    rng = np.random.default_rng(seed)
    hk = h if hk is None else hk
    q = rng.standard_normal((b, sq, h, d)).astype(ml_dtypes.bfloat16)
    k = rng.standard_normal((b, sk, hk, d)).astype(ml_dtypes.bfloat16)
    v = rng.standard_normal((b, sk, hk, dv or d)).astype(ml_dtypes.bfloat16)
    return q, k, v


def _kv_blocks_of_plan(p, problem):
    """Per (seq, head, query) the KV blocks the plan's tiles visit, summed over splits, in the LSE's layout."""
    out = np.zeros((problem.heads, problem.cu_seqlens_q[-1]) if problem.varlen_q else
                   (problem.batch, problem.heads, problem.max_seqlen_q), np.int32)
    for seq in problem.seqs:
        for h in range(problem.heads):
            for i in range(seq.q.shape[0]):
                if seq.k.shape[0] == 0:
                    continue
                t = p.tile_of(seq.batch, i, h)
                out[seq.lse_index(h)][i] = sum(len(v) for v in t.visits)
    return out


@pytest.mark.parametrize("kernel,kw,shape", [
    ("fa4-sm90", dict(causal=True), dict(sq=300, sk=300)),
    ("fa4-sm90", dict(window_size=(40, 8)), dict(sq=200, sk=260)),
    ("fa4-sm90", dict(causal=True), dict(sq=70, sk=90, h=6, hk=2)),                       # pack-GQA
    ("fa4-sm100", dict(causal=True, num_splits=3), dict(sq=50, sk=700)),
    ("fa4-sm100", dict(num_splits=4, seqlen_k_per_split=384), dict(sq=20, sk=900)),
])
def test_plan_visits_are_the_forwards_blocks(kernel, kw, shape):
    q, k, v = _qkv(**shape)
    problem = plan(q, k, v, kernel=kernel, **kw)
    p = plan_of(problem)
    res = forward(problem=problem)
    assert np.array_equal(_kv_blocks_of_plan(p, problem), res.stats.kv_blocks)
    assert (p.num_splits > 1) == (p.combine is not None)


def test_plan_of_varlen_segments():
    rng = np.random.default_rng(1)
    q = rng.standard_normal((230, 2, 64)).astype(ml_dtypes.bfloat16)
    problem = plan(q, q, q, causal=True, cu_seqlens_q=np.array([0, 30, 230]), cu_seqlens_k=np.array([0, 30, 230]))
    p = plan_of(problem)
    assert sorted({t.seq for t in p.tiles}) == [0, 1]
    assert np.array_equal(_kv_blocks_of_plan(p, problem), forward(problem=problem).stats.kv_blocks)


def test_seqlen_k_per_split_fixes_the_split_boundaries():
    q, k, v = _qkv(sq=20, sk=900)
    fixed = plan_of(plan(q, k, v, kernel="fa4-sm100", num_splits=4, seqlen_k_per_split=384))
    ceil = plan_of(plan(q, k, v, kernel="fa4-sm100", num_splits=4))
    n_blocks = -(-900 // 128)
    assert fixed.tiles[0].splits == tuple((3 * s, min(3 * s + 3, n_blocks)) for s in range(4))   # FA4: (9, 8)
    per = -(-n_blocks // 4)
    assert ceil.tiles[0].splits == tuple((per * s, min(per * s + per, n_blocks)) for s in range(4))
    res = forward(q, k, v, kernel="fa4-sm100", num_splits=4, seqlen_k_per_split=384)
    ref, _ = attention_fp64(q, k, v)
    assert np.abs(res.out.astype(np.float64) - ref).max() < 2 ** -6


@pytest.mark.parametrize("kw,msg", [
    (dict(num_splits=4, seqlen_k_per_split=100), "seqlen_k_per_split must be a multiple of tile_n=128"),
    (dict(num_splits=2, seqlen_k_per_split=128), "needs num_splits >= 8"),
])
def test_seqlen_k_per_split_refusals(kw, msg):
    q, k, v = _qkv(sq=20, sk=900)
    with pytest.raises(ValueError, match=msg):
        plan(q, k, v, kernel="fa4-sm100", **kw)
    with pytest.raises(ValueError, match="split-KV kernels only"):
        plan(q, k, v, seqlen_k_per_split=128)


@pytest.mark.parametrize("kernel", ["fa4-sm90", "fa4-sm100"])
def test_seqused_is_the_trimmed_call(kernel):
    q, k, v = _qkv(b=2, sq=90, sk=150)
    used_q, used_k = np.array([90, 37]), np.array([150, 61])
    res = forward(q, k, v, kernel=kernel, causal=True, seqused_q=used_q, seqused_k=used_k)
    one = forward(q[1:, :37], k[1:, :61], v[1:, :61], kernel=kernel, causal=True)
    assert np.array_equal(res.out[1, :37].view(np.uint16), one.out[0].view(np.uint16))
    assert np.array_equal(res.lse[1, :, :37], one.lse[0])
    assert (res.out[1, 37:].astype(np.float32) == 0).all() and (res.lse[1, :, 37:] == -np.inf).all()
    ref, lse = attention_fp64(problem=plan(q, k, v, kernel=kernel, causal=True, seqused_q=used_q,
                                           seqused_k=used_k))
    ref1, _ = attention_fp64(q[1:, :37], k[1:, :61], v[1:, :61], causal=True)
    assert np.array_equal(ref[1, :37], ref1[0]) and (lse[1, :, 37:] == -np.inf).all()


def test_seqused_refusals():
    q, k, v = _qkv(b=2, sq=20, sk=30)
    with pytest.raises(ValueError, match=r"seqused_k\[1\] must be in \[0, 30\]"):
        plan(q, k, v, seqused_k=np.array([3, 31]))
    with pytest.raises(ValueError, match=r"seqused_q must be an integer array of shape \(batch,\)"):
        plan(q, k, v, seqused_q=np.array([3]))


def test_seqused_q_turns_2cta_off_on_sm100():
    q, k, v = _qkv(sq=300, sk=300, d=128)
    assert plan(q, k, v, kernel="fa4-sm100").opts.use_2cta_instrs
    p = plan(q, k, v, kernel="fa4-sm100", seqused_q=np.array([300]))
    assert not p.opts.use_2cta_instrs
    assert plan_of(p).reasons["ctas"] == "seqused_q given"


# ---------------------------------------------------------------------------------------------- b36 split rule
def test_split_kv_with_head_dim_v_differing_follows_b36():
    """interface.py b36 _get_fwd_config: >= 64 KV blocks of 128 -> tile_n 64 and the heuristic's split count
    (148 SMs // M blocks, at most 128 and the KV blocks), even for an explicit num_splits; else not split."""
    q = np.zeros((1, 1, 1, 192), ml_dtypes.bfloat16)
    for sk, n_splits in ((64 * 128, 4), (63 * 128, 4), (64 * 128, 0)):
        k = np.zeros((1, sk, 1, 192), ml_dtypes.bfloat16)
        v = np.zeros((1, sk, 1, 128), ml_dtypes.bfloat16)
        p = plan(q, k, v, kernel="fa4-sm100", num_splits=n_splits)
        if sk >= 64 * 128:
            assert (p.opts.tile_n, p.num_splits) == (64, min(148 // 1, 128, sk // 64))
        else:
            assert (p.opts.tile_n, p.num_splits) == (128, 1)


def test_auto_split_chooses_2cta_and_tuning_after_the_split_count():
    q, k, v = _qkv(sq=300, sk=4096, h=1, d=128)
    p = plan(q, k, v, kernel="fa4-sm100", num_splits=0)
    assert p.num_splits > 1
    ref = plan(q, k, v, kernel="fa4-sm100", num_splits=p.num_splits)
    assert not p.opts.use_2cta_instrs
    assert (p.opts.ex2_emu_freq, p.opts.tile_m) == (ref.opts.ex2_emu_freq, ref.opts.tile_m)


# ---------------------------------------------------------------------------------------------- same_bits
def _pair(a, b, rows=None):
    return same_bits(plan_call(a, store=[a, b]), plan_call(b, store=[a, b]), rows=rows)


def _sound(r):
    """Rows whose bit-setting decisions are all equal have equal bits."""
    assert all(x.equal for x in r.row_results if not x.differs)
    assert "WARNING" not in r.explanation


@pytest.mark.parametrize("kernel", ["fa4-sm90", "fa4-sm100"])
def test_decode_is_the_last_prefill_row(kernel):
    fa = {"kernel": kernel, "causal": True}
    r = _pair(CallSpec(seqlen_q=1, seqlen_k=300, heads=2, head_dim=64, fa4=fa),
              CallSpec(seqlen_q=300, seqlen_k=300, heads=2, head_dim=64, fa4=fa))
    assert r.rows == 2 and r.all_equal and r.predicted_equal == 2
    _sound(r)


def test_batch_position_and_varlen_packing_give_the_same_bits():
    one = CallSpec(batch=1, seqlen_q=150, seqlen_k=200, heads=2, head_dim=64, first=2, fa4={"causal": True})
    four = CallSpec(batch=4, seqlen_q=150, seqlen_k=200, heads=2, head_dim=64, fa4={"causal": True})
    r = _pair(one, four, rows=[(0, 2)])
    assert r.rows == 300 and r.all_equal
    packed = CallSpec(batch=4, seqlen_q=150, seqlen_k=200, heads=2, head_dim=64, varlen=True, fa4={"causal": True})
    r = _pair(four, packed)
    assert r.rows == 4 * 300 and r.all_equal and r.skipped == 0
    _sound(r)


def test_chunked_prefill_rows_are_explained():
    full = CallSpec(seqlen_q=1000, seqlen_k=1000, heads=1, head_dim=64, fa4={"causal": True})
    chunk = CallSpec(seqlen_q=500, seqlen_k=1000, heads=1, head_dim=64, fa4={"causal": True})
    r = _pair(full, chunk)
    assert r.rows == 500 and r.skipped == 0
    _sound(r)
    # the chunk's M blocks start at another query: some of its rows visit a fully masked KV block first
    assert any("visits" in x.differs for x in r.row_results)


def test_rows_that_do_not_share_their_keys_are_skipped():
    # a causal row of a first chunk sees the keys it sees in the full prefill; without a mask it sees fewer
    first, full = (CallSpec(seqlen_q=n, seqlen_k=n, heads=1, head_dim=64, fa4={"causal": True}) for n in (100, 150))
    r = _pair(first, full)
    assert r.rows == 100 and r.skipped == 0 and r.all_equal
    with pytest.raises(ValueError, match="share no logical row"):
        _pair(CallSpec(seqlen_q=100, seqlen_k=100, heads=1, head_dim=64),
              CallSpec(seqlen_q=150, seqlen_k=150, heads=1, head_dim=64))


def test_pack_gqa_on_off_is_sound():
    fa_on, fa_off = {"causal": True, "pack_gqa": True}, {"causal": True, "pack_gqa": False}
    r = _pair(CallSpec(seqlen_q=100, seqlen_k=100, heads=6, heads_kv=2, head_dim=64, fa4=fa_on),
              CallSpec(seqlen_q=100, seqlen_k=100, heads=6, heads_kv=2, head_dim=64, fa4=fa_off))
    assert r.decisions["pack_gqa"] == (True, False)
    _sound(r)


def test_hd256_decode_batch_hazard_on_sm100():
    """b36: only the 2-CTA configuration turns on the software exp2, and for one M block of head dim 256 the
    2-CTA choice needs 2 * batch * heads <= 148 SMs: batch 1 at 16 heads has it, batch 8 has not."""
    fa = {"kernel": "fa4-sm100"}
    a = CallSpec(batch=1, seqlen_q=1, seqlen_k=256, heads=16, head_dim=256, fa4=fa)
    b = CallSpec(batch=8, seqlen_q=1, seqlen_k=256, heads=16, head_dim=256, fa4=fa)
    r = _pair(a, b, rows=[(0, 0)])
    assert r.decisions["ctas"] == (2, 1)
    assert len(r.decisions["emulated_columns"][0]) > 0 and r.decisions["emulated_columns"][1] == ()
    assert "32 <= 148" in r.reasons["ctas"][0] and "256 > 148" in r.reasons["ctas"][1]
    assert r.predicted_equal == 0 and 0 < r.out_elements_differ < r.out_elements
    # the same batches on SM90 have no such rule
    r90 = _pair(CallSpec(batch=1, seqlen_q=1, seqlen_k=256, heads=16, head_dim=256),
                CallSpec(batch=8, seqlen_q=1, seqlen_k=256, heads=16, head_dim=256), rows=[(0, 0)])
    assert r90.all_equal and not r90.decisions


def test_ulp_distance():
    a = np.array([1.0, -0.0, 0.0, 1.0], np.float32)
    b = np.array([np.nextafter(np.float32(1), np.float32(2)), 0.0, -np.float32(1e-45), -1.0], np.float32)
    assert ulp_distance(a, b).tolist() == [1, 0, 1, 2 * 0x3F800000]


# ---------------------------------------------------------------------------------------------- CLI
def test_cli_plan_and_compare(tmp_path, capsys):
    path = tmp_path / "cmp.json"
    call = "batch=1,sq=1,sk=256,heads=2,d=64,causal=true"
    assert main(["attention", "compare", call, "sq=256,sk=256,heads=2,d=64,causal=true", "--json", str(path)]) == 0
    rep = json.loads(path.read_text())
    assert rep["all_equal"] and rep["rows"] == 2
    capsys.readouterr()
    assert main(["attention", "plan", "batch=8,sq=1,sk=256,heads=16,d=256,kernel=fa4-sm100"]) == 0
    p = json.loads(capsys.readouterr().out)
    assert p["ctas"] == 1 and p["emulated_columns"] == [] and "256 > 148" in p["reasons"]["ctas"]


def test_cli_bad_call_is_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        main(["attention", "plan", "batch=x"])
    assert e.value.code == 2
    assert "batch: expected an integer" in capsys.readouterr().err


def test_cli_run_passes_softcap_to_the_reference(tmp_path):
    path = tmp_path / "run.json"
    assert main(["attention", "run", "--shape", "1,64,2,64", "--softcap", "5", "--json", str(path)]) == 0
    rep = json.loads(path.read_text())
    assert rep["features"] == {"softcap": 5.0}
    # FA4's softcap is compared with the softcapped fp64 attention: a bf16-level error, not a failure
    assert rep["vs_fp64"]["rel_l2"] < 4 * rep["floor_bf16_rounded_once"]["rel_l2"]


@pytest.mark.parametrize("extra", [["--window", "16,-1", "--sink-mult", "2"], ["--varlen", "40,17", "--causal"],
                                   ["--kernel", "fa4-sm100", "--page-size", "16", "--num-splits", "2"],
                                   ["--kernel", "fa4-sm100", "--fp8", "e4m3"]])
def test_cli_run_feature_flags(tmp_path, extra):
    path = tmp_path / "run.json"
    assert main(["attention", "run", "--shape", "2,64,2,64", *extra, "--json", str(path)]) == 0
    rep = json.loads(path.read_text())
    assert rep["vs_fp64"]["rel_l2"] < (0.05 if "--fp8" in extra else 4 * rep["floor_bf16_rounded_once"]["rel_l2"])


def test_varlen_max_seqlen_defaults_to_the_total_tokens_as_fa4():
    """b36 _flash_attn_fwd: max_seqlen_q = total_q without a given value, which sets SM100's q_stage."""
    q = np.zeros((200, 1, 64), ml_dtypes.bfloat16)
    cu = np.array([0, 100, 200])
    p = plan(q, q, q, kernel="fa4-sm100", causal=True, cu_seqlens_q=cu, cu_seqlens_k=cu)
    assert (p.max_seqlen_q, p.max_seqlen_k) == (200, 200)
    assert plan_of(p).q_stage == 2
    given = plan(q, q, q, kernel="fa4-sm100", causal=True, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=100,
                 max_seqlen_k=100)
    assert plan_of(given).q_stage == 1


def test_same_bits_on_outputs_given():
    a = CallSpec(seqlen_q=1, seqlen_k=200, heads=1, head_dim=64, fa4={"causal": True})
    b = CallSpec(seqlen_q=200, seqlen_k=200, heads=1, head_dim=64, fa4={"causal": True})
    pa, pb = plan_call(a, store=[a, b]), plan_call(b, store=[a, b])
    ra, rb = forward(problem=pa), forward(problem=pb)
    out_b = rb.out.copy()
    out_b.view(np.uint16)[0, -1, 0, 3] += 1          # one bf16 ulp (away from zero)
    r = same_bits(pa, pb, outputs=[(ra.out, ra.lse), (out_b, rb.lse)])
    assert r.rows == 1 and r.rows_equal == 0 and r.predicted_equal == 1 and "WARNING" in r.explanation
    assert r.out_elements_differ == 1 and r.ulps["0"] == 63
    with pytest.raises(ValueError, match=r"outputs of call_b must be out \(1, 200, 1, 64\)"):
        same_bits(pa, pb, outputs=[(ra.out, ra.lse), (rb.out[:, :10], rb.lse)])


def test_a_window_as_wide_as_the_keys_changes_the_sm90_tile():
    causal = CallSpec(seqlen_q=100, seqlen_k=100, heads=1, head_dim=192, fa4={"causal": True})
    wide = CallSpec(seqlen_q=100, seqlen_k=100, heads=1, head_dim=192, fa4={"window_size": (100, 0)})
    r = _pair(causal, wide)
    assert r.rows == 100 and r.skipped == 0 and r.predicted_equal == 0
    assert r.decisions["tile_n"][0] != r.decisions["tile_n"][1] and "local window" in r.reasons["tile"][1]
    assert r.rows_equal < r.rows
