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
from fa4num.softmax import scoremod as _scoremod
from fa4num.softmax import sm90 as _sm90
from fa4num.softmax import sm100 as _sm100
from fa4num.softmax import LOG2_E_F32, f32, ffma, mufu, scale_log2_of

from . import config
from . import masking as _masking

_NP_DTYPES = {"bfloat16": np.dtype(ml_dtypes.bfloat16), "float16": np.dtype(np.float16),
              "float8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn), "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2)}
_TORCH_NAMES = {"torch.bfloat16": "bfloat16", "torch.float16": "float16", "torch.float8_e4m3fn": "float8_e4m3fn",
                "torch.float8_e5m2": "float8_e5m2"}
NONFINITE = ("propagate", "raise")
MAX_SPLITS = 256   # _flash_attn_fwd_combine asserts num_splits <= 256


@dataclass
class AttentionStats:
    """Per-row counters, shaped like the LSE ((batch, heads, seqlen_q), or (heads, total_q) for varlen q).

    Rescale counts use one definition for both kernels: a *rescale event* is a KV block (after the row has
    seen a key) whose max exceeds the row's true running max (threshold 0); a *rescale done* is a block where
    the kernel replaced its stored max by a larger one and multiplied O and the row sum by the factor.
    SM90 rescales at every event; SM100's lazy rescale avoids ``rescale_events - rescales_done`` of them.
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

    @property
    def rescales_avoided(self) -> np.ndarray:
        return self.rescale_events - self.rescales_done

    def summary(self) -> dict:
        return {"kv_blocks": int(self.kv_blocks.sum()), "rescale_events": int(self.rescale_events.sum()),
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


def _to_numpy(x, name: str) -> tuple[np.ndarray, object]:
    """(numpy array in an ml_dtypes/numpy dtype, torch device or None)."""
    dt = _dtype_name(x, name)
    if type(x).__module__.startswith("torch"):
        import torch
        t = x.detach().contiguous().cpu()
        raw = t.view(torch.int16 if _NP_DTYPES[dt].itemsize == 2 else torch.uint8).numpy()
        return raw.view(_NP_DTYPES[dt]), x.device
    return np.asarray(x), None


def _plain(x, name):
    """A small float/int side input (sink, descale, cu_seqlens, page table) as numpy."""
    if x is None:
        return None
    if type(x).__module__.startswith("torch"):
        x = x.detach().cpu()
        if x.is_floating_point():
            x = x.float()
        x = x.numpy()
    return np.asarray(x)


# ---------------------------------------------------------------------------------------------- problem setup
@dataclass
class _Seq:
    """One sequence: q rows (sq, h, d), keys/values (sk, hk, d/dv), where its rows go in out/lse."""
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    out_index: object     # index into out's leading axes
    lse_index: object     # callable head -> index into lse
    batch: int


def _dtype_name(x, name: str) -> str:
    """FA4's name of the dtype of a numpy array (ml_dtypes) or torch tensor; ValueError if FA4 takes no such
    input."""
    if type(x).__module__.startswith("torch"):
        dt = _TORCH_NAMES.get(str(x.dtype))
        if dt is None:
            raise ValueError(f"{name} dtype must be one of {tuple(_TORCH_NAMES)}, got {x.dtype}")
        return dt
    if x.dtype.name not in _NP_DTYPES:
        raise ValueError(f"{name} dtype must be one of {tuple(_NP_DTYPES)} (ml_dtypes for bf16/fp8), "
                         f"got {x.dtype}")
    return x.dtype.name


def _all_finite(a) -> bool:
    if type(a).__module__.startswith("torch"):
        import torch
        # torch has no isfinite for fp8: widen those (1 byte) first
        return bool(torch.isfinite(a if a.element_size() > 1 else a.float()).all())
    return bool(np.isfinite(a.astype(np.float32)).all())


def _validate_dtypes(qa, ka, va, kernel) -> str:
    names = [_dtype_name(x, n) for x, n in ((qa, "q"), (ka, "k"), (va, "v"))]
    if len(set(names)) != 1:
        raise ValueError(f"q, k, v must share one dtype, got {names[0]}, {names[1]}, {names[2]}")
    allowed = config.DTYPES_SM90 if kernel == "fa4-sm90" else config.DTYPES_SM100
    if names[0] not in allowed:
        raise ValueError(f"dtype {names[0]} is not supported by kernel {kernel!r}; allowed: {allowed}")
    return names[0]


def _check_head_dims(d, dv, kernel, dt):
    align = 16 // _NP_DTYPES[dt].itemsize
    # interface.py _validate_head_dims: SM90 8..256 each; SM100 8..128 each, (192, 128) or (256, 256)
    if kernel == "fa4-sm90":
        ok = 8 <= d <= 256 and 8 <= dv <= 256
        allowed = "[8, 256] (q/k and v)"
    else:
        ok = (8 <= d <= 128 and 8 <= dv <= 128) or (d, dv) in ((192, 128), (256, 256))
        allowed = "[8, 128] (q/k and v), or (head_dim, head_dim_v) = (192, 128) or (256, 256)"
    if not ok or d % align or dv % align:
        raise ValueError(f"head_dim must be in {allowed} and a multiple of {align} for {kernel} with {dt}, got "
                         f"head_dim={d}, head_dim_v={dv}")


def _build_sequences(qa, ka, va, cu_q, cu_k, page_table, max_seqlen_q, max_seqlen_k):
    """Split the inputs into sequences (FA4's varlen and paged layouts); validate their shapes."""
    if cu_q is None:
        if qa.ndim != 4:
            raise ValueError(f"q must be 4-D (batch, seqlen, heads, head_dim), got shape {qa.shape} "
                             "(3-D q needs cu_seqlens_q)")
        batch = qa.shape[0]
    else:
        if qa.ndim != 3:
            raise ValueError(f"q must be 3-D (total_q, heads, head_dim) with cu_seqlens_q, got shape {qa.shape}")
        cu_q = _masking.check_cu_seqlens(cu_q, "cu_seqlens_q", total=qa.shape[0])
        batch = cu_q.size - 1
    h, d = qa.shape[-2:]
    if page_table is not None:
        if cu_k is not None:
            raise ValueError("page_table and cu_seqlens_k cannot be combined (FA4 asserts this)")
        pt = np.asarray(page_table)
        if pt.ndim != 2 or pt.shape[0] != batch or not np.issubdtype(pt.dtype, np.integer):
            raise ValueError(f"page_table must be an integer array (batch={batch}, max_pages), got shape "
                             f"{pt.shape} dtype {pt.dtype}")
        if ka.ndim != 4 or va.ndim != 4 or ka.shape[:3] != va.shape[:3]:
            raise ValueError(f"paged k/v must be (num_pages, page_size, heads_kv, head_dim), got {ka.shape}, "
                             f"{va.shape}")
        if pt.size and (pt.min() < 0 or pt.max() >= ka.shape[0]):
            raise ValueError(f"page_table entries must be in [0, {ka.shape[0]}), got [{pt.min()}, {pt.max()}]")
        page = ka.shape[1]
        # BlockInfo sees seqlen_k = pages per sequence * page_size; pages only change where keys are read from
        kseq = [ka[pt[b]].reshape(-1, *ka.shape[2:]) for b in range(batch)]
        vseq = [va[pt[b]].reshape(-1, *va.shape[2:]) for b in range(batch)]
        del page
    elif cu_k is None:
        if ka.ndim != 4 or va.ndim != 4 or ka.shape[0] != batch or va.shape[:3] != ka.shape[:3]:
            raise ValueError(f"k and v must be 4-D (batch={batch}, seqlen_k, heads_kv, head_dim) with matching "
                             f"batch, seqlen_k and heads_kv, got {ka.shape} and {va.shape}")
        kseq, vseq = list(ka), list(va)
    else:
        if ka.ndim != 3 or va.ndim != 3 or va.shape[:2] != ka.shape[:2]:
            raise ValueError(f"k and v must be 3-D (total_k, heads_kv, head_dim) with cu_seqlens_k, got "
                             f"{ka.shape} and {va.shape}")
        cu_k = _masking.check_cu_seqlens(cu_k, "cu_seqlens_k", total=ka.shape[0])
        if cu_k.size != batch + 1:
            raise ValueError(f"cu_seqlens_k must have batch + 1 = {batch + 1} entries, got {cu_k.size}")
        kseq = [ka[cu_k[b]:cu_k[b + 1]] for b in range(batch)]
        vseq = [va[cu_k[b]:cu_k[b + 1]] for b in range(batch)]
    hk = ka.shape[-2]
    if ka.shape[-1] != d:
        raise ValueError(f"k head_dim {ka.shape[-1]} != q head_dim {d}")
    if hk < 1 or h % hk:
        raise ValueError(f"q heads ({h}) must be a multiple of k/v heads ({hk})")
    seqs = []
    for b in range(batch):
        if cu_q is None:
            qs, out_idx = qa[b], (b, slice(None))
            lse_idx = (lambda hh, b=b: (b, hh, slice(None)))
        else:
            sl = slice(int(cu_q[b]), int(cu_q[b + 1]))
            qs, out_idx = qa[sl], (sl,)
            lse_idx = (lambda hh, sl=sl: (hh, sl))
        seqs.append(_Seq(qs, kseq[b], vseq[b], out_idx, lse_idx, b))
    longest_q = max((s.q.shape[0] for s in seqs), default=0)
    longest_k = max((s.k.shape[0] for s in seqs), default=0)
    for name, given, need in (("max_seqlen_q", max_seqlen_q, longest_q), ("max_seqlen_k", max_seqlen_k, longest_k)):
        if given is not None and int(given) < need:
            raise ValueError(f"{name} must be >= the longest sequence ({need}), got {given}")
    return seqs, batch, longest_q if max_seqlen_q is None else int(max_seqlen_q)


# ---------------------------------------------------------------------------------------------- one M block
@dataclass
class _Ctx:
    kernel: str
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
    limit = float(ml_dtypes.finfo(_NP_DTYPES[dt]).max)
    if dt in ("bfloat16", "float16"):
        return p.astype(_NP_DTYPES[dt]), p > limit
    from fa4num import fp
    conv = fp.to_e4m3 if dt == "float8_e4m3fn" else fp.to_e5m2
    return np.asarray(conv(p)).view(_NP_DTYPES[dt]).reshape(p.shape), p > limit


def _cast_p_blas(p: np.ndarray, dt: str) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_cast_p` for the fp32 BLAS GEMM: P rounded to bf16/fp16 (round to nearest even, as cvt.rn) but
    kept in float32, through torch's vectorised conversion."""
    if dt not in ("bfloat16", "float16"):
        p_q, sat = _cast_p(p, dt)
        return np.asarray(p_q, np.float32), sat
    import torch
    tp = torch.from_numpy(np.ascontiguousarray(p, np.float32))
    limit = float(ml_dtypes.finfo(_NP_DTYPES[dt]).max)
    return tp.to(torch.bfloat16 if dt == "bfloat16" else torch.float16).float().numpy(), p > limit


def _run_mblock(qr, kv, qpos, *, sq, sk, n_lo, n_hi, ctx, sink_rows, v_descale=1.0):
    """One M block of rows (a tile, or one split of it): returns (O normalised fp32 (R, dv), LSE (R,), row
    counters dict). qr: (R, d) q rows; kv: the head's :class:`_KVBlocks`; qpos: (R,) their query index in the
    sequence."""
    r, dv = qr.shape[0], kv.vh.shape[1]
    qop = _operand(qr, ctx, "a")
    opts = ctx.opts
    tn = opts.tile_n
    cnt = {n: np.zeros(r, np.int32) for n in ("rescale_events", "rescales_done", "p_saturated", "kv_blocks")}
    cnt["max_lag"] = np.zeros(r, np.float32)
    sm90 = ctx.kernel == "fa4-sm90"
    state = _sm90.Sm90State.empty(r) if sm90 else _sm100.Sm100State.empty(r)
    o = np.zeros((r, dv), np.float32)
    true_max = np.full(r, -np.inf, np.float32)
    blocks = [n_hi - 1] + list(range(n_hi - 2, n_lo - 1, -1))
    if n_hi <= n_lo and not sm90 and opts.num_splits > 1:
        blocks = []           # has_kv_work: an empty split writes O = 0, LSE = -inf
    cnt["kv_blocks"][:] = len(blocks)
    for i, n in enumerate(blocks):
        cols = n * tn + np.arange(tn)
        # n < 0: a tile with no KV block (n_block_max = 0), masked everywhere; its K/V loads read zeros
        kb, vbt = kv.block(n)
        s = _gemm(qop, kb, None, ctx)
        if ctx.softcap:
            s = _scoremod.softcap_scores(s, softcap=ctx.softcap, softmax_scale=ctx.softmax_scale,
                                         arch=ctx.tanh_arch)
        vis = _masking.visible(qpos[:, None], cols[None, :], seqlen_q=sq, seqlen_k=sk, window=ctx.window)
        if vis.all():
            s = np.asarray(s, np.float32)
        else:
            s = np.where(vis, s, np.float32(-np.inf)).astype(np.float32)
        is_first = i == 0
        prev_stored = state.row_max.copy()
        with np.errstate(invalid="ignore"):
            m_blk = np.fmax.reduce(s, axis=1)
            cnt["rescale_events"] += (~is_first) & np.isfinite(true_max) & (m_blk > true_max)
            true_max = np.fmax(true_max, m_blk)
        if sm90:
            p, scale = _sm90.online_softmax(s, state, scale_log2=ctx.sl2, is_first=is_first, arch=opts.mufu_arch,
                                            ffma_exponent=opts.ffma_exponent)
            rescale = np.ones(r, bool)
        else:
            step = _sm100.softmax_step(s, state, scale_log2=ctx.sl2, is_first=is_first,
                                       rescale_threshold=opts.rescale_threshold, max_offset=opts.max_offset,
                                       emulate=ctx.emu, poly_degree=opts.poly_degree, coeffs=opts.coeffs,
                                       arch=opts.mufu_arch, fused_bias=opts.fused_bias,
                                       scale_ex2_ftz=not opts.is_sm103)
            p, scale = step.p, step.acc_scale
            cnt["max_lag"] = np.maximum(cnt["max_lag"], step.lag)
            # correction_loop: a warp (32 rows) rescales O only when one of its rows has scale < 1
            # (vote_ballot_sync); a lane whose scale is 1.0 is then multiplied by 1.0 (unchanged)
            want = np.zeros(-(-r // 32) * 32, bool)
            want[:r] = scale < 1
            rescale = np.repeat(want.reshape(-1, 32).any(axis=1), 32)[:r]
        with np.errstate(invalid="ignore"):
            cnt["rescales_done"] += (~is_first) & np.isfinite(prev_stored) & (state.row_max > prev_stored)
        p_q, sat = _cast_p_blas(p, ctx.dt) if ctx.model == "blas" else _cast_p(p, ctx.dt)
        cnt["p_saturated"] += sat.sum(axis=1).astype(np.int32)
        with np.errstate(invalid="ignore", over="ignore"):
            if not is_first:
                # in place (o is the last GEMM's fresh result): one pass instead of three
                np.multiply(o, f32(scale)[:, None], out=o, where=rescale[:, None])
            o = _gemm(p_q, vbt, o, ctx)
    if sm90:
        rcp, lse = _sm90.finalize(state, scale_log2=ctx.sl2, arch=opts.mufu_arch, sink=sink_rows)
    else:
        rcp, lse = _sm100.finalize(state, scale_log2=ctx.sl2, max_offset=opts.max_offset, arch=opts.mufu_arch,
                                   sink=sink_rows, v_descale=v_descale)
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
    tile_m = 8 if dv > 64 else 16                      # k_block_size 128 -> tile_m 8, 64 -> 16
    lanes = 256 // tile_m                               # smem_threads_per_col_lse
    log_max = max(math.ceil(math.log2(ns)), 4, 5 if tile_m == 8 else 0)
    max_splits = 1 << log_max
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


# ---------------------------------------------------------------------------------------------- options
MODES = ("bitexact", "statistical")


def _resolve_options(kernel, dt, d, causal, sq, h_per_kv, options, *, batch=1, heads=1, local=False, dv=None,
                     pack_gqa=None, varlen_q=False, num_splits=1, page_size=None):
    options = dict(options)
    mode = options.pop("mode", "bitexact")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if mode == "statistical":
        # GEMMs through fp32 BLAS, MUFU through numpy's libm: vectorised and fast, not bit-exact
        options = {"gemm": "blas", "mufu_arch": "libm", **options}
    dv = d if dv is None else dv
    if kernel == "fa4-sm90":
        tm, tn = config.sm90_tile(d, causal, local=local, head_dim_v=dv)
        pk = config.default_pack_gqa(kernel=kernel, qhead_per_kvhead=h_per_kv, head_dim=d, head_dim_v=dv,
                                     max_seqlen_q=sq, num_splits=num_splits, batch=batch, heads=heads)
        opts = config.Sm90Options(tile_m=tm, tile_n=tn, pack_gqa=pk if pack_gqa is None else bool(pack_gqa))
    else:
        opts = config.sm100_defaults(dtype=dt, head_dim=d, causal=causal, seqlen_q=sq, qhead_per_kvhead=h_per_kv,
                                     batch=batch, heads=heads, local=local, head_dim_v=dv, pack_gqa=pack_gqa,
                                     varlen_q=varlen_q, split_kv=num_splits > 1, page_size=page_size,
                                     use_2cta_instrs=options.pop("use_2cta_instrs", None),
                                     is_sm103=options.pop("is_sm103", False))
    opts = config.apply_overrides(opts, options)
    if kernel == "fa4-sm100":
        if opts.coeffs is not None:
            # anything fa4num.polys.resolve takes (a set name, "c0,c1,...", fp32 numbers): the degree follows
            from fa4num.ex2 import poly_coeffs
            coeffs = poly_coeffs(None, coeffs=opts.coeffs)
            opts = config.replace(opts, coeffs=coeffs, poly_degree=len(coeffs) - 1)
        if opts.tile_n % _sm100.FRAGMENT:
            raise ValueError(f"tile_n must be a multiple of {_sm100.FRAGMENT} for fa4-sm100, got {opts.tile_n}")
        if opts.max_offset + opts.rescale_threshold >= config.LOG2_DTYPE_MAX[dt]:
            raise ValueError(f"max_offset + rescale_threshold must stay below log2(max {dt}) = "
                             f"{config.LOG2_DTYPE_MAX[dt]:.3f} (FA4 asserts this), got "
                             f"{opts.max_offset} + {opts.rescale_threshold}")
    return opts


def _descale(x, name, batch, hk):
    a = _plain(x, name)
    if a is None:
        return np.ones((batch, hk), np.float32)
    if a.shape != (batch, hk):
        raise ValueError(f"{name} must have shape (batch, heads_kv) = {(batch, hk)}, got {a.shape}")
    return a.astype(np.float32)


def _num_splits_auto(*, batch, hk, h_per_kv, pack_gqa, sq, sk, tile_m, tile_n, window):
    """``num_splits_heuristic`` of ``_get_fwd_config`` for num_splits < 1 (148 SMs, at most 128 splits)."""
    rows = sq * (h_per_kv if pack_gqa else 1)
    q_stage = 2 if rows > 128 else 1
    m_blocks = -(-rows // (q_stage * tile_m))
    total = batch * hk * (1 if pack_gqa else h_per_kv) * m_blocks
    loaded = sk
    if window.local:
        wr = sk if window.right is None else window.right
        wl = sk if window.left is None else window.left
        loaded = max(0, min(sk, wr + wl + 1 + tile_m))
    n_blocks = -(-loaded // tile_n)
    if n_blocks <= 4 or total == 0:
        return 1
    return max(1, min(config.NUM_SMS_SM100 // total, 128, n_blocks))


# ---------------------------------------------------------------------------------------------- argument checks
@dataclass
class ForwardSetup:
    """What :func:`prepare_forward` makes of ``forward``'s arguments: the sequences, the resolved options."""
    seqs: list               # _Seq per batch entry or varlen segment (slices of the caller's arrays/tensors)
    batch: int
    max_seqlen_q: int
    max_seqlen_k: int
    heads: int
    heads_kv: int
    head_dim: int
    head_dim_v: int
    dtype: str               # FA4's input dtype name ("bfloat16", ...)
    window: _masking.Window
    softcap: float
    sink: object             # float32 (heads,) or None
    q_descale: np.ndarray    # float32 (batch, heads_kv), ones unless fp8 descales are given
    k_descale: np.ndarray
    v_descale: np.ndarray
    num_splits: int
    varlen_q: bool
    opts: object             # config.Sm90Options / Sm100Options after overrides
    softmax_scale: float

    @property
    def fp8(self) -> bool:
        return self.dtype.startswith("float8")


def _is_float_dtype(dt) -> bool:
    """numpy floats and ml_dtypes' (bfloat16, fp8), whose numpy kind is 'V'."""
    try:
        ml_dtypes.finfo(dt)
    except ValueError:
        return False
    return True


def check_softcap(softcap) -> float:
    """``softcap`` as a float: finite and >= 0 (0 or None: no soft cap); ValueError naming it otherwise. FA4's
    score_mod is ``softcap * tanh(s / softcap)``, which a negative cap would flip and an infinite one void."""
    try:
        softcap = 0.0 if softcap is None else float(softcap)
    except (TypeError, ValueError):
        raise ValueError(f"softcap must be a finite float >= 0 (0 disables it), got {softcap!r}") from None
    if not (softcap >= 0 and math.isfinite(softcap)):
        raise ValueError(f"softcap must be a finite float >= 0 (0 disables it), got {softcap}")
    return softcap


def check_learnable_sink(learnable_sink, *, heads: int):
    """``learnable_sink`` as float32 of shape (heads,), or None; ValueError naming it for another shape or a
    non-float dtype (FA4 takes one sink logit per query head, any float dtype, bfloat16 included)."""
    sink = _plain(learnable_sink, "learnable_sink")
    if sink is None:
        return None
    if sink.shape != (heads,) or not _is_float_dtype(sink.dtype):
        raise ValueError(f"learnable_sink must be a float array of shape (heads,) = ({heads},), got shape "
                         f"{sink.shape} dtype {sink.dtype}")
    return sink.astype(np.float32)


def prepare_forward(qa, ka, va, *, softmax_scale=None, causal=False, kernel="fa4-sm90", softcap=0.0,
                    window_size=(None, None), learnable_sink=None, pack_gqa=None, cu_seqlens_q=None,
                    cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None, num_splits=1, q_descale=None,
                    k_descale=None, v_descale=None, page_table=None, nonfinite="propagate",
                    options=None) -> ForwardSetup:
    """Check :func:`forward`'s arguments and resolve FA4's options (the one copy of these checks, shared by
    ``forward`` and ``forward_torch``). ``qa``, ``ka``, ``va``: numpy arrays (ml_dtypes) or torch tensors in
    FA4's layouts; only their shapes and dtypes are read (and their values for ``nonfinite="raise"``);
    the sequences are slices of them. ``options``: the ``**options`` dict. Raises ValueError naming the bad
    argument."""
    options = {} if options is None else options
    if kernel not in config.KERNELS:
        raise ValueError(f"kernel must be one of {config.KERNELS}, got {kernel!r}")
    if nonfinite not in NONFINITE:
        raise ValueError(f"nonfinite must be one of {NONFINITE}, got {nonfinite!r}")
    dt = _validate_dtypes(qa, ka, va, kernel)
    if softmax_scale is not None:
        try:
            softmax_scale = float(softmax_scale)
        except (TypeError, ValueError):
            raise ValueError(f"softmax_scale must be a float, got {softmax_scale!r}") from None
        if math.isnan(softmax_scale):
            raise ValueError("softmax_scale must not be NaN")
    softcap = check_softcap(softcap)
    window = _masking.resolve_window(bool(causal), window_size)
    seqs, batch, msq = _build_sequences(qa, ka, va, _plain(cu_seqlens_q, "cu_seqlens_q"),
                                        _plain(cu_seqlens_k, "cu_seqlens_k"), _plain(page_table, "page_table"),
                                        max_seqlen_q, max_seqlen_k)
    h, d = qa.shape[-2:]
    hk, dv = va.shape[-2], va.shape[-1]
    _check_head_dims(d, dv, kernel, dt)
    h_per_kv = h // hk
    if nonfinite == "raise":
        for name, a in (("q", qa), ("k", ka), ("v", va)):
            if not _all_finite(a):
                raise ValueError(f"{name} contains NaN or inf (nonfinite='raise'; the default 'propagate' gives "
                                 "the kernel's NaN/inf bits)")
    sink = check_learnable_sink(learnable_sink, heads=h)
    fp8 = dt.startswith("float8")
    if not fp8 and any(x is not None for x in (q_descale, k_descale, v_descale)):
        raise ValueError("q_descale/k_descale/v_descale are only supported for fp8 inputs (FA4 asserts this)")
    qd, kd, vd = (_descale(x, n, batch, hk) for x, n in ((q_descale, "q_descale"), (k_descale, "k_descale"),
                                                         (v_descale, "v_descale")))
    if isinstance(num_splits, bool) or not isinstance(num_splits, (int, np.integer)):
        raise ValueError(f"num_splits must be an int, got {num_splits!r}")
    num_splits = int(num_splits)
    if kernel == "fa4-sm90" and num_splits != 1:
        raise ValueError(f"num_splits must be 1 for fa4-sm90 (FA4: 'SplitKV not supported on SM 9.0'), "
                         f"got {num_splits}")
    if num_splits > MAX_SPLITS:
        raise ValueError(f"num_splits must be <= {MAX_SPLITS} (the combine kernel's limit), got {num_splits}")
    varlen_q = cu_seqlens_q is not None
    msk = max((s.k.shape[0] for s in seqs), default=0) if max_seqlen_k is None else int(max_seqlen_k)
    # the longest sequences themselves (max_seqlen_q/k may be declared larger): a window side wider than these
    # masks nothing and is refused
    _masking.check_window_range(window, seqlen_q=max((s.q.shape[0] for s in seqs), default=0),
                                seqlen_k=max((s.k.shape[0] for s in seqs), default=0))
    page_size = ka.shape[1] if page_table is not None else None
    if pack_gqa is not None and not isinstance(pack_gqa, (bool, np.bool_)):
        raise ValueError(f"pack_gqa must be None, True or False, got {pack_gqa!r}")
    opts = _resolve_options(kernel, dt, d, window.causal, msq, h_per_kv, options, batch=batch, heads=h,
                            local=window.local, dv=dv, pack_gqa=pack_gqa, varlen_q=varlen_q,
                            num_splits=num_splits if num_splits >= 1 else 1, page_size=page_size)
    if kernel == "fa4-sm100":
        if num_splits < 1:
            num_splits = _num_splits_auto(batch=batch, hk=hk, h_per_kv=h_per_kv, pack_gqa=opts.pack_gqa, sq=msq,
                                          sk=msk, tile_m=128, tile_n=opts.tile_n, window=window)
        if num_splits > 1 and d != dv:
            # _get_fwd_config: split-KV with head_dim != head_dim_v needs tile_n 64 and >= 64 KV blocks
            n_blocks64 = -(-msk // 64)
            if n_blocks64 >= 64:
                opts = config.replace(opts, tile_n=64)
            else:
                num_splits = 1
        if num_splits > 1 and opts.use_2cta_instrs and "use_2cta_instrs" not in options:
            opts = config.replace(opts, use_2cta_instrs=False)
        opts = config.replace(opts, num_splits=num_splits)
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else softmax_scale
    return ForwardSetup(seqs=seqs, batch=batch, max_seqlen_q=msq, max_seqlen_k=msk, heads=h, heads_kv=hk,
                        head_dim=d, head_dim_v=dv, dtype=dt, window=window, softcap=softcap, sink=sink,
                        q_descale=qd, k_descale=kd, v_descale=vd, num_splits=num_splits, varlen_q=varlen_q,
                        opts=opts, softmax_scale=scale)


# ---------------------------------------------------------------------------------------------- entry point
def forward(q, k, v, *, softmax_scale=None, causal=False, kernel="fa4-sm90", softcap=0.0,
            window_size=(None, None), learnable_sink=None, pack_gqa=None, cu_seqlens_q=None, cu_seqlens_k=None,
            max_seqlen_q=None, max_seqlen_k=None, num_splits=1, q_descale=None, k_descale=None, v_descale=None,
            page_table=None, nonfinite="propagate", **options) -> AttentionResult:
    """Emulate FA4's forward pass (``flash_attn.cute.flash_attn_func`` / ``flash_attn_varlen_func``).

    Parameters
    ----------
    q, k, v : arrays or torch tensors
        FA4's layouts: q (batch, seqlen_q, heads, head_dim), k/v (batch, seqlen_k, heads_kv, head_dim[_v]);
        with ``cu_seqlens_q`` q is (total_q, heads, head_dim), with ``cu_seqlens_k`` k/v are
        (total_k, heads_kv, ...), with ``page_table`` k/v are (num_pages, page_size, heads_kv, ...).
        bf16/fp16 (ml_dtypes for numpy), fp8 e4m3/e5m2 on fa4-sm100. heads % heads_kv == 0 (GQA/MQA).
    softmax_scale : float, optional
        Default 1/sqrt(head_dim); applied as Float32 (scale_log2 = RN(scale * log2 e)). Any finite value.
    causal : bool
        Bottom-right aligned (key j visible from query i iff j <= i + seqlen_k - seqlen_q).
    kernel : {"fa4-sm90", "fa4-sm100"}
        The Hopper path as the H200 runs it, or the Blackwell path from FA4's source (not run on a Blackwell
        GPU).
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
        None: FA4's default (:func:`fa4num.attention.config.default_pack_gqa`).
    cu_seqlens_q, cu_seqlens_k : int arrays (batch + 1,), optional
        Varlen prefix sums; ``max_seqlen_q``/``max_seqlen_k`` (optional) must cover the longest sequence.
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
    **options
        ``mode`` = "bitexact" (default) or "statistical" (fp32 GEMMs through torch; numpy
        exp2/rcp/log2); kernel knobs (``gemm`` in config.GEMM_MODELS, ``tile_m``, ``tile_n``, ``mufu_arch``;
        fa4-sm90 ``ffma_exponent``;
        fa4-sm100 ``rescale_threshold``, ``max_offset``, ``ex2_emu_freq``, ``ex2_emu_res``,
        ``ex2_emu_start_frg``, ``poly_degree``, ``coeffs``, ``use_2cta_instrs``, ``is_sm103``, ``fused_bias``).
        Each knob is checked where it enters (:func:`fa4num.attention.config.apply_overrides`): what FA4 refuses
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
    qa, device = _to_numpy(q, "q")
    ka, _ = _to_numpy(k, "k")
    va, _ = _to_numpy(v, "v")
    setup = prepare_forward(qa, ka, va, softmax_scale=softmax_scale, causal=causal, kernel=kernel, softcap=softcap,
                            window_size=window_size, learnable_sink=learnable_sink, pack_gqa=pack_gqa,
                            cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q,
                            max_seqlen_k=max_seqlen_k, num_splits=num_splits, q_descale=q_descale,
                            k_descale=k_descale, v_descale=v_descale, page_table=page_table, nonfinite=nonfinite,
                            options=options)
    seqs, h, hk, dv, dt = setup.seqs, setup.heads, setup.heads_kv, setup.head_dim_v, setup.dtype
    h_per_kv, window, softcap, sink, fp8 = h // hk, setup.window, setup.softcap, setup.sink, setup.fp8
    qd, kd, vd, num_splits, varlen_q, opts = setup.q_descale, setup.k_descale, setup.v_descale, \
        setup.num_splits, setup.varlen_q, setup.opts
    scale = setup.softmax_scale
    model, accum = config.GEMM_IMPL[opts.gemm]
    tanh_arch = opts.mufu_arch
    emu = None
    n_emu = 0
    if kernel == "fa4-sm100":
        emu = _sm100.emulated_columns(opts.tile_n, freq=opts.ex2_emu_freq, res=opts.ex2_emu_res,
                                      start_frg=opts.ex2_emu_start_frg)
        n_emu = int(emu.sum())
    out_dt = _NP_DTYPES["bfloat16"] if fp8 else _NP_DTYPES[dt]
    lead = qa.shape[:-2]
    out = np.zeros((*lead, h, dv), out_dt)
    lse_shape = (h, qa.shape[0]) if varlen_q else (qa.shape[0], h, qa.shape[1])
    lse = np.full(lse_shape, -np.inf, np.float32)
    names = ("kv_blocks", "rescale_events", "rescales_done", "exp2_emulated", "exp2_mufu", "p_saturated",
             "masked_by_window")
    st = {n: np.zeros(lse_shape, np.int32) for n in names}
    st["max_lag"] = np.zeros(lse_shape, np.float32)
    st["sink_share"] = np.zeros(lse_shape, np.float32)
    tanh_exact = not softcap or _scoremod.tanh_is_exact(tanh_arch)
    g = h_per_kv if opts.pack_gqa else 1
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
        for kvh in range(hk):
            qk_descale = np.float32(qd[seq.batch, kvh] * kd[seq.batch, kvh])
            ctx = _Ctx(kernel, opts, None, None, softcap, window, dt, model, accum, emu, tanh_arch)
            if softcap:
                ctx.sl2 = _scoremod.SCALE_LOG2_WITH_SCOREMOD
                ctx.softmax_scale = np.float32(np.float32(scale) * qk_descale)
            else:
                ctx.sl2 = np.float32(scale_log2_of(scale) * qk_descale)
                ctx.softmax_scale = np.float32(scale)
            heads = range(kvh * h_per_kv, (kvh + 1) * h_per_kv)
            kv = _KVBlocks(seq.k[:, kvh], seq.v[:, kvh], ctx)
            groups = [list(heads)] if g > 1 else [[hh] for hh in heads]
            for grp in groups:
                # rows of this tile sequence: packed row = query * g + head offset
                ng = len(grp)
                rows_q = np.repeat(np.arange(sq), ng)
                rows_h = np.tile(np.asarray(grp), sq)
                nrows = sq * ng
                o_all = np.zeros((nrows, dv), np.float32)
                l_all = np.full(nrows, -np.inf, np.float32)
                cnt_all = {n: np.zeros(nrows, np.int32) for n in ("rescale_events", "rescales_done",
                                                                   "p_saturated", "kv_blocks")}
                cnt_all["max_lag"] = np.zeros(nrows, np.float32)
                def run_mb(item):
                    # run to completion (below) before the loop variables it reads move on
                    mb, mb_end = item
                    rs = slice(mb * opts.tile_m, min(mb_end * opts.tile_m, nrows))
                    qr = seq.q[rows_q[rs], rows_h[rs]]
                    sink_rows = None if sink is None else sink[rows_h[rs]]
                    parts = []
                    for split in range(num_splits):
                        lo, hi = _masking.n_block_range(mb, tile_m=opts.tile_m, tile_n=opts.tile_n, seqlen_q=sq,
                                                        seqlen_k=sk, window=window, qhead_per_kvhead_packgqa=ng,
                                                        split_idx=split, num_splits=num_splits)
                        parts.append(_run_mblock(qr, kv, rows_q[rs], sq=sq, sk=sk, n_lo=lo, n_hi=hi, ctx=ctx,
                                                 sink_rows=sink_rows if split == 0 else None,
                                                 v_descale=vd[seq.batch, kvh]))
                    if num_splits == 1:
                        return (rs, *parts[0])
                    o_mb, l_mb = combine_splits(np.stack([p[0] for p in parts]), np.stack([p[1] for p in parts]),
                                                arch=opts.mufu_arch)
                    cnt = {n: sum(p[2][n] for p in parts) for n in parts[0][2] if n != "max_lag"}
                    cnt["max_lag"] = np.max([p[2]["max_lag"] for p in parts], axis=0)
                    return rs, o_mb, l_mb, cnt

                nmb = -(-nrows // opts.tile_m)
                items = _merge_blocks(nmb, lambda mb: tuple(
                    _masking.n_block_range(mb, tile_m=opts.tile_m, tile_n=opts.tile_n, seqlen_q=sq, seqlen_k=sk,
                                           window=window, qhead_per_kvhead_packgqa=ng, split_idx=split,
                                           num_splits=num_splits) for split in range(num_splits)),
                    # SM100's warp ballot groups 32 rows from each tile's first row
                    max_blocks=_MERGE_ROWS // opts.tile_m if opts.tile_m % 32 == 0 else 1)
                done = _map_runs(run_mb, items, torch_one_thread=model == "blas")
                for rs, o_mb, l_mb, cnt in done:
                    o_all[rs], l_all[rs] = o_mb, l_mb
                    for n, val in cnt.items():
                        cnt_all[n][rs] = val
                for j, hh in enumerate(grp):
                    sel = rows_h == hh
                    o = o_all[sel]
                    oc = o.astype(out_dt)
                    # cvt.rn.{bf16,f16}.f32 turns every NaN into the canonical 0x7FFF
                    oc.view(np.uint16)[np.isnan(o)] = 0x7FFF
                    out[seq.out_index + (hh,)] = oc
                    li = seq.lse_index(hh)
                    lse[li] = l_all[sel]
                    for n, val in cnt_all.items():
                        st[n][li] = val[sel]
                    st["exp2_emulated"][li] = cnt_all["kv_blocks"][sel] * n_emu
                    st["exp2_mufu"][li] = cnt_all["kv_blocks"][sel] * (opts.tile_n - n_emu)
    if sink is not None:
        sink_b = sink[:, None] if varlen_q else sink[None, :, None]
        with np.errstate(invalid="ignore", over="ignore"):
            share = np.exp(sink_b.astype(np.float64) - lse.astype(np.float64))
        st["sink_share"] = np.where(np.isfinite(share), share, 0).astype(np.float32)
    stats = AttentionStats(**st, gemm=opts.gemm, tanh_exact=tanh_exact)
    return _wrap(out, lse, stats, kernel, opts, scale, device, num_splits)


def _wrap(out, lse, stats, kernel, opts, scale, device, num_splits=1):
    if device is None:
        return AttentionResult(out, lse, stats, kernel, opts, scale, num_splits)
    import torch
    ot = torch.from_numpy(out.view(np.int16)).view(torch.bfloat16 if out.dtype == _NP_DTYPES["bfloat16"]
                                                  else torch.float16).to(device)
    return AttentionResult(ot, torch.from_numpy(lse).to(device), stats, kernel, opts, scale, num_splits)
