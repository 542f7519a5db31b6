"""Measure the MUFU tables of fa4num.hw.mufu on the GPU at hand (``fa4num mufu build``).

Each table is the ``.ftz`` instruction's output over 2^23 inputs that share one binade, indexed by the
23-bit mantissa (or, for ex2, by the 23 fractional bits of the fixed-point argument):

- ``ex2_pos[g]`` = ex2.approx.ftz.f32(g * 2^-23),   ``ex2_neg[g]`` = ex2.approx.ftz.f32(-g * 2^-23)
- ``rcp[g]``     = rcp.approx.ftz.f32(1 + g * 2^-23)
- ``lg2_e{k}[g]`` = lg2.approx.ftz.f32((1 + g * 2^-23) * 2^k)  for the binades listed in LG2_BINADES
"""
from __future__ import annotations

import numpy as np

from ..gpu import ptx, require_gpu

LG2_BINADES = (-1, 0)


def table_inputs() -> dict:
    """name -> (PTX op, uint32 input bit patterns) for every table."""
    g = np.arange(1 << 23, dtype=np.uint32)
    frac = (g.astype(np.float64) * 2.0 ** -23).astype(np.float32).view(np.uint32)   # exact
    ex2 = ptx.MUFU["ex2.approx.ftz.f32"]
    lg2 = ptx.MUFU["lg2.approx.ftz.f32"]
    out = {"ex2_pos": (ex2, frac), "ex2_neg": (ex2, frac | np.uint32(0x80000000)),
           "rcp": (ptx.MUFU["rcp.approx.ftz.f32"], g | np.uint32(0x3F800000))}
    for k in LG2_BINADES:
        out[f"lg2_e{k}"] = (lg2, g | np.uint32((127 + k) << 23))
    return out


def measure_tables(names=None) -> dict:
    """Run the table inputs through the GPU; returns name -> uint32 array of result bits."""
    require_gpu()
    from ..gpu.kernels import run, to_numpy
    return {name: to_numpy(run(op, x)) for name, (op, x) in table_inputs().items()
            if names is None or name in names}


def check_tables(arch: str, path=None) -> dict:
    """Mismatches of the six MUFU models (tables of ``arch``) against this GPU over all 2^32 inputs."""
    require_gpu()
    from concurrent.futures import ThreadPoolExecutor

    from ..gpu.verify import _sweep_unary
    from . import mufu, tables
    if path is not None:
        mufu._cache[arch] = tables.load(arch, path)   # a table file outside the package's data folder
    out = {}
    with ThreadPoolExecutor(4) as pool:
        for name, op in ptx.MUFU.items():
            meta = {"op": "mufu", "fn": name.split(".")[0], "ftz": ".ftz" in name, "arch": arch}
            out[name] = _sweep_unary(op, meta, digests=False, pool=pool)[0]
    return out
