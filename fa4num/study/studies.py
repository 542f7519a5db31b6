"""Study functions: each takes one configuration as keyword arguments and returns a dict of scalar metrics.

A grid names one of ``STUDIES`` or any importable ``"package.module:function"``. A function's ``version``
attribute enters the task keys: raise it when the function's results change, and reruns recompute.

- :func:`skip_rate`: FA4 SM100's lazy rescale at one threshold on one input (block maxima, any length).
- :func:`error_budget`: output and LSE error against fp64 of FA4's SM100 forward with one knob changed.
- :func:`echo`: returns its configuration (tests a runner or a cluster without computing anything).
"""
from __future__ import annotations

import importlib
import math

import numpy as np

from fa4num.attention import KERNELS

STUDIES = {
    "skip_rate": "fa4num.study.studies:skip_rate",
    "error_budget": "fa4num.study.studies:error_budget",
    "echo": "fa4num.study.studies:echo",
}


def resolve_study(name: str):
    """The function a grid's ``study`` names (a STUDIES entry or "module:function")."""
    ref = STUDIES.get(name, name)
    mod, sep, fn = ref.partition(":")
    if not sep:
        raise ValueError(f"study must be one of {sorted(STUDIES)} or 'package.module:function', got {name!r}")
    try:
        return getattr(importlib.import_module(mod), fn)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"study {name!r}: cannot import {ref} ({exc})") from exc


def study_version(name: str) -> int:
    return int(getattr(resolve_study(name), "version", 1))


def echo(**config) -> dict:
    """The identity study: returns ``config`` with each key prefixed by ``echo_``.

    Examples
    --------
    >>> echo(x=1)
    {'echo_x': 1}
    """
    return {f"echo_{k}": v for k, v in config.items()}


# ------------------------------------------------------------------------------------------------------------
# skip rate

# Thresholds scanned together whenever one of them is asked for (one pass over the blocks serves them all)
SKIP_THRESHOLDS = (0.0, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 16.0)
_SCAN_CACHE: dict = {}


def _cached_scans(dist, seqlen, seed, heads, head_dim, tile_n, device, threshold):
    """Scans of one input at SKIP_THRESHOLDS (and ``threshold``), kept for the next tasks of this process."""
    from .inputs import make_study_inputs
    from .skip import block_maxima, lazy_rescale_scans, pick_device, scale_log2, sm100_rows
    dev = pick_device(device)
    key = (dist, seqlen, seed, heads, head_dim, tile_n, str(dev))
    hit = _SCAN_CACHE.get(key)
    if hit is None or float(threshold) not in hit[0]:
        _SCAN_CACHE.clear()
        inp = make_study_inputs(dist, seqlen, heads=heads, head_dim=head_dim, seed=seed, device=dev)
        bm = block_maxima(inp.q, inp.k, causal=inp.causal, tile_n=tile_n, device=dev)
        d = inp.q.shape[-1]
        thr = tuple(sorted(set(SKIP_THRESHOLDS) | {float(threshold)}))
        layout = sm100_rows(inp.q, inp.k, causal=inp.causal)
        if layout.tile_n != tile_n:
            layout = type(layout)(**{**layout.__dict__, "tile_n": tile_n})
        scans = lazy_rescale_scans(bm, scale_log2=scale_log2(1.0 / math.sqrt(d)), thresholds=thr, layout=layout)
        del bm
        hit = (scans, d, inp.causal, inp.q.shape[1], inp.k.shape[1], dev, layout)
        _SCAN_CACHE[key] = hit
    return hit


