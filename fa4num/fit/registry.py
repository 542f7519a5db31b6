"""The polys/ registry: named coefficient sets (FA4's shipped POLY_EX2 and fa4num's fits), each with its
metrics and provenance, and exports of any set for the kernels that use it.

The registry is one JSON file, ``polys/registry.json`` at the repository root (or a path given by the
caller): ``{"schema": "fa4num-polys/1", "entries": {name: entry}}``. An entry holds ``coeffs`` (c0 first,
as exact decimal strings and as fp32 bit patterns), ``function``, ``interval``, ``coeff_format``,
``source``, ``metrics`` (see :func:`describe`) and ``provenance``.
"""
from __future__ import annotations

import json
import math
import struct
import time
from decimal import Decimal
from pathlib import Path

from ._certify import certify
from ._remez import Problem, remez, sup_error
from ._target import EXP2

SCHEMA = "fa4num-polys/1"
DEFAULT_REGISTRY = Path(__file__).resolve().parents[2] / "polys" / "registry.json"
FA4_SOURCE = ("FA4 POLY_EX2, flash_attn/cute/utils.py (Sollya fpminimax(exp(x*log(2.0)), n, [|1,24...|], "
              "[0;1], relative))")
EXPORT_FORMATS = ("cute", "c", "ptx", "triton")


def fp32_bits(value: float) -> int:
    return struct.unpack("<I", struct.pack("<f", value))[0]


def _exact_decimal(value: float) -> str:
    return format(Decimal(value), "f") if value != int(value) else repr(float(value))


def read(registry=None) -> dict:
    path = Path(registry) if registry is not None else DEFAULT_REGISTRY
    if not path.exists():
        return {"schema": SCHEMA, "entries": {}}
    data = json.loads(path.read_text())
    if data.get("schema") != SCHEMA:
        raise ValueError(f"registry: {path} is not a {SCHEMA} file")
    return data


def write_entry(name: str, coeffs, *, source: str, metrics: dict, provenance: dict, function: str = "2^x",
                interval=(0.0, 1.0), coeff_format: str = "fp32", fit: dict | None = None,
                registry=None) -> Path:
    """Add or replace the entry ``name`` (letters, digits, '-', '_', '.') and rewrite the file sorted."""
    if not name or not all(ch.isalnum() or ch in "-_." for ch in name):
        raise ValueError(f"name: {name!r} must be non-empty letters, digits, '-', '_' or '.'")
    path = Path(registry) if registry is not None else DEFAULT_REGISTRY
    data = read(path)
    entry = {"name": name, "function": function, "interval": list(interval), "degree": len(coeffs) - 1,
             "coeff_format": coeff_format, "coeffs": [_exact_decimal(c) for c in coeffs],
             "coeffs_fp32_bits": [f"0x{fp32_bits(c):08X}" for c in coeffs], "source": source,
             "metrics": metrics, "provenance": provenance}
    if fit is not None:
        entry["fit"] = fit
    data["entries"][name] = entry
    data["entries"] = dict(sorted(data["entries"].items()))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
    return path


def poly_entry(name: str, *, registry=None) -> dict:
    """The full registry entry ``name`` (a dict)."""
    entries = read(registry)["entries"]
    if name not in entries:
        raise ValueError(f"name: no coefficient set {name!r} in the registry; known: {sorted(entries)}")
    return entries[name]


def load_poly(name: str, *, registry=None) -> tuple:
    """Coefficients c0..cn (Python floats, exact) of the registry entry ``name``, e.g. "fa4-deg3".

    Usable directly as ``fa4num.ex2.fa4_emulated(x, degree, coeffs=load_poly(name))``."""
    entry = poly_entry(name, registry=registry)
    coeffs = tuple(float(Decimal(c)) for c in entry["coeffs"])
    bits = [int(b, 16) for b in entry.get("coeffs_fp32_bits", [])]
    if bits and [fp32_bits(c) for c in coeffs] != bits:
        raise ValueError(f"name: entry {name!r} is corrupt (coefficients and their fp32 bits disagree)")
    return coeffs


