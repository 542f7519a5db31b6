"""The statistical mode written in torch, so that large studies run on a GPU (or on the CPU through torch).

``forward_torch`` follows the same per-block sequence as :func:`fa4num.attention.forward` with
``mode="statistical"`` -- FA4's masking, block order, online max, lazy rescale (SM100), software-exp2 columns,
P cast, fp32 row sums and final scale -- but every (batch, head) at once on the tensors' device, with torch's
exp2/log2/reciprocal standing in for MUFU and float64 standing in for the single-rounding FMAs. It is not
bit-exact (use ``forward`` for that); it agrees with the bit-exact emulation to a few bf16 ulps.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from . import masking, triton_backend
from .forward import AttentionResult, AttentionStats
from .problem import Problem, given_or_plan
from ..constants import FP8_MAX as _FP8_MAX
from ..fp.dtypes import dtype_info
from ..softmax import LOG2_E_F32, scale_log2_of
from ..softmax.scoremod import SCALE_LOG2_WITH_SCOREMOD

_BELOW_MIN_NORMAL = float(np.nextafter(np.float32(2.0 ** -126), np.float32(0)))   # threshold_ keeps p > this
# the kernel knobs forward_torch runs: the Triton kernel's and fused_bias (the rest are refused by name,
# fa4num.attention.kernels.Kernel.knob_refusal). is_sm103 picks its tuning entry (no software exp2); its
# rescale factor without .ftz is below what the statistical mode models (libm exp2, as mode="statistical" has it)
IMPLEMENTED_KNOBS = triton_backend.IMPLEMENTED_KNOBS | {"fused_bias"}


def _ex2_emulation(x, coeffs):
    """utils.ex2_emulation_2 in torch: clamp at -127, floor, frac = x - floor (RN), Horner (FMA in float64),
    scale by 2^n."""
    import torch
    a = torch.clamp(x, min=-127.0)
    n = torch.floor(a)
    f = (a - n).double()
    p = torch.full_like(f, float(coeffs[-1]))
    for c in reversed(coeffs[:-1]):
        p = (p * f + float(c)).float().double()
    return torch.ldexp(p.float(), n.to(torch.int32))


def _kv_blocks(b, h, sq, sk, rep, opts, w):
    """KV blocks each row's M block visits (masking.n_block_range, window ``w``), (b, h, sq) int32."""
    g = rep if opts.pack_gqa else 1
    out = np.zeros((h, sq), np.int32)
    for off in range(g):
        # packed row = query * g + head offset (pack_gqa.py); without packing every head has the same rows
        mbs = (np.arange(sq) * g + off) // opts.tile_m
        per_block = np.ones(int(mbs[-1]) + 1 if sq else 0, np.int32)
        for mb in np.unique(mbs):
            lo, hi = masking.n_block_range(int(mb), tile_m=opts.tile_m, tile_n=opts.tile_n, seqlen_q=sq,
                                           seqlen_k=sk, window=w, qhead_per_kvhead_packgqa=g)
            per_block[mb] = hi - lo if hi > lo else 1
        heads = [hh for hh in range(h) if hh % rep == off] if g > 1 else list(range(h))
        out[heads] = per_block[mbs]
    return np.broadcast_to(out, (b, h, sq)).copy()


def _bmm_f32(a, b):
    """a @ b with float32 results. 16-bit inputs go through the tensor cores with fp32 accumulation where torch
    offers ``out_dtype`` (CUDA); elsewhere through exact float32 copies (products of 16-bit values are exact)."""
    import torch
    if a.is_cuda and a.dtype in (torch.bfloat16, torch.float16):
        try:
            return torch.bmm(a, b, out_dtype=torch.float32)
        except (TypeError, RuntimeError, NotImplementedError):
            pass
    return torch.bmm(a.float(), b.float())


