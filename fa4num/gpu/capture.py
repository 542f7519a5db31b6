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
from ..constants import POLY_EX2_BITS
from . import ptx, require_gpu, run_provenance
from .ops import PACK_AB, PACK_F16X2, OpSpec, arith_plan


@dataclass(frozen=True)
class Spec:
    """One golden set: the output file stem, the PTX op (named as in the golden file), the golden input
    generator and the typed operation (its JSON form is the golden set's ``meta``)."""
    group: str
    op: ptx.Op
    kind: str
    spec: OpSpec


def _bits(x) -> int:
    return int(np.float32(x).view(np.uint32))


def custom_coeffs() -> dict:
    """Non-FA4 coefficient sets that exercise "any degree and coefficients" (bit patterns c0..cd)."""
    d3 = list(POLY_EX2_BITS[3])
    d3[1] += 1          # c1 one ulp up
    d3[3] -= 3          # c3 three ulps down
    taylor6 = [_bits(math.log(2.0) ** k / math.factorial(k)) for k in range(7)]
    return {"d3nudged": tuple(d3), "taylor6": tuple(taylor6)}


def golden_plan() -> list[Spec]:
    """Every golden set that ``capture_golden`` writes, in file order (a pure function: CPU tests list it too)."""
    plan = [Spec("fp", s.ptx, "ternary" if s.op == "fma" else "binary", s) for s in arith_plan()]
    conversions = [("unary", OpSpec("to_bf16")), ("unary", OpSpec("to_fp16")),
                   ("pair", OpSpec("to_bf16", packed=PACK_AB)), ("pair", OpSpec("to_e4m3", packed=PACK_AB)),
                   ("pair", OpSpec("to_e5m2", packed=PACK_AB)), ("all16", OpSpec("from_bf16")),
                   ("all16", OpSpec("from_fp16")), ("all16", OpSpec("from_e4m3", packed=PACK_F16X2)),
                   ("all16", OpSpec("from_e5m2", packed=PACK_F16X2))]
    plan += [Spec("convert", s.ptx, kind, s) for kind, s in conversions]
    for variant in ptx.EX2_VARIANTS:
        for deg in sorted(POLY_EX2_BITS):
            s = OpSpec.fa4_ex2(variant, deg)
            plan.append(Spec("ex2_emulated", s.ptx, "unary", s))
        for label, cb in custom_coeffs().items():
            s = OpSpec.ex2emu(variant, cb)
            plan.append(Spec("ex2_emulated", ptx.Op(f"ex2emu.{variant}.{label}", 1, s.ptx.asm), "unary", s))
    plan += [Spec("mufu", s.ptx, "unary", s) for s in (OpSpec.mufu(fn, ftz=ftz) for fn in ("ex2", "rcp", "lg2")
                                                         for ftz in (True, False))]
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
                             meta=spec.spec.to_meta())
        by_group.setdefault(spec.group, []).append(gs)
    paths = []
    for group, sets in by_group.items():
        paths.append(golden.write_file(Path(outdir) / f"{group}.json.xz", sets, prov))
    return paths
