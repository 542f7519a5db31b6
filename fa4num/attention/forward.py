"""``forward``: FA4's attention forward pass emulated on the CPU, bit for bit, with FA4's feature set
(softcap, sliding windows, learnable sinks, varlen, pack-GQA, split-KV, fp8 descales, paged KV).

Work is cut as the kernels cut it: per sequence (batch entry or varlen segment) and KV head, the query rows
(packed ``row * qhead_per_kvhead + head`` under pack-GQA, ``pack_gqa.py``) form M blocks of ``tile_m`` rows; an
M block visits the KV blocks ``block_info.py`` ``BlockInfo.get_n_block_min_max`` gives it, right to left
(``flash_fwd_sm90.py`` ``mma``; ``flash_fwd_sm100.py`` ``softmax_loop``): first ``n_block_max - 1`` with the
sequence mask, then the rest. Each block runs:
  S = Q K_blk^T through the tensor-core model (fa4num.hw.mma; wgmma on SM90, tcgen05 on SM100);
  softcap: S <- softcap * tanh(S * scale / softcap) before the mask (fa4num.softmax.scoremod);
  masking (fa4num.attention.masking: seqlen, causal, local window; all bottom-right aligned) -> -inf;
  the softmax step of the kernel (fa4num.softmax.sm90 / sm100);
  O <- RN(O * row_scale), then O = C + P_q V_blk through the tensor-core model (C = O, chunks of 16 keys).
Finalize: the learnable sink joins the row sum, O * rcp(row_sum) -> out dtype, LSE. SM100 split-KV writes fp32
partial outputs and LSEs per split, merged by ``flash_fwd_combine.py`` (:func:`combine_splits`).
Masking every block (the kernel masks only the blocks that need it) gives the same bits: elsewhere every key is
visible.
"""
from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

from fa4num.hw.mma import mma_chain, mma_operand
from fa4num.softmax import ballot as _ballot
from fa4num.softmax import scoremod as _scoremod
from fa4num.softmax import LOG2_E_F32, f32, ffma, lazy_rescale_rows, mufu, scale_log2_of

from . import config
from . import flex as _flex
from . import masking as _masking
from .problem import MAX_SPLITS, NP_DTYPES, Problem, given_or_plan, to_numpy
from .schedule import combine_order, flex_visits, head_groups


@dataclass
class AttentionStats:
    """Per-row counters, shaped like the LSE ((batch, heads, seqlen_q), or (heads, total_q) for varlen q).

    Rescale counts use one definition for both kernels: a *rescale event* is a KV block (after the row has
    seen a key) whose max exceeds the row's true running max (threshold 0); a *rescale done* is a block where
    the kernel replaced its stored max by a larger one and multiplied O and the row sum by the factor.
    SM90 rescales at every event; SM100's lazy rescale avoids ``rescale_events - rescales_done`` of them.

    The skip counters at every granularity FA4 acts at (``rescale_steps``, ``rescales_{row,warp,tile}``,
    ``events_{row,warp,tile}``; definitions in :mod:`fa4num.softmax.ballot`, version
    ``fa4num.softmax.ballot.SKIP_DEFINITION_VERSION``) are counted per row by the bit-exact path; the
    statistical torch and Triton backends leave them None. On SM100 ``rescales_warp`` is what the kernel
    multiplies: a row's O is rescaled on the steps where its warp's ballot passed.
    """
    kv_blocks: np.ndarray         # KV blocks the kernel visits for the row (summed over splits)
    rescale_events: np.ndarray    # blocks where the true row max grew (threshold-0 rescales)
    rescales_done: np.ndarray     # blocks where the kernel rescaled O and row_sum to a new max
    max_lag: np.ndarray           # float32: largest (true max - stored max) * scale_log2 seen (log2 units)
    exp2_emulated: np.ndarray     # exp2 evaluations done by the software polynomial
    exp2_mufu: np.ndarray         # exp2 evaluations done by MUFU.EX2 (row_scale ones not counted)
    p_saturated: np.ndarray       # P values above the P dtype's largest finite value (clipped by satfinite)
    masked_by_window: np.ndarray  # keys < seqlen_k the row cannot see because of causal/window masking
    sink_share: np.ndarray        # float32: exp(sink - LSE), the softmax mass on the learnable sink (0 without)
    gemm: str = "wgmma"           # the tensor-core accumulation model that ran (config.GEMM_IMPL)
    tanh_exact: bool = True       # False: softcap ran with libm's tanh (no bit-exact MUFU.TANH model)
    rescale_steps: np.ndarray | None = None   # blocks after the first of the row's tile (always-rescale work)
    rescales_row: np.ndarray | None = None    # steps where the row's factor was below 1 (its ballot vote)
    rescales_warp: np.ndarray | None = None   # steps where some row of its 32-row warp voted (O multiplied)
    rescales_tile: np.ndarray | None = None   # steps where some row of its 128-row tile voted
    events_row: np.ndarray | None = None      # rescales_row of the same kernel with rescale_threshold = 0
    events_warp: np.ndarray | None = None
    events_tile: np.ndarray | None = None

    @property
    def rescales_avoided(self) -> np.ndarray:
        return self.rescale_events - self.rescales_done

    def skip_totals(self) -> dict | None:
        """{counter: total} of the skip counters (:data:`fa4num.softmax.ballot.COUNTERS`), None if not counted;
        ``fa4num.softmax.ballot.shares`` turns them into shares and multiplies."""
        if self.rescale_steps is None:
            return None
        return {n: int(getattr(self, n).sum()) for n in _ballot.COUNTERS}

    def summary(self) -> dict:
        skip = self.skip_totals() or {}
        return {**skip, "kv_blocks": int(self.kv_blocks.sum()), "rescale_events": int(self.rescale_events.sum()),
                "rescales_done": int(self.rescales_done.sum()),
                "rescales_avoided": int(self.rescales_avoided.sum()),
                "max_lag": float(self.max_lag.max(initial=0)),
                "exp2_emulated": int(self.exp2_emulated.sum()), "exp2_mufu": int(self.exp2_mufu.sum()),
                "p_saturated": int(self.p_saturated.sum()), "masked_by_window": int(self.masked_by_window.sum()),
                "sink_share_max": float(self.sink_share.max(initial=0)), "gemm": self.gemm,
                "tanh_exact": self.tanh_exact}


