"""The capture kit: one file that holds what a GPU computes where fa4num models it, and one check of the
emulator against such a file (``fa4num gpu capture-kit`` / ``fa4num gpu check-kit``).

Made for people with a Blackwell GPU (SM100 / SM103), where fa4num's SM100 path is emulated from FA4's source
and has never been compared with the hardware; on Hopper (SM90) the same command runs its SM90 form, so every
code path is exercised on the H200. Sections of the file:

``mufu``
    The MUFU ex2/rcp/lg2 tables of fa4num.hw.mufu measured on this GPU (the inputs of
    :func:`fa4num.gpu.mufu_build.table_inputs`, stored as fa4num.hw.tables stores them), and a sampled sweep of
    seven instruction forms (ex2/rcp/lg2 with and without ``.ftz``, ``tanh.approx.f32``) over every
    :data:`SAMPLE_STRIDE`-th fp32 bit pattern: the SHA-256 of all outputs plus :data:`SAMPLE_KEEP` explicit
    vectors for diagnosis. The check compares the tables with the table set the emulator uses and the sweep
    with fa4num.hw's models.
``mma``
    A tensor-core accumulation probe: ``D = C + A B^T`` of 128 x 64 x 256 through Triton's ``tl.dot`` (wgmma on
    SM90, tcgen05 on SM100, as the compiled PTX records) on inputs chosen to expose alignment and truncation
    (wide exponent spreads, cancellation, subnormals), checked against ``fa4num.hw.mma.mma_chain`` with the
    arch's accumulator table.
``attention``
    FA4's own forward and backward (``flash_attn.cute``) on the fixed case list :func:`kit_cases` (fp8 with
    descales, head dim 256 at the 1-CTA and the 2-CTA grid, split-KV, paged KV, learnable sinks, varlen,
    softcap with a window, GQA): output and LSE bits, dQ/dK/dV bits. Each case runs in its own try block; a
    case FA4 refuses is recorded with its message. The check re-runs each case in fa4num's emulator (the
    kernel of the GPU's arch) and counts the differing bits; the backward takes the GPU's out and LSE as its
    inputs, so it is checked on its own.

Inputs are a pure function of the stored case dicts (fa4num.attention.inputs), so the file holds no inputs, only
their SHA-256. The device is reached through a :class:`Device` object: :class:`CudaDevice` on a GPU, or
:class:`EmulatorDevice`, which writes the kit the emulator predicts (the CPU tests, and a dry run of the kit).
Not yet run on a Blackwell GPU.
"""
from __future__ import annotations

import hashlib
import json
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import ml_dtypes
import numpy as np

from ..attention import backward as emu_backward, forward as emu_forward
from ..attention.inputs import make_feature_inputs
from ..attention.kernels import KERNELS
from ..attention.problem import NP_DTYPES
from ..hw import mufu_tanh, tables as hw_tables
from ..hw.mma import ACCUMULATORS, mma_chain
from . import ptx, run_provenance
from .mufu_build import table_inputs
from .ops import OpSpec

FORMAT = "fa4num-capture-kit/1"
SAMPLE_STRIDE = 4099          # a prime: the sampled sweep visits every exponent and sign with varied mantissas
SAMPLE_KEEP = 1024            # explicit (input, output) vectors kept per form for diagnosis
MMA_SHAPE = (128, 64, 256)    # M, N, K of the probe: one Triton tile, K chained over 16 (8-bit: 8) MMA steps
TANH = ptx.Op("tanh.approx.f32", 1, "tanh.approx.f32 $0, $1;")


# ------------------------------------------------------------------------------------------------ the cases
def _case(name, call="forward", archs=None, *, b=1, sq=200, sk=300, h=2, hk=2, d=128, causal=False,
          dtype="bfloat16", seed=0, **kw) -> dict:
    c = dict(name=name, call=call, archs=archs, kind="normal", batch=b, seqlen_q=sq, seqlen_k=sk, heads=h,
             heads_kv=hk, head_dim=d, causal=causal, dtype=dtype, softmax_scale=None, q_mult=1.0, seed=seed,
             backward=call == "backward")
    c.update(kw)
    return c