def skip_rate(*, dist: str, seqlen: int, threshold: float, seed: int = 0, heads: int = 4, head_dim: int = 128,
              tile_n: int = 128, device: str = "auto") -> dict:
    """FA4 SM100's lazy rescale on one input: rescale events, rescales done and avoided, stale-max lag, and the
    skips at every granularity the kernel acts at (row, 32-row warp ballot, 128-row tile) with the O-rescale
    work in multiplies against always-rescale.

    The input is ``fa4num.study.inputs.make_study_inputs(dist, seqlen, heads=, head_dim=, seed=)`` (q and k
    of length ``seqlen``); the counts come from :func:`fa4num.study.skip.lazy_rescale_scan` over
    :func:`fa4num.study.skip.block_maxima` with softmax_scale = 1/sqrt(head_dim) (FA4's default) and
    ``rescale_threshold = threshold``, the rows in FA4 SM100's order and tiles
    (:func:`fa4num.study.skip.sm100_rows`: pack_gqa and the M tile ``fa4num.attention.plan`` resolves).

    Parameters
    ----------
    dist : str
        Input distribution of fa4num.study.inputs.make_study_inputs (e.g. "gaussian", "sink").
    seqlen : int
    threshold : float
        FA4's rescale_threshold (log2 units), finite and >= 0.
    seed, heads, head_dim : int
    tile_n : int
        Keys per KV block.
    device : str
        "cpu", "cuda" or "auto".

    Returns
    -------
    dict
        ``rows`` (query rows x heads), ``blocks_per_row`` (mean KV blocks with a visible key), ``rescale_events``
        (true max grew; threshold-0 rescales), ``rescales_done``, ``rescales_avoided`` (events - done),
        ``rescales_avoided_share`` (avoided / events; NaN without events), ``events_per_row``,
        ``done_per_row``, ``lag_mean``, ``lag_q50``, ``lag_q90``, ``lag_q99`` (per (row, block) step after the
        row's first block, upper edges of 1/64 bins), ``lag_max`` (exact), ``stale_share`` (steps with a lag > 0),
        ``row_max_lag_q50``, ``causal``, ``heads_q``, ``heads_kv``, ``head_dim_eff``, ``device_used`` (the torch device it ran on; ``device``
        is the configuration's request) and ``device_name``; the
        counters of :mod:`fa4num.softmax.ballot` (``rescale_steps``, ``rescales_{row,warp,tile}``,
        ``events_{row,warp,tile}``) and what ``fa4num.softmax.ballot.shares`` makes of them
        (``avoided_share_{g}`` against threshold 0 and ``skipped_share_{g}`` against always-rescale at each
        granularity, ``rescale_mults_{ballot,row,eager,always}``, ``skip_definition_version``), with the
        layout (``pack_gqa``, ``tile_m``).

    Raises
    ------
    ValueError
        When threshold is negative or not finite.

    Examples
    --------
    >>> r = skip_rate(dist="sink", seqlen=512, threshold=0, heads=1, head_dim=64, device="cpu")
    >>> r["rescales_avoided_share"], r["rescales_done"] == r["rescale_events"]
    (0.0, True)
    """
    if not (threshold >= 0 and math.isfinite(threshold)):
        raise ValueError(f"threshold must be a finite number >= 0, got {threshold!r}")
    from fa4num.softmax import ballot
    scans, d, causal, hq, hk, dev, layout = _cached_scans(dist, int(seqlen), int(seed), int(heads),
                                                          int(head_dim), int(tile_n), device, threshold)
    scan = scans[float(threshold)]
    ev, dn = int(scan.rescale_events.sum()), int(scan.rescales_done.sum())
    rows = scan.rescale_events.size
    steps = scan.steps
    return {
        "rows": rows, "blocks_per_row": float(scan.kv_blocks.mean()),
        "rescale_events": ev, "rescales_done": dn, "rescales_avoided": ev - dn,
        "rescales_avoided_share": (ev - dn) / ev if ev else float("nan"),
        "events_per_row": ev / rows, "done_per_row": dn / rows,
        "lag_mean": scan.lag_sum / steps if steps else float("nan"),
        "lag_q50": scan.lag_quantile(0.5), "lag_q90": scan.lag_quantile(0.9), "lag_q99": scan.lag_quantile(0.99),
        "lag_max": float(scan.max_lag.max(initial=0)),
        "stale_share": float(scan.lag_hist[1:].sum() / steps) if steps else float("nan"),
        "row_max_lag_q50": float(np.quantile(scan.max_lag, 0.5)),
        "causal": bool(causal), "heads_q": int(hq), "heads_kv": int(hk), "head_dim_eff": int(d),
        "device_used": str(dev), "device_name": _device_name(dev),
        **scan.skip_totals(), **ballot.shares(scan.skip_totals(), head_dim_v=int(d)),
        "pack_gqa": bool(layout.pack_gqa), "tile_m": int(layout.tile_m),
    }


def _device_name(dev) -> str:
    if dev.type == "cuda":
        import torch
        return torch.cuda.get_device_name(dev)
    import platform
    return platform.processor() or platform.machine()


skip_rate.version = 2    # 2: the row / warp / tile counters of fa4num.softmax.ballot, rows in the kernel's order
skip_rate.scan_together = ("threshold",)   # one input's scans serve every threshold: one worker runs them all


# ------------------------------------------------------------------------------------------------------------
# error budget

_KERNEL = "fa4-sm100"   # the kernel error_budget runs
# its softmax knobs (the kernel object's list, so a new knob needs no second list here) and the input dtype
KNOB_NAMES = KERNELS[_KERNEL].softmax_knobs + ("dtype",)


