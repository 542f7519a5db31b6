"""FA4's MLA forward on the SM100 path (DeepSeek's absorbed multi-head latent attention, ``flash_attn_func(q, k, v,
qv=...)``) and sparse MLA (``gather_kv_indices``), emulated from FA4 4.0.0b36's source, not run on Blackwell.

The call: q (batch, seqlen_q, heads, 64) the rope part of the query (or None), k (batch, seqlen_k, heads_kv, 64)
its keys (or None), v (batch, seqlen_k, heads_kv, 512) the latent cache, which is both the second key and the
value, qv (batch, seqlen_q, heads, 512) the absorbed query. FA4 computes O = softmax(scale * (q k^T + qv v^T)) v
(``interface.py`` ``_flash_attn_fwd``, the ``qv is not None`` branch; head dims (64, 512) only, 16-bit or fp8
inputs, no window, softcap, score_mod, mask_mod or block sparsity).

Which kernel runs (``interface.py`` ``_mla_1cta_route`` and ``_mla_fwd_plan``, :func:`mla_route`):
``FlashAttentionMLAForwardSm100`` (2-CTA, a cluster of two 64-row CTAs), ``FlashAttentionMLAForward1CtaSm100`` (1-CTA,
the same 128-key mainloop on one 64-row CTA) or ``FlashAttentionMLAForward1CtaKb64Sm100`` (1-CTA, 64-key blocks,
S summed from two lane-half partial GEMMs; ``can_implement``). fa4num models the 128-key mainloop of the first two,
whose per-row arithmetic is the same; a call FA4 would route to the kb64 mainloop is refused (``mla_1cta=False``
is FA4's ``FLASH_ATTENTION_MLA_1CTA=0``, the 2-CTA kernel).

Per KV block of 128 keys, visited right to left as in the dense kernel (``softmax_loop``):

- S = Q K^T (zero_init), then += Qv_0 V_0^T, += Qv_1 V_1^T (the two 256-wide halves of the latent, ``mma``): one
  chain of tcgen05 K steps over [q | qv] . [k | v]^T (fa4num.hw.mma, 16 elements per step, in this order);
- the mask: causal/seqlen positions (dense), or the gather's validity bitmask (sparse: index -1 or >= the causal
  limit ``q_idx + 1 + seqlen_k - seqlen_q`` (causal) or seqlen_k -> -inf; ``topk_gather_kv.py``
  ``compute_bitmask``, ``mask.py`` ``apply_mask_sm100``), every block;
- the MLA softmax step (:mod:`fa4num.softmax.mla`: all exp2 on MUFU, two half row sums, the factor through
  ex2.approx without .ftz); O <- RN(O * acc_scale) where acc_scale < 1 (``correction_rescale``), O += P_bf16 V.

Epilogue: row_sum = RN(row_sum0 + row_sum1), O * rcp.approx(row_sum) -> bf16, LSE; with ``o_lo`` the residual
O_lo = bf16(fp32(O) - fp32(bf16(O))) (``correction_loop``, "O residual pass": the bf16 output's rounding error,
exact in fp32 and rounded once, saved for the sparse backward's dpsum; it does not change O).

The lazy-rescale threshold is not an FA4 argument: ``interface.py`` passes 0.0 when the call requires grad and is
sparse ("the lazy rescale (threshold 8) leaves a coherent bf16 gain error on peaked rows"), else 8.0; ``o_lo`` is
written in the same case. ``requires_grad`` says which; ``rescale_threshold`` and ``o_lo`` override them for studies.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from fa4num.softmax import ballot as _ballot
from fa4num.softmax import mla as _mla
from fa4num.softmax import scale_log2_of

from . import config
from . import masking as _masking
from .forward import AttentionStats, _Ctx, _KVBlocks, _run_mblock, cast_out, sink_shares
from .kernels import Sm100
from .problem import NP_DTYPES, check_bool, check_learnable_sink, check_softmax_scale, dtype_name, to_numpy
from .schedule import head_groups, split_ranges, visit_order

HEAD_DIM, HEAD_DIM_V = 64, 512     # interface.py: qv requires head_dim_v == 512 and head_dim == 64
TILE_N = 128                       # keys per block of the 128-key mainloop (interface.py asserts tile_n == 128)
MAX_HEADS_PER_KV = 128             # FlashAttentionMLAForwardSm100.__init__: 0 < qhead_per_kvhead <= 128
DTYPES_MLA = ("bfloat16", "float16")
MAINLOOPS = ("2cta", "1cta", "1cta-kb64")


@dataclass(frozen=True)
class MlaKernel(Sm100):
    """An MLA forward kernel of FA4 on SM100 (the 128-key mainloop): the dense SM100 kernel object's interface
    (:class:`fa4num.attention.kernels.Sm100`) with the MLA softmax step (:mod:`fa4num.softmax.mla`).
    ``cta_tile_m`` rows per M block: the 2-CTA cluster's 128 (``cluster_tile_m``), or the 1-CTA kernel's 64;
    ``pack_gqa_divides``: pack-GQA needs the head ratio to divide the tile or be a multiple of it (the 2-CTA
    ``__init__`` asserts it; the 1-CTA kernel takes any ratio, without TMA where 64 % ratio != 0)."""
    cta_tile_m: int = 128
    pack_gqa_divides: bool = True

    def softmax_state(self, rows: int):
        return _mla.MlaState.empty(rows)

    def emulated_columns(self, opts):
        """None: ``apply_exp2_convert`` runs with ``ex2_emu_freq=0`` in the MLA kernels (every exp2 on MUFU)."""
        return None

    def softmax_step(self, s, state, *, scale_log2, is_first, opts, emulate, block_max=None):
        """(P, acc_scale, lag, rows whose O is rescaled) of one block (``flash_fwd_mla_sm100.py`` ``softmax_step``;
        ``correction_loop``: a warp multiplies O when one of its 32 rows has scale < 1, a lane at 1.0 unchanged)."""
        step = _mla.softmax_step(s, state, scale_log2=scale_log2, is_first=is_first,
                                 rescale_threshold=opts.rescale_threshold, max_offset=opts.max_offset,
                                 arch=opts.mufu_arch, block_max=block_max)
        return step.p, step.acc_scale, step.lag, _ballot.group_any(step.acc_scale < 1, _ballot.WARP_ROWS)

    def finalize(self, state, *, scale_log2, opts, sink, v_descale, softmax_scale=None):
        return _mla.finalize(state, scale_log2=scale_log2, max_offset=opts.max_offset, arch=opts.mufu_arch,
                             sink=sink, v_descale=v_descale)


_COMMON = dict(arch="sm100", dtypes=DTYPES_MLA, accumulator="sm100", lazy_rescale=True, split_kv=False,
               head_dim_rule="(head_dim, head_dim_v) = (64, 512), or q/k None and head_dim_v 512",
               dq_postprocess_threads=128)
MLA_KERNELS = {"2cta": MlaKernel(name="fa4-sm100-mla-2cta", cta_tile_m=128, pack_gqa_divides=True, **_COMMON),
               "1cta": MlaKernel(name="fa4-sm100-mla-1cta", cta_tile_m=64, pack_gqa_divides=False, **_COMMON)}


def mla_route(*, sparse: bool, heads_per_kv: int, heads_kv: int, batch: int, seqlen_q: int,
              requires_grad: bool = False, gather_bwd_recompute_p: bool = False, mla_1cta: bool | None = None,
              num_sms: int = config.NUM_SMS_SM100) -> tuple[str, str]:
    """(mainloop, why): the MLA kernel FA4 b36 runs for a 16-bit, unsplit call without descales
    (``interface.py`` ``_mla_1cta_route``, then ``FlashAttentionMLAForward1CtaKb64Sm100.can_implement``).

    1-CTA is supported for dense MLA, and for sparse with at most 64 heads unless training without
    ``gather_bwd_recompute_p``. ``mla_1cta`` True/False is FA4's ``FLASH_ATTENTION_MLA_1CTA=1/0`` (where supported);
    None the heuristic: sparse -> 1-CTA once the 2-CTA grid (2 CTAs per token and KV head) exceeds one wave of
    ``num_sms``; dense -> 2-CTA unless a decode shape (seqlen_q x heads per KV head <= 64) exceeds one wave (2 CTAs
    per batch entry and KV head). A 1-CTA call runs the kb64 mainloop when sparse, or dense with 64 heads per KV
    head, or one KV head and seqlen_q 1.

    Parameters
    ----------
    sparse : bool
        ``gather_kv_indices`` given.
    heads_per_kv, heads_kv, batch, seqlen_q : int
    requires_grad, gather_bwd_recompute_p : bool
    mla_1cta : bool, optional
    num_sms : int
        148 (B200) by default.

    Returns
    -------
    (str, str)
        One of :data:`MAINLOOPS`, and the deciding rule in words.

    Examples
    --------
    >>> mla_route(sparse=True, heads_per_kv=64, heads_kv=1, batch=1, seqlen_q=16)[0]
    '2cta'
    >>> mla_route(sparse=True, heads_per_kv=64, heads_kv=1, batch=1, seqlen_q=512)[0]
    '1cta-kb64'
    >>> mla_route(sparse=True, heads_per_kv=64, heads_kv=1, batch=1, seqlen_q=512, requires_grad=True)[0]
    '2cta'
    """
    supported = not sparse or (heads_per_kv <= 64 and (not requires_grad or gather_bwd_recompute_p))
    ctas_2cta = 2 * heads_kv * (batch * seqlen_q if sparse else batch)
    past_one_wave = ctas_2cta > num_sms
    if mla_1cta is not None:
        one = bool(mla_1cta) and supported
        why = f"mla_1cta={mla_1cta} (FLASH_ATTENTION_MLA_1CTA={int(bool(mla_1cta))})" + (
            "" if one == bool(mla_1cta) else ", but 1-CTA does not support this sparse call")
    elif not supported:
        one, why = False, "1-CTA does not support this sparse call (> 64 heads, or training without recompute-P)"
    elif sparse:
        one = past_one_wave
        why = f"sparse: 2-CTA grid of {ctas_2cta} CTAs {'>' if one else '<='} {num_sms} SMs"
    elif seqlen_q * heads_per_kv > 64:
        one, why = False, f"dense prefill: seqlen_q x heads per KV head = {seqlen_q * heads_per_kv} > 64"
    else:
        one = past_one_wave
        why = f"dense decode: 2-CTA grid of {ctas_2cta} CTAs {'>' if one else '<='} {num_sms} SMs"
    if not one:
        return "2cta", why
    kb64 = heads_per_kv <= 64 and (sparse or heads_per_kv == 64 or (heads_kv == 1 and seqlen_q == 1))
    return ("1cta-kb64" if kb64 else "1cta"), why


@dataclass
class MlaResult:
    """What :func:`mla_forward` returns."""
    out: object              # (batch, seqlen_q, heads, 512), the input dtype; numpy or torch
    lse: object              # float32 (batch, seqlen_q, heads): FA4's MLA layout (heads last)
    stats: AttentionStats    # shaped like lse
    o_lo: object             # bf16 residual fp32(O) - bf16(O) (out's shape), or None when not written
    kernel: str              # the MlaKernel that ran
    route: str               # mla_route's reason
    rescale_threshold: float
    softmax_scale: float
    options: object = field(repr=False, default=None)


def _check_inputs(q, k, v, qv):
    if qv is None:
        raise ValueError("qv is required: without it FA4 runs the dense kernel (fa4num.attention.forward)")
    if (q is None) != (k is None):
        raise ValueError("q and k must be given together (the rope part) or both be None (S = qv v^T only)")
    arrays, device = {}, None
    for name, x in (("q", q), ("k", k), ("v", v), ("qv", qv)):
        if x is None:
            continue
        a, dev = to_numpy(x, name)
        device = device if device is not None else dev
        if a.ndim != 4:
            raise ValueError(f"{name} must be 4-D (batch, seqlen, heads, dim), got shape {a.shape}")
        arrays[name] = a
    dt = dtype_name(arrays["v"], "v")
    if dt not in DTYPES_MLA:
        raise ValueError(f"dtype {dt} is not modelled for MLA: allowed {DTYPES_MLA} (fp8 runs FA4's 1-CTA kernel "
                         "with max_offset 8 and descales, not emulated)")
    for name, a in arrays.items():
        if dtype_name(a, name) != dt:
            raise ValueError(f"q, k, v and qv must have one dtype (FA4 asserts it), got {name} "
                             f"{dtype_name(a, name)} and v {dt}")
    va, qva = arrays["v"], arrays["qv"]
    b, sk, hk, dv = va.shape
    _, sq, h, _ = qva.shape
    if dv != HEAD_DIM_V or qva.shape[-1] != HEAD_DIM_V or qva.shape[0] != b:
        raise ValueError(f"v and qv must be (batch, seqlen, heads, {HEAD_DIM_V}) with one batch, got v {va.shape} "
                         f"and qv {qva.shape}")
    if "q" in arrays:
        if arrays["q"].shape != (b, sq, h, HEAD_DIM):
            raise ValueError(f"q must have shape {(b, sq, h, HEAD_DIM)} (qv's with head_dim {HEAD_DIM}), got "
                             f"{arrays['q'].shape}")
        if arrays["k"].shape != (b, sk, hk, HEAD_DIM):
            raise ValueError(f"k must have shape {(b, sk, hk, HEAD_DIM)} (v's with head_dim {HEAD_DIM}), got "
                             f"{arrays['k'].shape}")
    if hk < 1 or h % hk:
        raise ValueError(f"heads ({h}) must be a multiple of heads_kv ({hk})")
    if h // hk > MAX_HEADS_PER_KV:
        raise ValueError(f"heads per KV head must be <= {MAX_HEADS_PER_KV} for FA4's MLA kernels, got {h // hk}")
    return arrays, dt, device


def _check_gather(gather_kv_indices, *, batch, seqlen_q, heads_kv):
    if gather_kv_indices is None:
        return None
    from .problem import plain
    g = plain(gather_kv_indices)
    if not np.issubdtype(g.dtype, np.integer):
        raise ValueError(f"gather_kv_indices must be an integer array, got dtype {g.dtype}")
    if g.ndim != 3 or g.shape[:2] != (batch, seqlen_q) or g.shape[2] == 0 or g.shape[2] % TILE_N:
        raise ValueError(f"gather_kv_indices must have shape (batch, seqlen_q, topk) = ({batch}, {seqlen_q}, topk) "
                         f"with topk a positive multiple of {TILE_N} (FA4 asserts it), got {g.shape}")
    if heads_kv != 1:
        raise ValueError(f"gather_kv_indices needs heads_kv == 1 (sparse MLA is MQA, FA4 asserts it), got {heads_kv}")
    return g.astype(np.int64)



def _dense_visits(lo: int, hi: int) -> list:
    """The dense path's visits of KV blocks [lo, hi) (``flash_fwd_mla_sm100.py`` visits right to left, as the
    dense kernel: :func:`fa4num.attention.schedule.visit_order`), in :func:`_run_mblock`'s (n, mask_mod applies,
    seqlen masked) form; MLA has no mask_mod, so the flags change nothing."""
    return [(n, True, i == 0) for i, n in enumerate(visit_order(lo, hi, split_kv=False))]

def mla_forward(q=None, k=None, v=None, *, qv=None, gather_kv_indices=None, softmax_scale=None, causal=False,
                learnable_sink=None, requires_grad=False, gather_bwd_recompute_p=False, mla_1cta=None,
                num_sms=config.NUM_SMS_SM100, rescale_threshold=None, o_lo=None, gemm="tcgen05",
                mufu_arch="sm90") -> MlaResult:
    """Emulate FA4's MLA forward on SM100 (``flash_attn_func(q, k, v, qv=qv, gather_kv_indices=...)``), bit for bit
    from FA4 4.0.0b36's source (not run on a Blackwell GPU; the MUFU tables are the H200's).

    Parameters
    ----------
    q, k : arrays or torch tensors, optional
        The rope part: q (batch, seqlen_q, heads, 64), k (batch, seqlen_k, heads_kv, 64); both None: S = qv v^T.
    v : array or torch tensor
        The latent cache (batch, seqlen_k, heads_kv, 512): the second key and the value.
    qv : array or torch tensor
        The absorbed query (batch, seqlen_q, heads, 512). Required (without it FA4 runs the dense kernel).
    gather_kv_indices : int array (batch, seqlen_q, topk), optional
        Sparse MLA: the keys of each query token (topk a multiple of 128; -1 or out of range = no key); needs
        heads_kv == 1.
    softmax_scale : float, optional
        Default 1/sqrt(64 + 512) with q, 1/sqrt(512) without (``interface.py``).
    causal : bool
        Bottom-right aligned; sparse: keys at or beyond ``q_idx + 1 + seqlen_k - seqlen_q`` are masked.
    learnable_sink : float array (heads,), optional
    requires_grad : bool
        FA4's trigger (an input requires grad): with ``gather_kv_indices`` the kernel runs with rescale_threshold 0
        and writes ``o_lo``; it also steers :func:`mla_route`.
    gather_bwd_recompute_p : bool
        FA4's flag of the same name (it lets sparse training run the 1-CTA kernel).
    mla_1cta : bool, optional
        FA4's ``FLASH_ATTENTION_MLA_1CTA`` override (None: its heuristic with ``num_sms`` SMs).
    num_sms : int
    rescale_threshold : float, optional
        Study override of FA4's threshold (None: 0.0 for sparse training, else 8.0); finite, >= 0.
    o_lo : bool, optional
        Study override: compute the residual O_lo even where FA4 does not write it (None: FA4's rule).
    gemm : str
        A name of ``fa4num.attention.config.GEMM_MODELS`` ("tcgen05": Blackwell's accumulation model).
    mufu_arch : str
        MUFU tables (``fa4num.hw.available_archs()``).

    Returns
    -------
    MlaResult
        ``out`` (batch, seqlen_q, heads, 512), ``lse`` (batch, seqlen_q, heads) float32, ``stats``, ``o_lo``.

    Raises
    ------
    ValueError
        Naming the argument, for what FA4 refuses (shapes, head dims, dtypes, topk) and for what fa4num does not
        model: fp8, and a call FA4 routes to the 64-key (kb64) mainloop (``mla_1cta``).

    Examples
    --------
    >>> import ml_dtypes
    >>> rng = np.random.default_rng(0)
    >>> bf = ml_dtypes.bfloat16
    >>> qv = rng.standard_normal((1, 2, 4, 512)).astype(bf); v = rng.standard_normal((1, 256, 1, 512)).astype(bf)
    >>> q = rng.standard_normal((1, 2, 4, 64)).astype(bf); k = rng.standard_normal((1, 256, 1, 64)).astype(bf)
    >>> r = mla_forward(q, k, v, qv=qv)
    >>> r.out.shape, r.lse.shape, r.kernel, r.rescale_threshold
    ((1, 2, 4, 512), (1, 2, 4), 'fa4-sm100-mla-2cta', 8.0)
    """
    arrays, dt, device = _check_inputs(q, k, v, qv)
    va, qva = arrays["v"], arrays["qv"]
    has_qk = "q" in arrays
    b, sk, hk, dv = va.shape
    _, sq, h, _ = qva.shape
    g = h // hk
    gath = _check_gather(gather_kv_indices, batch=b, seqlen_q=sq, heads_kv=hk)
    sparse = gath is not None
    causal = check_bool(causal, "causal")
    requires_grad = check_bool(requires_grad, "requires_grad")
    gather_bwd_recompute_p = check_bool(gather_bwd_recompute_p, "gather_bwd_recompute_p")
    if mla_1cta is not None:
        mla_1cta = check_bool(mla_1cta, "mla_1cta")
    sink = check_learnable_sink(learnable_sink, heads=h)
    scale = check_softmax_scale(softmax_scale)
    if scale is None:
        scale = 1.0 / math.sqrt(HEAD_DIM + HEAD_DIM_V) if has_qk else 1.0 / math.sqrt(HEAD_DIM_V)
    if rescale_threshold is not None:
        config.check_option("rescale_threshold", rescale_threshold)
    # interface.py mla_fwd_rescale_threshold: the exact running max for sparse-MLA training
    thr = (0.0 if (requires_grad and sparse) else 8.0) if rescale_threshold is None else float(rescale_threshold)
    want_o_lo = requires_grad and sparse if o_lo is None else check_bool(o_lo, "o_lo")
    mainloop, why = mla_route(sparse=sparse, heads_per_kv=g, heads_kv=hk, batch=b, seqlen_q=sq,
                              requires_grad=requires_grad, gather_bwd_recompute_p=gather_bwd_recompute_p,
                              mla_1cta=mla_1cta, num_sms=num_sms)
    if mainloop == "1cta-kb64":
        raise ValueError(f"mla_1cta: FA4 runs this call on the 1-CTA 64-key mainloop "
                         f"(FlashAttentionMLAForward1CtaKb64Sm100; {why}), which fa4num does not model; pass "
                         f"mla_1cta=False (FLASH_ATTENTION_MLA_1CTA=0) for the 2-CTA kernel")
    kern = MLA_KERNELS[mainloop]
    # interface.py: pack_gqa defaults to qhead_per_kvhead > 1 (sparse: always, heads padded to the tile)
    pack = sparse or g > 1
    if not sparse and pack and kern.pack_gqa_divides and kern.cta_tile_m % g and g % kern.cta_tile_m:
        raise ValueError(f"heads per KV head ({g}) must divide {kern.cta_tile_m} or be a multiple of it for FA4's "
                         f"{kern.name} with pack-GQA (FA4 asserts it)")
    opts = config.apply_overrides(
        config.Sm100Options(tile_m=kern.cta_tile_m, tile_n=TILE_N, max_offset=0, ex2_emu_freq=0, pack_gqa=pack),
        {"gemm": gemm, "mufu_arch": mufu_arch, "rescale_threshold": thr}, kernel="mla_forward")
    model, accum = config.GEMM_IMPL[opts.gemm]
    window = _masking.resolve_window(causal)
    ctx = _Ctx(kern, opts, scale_log2_of(scale), np.float32(scale), 0.0, window, dt, model, accum, None,
               opts.mufu_arch)

    out_dt = NP_DTYPES[dt]
    o32 = np.zeros((b, sq, h, dv), np.float32)
    lse = np.full((b, sq, h), -np.inf, np.float32)
    names = ("kv_blocks", "rescale_events", "rescales_done", "p_saturated", *_ballot.COUNTERS)
    st = {n: np.zeros((b, sq, h), np.int32) for n in names}
    st["max_lag"] = np.zeros((b, sq, h), np.float32)
    masked = np.zeros((b, sq, h), np.int32)

    def keep(bi, rows_q, rows_h, o_rows, l_rows, cnt):
        o32[bi, rows_q, rows_h] = o_rows
        lse[bi, rows_q, rows_h] = l_rows
        for n, val in cnt.items():
            st[n][bi, rows_q, rows_h] = val

    for bi in range(b):
        for kvh in range(hk):
            vh = va[bi, :, kvh]
            kcat = np.concatenate([arrays["k"][bi, :, kvh], vh], axis=1) if has_qk else vh
            if sparse:
                for t in range(sq):
                    idx = gath[bi, t]
                    limit = t + 1 + sk - sq if causal else sk
                    valid = (idx >= 0) & (idx < limit)
                    masked[bi, t, :] = int(((idx >= limit) & (idx < sk)).sum())
                    take = np.where(valid, idx, 0)
                    # invalid slots are not loaded (predicated cp.async): zero rows, masked to -inf in S
                    kg = np.where(valid[:, None], kcat[take], kcat.dtype.type(0))
                    vg = np.where(valid[:, None], vh[take], vh.dtype.type(0))
                    kv = _KVBlocks(kg, vg, ctx)
                    heads = np.arange(kvh * g, (kvh + 1) * g)
                    qr = _q_rows(arrays, bi, np.full(g, t), heads, has_qk)
                    o_r, l_r, cnt = _run_mblock(qr, kv, np.full(g, t), sq=sq, sk=sk,
                                                visits=_dense_visits(0, idx.shape[0] // TILE_N), ctx=ctx,
                                                sink_rows=None if sink is None else sink[heads], key_valid=valid)
                    keep(bi, np.full(g, t), heads, o_r, l_r, cnt)
                continue
            kv = _KVBlocks(kcat, vh, ctx)
            qi = np.arange(sq)
            nvis = _masking.visible_count(qi, seqlen_q=sq, seqlen_k=sk, window=window)
            masked[bi, :, kvh * g:(kvh + 1) * g] = (sk - nvis)[:, None]
            for grp in head_groups(kvh, qhead_per_kvhead=g, pack_gqa=pack):
                ng = len(grp)
                rows_q, rows_h = np.repeat(qi, ng), np.tile(np.asarray(grp), sq)
                for mb in range(-(-(sq * ng) // opts.tile_m)):
                    rs = slice(mb * opts.tile_m, min((mb + 1) * opts.tile_m, sq * ng))
                    (lo, hi), = split_ranges(mb, opts=opts, seqlen_q=sq, seqlen_k=sk, window=window, group=ng,
                                             num_splits=1)
                    qr = _q_rows(arrays, bi, rows_q[rs], rows_h[rs], has_qk)
                    o_r, l_r, cnt = _run_mblock(qr, kv, rows_q[rs], sq=sq, sk=sk, visits=_dense_visits(lo, hi),
                                                ctx=ctx,
                                                sink_rows=None if sink is None else sink[rows_h[rs]],
                                                row0=rs.start)
                    keep(bi, rows_q[rs], rows_h[rs], o_r, l_r, cnt)

    out = cast_out(o32, out_dt)
    lo = None
    if want_o_lo:
        # correction_loop's residual pass: (o_f32 - f32(bf16(o_f32))) is exact in fp32, then one RN to bf16
        lo = cast_out((o32 - out.astype(np.float32)).astype(np.float32), out_dt)
    share = np.zeros((b, sq, h), np.float32) if sink is None else \
        sink_shares(sink, lse.transpose(0, 2, 1)).transpose(0, 2, 1)
    stats = AttentionStats(kv_blocks=st["kv_blocks"], rescale_events=st["rescale_events"],
                           rescales_done=st["rescales_done"], max_lag=st["max_lag"],
                           exp2_emulated=np.zeros((b, sq, h), np.int32),
                           exp2_mufu=(st["kv_blocks"] * TILE_N).astype(np.int32), p_saturated=st["p_saturated"],
                           masked_by_window=masked, sink_share=share, gemm=gemm,
                           **{n: st[n] for n in _ballot.COUNTERS})
    if device is not None:
        import torch
        tdt = torch.bfloat16 if dt == "bfloat16" else torch.float16
        out = torch.from_numpy(out.view(np.int16)).view(tdt).to(device)
        lse = torch.from_numpy(lse).to(device)
        lo = None if lo is None else torch.from_numpy(lo.view(np.int16)).view(tdt).to(device)
    return MlaResult(out, lse, stats, lo, kern.name, why, thr, scale, opts)


def _q_rows(arrays, bi, rows_q, rows_h, has_qk):
    """[q | qv] rows of the tile: the A operand of the one chain of K steps QK then QvV_0, QvV_1."""
    qv = arrays["qv"][bi, rows_q, rows_h]
    return np.concatenate([arrays["q"][bi, rows_q, rows_h], qv], axis=1) if has_qk else qv


def mla_fp64(q=None, k=None, v=None, *, qv=None, gather_kv_indices=None, softmax_scale=None, causal=False,
             learnable_sink=None):
    """The float64 reference of :func:`mla_forward`: softmax(scale * (q k^T + qv v^T)) v from the exact input values,
    each row over its visible keys (dense: causal bottom-right; sparse: the gathered slots that are valid, a
    duplicated index counted once per slot), and its natural-log LSE.

    Parameters
    ----------
    q, k, v, qv, gather_kv_indices, softmax_scale, causal, learnable_sink
        As :func:`mla_forward`.

    Returns
    -------
    (out, lse) : float64 (batch, seqlen_q, heads, 512), float64 (batch, seqlen_q, heads)

    Examples
    --------
    >>> import ml_dtypes
    >>> qv = np.zeros((1, 1, 1, 512), np.float32); v = np.ones((1, 128, 1, 512), np.float32)
    >>> out, lse = mla_fp64(None, None, v.astype(ml_dtypes.bfloat16), qv=qv.astype(ml_dtypes.bfloat16))
    >>> float(out[0, 0, 0, 0]), round(float(lse[0, 0, 0]), 6)
    (1.0, 4.85203)
    """
    arrays, dt, _ = _check_inputs(q, k, v, qv)
    f = {n: a.astype(np.float64) for n, a in arrays.items()}
    b, sk, hk, _ = f["v"].shape
    _, sq, h, _ = f["qv"].shape
    g = h // hk
    gath = _check_gather(gather_kv_indices, batch=b, seqlen_q=sq, heads_kv=hk)
    causal = check_bool(causal, "causal")
    sink = check_learnable_sink(learnable_sink, heads=h)
    scale = check_softmax_scale(softmax_scale)
    if scale is None:
        scale = 1.0 / math.sqrt(HEAD_DIM + HEAD_DIM_V) if "q" in f else 1.0 / math.sqrt(HEAD_DIM_V)
    scale = float(np.float32(scale))    # the kernel receives a Float32
    # q heads grouped by KV head (b, sq, hk, g, d): no copy of K/V per q head
    grp = {n: f[n].reshape(b, sq, hk, g, -1) for n in ("q", "qv") if n in f}
    s = np.einsum("bikgd,bjkd->bkgij", grp["qv"], f["v"])
    if "q" in f:
        s = s + np.einsum("bikgd,bjkd->bkgij", grp["q"], f["k"])
    s = s * scale                                                # (b, hk, g, sq, keys)
    if gath is None:
        vis = _masking.visible(np.arange(sq)[:, None], np.arange(sk)[None, :], seqlen_q=sq, seqlen_k=sk,
                               window=_masking.resolve_window(causal))
        s = np.where(vis, s, -np.inf)
    else:
        limit = (np.arange(sq) + 1 + sk - sq)[None, :, None] if causal else sk
        valid = (gath >= 0) & (gath < limit)                     # (b, sq, topk)
        take = np.where(valid, gath, 0)
        s = np.take_along_axis(s, np.broadcast_to(take[:, None, None], s.shape[:3] + take.shape[1:]), axis=4)
        s = np.where(valid[:, None, None], s, -np.inf)
    sink_b = None if sink is None else sink.reshape(1, hk, g, 1, 1)
    m = s.max(axis=-1, keepdims=True, initial=-np.inf)
    if sink is not None:
        m = np.maximum(m, sink_b)
    m_safe = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(s - m_safe)
    z = e.sum(axis=-1, keepdims=True)
    if sink is not None:
        z = z + np.exp(sink_b - m_safe)
    p = np.where(z > 0, e / np.where(z > 0, z, 1.0), 0.0)
    if gath is None:
        out = np.einsum("bkgij,bjkd->bikgd", p, f["v"])
    else:
        vals = f["v"][np.arange(b)[:, None, None], take]         # (b, sq, topk, hk, 512): hk == 1
        out = np.einsum("bkgij,bijkd->bikgd", p, vals)
    with np.errstate(divide="ignore"):
        lse = np.where(z[..., 0] > 0, m_safe[..., 0] + np.log(z[..., 0]), -np.inf)   # (b, hk, g, sq)
    return out.reshape(b, sq, h, -1), lse.transpose(0, 3, 1, 2).reshape(b, sq, h)


def peaked_rows(tokens: int = 4, heads: int = 64, blocks: int = 2, *, delta=(4.0, 6.0), background=(-12.0, -4.0),
                noise: float = 0.25, seed: int = 0, dtype="bfloat16") -> dict:
    """The stale-max family for MLA (after the bounds' family, docs/bounds.md section 5.9): rows whose one peak key
    lies ``delta`` log2 units above the row max of the first block the kernel visits, so that a threshold of 8
    keeps the stale max and casts the peak's P = 2^delta to bf16, where threshold 0 rescales and casts it as 1.

    With ``softmax_scale`` ln 2 (in the returned dict) scores are in log2 units. The rope part carries the
    structure: q[..., 0] = 1 and q[..., 1] = delta per row (U(delta), one per query token and head); key j has
    k[j, 0] = its level, U(background) for every key but two: the first key of the last block (visited first) at
    0, the row max of that block, and one peak key in another block at level 0 with k[peak, 1] = 1 (score =
    delta). The latent part adds N(0, noise^2) to every score (qv ~ N(0, noise^2 / 512), v ~ N(0, 1), which is also
    the value). One KV head; ``gather_kv_indices`` = the keys in order (sparse MLA over all of them).

    Parameters
    ----------
    tokens, heads : int
        Query tokens (seqlen_q) and heads.
    blocks : int
        KV blocks of 128 keys (>= 2).
    delta, background : (float, float)
        Ranges of the peak height above the first block's max and of the other keys' levels (log2 units).
    noise : float
        Standard deviation of the latent part of the scores (log2 units).
    seed : int
    dtype : str
        "bfloat16" or "float16".

    Returns
    -------
    dict
        q, k, v, qv (FA4's MLA layouts), gather_kv_indices, softmax_scale, peak (the peak key's index).

    Examples
    --------
    >>> c = peaked_rows(tokens=1, heads=2, blocks=2)
    >>> c["q"].shape, c["v"].shape, c["gather_kv_indices"].shape, c["peak"] < 128
    ((1, 1, 2, 64), (1, 256, 1, 512), (1, 1, 256), True)
    """
    if blocks < 2:
        raise ValueError(f"blocks must be >= 2 (a first block and one holding the peak), got {blocks}")
    if dtype not in DTYPES_MLA:
        raise ValueError(f"dtype must be one of {DTYPES_MLA}, got {dtype!r}")
    rng = np.random.default_rng(seed)
    n = blocks * TILE_N
    q = np.zeros((1, tokens, heads, HEAD_DIM), np.float32)
    q[..., 0] = 1.0
    q[..., 1] = rng.uniform(*delta, (tokens, heads))
    k = np.zeros((1, n, 1, HEAD_DIM), np.float32)
    k[0, :, 0, 0] = rng.uniform(*background, n)
    k[0, (blocks - 1) * TILE_N, 0, 0] = 0.0
    peak = int(rng.integers(0, (blocks - 1) * TILE_N))
    k[0, peak, 0, :2] = 0.0, 1.0
    v = rng.standard_normal((1, n, 1, HEAD_DIM_V), dtype=np.float32)
    qv = rng.standard_normal((1, tokens, heads, HEAD_DIM_V), dtype=np.float32) * np.float32(noise / math.sqrt(512))
    dt = NP_DTYPES[dtype]
    gather = np.broadcast_to(np.arange(n, dtype=np.int32), (1, tokens, n)).copy()
    return {"q": q.astype(dt), "k": k.astype(dt), "v": v.astype(dt), "qv": qv.astype(dt),
            "gather_kv_indices": gather, "softmax_scale": math.log(2), "peak": peak}


def predicted_gain(case: dict, ref, lse) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The gain error the stale max predicts on a :func:`peaked_rows` case, to first order: P V takes the peak's
    P = 2^delta rounded to bf16 (relative error e = bf16(2^delta) / 2^delta - 1) while the fp32 row sum takes it
    unrounded, so out - ref = e w v_peak and the row's least-squares gain error is e w <v_peak, ref> / <ref, ref>
    (w: the peak's softmax share; about e on rows the peak dominates). delta is the peak's fp64 score above the
    max of the first block visited (the last), in log2 units.

    Parameters
    ----------
    case : dict
        From :func:`peaked_rows`.
    ref, lse : float64 arrays
        :func:`mla_fp64` of the case.

    Returns
    -------
    (gain, delta, w) : float64 arrays of shape (batch, seqlen_q, heads)

    Examples
    --------
    >>> c = peaked_rows(tokens=1, heads=2)
    >>> ref, lse = mla_fp64(c["q"], c["k"], c["v"], qv=c["qv"], softmax_scale=c["softmax_scale"])
    >>> g, delta, w = predicted_gain(c, ref, lse)
    >>> g.shape, bool((abs(g) < 2 ** -7).all() and (delta > 3).all() and (w > 0.5).all())
    ((1, 1, 2), True)
    """
    f = {n: case[n].astype(np.float64) for n in ("q", "k", "v", "qv")}
    s = (np.einsum("bihd,bjd->bihj", f["q"], f["k"][:, :, 0])
         + np.einsum("bihd,bjd->bihj", f["qv"], f["v"][:, :, 0])) * case["softmax_scale"]
    peak = case["peak"]
    delta = (s[..., peak] - s[..., s.shape[-1] - TILE_N:].max(-1)) / math.log(2)
    p = 2.0 ** delta
    e = p.astype(np.float32).astype(case["v"].dtype).astype(np.float64) / p - 1
    w = np.exp(s[..., peak] - lse)
    v_peak = f["v"][0, peak, 0]
    return e * w * (ref @ v_peak) / (ref * ref).sum(-1), delta, w


__all__ = ["mla_forward", "mla_fp64", "peaked_rows", "predicted_gain", "mla_route", "MlaResult", "MlaKernel", "MLA_KERNELS", "MAINLOOPS",
           "HEAD_DIM", "HEAD_DIM_V", "TILE_N"]
