"""Runners for real attention kernels: FA4 (package flash-attn-4) and torch's SDPA back ends.

Each runner takes q, k, v as torch tensors in FA4's layout (batch, seqlen, heads, head_dim) and returns the
kernel's own output and LSE (natural log, float32, (batch, heads, seqlen_q)), with timings taken after a warm-up:
CUDA events on a GPU (median of the repeats), ``time.perf_counter`` on the CPU. ``capture`` runs several back
ends on one seeded problem and saves inputs' spec, outputs and LSE bits, timings, errors against fp64 attention
and provenance, so CPU tests and experiments can use them.

Back ends:

- ``"fa4"``: ``flash_attn.cute.flash_attn_func(..., return_lse=True)`` (SM90 path on Hopper, SM100 on Blackwell).
- ``"flash"``, ``"efficient"``, ``"cudnn"``: torch's fused kernels through their aten entry points, which return
  the log-sum-exp the public ``scaled_dot_product_attention`` hides (``"flash"`` on a CPU is torch's CPU flash
  kernel). They take (batch, heads, seqlen, head_dim); k and v heads are repeated for GQA/MQA.
- ``"math"``: torch's reference composition (``SDPBackend.MATH``); it returns no LSE, so the LSE is computed
  from the same inputs in float32 with ``torch.logsumexp``.

torch's ``is_causal`` aligns the mask top-left, FA4 bottom-right: they agree only when seqlen_q == seqlen_k, so a
causal problem with different lengths is refused for the SDPA back ends rather than silently compared.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field

BACKENDS = ("fa4", "flash", "efficient", "cudnn", "math")


@dataclass
class KernelRun:
    """One back end on one problem: out (q's layout and dtype), lse (float32, (batch, heads, seqlen_q))."""
    backend: str
    out: object
    lse: object
    times_ms: list = field(default_factory=list)

    @property
    def median_ms(self) -> float | None:
        return statistics.median(self.times_ms) if self.times_ms else None


def _check(q, k, v, backend, causal):
    import torch
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.ndim != 4:
            raise ValueError(f"{name} must be a 4-d torch tensor (batch, seqlen, heads, head_dim)")
        if t.dtype not in (torch.bfloat16, torch.float16):
            raise ValueError(f"{name} dtype must be torch.bfloat16 or torch.float16, got {t.dtype}")
    if k.shape != v.shape or q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise ValueError(f"k and v must have the shape (batch, seqlen_k, heads_kv, head_dim) of q's batch and "
                         f"head_dim; got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if q.shape[2] % k.shape[2]:
        raise ValueError(f"q heads ({q.shape[2]}) must be a multiple of k/v heads ({k.shape[2]})")
    if backend != "fa4" and causal and q.shape[1] != k.shape[1]:
        raise ValueError("causal with seqlen_q != seqlen_k: torch's SDPA aligns the causal mask top-left and FA4 "
                         "bottom-right, so backend must be 'fa4' for this problem")
    if backend in ("efficient", "cudnn", "fa4") and q.device.type != "cuda":
        raise ValueError(f"backend {backend!r} needs CUDA tensors; on the CPU use 'flash' or 'math'")


def _sdpa_layout(q, k, v):
    rep = q.shape[2] // k.shape[2]
    q_, k_, v_ = (t.transpose(1, 2) for t in (q, k, v))
    if rep > 1:
        k_, v_ = k_.repeat_interleave(rep, dim=1), v_.repeat_interleave(rep, dim=1)
    return q_.contiguous(), k_.contiguous(), v_.contiguous()


def _call(q, k, v, backend, scale, causal):
    """(out in FA4's layout, lse (batch, heads, seqlen_q) float32) from one launch."""
    import torch
    aten = torch.ops.aten
    sq = q.shape[1]
    if backend == "fa4":
        from flash_attn.cute import flash_attn_func
        out, lse = flash_attn_func(q, k, v, softmax_scale=scale, causal=causal, return_lse=True)
        return out, lse.float()
    qs, ks, vs = _sdpa_layout(q, k, v)
    if backend == "flash":
        if q.device.type == "cuda":
            r = aten._scaled_dot_product_flash_attention(qs, ks, vs, 0.0, causal, False, scale=scale)
        else:
            r = aten._scaled_dot_product_flash_attention_for_cpu(qs, ks, vs, 0.0, causal, scale=scale)
        out, lse = r[0], r[1]
    elif backend == "efficient":
        out, lse = aten._scaled_dot_product_efficient_attention(qs, ks, vs, None, True, 0.0, causal,
                                                                scale=scale)[:2]
    elif backend == "cudnn":
        out, lse = aten._scaled_dot_product_cudnn_attention(qs, ks, vs, None, True, 0.0, causal, False,
                                                            scale=scale)[:2]
    else:  # math
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel(SDPBackend.MATH):
            out = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=causal, scale=scale)
        s = (qs.float() @ ks.float().transpose(-1, -2)) * scale
        if causal:
            s = s.masked_fill(torch.ones(sq, ks.shape[2], dtype=torch.bool, device=s.device).triu(1), float("-inf"))
        lse = torch.logsumexp(s, dim=-1)
    # efficient attention pads the LSE's last axis to a multiple of 32; cudnn adds a trailing axis
    lse = lse.reshape(lse.shape[0], lse.shape[1], -1)[..., :sq].float()
    return out.transpose(1, 2).contiguous(), lse


def run_attention(q, k, v, *, backend: str, softmax_scale: float | None = None, causal: bool = False,
                  warmup: int = 3, repeats: int = 10) -> KernelRun:
    """Run one real attention back end on q, k, v; its out, LSE and per-launch times in ms.

    The first call's results are kept; then ``warmup`` untimed and ``repeats`` timed launches (CUDA events on a
    GPU, ``time.perf_counter`` on the CPU).

    Parameters
    ----------
    q, k, v : torch tensors, bfloat16 or float16, FA4's layout (batch, seqlen, heads, head_dim)
        k and v share a shape; q's heads a multiple of k's (GQA).
    backend : {"fa4", "flash", "efficient", "cudnn", "math"}
        "fa4", "efficient" and "cudnn" need CUDA tensors; "flash" and "math" also run on the CPU.
    softmax_scale : float, optional
        Default 1/sqrt(head_dim).
    causal : bool
        Bottom-right aligned for "fa4"; the SDPA back ends refuse causal with seqlen_q != seqlen_k.
    warmup, repeats : int
        >= 0.

    Returns
    -------
    KernelRun
        .backend, .out (q's layout and dtype), .lse (float32 (batch, heads, seqlen_q), natural log), .times_ms
        (list of repeats floats; .median_ms).

    Raises
    ------
    ValueError
        For an unknown back end, wrong dtypes or shapes, a back end that needs CUDA on CPU tensors, a top-left /
        bottom-right causal mismatch, negative warmup / repeats, or a non-positive softmax_scale.

    Examples
    --------
    >>> import torch
    >>> q = torch.zeros(1, 8, 2, 16, dtype=torch.bfloat16)
    >>> r = run_attention(q, q, q, backend="math", warmup=0, repeats=1)
    >>> tuple(r.out.shape), r.out.dtype, tuple(r.lse.shape), round(float(r.lse[0, 0, 0]), 4), len(r.times_ms)
    ((1, 8, 2, 16), torch.bfloat16, (1, 2, 8), 2.0794, 1)
    """
    import torch
    _check(q, k, v, backend, causal)
    if warmup < 0 or repeats < 0:
        raise ValueError(f"warmup and repeats must be >= 0, got {warmup} and {repeats}")
    scale = 1.0 / math.sqrt(q.shape[3]) if softmax_scale is None else float(softmax_scale)
    if not (scale > 0 and math.isfinite(scale)):
        raise ValueError(f"softmax_scale must be a positive finite number, got {softmax_scale!r}")
    cuda = q.device.type == "cuda"
    out, lse = _call(q, k, v, backend, scale, causal)
    for _ in range(warmup):
        _call(q, k, v, backend, scale, causal)
    times = []
    for _ in range(repeats):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            _call(q, k, v, backend, scale, causal)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t = time.perf_counter()
            _call(q, k, v, backend, scale, causal)
            times.append(1e3 * (time.perf_counter() - t))
    return KernelRun(backend, out, lse, times)


def capture(spec, *, backends=BACKENDS, device: str = "cuda", warmup: int = 3, repeats: int = 10,
            out_path=None) -> dict:
    """Run ``backends`` on the seeded problem ``spec`` (fa4num.attention.inputs.CaseSpec) and return (and, with
    ``out_path``, save as .npz plus .json) every back end's out bits, LSE, median time, errors against fp64
    attention, and provenance. A back end that cannot run here is recorded with its error, not skipped."""
    import json
    from pathlib import Path

    import numpy as np
    import torch

    from fa4num.attention import reference
    from fa4num.attention.inputs import make_inputs

    from . import run_provenance

    q, k, v = make_inputs(spec)
    tdt = torch.bfloat16 if spec.dtype == "bfloat16" else torch.float16
    qt, kt, vt = (torch.from_numpy(a.view(np.int16)).view(tdt).to(device) for a in (q, k, v))
    out64, lse64 = reference.attention_fp64(q, k, v, softmax_scale=spec.softmax_scale, causal=spec.causal)
    record = {"spec": spec.as_dict(), "device": device, "runs": {},
              "provenance": run_provenance(kind="attention_capture")}
    arrays = {}
    for backend in backends:
        try:
            r = run_attention(qt, kt, vt, backend=backend, softmax_scale=spec.softmax_scale, causal=spec.causal,
                              warmup=warmup, repeats=repeats)
        except Exception as exc:  # noqa: BLE001 - a missing package or unsupported shape is data here
            record["runs"][backend] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
            continue
        out = r.out.detach().cpu()
        lse = r.lse.detach().cpu().numpy()
        m = reference.metrics(out.float().numpy(), out64)
        record["runs"][backend] = {"median_ms": r.median_ms, "times_ms": r.times_ms, "metrics": m.as_dict(),
                                   "lse_max_abs_err": float(np.nanmax(np.abs(lse - lse64)))}
        arrays[f"{backend}.out_bits"] = out.view(torch.int16).numpy().view(np.uint16)
        arrays[f"{backend}.lse"] = lse
    if out_path is not None:
        out_path = Path(out_path)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(out_path.with_suffix(".npz"), **arrays)
        out_path.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
    record["arrays"] = arrays
    return record
