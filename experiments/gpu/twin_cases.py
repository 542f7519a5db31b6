"""The GPU twin's validation corpus: FA4 calls covering every SM100 knob and feature the twin takes, both
kernels, bf16 and fp16, 128 to 8k tokens; inputs are a pure function of the case (seeded), so goldens store only
digests of the outputs.

Used on the H200 by ``experiments/gpu/twin_validate.py`` (twin vs CPU emulator) and on the CPU by
``tests/attention/test_twin.py`` (the emulator vs the twin's committed digests). :func:`cases` is the corpus of
the committed goldens (tests/golden/twin_h200.json.xz); :func:`layout_cases` the varlen, seqused, paged and
split-KV set (tests/golden/twin_h200_layouts.json.xz once captured).
"""
from __future__ import annotations

import hashlib

import numpy as np

BASE = dict(b=1, sq=256, sk=256, h=2, hk=2, d=64, dv=64, dtype="bfloat16", mult=1.0, special=None)


def _case(name, kernel, **kw):
    c = dict(BASE)
    opts = kw.pop("opts", {})
    c.update(kw)
    return dict(name=name, kernel=kernel, opts=opts, **c)


def cases() -> list[dict]:
    """The corpus (name, kernel, shape, dtype, input scale, FA4 arguments and knobs)."""
    out = []
    for kernel in ("fa4-sm90", "fa4-sm100"):
        kk = kernel[4:]
        for dt in ("bfloat16", "float16"):
            t = "bf16" if dt == "bfloat16" else "fp16"
            out += [
                _case(f"{kk}-{t}-plain", kernel, dtype=dt),
                _case(f"{kk}-{t}-causal-300x700", kernel, dtype=dt, sq=300, sk=700, opts=dict(causal=True)),
                _case(f"{kk}-{t}-window", kernel, dtype=dt, sq=500, sk=500, opts=dict(window_size=(100, 30))),
                _case(f"{kk}-{t}-window-left", kernel, dtype=dt, sq=400, sk=600, opts=dict(window_size=(64, 0))),
                _case(f"{kk}-{t}-softcap", kernel, dtype=dt, mult=3.0, opts=dict(softcap=5.0, causal=True)),
                _case(f"{kk}-{t}-sink", kernel, dtype=dt, h=4, hk=4,
                      opts=dict(learnable_sink=[0.5, -1.0, 2.0, 8.0], causal=True)),
                _case(f"{kk}-{t}-gqa-pack", kernel, dtype=dt, h=8, hk=2, sq=200, sk=450, opts=dict(pack_gqa=True)),
                _case(f"{kk}-{t}-gqa-nopack", kernel, dtype=dt, h=8, hk=2, sq=200, sk=450,
                      opts=dict(pack_gqa=False, causal=True)),
                _case(f"{kk}-{t}-mqa", kernel, dtype=dt, h=6, hk=1, sq=130, sk=900, opts=dict(causal=True)),
                _case(f"{kk}-{t}-hd128-peaked", kernel, dtype=dt, d=128, dv=128, mult=4.0, sq=640, sk=1024,
                      opts=dict(causal=True)),
                _case(f"{kk}-{t}-masked-rows", kernel, dtype=dt, sq=512, sk=200, opts=dict(causal=True)),
                _case(f"{kk}-{t}-2k-causal", kernel, dtype=dt, d=128, dv=128, sq=2048, sk=2048, h=1, hk=1,
                      opts=dict(causal=True)),
            ]
        out += [
            _case(f"{kk}-hd256", kernel, d=256, dv=256, sq=300, sk=300, h=1, hk=1),
            _case(f"{kk}-hd32-scale2", kernel, d=32, dv=32, opts=dict(softmax_scale=2.0)),
            _case(f"{kk}-nan-inf", kernel, special="nonfinite", opts=dict(causal=True)),
            _case(f"{kk}-4k-causal", kernel, d=128, dv=128, sq=4096, sk=4096, h=1, hk=1, opts=dict(causal=True)),
            _case(f"{kk}-8k-window", kernel, d=128, dv=128, sq=8192, sk=8192, h=1, hk=1,
                  opts=dict(window_size=(1024, 0))),
            _case(f"{kk}-128-tokens", kernel, d=128, dv=128, sq=128, sk=128, h=4, hk=4),
        ]
    s1 = "fa4-sm100"
    knobs = [
        ("thr0", dict(rescale_threshold=0.0)), ("thr2", dict(rescale_threshold=2.0)),
        ("thr16", dict(rescale_threshold=16.0)), ("offset8", dict(max_offset=8)),
        ("offset8-thr4", dict(max_offset=8, rescale_threshold=4.0)), ("freq0", dict(ex2_emu_freq=0)),
        ("freq10", dict(ex2_emu_freq=10)), ("res2", dict(ex2_emu_res=2)), ("res6", dict(ex2_emu_res=6)),
        ("startfrg1", dict(ex2_emu_start_frg=1)), ("deg2", dict(poly_degree=2)), ("deg4", dict(poly_degree=4)),
        ("deg5", dict(poly_degree=5)), ("deg1", dict(poly_degree=1)),
        ("coeffs-minimax3", dict(coeffs="fa4num-minimax-deg3")), ("nofuse", dict(fused_bias=False)),
        ("sm103", dict(is_sm103=True)), ("tile64", dict(tile_n=64)), ("tcgen05", dict(gemm="tcgen05")),
    ]
    for name, kn in knobs:
        out.append(_case(f"sm100-knob-{name}", s1, d=128, dv=128, sq=768, sk=1024, mult=3.0,
                         opts=dict(causal=True, **kn)))
    out += [
        _case("sm100-hd192-128", s1, d=192, dv=128, sq=300, sk=500, h=2, hk=2, opts=dict(causal=True)),
        _case("sm100-fp16-offset4", s1, dtype="float16", d=128, dv=128, mult=3.0, sq=512, sk=1024,
              opts=dict(max_offset=4, causal=True)),
        _case("sm90-hd96", "fa4-sm90", d=96, dv=96, sq=333, sk=333),
        _case("sm90-hd192", "fa4-sm90", d=192, dv=192, sq=300, sk=400, opts=dict(causal=True)),
    ]
    return out


