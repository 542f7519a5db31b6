"""The statistical FA4 forward as one Triton kernel: FA4's algorithm per (M block, KV block) on the GPU, with the
per-row counters ``forward_torch`` reports (issue 15, point 4: large studies in minutes).

Each program owns ``BLOCK_M`` query rows of one head and visits that head's KV blocks of FA4's ``tile_n`` keys
right to left, as ``flash_fwd_sm90.py`` ``mma`` / ``flash_fwd_sm100.py`` ``softmax_loop`` do. Per block:
  S = Q K_blk^T (tensor cores, fp32 accumulation); softcap (``utils.create_softcap_scoremod``) before the
  mask; the window / causal / seqlen mask (``mask.py``, bottom-right aligned) -> -inf;
  the row max: SM90 keeps the running max; SM100 moves the stored max only when the block's max exceeds it by
  more than ``rescale_threshold`` (``softmax.py`` ``update_row_max``);
  P = exp2(S * scale_log2 + max_offset - m * scale_log2) (``apply_exp2_convert``): MUFU.EX2, or on SM100 FA4's
  software polynomial on the ``ex2_emu_freq`` columns (``utils.ex2_emulation_2``: clamp at -127, floor,
  Horner with FMAs, scale by 2^n); P below 2^-126 -> 0 (ex2.approx.ftz);
  row_sum = row_sum * acc + sum(P fp32); O = O * acc + (P cast to the input dtype) V_blk, fp32 accumulation.
Finalize (``Softmax.finalize`` / ``correction_loop``): the learnable sink joins the row sum, O / row_sum, LSE.
The counters follow ``AttentionStats``: rescale events (the true max grew after the row saw a key), rescales
done (the stored max moved), the largest lag of the stored max behind the true max (log2 units).

Like ``forward_torch`` this is statistical, not bit-exact: Triton's exp2 and division stand in for FA4's
instruction sequence and the tensor cores' accumulation order is the GPU's. It needs CUDA and Triton; with
``TRITON_INTERPRET=1`` the same kernel runs on the CPU (float32 operands that hold 16-bit values, P rounded to
the 16-bit dtype before the product), which is how the CPU tests check its logic against ``forward_torch``.
"""
from __future__ import annotations

import math
import os

import numpy as np

from ..softmax import scale_log2_of
from .masking import window_offsets
from ..softmax.scoremod import SCALE_LOG2_WITH_SCOREMOD

HEAD_DIMS = (16, 32, 64, 128, 256)
TILE_NS = (16, 32, 64, 128, 256)


def available() -> bool:
    """True when Triton imports (the kernel then runs on CUDA tensors, or anywhere with TRITON_INTERPRET=1).

    Parameters
    ----------
    None

    Returns
    -------
    bool
        Depends on the machine (whether the triton package is installed); nothing is compiled or launched.

    Examples
    --------
    >>> isinstance(available(), bool)   # True or False depending on whether triton is installed here
    True
    """
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def interpreted() -> bool:
    """True when Triton runs kernels in its CPU interpreter (environment variable TRITON_INTERPRET not "" or "0").

    Parameters
    ----------
    None

    Returns
    -------
    bool

    Examples
    --------
    >>> import os
    >>> saved = os.environ.pop("TRITON_INTERPRET", None)
    >>> interpreted()
    False
    >>> os.environ["TRITON_INTERPRET"] = "1"
    >>> interpreted()
    True
    >>> _ = os.environ.pop("TRITON_INTERPRET") if saved is None else os.environ.update(TRITON_INTERPRET=saved)
    """
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


# the kernel knobs this kernel runs (the rest are refused by name: fa4num.attention.kernels.Kernel.knob_refusal);
# fused_bias=False is not among them: the bias offset - m * scale_log2 is left to Triton, which contracts it
IMPLEMENTED_KNOBS = frozenset({"tile_m", "tile_n", "gemm", "mufu_arch", "pack_gqa", "use_2cta_instrs", "is_sm103",
                               "rescale_threshold", "max_offset", "ex2_emu_freq", "ex2_emu_res", "ex2_emu_start_frg",
                               "poly_degree", "coeffs"})


