"""The polys registry of coefficient sets for FA4's software exp2: where it lives, how it is read and written.

A leaf module (standard library only), so that every layer and the ``fa4num polys`` command can resolve a set's
name to its coefficients without importing the fitter.

The registry shipped with fa4num is package data, ``fa4num/data/polys/registry.json`` (found through
:mod:`importlib.resources`, so a wheel install reads the same file as a source checkout). A user registry is any
other file of the same schema: ``{"schema": "fa4num-polys/1", "entries": {name: entry}}``. An entry holds
``coeffs`` (c0 first, as exact decimal strings and as fp32 bit patterns), ``function``, ``interval``,
``coeff_format``, ``source``, ``metrics`` and ``provenance``.
"""
from __future__ import annotations

import json
import math
import os
import struct
import subprocess
import tempfile
from decimal import Decimal
from importlib import resources
from pathlib import Path

SCHEMA = "fa4num-polys/1"
EXPORT_FORMATS = ("cute", "c", "ptx", "triton")


def default_registry() -> Path:
    """Path of the registry shipped with fa4num (package data).

    Parameters
    ----------
    None

    Returns
    -------
    pathlib.Path
        fa4num/data/polys/registry.json inside the installed package.

    Examples
    --------
    >>> default_registry().name
    'registry.json'
    """
    return Path(str(resources.files("fa4num") / "data" / "polys" / "registry.json"))


DEFAULT_REGISTRY = default_registry()


def fp32_bits(value: float) -> int:
    """The fp32 bit pattern of ``value`` rounded to fp32 (round to nearest even), as an int.

    Parameters
    ----------
    value : float

    Returns
    -------
    int
        0 .. 2^32 - 1.

    Raises
    ------
    OverflowError
        When value is finite but beyond fp32's range (struct refuses to round it to inf).

    Examples
    --------
    >>> hex(fp32_bits(1.0)), hex(fp32_bits(-0.0)), hex(fp32_bits(0.1))
    ('0x3f800000', '0x80000000', '0x3dcccccd')
    """
    return struct.unpack("<I", struct.pack("<f", value))[0]


def exact_decimal(value: float) -> str:
    """The exact decimal expansion of a binary float (no rounding), e.g. '0.5' or '1.0'."""
    return format(Decimal(value), "f") if value != int(value) else repr(float(value))


def read(registry=None) -> dict:
    """The whole registry file as a dict (schema checked).

    Parameters
    ----------
    registry : str or Path, optional
        A registry file; default: the one shipped with fa4num (:func:`default_registry`).

    Returns
    -------
    dict
        {"schema": "fa4num-polys/1", "entries": {name: entry}}.

    Raises
    ------
    ValueError
        When the file does not exist, is not JSON, or is not a ``fa4num-polys/1`` registry (the message names
        ``registry`` and the path).

    Examples
    --------
    >>> "fa4-deg3" in read()["entries"]
    True
    """
    path = Path(registry) if registry is not None else default_registry()
    if not path.is_file():
        raise ValueError(f"registry: no such file: {path}")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"registry: {path} is not valid JSON ({err})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("entries"), dict):
        raise ValueError(f"registry: {path} is not a {SCHEMA} registry file")
    return data


def poly_entry(name: str, *, registry=None) -> dict:
    """The full registry entry ``name``: coefficients, function, interval, format, source, metrics, provenance.

    Parameters
    ----------
    name : str
    registry : str or Path, optional
        A registry file; default: the one shipped with fa4num (:func:`default_registry`).

    Returns
    -------
    dict
        The entry as stored (``coeffs`` as exact decimal strings, ``coeffs_fp32_bits`` as hex strings, ...).

    Raises
    ------
    ValueError
        Naming ``name`` and the known names when it is absent, or when the registry cannot be read.

    Examples
    --------
    >>> e = poly_entry("fa4-deg3")
    >>> e["degree"], e["coeff_format"], e["coeffs_fp32_bits"][0]
    (3, 'fp32', '0x3F800000')
    >>> poly_entry("no-such-set")
    Traceback (most recent call last):
        ...
    ValueError: name: no coefficient set 'no-such-set' in the registry; known: fa4-deg1, ...
    """
    entries = read(registry)["entries"]
    if name not in entries:
        raise ValueError(f"name: no coefficient set {name!r} in the registry; known: {', '.join(sorted(entries))}")
    return entries[name]