def layout_cases() -> list[dict]:
    """The layouts and splits the twin took on after the corpus above was captured: varlen (``cu_seqlens_q/k``,
    and varlen q over dense keys), ``seqused_q/k``, paged KV (pages that are not a multiple of tile_n) and
    SM100 split-KV (given, fixed per split, FA4's heuristic; over varlen and paged keys), both kernels where FA4
    has the feature, bf16 and fp16, 128 to 8k tokens. ``varlen``: the sequence lengths (``k: None``, dense keys
    of ``sk``); ``paged``: page size, pages and pages per sequence (``b`` sequences, a seeded page table)."""
    out = []
    for kernel in ("fa4-sm90", "fa4-sm100"):
        kk = kernel[4:]
        for dt in ("bfloat16", "float16"):
            t = "bf16" if dt == "bfloat16" else "fp16"
            out += [
                # a sequence with one query and no keys: out 0, LSE = the sink
                _case(f"{kk}-{t}-varlen-causal-gqa", kernel, dtype=dt, h=8, hk=2,
                      varlen=dict(q=[128, 700, 1, 300], k=[128, 900, 0, 333]),
                      opts=dict(causal=True, learnable_sink=[0.5, -1.0, 2.0, 0.0, 1.0, -2.0, 3.0, 0.25])),
                _case(f"{kk}-{t}-paged-p100", kernel, dtype=dt, b=2, sq=512, h=4, hk=2, d=128, dv=128,
                      paged=dict(page_size=100, pages=30, per_seq=11), opts=dict(causal=True)),
            ]
        out += [
            _case(f"{kk}-varlen-window-sink", kernel, h=4, hk=2, d=128, dv=128,
                  varlen=dict(q=[90, 1500, 257], k=[120, 2000, 257]),
                  opts=dict(window_size=(64, 16), learnable_sink=[1.0, -0.5, 2.0, 4.0])),
            _case(f"{kk}-fp16-varlenq-densek", kernel, dtype="float16", b=3, sk=1024, h=2, hk=2,
                  varlen=dict(q=[200, 56, 1000], k=None), opts=dict(causal=True)),
            _case(f"{kk}-paged-seqused", kernel, b=2, sq=1024, h=2, hk=1, d=128, dv=128,
                  paged=dict(page_size=256, pages=40, per_seq=16),
                  opts=dict(causal=True, seqused_q=[512, 77], seqused_k=[1000, 3000])),
        ]
    s1 = "fa4-sm100"
    out += [
        _case("sm100-bf16-split2-sink-decode", s1, sq=128, sk=4096, h=4, hk=1, d=128, dv=128,
              opts=dict(num_splits=2, learnable_sink=[0.5, 8.0, -1.0, 2.0])),
        _case("sm100-fp16-split2-sink-decode", s1, dtype="float16", sq=128, sk=4096, h=4, hk=1, d=128, dv=128,
              opts=dict(num_splits=2, learnable_sink=[0.5, 8.0, -1.0, 2.0])),
        _case("sm100-bf16-split3-causal-thr4", s1, sq=1024, sk=2048, d=128, dv=128, mult=3.0,
              opts=dict(causal=True, num_splits=3, rescale_threshold=4.0)),
        _case("sm100-fp16-split5-window", s1, dtype="float16", sq=2048, sk=2048, h=1, hk=1,
              opts=dict(window_size=(1000, 0), num_splits=5)),
        _case("sm100-bf16-split-per-split", s1, sq=256, sk=3500, opts=dict(num_splits=4, seqlen_k_per_split=1024)),
        _case("sm100-bf16-split-heuristic", s1, sq=64, sk=8192, h=8, hk=8, d=128, dv=128, opts=dict(num_splits=0)),
        _case("sm100-bf16-split3-varlen", s1, h=4, hk=2, varlen=dict(q=[64, 300], k=[4000, 2500]),
              opts=dict(num_splits=3, causal=True)),
        _case("sm100-bf16-split2-paged", s1, b=2, sq=200, h=2, hk=2, paged=dict(page_size=64, pages=70, per_seq=32),
              opts=dict(num_splits=2, ex2_emu_freq=10)),
        _case("sm100-bf16-8k-split4-causal", s1, sq=512, sk=8192, h=1, hk=1, d=128, dv=128,
              opts=dict(causal=True, num_splits=4)),
    ]
    return out


