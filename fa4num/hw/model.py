"""A MUFU model: one object per table set that the emulators are handed instead of an architecture string.

``mufu_model("sm90")`` is the bit-exact model measured on the H200 (ex2/rcp/lg2 from ``fa4num/hw/data/
mufu_sm90.npz.xz``, tanh from ``tanh_sm90.npz.xz``); ``mufu_model("libm")`` is the statistical mode: numpy's
float32 exp2 / reciprocal / log2 / tanh with the .ftz flushes, within the PTX ISA's documented error bounds of
the instructions (:data:`PTX_BOUNDS`) but not bit-exact. Every model carries the same verbs (``ex2``, ``rcp``,
``lg2``, ``tanh``), says which of them are bit-exact (:meth:`MufuModel.exact`) and gives the compact ex2 tables
that the fused numba kernels inline (``ex2_compact``, None for libm).

A new measured table set is data only: ``fa4num/hw/data/mufu_<arch>.npz.xz`` (``fa4num mufu build`` on that GPU)
makes ``mufu_model(arch)`` and every ``arch=`` / ``mufu_arch=`` option accept its name, and
``fa4num/hw/data/tanh_<arch>.npz.xz`` (experiments/gpu/mufu_tanh.py, then ``fa4num.hw.tanh.save_tanh_table``)
makes its tanh bit-exact.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

LIBM = "libm"
NAMES = ("ex2", "rcp", "lg2", "tanh")
# the PTX ISA's maximum errors of the .approx.f32 instructions (kind, bound): ex2 "2 ulp" relative, rcp 1 ulp
# relative, lg2 2^-22 absolute for x in [0.5, 2] (beyond, plus the rounding of the larger result), tanh
# 2^-10.987 relative; what the statistical mode's bounds assume
PTX_BOUNDS = {"ex2": ("relative", 2 * 2.0 ** -23), "rcp": ("relative", 2.0 ** -23),
              "lg2": ("absolute", 2.0 ** -22), "tanh": ("relative", 2.0 ** -10.987)}
_TINY = np.float32(2.0 ** -126)
_LIBM = {"ex2": np.exp2, "rcp": np.reciprocal, "lg2": np.log2, "tanh": np.tanh}


def _flush(x):
    return np.where(np.abs(x) < _TINY, np.float32(0), x).astype(np.float32)


def _libm(name):
    """numpy's float32 exp2 / reciprocal / log2 / tanh with the .ftz flushes: within ~2 ulp of MUFU, not
    bit-exact (the fast statistical mode)."""
    fn = _LIBM[name]
    if name == "ex2":
        def ex2(x):
            # exp2 of a subnormal is 1 either way, so only the result needs the flush; results are >= 0
            with np.errstate(over="ignore"):
                y = np.exp2(np.asarray(x, dtype=np.float32))
            y[y < _TINY] = 0
            return y
        return ex2

    def call(x):
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            return _flush(fn(_flush(np.asarray(x, dtype=np.float32))))
    return call


@dataclass(frozen=True)
class MufuModel:
    """The MUFU instructions of one table set (or libm): ex2, rcp, lg2, tanh as float32 array functions.

    Build with :func:`mufu_model`. ``arch`` is the table set's name ("sm90") or "libm".
    """
    arch: str

    def exact(self, name: str) -> bool:
        """Whether MUFU.<name> is modelled bit for bit (a measured table exists); libm answers False."""
        if name not in NAMES:
            raise ValueError(f"name must be one of {NAMES}, got {name!r}")
        if self.arch == LIBM:
            return False
        if name == "tanh":
            from .tanh import tanh_table_available
            return tanh_table_available(self.arch)
        return True

    def fn(self, name: str, *, ftz: bool = True):
        """MUFU.<name> as a function x (array_like) -> float32 array of x's shape: the bit-exact table model
        where :meth:`exact`, else libm with the .ftz flushes (``ftz`` is then ignored)."""
        if not self.exact(name):
            return _libm(name)
        from . import mufu, tanh
        f = {"ex2": mufu.mufu_ex2, "rcp": mufu.mufu_rcp, "lg2": mufu.mufu_lg2, "tanh": tanh.mufu_tanh}[name]
        arch = self.arch

        def call(x):
            x = np.asarray(x, dtype=np.float32)
            return np.asarray(f(x, arch=arch, ftz=ftz), dtype=np.float32).reshape(x.shape)
        return call

    def ex2(self, x, *, ftz: bool = True):
        """``ex2.approx(.ftz).f32`` of x."""
        return self.fn("ex2", ftz=ftz)(x)

    def rcp(self, x, *, ftz: bool = True):
        """``rcp.approx(.ftz).f32`` of x."""
        return self.fn("rcp", ftz=ftz)(x)

    def lg2(self, x, *, ftz: bool = True):
        """``lg2.approx(.ftz).f32`` of x."""
        return self.fn("lg2", ftz=ftz)(x)

    def tanh(self, x):
        """``tanh.approx.f32`` of x (no .ftz form)."""
        return self.fn("tanh")(x)

    @property
    def ex2_compact(self):
        """The compact ex2 tables (``fa4num.hw.mufu.CompactEx2``) the fused numba kernels inline, or None (libm,
        or a table set without a compact form)."""
        if self.arch == LIBM:
            return None
        from .mufu import load_tables
        return load_tables(self.arch).ex2_compact

    def ptx_bound(self, name: str) -> tuple[str, float]:
        """(kind, bound) of the PTX ISA's documented maximum error of MUFU.<name>: what a statistical model is
        within; the measured tables' own (smaller) bounds are ``fa4num.bounds.mufu_error_bounds(arch)``."""
        if name not in NAMES:
            raise ValueError(f"name must be one of {NAMES}, got {name!r}")
        return PTX_BOUNDS[name]


@lru_cache(maxsize=None)
def _model(arch: str) -> MufuModel:
    # checked here, on a cache miss only: the softmax steps ask for their model once per KV block, and listing
    # the data folder each time cost a few per cent of a forward (a refused name raises, so it is not cached)
    from .tables import available_archs
    if arch != LIBM and arch not in available_archs():
        raise ValueError(f"arch must be 'libm' or one of {available_archs()}, got {arch!r}")
    return MufuModel(arch)


def mufu_model(arch="sm90") -> MufuModel:
    """The MUFU model of a measured table set, or of libm ("libm": the statistical mode).

    Parameters
    ----------
    arch : str or MufuModel
        A table set of :func:`fa4num.hw.available_archs` ("sm90": measured on the H200), "libm", or a model
        (returned as is).

    Returns
    -------
    MufuModel

    Raises
    ------
    ValueError
        For a name with no table set.

    Examples
    --------
    >>> import numpy as np
    >>> m = mufu_model("sm90")
    >>> m.ex2(np.float32([0.5, -130.0])).tolist(), m.exact("ex2"), mufu_model("libm").exact("ex2")
    ([1.4142135381698608, 0.0], True, False)
    >>> mufu_model("sm00")
    Traceback (most recent call last):
        ...
    ValueError: arch must be 'libm' or one of ['sm90'], got 'sm00'
    """
    if isinstance(arch, MufuModel):
        return arch
    if not isinstance(arch, str):
        from .tables import available_archs
        raise ValueError(f"arch must be 'libm' or one of {available_archs()}, got {arch!r}")
    return _model(arch)