@dataclass
class AttentionResult:
    """What ``forward`` returns: the output, the LSE, per-row statistics and the options that were used."""

    out: object          # q's layout with head_dim_v, q's dtype (bf16 for fp8 inputs); numpy or torch
    lse: object          # float32 (batch, heads, seqlen_q), or (heads, total_q) with cu_seqlens_q
    stats: AttentionStats
    kernel: str
    options: object = field(repr=False)
    softmax_scale: float = 0.0
    num_splits: int = 1


# ---------------------------------------------------------------------------------------------- one M block
@dataclass
class _Ctx:
    kernel: object           # fa4num.attention.kernels.Kernel
    opts: object
    sl2: np.float32
    softmax_scale: np.float32
    softcap: float
    window: _masking.Window
    dt: str
    model: str
    accum: str
    emu: object
    tanh_arch: str
    flex: object = None      # fa4num.attention.flex.Flex or None


def _blas_gemm(a, b, c):
    import torch
    ta = torch.from_numpy(np.asarray(a, np.float32))
    tb = torch.from_numpy(np.asarray(b, np.float32)).T
    if c is None:
        return (ta @ tb).numpy()
    return torch.addmm(torch.from_numpy(np.asarray(c, np.float32)), ta, tb).numpy()


def _gemm(a, b, c, ctx):
    if ctx.model == "blas":
        return _blas_gemm(a, b, c)
    return mma_chain(a, b, c, model=ctx.model, arch=ctx.accum)


def _operand(x, ctx, role):
    """``x`` prepared once for many GEMMs: float32 for BLAS, split into values and exponents
    (:func:`fa4num.hw.mma.mma_operand`) for the tensor-core models."""
    if ctx.model == "blas":
        return np.asarray(x, np.float32)
    return mma_operand(x, role=role)


class _KVBlocks:
    """One KV head's K and V tiles as GEMM operands, zero-padded to ``tile_n`` keys (out-of-bounds loads read
    zeros), prepared once and shared by every M block of the head (the same bits as preparing them per use)."""

    def __init__(self, kh, vh, ctx):
        self.kh, self.vh, self.ctx = kh, vh, ctx
        self.tn = ctx.opts.tile_n
        self._cache = {}

    def block(self, n):
        """(K operand (tile_n, d), V^T operand (dv, tile_n)) of KV block n (n < 0: a block of zeros)."""
        got = self._cache.get(n)
        if got is None:
            tn, kh, vh = self.tn, self.kh, self.vh
            kb = np.zeros((tn, kh.shape[1]), kh.dtype)
            vb = np.zeros((tn, vh.shape[1]), vh.dtype)
            if n >= 0:
                c0 = n * tn
                hi = min(c0 + tn, kh.shape[0])
                kb[:hi - c0] = kh[c0:hi]
                vb[:hi - c0] = vh[c0:hi]
            got = (_operand(kb, self.ctx, "b"), _operand(np.ascontiguousarray(vb.T), self.ctx, "b"))
            self._cache[n] = got   # a race between threads only computes the same block twice
        return got


def _cast_p(p: np.ndarray, dt: str) -> tuple[np.ndarray, np.ndarray]:
    """P -> the input dtype the way the kernel converts it (cvt.rn; fp8 .satfinite); mark saturated values."""
    limit = float(ml_dtypes.finfo(NP_DTYPES[dt]).max)
    if dt in ("bfloat16", "float16"):
        return p.astype(NP_DTYPES[dt]), p > limit
    from fa4num import fp
    conv = fp.to_e4m3 if dt == "float8_e4m3fn" else fp.to_e5m2
    return np.asarray(conv(p)).view(NP_DTYPES[dt]).reshape(p.shape), p > limit


