"""``forward``: FA4's attention forward pass emulated on the CPU, bit for bit.

Per (batch, head) the KV blocks are visited right to left, as ``flash_fwd_sm90.py`` ``mma`` and
``flash_fwd_sm100.py`` ``softmax_loop`` do (first the block holding seqlen_k - 1, with the seqlen mask, then
the causal-masked blocks, then the rest). Each block runs:
  S = Q K_blk^T through the tensor-core model (fa4num.hw.mma; K chunks of 16 along head_dim);
  masking: key >= seqlen_k and, with causal, key > row + seqlen_k - seqlen_q (bottom-right aligned) -> -inf;
  the softmax step of the kernel (fa4num.softmax.sm90 / sm100);
  O <- RN(O * row_scale), then O = C + P_q V_blk through the tensor-core model (C = O, chunks of 16 keys).
A block in which a row has no unmasked key changes nothing for that row (max unchanged, factor exactly 1,
zero products), so each row is processed only from the first block that holds one of its keys; this is the
same result as the kernel's tile-wide loop, and a row with no key at all gives O = 0 and LSE = -inf.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

from fa4num.hw.mma import mma_chain
from fa4num.softmax import sm90 as _sm90
from fa4num.softmax import sm100 as _sm100
from fa4num.softmax._ops import f32, scale_log2_of

from . import config

_NP_DTYPES = {"bfloat16": np.dtype(ml_dtypes.bfloat16), "float16": np.dtype(np.float16),
              "float8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn), "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2)}
_TORCH_NAMES = {"torch.bfloat16": "bfloat16", "torch.float16": "float16", "torch.float8_e4m3fn": "float8_e4m3fn",
                "torch.float8_e5m2": "float8_e5m2"}


@dataclass
class AttentionStats:
    """Per-row counters, each (batch, heads, seqlen_q) int32 (``max_lag`` float32, log2 units)."""
    kv_blocks: np.ndarray         # KV blocks the kernel's m-block loop visits for the row
    rescales: np.ndarray          # blocks where O and row_sum were multiplied by a factor != 1 (finite max)
    rescales_skipped: np.ndarray  # blocks where the max grew but the lazy rescale kept the stale max (SM100)
    max_lag: np.ndarray           # largest (true max - stored max) * scale_log2 seen
    exp2_emulated: np.ndarray     # exp2 evaluations done by the software polynomial
    exp2_mufu: np.ndarray         # exp2 evaluations done by MUFU.EX2 (row_scale ones not counted)
    p_saturated: np.ndarray       # P values above the P dtype's largest finite value (clipped by satfinite)

    def summary(self) -> dict:
        return {"kv_blocks": int(self.kv_blocks.sum()), "rescales": int(self.rescales.sum()),
                "rescales_skipped": int(self.rescales_skipped.sum()), "max_lag": float(self.max_lag.max(initial=0)),
                "exp2_emulated": int(self.exp2_emulated.sum()), "exp2_mufu": int(self.exp2_mufu.sum()),
                "p_saturated": int(self.p_saturated.sum())}


@dataclass
class AttentionResult:
    out: object          # (batch, seqlen_q, heads, head_dim), q's dtype (bf16 for fp8 inputs); numpy or torch
    lse: object          # (batch, heads, seqlen_q) float32
    stats: AttentionStats
    kernel: str
    options: object = field(repr=False)
    softmax_scale: float = 0.0


def _to_numpy(x, name: str) -> tuple[np.ndarray, object]:
    """(numpy array in an ml_dtypes/numpy dtype, torch device or None)."""
    mod = type(x).__module__
    if mod.startswith("torch"):
        import torch
        dt = _TORCH_NAMES.get(str(x.dtype))
        if dt is None:
            raise ValueError(f"{name} dtype must be one of {tuple(_TORCH_NAMES)}, got {x.dtype}")
        t = x.detach().contiguous().cpu()
        raw = t.view(torch.int16 if _NP_DTYPES[dt].itemsize == 2 else torch.uint8).numpy()
        return raw.view(_NP_DTYPES[dt]), x.device
    a = np.asarray(x)
    if a.dtype.name not in _NP_DTYPES:
        raise ValueError(f"{name} dtype must be one of {tuple(_NP_DTYPES)} (ml_dtypes for bf16/fp8), "
                         f"got {a.dtype}")
    return a, None


def _validate(q, k, v, kernel, softmax_scale):
    if kernel not in config.KERNELS:
        raise ValueError(f"kernel must be one of {config.KERNELS}, got {kernel!r}")
    for name, a in (("q", q), ("k", k), ("v", v)):
        if a.ndim != 4:
            raise ValueError(f"{name} must be 4-D (batch, seqlen, heads, head_dim), got shape {a.shape}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    dt = q.dtype.name
    allowed = config.DTYPES_SM90 if kernel == "fa4-sm90" else config.DTYPES_SM100
    if dt not in allowed:
        raise ValueError(f"dtype {dt} is not supported by kernel {kernel!r}; allowed: {allowed}")
    b, sq, h, d = q.shape
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got {k.shape} and {v.shape}")
    if k.shape[0] != b:
        raise ValueError(f"k batch {k.shape[0]} != q batch {b}")
    if k.shape[3] != d:
        raise ValueError(f"k/v head_dim {k.shape[3]} != q head_dim {d} (head_dim_v != head_dim is not emulated)")
    hk = k.shape[2]
    if hk < 1 or h % hk:
        raise ValueError(f"q heads ({h}) must be a multiple of k/v heads ({hk})")
    align = 16 // q.dtype.itemsize
    # interface.py _validate_head_dims: SM90 8..256; SM100 8..128 or exactly 256 (192 only with head_dim_v 128)
    ok = 8 <= d <= 256 if kernel == "fa4-sm90" else (8 <= d <= 128 or d == 256)
    if not ok or d % align:
        allowed = "[8, 256]" if kernel == "fa4-sm90" else "[8, 128] or 256"
        raise ValueError(f"head_dim must be in {allowed} and a multiple of {align} for {kernel} with {dt}, got {d}")
    for name, a in (("q", q), ("k", k), ("v", v)):
        if not np.isfinite(a.astype(np.float32)).all():
            raise ValueError(f"{name} contains NaN or inf; FA4 would propagate it into out/lse "
                             "(remove it, or mask those keys)")
    if softmax_scale is not None and not (math.isfinite(softmax_scale) and softmax_scale != 0):
        raise ValueError(f"softmax_scale must be a finite nonzero float, got {softmax_scale}")


def _cast_p(p: np.ndarray, dt: str) -> tuple[np.ndarray, int]:
    """P -> the input dtype the way the kernel converts it (cvt.rn; fp8 .satfinite); count saturated values."""
    limit = float(ml_dtypes.finfo(_NP_DTYPES[dt]).max)
    if dt in ("bfloat16", "float16"):
        return p.astype(_NP_DTYPES[dt]), p > limit
    from fa4num import fp
    conv = fp.to_e4m3 if dt == "float8_e4m3fn" else fp.to_e5m2
    return np.asarray(conv(p)).view(_NP_DTYPES[dt]).reshape(p.shape), p > limit


def _visited_blocks(sq, sk, h_per_kv, tile_m, tile_n, causal, pack_gqa):
    """Blocks ``BlockInfo.get_n_block_min_max`` gives each row's m-block: (h_per_kv, sq) int32."""
    nmax = -(-sk // tile_n)
    rows = np.arange(sq)[None, :] * (h_per_kv if pack_gqa else 1) + (np.arange(h_per_kv)[:, None] if pack_gqa
                                                                       else 0)
    if not causal:
        return np.full((h_per_kv, sq), nmax, np.int32)
    m_block = rows // tile_m
    m_idx_max = (m_block + 1) * tile_m
    if pack_gqa:
        m_idx_max = -(-m_idx_max // h_per_kv)
    n_idx = m_idx_max + sk - sq
    return np.clip(np.minimum(nmax, -(-n_idx // tile_n)), 0, None).astype(np.int32)


def _run_head(qh, kh, vh, *, kernel, opts, causal, sl2, dt, stats_rows):
    """One (batch, head): returns (normalised O in fp32, LSE)."""
    sq, d = qh.shape
    sk = kh.shape[0]
    tn = opts.tile_n
    dp = config.head_dim_padded(d)
    arch = "sm90" if kernel == "fa4-sm90" else "sm100"
    # BLAS mode multiplies float32 copies (exact conversions) once instead of per block
    in_dt = np.dtype(np.float32) if opts.gemm == "blas" else qh.dtype
    q_pad = np.zeros((sq, dp), in_dt)
    q_pad[:, :d] = qh
    nblk = -(-sk // tn)
    k_pad = np.zeros((nblk * tn, dp), in_dt)
    k_pad[:sk, :d] = kh
    vt_pad = np.zeros((d, nblk * tn), in_dt)
    vt_pad[:, :sk] = vh.T
    o = np.zeros((sq, d), np.float32)
    diag = sk - sq   # causal: key j is visible from row i iff j <= i + diag
    if kernel == "fa4-sm90":
        state = _sm90.Sm90State.empty(sq)
    else:
        state = _sm100.Sm100State.empty(sq)
        emu = _sm100.emulated_columns(tn, freq=opts.ex2_emu_freq, res=opts.ex2_emu_res,
                                      start_frg=opts.ex2_emu_start_frg)
    started = np.zeros(sq, bool)
    blas = opts.gemm == "blas"
    if blas:
        # statistical mode: S in one BLAS product; P V after the loop as one product of P with every block's
        # columns weighted by the product of the later blocks' row scales (the kernel rescales O instead)
        s_all = q_pad @ k_pad.T
        p_all = np.zeros((sq, nblk * tn), np.float32)
        scales = np.ones((nblk, sq), np.float32)
    for n in range(nblk - 1, -1, -1):
        c0 = n * tn
        r0 = min(max(c0 - diag, 0), sq) if causal else 0
        if r0 >= sq:
            continue
        rows = slice(r0, sq)
        s = s_all[rows, c0:c0 + tn] if blas else mma_chain(q_pad[rows], k_pad[c0:c0 + tn], model=opts.gemm,
                                                           arch=arch)
        col = c0 + np.arange(tn)
        masked = np.broadcast_to(col[None, :] >= sk, s.shape)
        if causal:
            masked = masked | (col[None, :] > (np.arange(r0, sq) + diag)[:, None])
        s = np.where(masked, np.float32(-np.inf), s)
        is_first = n == nblk - 1
        sub = _slice_state(state, rows)
        if kernel == "fa4-sm90":
            p, scale = _sm90.online_softmax(s, sub, scale_log2=sl2, is_first=is_first, arch=opts.mufu_arch,
                                            ffma_exponent=opts.ffma_exponent)
            grew = started[rows] & (scale != 1)
            stats_rows["rescales"][rows] += grew
        else:
            step = _sm100.softmax_step(s, sub, scale_log2=sl2, is_first=is_first,
                                       rescale_threshold=opts.rescale_threshold, max_offset=opts.max_offset,
                                       emulate=emu, poly_degree=opts.poly_degree, coeffs=opts.coeffs,
                                       arch=opts.mufu_arch, fused_bias=opts.fused_bias)
            p, scale = step.p, step.acc_scale
            stats_rows["rescales"][rows] += started[rows] & step.rescaled & (scale != 1)
            stats_rows["rescales_skipped"][rows] += step.skipped
            stats_rows["max_lag"][rows] = np.maximum(stats_rows["max_lag"][rows], step.lag)
        _store_state(state, sub, rows)
        started[rows] |= ~masked.all(axis=1)
        p_q, sat = _cast_p(p, dt)
        stats_rows["p_saturated"][rows] += sat.sum(axis=1).astype(np.int32)
        if blas:
            p_all[rows, c0:c0 + tn] = p_q.astype(np.float32)
            scales[n, rows] = scale
            continue
        o_rows = o[rows] * scale[:, None]
        o[rows] = mma_chain(p_q, vt_pad[:, c0:c0 + tn], o_rows, model=opts.gemm, arch=arch)
    if blas:
        # block n's P V is multiplied by the scales of every block visited after it (blocks n-1 .. 0)
        later = np.cumprod(np.vstack([np.ones((1, sq), np.float32), scales[:-1]]), axis=0, dtype=np.float32)
        p_all *= np.repeat(later.T, tn, axis=1)
        o = p_all @ vt_pad.T
    if kernel == "fa4-sm90":
        rcp, lse = _sm90.finalize(state, scale_log2=sl2, arch=opts.mufu_arch)
    else:
        rcp, lse = _sm100.finalize(state, scale_log2=sl2, max_offset=opts.max_offset, arch=opts.mufu_arch)
    return o * rcp[:, None], lse


def _slice_state(state, rows):
    return type(state)(**{k: v[rows].copy() for k, v in vars(state).items()})


def _store_state(state, sub, rows):
    for k, v in vars(sub).items():
        getattr(state, k)[rows] = v


MODES = ("bitexact", "statistical")


def _resolve_options(kernel, dt, d, causal, sq, h_per_kv, options, *, batch=1, heads=1):
    options = dict(options)
    mode = options.pop("mode", "bitexact")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if mode == "statistical":
        # GEMMs through fp32 BLAS, MUFU through numpy's libm: vectorised and fast, not bit-exact
        options = {"gemm": "blas", "mufu_arch": "libm", **options}
    if kernel == "fa4-sm90":
        tm, tn = config.sm90_tile(d, causal)
        opts = config.Sm90Options(tile_m=tm, tile_n=tn)
    else:
        opts = config.sm100_defaults(dtype=dt, head_dim=d, causal=causal, seqlen_q=sq, qhead_per_kvhead=h_per_kv,
                                     batch=batch, heads=heads,
                                     use_2cta_instrs=options.pop("use_2cta_instrs", None),
                                     is_sm103=options.pop("is_sm103", False))
    opts = config.apply_overrides(opts, options)
    if kernel == "fa4-sm100":
        if opts.coeffs is not None:
            # a polys/ entry name or explicit fp32 coefficients c0..c_deg: the degree follows from them
            from fa4num.ex2 import poly_coeffs
            coeffs = opts.coeffs
            if isinstance(coeffs, str):
                from fa4num import fit
                entry = fit.load_poly(coeffs)
                coeffs = getattr(entry, "coeffs", entry)
            coeffs = tuple(np.float32(c) for c in coeffs)
            poly_coeffs(len(coeffs) - 1, coeffs=coeffs)
            opts = config.replace(opts, coeffs=coeffs, poly_degree=len(coeffs) - 1)
        if opts.tile_n % _sm100.FRAGMENT:
            raise ValueError(f"tile_n must be a multiple of {_sm100.FRAGMENT} for fa4-sm100, got {opts.tile_n}")
        if opts.max_offset + opts.rescale_threshold >= config.LOG2_DTYPE_MAX[dt]:
            raise ValueError(f"max_offset + rescale_threshold must stay below log2(max {dt}) = "
                             f"{config.LOG2_DTYPE_MAX[dt]:.3f} (FA4 asserts this), got "
                             f"{opts.max_offset} + {opts.rescale_threshold}")
    return opts


def forward(q, k, v, *, softmax_scale=None, causal=False, kernel="fa4-sm90", **options) -> AttentionResult:
    """Emulate FA4's forward pass; returns ``AttentionResult(out, lse, stats)``.

    q: (batch, seqlen_q, heads, head_dim); k, v: (batch, seqlen_k, heads_kv, head_dim), heads % heads_kv == 0
    (GQA/MQA). numpy arrays (ml_dtypes.bfloat16, float16, ml_dtypes float8 on fa4-sm100) or torch tensors;
    the result has the input's kind (and device).
    softmax_scale: default 1/sqrt(head_dim) (interface.py), applied as Float32 (scale_log2 = RN(scale * log2 e)).
    causal: bottom-right aligned (key j visible from query i iff j <= i + seqlen_k - seqlen_q).
    kernel: "fa4-sm90" (Hopper path as the H200 runs it) or "fa4-sm100" (Blackwell path per FA4's source).
    options: ``mode`` = "bitexact" (default) or "statistical" (gemm="blas" and mufu_arch="libm": fp32 BLAS
        GEMMs and numpy exp2/rcp/log2, for large studies); knobs of both kernels: ``gemm`` ("wgmma" bit-accurate
        tensor-core model, "exact" = exact sums rounded once, "blas"), ``tile_m``, ``tile_n``, ``mufu_arch``
        ("sm90" H200 tables, or "libm"); fa4-sm90 ``ffma_exponent``; fa4-sm100
        ``rescale_threshold``, ``max_offset``, ``ex2_emu_freq``, ``ex2_emu_res``, ``ex2_emu_start_frg``,
        ``poly_degree``, ``coeffs`` (tuple or polys/ entry name), ``use_2cta_instrs`` and ``is_sm103`` (pick
        another tuning-table entry), ``fused_bias``.
    """
    qa, device = _to_numpy(q, "q")
    ka, _ = _to_numpy(k, "k")
    va, _ = _to_numpy(v, "v")
    _validate(qa, ka, va, kernel, softmax_scale)
    b, sq, h, d = qa.shape
    sk, hk = ka.shape[1], ka.shape[2]
    dt = qa.dtype.name
    h_per_kv = h // hk
    opts = _resolve_options(kernel, dt, d, causal, sq, h_per_kv, options, batch=b, heads=h)
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else float(softmax_scale)
    sl2 = scale_log2_of(scale)
    out_dt = _NP_DTYPES["bfloat16"] if dt.startswith("float8") else _NP_DTYPES[dt]
    out = np.zeros((b, sq, h, d), out_dt)
    lse = np.full((b, h, sq), -np.inf, np.float32)
    names = ("rescales", "rescales_skipped", "exp2_emulated", "exp2_mufu", "p_saturated")
    st = {n: np.zeros((b, h, sq), np.int32) for n in names}
    st["max_lag"] = np.zeros((b, h, sq), np.float32)
    pack_gqa = h_per_kv > 1
    visited = _visited_blocks(sq, sk, h_per_kv, opts.tile_m, opts.tile_n, causal, pack_gqa)
    st["kv_blocks"] = np.zeros((b, h, sq), np.int32)
    n_emu = 0
    if kernel == "fa4-sm100":
        n_emu = int(_sm100.emulated_columns(opts.tile_n, freq=opts.ex2_emu_freq, res=opts.ex2_emu_res,
                                            start_frg=opts.ex2_emu_start_frg).sum())
    for hh in range(h):
        vis = visited[hh % h_per_kv] if pack_gqa else visited[0]
        st["kv_blocks"][:, hh] = vis
        st["exp2_emulated"][:, hh] = vis * n_emu
        st["exp2_mufu"][:, hh] = vis * (opts.tile_n - n_emu)
    if sk == 0 or sq == 0:
        return _wrap(out, lse, st, kernel, opts, scale, device)
    for bb in range(b):
        for hh in range(h):
            rows = {n: st[n][bb, hh] for n in ("rescales", "rescales_skipped", "max_lag", "p_saturated")}
            o, l = _run_head(qa[bb, :, hh], ka[bb, :, hh // h_per_kv], va[bb, :, hh // h_per_kv], kernel=kernel,
                             opts=opts, causal=causal, sl2=sl2, dt=dt, stats_rows=rows)
            out[bb, :, hh] = f32(o).astype(out_dt)
            lse[bb, hh] = l
    return _wrap(out, lse, st, kernel, opts, scale, device)


def _wrap(out, lse, st, kernel, opts, scale, device):
    stats = AttentionStats(**st)
    if device is None:
        return AttentionResult(out, lse, stats, kernel, opts, scale)
    import torch
    ot = torch.from_numpy(out.view(np.int16)).view(torch.bfloat16 if out.dtype == _NP_DTYPES["bfloat16"]
                                                  else torch.float16).to(device)
    return AttentionResult(ot, torch.from_numpy(lse).to(device), stats, kernel, opts, scale)