def kit_cases() -> list[dict]:
    """The fixed case list of the kit (plain dicts, stored in the file).

    Each is a feature case of :func:`fa4num.attention.inputs.make_feature_inputs` plus ``call`` ("forward" or
    "backward"), ``archs`` (the arch families that run it: None for all, ``["sm100"]`` for what FA4's SM90 path
    refuses) and the kit's extras: ``fp8`` (cast q/k/v to this fp8 format), ``descale`` (seeded per (batch,
    kv head) q/k/v descales), ``page_size`` (K/V as shuffled pages of a pool with a page table) and
    ``num_splits``. Sizes are small enough for the CPU emulator (seconds per case) and a file under 8 MB.

    Returns
    -------
    list of dict

    Examples
    --------
    >>> names = [c["name"] for c in kit_cases()]
    >>> "fwd_hd256_decode_1cta" in names and "fwd_fp8_descale" in names
    True
    """
    s100 = ["sm100"]
    return [
        _case("fwd_gqa_causal", b=2, sq=200, sk=200, h=4, hk=2, causal=True, seed=1),
        _case("fwd_fp16_d64", sq=150, sk=333, d=64, dtype="float16", seed=2),
        _case("fwd_sink_causal", sq=160, sk=220, h=4, hk=4, causal=True, sink_mult=3.0, seed=3),
        _case("fwd_softcap_window", sq=190, sk=260, softcap=10.0, window_size=[64, 0], causal=False, q_mult=2.0,
              seed=4),
        _case("fwd_varlen", h=4, hk=2, sq=0, sk=0, varlen={"seqlens_q": [70, 1, 130], "seqlens_k": [90, 200, 130]},
              seed=5),
        _case("fwd_paged", b=2, sq=64, sk=256, h=2, hk=1, causal=True, page_size=64, seed=6),
        # head dim 256 decode: 2 * batch * heads against 148 SMs picks 1-CTA (b=8) or 2-CTA (b=1) on SM100
        _case("fwd_hd256_decode_1cta", b=8, sq=1, sk=512, h=16, hk=16, d=256, seed=7),
        _case("fwd_hd256_decode_2cta", b=1, sq=1, sk=512, h=16, hk=16, d=256, seed=7),
        _case("fwd_hd256_prefill", sq=300, sk=300, h=2, hk=2, d=256, seed=8),
        _case("fwd_splits3", archs=s100, sq=1, sk=1024, h=4, hk=4, num_splits=3, seed=9),
        _case("fwd_splits_heuristic", archs=s100, b=1, sq=4, sk=2048, h=2, hk=1, num_splits=0, seed=10),
        _case("fwd_fp8_e4m3", archs=s100, sq=200, sk=300, fp8="float8_e4m3fn", seed=11),
        _case("fwd_fp8_descale", archs=s100, sq=130, sk=260, h=4, hk=2, fp8="float8_e4m3fn", descale=True, seed=12),
        _case("bwd_d128_causal", "backward", sq=200, sk=200, causal=True, seed=21),
        _case("bwd_gqa_d64", "backward", sq=150, sk=230, h=4, hk=2, d=64, seed=22),
        _case("bwd_sink_d128", "backward", sq=140, sk=180, h=2, hk=2, sink_mult=2.0, seed=23),
    ]


def case_arrays(case: dict) -> dict:
    """The input arrays of a kit case: :func:`make_feature_inputs` plus the fp8 cast, the descales and the
    paged layout (a pure function of the dict)."""
    arrays = make_feature_inputs(case)
    rng = np.random.default_rng([case["seed"], 26])
    if case.get("fp8"):
        dt = NP_DTYPES[case["fp8"]]
        for n in ("q", "k", "v"):
            arrays[n] = arrays[n].astype(np.float32).astype(dt)
    if case.get("descale"):
        for n in ("q_descale", "k_descale", "v_descale"):
            arrays[n] = rng.uniform(0.5, 2.0, (case["batch"], case["heads_kv"])).astype(np.float32)
    ps = case.get("page_size")
    if ps:
        b, sk, hk, d = arrays["k"].shape
        per = sk // ps
        table = rng.permutation(b * per).astype(np.int32).reshape(b, per)
        for n in ("k", "v"):
            pool = np.zeros((b * per, ps, hk, arrays[n].shape[-1]), arrays[n].dtype)
            pool[table.reshape(-1)] = arrays[n].reshape(b * per, ps, hk, -1)
            arrays[n] = pool
        arrays["page_table"] = table
    return arrays


