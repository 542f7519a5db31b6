"""The GPU twin's validation corpus: FA4 calls covering every SM100 knob and feature the twin takes, both
kernels, bf16 and fp16, 128 to 8k tokens; inputs are a pure function of the case (seeded), so goldens store only
digests of the outputs.

Used on the H200 by ``experiments/gpu/twin_validate.py`` (twin vs CPU emulator) and on the CPU by
``tests/gpu/test_twin_golden.py`` (the emulator vs the twin's committed digests).
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


def inputs(case: dict, *, torch_module=None):
    """(q, k, v, fa4_kwargs) of a case as CPU torch tensors in the case's dtype: a seeded generator per case
    name, so the inputs are a pure function of the case."""
    import torch
    seed = int.from_bytes(hashlib.sha256(case["name"].encode()).digest()[:4], "little")
    g = torch.Generator().manual_seed(seed)
    dt = torch.bfloat16 if case["dtype"] == "bfloat16" else torch.float16
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