def tile_p(sb, bias, sl2, emu_cols, coeffs, p_dtype, sat_max):
    """P of one tile (public so that experiments/gpu/bench_forward_torch.py can time a torch.compile'd copy in
    its place, the one global the dense loop looks up per tile): ``sb`` (g, rows, nb, tn) scores, ``bias`` (g, rows, nb) = max_offset - max * scale_log2.
    Returns (P cast to the P dtype in (g, nb, rows, tn) layout for the per-block P V products, the fp32 row
    sums of each block (g, rows, nb), saturated-P counts (g, rows)). softmax.py ``apply_exp2_convert``: x =
    S * scale_log2 + bias, exp2 (MUFU, or the software polynomial on the emulated columns), p < 2^-126 -> 0."""
    import torch
    x = torch.add(bias[..., None], sb, alpha=sl2)
    xe = x[..., emu_cols] if emu_cols is not None else None
    p = torch.exp2_(x)
    if xe is not None:
        p[..., emu_cols] = _ex2_emulation(xe, coeffs)
    p = torch.nn.functional.threshold_(p, _BELOW_MIN_NORMAL, 0.0)
    bsum = p.sum(-1)
    nsat = torch.zeros(p.shape[:2], dtype=torch.int32, device=p.device)
    if sat_max is not None:
        nsat = (p > sat_max).sum((-1, -2), dtype=torch.int32)
        p = p.clamp_(max=sat_max)
    g, rows, nb, tn = p.shape
    pq = torch.empty((g, nb, rows, tn), dtype=p_dtype if p_dtype.itemsize == 2 else torch.float32,
                     device=p.device)
    # one kernel: cast (cvt.rn, and fp8 values kept exactly in float32 for the GEMM) and block-major layout
    pq.copy_((p if p_dtype.itemsize == 2 else p.to(p_dtype)).permute(0, 2, 1, 3))
    return pq, bsum, nsat