def call_kwargs(case: dict, arrays: dict) -> dict:
    """FA4's keyword arguments of a case: the same names for ``flash_attn.cute`` and fa4num's forward."""
    kw = dict(softmax_scale=case.get("softmax_scale"), causal=case["causal"], softcap=case.get("softcap") or 0.0)
    if case.get("window_size") is not None:
        kw["window_size"] = tuple(case["window_size"])
    if case.get("pack_gqa") is not None:
        kw["pack_gqa"] = case["pack_gqa"]
    if case.get("num_splits", 1) != 1:
        kw["num_splits"] = case["num_splits"]
    for n in ("learnable_sink", "page_table", "q_descale", "k_descale", "v_descale", "cu_seqlens_q",
              "cu_seqlens_k"):
        if n in arrays:
            kw[n] = arrays[n]
    if "cu_seqlens_q" in arrays:
        vl = case["varlen"]
        kw.update(max_seqlen_q=max(vl["seqlens_q"]), max_seqlen_k=max(vl["seqlens_k"]))
    return kw


def input_digest(arrays: dict) -> str:
    return hashlib.sha256(b"".join(np.ascontiguousarray(arrays[n]).tobytes() for n in sorted(arrays))).hexdigest()


# ----------------------------------------------------------------------------------- the instruction forms
@dataclass(frozen=True)
class Form:
    """One instruction of the sampled sweep: its PTX and fa4num's model (uint32 bits -> uint32 bits)."""
    name: str
    op: ptx.Op
    model: Callable


def mufu_forms(mufu_arch: str = "sm90") -> list[Form]:
    """The seven sampled forms, modelled with the table set ``mufu_arch``."""
    forms = []
    for fn in ("ex2", "rcp", "lg2"):
        for ftz in (True, False):
            s = OpSpec.mufu(fn, ftz=ftz, arch=mufu_arch)
            forms.append(Form(s.ptx.name, s.ptx, s.emulator))
    forms.append(Form(TANH.name, TANH, lambda x: np.asarray(mufu_tanh(x.view(np.float32), arch=mufu_arch))
                      .view(np.uint32)))
    return forms


