"""Capture golden vectors on a GPU: every fp32 op/mode, conversion, FA4 exp2 variant and MUFU instruction.

``capture_golden(outdir)`` writes tests/golden-style files (fa4num.golden format, lzma JSON):
fp.json.xz, convert.json.xz, ex2_emulated.json.xz, mufu.json.xz. What runs is :func:`golden_plan`, a pure
function, so the CPU tests can list the same sets and pick the emulator for each from its ``meta``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import golden
from . import ptx, require_gpu, run_provenance


@dataclass(frozen=True)
class Spec:
    group: str        # output file stem
    op: ptx.Op
    kind: str         # golden input generator
    meta: dict


def _bits(x) -> int:
    return int(np.float32(x).view(np.uint32))


def custom_coeffs() -> dict:
    """Non-FA4 coefficient sets that exercise "any degree and coefficients" (bit patterns c0..cd)."""
    d3 = list(ptx.FA4_POLY_EX2_BITS[3])
    d3[1] += 1          # c1 one ulp up
    d3[3] -= 3          # c3 three ulps down
    taylor6 = [_bits(math.log(2.0) ** k / math.factorial(k)) for k in range(7)]
    return {"d3nudged": tuple(d3), "taylor6": tuple(taylor6)}


def golden_plan() -> list[Spec]:
    plan = []
    for op in ptx.all_arith():
        name = op.name.split(".")
        meta = {"op": name[0], "ftz": "ftz" in name}
        if name[0] not in ("max", "min"):
            meta["rounding"] = name[1]
        plan.append(Spec("fp", op, "ternary" if name[0] == "fma" else "binary", meta))
    conv_meta = {
        "cvt.rn.bf16.f32": ("unary", {"op": "to_bf16"}),
        "cvt.rn.f16.f32": ("unary", {"op": "to_fp16"}),
        "cvt.rn.bf16x2.f32": ("pair", {"op": "to_bf16", "packed": "hi=a,lo=b"}),
        "cvt.rn.satfinite.e4m3x2.f32": ("pair", {"op": "to_e4m3", "packed": "hi=a,lo=b"}),
        "cvt.rn.satfinite.e5m2x2.f32": ("pair", {"op": "to_e5m2", "packed": "hi=a,lo=b"}),
        "cvt.f32.bf16": ("all16", {"op": "from_bf16"}),
        "cvt.f32.f16": ("all16", {"op": "from_fp16"}),
        "cvt.rn.f16x2.e4m3x2": ("all16", {"op": "from_e4m3", "packed": "f16x2: hi<-hi byte, lo<-lo byte"}),
        "cvt.rn.f16x2.e5m2x2": ("all16", {"op": "from_e5m2", "packed": "f16x2: hi<-hi byte, lo<-lo byte"}),
    }
    for name, (kind, meta) in conv_meta.items():
        plan.append(Spec("convert", ptx.CONVERSIONS[name], kind, meta))
    for variant in ptx.EX2_VARIANTS:
        for deg in range(1, 6):
            plan.append(Spec("ex2_emulated", ptx.fa4_ex2_emulation(variant, deg), "unary",
                             {"op": "ex2emu", "variant": variant, "degree": deg,
                              "coeffs_bits": list(ptx.FA4_POLY_EX2_BITS[deg])}))
        for label, cb in custom_coeffs().items():
            op = ptx.ex2_emulation(variant, cb)
            plan.append(Spec("ex2_emulated", ptx.Op(f"ex2emu.{variant}.{label}", 1, op.asm), "unary",
                             {"op": "ex2emu", "variant": variant, "degree": len(cb) - 1, "coeffs_bits": list(cb)}))
    for name, op in ptx.MUFU.items():
        fn = name.split(".")[0]
        plan.append(Spec("mufu", op, "unary", {"op": "mufu", "fn": fn, "ftz": ".ftz" in name}))
    return plan


def capture_golden(outdir, *, seed: int = 0, groups=None) -> list[Path]:
    """Run every set of :func:`golden_plan` on the GPU and write one golden file per group into ``outdir``."""
    require_gpu()
    from .kernels import run, to_numpy

    prov = run_provenance(tool="fa4num.gpu.capture", triton_target="inline PTX via tl.inline_asm_elementwise")
    cache = {}
    by_group: dict[str, list] = {}
    for spec in golden_plan():
        if groups is not None and spec.group not in groups:
            continue
        if spec.kind not in cache:
            cache[spec.kind] = golden.inputs(spec.kind, seed)
        out = to_numpy(run(spec.op, *cache[spec.kind]))
        chunk = 1 << 16 if spec.kind != "all16" else 1 << 14
        stride = 512 if spec.kind != "all16" else 32
        gs = golden.make_set(spec.op.name, spec.op.asm, spec.kind, out, seed=seed, chunk=chunk, stride=stride,
                             meta=spec.meta)
        by_group.setdefault(spec.group, []).append(gs)
    paths = []
    for group, sets in by_group.items():
        paths.append(golden.write_file(Path(outdir) / f"{group}.json.xz", sets, prov))
    return paths
