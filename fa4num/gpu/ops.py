"""One typed description of each operation the GPU runs and fa4num emulates: :class:`OpSpec`.

An ``OpSpec`` is parsed once (from a golden file's ``meta`` JSON with :meth:`OpSpec.from_meta`, or built by the
plans of ``fa4num gpu verify`` / ``capture`` / ``mufu build``) and then answers every question the GPU code asks:
``.ptx`` (the instruction string, fa4num.gpu.ptx), ``.emulator`` (the CPU model on bit arrays),
``.sweep_emulator`` (the same for exhaustive sweeps, in the result's own width), ``.compile_key`` (which
compiled emulator code it needs) and ``.fused_key``. JSON appears only at the golden-file boundary
(:meth:`from_meta` / :meth:`to_meta`, which round-trip exactly).

Examples
--------
>>> s = OpSpec.from_meta({"op": "fma", "rounding": "rz", "ftz": True})
>>> s.ptx.asm
'fma.rz.ftz.f32 $0, $1, $2, $3;'
>>> s.to_meta() == {"op": "fma", "rounding": "rz", "ftz": True}
True
>>> OpSpec.mufu("ex2", ftz=True).ptx.name
'ex2.approx.ftz.f32'
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import ptx

ARITH = ("add", "sub", "mul", "fma", "max", "min")
NARROW = ("bf16", "fp16", "e4m3", "e5m2")
MUFU_FNS = ("ex2", "rcp", "lg2")
# how a two-input conversion packs its results (golden meta "packed"), and the fp8 -> f16x2 widening
PACK_AB = "hi=a,lo=b"              # cvt.rn.{bf16x2,satfinite.e4m3x2,...}.f32 d, a, b: a in the upper half
PACK_NEG = "hi=x,lo=-x"            # fa4num.gpu.ptx.fp8_pair_neg: a unary sweep of the fp8 pair conversion
PACK_F16X2 = "f16x2: hi<-hi byte, lo<-lo byte"
_SIGN = np.uint32(0x80000000)


@dataclass(frozen=True)
class OpSpec:
    """One GPU operation and its emulator. Build with the class methods or :meth:`from_meta`.

    Fields: ``op`` (add, sub, mul, fma, max, min, to_<fmt>, from_<fmt>, ex2emu, mufu), ``rounding`` (rn, rz, rm,
    rp; arithmetic except max/min), ``ftz`` (arithmetic and mufu), ``packed`` (conversion packing, see PACK_*),
    ``variant``/``coeffs_bits`` (FA4's exp2 emulation: form and fp32 coefficient bits c0..cd), ``fn``/``arch``
    (MUFU: instruction and table set) and ``table_path`` (MUFU: a table file outside the package, as written by
    ``fa4num mufu build --out``; never part of the JSON form).
    """
    op: str
    rounding: str | None = None
    ftz: bool | None = None
    packed: str | None = None
    variant: str | None = None
    coeffs_bits: tuple | None = None
    fn: str | None = None
    arch: str | None = None
    table_path: str | None = None

    def __post_init__(self):
        op = self.op
        if op in ARITH:
            if self.ftz is None or (op in ("max", "min")) != (self.rounding is None):
                raise ValueError(f"{op}: ftz is required, and rounding (rn, rz, rm, rp) for add/sub/mul/fma only")
            if self.rounding is not None and self.rounding not in ptx.ROUNDINGS:
                raise ValueError(f"rounding must be one of {ptx.ROUNDINGS}, got {self.rounding!r}")
        elif op.startswith(("to_", "from_")):
            fmt = op.split("_", 1)[1]
            if fmt not in NARROW:
                raise ValueError(f"conversion format must be one of {NARROW}, got {fmt!r}")
            allowed = {None, PACK_AB, PACK_NEG} if op.startswith("to_") else {None, PACK_F16X2}
            if self.packed not in allowed or (self.packed == PACK_NEG and fmt not in ("e4m3", "e5m2")) \
                    or (op.startswith("from_") and (self.packed == PACK_F16X2) != (fmt in ("e4m3", "e5m2"))) \
                    or (op == "to_fp16" and self.packed is not None):
                raise ValueError(f"packed={self.packed!r} is not a form of {op}")
        elif op == "ex2emu":
            if self.variant not in ptx.EX2_VARIANTS:
                raise ValueError(f"variant must be one of {ptx.EX2_VARIANTS}, got {self.variant!r}")
            if not self.coeffs_bits or len(self.coeffs_bits) < 2:
                raise ValueError("coeffs_bits must hold the fp32 bits of c0..cd, degree >= 1")
        elif op == "mufu":
            if self.fn not in MUFU_FNS or self.ftz is None:
                raise ValueError(f"mufu needs fn in {MUFU_FNS} and ftz, got fn={self.fn!r}, ftz={self.ftz!r}")
        else:
            raise ValueError(f"op must be one of {ARITH}, to_/from_{{{','.join(NARROW)}}}, ex2emu or mufu, "
                             f"got {op!r}")

    # ---- constructors ------------------------------------------------------------------------------------
    @classmethod
    def arith(cls, op: str, rounding: str = "rn", *, ftz: bool = False) -> "OpSpec":
        """add/sub/mul/fma.{rounding}{.ftz}.f32, max/min{.ftz}.f32 (rounding ignored)."""
        return cls(op, None if op in ("max", "min") else rounding, bool(ftz))

    @classmethod
    def ex2emu(cls, variant: str, coeffs_bits) -> "OpSpec":
        """FA4's software exp2 in form ``variant`` with fp32 coefficient bits c0..cd."""
        return cls("ex2emu", variant=variant, coeffs_bits=tuple(int(b) & 0xFFFFFFFF for b in coeffs_bits))

    @classmethod
    def fa4_ex2(cls, variant: str, degree: int = 3) -> "OpSpec":
        """FA4's software exp2 with its own POLY_EX2 coefficients of ``degree``."""
        from ..constants import POLY_EX2_BITS
        if degree not in POLY_EX2_BITS:
            raise ValueError(f"degree must be one of {sorted(POLY_EX2_BITS)} for FA4's coefficients, got {degree!r}")
        return cls.ex2emu(variant, POLY_EX2_BITS[degree])

    @classmethod
    def mufu(cls, fn: str, *, ftz: bool = True, arch: str | None = None, table_path=None) -> "OpSpec":
        """ex2/rcp/lg2.approx{.ftz}.f32 modelled by the table set ``arch`` (or the file ``table_path``)."""
        return cls("mufu", ftz=bool(ftz), fn=fn, arch=arch, table_path=None if table_path is None else str(table_path))

    # ---- the JSON boundary (golden files, summaries) -----------------------------------------------------
    @classmethod
    def from_meta(cls, meta: dict) -> "OpSpec":
        """Parse a golden set's ``meta`` (fa4num.golden); ValueError on unknown keys or values."""
        meta = dict(meta)
        known = {"op", "rounding", "ftz", "packed", "variant", "degree", "coeffs_bits", "fn", "arch"}
        extra = set(meta) - known
        if extra:
            raise ValueError(f"meta has unknown keys {sorted(extra)}")
        degree = meta.pop("degree", None)
        if "coeffs_bits" in meta:
            meta["coeffs_bits"] = tuple(int(b) for b in meta["coeffs_bits"])
        spec = cls(**meta)
        if degree is not None and (spec.coeffs_bits is None or degree != len(spec.coeffs_bits) - 1):
            raise ValueError(f"meta degree {degree} does not match {len(spec.coeffs_bits or ())} coefficients")
        return spec

    def to_meta(self) -> dict:
        """The JSON form (as written into golden files): only the fields that are set, plus ``degree`` for ex2."""
        out = {"op": self.op}
        for k in ("rounding", "ftz", "packed", "variant", "fn", "arch"):
            v = getattr(self, k)
            if v is not None:
                out[k] = v
        if self.op == "ex2emu":
            out["degree"] = self.degree
            out["coeffs_bits"] = list(self.coeffs_bits)
        return out

    # ---- derived -----------------------------------------------------------------------------------------
    @property
    def degree(self) -> int | None:
        return None if self.coeffs_bits is None else len(self.coeffs_bits) - 1

    @property
    def n_in(self) -> int:
        return self.ptx.n_in

    @property
    def ptx(self) -> ptx.Op:
        """The PTX the GPU runs (fa4num.gpu.ptx)."""
        op = self.op
        if op in ARITH:
            return ptx.arith(op, self.rounding or "rn", bool(self.ftz))
        if op == "mufu":
            return ptx.MUFU[f"{self.fn}.approx{'.ftz' if self.ftz else ''}.f32"]
        if op == "ex2emu":
            from ..constants import POLY_EX2_BITS
            if POLY_EX2_BITS.get(self.degree) == self.coeffs_bits:
                return ptx.fa4_ex2_emulation(self.variant, self.degree)
            return ptx.ex2_emulation(self.variant, self.coeffs_bits)
        fmt = op.split("_", 1)[1]
        if self.packed == PACK_NEG:
            return ptx.fp8_pair_neg(fmt)
        from ..fp.dtypes import dtype_info
        d = dtype_info(fmt)
        ptx_fmt = ("satfinite." if d.satfinite else "") + d.ptx
        if op.startswith("to_"):
            return ptx.CONVERSIONS[f"cvt.rn.{ptx_fmt}x2.f32" if self.packed else f"cvt.rn.{ptx_fmt}.f32"]
        if fmt in ("bf16", "fp16"):
            return ptx.CONVERSIONS[f"cvt.f32.{ptx_fmt}"]
        return ptx.CONVERSIONS[f"cvt.rn.f16x2.{fmt}x2"]

    @property
    def compile_key(self) -> tuple:
        """Which compiled emulator code a comparison needs (comparisons with one key share one compilation)."""
        op = self.op
        if op == "ex2emu":
            return ("ex2emu", len(self.coeffs_bits))
        if op == "mufu":
            return ("mufu", self.fn)
        if op.startswith("to_"):
            return ("to", op)
        if op.startswith("from_"):
            return ("from",)
        return ("fp", op)          # one numba function per op (its modes are specialisations or branches of it)

    def mufu_tables(self):
        """The fa4num.hw table set this MUFU spec is modelled by."""
        from ..hw import load_tables
        return load_tables(self.arch or "sm90", self.table_path)

    @property
    def emulator(self) -> Callable:
        """``fn(*uint32 bit arrays) -> uint32 bit array``: the CPU model of this operation."""
        from .. import fp
        op = self.op
        if op in ("add", "sub", "mul", "fma"):
            f = getattr(fp, op)
            return lambda *xs: _u(f(*map(_f, xs), rounding=self.rounding, ftz=self.ftz))
        if op in ("max", "min"):
            f = getattr(fp, op)
            return lambda a, b: _u(f(_f(a), _f(b), ftz=self.ftz))
        if op.startswith("to_"):
            if self.packed == PACK_NEG:
                f = getattr(fp, f"{op}x2")
                return lambda x: np.asarray(f(_f(x), _f(x ^ _SIGN))).astype(np.uint32)
            if self.packed:
                f = getattr(fp, f"{op}x2")
                return lambda a, b: np.asarray(f(_f(a), _f(b))).astype(np.uint32)
            f = getattr(fp, op)
            return lambda x: _u(f(_f(x)))
        if op.startswith("from_"):
            return _from_narrow(op)
        if op == "ex2emu":
            from ..ex2 import fa4_emulated
            coeffs = [float(np.uint32(c).view(np.float32)) for c in self.coeffs_bits]
            return lambda x: _u(fa4_emulated(_f(x), self.degree, coeffs=coeffs, variant=self.variant))
        from .. import hw
        f = getattr(hw, f"mufu_{self.fn}")
        tables = self.mufu_tables()
        return lambda x: _u(f(_f(x), ftz=self.ftz, tables=tables))

    @property
    def sweep_emulator(self) -> tuple:
        """``(fn, neg_pair)`` for an exhaustive unary sweep: ``fn(x)`` takes float32 inputs and returns the
        emulator's bits in the result's own width (a view, no widening copy), for fa4num.gpu.compare.

        For the fp8 ops run as ``cvt...x2.f32 d, x, -x`` (:data:`PACK_NEG`) ``fn`` is the single conversion and
        ``neg_pair`` is True: the sweep feeds a block together with its sign-flipped twin, so each conversion is
        computed once and checked in both byte positions (compare.count_mismatches_neg_pair)."""
        from .. import fp
        if self.packed == PACK_NEG:
            f = getattr(fp, self.op)
            return (lambda x: _bits_view(f(x))), True
        if self.op.startswith("to_") and not self.packed:
            f = getattr(fp, self.op)
            return (lambda x: _bits_view(f(x))), False
        if self.op in ("ex2emu", "mufu"):
            g = self.emulator
            return (lambda x: _bits_view(g(x.view(np.uint32)))), False
        raise ValueError(f"no exhaustive-sweep emulator for {self}: unary ex2emu, mufu and to_* ops only")


# ---- bit plumbing ------------------------------------------------------------------------------------------
def _f(x):
    return np.ascontiguousarray(x, np.uint32).view(np.float32)


def _u(x):
    a = np.asarray(x)
    if a.dtype.itemsize == 4:
        return np.ascontiguousarray(a).view(np.uint32)
    return a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint8).astype(np.uint32)