def supports(*, dtype: str, head_dim: int, head_dim_v: int, tile_n: int) -> bool:
    """Whether the kernel handles this case: 16-bit inputs, power-of-two head dims up to 256 and tile_n.

    ``forward_torch(backend="auto")`` uses the Triton kernel only where this is True (and on a CUDA device with
    Triton); the answer depends only on the arguments, not on the machine.

    Parameters
    ----------
    dtype : str
        The inputs' dtype name: "bfloat16" and "float16" are handled (no fp8).
    head_dim, head_dim_v : int
        Must be in HEAD_DIMS (16, 32, 64, 128, 256).
    tile_n : int
        FA4's KV block size for the case; must be in TILE_NS.

    Returns
    -------
    bool

    Examples
    --------
    >>> supports(dtype="bfloat16", head_dim=128, head_dim_v=128, tile_n=128)
    True
    >>> supports(dtype="bfloat16", head_dim=96, head_dim_v=96, tile_n=128)          # not a power of two
    False
    >>> supports(dtype="float8_e4m3fn", head_dim=128, head_dim_v=128, tile_n=128)   # fp8 runs in torch
    False
    """
    return dtype in ("bfloat16", "float16") and head_dim in HEAD_DIMS and head_dim_v in HEAD_DIMS \
        and tile_n in TILE_NS


_KERNEL = None


_RULE = None


def update_row_max_rule():
    """The kernel's lazy-rescale rule, a @triton.jit function ``(m_stored, m_blk, sl2, threshold, first) -> the
    max stored after the block`` (``fa4num.attention._triton_rule``; Triton imported only here). The Triton copy of
    :func:`fa4num.softmax.lazy.lazy_rescale`, which is the specification; tests/softmax/test_lazy_rule.py checks
    this one against it bit for bit."""
    global _RULE
    if _RULE is None:
        from ._triton_rule import update_row_max
        _RULE = update_row_max
    return _RULE