def load_poly(name: str, *, registry=None) -> tuple:
    """Coefficients c0..cn (Python floats, exact) of the registry entry ``name``.

    Usable directly as ``fa4num.ex2.fa4_emulated(x, degree, coeffs=load_poly(name))``.

    Parameters
    ----------
    name : str
        An entry of the registry (e.g. "fa4-deg3").
    registry : str or Path, optional
        A registry file; default: the one shipped with fa4num (:func:`default_registry`).

    Returns
    -------
    tuple of float
        c0..cn, each exactly an fp32 value.

    Raises
    ------
    ValueError
        When the registry cannot be read, ``name`` is not in it, or the entry is corrupt (its decimals and fp32 bits
        disagree).

    Examples
    --------
    >>> load_poly("fa4-deg1")[0]
    1.0
    """
    entry = poly_entry(name, registry=registry)
    try:
        coeffs = tuple(float(Decimal(c)) for c in entry["coeffs"])
        bits = [int(b, 16) for b in entry.get("coeffs_fp32_bits", [])]
    except (KeyError, TypeError, ArithmeticError, ValueError):
        raise ValueError(f"name: entry {name!r} is corrupt (its coeffs are not decimal numbers)") from None
    if bits and [fp32_bits(c) for c in coeffs] != bits:
        raise ValueError(f"name: entry {name!r} is corrupt (coefficients and their fp32 bits disagree)")
    return coeffs


def check_writable(registry) -> Path:
    """Fail early (before any computation) when ``registry`` cannot be written; return it as a Path.

    An existing file must be a registry (it is never overwritten otherwise) and writable; a new file needs a
    writable existing ancestor folder.

    Parameters
    ----------
    registry : str or Path

    Returns
    -------
    pathlib.Path

    Raises
    ------
    ValueError
        Naming ``registry``: a folder, a file that is not a registry, or no write permission.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> check_writable(d / "new" / "registry.json") == d / "new" / "registry.json"
    True
    >>> check_writable(d)
    Traceback (most recent call last):
        ...
    ValueError: registry: ... is a folder, not a registry file
    """
    path = Path(registry)
    if path.exists():
        if path.is_dir():
            raise ValueError(f"registry: {path} is a folder, not a registry file")
        read(path)   # refuse to overwrite something that is not a registry
        if not os.access(path, os.W_OK):
            raise ValueError(f"registry: {path} is not writable")
    parent = path.parent if str(path.parent) else Path(".")
    existing = parent
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"registry: cannot create files in {existing}")
    return path


def write_entry(name: str, coeffs, *, source: str, metrics: dict, provenance: dict, function: str = "2^x",
                interval=(0.0, 1.0), coeff_format: str = "fp32", fit: dict | None = None,
                registry=None) -> Path:
    """Add or replace the entry ``name`` (letters, digits, '-', '_', '.') and rewrite the file, sorted.

    A ``registry`` that does not exist yet is created. The file is replaced atomically (a temporary file in the
    same folder, then a rename), so an interrupted write leaves the previous registry intact. The coefficients are
    stored as exact decimals and fp32 bit patterns; a "+dirty" code revision is cleaned when the only change in the
    tree is the registry itself.

    Parameters
    ----------
    name : str
    coeffs : sequence of float
        c0 first, fp32 values.
    source : str
        Where the set comes from (e.g. "fa4num fit --degree 3").
    metrics : dict
    provenance : dict
    function : str
    interval : (float, float)
    coeff_format : str
    fit : dict, optional
        The fit's settings, stored as the entry's "fit".
    registry : str or Path, optional
        Default: the shipped registry.

    Returns
    -------
    pathlib.Path
        The registry written.

    Raises
    ------
    ValueError
        For a bad name or a registry that cannot be written (check_writable).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> reg = pathlib.Path(tempfile.mkdtemp()) / "mine.json"
    >>> write_entry("half", (1.0, 0.5), source="doctest", metrics={}, provenance={}, registry=reg) == reg
    True
    >>> load_poly("half", registry=reg), poly_entry("half", registry=reg)["coeffs_fp32_bits"]
    ((1.0, 0.5), ['0x3F800000', '0x3F000000'])
    """
    if not name or not all(ch.isalnum() or ch in "-_." for ch in name):
        raise ValueError(f"name: {name!r} must be non-empty letters, digits, '-', '_' or '.'")
    path = check_writable(registry if registry is not None else default_registry())
    data = read(path) if path.exists() else {"schema": SCHEMA, "entries": {}}
    entry = {"name": name, "function": function, "interval": list(interval), "degree": len(coeffs) - 1,
             "coeff_format": coeff_format, "coeffs": [exact_decimal(c) for c in coeffs],
             "coeffs_fp32_bits": [f"0x{fp32_bits(c):08X}" for c in coeffs], "source": source,
             "metrics": metrics, "provenance": provenance}
    if fit is not None:
        entry["fit"] = fit
    entry["provenance"] = _own_revision(provenance, path)
    data["entries"][name] = entry
    data["entries"] = dict(sorted(data["entries"].items()))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(data, indent=1, sort_keys=False) + "\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path