def _bits_view(a):
    """The bits of an emulator's result array without a copy (uint32 / uint16 / uint8 by item size)."""
    return a.view({4: np.uint32, 2: np.uint16, 1: np.uint8}[a.dtype.itemsize])


def _f16_bits_of_f32(x32):
    """fp16 bits of fp32 values that fp16 holds exactly (fp8 values); NaN -> 0x7FFF (NVIDIA's fp16 NaN)."""
    bits = x32.astype(np.float16).view(np.uint16).astype(np.uint32)
    return np.where(np.isnan(x32), np.uint32(0x7FFF), bits)


def _from_narrow(op: str):
    from .. import fp
    from ..fp.dtypes import dtype_info
    fmt = op[5:]
    f = getattr(fp, op)
    dt = dtype_info(fmt).dtype
    if fmt in ("bf16", "fp16"):
        return lambda x: _u(f((x & np.uint32(0xFFFF)).astype(np.uint16).view(dt)))

    def fp8_to_f16x2(x):
        # cvt.rn.f16x2.{e4m3x2,e5m2x2}: each byte widened to fp16 (exact), hi byte -> hi half
        hi = f(((x >> np.uint32(8)) & np.uint32(0xFF)).astype(np.uint8).view(dt))
        lo = f((x & np.uint32(0xFF)).astype(np.uint8).view(dt))
        return (_f16_bits_of_f32(np.asarray(hi)) << np.uint32(16)) | _f16_bits_of_f32(np.asarray(lo))
    return fp8_to_f16x2


def arith_plan() -> list[OpSpec]:
    """The sampled binary and ternary operations (fa4num.gpu.verify, and the golden sets of fa4num.gpu.capture):
    add/sub/mul/fma in every rounding with and without .ftz, max/min with and without .ftz."""
    plan = [OpSpec.arith(o, r, ftz=z) for o in ("add", "sub", "mul", "fma") for r in ptx.ROUNDINGS
            for z in (False, True)]
    return plan + [OpSpec.arith(o, ftz=z) for o in ("max", "min") for z in (False, True)]