def _kernel():
    """Compile-on-first-use: the @triton.jit function (Triton imported only here)."""
    global _KERNEL
    if _KERNEL is not None:
        return _KERNEL
    import triton
    import triton.language as tl
    update_row_max_rule()     # fwd calls it as the module global _RULE (Triton's interpreter reads no closures)

    @triton.jit
    def fwd(Q, K, V, Out, Lse, Events, Done, Lag, EmuMask, Coef, Sink, Ranges,
            seqlen_q, seqlen_k, heads, rep, left, right,
            sqb, sqs, sqh, skb, sks, skh, svb, svs, svh, sob, sos, soh,
            sl2, scale, softcap, threshold, offset,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_D: tl.constexpr, HEAD_DV: tl.constexpr,
            SM100: tl.constexpr, HAS_EMU: tl.constexpr, POLY_DEG: tl.constexpr, HAS_SINK: tl.constexpr,
            SOFTCAP: tl.constexpr, P_DTYPE: tl.constexpr, UPCAST: tl.constexpr):
        pid_m = tl.program_id(0)
        pid_bh = tl.program_id(1)
        bb = pid_bh // heads
        hh = pid_bh % heads
        kvh = hh // rep
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        dq = tl.arange(0, HEAD_D)
        dv = tl.arange(0, HEAD_DV)
        cols0 = tl.arange(0, BLOCK_N)
        row_ok = rows < seqlen_q
        q = tl.load(Q + bb * sqb + hh * sqh + rows[:, None] * sqs + dq[None, :], mask=row_ok[:, None], other=0.0)
        # keys row i may see: [i + diag - left, i + diag + right] within [0, seqlen_k) (mask.py, bottom-right)
        diag = seqlen_k - seqlen_q
        first = tl.maximum(rows + diag - left, 0)
        last = tl.minimum(rows + diag + right, seqlen_k - 1)
        # this M block's KV block range and the keys every one of its rows sees (host-made table, _ranges)
        n_lo = tl.load(Ranges + pid_m * 4)
        n_hi = tl.load(Ranges + pid_m * 4 + 1)
        first_hi = tl.load(Ranges + pid_m * 4 + 2)
        last_lo = tl.load(Ranges + pid_m * 4 + 3)
        if HAS_EMU:
            emu = tl.load(EmuMask + cols0) != 0
        m = tl.full([BLOCK_M], float("-inf"), tl.float32)
        true_m = tl.full([BLOCK_M], float("-inf"), tl.float32)
        row_sum = tl.zeros([BLOCK_M], tl.float32)
        lag = tl.zeros([BLOCK_M], tl.float32)
        events = tl.zeros([BLOCK_M], tl.int32)
        done = tl.zeros([BLOCK_M], tl.int32)
        o = tl.zeros([BLOCK_M, HEAD_DV], tl.float32)
        kbase = K + bb * skb + kvh * skh
        vbase = V + bb * svb + kvh * svh
        for it in range(0, n_hi - n_lo):
            n = n_hi - 1 - it                               # right to left, as the kernels visit KV blocks
            cols = n * BLOCK_N + cols0
            col_ok = cols < seqlen_k
            k = tl.load(kbase + cols[:, None] * sks + dq[None, :], mask=col_ok[:, None], other=0.0)
            s = tl.dot(q, tl.trans(k))
            if SOFTCAP:
                # softcap * tanh(S * scale / softcap); tanh(y) = 1 - 2 / (2^(2 y log2 e) + 1)
                y = s * scale / softcap
                s = softcap * (1.0 - 2.0 / (tl.math.exp2(y * 2.8853900817779268) + 1.0))
            c0 = n * BLOCK_N
            if (c0 < first_hi) | (c0 + BLOCK_N - 1 > last_lo):
                vis = (cols[None, :] >= first[:, None]) & (cols[None, :] <= last[:, None])
                s = tl.where(vis, s, float("-inf"))
            blk = tl.max(s, 1)
            started = true_m > float("-inf")
            events += (started & (blk > true_m)).to(tl.int32)
            true_m = tl.maximum(true_m, blk)
            if SM100:
                new = _RULE(m, blk, sl2, threshold, it == 0)
            else:
                new = tl.maximum(m, blk)
            done += (started & (new > m)).to(tl.int32)
            lag = tl.maximum(lag, tl.where(new > float("-inf"), (true_m - new) * sl2, 0.0))
            m_safe = tl.where(new == float("-inf"), 0.0, new)
            acc = tl.math.exp2((m - m_safe) * sl2)
            x = s * sl2 + (offset - m_safe * sl2)[:, None]
            p = tl.math.exp2(x)
            if HAS_EMU:
                # utils.ex2_emulation_2: clamp, floor, frac, Horner (FMA), times 2^floor via the exponent field
                a = tl.maximum(x, -127.0)
                fl = tl.floor(a)
                f = a - fl
                poly = tl.zeros_like(f) + tl.load(Coef + POLY_DEG)
                for j in tl.static_range(POLY_DEG):
                    poly = tl.fma(poly, f, tl.load(Coef + POLY_DEG - 1 - j))
                scaled = (poly.to(tl.int32, bitcast=True) + (fl.to(tl.int32) << 23)).to(tl.float32, bitcast=True)
                p = tl.where(emu[None, :], scaled, p)
            p = tl.where(p < 1.1754943508222875e-38, 0.0, p)
            row_sum = row_sum * acc + tl.sum(p, 1)
            vv = tl.load(vbase + cols[:, None] * svs + dv[None, :], mask=col_ok[:, None], other=0.0)
            if UPCAST:
                # the interpreter's fp32 -> bf16 cast truncates: round to nearest even on the bits instead
                if P_DTYPE == tl.bfloat16:
                    bits = p.to(tl.int32, bitcast=True)
                    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536
                    pq = bits.to(tl.float32, bitcast=True)
                else:
                    pq = p.to(P_DTYPE).to(tl.float32)
            else:
                pq = p.to(P_DTYPE)
            o = o * acc[:, None] + tl.dot(pq, vv)
            m = new
        m_scaled = m * sl2
        if HAS_SINK:
            # softmax.py apply_learnable_sink / Softmax.finalize: the sink joins the row sum; a row that saw
            # no key takes the sink as its max
            sk2 = tl.load(Sink + hh) * 1.4426950216293335     # LOG2_E_F32 (0x3FB8AA3B)
            m_scaled = tl.where(m == float("-inf"), sk2, m_scaled)
            row_sum = row_sum + tl.math.exp2(sk2 - m_scaled + offset)
        bad = (row_sum == 0.0) | (row_sum != row_sum)
        safe = tl.where(bad, 1.0, row_sum)
        lse = (m_scaled + (tl.log2(safe) - offset)) * 0.6931471805599453
        lse = tl.where(bad, float("-inf"), lse)
        out = o * (1.0 / safe)[:, None]
        tl.store(Out + bb * sob + hh * soh + rows[:, None] * sos + dv[None, :], out.to(Out.dtype.element_ty),
                 mask=row_ok[:, None])
        stat = pid_bh * seqlen_q + rows
        tl.store(Lse + stat, lse, mask=row_ok)
        tl.store(Events + stat, events, mask=row_ok)
        tl.store(Done + stat, done, mask=row_ok)
        tl.store(Lag + stat, lag, mask=row_ok)

    _KERNEL = fwd
    return fwd