def _own_revision(provenance: dict, path: Path) -> dict:
    """The provenance with '+dirty' dropped from its code revision when the only uncommitted tracked change is
    the registry file itself: an entry records the code it was computed with, and writing entries one after
    another must not mark the later ones as made from a modified tree."""
    rev = provenance.get("code_revision")
    if not isinstance(rev, str) or not rev.endswith("+dirty"):
        return provenance
    try:
        root = subprocess.run(["git", "-C", str(path.parent), "rev-parse", "--show-toplevel"], capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
        changed = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                                 capture_output=True, text=True, timeout=10, check=True).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return provenance
    own = {path.resolve()}
    if all((Path(root) / line[3:].split(" -> ")[-1]).resolve() in own for line in changed):
        return {**provenance, "code_revision": rev[:-len("+dirty")]}
    return provenance


def export(coeffs, fmt: str, *, name: str = "POLY_EX2") -> str:
    """Source text declaring ``coeffs`` (c0 first, fp32) for a kernel language.

    cute    a Python tuple of exact decimals, like FA4's POLY_EX2 in flash_attn/cute/utils.py
    c       a C/CUDA ``static const float`` array of hexadecimal float literals (exact)
    ptx     one PTX fp32 immediate per coefficient (0f3F31F519), as in FA4's e2e_asm2 inline assembly
    triton  ``tl.constexpr`` module constants a @triton.jit kernel can read

    Parameters
    ----------
    coeffs : sequence of float
        c0 first; each must be exactly an fp32 number.
    fmt : {"cute", "c", "ptx", "triton"}
    name : str
        Identifier of the declaration (non-alphanumeric characters become '_').

    Returns
    -------
    str
        The source text, ending in a newline.

    Raises
    ------
    ValueError
        For an unknown fmt or a coefficient that is not finite and exact in fp32.

    Examples
    --------
    >>> print(export((1.0, 0.5), "c", name="P"), end="")
    static const float P[2] = {0x1p+0f, 0x1p-1f};  /* c0..c1 */
    """
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"fmt: must be one of {EXPORT_FORMATS}, got {fmt!r}")
    coeffs = [float(c) for c in coeffs]
    for k, c in enumerate(coeffs):
        if not math.isfinite(c) or struct.unpack("<f", struct.pack("<f", c))[0] != c:
            raise ValueError(f"coeffs: c{k} = {c!r} is not exactly an fp32 number")
    ident = "".join(ch if ch.isalnum() else "_" for ch in name)
    if fmt == "cute":
        body = ",\n".join(f"    {exact_decimal(c)}" for c in coeffs)
        return f"{ident} = (\n{body},\n)  # c0..c{len(coeffs) - 1}, exact fp32 values\n"
    if fmt == "c":
        lits = ", ".join(_c_hex(c) for c in coeffs)
        return f"static const float {ident}[{len(coeffs)}] = {{{lits}}};  /* c0..c{len(coeffs) - 1} */\n"
    if fmt == "ptx":
        return "".join(f"// {ident} c{k} = {exact_decimal(c)}\n0f{fp32_bits(c):08X}\n"
                       for k, c in enumerate(coeffs))
    lines = ["import triton.language as tl", ""]
    lines += [f"{ident}_C{k} = tl.constexpr({c!r})  # 0x{fp32_bits(c):08X}" for k, c in enumerate(coeffs)]
    return "\n".join(lines) + "\n"


def _c_hex(value: float) -> str:
    if value == 0:
        return "0.0f"
    mant, exp = float.hex(value).split("p")
    mant = mant.rstrip("0").rstrip(".") if "." in mant else mant
    return f"{mant}p{exp}f"