def _tile_sizes(rows_per_pos, sq, sk, tn, max_tile_elems):
    """(R query positions, C keys) per tile: C a multiple of tn, R * rows_per_pos * C <= max_tile_elems."""
    nblk = -(-sk // tn)
    c_blocks = max(1, min(nblk, max_tile_elems // (rows_per_pos * tn * 256)))
    r = max(1, min(sq, max_tile_elems // (rows_per_pos * c_blocks * tn)))
    return r, c_blocks * tn


def _fmax0(a, b):
    """``torch.fmax`` (a NaN operand ignored) with max.f32's order of the zeros: max(+0, -0) = +0 in either order
    (FMNMX, as the specification's ``fa4num.softmax._ops`` max; torch leaves the tie to the operand order)."""
    import torch
    return torch.where((a == b) & (a == 0), torch.where(torch.signbit(a), b, a), torch.fmax(a, b))


def _stale_max(cur, blk, sl2, threshold, first=False):
    """The row max each block of a tile leaves stored, visiting the tile's blocks in order (last axis).

    ``cur`` (rows,) is the stored max before the tile, ``blk`` (rows, nb) each block's own max; ``first``: the
    tile's first block is the row's first (FA4's ``is_first``: it only sets the max). Without a threshold the
    stored max is the running max. With one (SM100 lazy rescale, ``softmax.py`` ``update_row_max``), the
    stored max moves only at blocks whose max exceeds it by more than the threshold (in scale_log2 units);
    found here by jumping from one such block to the next for every row at once, so the loop runs as many
    times as the most moves any row makes in the tile, not once per block. The torch copy of
    :func:`fa4num.softmax.lazy.lazy_rescale` (the specification; tests/softmax/test_lazy_rule.py checks this one
    against it bit for bit); maxima ignore a NaN operand, as max.f32 does."""
    import torch
    if first:
        head = blk[..., 0]
        if blk.shape[-1] == 1:
            return head[..., None].clone()
        return torch.cat([head[..., None], _stale_max(head, blk[..., 1:], sl2, threshold)], dim=-1)
    if threshold <= 0:
        nan = torch.isnan(blk)
        x = torch.where(nan, -math.inf, blk)
        run = torch.cummax(x, dim=-1).values
        # a running max of 0 is +0 once any +0 came before, else -0 (max.f32's order of the zeros)
        pos0 = torch.cummax(((x == 0) & ~torch.signbit(x)).to(torch.int8), dim=-1).values.bool()
        run = torch.where(run == 0, torch.where(pos0, 0.0, -0.0).to(run.dtype), run)
        run = _fmax0(run, cur[..., None])
        # a NaN stored max stays NaN through all-NaN blocks (max.f32 of two NaNs), which -inf would lose
        still_nan = torch.isnan(cur)[..., None] & (torch.cumprod(nan.to(torch.int8), dim=-1) > 0)
        return torch.where(still_nan, cur[..., None], run)
    nb = blk.shape[-1]
    out = torch.empty_like(blk)
    idx = torch.arange(nb, device=blk.device)
    start = torch.zeros_like(cur, dtype=torch.long)
    cur = cur.clone()
    while True:
        new = _fmax0(blk, cur[..., None])
        safe = torch.where(new == -math.inf, torch.zeros_like(new), new)
        moves = ~(((cur[..., None] - safe) * sl2) >= -threshold) & (idx >= start[..., None])
        nxt = torch.where(moves.any(-1), moves.int().argmax(-1), torch.full_like(start, nb))
        seg = (idx >= start[..., None]) & (idx < nxt[..., None])
        out = torch.where(seg, cur[..., None], out)
        moved = nxt < nb
        if not bool(moved.any()):
            return out
        at = idx == nxt[..., None]
        cur = torch.where(moved, _fmax0(cur, blk.gather(-1, nxt.clamp(max=nb - 1)[..., None])[..., 0]), cur)
        out = torch.where(at, cur[..., None], out)
        start = torch.where(moved, nxt + 1, torch.full_like(start, nb))


def _dense(q, k, v, *, setup, kernel, dev, max_tile_elems, qk_descale=1.0, v_descale=1.0):
    """One batch of equal-length sequences, q (b, sq, h, d), k/v (b, sk, hk, d[_v]) torch tensors on ``dev``.
    Returns (out (b, sq, h, dv), lse (b, h, sq) float32, dict of per-row counters (b, h, sq) numpy).
    ``qk_descale`` (float32 q_descale * k_descale) and ``v_descale``: SM100 fp8, one (batch, kv head)."""
    import torch
    opts, w, dt = setup.opts, setup.window, setup.dtype
    b, sq, h, d = q.shape
    sk, hk, dv = k.shape[1], k.shape[2], v.shape[3]
    softcap = setup.softcap
    qk = np.float32(qk_descale)
    # fp8 descales scale scale_log2 (or the score mod's softmax_scale) by q_descale * k_descale
    scale = float(np.float32(np.float32(setup.softmax_scale) * qk))
    # with a score mod the softmax runs on scale * S pre-scaled (utils.compute_softmax_scale_log2)
    sl2 = float(SCALE_LOG2_WITH_SCOREMOD) if softcap else float(np.float32(scale_log2_of(setup.softmax_scale) * qk))
    tn = opts.tile_n
    nblk = -(-sk // tn)
    rep = h // hk
    g = b * hk
    sm100 = kernel.lazy_rescale
    threshold = float(opts.rescale_threshold) if sm100 else 0.0
    offset = float(opts.max_offset) if sm100 else 0.0
    mm_dtype = q.dtype if dt in ("bfloat16", "float16") else torch.float32   # no fp8 batched GEMM in torch
    # (g, rep, sq, d): the query heads that share one KV head sit together, as pack-GQA lays them out
    qg = q.to(dev).transpose(1, 2).reshape(b, hk, rep, sq, d).reshape(g, rep, sq, d).to(mm_dtype)
    kp = torch.zeros((g, nblk * tn, d), dtype=mm_dtype, device=dev)
    kp[:, :sk] = k.to(dev).transpose(1, 2).reshape(g, sk, d).to(mm_dtype)
    vb = torch.zeros((g, nblk * tn, dv), dtype=mm_dtype, device=dev)
    vb[:, :sk] = v.to(dev).transpose(1, 2).reshape(g, sk, dv).to(mm_dtype)
    vb = vb.view(g, nblk, tn, dv)
    emu_cols = None
    coeffs = None
    if sm100:
        from ..softmax.sm100 import emulated_columns
        from fa4num.ex2 import poly_coeffs
        emu = emulated_columns(tn, freq=opts.ex2_emu_freq, res=opts.ex2_emu_res, start_frg=opts.ex2_emu_start_frg)
        if emu.any():
            emu_cols = torch.from_numpy(np.flatnonzero(emu)).to(dev)
        coeffs = [float(c) for c in poly_coeffs(opts.poly_degree, coeffs=opts.coeffs)]
    sink = None
    if setup.sink is not None:
        # per (g, rep) row group: head = kv head * rep + r
        sink = torch.from_numpy(np.asarray(setup.sink, np.float32)).to(dev).view(1, hk, rep).expand(b, hk, rep)
        sink = sink.reshape(g, rep, 1)
    p_dtype = getattr(torch, dt)
    out_dtype = torch.bfloat16 if dt.startswith("float8") else p_dtype
    out = torch.empty((b, sq, h, dv), dtype=out_dtype, device=dev)
    lse_all = torch.empty((g, rep, sq), dtype=torch.float32, device=dev)
    n_done = torch.zeros((g, rep, sq), dtype=torch.int32, device=dev)
    n_events = torch.zeros_like(n_done)
    n_sat = torch.zeros_like(n_done)
    lag_all = torch.zeros((g, rep, sq), device=dev)
    r_pos, c_keys = _tile_sizes(g * rep, sq, sk, tn, max_tile_elems)
    first, last_vis = masking.key_range(np.arange(sq), seqlen_q=sq, seqlen_k=sk, window=w)
    for r0 in range(0, sq, r_pos):
        r1 = min(r0 + r_pos, sq)
        nr = r1 - r0
        qt = qg[:, :, r0:r1].reshape(g, rep * nr, d)
        m = torch.full((g, rep * nr), -math.inf, device=dev)
        true_m = m.clone()
        row_sum = torch.zeros_like(m)
        o = torch.zeros((g, rep * nr, dv), device=dev)
        started = torch.zeros(m.shape, dtype=torch.bool, device=dev)
        done, events, sat = (torch.zeros(m.shape, dtype=torch.int32, device=dev) for _ in range(3))
        lag = torch.zeros_like(m)
        # keys any row of this tile may see; tiles outside them change nothing and are skipped
        lo_all, hi_all = int(first[r0:r1].min()), int(last_vis[r0:r1].max())
        lo_row, hi_row = torch.from_numpy(first[r0:r1]).to(dev).repeat(rep), \
            torch.from_numpy(last_vis[r0:r1]).to(dev).repeat(rep)
        need_lo, need_hi = int(first[r0:r1].max()), int(last_vis[r0:r1].min())
        first_tile = True     # the first tile visited holds the rows' first block (FA4's is_first)
        for c0 in range((nblk - 1) // (c_keys // tn) * c_keys, -1, -c_keys):
            c1 = min(c0 + c_keys, nblk * tn)
            if c0 > hi_all or c1 - 1 < lo_all:
                continue
            nb = (c1 - c0) // tn
            s = _bmm_f32(qt, kp[:, c0:c1].transpose(1, 2))                           # (g, rows, C)
            if softcap:
                # utils.create_softcap_scoremod: softcap * tanh(S * softmax_scale / softcap), before the mask
                s = torch.tanh_(s.mul_(scale).div_(softcap)).mul_(softcap)
            if c0 < need_lo or c1 - 1 > need_hi:
                col = torch.arange(c0, c1, device=dev)
                s.masked_fill_((col[None, :] < lo_row[:, None]) | (col[None, :] > hi_row[:, None]), -math.inf)
            sb = s.view(g, rep * nr, nb, tn)
            blk = sb.amax(-1).flip(-1)                                               # visiting order
            m_used = _stale_max(m, blk, sl2, threshold, first=first_tile)
            first_tile = False
            m_prev = torch.cat([m[..., None], m_used[..., :-1]], dim=-1)
            raw = torch.fmax(m_prev, blk)
            raw_safe = torch.where(raw == -math.inf, torch.zeros_like(raw), raw)
            acc_ = (m_prev - raw_safe) * sl2
            acc = torch.exp2(acc_)
            if threshold > 0:
                acc = torch.where(acc_ >= -threshold, torch.ones_like(acc), acc)
            vis = blk > -math.inf
            # started before block j: a visible key in an earlier tile or an earlier block of this one
            before = started[..., None] | (torch.cumsum(vis.int(), -1) - vis.int() > 0)
            true_run = torch.cummax(torch.maximum(blk, true_m[..., None]), -1).values
            true_prev = torch.cat([true_m[..., None], true_run[..., :-1]], -1)
            events += (before & (blk > true_prev)).sum(-1, dtype=torch.int32)       # the true max grew
            done += (before & (m_used > m_prev)).sum(-1, dtype=torch.int32)         # the stored max moved
            started |= vis.any(-1)
            lag = torch.maximum(lag, torch.nan_to_num((true_run - m_used) * sl2, nan=0.0, posinf=0.0,
                                                      neginf=0.0).amax(-1))
            true_m = true_run[..., -1]
            m_safe = torch.where(m_used == -math.inf, torch.zeros_like(m_used), m_used)
            # later[j]: product of the factors of the blocks visited after block j in this tile (float64:
            # a long product of factors in float32 would round at every step)
            acc64 = acc.double()
            suffix = torch.flip(torch.cumprod(torch.flip(acc64, [-1]), -1), [-1])
            later = torch.cat([suffix[..., 1:], torch.ones_like(suffix[..., :1])], -1)
            if not sm100 or opts.fused_bias:   # one FFMA: max_offset - m * scale_log2 rounded once
                bias = (offset - m_safe.double() * sl2).float().flip(-1)   # back to memory order
            else:                  # FMUL then FADD (softmax.sm100.scale_subtract_rowmax, fused_bias=False)
                bias = (offset - m_safe * sl2).flip(-1)
            p, bsum, nsat = tile_p(sb, bias, sl2, emu_cols, coeffs, p_dtype, _FP8_MAX.get(dt))
            sat += nsat
            bsum = bsum.flip(-1)                                                     # visiting order
            total = acc64.prod(-1)
            row_sum = (row_sum.double() * total + (bsum.double() * later).sum(-1)).float()
            # P_blk V_blk per block with exact products (16-bit P and V, fp32 accumulation), then weighted
            pv = _bmm_f32(p.view(g * nb, rep * nr, tn), vb[:, c0 // tn:c0 // tn + nb].reshape(g * nb, tn, dv))
            pv = pv.view(g, nb, rep * nr, dv).mul_(later.flip(-1).float().transpose(1, 2)[..., None]).sum(1)
            o = o * total.float()[..., None] + pv
            m = m_used[..., -1]
        m_scaled = m * sl2
        if sink is not None:
            # softmax.py apply_learnable_sink (SM100) / Softmax.finalize (SM90): the sink joins the row sum;
            # a row that saw no key takes the sink as its max
            sk_l2 = (sink.expand(g, rep, nr).reshape(g, rep * nr) * float(LOG2_E_F32))
            m_scaled = torch.where(m == -math.inf, sk_l2, m_scaled)
            row_sum = row_sum + torch.exp2(sk_l2 - m_scaled + offset)
        zero_or_nan = (row_sum == 0) | torch.isnan(row_sum)
        safe = torch.where(zero_or_nan, torch.ones_like(row_sum), row_sum)
        lse = (m_scaled + (torch.log2(safe) - offset)) * math.log(2.0)
        lse = torch.where(zero_or_nan, torch.full_like(lse, -math.inf), lse)
        # correction_loop: the final scale is rcp(row_sum) * v_descale
        fin = safe.reciprocal() * float(v_descale) if v_descale != 1.0 else safe.reciprocal()
        ot = (o * fin[..., None]).view(b, hk, rep, nr, dv).reshape(b, h, nr, dv)
        out[:, r0:r1] = ot.transpose(1, 2).to(out_dtype)
        lse_all[:, :, r0:r1] = lse.view(g, rep, nr)
        n_done[:, :, r0:r1] = done.view(g, rep, nr)
        n_events[:, :, r0:r1] = events.view(g, rep, nr)
        n_sat[:, :, r0:r1] = sat.view(g, rep, nr)
        lag_all[:, :, r0:r1] = lag.view(g, rep, nr)

    def per_head(t):
        return t.view(b, h, sq).cpu().numpy()
    counters = {"rescale_events": per_head(n_events), "rescales_done": per_head(n_done),
                "max_lag": per_head(lag_all).astype(np.float32), "p_saturated": per_head(n_sat)}
    return out, lse_all.view(b, h, sq), counters


def _row_stats(setup, kernel, b, sq, sk, counters):
    """The counters that follow from the block ranges alone, joined to the measured ones (b, h, sq)."""
    opts, h, w = setup.opts, setup.heads, setup.window
    kvb = _kv_blocks(b, h, sq, sk, h // setup.heads_kv, opts, w) if sk else np.zeros((b, h, sq), np.int32)
    n_emu = 0
    emu = kernel.emulated_columns(opts)
    if emu is not None:
        n_emu = int(emu.sum())
    first, last = masking.key_range(np.arange(sq), seqlen_q=sq, seqlen_k=sk, window=w)
    hidden = (sk - np.maximum(last - first + 1, 0)).astype(np.int32)          # keys the window hides
    return {"kv_blocks": kvb, "exp2_emulated": kvb * n_emu, "exp2_mufu": kvb * (opts.tile_n - n_emu),
            "masked_by_window": np.broadcast_to(hidden, (b, h, sq)).copy(), **counters}


BACKENDS = ("auto", "torch", "triton")


def _pick_backend(backend, dev, setup):
    """The function that runs one dense batch: ``_dense`` (torch) or the Triton kernel's wrapper."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    fits = triton_backend.supports(dtype=setup.dtype, head_dim=setup.head_dim, head_dim_v=setup.head_dim_v,
                                   tile_n=setup.opts.tile_n)
    why = setup.kernel.knob_refusal(setup, triton_backend.IMPLEMENTED_KNOBS, who="backend='triton'")
    if backend == "triton" and why is not None:
        raise ValueError(why)
    fits = fits and why is None
    if backend == "triton":
        if not triton_backend.available():
            raise ValueError("backend='triton' needs the triton package")
        if not fits:
            raise ValueError(f"backend='triton' takes bfloat16/float16 inputs with head dims and tile_n in "
                             f"{triton_backend.HEAD_DIMS}, got {setup.dtype}, head_dim={setup.head_dim}, "
                             f"head_dim_v={setup.head_dim_v}, tile_n={setup.opts.tile_n}")
        if dev.type != "cuda" and not triton_backend.interpreted():
            raise ValueError("backend='triton' runs on a CUDA device (or with TRITON_INTERPRET=1 on the CPU)")
    elif backend == "torch" or not (fits and dev.type == "cuda" and triton_backend.available()):
        return _dense

    def run(q, k, v, *, setup, kernel, dev, max_tile_elems, qk_descale=1.0, v_descale=1.0):
        return triton_backend.dense_triton(q, k, v, setup=setup, kernel=kernel, qk_descale=qk_descale,
                                           v_descale=v_descale)
    return run


# ml_dtypes arrays (what fa4num.attention.forward takes) have no torch counterpart in torch.as_tensor: move
# their bits (same width, same encoding) and reinterpret them
_ML_TO_TORCH = ("bfloat16", "float8_e4m3fn", "float8_e5m2")


def _as_tensor(x, torch):
    if isinstance(x, torch.Tensor):
        return x
    a = np.asarray(x)
    if a.dtype.name in _ML_TO_TORCH:
        d = dtype_info(a.dtype)      # torch has no uint16: 16-bit formats travel as int16
        raw = np.int16 if d.width == 16 else d.bits_dtype
        return torch.from_numpy(np.ascontiguousarray(a).view(raw)).view(d.torch_dtype)
    return torch.as_tensor(a)


def forward_torch(q=None, k=None, v=None, *, problem: Problem | None = None, device=None,
                  max_tile_elems: int = 1 << 28, backend: str = "auto", **fa4_args) -> AttentionResult:
    """Statistical FA4 forward on torch tensors; runs on ``device`` (default: q's device). Arguments, layouts
    and their checks are :func:`fa4num.attention.forward`'s (:func:`~fa4num.attention.problem.plan`; pass
    FA4's arguments, or ``problem=plan(q, k, v, mode="statistical", ...)``):
    softcap, sliding windows, learnable sinks, varlen (``cu_seqlens_q/k``), paged KV, pack-GQA (which changes
    only the KV blocks each row's tile visits, ``stats.kv_blocks``: per row the arithmetic is the same) and
    head_dim_v != head_dim, fp8 with ``q_descale``/``k_descale``/``v_descale`` (SM100). Not here: split-KV
    (``num_splits``), which ``forward`` runs.
    ``mode`` is "statistical" (``gemm`` "blas", ``mufu_arch`` "libm"). ``nonfinite`` defaults to "raise" (NaN/inf in
    q, k, v raise ValueError); "propagate" lets torch's arithmetic carry them (not the kernel's bits).
    Returns torch tensors (out in q's dtype, bf16 for fp8; lse float32) and numpy stats, shaped as
    ``forward``'s.

    ``backend``: "torch" runs the tiled torch code below; "triton" the one-kernel version of the same steps
    (:mod:`fa4num.attention.triton_backend`: CUDA, or Triton's CPU interpreter; 16-bit inputs, power-of-two
    head dims); "auto" (default) picks "triton" on a CUDA device where Triton imports and the case is one it
    handles, else "torch". Both report the same counters; their outputs differ by the rounding of the
    accumulation order (a few bf16 ulps).

    The work is tiled: a tile is R query positions (all heads) times C keys (a whole number of KV blocks of
    ``tile_n``), at most ``max_tile_elems`` scores, so memory stays bounded for any sequence length (about
    16 bytes per score of one tile). Tiles of keys are visited right to left like the kernel's KV blocks;
    inside a tile the online max, FA4's lazy rescale decision and the rescale factors of every block are
    computed for all rows at once (``_stale_max``), and the tile's P V enters O weighted by the product of
    the rescale factors of the later blocks, as row_sum does. Q K^T runs on the tensor cores with fp32
    accumulation where torch offers it (bf16/fp16 on CUDA), and so does each block's P V (P cast to the input
    dtype as the kernel casts it), whose fp32 results are then weighted and summed. Varlen and paged inputs
    run one sequence at a time.

    Parameters
    ----------
    q, k, v : torch tensors (or arrays) in FA4's layout (batch, seqlen, heads, head_dim[_v])
        bf16 / fp16, or fp8 with descales on SM100; varlen: (total, heads, head_dim) with cu_seqlens_q/k.
    problem : Problem, optional
        Planned with ``mode="statistical"`` (instead of q, k, v and FA4's arguments).
    device : str or torch.device, optional
        Where to run (default: q's device).
    max_tile_elems : int
        Scores per tile (>= 65536): bounds the memory, not the result.
    backend : {"auto", "torch", "triton"}
    **fa4_args
        FA4's arguments and options as for ``forward`` (softmax_scale, causal, kernel, softcap, window_size,
        learnable_sink, pack_gqa, cu_seqlens_q/k, max_seqlen_q/k, page_table, q/k/v_descale, rescale_threshold,
        tile_n, ...); ``nonfinite`` ("raise" here by default, or "propagate"); not ``num_splits``.

    Returns
    -------
    AttentionResult
        .out torch tensor (q's shape with head_dim_v; q's dtype, bf16 for fp8), .lse float32 torch tensor
        ((batch, heads, seqlen_q), or (heads, total_q) for varlen), .stats with numpy counters shaped like lse.

    Raises
    ------
    ValueError
        For any argument ``forward`` rejects, ``num_splits``, max_tile_elems below 65536, an unknown backend, or
        backend="triton" where the Triton kernel cannot run.

    Examples
    --------
    >>> import torch
    >>> q = torch.randn(1, 64, 2, 64).to(torch.bfloat16)
    >>> r = forward_torch(q, q, q, causal=True, softcap=30.0, window_size=(16, None))
    >>> tuple(r.out.shape), r.out.dtype, tuple(r.lse.shape), int(r.stats.masked_by_window[0, 0, -1])
    ((1, 64, 2, 64), torch.bfloat16, (1, 2, 64), 47)
    """
    import torch
    if not isinstance(max_tile_elems, int) or max_tile_elems < 1 << 16:
        raise ValueError(f"max_tile_elems must be an int >= 65536, got {max_tile_elems!r}")
    if "num_splits" in fa4_args:
        raise ValueError("num_splits is not supported by forward_torch (split-KV runs in fa4num.attention.forward)")
    if problem is None and q is not None and k is not None and v is not None:
        q, k, v = (_as_tensor(x, torch) for x in (q, k, v))
        fa4_args = {"mode": "statistical", "nonfinite": "raise", **fa4_args}
    setup = given_or_plan(problem, q, k, v, fa4_args, who="forward_torch")
    setup.refuse_flex("forward_torch")
    if setup.mode != "statistical" or setup.opts.gemm != "blas" or setup.mufu.exact("ex2"):
        raise ValueError(f"forward_torch runs the statistical mode (gemm 'blas', mufu_arch 'libm'); got mode "
                         f"{setup.mode!r}, gemm {setup.opts.gemm!r}, mufu_arch {setup.opts.mufu_arch!r}")
    if setup.num_splits_given != 1:
        raise ValueError("num_splits is not supported by forward_torch (split-KV runs in fa4num.attention.forward)")
    why = setup.kernel.knob_refusal(setup, IMPLEMENTED_KNOBS, who="forward_torch")
    if why is not None:
        raise ValueError(why)
    q, k, v = (_as_tensor(x, torch) for x in (setup.q, setup.k, setup.v))
    seqs = setup.seqs if q is setup.q else setup.sequences(q, k, v)
    kernel, descaled = setup.kernel, setup.descaled
    dev = torch.device(device) if device is not None else q.device
    h, dv = setup.heads, setup.head_dim_v
    dense = _pick_backend(backend, dev, setup)
    if not setup.varlen and setup.page_table is None and not descaled:
        b, sq = q.shape[:2]
        out, lse, counters = dense(q.to(dev), k.to(dev), v.to(dev), setup=setup, kernel=kernel, dev=dev,
                                   max_tile_elems=max_tile_elems)
        st = _row_stats(setup, kernel, b, sq, k.shape[1], counters)
    else:
        out_dtype = torch.bfloat16 if setup.fp8 else q.dtype
        out = torch.zeros((*q.shape[:-2], h, dv), dtype=out_dtype, device=dev)
        lse_shape = (h, q.shape[0]) if setup.varlen_q else (q.shape[0], h, q.shape[1])
        lse = torch.full(lse_shape, -math.inf, dtype=torch.float32, device=dev)
        st = {n: np.zeros(lse_shape, np.int32) for n in ("kv_blocks", "rescale_events", "rescales_done",
                                                         "exp2_emulated", "exp2_mufu", "p_saturated",
                                                         "masked_by_window")}
        st["max_lag"] = np.zeros(lse_shape, np.float32)
        for seq in seqs:
            sq, sk = seq.q.shape[0], seq.k.shape[0]
            if sq == 0:
                continue
            hk = setup.heads_kv
            rep = h // hk
            # with fp8 descales each (sequence, kv head) has its own scale: one run per kv head
            parts = [(slice(None), slice(None), setup, 1.0, 1.0)] if not descaled else [
                (slice(j * rep, (j + 1) * rep), slice(j, j + 1),
                 replace(setup, heads=rep, heads_kv=1,
                         sink=None if setup.sink is None else setup.sink[j * rep:(j + 1) * rep]),
                 np.float32(setup.q_descale[seq.batch, j] * setup.k_descale[seq.batch, j]),
                 float(setup.v_descale[seq.batch, j])) for j in range(hk)]
            for hs, ks, sub, qk, vd in parts:
                o1, l1, c1 = dense(seq.q[None, :, hs].to(dev), seq.k[None, :, ks].to(dev),
                                   seq.v[None, :, ks].to(dev), setup=sub, kernel=kernel, dev=dev,
                                   max_tile_elems=max_tile_elems, qk_descale=qk, v_descale=vd)
                out[seq.out_index + (hs,)] = o1[0]
                rows = _row_stats(sub, kernel, 1, sq, sk, c1)
                for i, hh in enumerate(range(h)[hs]):
                    lse[seq.lse_index(hh)] = l1[0, i]
                    for n, val in rows.items():
                        st[n][seq.lse_index(hh)] = val[0, i]
    st["sink_share"] = np.zeros(st["max_lag"].shape, np.float32)
    if setup.sink is not None:
        sink = np.asarray(setup.sink, np.float64)
        sink_b = sink[:, None] if setup.varlen_q else sink[None, :, None]
        with np.errstate(invalid="ignore", over="ignore"):
            share = np.exp(sink_b - lse.double().cpu().numpy())
        st["sink_share"] = np.where(np.isfinite(share), share, 0).astype(np.float32)
    stats = AttentionStats(**st, gemm="blas", tanh_exact=not setup.softcap)
    return AttentionResult(out, lse, stats, kernel.name, setup.opts, setup.softmax_scale)
