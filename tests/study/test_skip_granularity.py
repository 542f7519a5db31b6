"""The skip counters come from one place: the CPU emulator's stats (fa4num.attention.forward) and the skip
study's replay (fa4num.study.skip) count the same votes per row, warp and tile on the same inputs.

Inputs are small integers in bf16, so S = q k^T is exact in fp32 whatever the summation order: the emulator's
tensor-core model and the replay's BLAS GEMM see the same block maxima, and every difference would be one of
counting (rows in the kernel's order, pack_gqa, q_stage / 2-CTA tiles, causal tiles whose rows start masked)."""
import math

import ml_dtypes
import numpy as np
import pytest
import torch

from fa4num.attention import forward
from fa4num.softmax import ballot
from fa4num.study.skip import block_maxima, lazy_rescale_scans, scale_log2, sm100_rows


def int_inputs(seqlen_q, seqlen_k, heads, heads_kv, d, *, seed, ramp=0):
    rng = np.random.default_rng(seed)
    q = rng.integers(-3, 4, (seqlen_q, heads, d)).astype(np.float32)
    k = rng.integers(-3, 4, (seqlen_k, heads_kv, d)).astype(np.float32)
    if ramp:
        # logits that grow in the kernel's visiting order (key index decreasing): many rescales
        q[..., 0] = 1
        k[..., 0] = np.round(ramp * (1 - np.arange(seqlen_k) / seqlen_k))[:, None]
    v = rng.standard_normal((seqlen_k, heads_kv, d)).astype(np.float32)
    return q, k, v


CASES = [  # (seqlen_q, seqlen_k, heads, heads_kv, d, causal, ramp, threshold)
    (384, 384, 2, 2, 32, False, 0, 8.0),      # q_stage 2 (2-CTA tile of 512 rows), noise
    (300, 520, 1, 1, 32, False, 200, 8.0),    # partial last warp and tile, rising logits
    (320, 320, 4, 2, 32, True, 120, 8.0),     # causal GQA: pack_gqa mixes heads in a warp
    (384, 384, 2, 2, 32, True, 0, 4.0),       # causal: rows of a 256-row tile start on a masked block
    (256, 384, 2, 1, 32, False, 0, 0.0),      # MQA packed, threshold 0 (eager: rescales = events)
]


@pytest.mark.parametrize("case", CASES)
def test_emulator_stats_equal_study_replay(case):
    sq, sk, h, hk, d, causal, ramp, thr = case
    q, k, v = int_inputs(sq, sk, h, hk, d, seed=sq + sk + h, ramp=ramp)
    bf = ml_dtypes.bfloat16
    res = forward(q[None].astype(bf), k[None].astype(bf), v[None].astype(bf), causal=causal,
                  kernel="fa4-sm100", rescale_threshold=thr)
    st = res.stats
    tq, tk = torch.from_numpy(q).bfloat16(), torch.from_numpy(k).bfloat16()
    layout = sm100_rows(tq, tk, causal=causal)
    assert layout.pack_gqa == (h > hk) and layout.tile_m == res.options.tile_m
    bm = block_maxima(tq, tk, causal=causal, tile_n=layout.tile_n, device="cpu")
    scan = lazy_rescale_scans(bm, scale_log2=scale_log2(1 / math.sqrt(d)), thresholds=(thr,), layout=layout)[thr]
    for name in ballot.COUNTERS:
        assert np.array_equal(getattr(st, name)[0].reshape(-1), scan.skip[name]), name
    assert np.array_equal(st.rescale_events[0].reshape(-1), scan.rescale_events)
    assert np.array_equal(st.rescales_done[0].reshape(-1), scan.rescales_done)
    tot = st.skip_totals()
    assert tot == scan.skip_totals()
    # the case exercises what it is there for: votes, and warps that rescale rows that did not vote
    assert tot["rescales_row"] > 0 and tot["rescales_warp"] > tot["rescales_row"]
    if thr == 0:
        assert all(tot[f"rescales_{g}"] == tot[f"events_{g}"] for g in ballot.GRANULARITIES)
    assert tot["rescales_row"] <= tot["rescales_warp"] <= tot["rescales_tile"] <= tot["rescale_steps"]


def test_replay_without_layout_is_one_sequence_per_leading_row_axis():
    """No layout: each (head) row sequence's tiles visit every block; equal to the layout of a non-causal MHA."""
    q, k, _ = int_inputs(256, 384, 2, 2, 32, seed=3, ramp=100)
    tq, tk = torch.from_numpy(q).bfloat16(), torch.from_numpy(k).bfloat16()
    bm = block_maxima(tq, tk, device="cpu")
    kw = dict(scale_log2=scale_log2(1 / math.sqrt(32)), thresholds=(8.0,))
    plain = lazy_rescale_scans(bm, **kw)[8.0]
    laid = lazy_rescale_scans(bm, layout=sm100_rows(tq, tk), **kw)[8.0]
    assert plain.skip_totals() == laid.skip_totals() and plain.skip_totals()["rescales_warp"] > 0
