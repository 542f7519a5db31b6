"""The GPU twin: :func:`fa4num.attention.forward`'s exact bits (out, LSE, counters), computed on a GPU.

``twin.forward(q, k, v, **fa4_args)`` (or ``problem=plan(...)``) takes the same :class:`~fa4num.attention.Problem`
as the CPU emulator, which stays the specification: one Triton program per FA4 M block runs the emulator's
steps in FA4's order (:mod:`fa4num.attention._twin_kernel` says how each step is kept exact), both kernels
(``fa4-sm90``, and ``fa4-sm100`` -- the Blackwell arithmetic, run on Hopper's instructions: never run on a
Blackwell GPU). The M blocks' KV ranges and visiting order come from the emulator's schedule
(:func:`fa4num.attention.schedule.flex_visits`), the software-exp2 columns from the kernel object, the
polynomial from the resolved options. Memory: the inputs, the outputs and one P tile per program (split-KV:
one float32 O per split; paged KV: each sequence's keys gathered, O(N * D)).

What the twin covers: bf16/fp16, every SM100 knob (``rescale_threshold``, ``max_offset``, ``ex2_emu_freq/res/
start_frg``, degree/coeffs, ``fused_bias``, ``is_sm103``, tiles), causal, sliding windows, softcap, learnable
sinks, GQA/MQA with and without pack_gqa, head dims up to 256, varlen (``cu_seqlens_q/k``), ``seqused_q/k``,
paged KV (``page_table``; each sequence runs as the emulator cuts it, :meth:`fa4num.attention.Problem.sequences`)
and split-KV on SM100 (``num_splits``, ``seqlen_k_per_split``: one launch per split, merged by the emulator's own
FA4 combine, :func:`fa4num.attention.forward.combine_splits`, on the host), and FlexAttention's built-in
score_mods / mask_mods and block sparsity on dense calls (:mod:`fa4num.attention._twin_flex`). What it refuses,
with a ValueError naming the argument: a score_mod / mask_mod other than the built-ins of
:mod:`fa4num.attention.flex` (Python cannot run in the Triton kernel), FlexAttention arguments together with
varlen, seqused, paged KV or split-KV, fp8 (FA4's SM100 fp8 path accumulates with F = 25 fraction bits, Hopper's
fp8 wgmma with 13: the twin would not give the emulator's bits), the dedicated hd256 kernel of older releases, the statistical mode (use ``fa4num.attention.forward_torch``), GEMM
or MUFU models other than the H200's (``gemm="wgmma"``, ``mufu_arch="sm90"``), and a knob outside
``IMPLEMENTED_KNOBS`` set to a value that is not FA4's (SM90's ``ffma_exponent=False``). Split-KV on
``fa4-sm90`` is refused by :func:`fa4num.attention.plan` itself, as FA4 refuses it.

On a machine without a GPU the same kernel runs in Triton's interpreter (``TRITON_INTERPRET=1`` set before Triton
is imported), each instruction evaluated by fa4num's models (:mod:`fa4num.attention._twin_interp`): slow, for tests on
tiny shapes.
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from fa4num.attention import _twin_flex
from fa4num.attention import masking as _masking
from fa4num.attention.config import GEMM_IMPL
from fa4num.attention.forward import AttentionResult, AttentionStats, cast_out, combine_splits, sink_shares
from fa4num.attention.problem import NP_DTYPES, given_or_plan, plain, to_numpy
from fa4num.attention.triton_backend import interpreted
from fa4num.attention.schedule import flex_visits
from fa4num.constants import LOG2_E_F32
from fa4num.ex2 import poly_coeffs
from fa4num.hw.mma import ACCUMULATORS
from fa4num.softmax import ballot, scale_log2_of
from fa4num.softmax.scoremod import SCALE_LOG2_WITH_SCOREMOD


_BALLOT_TILE = ballot.GRANULARITIES["tile"]    # 128 rows: the program height
_SKIPS = ("rescales_row", "rescales_warp", "rescales_tile", "events_row", "events_warp", "events_tile")
# the kernel knobs the twin runs; any other knob set to a value that is not FA4's is refused by name
# (fa4num.attention.kernels.Kernel.knob_refusal): SM90's ffma_exponent=False, for one, is not in the twin
IMPLEMENTED_KNOBS = frozenset({"tile_m", "tile_n", "gemm", "mufu_arch", "pack_gqa", "use_2cta_instrs", "is_sm103",
                               "fused_bias", "rescale_threshold", "max_offset", "ex2_emu_freq", "ex2_emu_res",
                               "ex2_emu_start_frg", "poly_degree", "coeffs"})

# AttentionStats fields in the twin's counter block: the kernel writes rows 0-9, the host's schedule 10-14
_COUNTER_ROWS = ("rescale_events", "rescales_done", "p_saturated", "max_lag", *_SKIPS, "kv_blocks",
                 "masked_by_window", "rescale_steps", "exp2_emulated", "exp2_mufu")
_SCHEDULES: dict = {}


def _schedule(dev, setup, *, sq, sk, group, bm):
    """The launch tables of one sequence shape, on ``dev``, cached (a study calls the twin many times on one
    shape): the program table (M block, first packed row of its 128-row group, rows [lo, hi)); per split, each
    M block's first KV block and count, from the emulator's own schedule
    (:func:`fa4num.attention.schedule.flex_visits`: ``split_ranges`` visited by ``visit_order``, ``n_hi - 1``
    first, then right to left -- consecutive blocks, so a first block and a count say it; an empty split of a
    split-KV call is count 0, no work); and per packed row, as (2, seqlen_q, group), the KV blocks it visits
    and its rescale steps, summed over the splits (a step is a block after its split's first)."""
    opts = setup.opts
    tm = opts.tile_m
    # a block-sparse call's flex_visits are its sparse lists (the kernel reads them from _twin_flex's table, and
    # the host overrides its per-row counts): never the cached tables of a dense call of the same shape
    sparse = setup.flex is not None and setup.flex.block_sparse is not None
    key = (str(dev), sq, sk, tm, opts.tile_n, setup.window, group, bm, setup.num_splits, setup.seqlen_k_per_split,
           setup.kernel.split_kv, sparse)
    hit = _SCHEDULES.get(key)
    if hit is not None:
        return hit
    nrows = sq * group
    nmb = -(-nrows // tm) if nrows else 0
    ranges = np.zeros((setup.num_splits, max(nmb, 1), 2), np.int32)
    for mb in range(nmb if sk else 0):
        for split, visits in enumerate(flex_visits(setup, mb, batch=0, head=0, seqlen_q=sq, seqlen_k=sk,
                                                   group=group)):
            if visits:
                ranges[split, mb] = visits[0][0], len(visits)
    counts = ranges[:, :, 1]
    rows_mb = np.arange(nrows) // tm
    per_row = np.stack([counts.sum(0)[rows_mb], np.maximum(counts - 1, 0).sum(0)[rows_mb]]).reshape(2, sq, group) \
        if sk else np.zeros((2, sq, group), np.int32)
    # one program per (M block, 128-row group of packed rows) they share: whole warps and tiles in each
    # (an M block of 32 or 64 rows is its own group: a program of its height)
    progs = [(mb, base, max(base, mb * tm), min(base + bm, (mb + 1) * tm, nrows))
             for mb in range(nmb) for base in range(mb * tm - mb * tm % bm, min((mb + 1) * tm, nrows), bm)]
    import torch
    hit = tuple(torch.from_numpy(np.ascontiguousarray(a, np.int32).reshape(shape)).to(dev) for a, shape in
                ((np.asarray(progs, np.int32).reshape(-1, 4), (-1,)), (ranges, ranges.shape),
                 (per_row, per_row.shape)))
    if len(_SCHEDULES) >= 64:
        _SCHEDULES.pop(next(iter(_SCHEDULES)))
    _SCHEDULES[key] = hit
    return hit


def refusal(problem) -> str | None:
    """Why the twin cannot give this problem's bits (a sentence naming the argument), or None when it can.

    Parameters
    ----------
    problem : fa4num.attention.Problem

    Returns
    -------
    str or None

    Examples
    --------
    >>> import ml_dtypes, numpy as np
    >>> from fa4num.attention import plan
    >>> q = np.ones((1, 64, 2, 64), ml_dtypes.bfloat16)
    >>> refusal(plan(q, q, q, kernel="fa4-sm100")) is None
    True
    >>> refusal(plan(q, q, q, kernel="fa4-sm100", num_splits=2)) is None
    True
    >>> refusal(plan(q, q, q, kernel="fa4-sm100", mode="statistical"))
    "mode='statistical': the twin is bit-exact; use fa4num.attention.forward_torch for the statistical path"
    """
    p = problem
    if p.flex_args():
        why = _twin_flex.refusal(p)     # the built-in mods run, any other callable is refused by name
        if why is not None:
            return why
        # the built-ins index aux tensors by batch and query/key position of a dense call; the twin runs varlen,
        # seqused and paged calls one sequence at a time, and split-KV one launch per split
        layout = [n for n, on in (("cu_seqlens_q/cu_seqlens_k", p.varlen),
                                  ("seqused_q/seqused_k", p.seqused_q is not None or p.seqused_k is not None),
                                  ("page_table", p.page_table is not None),
                                  (f"num_splits={p.num_splits}", p.num_splits != 1)) if on]
        if layout:
            return (f"{'/'.join(p.flex_args())} with {', '.join(layout)}: FlexAttention in the GPU twin takes dense "
                    "calls only (use fa4num.attention.forward)")
    if p.fp8:
        return (f"dtype {p.dtype}: FA4's SM100 fp8 path accumulates with F = 25 fraction bits and Hopper's fp8 "
                f"wgmma with 13, so the twin refuses fp8 (use fa4num.attention.forward)")
    if p.mode != "bitexact":
        return "mode='statistical': the twin is bit-exact; use fa4num.attention.forward_torch for the statistical path"
    if p.kernel.visit_ascending:
        return (f"fa4_release={p.release.name!r} with head dim 256: the dedicated hd256 kernel of that release is "
                "not in the GPU twin (use fa4num.attention.forward)")
    model, acc = GEMM_IMPL[p.opts.gemm]
    if model != "wgmma" or ACCUMULATORS[acc] != ACCUMULATORS["sm90"]:
        return (f"gemm={p.opts.gemm!r}: the twin's GEMMs run on the H200's tensor cores, so it takes the GEMM "
                f"models whose accumulator is Hopper's ('wgmma', and 'tcgen05' for 16-bit inputs)")
    if p.opts.mufu_arch != "sm90":
        return f"mufu_arch={p.opts.mufu_arch!r}: the twin's MUFU instructions are the H200's (mufu_arch='sm90')"
    if p.head_dim % 16 or p.head_dim_v % 16:
        return (f"head_dim={p.head_dim}, head_dim_v={p.head_dim_v}: the twin takes multiples of 16 (tl.dot's K "
                f"step)")
    return p.kernel.knob_refusal(p, IMPLEMENTED_KNOBS, who="the GPU twin")


def _pow2(n: int) -> int:
    return 1 << max(4, (int(n) - 1).bit_length())


def forward(q=None, k=None, v=None, *, problem=None, stats: bool = True, num_warps: int | None = None,
            num_stages: int = 2, **fa4_args) -> AttentionResult:
    """FA4's forward on the GPU, with :func:`fa4num.attention.forward`'s exact bits.

    Parameters
    ----------
    q, k, v : torch.Tensor
        FA4's layouts (dense (batch, seqlen, heads, head_dim); varlen (total, heads, head_dim) with
        ``cu_seqlens_q/k``; paged k/v (num_pages, page_size, heads_kv, head_dim) with ``page_table``), bf16 or
        fp16, on a CUDA device (or on the CPU under Triton's interpreter).
    problem : fa4num.attention.Problem, optional
        ``plan(q, k, v, **fa4_args)`` instead of q, k, v and the arguments.
    stats : bool, optional
        Compute the per-row counters (default). ``False`` leaves them out of the kernel and returns
        ``stats=None``: out and LSE have the same bits, sooner.
    num_warps, num_stages : int, optional
        Triton launch width (default 8; 16 with head dims above 128) and software pipelining depth; they
        change the speed, never the bits.
    **fa4_args
        FA4's arguments and the kernel knobs, as :func:`fa4num.attention.forward` takes them.

    Returns
    -------
    AttentionResult
        ``out`` (torch, q's layout, dtype and device), ``lse`` (torch float32 (batch, heads, seqlen_q), (heads,
        total_q) for varlen q) and ``stats`` (:class:`fa4num.attention.AttentionStats`, numpy, in the LSE's
        layout; None with ``stats=False``): the emulator's bits.

    Raises
    ------
    ValueError
        For what the twin does not cover (:func:`refusal` says why, naming the argument).

    Examples
    --------
    >>> import torch
    >>> q = torch.randn(1, 256, 2, 64).to(torch.bfloat16)
    >>> res = forward(q.cuda(), q.cuda(), q.cuda(), causal=True, kernel="fa4-sm100")  # doctest: +SKIP
    >>> res.out.shape, res.stats.rescales_done.shape  # doctest: +SKIP
    (torch.Size([1, 256, 2, 64]), (1, 2, 256))
    """
    import torch
    setup = given_or_plan(problem, q, k, v, fa4_args, who="fa4num.attention.twin.forward")
    why = refusal(setup)
    if why is not None:
        raise ValueError(why)
    q, k, v = setup.q, setup.k, setup.v
    if not all(isinstance(x, torch.Tensor) for x in (q, k, v)):
        raise TypeError("q, k, v must be torch tensors for the GPU twin")
    interp = interpreted()
    if not interp and q.device.type != "cuda":
        raise ValueError(f"q, k, v must be on a CUDA device for the GPU twin (got {q.device}); on a machine "
                         f"without a GPU set TRITON_INTERPRET=1 before importing Triton")
    kern, opts, dt, h = setup.kernel, setup.opts, setup.dtype, setup.heads
    launch = dict(stats=stats, num_warps=num_warps, num_stages=num_stages)
    if not (setup.varlen or setup.page_table is not None or setup.seqused_q is not None
            or setup.seqused_k is not None):
        # FA4's dense layout: every batch entry has the same lengths, one launch set for all
        out, lse, cnt = _run(setup, q, k, v, **launch)
    else:
        # the sequences as the problem cuts them (the emulator's loop): varlen segments, batch entries cut to
        # seqused_q/k, paged keys gathered page by page (O(N * D) memory); each runs as a batch of one and its
        # rows go back in the emulator's layouts (rows past seqused: out 0, LSE -inf, counters 0)
        lse_shape = (h, q.shape[0]) if setup.varlen_q else (q.shape[0], h, q.shape[1])
        out = torch.zeros((*q.shape[:-2], h, setup.head_dim_v), dtype=torch.float32 if interp else q.dtype,
                          device=q.device)
        lse = torch.full(lse_shape, -math.inf, dtype=torch.float32, device=q.device)
        cnt = torch.zeros((len(_COUNTER_ROWS), *lse_shape) if stats else (len(_COUNTER_ROWS), 1),
                          dtype=torch.int32, device=q.device)
        for seq in setup.sequences(q, k, v):
            if seq.q.shape[0] == 0:
                continue
            o_s, l_s, c_s = _run(setup, seq.q[None], seq.k[None], seq.v[None], **launch)
            out[seq.out_index] = o_s[0]
            idx = seq.lse_index(slice(None))     # all heads at once: (batch, :, rows) or (:, rows)
            lse[idx] = l_s[0]
            if stats:
                cnt[(slice(None), *idx)] = c_s[:, 0]
    out_dt = NP_DTYPES[dt]
    if interp:      # the interpreter's float32 output, cast as cvt.rn does on the GPU
        out = torch.from_numpy(cast_out(out.numpy(), out_dt).view(np.int16)).view(getattr(torch, dt))
    if not stats:
        return AttentionResult(out, lse, None, kern.name, opts, setup.softmax_scale, setup.num_splits)
    host = dict(zip(_COUNTER_ROWS, cnt.cpu().numpy()))
    host["max_lag"] = host["max_lag"].view(np.float32)
    share = np.zeros(lse.shape, np.float32) if setup.sink is None else \
        sink_shares(setup.sink, lse.cpu().numpy(), varlen_q=setup.varlen_q)
    st = AttentionStats(sink_share=share, gemm=opts.gemm, tanh_exact=True, **host)
    return AttentionResult(out, lse, st, kern.name, opts, setup.softmax_scale, setup.num_splits)


def _run(setup, q, k, v, *, stats, num_warps, num_stages):
    """The twin on dense q (batch, seqlen_q, heads, d), k, v (batch, seqlen_k, heads_kv, d/dv) of ``setup``'s
    problem (all of it, or one of its sequences): (out (batch, seqlen_q, heads, dv), float32 in the interpreter,
    else q's dtype; LSE (batch, heads, seqlen_q); counters (rows ``_COUNTER_ROWS``, batch, heads, seqlen_q)
    int32), on q's device.

    Split-KV (SM100) is one launch per split over the split's KV blocks (the schedule's table), the sink in
    split 0 only, each writing its normalised float32 O (not cast) and LSE; FA4's combine merges them with the
    emulator's own :func:`fa4num.attention.forward.combine_splits` (``flash_fwd_combine.py``), on the host in
    numpy -- the specification, so the same bits by construction -- and the counters are summed over the splits,
    ``max_lag`` the largest (as the emulator merges them)."""
    import torch
    import triton.language as tl
    from . import _twin_kernel
    interp = interpreted()
    kern, opts, dt = setup.kernel, setup.opts, setup.dtype
    b, sq, h, d = q.shape
    sk, hk, dvh = k.shape[1], k.shape[2], v.shape[3]
    rep = h // hk
    group = rep if (opts.pack_gqa and rep > 1) else 1
    nrows = sq * group
    tm, tn = opts.tile_m, opts.tile_n
    w = setup.window
    dev = q.device
    ns = setup.num_splits
    shape_lse = (b, h, sq)
    emu = kern.emulated_columns(opts)
    n_emu = 0 if emu is None else int(emu.sum())
    bn = _pow2(tn)
    bm = tm if tm in (32, 64) else _BALLOT_TILE
    nw = num_warps or (bm // 8 if max(d, dvh) > 128 else max(4, bm // 16))
    progs_t, ranges_t, per_row_t = _schedule(dev, setup, sq=sq, sk=sk, group=group, bm=bm)
    emu_mask = np.zeros(bn, np.int32)
    coef = np.zeros(8, np.float32)
    deg = 1
    if kern.lazy_rescale:
        emu_mask[:tn] = emu
        cs = poly_coeffs(opts.poly_degree, coeffs=opts.coeffs)
        deg = len(cs) - 1
        coef[:len(cs)] = cs
    softcap, score_mod, flex_args, flex_ids, sparse_kv = _twin_flex.kernel_args(setup, dev)
    sl2 = SCALE_LOG2_WITH_SCOREMOD if softcap or score_mod else scale_log2_of(setup.softmax_scale)
    sl2 = np.float32(sl2)
    sink = setup.sink
    sink_t = torch.zeros(h, dtype=torch.float32, device=dev)
    if sink is not None:
        sink_t = torch.from_numpy(np.asarray(sink, np.float32)).to(dev)
    max_offset = float(opts.max_offset) if kern.lazy_rescale else 0.0
    left, right = _masking.window_offsets(w, seqlen_q=sq, seqlen_k=sk)
    qq, kk, vv = (x.float() if interp else x.contiguous() for x in (q, k, v))
    # per split: O (normalised float32 when split, for the combine), LSE and the per-row counters in one int32
    # block (one copy to the host): rows _COUNTER_ROWS, max_lag as float32 bits
    out = torch.zeros((ns, b, sq, h, dvh), dtype=torch.float32 if interp or ns > 1 else q.dtype, device=dev)
    lse = torch.full((ns, *shape_lse), -math.inf, dtype=torch.float32, device=dev)
    cnt = torch.zeros((ns, len(_COUNTER_ROWS), *shape_lse) if stats else (ns, len(_COUNTER_ROWS), 1),
                      dtype=torch.int32, device=dev)
    if sq and sk:
        grid = (progs_t.shape[0] // 4, b * (h // group))
        # the row sums straight from P's registers need each row's columns in its own threads: wgmma puts a
        # warp on 16 rows, so BLOCK_M >= 16 * num_warps keeps N whole per warp; else (and for tiles wider than
        # 128 keys, whose regrouped P does not fit the H200's shared memory) the scratch tile
        in_regs = bm >= 16 * nw and bn <= 128
        scr = torch.empty(1 if in_regs else grid[0] * grid[1] * bn * bm, dtype=torch.float32, device=dev)
        meta = dict(TILE_M=tm, TILE_N=tn, BLOCK_M=bm, BLOCK_N=bn, HEAD_D=_pow2(d), HEAD_DV=_pow2(dvh),
                    SM100=kern.lazy_rescale, HAS_EMU=n_emu > 0, POLY_DEG=deg,
                    P_DTYPE=tl.bfloat16 if dt == "bfloat16" else tl.float16, UPCAST=interp,
                    num_warps=nw, STATS=bool(stats), RS_REG=in_regs, num_stages=num_stages)
        for split in range(ns):
            o_s, c_s = out[split], cnt[split]
            args = (qq, kk, vv, o_s, lse[split], c_s[0], c_s[1], c_s[3].view(torch.float32), c_s[2], c_s[4:10],
                    progs_t, ranges_t[split], torch.from_numpy(emu_mask).to(dev), torch.from_numpy(coef).to(dev),
                    sink_t, scr, sq, sk, h, rep, group, nrows, left, right,
                    int(not getattr(opts, "is_sm103", False)), int(bool(getattr(opts, "fused_bias", True))),
                    int(sink is not None and split == 0),
                    qq.stride(0), qq.stride(1), qq.stride(2), kk.stride(0), kk.stride(1), kk.stride(2),
                    vv.stride(0), vv.stride(1), vv.stride(2), o_s.stride(0), o_s.stride(1), o_s.stride(2),
                    float(sl2), float(np.float32(setup.softmax_scale)), softcap,
                    float(opts.rescale_threshold) if kern.lazy_rescale else 0.0, max_offset,
                    float(np.float32(LOG2_E_F32 / sl2)), float(np.float32(2.0 ** max_offset)),
                    float(ml_dtypes.finfo(NP_DTYPES[dt]).max), d, dvh)
            if interp:
                from ._twin_interp import cpu_instructions
                with cpu_instructions(dtype=dt, accumulator=GEMM_IMPL[opts.gemm][1]):
                    _twin_kernel.twin_fwd[grid](*args, **flex_args, **flex_ids, **meta)
            else:
                _twin_kernel.twin_fwd[grid](*args, **flex_args, **flex_ids, **meta)
    elif sq and sink is not None:
        # seqlen_k == 0 (interface.py): out = 0, LSE = the sink
        lse[0].copy_(sink_t.view(1, h, 1).expand(b, h, sq))
    if ns > 1 and sq and sk:
        o_c, l_c = combine_splits(out.permute(0, 1, 3, 2, 4).reshape(ns, -1, dvh).cpu().numpy(),
                                  lse.reshape(ns, -1).cpu().numpy(), arch=opts.mufu_arch)
        o_c = np.ascontiguousarray(o_c.reshape(b, h, sq, dvh).transpose(0, 2, 1, 3))
        out = torch.from_numpy(o_c if interp else cast_out(o_c, NP_DTYPES[dt]).view(np.int16)).to(dev)
        out = out if interp else out.view(getattr(torch, dt))
        lse = torch.from_numpy(l_c.reshape(shape_lse)).to(dev)
        c = cnt.sum(0, dtype=torch.int32)
        if stats:
            c[3] = cnt[:, 3].view(torch.float32).amax(0).view(torch.int32)
        cnt = c
    else:
        out, lse, cnt = out[0], lse[0], cnt[0]
    if stats:
        # the counters the schedule fixes, on the device too: KV blocks and rescale steps per packed row (query *
        # group + offset), keys the mask hides per query
        if sq and sk:
            cnt[10] = per_row_t[0].t().repeat(h // group, 1)[None]
            cnt[12] = per_row_t[1].t().repeat(h // group, 1)[None]
        if sparse_kv is not None:       # a block-sparse call visits its own lists (_twin_flex), one split
            cnt[10] = torch.from_numpy(sparse_kv).to(dev)
            cnt[12] = (cnt[10] - 1).clamp_(min=0)
        nvis = _masking.visible_count(np.arange(sq), seqlen_q=sq, seqlen_k=sk, window=w)
        cnt[11] = torch.from_numpy((sk - nvis).astype(np.int32)).to(dev)
        cnt[13] = cnt[10] * n_emu
        cnt[14] = cnt[10] * (tn - n_emu)
    return out, lse, cnt


DEVICES = ("cpu", "cuda")


def _to_torch(x, dev):
    import torch
    if x is None or type(x).__module__.startswith("torch"):
        return x if x is None else x.to(dev)
    x = np.asarray(x)
    if x.dtype.itemsize == 2 and x.dtype != np.float16:     # bf16 (ml_dtypes): torch reads the bits
        return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16).to(dev)
    return torch.from_numpy(x).to(dev)


def forward_on(problem, *, device: str = "cpu") -> AttentionResult:
    """A planned forward run where ``device`` says, with numpy results (out in the problem's dtype, LSE
    float32), so that callers compare them the same way whatever ran them.

    ``"cpu"``: :func:`fa4num.attention.forward`, the specification. ``"cuda"``: in bit-exact mode the GPU twin
    (:func:`forward`, the same bits; what it refuses it refuses, naming the argument), in statistical mode
    :func:`fa4num.attention.forward_torch` on the GPU (today's faster path).

    Parameters
    ----------
    problem : fa4num.attention.Problem
        From :func:`fa4num.attention.plan` (numpy or torch inputs).
    device : {"cpu", "cuda"}

    Returns
    -------
    AttentionResult
        out and LSE as numpy arrays, the stats as the path computes them.

    Raises
    ------
    ValueError
        For a device other than "cpu"/"cuda", or a problem the twin refuses.

    Examples
    --------
    >>> import ml_dtypes, numpy as np
    >>> from fa4num.attention import plan
    >>> q = (np.arange(64 * 2 * 32) % 7 - 3.0).reshape(1, 64, 2, 32).astype(ml_dtypes.bfloat16)
    >>> res = forward_on(plan(q, q, q, causal=True), device="cpu")
    >>> res.out.dtype, res.lse.shape
    (dtype(bfloat16), (1, 2, 64))
    """
    from .forward import forward as cpu_forward
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got {device!r}")
    if device == "cpu":
        return cpu_forward(problem=problem)
    import dataclasses
    dev = "cpu" if interpreted() else "cuda"     # under TRITON_INTERPRET=1 the interpreter stands in for the GPU
    moved = dataclasses.replace(problem, q=_to_torch(problem.q, dev), k=_to_torch(problem.k, dev),
                                v=_to_torch(problem.v, dev))
    if problem.mode == "bitexact":
        res = forward(problem=moved)
    else:
        from .torch_backend import forward_torch
        res = forward_torch(problem=moved)
    # the problem module's converters: out in its FA4 dtype (the bits), the LSE as float32
    return dataclasses.replace(res, out=to_numpy(res.out, "out")[0], lse=plain(res.lse))


__all__ = ["forward", "forward_on", "refusal", "DEVICES"]