def describe(coeffs, *, emulation: bool = True, degree_optimum: bool = True) -> dict:
    """Every metric of a 2^x coefficient set on [0, 1] (c0 first).

    max_rel_error / argmax     sup |p/2^x - 1| in real arithmetic (mpmath scan + refinement)
    certified_rel_bound        rigorous upper bound (ball arithmetic, fa4num.fit certify)
    max_abs_error              sup |p - 2^x|
    rel_optimum, ratio_to_optimum   the p(0)=1 real-coefficient optimum of the same degree and the ratio
    evaluated_rel_error        (emulation) max rel. error of FA4's fp32 evaluation over every fp32 in [0, 1)
    bf16_mismatch_share(_with_subnormal)   (emulation) see fa4num.fit.bf16_mismatch_share
    """
    coeffs = tuple(float(c) for c in coeffs)
    n = len(coeffs) - 1
    t0 = time.perf_counter()
    rel = Problem(EXP2, 0.0, 1.0, n, {}, True)
    absolute = Problem(EXP2, 0.0, 1.0, n, {}, False)
    e_rel, x_rel = sup_error(rel, coeffs)
    e_abs, _ = sup_error(absolute, coeffs)
    cert = certify(rel, coeffs, extrema=[x_rel])
    out = {"max_rel_error": float(e_rel), "argmax": float(x_rel), "certified_rel_bound": cert.upper,
           "max_abs_error": float(e_abs)}
    if degree_optimum:
        opt = remez(Problem(EXP2, 0.0, 1.0, n, {0: 1.0}, True))
        out["rel_optimum"] = float(opt.max_error)
        out["ratio_to_optimum"] = float(e_rel / opt.max_error)
    if emulation:
        from ._objectives import bf16_mismatch_share, evaluated_error
        ev = evaluated_error(coeffs)
        out["evaluated_rel_error"] = ev["value"]
        out["evaluated_argmax"] = ev["argmax"]
        b = bf16_mismatch_share(coeffs)
        out["bf16_mismatch_share"] = b["value"]
        out["bf16_mismatch_share_with_subnormal"] = b["value_with_subnormal"]
    out["seconds"] = time.perf_counter() - t0
    return out


def export(coeffs, fmt: str, *, name: str = "POLY_EX2") -> str:
    """Source text declaring ``coeffs`` (c0 first, fp32) for a kernel language.

    cute    a Python tuple of exact decimals, like FA4's POLY_EX2 in flash_attn/cute/utils.py
    c       a C/CUDA ``static const float`` array of hexadecimal float literals (exact)
    ptx     one PTX fp32 immediate per coefficient (0f3F31F519), as in FA4's e2e_asm2 inline assembly
    triton  ``tl.constexpr`` module constants a @triton.jit kernel can read
    """
    coeffs = [float(c) for c in coeffs]
    for k, c in enumerate(coeffs):
        if not math.isfinite(c) or struct.unpack("<f", struct.pack("<f", c))[0] != c:
            raise ValueError(f"coeffs: c{k} = {c!r} is not exactly an fp32 number")
    ident = "".join(ch if ch.isalnum() else "_" for ch in name)
    if fmt == "cute":
        body = ",\n".join(f"    {_exact_decimal(c)}" for c in coeffs)
        return f"{ident} = (\n{body},\n)  # c0..c{len(coeffs) - 1}, exact fp32 values\n"
    if fmt == "c":
        lits = ", ".join(_c_hex(c) for c in coeffs)
        return f"static const float {ident}[{len(coeffs)}] = {{{lits}}};  /* c0..c{len(coeffs) - 1} */\n"
    if fmt == "ptx":
        return "".join(f"// {ident} c{k} = {_exact_decimal(c)}\n0f{fp32_bits(c):08X}\n"
                       for k, c in enumerate(coeffs))
    if fmt == "triton":
        lines = ["import triton.language as tl", ""]
        lines += [f"{ident}_C{k} = tl.constexpr({c!r})  # 0x{fp32_bits(c):08X}" for k, c in enumerate(coeffs)]
        return "\n".join(lines) + "\n"
    raise ValueError(f"fmt: must be one of {EXPORT_FORMATS}, got {fmt!r}")


def _c_hex(value: float) -> str:
    if value == 0:
        return "0.0f"
    mant, exp = float.hex(value).split("p")
    mant = mant.rstrip("0").rstrip(".") if "." in mant else mant
    return f"{mant}p{exp}f"


def fa4_sets() -> dict:
    """FA4's POLY_EX2 sets (degrees 1-5) as fa4num.ex2 holds them (fp32 bit patterns copied from FA4)."""
    from fa4num.ex2 import POLY_EX2
    return {d: tuple(float(c) for c in cs) for d, cs in POLY_EX2.items()}


def add_fa4_sets(*, registry=None, emulation: bool = True) -> list[str]:
    """Write FA4's five sets, with every metric, as entries fa4-deg1..fa4-deg5."""
    from fa4num.provenance import provenance
    names = []
    for d, coeffs in fa4_sets().items():
        name = f"fa4-deg{d}"
        write_entry(name, coeffs, source=FA4_SOURCE, metrics=describe(coeffs, emulation=emulation),
                    provenance=provenance(), registry=registry)
        names.append(name)
    return names