def parse_knob(knob: str) -> dict:
    """"default" -> {}; "name=value" -> {name: value} (value as int, float, bool or string).

    Examples
    --------
    >>> parse_knob("rescale_threshold=0"), parse_knob("coeffs=fa4-deg4")
    ({'rescale_threshold': 0}, {'coeffs': 'fa4-deg4'})
    """
    if knob == "default":
        return {}
    parts = {}
    for item in knob.split(","):
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or name not in KNOB_NAMES:
            raise ValueError(f"knob must be 'default' or comma-separated NAME=VALUE with NAME in {KNOB_NAMES}, "
                             f"got {knob!r}")
        text = text.strip()
        for conv in (int, float):
            try:
                parts[name] = conv(text)
                break
            except ValueError:
                continue
        else:
            parts[name] = {"true": True, "false": False}.get(text.lower(), text)
    return parts


def error_budget(*, knob: str, dist: str = "gaussian", seqlen: int = 512, seed: int = 0, heads: int = 2,
                 head_dim: int = 128, mode: str = "bitexact", q_mult: float = 1.0, kernel: str = _KERNEL,
                 device: str = "cpu") -> dict:
    """Output and LSE error of FA4's forward (SM100 by default) with one knob changed, against fp64 attention on
    the same rounded inputs.

    ``knob``: "default" (FA4's choices for the problem) or "NAME=VALUE[,NAME=VALUE]" with NAME a forward option
    (rescale_threshold, max_offset, ex2_emu_freq, ex2_emu_res, ex2_emu_start_frg, poly_degree, coeffs,
    fused_bias) or ``dtype`` (the input and P dtype: "bfloat16" or "float16"). q, k come from
    ``make_study_inputs(dist, ...)`` (times ``q_mult`` for q), v ~ N(0, 1) from the same seed. ``mode``:
    "bitexact" (tensor-core and MUFU models) or "statistical" (fp32 BLAS GEMMs and libm MUFU; the software
    exp2 stays bit-exact). ``kernel``: "fa4-sm100" or "fa4-sm90" (FA3-style: every rescale done, MUFU exp2
    only; a baseline). ``device``: "cpu" runs the CPU emulator (fp64 reference in numpy); "cuda" runs the
    bit-exact GPU twin (:func:`fa4num.attention.twin.forward`, the emulator's bits) or, in statistical mode,
    ``forward_torch``, with inputs drawn on the GPU and the fp64 reference and the metrics computed there
    (so 128k tokens fit); rows of the two devices are different samples of the same distributions.

    Parameters
    ----------
    knob : str
        "default" or "NAME=VALUE[,NAME=VALUE]" (above).
    dist : str
        Input distribution of make_study_inputs.
    seqlen, seed, heads, head_dim : int
    mode : {"bitexact", "statistical"}
    q_mult : float
        Scale of q (sharper softmax rows for larger values).
    kernel : {"fa4-sm100", "fa4-sm90"}
    device : {"cpu", "cuda"}

    Returns
    -------
    dict
        ``rel_l2``, ``max_abs`` (output vs fp64), ``lse_max_abs``, ``lse_mean_abs``, the same output errors of
        fp64 rounded once to the dtype (``floor_rel_l2``, ``floor_max_abs``), ``rel_l2_over_floor``,
        ``rescales`` (rescales the kernel did), ``rescales_warp`` (steps where a warp multiplied O),
        ``rescale_steps`` (the always-rescale work), ``exp2_emulated_share``, ``causal`` and ``device_name``.

    Raises
    ------
    ValueError
        For an unknown knob name or value, a knob dtype other than bfloat16 / float16, an unknown kernel or
        device, or device "cuda" on a machine without one.

    Examples
    --------
    >>> r = error_budget(knob="default", seqlen=128, heads=1, head_dim=64, mode="statistical")
    >>> sorted(r)[:4], r["rel_l2"] < 1e-2
    (['causal', 'device_name', 'exp2_emulated_share', 'floor_max_abs'], True)
    """
    import torch

    from fa4num.fp.dtypes import DTYPES

    from .inputs import make_study_inputs
    from .skip import pick_device
    opts = parse_knob(knob)
    dtype = opts.pop("dtype", "bfloat16")
    dts = {n: DTYPES[n].dtype for n in ("bfloat16", "float16")}
    if dtype not in dts:
        raise ValueError(f"knob dtype must be one of {tuple(dts)}, got {dtype!r}")
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {sorted(KERNELS)}, got {kernel!r}")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    dev = torch.device("cpu")
    if device == "cuda" and not _interpreted():     # under TRITON_INTERPRET=1 the twin runs on the CPU
        dev = pick_device("cuda")
        if dev.type != "cuda" or not torch.cuda.is_available():
            raise ValueError("device 'cuda': no CUDA GPU here (torch.cuda.is_available() is False)")
    inp = make_study_inputs(dist, int(seqlen), heads=int(heads), head_dim=int(head_dim), seed=int(seed),
                            device=dev)
    g = torch.Generator(device=inp.k.device)
    g.manual_seed(int(seed) * 1000 + 999)
    v32 = torch.randn(inp.k.shape, generator=g, device=inp.k.device)
    if device == "cpu":
        return _budget_cpu(inp, v32, opts, dts[dtype], kernel=kernel, mode=mode, q_mult=q_mult)
    return _budget_torch(inp, v32, opts, dtype, kernel=kernel, mode=mode, q_mult=q_mult)