_INT_ARGS = ("seqused_q", "seqused_k")


def inputs(case: dict, *, torch_module=None):
    """(q, k, v, fa4_kwargs) of a case as CPU torch tensors in the case's dtype: a seeded generator per case
    name, so the inputs are a pure function of the case."""
    import torch
    seed = int.from_bytes(hashlib.sha256(case["name"].encode()).digest()[:4], "little")
    g = torch.Generator().manual_seed(seed)
    dt = torch.bfloat16 if case["dtype"] == "bfloat16" else torch.float16
    if case.get("varlen") or case.get("paged"):
        return _layout_inputs(case, g, dt)
    b, sq, sk, h, hk, d, dv = (case[n] for n in ("b", "sq", "sk", "h", "hk", "d", "dv"))
    q = torch.randn(b, sq, h, d, generator=g) * case["mult"]
    k = torch.randn(b, sk, hk, d, generator=g)
    # a slowly rising logit ramp along the keys, so the running max grows block after block (rescales)
    k = k + torch.linspace(0, 1, sk).view(1, sk, 1, 1) * q.mean(dim=(1, 2)).view(b, 1, 1, d)
    v = torch.randn(b, sk, hk, dv, generator=g)
    if case["special"] == "nonfinite":
        q[0, 5, 0, 3] = float("nan")
        k[0, 17, 1, 0] = float("inf")
        v[0, 40, 0, 2] = float("-inf")
    opts = dict(case["opts"])
    if "learnable_sink" in opts:
        opts["learnable_sink"] = np.asarray(opts["learnable_sink"], np.float32)
    return q.to(dt), k.to(dt), v.to(dt), dict(kernel=case["kernel"], **opts)


def _layout_inputs(case, g, dt):
    """:func:`inputs` of a varlen or paged case: FA4's packed or paged layouts, the same logit ramp along each
    sequence's keys, the offsets and the page table as int32 arrays."""
    import torch
    h, hk, d, dv = (case[n] for n in ("h", "hk", "d", "dv"))
    kw = dict(kernel=case["kernel"], **case["opts"])
    vl, pg = case.get("varlen"), case.get("paged")
    if vl:
        lead_q = (sum(vl["q"]),)
        kw["cu_seqlens_q"] = np.cumsum([0, *vl["q"]]).astype(np.int32)
    else:
        lead_q = (case["b"], case["sq"])
    if pg:
        lead_k = (pg["pages"], pg["page_size"])
        perm = torch.randperm(pg["pages"], generator=g)[:case["b"] * pg["per_seq"]]
        kw["page_table"] = perm.view(case["b"], pg["per_seq"]).numpy().astype(np.int32)
    elif vl and vl["k"] is not None:
        lead_k = (sum(vl["k"]),)
        kw["cu_seqlens_k"] = np.cumsum([0, *vl["k"]]).astype(np.int32)
    else:
        lead_k = (len(vl["q"]) if vl else case["b"], case["sk"])
    q = torch.randn(*lead_q, h, d, generator=g) * case["mult"]
    k = torch.randn(*lead_k, hk, d, generator=g)
    nk = int(np.prod(lead_k))
    k = k + (torch.linspace(0, 1, nk).view(*lead_k, 1, 1) * q.reshape(-1, d).mean(dim=0))
    v = torch.randn(*lead_k, hk, dv, generator=g)
    if "learnable_sink" in kw:
        kw["learnable_sink"] = np.asarray(kw["learnable_sink"], np.float32)
    for n in _INT_ARGS:
        if n in kw:
            kw[n] = np.asarray(kw[n], np.int32)
    return q.to(dt), k.to(dt), v.to(dt), kw


def digest(result) -> dict:
    """SHA-256 digests of a forward result's bits: out, LSE and each counter."""
    import torch

    def bits(x):
        if isinstance(x, torch.Tensor):
            x = x.detach().cpu()
            x = x.view(torch.int16) if x.element_size() == 2 else x
            x = x.numpy()
        return hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest()
    st = result.stats
    out = {"out": bits(result.out), "lse": bits(result.lse)}
    for n in COUNTERS:
        out[n] = bits(np.asarray(getattr(st, n)))
    return out


# every per-row counter of fa4num.attention.AttentionStats the twin fills
COUNTERS = ("kv_blocks", "rescale_events", "rescales_done", "max_lag", "exp2_emulated", "exp2_mufu", "p_saturated",
            "masked_by_window", "sink_share", "rescale_steps", "rescales_row", "rescales_warp", "rescales_tile",
            "events_row", "events_warp", "events_tile")