def _cast_p_blas(p: np.ndarray, dt: str) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_cast_p` for the fp32 BLAS GEMM: P rounded to bf16/fp16 (round to nearest even, as cvt.rn) but
    kept in float32, through torch's vectorised conversion."""
    if dt not in ("bfloat16", "float16"):
        p_q, sat = _cast_p(p, dt)
        return np.asarray(p_q, np.float32), sat
    import torch
    tp = torch.from_numpy(np.ascontiguousarray(p, np.float32))
    limit = float(ml_dtypes.finfo(NP_DTYPES[dt]).max)
    return tp.to(torch.bfloat16 if dt == "bfloat16" else torch.float16).float().numpy(), p > limit


def _run_mblock(qr, kv, qpos, *, sq, sk, visits, ctx, sink_rows, v_descale=1.0, row0=0, heads=None, batch=0,
                seqinfo=None, key_valid=None):
    """One M block of rows (a tile, or one split of it): returns (O normalised fp32 (R, dv), LSE (R,), row
    counters dict). qr: (R, d) q rows; kv: the head's :class:`_KVBlocks`; qpos: (R,) their query index in the
    sequence; visits: the KV blocks in visiting order, each (n, mask_mod applies, seqlen masked)
    (:func:`fa4num.attention.schedule.flex_visits`); row0: the first row's index in the (packed) row sequence, for
    the warp and tile groups; heads (R,), batch, seqinfo: what a score_mod / mask_mod is called with.
    key_valid: (n_hi * tile_n,) bool, replacing the positional mask: the keys every row of the block sees (sparse
    MLA's validity bitmask, fa4num.attention.mla)."""
    r, dv = qr.shape[0], kv.vh.shape[1]
    qop = _operand(qr, ctx, "a")
    opts = ctx.opts
    tn = opts.tile_n
    cnt = {n: np.zeros(r, np.int32) for n in ("rescale_events", "rescales_done", "p_saturated", "kv_blocks")}
    cnt["max_lag"] = np.zeros(r, np.float32)
    cnt.update(_ballot.new_counters(r))
    ex2 = mufu("ex2", opts.mufu_arch)
    kern = ctx.kernel
    state = kern.softmax_state(r)
    o = np.zeros((r, dv), np.float32)
    true_max = np.full(r, -np.inf, np.float32)
    fl = ctx.flex
    cnt["kv_blocks"][:] = len(visits)
    for i, (n, use_mod, seqlen_masked) in enumerate(visits):
        cols = n * tn + np.arange(tn)
        # n < 0: a tile with no KV block (n_block_max = 0), masked everywhere; its K/V loads read zeros
        kb, vbt = kv.block(n)
        s = _gemm(qop, kb, None, ctx)
        if fl is not None and fl.score_mod is not None:
            s = _flex.apply_score_mod(s, fl, softmax_scale=ctx.softmax_scale, batch=batch, heads=heads, q_idx=qpos,
                                      kv_idx=cols, seqinfo=seqinfo, arch=ctx.tanh_arch)
        elif ctx.softcap:
            s = _scoremod.softcap_scores(s, softcap=ctx.softcap, softmax_scale=ctx.softmax_scale,
                                         arch=ctx.tanh_arch)
        if key_valid is None:
            vis = _flex.block_keep(fl, window=ctx.window, cols=cols, seqlen_masked=seqlen_masked, use_mod=use_mod,
                                   batch=batch, heads=heads, q_idx=qpos, seqlen_q=sq, seqlen_k=sk, seqinfo=seqinfo,
                                   arch=ctx.tanh_arch)
        else:
            vis = key_valid[None, cols]
        if vis.all():
            s = np.asarray(s, np.float32)
        else:
            s = np.where(vis, s, np.float32(-np.inf)).astype(np.float32)
        is_first = i == 0
        prev_stored = state.row_max.copy()
        with np.errstate(invalid="ignore"):
            m_blk = np.fmax.reduce(s, axis=1)
            cnt["rescale_events"] += (~is_first) & np.isfinite(true_max) & (m_blk > true_max)
            # the eager kernel's vote: the rule at threshold 0 on the true running max (its stored max)
            _, _, eager_arg, _ = lazy_rescale_rows(true_max, m_blk, scale_log2=ctx.sl2, rescale_threshold=0.0,
                                                   is_first=is_first)
            true_max = np.fmax(true_max, m_blk)
        p, scale, lag, rescale = kern.softmax_step(s, state, scale_log2=ctx.sl2, is_first=is_first, opts=opts,
                                                   emulate=ctx.emu, block_max=m_blk)
        if lag is not None:
            cnt["max_lag"] = np.maximum(cnt["max_lag"], lag)
        if not is_first:
            with np.errstate(invalid="ignore", over="ignore"):
                votes, events = f32(scale) < 1, ex2(eager_arg) < 1
                # groups never span two M tiles (a merged run holds several): with tile_m a multiple of 128
                # the 32- and 128-row groups already end at tile edges (one count); else count tile by tile
                per = r if opts.tile_m % _ballot.TILE_ROWS == 0 else opts.tile_m
                for a in range(0, r, per):
                    sl = slice(a, a + per)
                    _ballot.count_block({n: cnt[n][sl] for n in _ballot.COUNTERS}, step=True, votes=votes[sl],
                                        events=events[sl], row0=row0 + a)
        with np.errstate(invalid="ignore"):
            cnt["rescales_done"] += (~is_first) & np.isfinite(prev_stored) & (state.row_max > prev_stored)
        p_q, sat = _cast_p_blas(p, ctx.dt) if ctx.model == "blas" else _cast_p(p, ctx.dt)
        if sat.any():   # P beyond the dtype's max (fp8's .satfinite) is rare: skip the (R, N) count otherwise
            cnt["p_saturated"] += sat.sum(axis=1).astype(np.int32)
        with np.errstate(invalid="ignore", over="ignore"):
            if not is_first:
                # in place (o is the last GEMM's fresh result): one pass instead of three
                np.multiply(o, f32(scale)[:, None], out=o, where=rescale[:, None])
            o = _gemm(p_q, vbt, o, ctx)
    rcp, lse = kern.finalize(state, scale_log2=ctx.sl2, opts=opts, sink=sink_rows, v_descale=v_descale,
                             softmax_scale=ctx.softmax_scale)
    with np.errstate(invalid="ignore", over="ignore"):
        return (o * rcp[:, None]).astype(np.float32), lse, cnt


_POOL = []
_MERGE_ROWS = 8192


def _map_runs(fn, items, *, torch_one_thread: bool = False) -> list:
    """:func:`_map_blocks` for the runs of :func:`_merge_blocks`, with numba's loops on one thread in each
    worker: our threads already share the runs, and the GEMM and MUFU wrappers splitting a run again would
    oversubscribe the cores. ``torch_one_thread`` (the statistical mode, whose GEMMs are torch's): torch on one
    thread meanwhile too, as its OpenMP threads spinning next to numba's on the same cores slow both down
    several times over (the bit-exact mode leaves torch alone, and unimported)."""
    import numba

    def one_thread(x):
        # numba's parallel loops on this worker only (set_num_threads is thread-local): no oversubscription
        n = numba.get_num_threads()
        numba.set_num_threads(1)
        try:
            return fn(x)
        finally:
            numba.set_num_threads(n)

    if not torch_one_thread:
        return _map_blocks(one_thread, items)
    import torch
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _map_blocks(one_thread, items)
    finally:
        torch.set_num_threads(before)


def _merge_blocks(nmb, ranges, *, max_blocks) -> list:
    """[(first, end)] runs of consecutive M blocks that visit the same KV blocks (``ranges(mb)`` equal), at most
    about one per thread and at most ``max_blocks`` each: each runs as one tall tile, so that the per-call costs
    (numpy's, and the GIL held between the numba kernels, which keeps threads waiting on each other) are paid
    once per KV block of a run instead of once per tile. The bits are the tiles' bits: the GEMM model sums
    each output element on its own, the softmax steps work row by row, and SM100's warp ballot groups 32 rows
    from the tile's first row (the caller merges only tiles of a multiple of 32 rows)."""
    import numba
    per = max(1, min(max_blocks, -(-nmb // numba.get_num_threads())))
    out, start = [], 0
    for mb in range(1, nmb + 1):
        if mb == nmb or mb - start >= per or ranges(mb) != ranges(start):
            out.append((start, mb))
            start = mb
    return out


def _map_blocks(fn, items) -> list:
    """``[fn(x) for x in items]`` on numba's thread count of threads: M blocks are independent, and their work
    (the GEMM and MUFU kernels, numpy's array operations) runs without the GIL. Every block writes its own
    rows, so the bits do not depend on the schedule."""
    import numba
    items = list(items)
    nthreads = min(numba.get_num_threads(), len(items))
    if nthreads <= 1:
        return [fn(x) for x in items]
    if not _POOL or _POOL[0]._max_workers < nthreads:
        _POOL[:] = [ThreadPoolExecutor(max_workers=nthreads, thread_name_prefix="fa4num-forward")]
    return [job.result() for job in [_POOL[0].submit(fn, x) for x in items]]


# ---------------------------------------------------------------------------------------------- split-KV combine
def combine_splits(out_partial, lse_partial, *, arch: str = "sm90"):
    """FA4's split-KV merge (``flash_fwd_combine.py`` ``FlashAttentionForwardCombine``), bit for bit from source.

    out_partial: (num_splits, R, dv) float32, each split's normalised O; lse_partial: (num_splits, R) float32.
    Returns (out fp32 (R, dv) before the cast to the output dtype, lse (R,)). Per row:
      lse_max = max over splits (0 if -inf); scale_s = ex2.approx.ftz(fma.rn(lse_s, LOG2_E, -RN(lse_max*LOG2_E)));
      sum = the scales added as the kernel's threads do (``smem_threads_per_col_lse`` lanes, each summing its
      splits s = lane, lane + lanes, ... left to right, then a shuffle butterfly with offsets 1, 2, 4, ...);
      lse = fma.rn(lg2.approx.ftz(sum), LN2, lse_max); scale_s = RN(scale_s * RN(1 / sum)) (0 if sum is 0/NaN);
      O = sum over valid splits (scale_s > 0) of fma.rn(scale_s, O_s, O), in split order from 0.
    The lane count is 32 for head_dim_v > 64 (tile_m 8) and 16 otherwise (tile_m 16); the padded split count
    is 2^max(ceil(log2 num_splits), 4, and 5 when tile_m is 8). (Emulated from source, not run on a GPU.)

    Examples
    --------
    >>> o = np.ones((2, 1, 8), np.float32); l = np.float32([[0.0], [0.0]])
    >>> out, lse = combine_splits(o, l, arch="libm")
    >>> float(out[0, 0]), round(float(lse[0]), 6)
    (1.0, 0.693147)
    """
    op = f32(out_partial)
    lp = f32(lse_partial)
    if op.ndim != 3 or lp.shape != op.shape[:2]:
        raise ValueError(f"out_partial must be (num_splits, rows, head_dim) and lse_partial (num_splits, rows); "
                         f"got {op.shape} and {lp.shape}")
    ns, r, dv = op.shape
    if not 1 <= ns <= MAX_SPLITS:
        raise ValueError(f"num_splits must be in [1, {MAX_SPLITS}], got {ns}")
    _, lanes, max_splits = combine_order(ns, dv)        # smem_threads_per_col_lse lanes, padded split count
    lse_pad = np.full((max_splits, r), -np.inf, np.float32)
    lse_pad[:ns] = lp
    ex2 = mufu("ex2", arch)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        lse_max = lse_pad.max(axis=0)                   # exact; NaN-free inputs assumed by the kernel too
        lse_max_cur = np.where(lse_max == -np.inf, np.float32(0), lse_max).astype(np.float32)
        scales = ex2(ffma(lse_pad, LOG2_E_F32, -(lse_max_cur * LOG2_E_F32)[None, :]))
        per_lane = scales.reshape(max_splits // lanes, lanes, r)    # split s = i * lanes + lane
        acc = np.zeros((lanes, r), np.float32)
        for i in range(per_lane.shape[0]):
            acc = acc + per_lane[i]
        width = 1
        while width < lanes:
            acc = acc + acc[np.arange(lanes) ^ width]
            width *= 2
        total = acc[0]
        lse = ffma(mufu("lg2", arch)(total), np.float32(math.log(2.0)), lse_max)
        bad = (total == 0) | np.isnan(total)
        inv = np.where(bad, np.float32(0), np.float32(1) / np.where(bad, np.float32(1), total)).astype(np.float32)
        scales = (scales * inv[None, :]).astype(np.float32)
        out = np.zeros((r, dv), np.float32)
        valid = lse_pad != -np.inf
        last = np.where(valid.any(axis=0), max_splits - 1 - np.argmax(valid[::-1], axis=0), -1)
        for s in range(ns):
            use = (scales[s] > 0) & (s <= last)
            out = np.where(use[:, None], ffma(scales[s][:, None], op[s], out), out).astype(np.float32)
    return out, lse.astype(np.float32)


# ---------------------------------------------------------------------------------------------- entry point
def forward(q=None, k=None, v=None, *, problem: Problem | None = None, **fa4_args) -> AttentionResult:
    """Emulate FA4's forward pass (``flash_attn.cute.flash_attn_func`` / ``flash_attn_varlen_func``).

    ``forward(q, k, v, **fa4_args)`` is ``forward(problem=plan(q, k, v, **fa4_args))``
    (:func:`fa4num.attention.problem.plan` checks the arguments and resolves the kernel's options); pass one
    or the other. FA4's arguments, with their defaults:

    Parameters
    ----------
    q, k, v : arrays or torch tensors
        FA4's layouts: q (batch, seqlen_q, heads, head_dim), k/v (batch, seqlen_k, heads_kv, head_dim[_v]);
        with ``cu_seqlens_q`` q is (total_q, heads, head_dim), with ``cu_seqlens_k`` k/v are
        (total_k, heads_kv, ...), with ``page_table`` k/v are (num_pages, page_size, heads_kv, ...).
        bf16/fp16 (ml_dtypes for numpy), fp8 e4m3/e5m2 on fa4-sm100. heads % heads_kv == 0 (GQA/MQA).
    problem : Problem, optional
        ``plan(q, k, v, **fa4_args)`` (instead of q, k, v and the arguments below).
    softmax_scale : float, optional
        Default 1/sqrt(head_dim); applied as Float32 (scale_log2 = RN(scale * log2 e)). A real number (a
        string is a TypeError), not NaN.
    causal : bool
        Bottom-right aligned (key j visible from query i iff j <= i + seqlen_k - seqlen_q).
    kernel : a name of :data:`fa4num.attention.kernels.KERNELS`, default "fa4-sm90"
        "fa4-sm90": the Hopper path as the H200 runs it; "fa4-sm100": the Blackwell path from FA4's source (not
        run on a Blackwell GPU).
    softcap : float
        >= 0; 0 disables. score <- softcap * tanh(score * scale / softcap) (tanh.approx.f32).
    window_size : (left, right)
        Sliding window (None = unbounded side), bottom-right aligned like causal; see
        :func:`fa4num.attention.masking.resolve_window`. A left side above seqlen_k or a right side above
        seqlen_q (the longest sequence) masks nothing; FA4 accepts it, fa4num raises a ValueError naming
        ``window_size`` (pass None: the same bits); see :func:`fa4num.attention.masking.check_window_range`.
    learnable_sink : array (heads,), optional
        One extra softmax logit per q head (natural-log units, not scaled) with no value row.
    pack_gqa : bool, optional
        None: FA4's default (the kernel's ``default_pack_gqa``, :mod:`fa4num.attention.kernels`).
    cu_seqlens_q, cu_seqlens_k : int arrays (batch + 1,), optional
        Varlen prefix sums; ``max_seqlen_q``/``max_seqlen_k`` (optional) must cover the longest sequence; FA4's
        default is the total token count, which sets fa4-sm100's q_stage, 2-CTA and split choices.
    seqused_q, seqused_k : int arrays (batch,), optional
        The rows / keys of each sequence that are used (FA4's ``seqused_q/k``, replacing the lengths); rows beyond
        are not written by FA4 (fa4num leaves out 0 and LSE -inf there).
    seqlen_k_per_split : int, optional
        fa4-sm100 split-KV: keys per split fixed (a multiple of tile_n; num_splits >= ceil(max_seqlen_k / it)).
    num_splits : int
        fa4-sm100 split-KV: 1 (none), > 1 splits merged by FA4's combine kernel, < 1 FA4's heuristic.
        fa4-sm90 refuses splits, as FA4 does ("SplitKV not supported on SM 9.0").
    q_descale, k_descale, v_descale : float32 (batch, heads_kv), optional
        fp8 only (fa4-sm100): ``scale_log2 *= q_descale * k_descale``, the final O scale ``*= v_descale``.
    page_table : int array (batch, pages_per_seq), optional
        Paged KV (fa4-sm100): keys are gathered page by page; numerically the same as contiguous K/V of
        length pages_per_seq * page_size.
    nonfinite : {"propagate", "raise"}
        "propagate" (default): NaN/inf in q/k/v give the kernel's bits; "raise": ValueError naming the input.
    score_mod, mask_mod, aux_tensors, aux_scalars, block_sparse_tensors : optional
        FlexAttention's arguments (:mod:`fa4num.attention.flex`, docs/flex.md): callables with FA4's calling
        convention evaluated in fp32 where FA4 applies them (the score_mod on ``RN(S * scale)``, then the
        mask), their side inputs, and FA4's block-sparse tensors (mask blocks, then full blocks, each list
        right to left).
    **options
        ``mode`` = "bitexact" (default) or "statistical" (fp32 GEMMs through torch; numpy
        exp2/rcp/log2); kernel knobs: the fields of the kernel's options (``config.Sm90Options``,
        ``config.Sm100Options``; :func:`fa4num.attention.kernels.knob_table` lists them with their defaults and
        values: ``gemm``, ``tile_n``, ``rescale_threshold``, ``coeffs``, ...). Each knob is checked where it
        enters (:func:`fa4num.attention.config.apply_overrides`): what FA4 refuses
        or cannot mean is refused with a ValueError naming it (a NaN, infinite or negative
        ``rescale_threshold``, which FA4's ``rescale_threshold > 0.0`` test would silently treat as 0; a
        non-integer ``max_offset`` or ``ex2_emu_freq``); what FA4 accepts (any finite ``softmax_scale``,
        negative or huge; NaN/inf in q, k, v) is emulated and gives the kernel's bits, NaN included.

    Returns
    -------
    AttentionResult
        ``out`` (q's layout, head_dim_v; q's dtype, bf16 for fp8), ``lse`` (float32 (batch, heads, seqlen_q),
        (heads, total_q) for varlen q), ``stats`` (:class:`AttentionStats`).

    Examples
    --------
    >>> import ml_dtypes
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = (rng.standard_normal((1, 40, 2, 64)).astype(ml_dtypes.bfloat16) for _ in range(3))
    >>> res = forward(q, k, v, causal=True, window_size=(8, None))
    >>> res.out.shape, res.lse.shape, int(res.stats.masked_by_window[0, 0, -1])
    ((1, 40, 2, 64), (1, 2, 40), 31)
    """
    if problem is None and q is not None and k is not None and v is not None:
        # torch inputs: plan the numpy views of their bits (only the device is kept)
        (qa, device), (ka, _), (va, _) = to_numpy(q, "q"), to_numpy(k, "k"), to_numpy(v, "v")
        setup = given_or_plan(None, qa, ka, va, fa4_args, who="forward")
        seqs = setup.seqs
    else:
        setup = given_or_plan(problem, q, k, v, fa4_args, who="forward")
        (qa, device), (ka, _), (va, _) = (to_numpy(x, n) for x, n in ((setup.q, "q"), (setup.k, "k"),
                                                                        (setup.v, "v")))
        seqs = setup.seqs if qa is setup.q else setup.sequences(qa, ka, va)
    kern = setup.kernel
    h, hk, dv, dt = setup.heads, setup.heads_kv, setup.head_dim_v, setup.dtype
    h_per_kv, window, softcap, sink, fp8 = h // hk, setup.window, setup.softcap, setup.sink, setup.fp8
    qd, kd, vd, num_splits, varlen_q, opts = setup.q_descale, setup.k_descale, setup.v_descale, \
        setup.num_splits, setup.varlen_q, setup.opts
    scale = setup.softmax_scale
    model, accum = config.GEMM_IMPL[opts.gemm]
    tanh_arch = opts.mufu_arch
    emu = kern.emulated_columns(opts)
    n_emu = 0 if emu is None else int(emu.sum())
    out_dt = NP_DTYPES["bfloat16"] if fp8 else NP_DTYPES[dt]
    lead = qa.shape[:-2]
    out = np.zeros((*lead, h, dv), out_dt)
    lse_shape = (h, qa.shape[0]) if varlen_q else (qa.shape[0], h, qa.shape[1])
    lse = np.full(lse_shape, -np.inf, np.float32)
    names = ("kv_blocks", "rescale_events", "rescales_done", "exp2_emulated", "exp2_mufu", "p_saturated",
             "masked_by_window", *_ballot.COUNTERS)
    st = {n: np.zeros(lse_shape, np.int32) for n in names}
    st["max_lag"] = np.zeros(lse_shape, np.float32)
    st["sink_share"] = np.zeros(lse_shape, np.float32)
    tanh_exact = not softcap or _scoremod.tanh_is_exact(tanh_arch)
    fl = setup.flex
    for seq in seqs:
        sq, sk = seq.q.shape[0], seq.k.shape[0]
        if sq == 0:
            continue
        # keys the window hides (within seqlen_k), per query row
        qi = np.arange(sq)
        nvis = _masking.visible(qi[:, None], np.arange(sk)[None, :], seqlen_q=sq, seqlen_k=sk,
                                window=window).sum(axis=1) if sk else np.zeros(sq, np.int64)
        for hh in range(h):
            st["masked_by_window"][seq.lse_index(hh)] = sk - nvis
        if sk == 0:
            # interface.py: seqlen_k == 0 -> out = 0, lse = -inf (or the sink)
            if sink is not None:
                for hh in range(h):
                    lse[seq.lse_index(hh)] = sink[hh]
            continue
        seqinfo = _flex.SeqlenInfo(sq, sk, 0 if setup.cu_seqlens_q is None else int(setup.cu_seqlens_q[seq.batch]),
                                   0 if setup.cu_seqlens_k is None else int(setup.cu_seqlens_k[seq.batch]))
        for kvh in range(hk):
            qk_descale = np.float32(qd[seq.batch, kvh] * kd[seq.batch, kvh])
            ctx = _Ctx(kern, opts, None, None, softcap, window, dt, model, accum, emu, tanh_arch, fl)
            if softcap or (fl is not None and fl.score_mod is not None):
                # utils.compute_softmax_scale_log2: with a score_mod the scale is applied before it
                ctx.sl2 = _scoremod.SCALE_LOG2_WITH_SCOREMOD
                ctx.softmax_scale = np.float32(np.float32(scale) * qk_descale)
            else:
                ctx.sl2 = np.float32(scale_log2_of(scale) * qk_descale)
                ctx.softmax_scale = np.float32(scale)
            kv = _KVBlocks(seq.k[:, kvh], seq.v[:, kvh], ctx)
            for grp in head_groups(kvh, qhead_per_kvhead=h_per_kv, pack_gqa=opts.pack_gqa):
                # rows of this tile sequence: packed row = query * g + head offset
                ng = len(grp)
                rows_q = np.repeat(np.arange(sq), ng)
                rows_h = np.tile(np.asarray(grp), sq)
                nrows = sq * ng
                o_all = np.zeros((nrows, dv), np.float32)
                l_all = np.full(nrows, -np.inf, np.float32)
                cnt_all = {n: np.zeros(nrows, np.int32) for n in ("rescale_events", "rescales_done",
                                                                   "p_saturated", "kv_blocks",
                                                                   *_ballot.COUNTERS)}
                cnt_all["max_lag"] = np.zeros(nrows, np.float32)

                def ranges(mb, sq=sq, sk=sk, ng=ng, grp=grp, b=seq.batch):
                    return flex_visits(setup, mb, batch=b, head=grp[0], seqlen_q=sq, seqlen_k=sk, group=ng)

                def run_mb(item):
                    # run to completion (below) before the loop variables it reads move on
                    mb, mb_end = item
                    rs = slice(mb * opts.tile_m, min(mb_end * opts.tile_m, nrows))
                    qr = seq.q[rows_q[rs], rows_h[rs]]
                    sink_rows = None if sink is None else sink[rows_h[rs]]
                    parts = []
                    for split, visits in enumerate(ranges(mb)):
                        parts.append(_run_mblock(qr, kv, rows_q[rs], sq=sq, sk=sk, visits=visits, ctx=ctx,
                                                 sink_rows=sink_rows if split == 0 else None,
                                                 v_descale=vd[seq.batch, kvh], row0=rs.start, heads=rows_h[rs],
                                                 batch=seq.batch, seqinfo=seqinfo))
                    if num_splits == 1:
                        return (rs, *parts[0])
                    o_mb, l_mb = combine_splits(np.stack([p[0] for p in parts]), np.stack([p[1] for p in parts]),
                                                arch=opts.mufu_arch)
                    cnt = {n: sum(p[2][n] for p in parts) for n in parts[0][2] if n != "max_lag"}
                    cnt["max_lag"] = np.max([p[2]["max_lag"] for p in parts], axis=0)
                    return rs, o_mb, l_mb, cnt

                nmb = -(-nrows // opts.tile_m)
                items = _merge_blocks(nmb, ranges,
                    # SM100's warp ballot groups 32 rows from each tile's first row
                    max_blocks=_MERGE_ROWS // opts.tile_m if opts.tile_m % 32 == 0 else 1)
                done = _map_runs(run_mb, items, torch_one_thread=model == "blas")
                for rs, o_mb, l_mb, cnt in done:
                    o_all[rs], l_all[rs] = o_mb, l_mb
                    for n, val in cnt.items():
                        cnt_all[n][rs] = val
                for j, hh in enumerate(grp):
                    sel = rows_h == hh
                    out[seq.out_index + (hh,)] = cast_out(o_all[sel], out_dt)
                    li = seq.lse_index(hh)
                    lse[li] = l_all[sel]
                    for n, val in cnt_all.items():
                        st[n][li] = val[sel]
                    st["exp2_emulated"][li] = cnt_all["kv_blocks"][sel] * n_emu
                    st["exp2_mufu"][li] = cnt_all["kv_blocks"][sel] * (opts.tile_n - n_emu)
    if sink is not None:
        st["sink_share"] = sink_shares(sink, lse, varlen_q=varlen_q)
    stats = AttentionStats(**st, gemm=opts.gemm, tanh_exact=tanh_exact)
    return _wrap(out, lse, stats, kern.name, opts, scale, device, num_splits)


def cast_out(o, out_dtype) -> np.ndarray:
    """The normalised fp32 output in the output dtype as ``cvt.rn.{bf16,f16}.f32`` writes it: round to nearest
    even, every NaN the canonical 0x7FFF.

    Parameters
    ----------
    o : float32 array
    out_dtype : numpy dtype
        ml_dtypes bfloat16 or numpy float16.

    Returns
    -------
    numpy.ndarray of out_dtype

    Examples
    --------
    >>> hex(int(cast_out(np.float32([-np.nan]), ml_dtypes.bfloat16).view(np.uint16)[0]))
    '0x7fff'
    """
    o = np.asarray(o, np.float32)
    oc = o.astype(out_dtype)
    oc.view(np.uint16)[np.isnan(o)] = 0x7FFF
    return oc


def sink_shares(sink, lse, *, varlen_q: bool = False) -> np.ndarray:
    """``AttentionStats.sink_share``: exp(sink - LSE) per row, the softmax mass on the learnable sink (0 where
    that is not finite).

    Parameters
    ----------
    sink : float32 (heads,)
    lse : float32 (batch, heads, seqlen_q), or (heads, total_q) with ``varlen_q``
    varlen_q : bool

    Returns
    -------
    float32 array of lse's shape

    Examples
    --------
    >>> sink_shares(np.float32([0.0]), np.zeros((1, 1, 2), np.float32)).tolist()
    [[[1.0, 1.0]]]
    """
    sink = np.asarray(sink, np.float64)
    sink_b = sink[:, None] if varlen_q else sink[None, :, None]
    with np.errstate(invalid="ignore", over="ignore"):
        share = np.exp(sink_b - np.asarray(lse, np.float64))
    return np.where(np.isfinite(share), share, 0).astype(np.float32)


def _wrap(out, lse, stats, kernel, opts, scale, device, num_splits=1):
    if device is None:
        return AttentionResult(out, lse, stats, kernel, opts, scale, num_splits)
    import torch
    ot = torch.from_numpy(out.view(np.int16)).view(torch.bfloat16 if out.dtype == NP_DTYPES["bfloat16"]
                                                  else torch.float16).to(device)
    return AttentionResult(ot, torch.from_numpy(lse).to(device), stats, kernel, opts, scale, num_splits)
