"""The statistical mode written in torch, so that large studies run on a GPU (or on the CPU through torch).

``forward_torch`` follows the same per-block sequence as :func:`fa4num.attention.forward` with
``mode="statistical"`` -- FA4's masking, block order, online max, lazy rescale (SM100), software-exp2 columns,
P cast, fp32 row sums and final scale -- but every (batch, head) at once on the tensors' device, with torch's
exp2/log2/reciprocal standing in for MUFU and float64 standing in for the single-rounding FMAs. It is not
bit-exact (use ``forward`` for that); it agrees with the bit-exact emulation to a few bf16 ulps.
"""
from __future__ import annotations

import math

import numpy as np

from . import config
from . import masking
from .forward import AttentionResult, AttentionStats, _resolve_options
from ..softmax._ops import scale_log2_of

_TORCH_DTYPES = ("bfloat16", "float16", "float8_e4m3fn", "float8_e5m2")
_FP8_MAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}


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


def _kv_blocks(b, h, sq, sk, rep, opts, causal):
    """KV blocks each row's M block visits (masking.n_block_range), (b, h, sq) int32."""
    w = masking.resolve_window(causal)
    g = rep if opts.pack_gqa else 1
    out = np.zeros((h, sq), np.int32)
    rows = np.arange(sq * g)
    for hh in range(h):
        packed = rows[rows % g == (hh % rep if g > 1 else 0)]
        for mb in np.unique(packed // opts.tile_m):
            lo, hi = masking.n_block_range(int(mb), tile_m=opts.tile_m, tile_n=opts.tile_n, seqlen_q=sq,
                                           seqlen_k=sk, window=w, qhead_per_kvhead_packgqa=g)
            sel = packed[packed // opts.tile_m == mb] // g
            out[hh, sel] = max(hi, lo + 1) - lo if hi > lo else 1
    return np.broadcast_to(out, (b, h, sq)).copy()


def forward_torch(q, k, v, *, softmax_scale=None, causal=False, kernel="fa4-sm90", device=None,
                  **options) -> AttentionResult:
    """Statistical FA4 forward on torch tensors (layout (batch, seqlen, heads, head_dim)); runs on ``device``
    (default: q's device). Options as :func:`fa4num.attention.forward` (``gemm`` and ``mufu_arch`` are
    fixed to "blas" and "libm" here). Returns torch tensors (out in q's dtype, bf16 for fp8; lse float32)."""
    import torch
    q, k, v = (x if isinstance(x, torch.Tensor) else torch.as_tensor(x) for x in (q, k, v))
    dev = torch.device(device) if device is not None else q.device
    dt = str(q.dtype).replace("torch.", "")
    if dt not in _TORCH_DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"q, k, v must share one dtype among {_TORCH_DTYPES}, got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.ndim != 4 or k.shape != v.shape or k.ndim != 4 or k.shape[0] != q.shape[0] or k.shape[3] != q.shape[3]:
        raise ValueError(f"q, k, v must be (batch, seqlen, heads, head_dim) with matching batch/head_dim and "
                         f"k.shape == v.shape; got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    if hk < 1 or h % hk:
        raise ValueError(f"q heads ({h}) must be a multiple of k/v heads ({hk})")
    allowed = config.DTYPES_SM90 if kernel == "fa4-sm90" else config.DTYPES_SM100
    if dt not in allowed:
        raise ValueError(f"dtype {dt} is not supported by kernel {kernel!r}; allowed: {allowed}")
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not torch.isfinite(x.float()).all():
            raise ValueError(f"{name} contains NaN or inf")
    opts = _resolve_options(kernel, dt, d, causal, sq, h // hk, {"mode": "statistical", **options}, batch=b,
                            heads=h)
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else float(softmax_scale)
    sl2 = float(scale_log2_of(scale))
    tn = opts.tile_n
    nblk = -(-sk // tn)
    rep = h // hk
    qf = q.to(dev).float().transpose(1, 2)                                     # (b, h, sq, d)
    kf = k.to(dev).float().transpose(1, 2).repeat_interleave(rep, dim=1)
    vf = v.to(dev).float().transpose(1, 2).repeat_interleave(rep, dim=1)
    s_all = torch.full((b, h, sq, nblk * tn), float("-inf"), device=dev)
    s_all[..., :sk] = qf @ kf.transpose(-1, -2)
    if causal:
        hide = torch.arange(sk, device=dev)[None, :] > (torch.arange(sq, device=dev) + sk - sq)[:, None]
        s_all[..., :sk] = s_all[..., :sk].masked_fill(hide, float("-inf"))
    emu = None
    coeffs = None
    if kernel == "fa4-sm100":
        from ..softmax.sm100 import emulated_columns
        from fa4num.ex2 import poly_coeffs
        emu = torch.from_numpy(emulated_columns(tn, freq=opts.ex2_emu_freq, res=opts.ex2_emu_res,
                                                start_frg=opts.ex2_emu_start_frg)).to(dev)
        coeffs = [float(c) for c in (opts.coeffs or poly_coeffs(opts.poly_degree))]
    p_dtype = getattr(torch, dt)
    m = torch.full((b, h, sq), float("-inf"), device=dev)
    true_m = m.clone()
    row_sum = torch.zeros((b, h, sq), device=dev)
    scales = torch.ones((nblk, b, h, sq), device=dev)
    p_all = torch.zeros_like(s_all)
    started = torch.zeros((b, h, sq), dtype=torch.bool, device=dev)
    n_done = torch.zeros((b, h, sq), dtype=torch.int32, device=dev)
    n_events = torch.zeros_like(n_done)
    n_sat = torch.zeros_like(n_done)
    lag = torch.zeros((b, h, sq), device=dev)
    for n in range(nblk - 1, -1, -1):
        s = s_all[..., n * tn:(n + 1) * tn]
        m_blk = s.amax(-1)
        m_new = torch.maximum(m, m_blk)
        n_events += (started & (m_blk > true_m)).int()
        true_m = torch.maximum(true_m, m_blk)
        m_safe = torch.where(m_new == float("-inf"), torch.zeros_like(m_new), m_new)
        acc_ = (m - m_safe) * sl2
        acc = torch.exp2(acc_)
        if kernel == "fa4-sm100" and opts.rescale_threshold > 0:
            keep = acc_ >= -opts.rescale_threshold
            m_new = torch.where(keep, m, m_new)
            m_safe = torch.where(keep, m, m_safe)
            acc = torch.where(keep, torch.ones_like(acc), acc)
        n_done += (started & (m_new > m)).int()
        m = m_new
        bias = float(opts.max_offset) - m_safe.double() * sl2 if kernel == "fa4-sm100" else -(m_safe * sl2).double()
        x = (s.double() * sl2 + bias[..., None]).float()
        p = torch.exp2(x)
        if emu is not None and bool(emu.any()):
            p[..., emu] = _ex2_emulation(x[..., emu], coeffs)
        p = torch.where(p < 2.0 ** -126, torch.zeros_like(p), p)
        row_sum = row_sum * acc + p.sum(-1)
        if dt in _FP8_MAX:
            n_sat += (p > _FP8_MAX[dt]).sum(-1).int()
            p = p.clamp(max=_FP8_MAX[dt])
        p_all[..., n * tn:(n + 1) * tn] = p.to(p_dtype).float()
        scales[n] = acc
        started |= (s > float("-inf")).any(-1)
        lag = torch.maximum(lag, torch.nan_to_num((true_m - m) * sl2, nan=0.0, posinf=0.0, neginf=0.0))
    later = torch.cumprod(torch.cat([torch.ones_like(scales[:1]), scales[:-1]]), dim=0)   # (nblk, b, h, sq)
    weights = later.permute(1, 2, 3, 0).repeat_interleave(tn, dim=-1)
    vpad = torch.zeros((b, h, nblk * tn, d), device=dev)
    vpad[:, :, :sk] = vf
    o = (p_all * weights) @ vpad
    zero_or_nan = (row_sum == 0) | torch.isnan(row_sum)
    safe = torch.where(zero_or_nan, torch.ones_like(row_sum), row_sum)
    offset = float(opts.max_offset) if kernel == "fa4-sm100" else 0.0
    lse = (m * sl2 + (torch.log2(safe) - offset)) * math.log(2.0)
    lse = torch.where(zero_or_nan, torch.full_like(lse, float("-inf")), lse)
    out_dtype = torch.bfloat16 if dt.startswith("float8") else p_dtype
    out = (o * safe.reciprocal()[..., None]).transpose(1, 2).to(out_dtype)
    kvb = _kv_blocks(b, h, sq, sk, rep, opts, causal)
    n_emu = int(emu.sum()) if emu is not None else 0
    vis = masking.visible(np.arange(sq)[:, None], np.arange(sk)[None, :], seqlen_q=sq, seqlen_k=sk,
                          window=masking.resolve_window(causal))
    hidden = np.broadcast_to((sk - vis.sum(axis=1)).astype(np.int32), (b, h, sq)).copy()
    stats = AttentionStats(kv_blocks=kvb, rescale_events=n_events.cpu().numpy(), rescales_done=n_done.cpu().numpy(),
                           max_lag=lag.cpu().numpy().astype(np.float32), exp2_emulated=kvb * n_emu,
                           exp2_mufu=kvb * (tn - n_emu), p_saturated=n_sat.cpu().numpy(), masked_by_window=hidden,
                           sink_share=np.zeros((b, h, sq), np.float32), gemm="blas")
    return AttentionResult(out, lse.float(), stats, kernel, opts, scale)
