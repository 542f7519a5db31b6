"""``fa4num mufu build``: measure the MUFU tables of fa4num.hw.mufu on the GPU at hand, then check the models.

Each table is the ``.ftz`` instruction's output over 2^23 inputs that share one binade, indexed by the
23-bit mantissa (or, for ex2, by the 23 fractional bits of the fixed-point argument):

- ``ex2_pos[g]`` = ex2.approx.ftz.f32(g * 2^-23),   ``ex2_neg[g]`` = ex2.approx.ftz.f32(-g * 2^-23)
- ``rcp[g]``     = rcp.approx.ftz.f32(1 + g * 2^-23)
- ``lg2_e{k}[g]`` = lg2.approx.ftz.f32((1 + g * 2^-23) * 2^k)  for the binades listed in LG2_BINADES

The check runs the six MUFU forms (ex2/rcp/lg2, with and without .ftz) over all 2^32 inputs on the GPU and
compares each output with the table model (fa4num.gpu.verify.sweep_unary, the sweep of ``fa4num gpu verify``),
so a new architecture whose MUFU follows another structure shows up as mismatches. The device is reached
through :func:`device` only, which a CPU test replaces with recorded output.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..hw import load_tables, tables as hw_tables
from ..hw.mufu import TABLE_NAMES
from . import require_gpu, run_provenance
from .ops import OpSpec

LG2_BINADES = (-1, 0)
FORMS = tuple((fn, ftz) for fn in ("ex2", "rcp", "lg2") for ftz in (True, False))
# sweep steps of the check (None: all of them); a CPU test narrows it
SWEEP_STEPS = None


@dataclass(frozen=True)
class Device:
    """How this module reaches a GPU: ``run(op, x) -> uint32 array``, ``run_range(op, start, n, out=buffer)``
    and ``pipeline(capacity)`` (fa4num.gpu.verify.Pipeline on CUDA)."""
    run: Callable
    run_range: Callable
    pipeline: Callable


def device() -> Device:
    """The CUDA device (raises fa4num.gpu.GPUUnavailable without one)."""
    require_gpu()
    from .kernels import run, run_range, to_numpy
    from .verify import Pipeline
    return Device(lambda op, x: to_numpy(run(op, x)), run_range, lambda capacity: Pipeline(capacity))


def table_inputs() -> dict:
    """name -> (OpSpec of the .ftz instruction, uint32 input bit patterns) for every table."""
    g = np.arange(1 << 23, dtype=np.uint32)
    frac = (g.astype(np.float64) * 2.0 ** -23).astype(np.float32).view(np.uint32)   # exact
    ex2, rcp, lg2 = (OpSpec.mufu(fn, ftz=True) for fn in ("ex2", "rcp", "lg2"))
    out = {"ex2_pos": (ex2, frac), "ex2_neg": (ex2, frac | np.uint32(0x80000000)),
           "rcp": (rcp, g | np.uint32(0x3F800000))}
    for k in LG2_BINADES:
        out[f"lg2_e{k}"] = (lg2, g | np.uint32((127 + k) << 23))
    return out


def measure_tables(names=None, *, dev: Device | None = None) -> dict:
    """Run the table inputs through the GPU; returns name -> uint32 array of result bits."""
    dev = dev or device()
    return {name: np.asarray(dev.run(spec.ptx, x), np.uint32) for name, (spec, x) in table_inputs().items()
            if names is None or name in names}


@dataclass(frozen=True)
class FormCheck:
    """One MUFU form against the GPU: its PTX name, the mismatch count and the first mismatching inputs."""
    ptx: str
    mismatches: int
    examples: list = field(default_factory=list)
    seconds: float = 0.0


def check_tables(tabs, *, dev: Device | None = None, steps=None) -> list[FormCheck]:
    """Compare the six MUFU models built on the table set ``tabs`` (fa4num.hw.MufuTables) with the GPU.

    Parameters
    ----------
    tabs : fa4num.hw.MufuTables
        The table set to check (e.g. the one just written by :func:`build`).
    dev : Device, optional
        The device runner (default: the CUDA GPU).
    steps : list of int, optional
        Sweep steps of 2^24 inputs to run (default: all 256, i.e. every fp32 input).

    Returns
    -------
    list of FormCheck
        One per form, in :data:`FORMS` order.
    """
    from .verify import CHUNK, sweep_unary
    dev = dev or device()
    pipe = dev.pipeline(CHUNK)
    out = []
    for fn, ftz in FORMS:
        spec = OpSpec.mufu(fn, ftz=ftz, arch=tabs.arch, table_path=tabs.path)
        n, ex, _, sec, _ = sweep_unary(spec, pipe, run_range=dev.run_range, steps=steps)
        out.append(FormCheck(spec.ptx.name, int(n), ex, round(sec, 2)))
    return out


@dataclass(frozen=True)
class BuildResult:
    """What ``fa4num mufu build`` did: the file written, per table whether it equals the table set already
    present for that arch (None: there was none), and the check (None when not asked)."""
    path: object
    same_as_previous: dict
    checks: list | None


def build(arch: str, *, out=None, check: bool = False, dev: Device | None = None) -> BuildResult:
    """Measure the tables on the GPU, write them (``out`` or the package's data folder), optionally check them.

    Parameters
    ----------
    arch : str
        Name of the table set, e.g. "sm90" (file ``mufu_<arch>.npz.xz``).
    out : str or Path, optional
        Where to write (default: the package's data folder, replacing the set of that name).
    check : bool
        Then compare the models built on the new tables with the GPU over all 2^32 inputs.
    dev : Device, optional
        The device runner (default: the CUDA GPU).

    Returns
    -------
    BuildResult
    """
    dev = dev or device()
    previous = hw_tables.load(arch)[0] if arch in hw_tables.available_archs() else None
    tabs = measure_tables(dev=dev)
    path = hw_tables.save(arch, tabs, run_provenance(tool="fa4num mufu build", arch=arch), path=out)
    load_tables.cache_clear()      # the file of (arch, out) may have been read before this run replaced it
    same = {n: (None if previous is None or n not in previous else bool(np.array_equal(previous[n], tabs[n])))
            for n in TABLE_NAMES}
    checks = check_tables(load_tables(arch, path), dev=dev, steps=SWEEP_STEPS) if check else None
    return BuildResult(path, same, checks)