def _ranges(sq, sk, block_m, block_n, left, right) -> np.ndarray:
    """Per M block of ``block_m`` rows: (n_lo, n_hi) the KV blocks holding a key one of its rows sees, and
    (first key of its last row, last key of its first row): blocks inside that span need no mask. int32 (nm, 4).
    """
    r_lo = np.arange(0, sq, block_m, dtype=np.int64)
    r_hi = np.minimum(r_lo + block_m, sq) - 1
    diag = sk - sq

    def first(i):
        return np.maximum(i + diag - left, 0)

    def last(i):
        return np.minimum(i + diag + right, sk - 1)
    n_lo = first(r_lo) // block_n
    n_hi = np.where(last(r_hi) >= first(r_lo), last(r_hi) // block_n + 1, n_lo)
    return np.stack([n_lo, n_hi, first(r_hi), last(r_lo)], axis=1).astype(np.int32)


def dense_triton(q, k, v, *, setup, kernel, block_m: int = 128, num_warps: int = 8, num_stages: int = 3,
                 qk_descale=1.0, v_descale=1.0):
    """One batch of equal-length sequences through the Triton kernel (statistical FA4 forward).

    ``_dense``'s contract in :mod:`fa4num.attention.torch_backend`, which ``forward_torch`` calls it through. The
    launch shape (``block_m`` rows per program, ``num_warps``, ``num_stages``) changes the speed, not the result;
    the default was the fastest of those ``experiments/gpu/bench_forward_torch.py`` timed on the H200 for
    (1, 32768, 16, 128) causal.

    Parameters
    ----------
    q : torch.Tensor (b, sq, h, d), bfloat16 or float16
    k, v : torch.Tensor (b, sk, hk, d) and (b, sk, hk, d_v), on q's device (CUDA, or any with TRITON_INTERPRET=1)
    setup : Problem
        From :func:`fa4num.attention.problem.plan` (options, window, sink, softcap, softmax scale).
    kernel : fa4num.attention.kernels.Kernel
        ``setup.kernel`` (its ``lazy_rescale`` picks the softmax).
    block_m, num_warps, num_stages : int
        Triton launch shape.
    qk_descale, v_descale : float
        Must be 1.0 (the kernel takes 16-bit inputs only).

    Returns
    -------
    (out, lse, counters)
        out (b, sq, h, d_v) in q's dtype; lse (b, h, sq) float32 on q's device; counters: dict of numpy int32 /
        float32 arrays (b, h, sq): "rescale_events", "rescales_done", "max_lag", "p_saturated".

    Raises
    ------
    ValueError
        When a descale is not 1.0.
    ImportError
        When torch or Triton is missing.

    Examples
    --------
    >>> import torch
    >>> from fa4num.attention.problem import plan
    >>> q = torch.randn(1, 256, 2, 64).to(torch.bfloat16)
    >>> setup = plan(q, q, q, causal=True, kernel="fa4-sm90", mode="statistical")
    >>> supports(dtype=setup.dtype, head_dim=64, head_dim_v=64, tile_n=setup.opts.tile_n)
    True
    >>> # skipped: the launch needs a CUDA GPU with Triton (or TRITON_INTERPRET=1 set before triton is imported)
    >>> qc = q.cuda()  # doctest: +SKIP
    >>> out, lse, counters = dense_triton(qc, qc, qc, setup=setup, kernel=setup.kernel)  # doctest: +SKIP
    """
    import torch
    import triton
    import triton.language as tl
    if qk_descale != 1.0 or v_descale != 1.0:
        raise ValueError("fp8 descales are not supported by the Triton kernel (16-bit inputs only)")
    setup.refuse_flex("the Triton kernel")
    opts, w, dt = setup.opts, setup.window, setup.dtype
    b, sq, h, d = q.shape
    sk, hk, dvh = k.shape[1], k.shape[2], v.shape[3]
    sm100 = kernel.lazy_rescale
    softcap = float(setup.softcap)
    sl2 = float(SCALE_LOG2_WITH_SCOREMOD) if softcap else float(scale_log2_of(setup.softmax_scale))
    left, right = window_offsets(w, seqlen_q=sq, seqlen_k=sk)
    dev = q.device
    emu_mask = torch.zeros(opts.tile_n, dtype=torch.int32, device=dev)
    coef = torch.zeros(8, dtype=torch.float32, device=dev)
    deg = 1
    has_emu = False
    if sm100:
        from ..softmax.sm100 import emulated_columns
        from fa4num.ex2 import poly_coeffs
        emu = emulated_columns(opts.tile_n, freq=opts.ex2_emu_freq, res=opts.ex2_emu_res,
                               start_frg=opts.ex2_emu_start_frg)
        has_emu = bool(emu.any())
        emu_mask = torch.from_numpy(emu.astype(np.int32)).to(dev)
        cs = [float(c) for c in poly_coeffs(opts.poly_degree, coeffs=opts.coeffs)]
        deg = len(cs) - 1
        coef = torch.tensor(cs + [0.0] * (8 - len(cs)), dtype=torch.float32, device=dev)
    sink = torch.zeros(h, dtype=torch.float32, device=dev)
    if setup.sink is not None:
        sink = torch.from_numpy(np.asarray(setup.sink, np.float32)).to(dev)
    upcast = interpreted()
    qq, kk, vv = (x.float() if upcast else x for x in (q, k, v))
    # interpreted: O stays float32 in the kernel and torch casts it (round to nearest even)
    out = torch.empty((b, sq, h, dvh), dtype=torch.float32 if upcast else q.dtype, device=dev)
    lse = torch.empty((b, h, sq), dtype=torch.float32, device=dev)
    events = torch.empty((b, h, sq), dtype=torch.int32, device=dev)
    done = torch.empty_like(events)
    lag = torch.empty_like(lse)
    bm = max(16, min(block_m, triton.next_power_of_2(max(sq, 1))))
    grid = (triton.cdiv(sq, bm), b * h)
    p_dtype = tl.bfloat16 if dt == "bfloat16" else tl.float16
    if sq and sk:
        _kernel()[grid](qq, kk, vv, out, lse, events, done, lag, emu_mask, coef, sink,
                        torch.from_numpy(_ranges(sq, sk, bm, opts.tile_n, left, right)).to(dev),
                        sq, sk, h, h // hk, left, right,
                        qq.stride(0), qq.stride(1), qq.stride(2), kk.stride(0), kk.stride(1), kk.stride(2),
                        vv.stride(0), vv.stride(1), vv.stride(2), out.stride(0), out.stride(1), out.stride(2),
                        sl2, float(setup.softmax_scale), softcap or 1.0,
                        float(opts.rescale_threshold) if sm100 else 0.0, float(opts.max_offset) if sm100 else 0.0,
                        BLOCK_M=bm, BLOCK_N=opts.tile_n, HEAD_D=d, HEAD_DV=dvh, SM100=sm100, HAS_EMU=has_emu,
                        POLY_DEG=deg, HAS_SINK=setup.sink is not None, SOFTCAP=bool(softcap), P_DTYPE=p_dtype,
                        UPCAST=upcast, num_warps=num_warps, num_stages=num_stages)
    else:
        # seqlen 0 on either side: out = 0; LSE -inf, or the sink (interface.py)
        out.zero_()
        lse.fill_(-math.inf)
        if setup.sink is not None and sq:
            lse.copy_(sink.view(1, h, 1).expand(b, h, sq))
        events.zero_()
        done.zero_()
        lag.zero_()

    out = out.to(q.dtype)

    def host(t):
        return t.cpu().numpy()
    counters = {"rescale_events": host(events), "rescales_done": host(done), "max_lag": host(lag),
                "p_saturated": np.zeros((b, h, sq), np.int32)}
    return out, lse, counters


__all__ = ["available", "interpreted", "supports", "dense_triton", "IMPLEMENTED_KNOBS"]