def _interpreted() -> bool:
    from fa4num.attention.triton_backend import interpreted
    return interpreted()


def _budget_row(m_rel, m_max, f_rel, f_max, lse_err, st, causal, device_name) -> dict:
    n_emu, n_mufu = int(st.exp2_emulated.sum()), int(st.exp2_mufu.sum())
    return {"rel_l2": m_rel, "max_abs": m_max, "lse_max_abs": float(lse_err.max(initial=0)),
            "lse_mean_abs": float(lse_err.mean()) if lse_err.size else float("nan"),
            "floor_rel_l2": f_rel, "floor_max_abs": f_max,
            "rel_l2_over_floor": m_rel / f_rel if f_rel else float("nan"),
            "rescales": int(st.rescales_done.sum()),
            "rescales_warp": int(st.rescales_warp.sum()) if st.rescales_warp is not None else -1,
            "rescale_steps": int(st.rescale_steps.sum()) if st.rescale_steps is not None else -1,
            "exp2_emulated_share": n_emu / max(1, n_emu + n_mufu), "causal": bool(causal),
            "device_name": device_name}


def _budget_cpu(inp, v32, opts, np_dtype, *, kernel, mode, q_mult) -> dict:
    """The CPU emulator and the numpy fp64 reference."""
    from fa4num.attention import forward
    from fa4num.attention import reference as ref
    q = (inp.q.float() * float(q_mult)).numpy()[None]
    k = inp.k.float().numpy()[None]
    v = v32.numpy()[None]
    q, k, v = (a.astype(np_dtype) for a in (q, k, v))
    o64, lse64 = ref.attention_fp64(q, k, v, causal=inp.causal)
    res = forward(q, k, v, causal=inp.causal, kernel=kernel, mode=mode, **opts)
    m = ref.metrics(res.out, o64)
    floor = ref.metrics(ref.round_once(o64, np_dtype), o64)
    lse_err = np.abs(np.asarray(res.lse, np.float64) - lse64)
    return _budget_row(m.rel_l2, m.max_abs, floor.rel_l2, floor.max_abs, lse_err[np.isfinite(lse_err)],
                       res.stats, inp.causal, "cpu")


# query rows per step of the fp64 reference on the GPU (S of 4096 x 128k float64s: 4 GiB)
_FP64_CHUNK_ROWS = 4096


def _budget_torch(inp, v32, opts, dtype, *, kernel, mode, q_mult) -> dict:
    """The GPU twin (bit-exact) or forward_torch (statistical) on inp's device; fp64 reference and metrics
    there too."""
    import torch

    from fa4num.attention import forward_torch
    from fa4num.attention import twin

    from .baselines import attention_fp64_torch
    tdt = {"bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    q = (inp.q.float() * float(q_mult))[None].to(tdt)
    k = inp.k.float()[None].to(tdt)
    v = v32[None].to(tdt)
    o64, lse64 = attention_fp64_torch(q, k, v, causal=inp.causal, chunk_rows=_FP64_CHUNK_ROWS)
    run = twin.forward if mode == "bitexact" else forward_torch
    res = run(q, k, v, causal=inp.causal, kernel=kernel, mode=mode, **opts)

    def rel_max(a):
        err = a.double() - o64
        return float(err.norm() / o64.norm()), float(err.abs().max())
    m_rel, m_max = rel_max(res.out)
    f_rel, f_max = rel_max(o64.to(tdt))
    lse_err = (res.lse.double() - lse64).abs()
    lse_err = lse_err[torch.isfinite(lse_err)].cpu().numpy()
    name = torch.cuda.get_device_name(q.device) if q.device.type == "cuda" else "cpu (Triton interpreter)"
    return _budget_row(m_rel, m_max, f_rel, f_max, lse_err, res.stats, inp.causal, name)


error_budget.version = 2
