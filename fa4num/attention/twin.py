"""The GPU twin: :func:`fa4num.attention.forward`'s exact bits (out, LSE, counters), computed on a GPU.

``twin.forward(q, k, v, **fa4_args)`` (or ``problem=plan(...)``) takes the same :class:`~fa4num.attention.Problem`
as the CPU emulator, which stays the specification: one Triton program per FA4 M block runs the emulator's
steps in FA4's order (:mod:`fa4num.attention._twin_kernel` says how each step is kept exact), both kernels
(``fa4-sm90``, and ``fa4-sm100`` -- the Blackwell arithmetic, run on Hopper's instructions: never run on a
Blackwell GPU). The M blocks' KV ranges come from the rule the emulator uses
(:func:`fa4num.attention.masking.n_block_range`), the software-exp2 columns from the kernel object, the
polynomial from the resolved options. Memory: the inputs, the outputs and one P tile per program.

What the twin covers: bf16/fp16, every SM100 knob (``rescale_threshold``, ``max_offset``, ``ex2_emu_freq/res/
start_frg``, degree/coeffs, ``fused_bias``, ``is_sm103``, tiles), causal, sliding windows, softcap, learnable
sinks, GQA/MQA with and without pack_gqa, head dims up to 256, FlexAttention's built-in score_mods / mask_mods
and block sparsity (:mod:`fa4num.attention._twin_flex`). What it refuses, with a ValueError naming the
argument: a score_mod / mask_mod other than the built-ins of :mod:`fa4num.attention.flex` (Python cannot run in
the Triton kernel), fp8 (FA4's SM100 fp8 path accumulates with F = 25 fraction bits, Hopper's fp8 wgmma with 13: the twin
would not give the emulator's bits), varlen, paged KV and split-KV (not yet in the twin: use the CPU emulator),
the statistical mode (use ``fa4num.attention.forward_torch``), GEMM or MUFU models other than the H200's
(``gemm="wgmma"``, ``mufu_arch="sm90"``), and a knob outside ``IMPLEMENTED_KNOBS`` set to a value that is not
FA4's (SM90's ``ffma_exponent=False``).

On a machine without a GPU the same kernel runs in Triton's interpreter (``TRITON_INTERPRET=1`` set before Triton
is imported), each instruction evaluated by fa4num's models (:mod:`fa4num.attention._twin_interp`): slow, for tests on
tiny shapes.
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import ml_dtypes
import numpy as np

from fa4num.attention import _twin_flex
from fa4num.attention import masking as _masking
from fa4num.attention.config import GEMM_IMPL
from fa4num.attention.forward import AttentionResult, AttentionStats, cast_out, sink_shares
from fa4num.attention.problem import NP_DTYPES, given_or_plan, plain, to_numpy
from fa4num.attention.triton_backend import interpreted
from fa4num.attention.schedule import split_ranges, visit_order
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


def _schedule(dev, *, sq, sk, tm, tn, window, group, bm):
    """The launch tables, on ``dev``, cached by shape (a study calls the twin many times on one shape):
    the program table (M block, first packed row of its 128-row group, rows [lo, hi)), each M block's first
    KV block and count (visited right to left, from the emulator's ``split_ranges`` / ``visit_order``) and
    the KV blocks of each packed row as (seqlen_q, group)."""
    key = (str(dev), sq, sk, tm, tn, window, group, bm)
    hit = _SCHEDULES.get(key)
    if hit is not None:
        return hit
    nrows = sq * group
    nmb = -(-nrows // tm) if nrows else 0
    opts = SimpleNamespace(tile_m=tm, tile_n=tn)
    ranges = np.zeros((max(nmb, 1), 2), np.int32)
    for mb in range(nmb if sk else 0):
        (lo, hi), = split_ranges(mb, opts=opts, seqlen_q=sq, seqlen_k=sk, window=window, group=group,
                                 num_splits=1)
        order = visit_order(lo, hi, split_kv=False)     # n_hi - 1 first, then right to left: consecutive
        ranges[mb] = order[0], len(order)
    per_row = ranges[np.arange(nrows) // tm, 1].reshape(sq, group) if sk else np.zeros((sq, group), np.int32)
    # one program per (M block, 128-row group of packed rows) they share: whole warps and tiles in each
    # (an M block of 32 or 64 rows is its own group: a program of its height)
    progs = [(mb, base, max(base, mb * tm), min(base + bm, (mb + 1) * tm, nrows))
             for mb in range(nmb) for base in range(mb * tm - mb * tm % bm, min((mb + 1) * tm, nrows), bm)]
    import torch
    hit = tuple(torch.from_numpy(np.ascontiguousarray(a, np.int32).reshape(shape)).to(dev) for a, shape in
                ((np.asarray(progs, np.int32).reshape(-1, 4), (-1,)), (ranges, (-1,)), (per_row, per_row.shape)))
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
    >>> refusal(plan(q, q, q, kernel="fa4-sm100", num_splits=2))
    'num_splits=2: split-KV is not in the GPU twin yet (use fa4num.attention.forward)'
    """
    p = problem
    why = _twin_flex.refusal(p)     # FlexAttention: the built-in mods run, any other callable is refused by name
    if why is not None:
        return why
    if p.fp8:
        return (f"dtype {p.dtype}: FA4's SM100 fp8 path accumulates with F = 25 fraction bits and Hopper's fp8 "
                f"wgmma with 13, so the twin refuses fp8 (use fa4num.attention.forward)")
    if p.mode != "bitexact":
        return "mode='statistical': the twin is bit-exact; use fa4num.attention.forward_torch for the statistical path"
    if p.varlen:
        return "cu_seqlens_q/cu_seqlens_k: varlen is not in the GPU twin yet (use fa4num.attention.forward)"
    if p.seqused_q is not None or p.seqused_k is not None:
        return "seqused_q/seqused_k: not in the GPU twin yet (use fa4num.attention.forward)"
    if p.page_table is not None:
        return "page_table: paged KV is not in the GPU twin yet (use fa4num.attention.forward)"
    if p.num_splits != 1:
        return f"num_splits={p.num_splits}: split-KV is not in the GPU twin yet (use fa4num.attention.forward)"
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
        FA4's layouts (batch, seqlen, heads, head_dim), bf16 or fp16, on a CUDA device (or on the CPU under
        Triton's interpreter).
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
        ``out`` (torch, q's dtype and device), ``lse`` (torch float32 (batch, heads, seqlen_q)) and ``stats``
        (:class:`fa4num.attention.AttentionStats`, numpy; None with ``stats=False``): the emulator's bits.

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
    import triton.language as tl
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
    from . import _twin_kernel
    kern, opts, dt = setup.kernel, setup.opts, setup.dtype
    b, sq, h, d = q.shape
    sk, hk, dvh = k.shape[1], k.shape[2], v.shape[3]
    rep = h // hk
    group = rep if (opts.pack_gqa and rep > 1) else 1
    nrows = sq * group
    tm, tn = opts.tile_m, opts.tile_n
    w = setup.window
    dev = q.device
    out_dt = NP_DTYPES[dt]
    shape_lse = (b, h, sq)
    emu = kern.emulated_columns(opts)
    n_emu = 0 if emu is None else int(emu.sum())
    bn = _pow2(tn)
    bm = tm if tm in (32, 64) else _BALLOT_TILE
    nw = num_warps or (bm // 8 if max(d, dvh) > 128 else max(4, bm // 16))
    progs_t, ranges_t, per_row_t = _schedule(dev, sq=sq, sk=sk, tm=tm, tn=tn, window=w, group=group, bm=bm)
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
    out = torch.zeros((b, sq, h, dvh), dtype=torch.float32 if interp else q.dtype, device=dev)
    lse = torch.full(shape_lse, -math.inf, dtype=torch.float32, device=dev)
    # the per-row counters in one int32 block (one copy to the host): rows _COUNTER_ROWS, max_lag as float32 bits
    cnt = torch.zeros((len(_COUNTER_ROWS), *shape_lse) if stats else (len(_COUNTER_ROWS), 1), dtype=torch.int32,
                      device=dev)
    if sq and sk:
        grid = (progs_t.shape[0] // 4, b * (h // group))
        # the row sums straight from P's registers need each row's columns in its own threads: wgmma puts a
        # warp on 16 rows, so BLOCK_M >= 16 * num_warps keeps N whole per warp; else (and for tiles wider than
        # 128 keys, whose regrouped P does not fit the H200's shared memory) the scratch tile
        in_regs = bm >= 16 * nw and bn <= 128
        scr = torch.empty(1 if in_regs else grid[0] * grid[1] * bn * bm, dtype=torch.float32, device=dev)
        args = (qq, kk, vv, out, lse, cnt[0], cnt[1], cnt[3].view(torch.float32), cnt[2], cnt[4:10],
                progs_t, ranges_t, torch.from_numpy(emu_mask).to(dev), torch.from_numpy(coef).to(dev), sink_t, scr,
                sq, sk, h, rep, group, nrows, left, right, int(not getattr(opts, "is_sm103", False)),
                int(bool(getattr(opts, "fused_bias", True))), int(sink is not None),
                qq.stride(0), qq.stride(1), qq.stride(2), kk.stride(0), kk.stride(1), kk.stride(2),
                vv.stride(0), vv.stride(1), vv.stride(2), out.stride(0), out.stride(1), out.stride(2),
                float(sl2), float(np.float32(setup.softmax_scale)), softcap,
                float(opts.rescale_threshold) if kern.lazy_rescale else 0.0, max_offset,
                float(np.float32(LOG2_E_F32 / sl2)), float(np.float32(2.0 ** max_offset)),
                float(ml_dtypes.finfo(out_dt).max), d, dvh)
        meta = dict(TILE_M=tm, TILE_N=tn, BLOCK_M=bm, BLOCK_N=bn, HEAD_D=_pow2(d), HEAD_DV=_pow2(dvh),
                    SM100=kern.lazy_rescale, HAS_EMU=n_emu > 0, POLY_DEG=deg, P_DTYPE=tl.bfloat16 if dt == "bfloat16" else tl.float16, UPCAST=interp,
                    num_warps=nw, STATS=bool(stats), RS_REG=in_regs, num_stages=num_stages)
        if interp:
            from ._twin_interp import cpu_instructions
            with cpu_instructions(dtype=dt, accumulator=GEMM_IMPL[opts.gemm][1]):
                _twin_kernel.twin_fwd[grid](*args, **flex_args, **flex_ids, **meta)
        else:
            _twin_kernel.twin_fwd[grid](*args, **flex_args, **flex_ids, **meta)
    elif sq and sink is not None:
        # seqlen_k == 0 (interface.py): out = 0, LSE = the sink
        lse.copy_(sink_t.view(1, h, 1).expand(b, h, sq))
    if interp:      # the interpreter's float32 output, cast as cvt.rn does on the GPU
        out = torch.from_numpy(cast_out(out.numpy(), out_dt).view(np.int16)).view(torch.bfloat16 if dt == "bfloat16" else torch.float16)
    if not stats:
        return AttentionResult(out, lse, None, kern.name, opts, setup.softmax_scale, 1)
    # the counters the schedule fixes, on the device too: KV blocks per packed row (query * group + offset),
    # keys the mask hides per query
    if sq and sk:
        cnt[10] = per_row_t.t().repeat(h // group, 1)[None]
    if sparse_kv is not None:       # a block-sparse call visits its own lists (_twin_flex)
        cnt[10] = torch.from_numpy(sparse_kv).to(dev)
    nvis = _masking.visible_count(np.arange(sq), seqlen_q=sq, seqlen_k=sk, window=w)
    cnt[11] = torch.from_numpy((sk - nvis).astype(np.int32)).to(dev)
    cnt[12] = (cnt[10] - 1).clamp_(min=0)
    cnt[13] = cnt[10] * n_emu
    cnt[14] = cnt[10] * (tn - n_emu)
    host = dict(zip(_COUNTER_ROWS, cnt.cpu().numpy()))
    host["max_lag"] = host["max_lag"].view(np.float32)
    share = np.zeros(shape_lse, np.float32) if sink is None else sink_shares(sink, lse.cpu().numpy())
    stats = AttentionStats(sink_share=share, gemm=opts.gemm, tanh_exact=True, **host)
    return AttentionResult(out, lse, stats, kern.name, opts, setup.softmax_scale, 1)


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