def sample_inputs(stride: int = SAMPLE_STRIDE) -> np.ndarray:
    """Every ``stride``-th fp32 bit pattern from 0 (uint32)."""
    return (np.arange(-(-(1 << 32) // stride), dtype=np.uint64) * stride).astype(np.uint32)


def _keep_index(n: int) -> np.ndarray:
    return np.unique(np.linspace(0, n - 1, min(n, SAMPLE_KEEP)).astype(np.int64))


# ---------------------------------------------------------------------------------------------- MMA probe
def mma_probes(arch_family: str) -> list[dict]:
    """The probe inputs' specs: (name, dtype, distribution, seed); fp8 only where the accumulator table has it
    (SM90's fp8 wgmma keeps 13 bits, which fa4num.hw.mma does not model: FA4's SM90 path never runs fp8)."""
    dts = ["bfloat16", "float16"] + (["float8_e4m3fn", "float8_e5m2"] if arch_family == "sm100" else [])
    return [dict(name=f"{dt}_{dist}", dtype=dt, dist=dist, seed=i)
            for i, (dt, dist) in enumerate((dt, dist) for dt in dts for dist in ("normal", "spread", "cancel"))]


def mma_inputs(probe: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(A (M, K), B (N, K), C (M, N) float32) of a probe. ``spread``: entries scaled by 2^U(-24, 24), so
    chunks align terms far apart and truncate; ``cancel``: B's rows repeat A's first row with alternating signs
    and C cancels the leading part, so the result depends on the low bits that the fused sum keeps."""
    m, n, kdim = MMA_SHAPE
    rng = np.random.default_rng([probe["seed"], 90])
    dt = NP_DTYPES[probe["dtype"]]
    a = rng.standard_normal((m, kdim)).astype(np.float32)
    b = rng.standard_normal((n, kdim)).astype(np.float32)
    c = rng.standard_normal((m, n)).astype(np.float32)
    if probe["dist"] == "spread":
        e = 24 if dt.itemsize == 2 else 4     # fp8 saturates beyond a few binades
        a *= np.exp2(rng.integers(-e, e + 1, (m, kdim))).astype(np.float32)
        b *= np.exp2(rng.integers(-e, e + 1, (n, kdim))).astype(np.float32)
        c *= np.float32(2.0 ** e)
    elif probe["dist"] == "cancel":
        b[: n // 2] = a[0] * np.where(np.arange(kdim) % 2, 1, -1).astype(np.float32)
        c[:, : n // 2] = np.float32(-1e3)
    big = float(ml_dtypes.finfo(dt).max)
    a, b = (np.clip(x, -big, big).astype(dt) for x in (a, b))
    return a, b, c


# ----------------------------------------------------------------------------------------------- devices
class Device:
    """What the kit needs from a device. ``arch`` is "sm90", "sm100" or "sm103"; ``name`` says what it is."""
    arch: str
    name: str

    @property
    def family(self) -> str:
        """The kernel family: SM103 runs FA4's SM100 kernels (``is_sm103`` picks its tuning entries)."""
        return "sm100" if self.arch in ("sm100", "sm103") else self.arch

    def unary(self, form: Form, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def mma(self, a, b, c) -> tuple[np.ndarray, str]:
        raise NotImplementedError

    def attention(self, case: dict, arrays: dict) -> dict:
        raise NotImplementedError


def emulator_options(arch: str) -> dict:
    """fa4num knobs for a device arch: the SM103 tuning entries on SM103."""
    return {"is_sm103": True} if arch == "sm103" else {}


def kernel_for(family: str):
    """The fa4num kernel object of an arch family ("sm90", "sm100")."""
    for kern in KERNELS.values():
        if kern.arch == family:
            return kern
    raise ValueError(f"arch must be one of {sorted(k.arch for k in KERNELS.values())}, got {family!r}")


@dataclass
class EmulatorDevice(Device):
    """The emulator standing in for a GPU of ``arch``: writes the kit fa4num predicts (MUFU from the table set
    ``mufu_arch``, MMA from fa4num.hw.mma, attention from fa4num.attention)."""
    arch: str = "sm90"
    mufu_arch: str = "sm90"
    name: str = field(default="")

    def __post_init__(self):
        self.name = self.name or f"fa4num emulator ({self.arch}, MUFU tables {self.mufu_arch})"

    def unary(self, form, x):
        return np.asarray(form.model(x), np.uint32)

    def mma(self, a, b, c):
        return mma_chain(a, b, c, model="wgmma", arch=self.family), "emulated"

    def attention(self, case, arrays):
        kern = kernel_for(self.family)
        kw = call_kwargs(case, arrays)
        fw = emu_forward(arrays["q"], arrays["k"], arrays["v"], kernel=kern.name, **kw,
                         **emulator_options(self.arch))
        res = {"out": np.asarray(fw.out), "lse": np.asarray(fw.lse, np.float32)}
        if case["call"] == "backward":
            bw = emu_backward(arrays["q"], arrays["k"], arrays["v"], res["out"], arrays["dout"], res["lse"],
                              kernel=kern.name, deterministic=True, **kw)
            res.update(dq=np.asarray(bw.dq), dk=np.asarray(bw.dk), dv=np.asarray(bw.dv))
        return res


class CudaDevice(Device):
    """The CUDA GPU at hand: PTX through Triton (fa4num.gpu.kernels), ``tl.dot`` for the MMA probe, FA4's
    kernels through ``flash_attn.cute``."""

    def __init__(self):
        from . import require_gpu
        require_gpu()
        import torch
        major, minor = torch.cuda.get_device_capability(0)
        self.arch = {9: "sm90", 10: "sm103" if minor == 3 else "sm100", 11: "sm100"}.get(major, f"sm{major}{minor}")
        self.name = f"{torch.cuda.get_device_name(0)} (sm_{major}{minor})"

    def unary(self, form, x):
        from .kernels import run, to_numpy
        return to_numpy(run(form.op, x))

    def mma(self, a, b, c):
        import torch

        from ._kit_mma import probe
        return probe(a, b, c, torch)

    def attention(self, case, arrays):
        import torch
        return _fa4_call(case, arrays, torch)


def _torch_in(a, torch):
    name = a.dtype.name
    if name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        view = {"bfloat16": torch.int16}.get(name, torch.uint8)
        t = torch.from_numpy(np.ascontiguousarray(a).view(np.int16 if name == "bfloat16" else np.uint8))
        return t.view(view).view(getattr(torch, name)).cuda()
    return torch.from_numpy(np.ascontiguousarray(a)).cuda()


def _np_out(t, torch) -> np.ndarray:
    t = t.detach().contiguous()
    if t.dtype == torch.float32:
        return t.cpu().numpy()
    width = {1: torch.uint8, 2: torch.int16}[t.element_size()]
    raw = t.view(width).cpu().numpy()
    return raw.view(NP_DTYPES[str(t.dtype).split(".")[1]])


def _fa4_call(case, arrays, torch) -> dict:
    """FA4's forward (and backward through autograd, ``deterministic=True``) on one case."""
    from flash_attn.cute import flash_attn_func, flash_attn_varlen_func
    from flash_attn.cute.interface import _flash_attn_fwd
    t = {n: _torch_in(a, torch) for n, a in arrays.items()}
    grad = case["call"] == "backward"
    if grad:
        for n in ("q", "k", "v"):
            t[n].requires_grad_(True)
    kw = {n: (t[n] if isinstance(v, np.ndarray) else v) for n, v in call_kwargs(case, arrays).items()}
    if "q_descale" in kw:
        # descales are not in the public functions' signatures: the internal forward takes them
        left, right = kw.pop("window_size", (None, None))
        out, lse = _flash_attn_fwd(t["q"], t["k"], t["v"], window_size_left=left, window_size_right=right,
                                   return_lse=True, **kw)[:2]
    elif "page_table" in kw or "cu_seqlens_q" in kw:
        out, lse = flash_attn_varlen_func(t["q"], t["k"], t["v"], return_lse=True, deterministic=True, **kw)
    else:
        out, lse = flash_attn_func(t["q"], t["k"], t["v"], return_lse=True, deterministic=True, **kw)
    res = {"out": _np_out(out, torch), "lse": _np_out(lse.float(), torch)}
    if grad:
        dq, dk, dv = torch.autograd.grad(out, (t["q"], t["k"], t["v"]), t["dout"])
        res.update(dq=_np_out(dq, torch), dk=_np_out(dk, torch), dv=_np_out(dv, torch))
    torch.cuda.synchronize()
    return res


# ------------------------------------------------------------------------------------------------ capture
def _bits(a) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[a.dtype.itemsize])


def capture_kit(out, *, device: Device | None = None, cases=None, sections=("mufu", "mma", "attention"),
                stride: int = SAMPLE_STRIDE, tables=None, log=print) -> Path:
    """Run the kit on ``device`` and write one .npz file.

    Parameters
    ----------
    out : str or Path
        The file to write (.npz; a meta JSON plus the arrays).
    device : Device, optional
        Default: the CUDA GPU (:class:`CudaDevice`); :class:`EmulatorDevice` writes the emulator's prediction.
    cases : list of dict, optional
        Default :func:`kit_cases`; cases whose ``archs`` exclude the device's family are recorded as skipped.
    sections : tuple of str
        Any of "mufu", "mma", "attention".
    stride : int
        The sampled sweep's stride over the 2^32 fp32 bit patterns.
    tables : iterable of str, optional
        The MUFU tables to measure (names of :func:`fa4num.gpu.mufu_build.table_inputs`; default all).
    log : callable
        Progress lines (one per case).

    Returns
    -------
    Path

    Examples
    --------
    >>> import tempfile, pathlib
    >>> case = dict(kit_cases()[0], batch=1, seqlen_q=20, seqlen_k=20, heads=2, heads_kv=1, head_dim=32)
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "kit.npz"
    >>> _ = capture_kit(path, device=EmulatorDevice("sm90"), cases=[case], sections=("attention",), log=None)
    >>> check_kit(path).ok
    True
    """
    dev = device if device is not None else CudaDevice()
    log = log or (lambda *a: None)
    arrays, meta = {}, {"format": FORMAT, "arch": dev.arch, "family": dev.family, "device": dev.name,
                         "provenance": run_provenance(tool="fa4num gpu capture-kit"), "sections": {}}
    t_all = time.perf_counter()
    if "mufu" in sections:
        meta["sections"]["mufu"] = _capture_mufu(dev, arrays, stride, tables, log)
    if "mma" in sections:
        meta["sections"]["mma"] = _capture_mma(dev, arrays, log)
    if "attention" in sections:
        meta["sections"]["attention"] = _capture_attention(dev, arrays, kit_cases() if cases is None else cases,
                                                           log)
    meta["seconds"] = round(time.perf_counter() - t_all, 2)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as f:
        np.savez_compressed(f, meta=np.frombuffer(json.dumps(meta, default=str).encode(), np.uint8), **arrays)
    log(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB) in {meta['seconds']} s")
    return out


def _guard(rec: dict, fn):
    """Run ``fn()``; on an exception record it in ``rec['error']`` (a refused case is data) and return None."""
    t0 = time.perf_counter()
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 -- every failure is recorded, the kit goes on
        rec["error"] = f"{type(e).__name__}: {e}"[:600]
        rec["traceback"] = traceback.format_exc()[-1500:]
        return None
    finally:
        rec["seconds"] = round(time.perf_counter() - t0, 3)


def _capture_mufu(dev, arrays, stride, tables, log) -> dict:
    rec = {"tables": {}, "forms": [], "stride": stride}
    got = {}
    for name, (spec, x) in table_inputs().items():
        if tables is not None and name not in tables:
            continue
        r = {"name": name, "ptx": spec.ptx.name}
        bits = _guard(r, lambda: dev.unary(Form(spec.ptx.name, spec.ptx, spec.emulator), x))
        if bits is not None:
            got[name] = bits
        rec["tables"][name] = r
    if got:
        arrays["mufu.tables"] = np.frombuffer(hw_tables.encode(got, {"device": dev.name}), np.uint8)
    xs = sample_inputs(stride)
    keep = _keep_index(xs.size)
    arrays["mufu.sample_keep"] = keep
    for form in mufu_forms():
        r = {"name": form.name, "samples": int(xs.size)}
        bits = _guard(r, lambda: dev.unary(form, xs))
        if bits is not None:
            r["sha256"] = hashlib.sha256(np.ascontiguousarray(bits, np.uint32).tobytes()).hexdigest()
            arrays[f"mufu.{form.name}"] = np.asarray(bits, np.uint32)[keep]
        rec["forms"].append(r)
        log(f"mufu {form.name}: " + (r.get("error") or f"{xs.size} samples in {r['seconds']} s"))
    return rec


def _capture_mma(dev, arrays, log) -> dict:
    rows = []
    for probe in mma_probes(dev.family):
        r = dict(probe)
        a, b, c = mma_inputs(probe)
        r["input_sha256"] = input_digest({"a": a, "b": b, "c": c})
        got = _guard(r, lambda: dev.mma(a, b, c))
        if got is not None:
            arrays[f"mma.{probe['name']}"] = np.asarray(got[0], np.float32).view(np.uint32)
            r["instruction"] = got[1]
        rows.append(r)
        log(f"mma {probe['name']}: " + (r.get("error") or f"{r['instruction']} in {r['seconds']} s"))
    return {"shape": list(MMA_SHAPE), "probes": rows}


def _capture_attention(dev, arrays, cases, log) -> dict:
    rows = []
    for case in cases:
        r = {"case": case}
        if case.get("archs") and dev.family not in case["archs"]:
            r["skipped"] = f"not run on {dev.family} (the case needs {', '.join(case['archs'])})"
            rows.append(r)
            log(f"{case['name']}: skipped")
            continue
        inp = _guard(r, lambda: case_arrays(case))
        got = None
        if inp is not None:
            r["input_sha256"] = input_digest(inp)
            got = _guard(r, lambda: dev.attention(case, inp))
        if got is not None:
            for n, a in got.items():
                arrays[f"attention.{case['name']}.{n}"] = _bits(a)
            r["arrays"] = sorted(got)
        rows.append(r)
        log(f"{case['name']}: " + (r.get("error", "")[:160] or f"{r['seconds']} s"))
    return {"cases": rows}


# -------------------------------------------------------------------------------------------------- check
@dataclass(frozen=True)
class Row:
    """One item of a kit check: section, name, status ("equal", "differs", "not captured", "skipped",
    "error") and what was compared or why not."""
    section: str
    name: str
    status: str
    detail: str


@dataclass(frozen=True)
class KitCheck:
    """The emulator against a kit file: the file's arch and device, and one :class:`Row` per item."""
    path: str
    arch: str
    device: str
    rows: list

    @property
    def failed(self) -> list:
        """Rows where the emulator differs from the GPU, or could not run a case the GPU ran."""
        return [r for r in self.rows if r.status in ("differs", "error")]

    @property
    def ok(self) -> bool:
        return not self.failed

    def summary(self) -> dict:
        out = {}
        for r in self.rows:
            out[r.status] = out.get(r.status, 0) + 1
        return out


def load_kit(path) -> tuple[dict, dict]:
    """(meta, arrays) of a kit file; ValueError unless it is one."""
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(arrays.pop("meta").tobytes())
    if meta.get("format") != FORMAT:
        raise ValueError(f"{path}: not a capture kit file (format {meta.get('format')!r}, expected {FORMAT!r})")
    return meta, arrays


def check_kit(path, *, mufu_arch: str = "sm90", only=None) -> KitCheck:
    """Check fa4num's emulator against a kit file.

    Parameters
    ----------
    path : str or Path
        A file written by :func:`capture_kit`.
    mufu_arch : str
        The MUFU table set the emulator is checked with (fa4num.hw; the SM100 path uses "sm90" by default).
    only : iterable of str, optional
        Names of items to check (case names, probe names, MUFU forms/tables); default all.

    Returns
    -------
    KitCheck

    Examples
    --------
    See :func:`capture_kit`.
    """
    meta, arrays = load_kit(path)
    wanted = None if only is None else set(only)
    rows = []
    sec = meta["sections"]
    if "mufu" in sec:
        rows += _check_mufu(sec["mufu"], arrays, mufu_arch, wanted)
    if "mma" in sec:
        rows += _check_mma(sec["mma"], arrays, meta["family"], wanted)
    if "attention" in sec:
        rows += _check_attention(sec["attention"], arrays, meta["arch"], meta["family"], wanted)
    return KitCheck(str(path), meta["arch"], meta["device"], rows)


def _check_mufu(rec, arrays, mufu_arch, wanted) -> list:
    rows = []
    ours = hw_tables.load(mufu_arch)[0]
    theirs = hw_tables.decode(arrays["mufu.tables"].tobytes())[0] if "mufu.tables" in arrays else {}
    for name, r in rec["tables"].items():
        if wanted is not None and name not in wanted:
            continue
        if name not in theirs:
            rows.append(Row("mufu", name, "not captured", r.get("error", "")))
            continue
        bad = np.flatnonzero(theirs[name] != ours[name])
        rows.append(Row("mufu", name, "differs" if bad.size else "equal",
                        f"{bad.size} of {ours[name].size} entries differ from table set {mufu_arch}"
                        + (f"; first indices {bad[:4].tolist()}" if bad.size else "")))
    xs = sample_inputs(rec["stride"])
    keep = arrays["mufu.sample_keep"]
    for form in mufu_forms(mufu_arch):
        r = next((f for f in rec["forms"] if f["name"] == form.name), None)
        if r is None or (wanted is not None and form.name not in wanted):
            continue
        if "sha256" not in r:
            rows.append(Row("mufu", form.name, "not captured", r.get("error", "")))
            continue
        model = np.asarray(form.model(xs), np.uint32)
        same = hashlib.sha256(model.tobytes()).hexdigest() == r["sha256"]
        kept = arrays[f"mufu.{form.name}"]
        bad = np.flatnonzero(model[keep] != kept)
        # both must agree: the digest covers every sample, the kept vectors say where a difference lies
        detail = (f"{xs.size} sampled inputs (stride {rec['stride']}): digest {'equal' if same else 'differs'}, "
                  f"{bad.size} of the {keep.size} kept vectors differ"
                  + (f", e.g. x={hex(int(xs[keep[bad[0]]]))}: gpu {hex(int(kept[bad[0]]))} model "
                     f"{hex(int(model[keep[bad[0]]]))}" if bad.size else ""))
        rows.append(Row("mufu", form.name, "equal" if same and not bad.size else "differs", detail))
    return rows


def _check_mma(rec, arrays, family, wanted) -> list:
    rows = []
    for r in rec["probes"]:
        name = r["name"]
        if wanted is not None and name not in wanted:
            continue
        if f"mma.{name}" not in arrays:
            rows.append(Row("mma", name, "not captured", r.get("error", "")))
            continue
        a, b, c = mma_inputs(r)
        if input_digest({"a": a, "b": b, "c": c}) != r["input_sha256"]:
            rows.append(Row("mma", name, "error", "regenerated inputs differ from those the GPU saw"))
            continue
        model = mma_chain(a, b, c, model="wgmma", arch=family).view(np.uint32)
        bad = np.flatnonzero(model.reshape(-1) != arrays[f"mma.{name}"].reshape(-1))
        rows.append(Row("mma", name, "differs" if bad.size else "equal",
                        f"{bad.size} of {model.size} fp32 results differ from fa4num.hw.mma (wgmma model, "
                        f"{family} accumulator: F={ACCUMULATORS[family].fraction_bits}); GPU ran "
                        f"{r.get('instruction')}"))
    return rows


def _check_attention(rec, arrays, arch, family, wanted) -> list:
    rows = []
    kern = kernel_for(family)
    for r in rec["cases"]:
        case = r["case"]
        name = case["name"]
        if wanted is not None and name not in wanted:
            continue
        if "skipped" in r:
            rows.append(Row("attention", name, "skipped", r["skipped"]))
            continue
        if "arrays" not in r:
            rows.append(Row("attention", name, "not captured", r.get("error", "")))
            continue
        rows.append(_check_case(r, arrays, arch, kern))
    return rows


def _check_case(r, arrays, arch, kern) -> Row:
    case = r["case"]
    name = case["name"]
    try:
        inp = case_arrays(case)
        if input_digest(inp) != r["input_sha256"]:
            return Row("attention", name, "error", "regenerated inputs differ from those the GPU saw")
        kw = call_kwargs(case, inp)
        gpu = {n: arrays[f"attention.{name}.{n}"] for n in r["arrays"]}
        parts = []
        if case["call"] == "backward":
            # the GPU's out and LSE as the backward's inputs: the backward is checked on its own
            out = gpu["out"].view(inp["q"].dtype)
            lse = gpu["lse"].view(np.float32)
            bw = emu_backward(inp["q"], inp["k"], inp["v"], out, inp["dout"], lse, kernel=kern.name,
                              deterministic=True, **kw)
            emu = {"dq": bw.dq, "dk": bw.dk, "dv": bw.dv}
        else:
            fw = emu_forward(inp["q"], inp["k"], inp["v"], kernel=kern.name, **kw, **emulator_options(arch))
            emu = {"out": fw.out, "lse": np.asarray(fw.lse, np.float32)}
        bad = 0
        for n, e in emu.items():
            e = _bits(np.asarray(e))
            g = gpu[n]
            nb = int((e.reshape(-1) != g.reshape(-1)).sum()) if e.shape == g.shape else -1
            bad += nb != 0
            parts.append(f"{n} {'shape ' + str(g.shape) + ' vs ' + str(e.shape) if nb < 0 else nb}/{g.size}")
        return Row("attention", name, "differs" if bad else "equal",
                   f"{kern.name} {case['call']}: differing elements " + ", ".join(parts))
    except Exception as e:  # noqa: BLE001 -- the emulator refusing a case the GPU ran is a finding
        return Row("attention", name, "error", f"emulator: {type(e).__name__}: {e}"[:400])
