"""Coefficient sets for FA4's software exp2: the one resolver (:func:`resolve`) and the registries it searches.

A leaf module (standard library only), so that every layer and the ``fa4num polys`` command can turn a set's
name, a tuple or a "c0,c1,..." text into checked fp32 coefficients without importing numpy or the fitter.

Where sets live, searched in this order (the first registry naming a set wins; two registries giving one name
different coefficients is an error):

1. ``registry=`` / ``--registry PATH`` (a path or a list of paths);
2. the environment variable ``FA4NUM_POLYS`` (paths separated by ``os.pathsep``, ':' on Linux);
3. the user registry :func:`user_dir` (``$XDG_DATA_HOME/fa4num/polys``, by default ``~/.local/share/fa4num/polys``),
   where ``fa4num fit --write`` puts new sets;
4. the sets shipped with fa4num (:func:`shipped_dir`): the repository's top-level ``polys/`` folder, which the
   build maps into the wheel as ``fa4num/polys_data`` (a source checkout, an editable install and a wheel read
   the same files).

A registry is a folder of set files (``<name>.json``, schema ``fa4num-poly/1``: one entry per file, as in
``polys/``) or one registry file (schema ``fa4num-polys/1``: ``{"schema": ..., "entries": {name: entry}}``).
An entry holds ``coeffs`` (c0 first, as exact decimal strings) and ``coeffs_fp32_bits``, ``function``,
``interval``, ``coeff_format``, ``source``, ``metrics``, ``provenance``, and optionally ``aliases`` (other names
of the set) and ``release`` (FA4's sets: the flash-attn-4 release whose ``POLY_EX2`` it is). Nothing here
writes inside the installed package.
"""
from __future__ import annotations

import json
import math
import numbers
import os
import struct
import subprocess
import tempfile
from dataclasses import dataclass
from decimal import Decimal
from importlib import resources
from pathlib import Path

from fa4num.outputs import check_output_dir

SCHEMA = "fa4num-polys/1"       # a registry file: {"schema", "entries": {name: entry}}
SET_SCHEMA = "fa4num-poly/1"    # one set per file: the entry itself, with "schema"
ENV_VAR = "FA4NUM_POLYS"
EXPORT_FORMATS = ("cute", "c", "ptx", "triton")
_NAME_CHARS = "-_."


@dataclass(frozen=True)
class PolySet:
    """A resolved coefficient set: fp32 coefficients c0 first, where they came from, and their bits.

    coeffs   tuple of Python floats, each exactly an fp32 number
    name     the registry entry's name, or None for coefficients given as numbers
    bits     the fp32 bit patterns (ints), c0 first
    origin   the registry path the set was read from, or None
    """
    coeffs: tuple
    name: str | None
    bits: tuple
    origin: str | None = None

    @property
    def degree(self) -> int:
        return len(self.coeffs) - 1

    @property
    def key(self) -> str:
        """The set's identity for names and caches: its fp32 bits, e.g. 'fp32-3f800000-3f000000'."""
        return "fp32-" + "-".join(f"{b:08x}" for b in self.bits)

    @property
    def label(self) -> str:
        """The entry name when there is one, else :attr:`key`."""
        return self.name or self.key


def shipped_dir() -> Path:
    """The folder of the sets shipped with fa4num (one ``<name>.json`` per set).

    Parameters
    ----------
    None

    Returns
    -------
    pathlib.Path
        ``fa4num/polys_data`` in an installed wheel; the repository's ``polys/`` in a source checkout or an
        editable install (the same files: the build maps ``polys/`` into the wheel).

    Examples
    --------
    >>> (shipped_dir() / "fa4-4.0.0b36-deg3.json").is_file()
    True
    """
    data = Path(str(resources.files("fa4num"))) / "polys_data"
    return data if data.is_dir() else Path(__file__).resolve().parent.parent / "polys"


def user_dir() -> Path:
    """The user registry (a folder of set files): ``$XDG_DATA_HOME/fa4num/polys``, default
    ``~/.local/share/fa4num/polys``. ``fa4num fit --write`` writes here; it is searched when it exists.

    Parameters
    ----------
    None

    Returns
    -------
    pathlib.Path
        The folder (it may not exist yet).

    Examples
    --------
    >>> user_dir().parts[-2:]
    ('fa4num', 'polys')
    """
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "fa4num" / "polys"


def _paths(registry) -> list:
    if registry is None:
        return []
    if isinstance(registry, (str, os.PathLike)):
        return [Path(registry)]
    try:
        return [Path(p) for p in registry]
    except TypeError:
        raise TypeError(f"registry: expected a path or a list of paths, got {type(registry).__name__}") from None


def search_path(registry=None) -> list:
    """The registries searched for a set name, in order (see the module docstring).

    Parameters
    ----------
    registry : path or list of paths, optional
        Searched first; each must exist.

    Returns
    -------
    list of pathlib.Path

    Examples
    --------
    >>> search_path()[-1] == shipped_dir()
    True
    """
    env = [Path(p) for p in os.environ.get(ENV_VAR, "").split(os.pathsep) if p]
    missing = [str(p) for p in env if not p.exists()]
    if missing:   # a typo in the variable would otherwise hide the user's sets without a word
        raise ValueError(f"{ENV_VAR}: no such registry: {', '.join(missing)} (each entry is a folder of set files or "
                         f"a registry file; fix or unset it)")
    user = [user_dir()] if user_dir().exists() else []
    return _paths(registry) + env + user + [shipped_dir()]


def _load_json(path: Path, what: str):
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{what}: {path} is not valid JSON ({err})") from None
    except OSError as err:
        raise ValueError(f"{what}: cannot read {path} ({err.strerror})") from None


def _read_set_file(path: Path) -> dict:
    data = _load_json(path, "registry")
    if not isinstance(data, dict) or data.get("schema") != SET_SCHEMA or data.get("name") != path.stem:
        raise ValueError(f"registry: {path} is not a {SET_SCHEMA} set file named after its entry ({path.stem!r})")
    return {k: v for k, v in data.items() if k != "schema"}


def read(registry=None) -> dict:
    """One registry (a folder of set files or a registry file) as a dict, schema checked.

    Parameters
    ----------
    registry : str or Path, optional
        Default: the sets shipped with fa4num (:func:`shipped_dir`).

    Returns
    -------
    dict
        {"schema": "fa4num-polys/1", "entries": {name: entry}}, entries sorted by name.

    Raises
    ------
    ValueError
        When the path does not exist, is not JSON, or is not a registry (the message names ``registry``).

    Examples
    --------
    >>> "fa4-4.0.0b36-deg3" in read()["entries"]
    True
    """
    path = Path(registry) if registry is not None else shipped_dir()
    if path.is_dir():
        entries = {p.stem: _read_set_file(p) for p in sorted(path.glob("*.json"))}
        return {"schema": SCHEMA, "entries": entries}
    if not path.is_file():
        raise ValueError(f"registry: no such file: {path}")
    data = _load_json(path, "registry")
    if isinstance(data, dict) and data.get("schema") == SET_SCHEMA:
        return {"schema": SCHEMA, "entries": {path.stem: _read_set_file(path)}}
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("entries"), dict):
        raise ValueError(f"registry: {path} is not a {SCHEMA} registry file")
    return data


def entries(registry=None) -> dict:
    """Every set of the search path (:func:`search_path`), by name and alias.

    Parameters
    ----------
    registry : path or list of paths, optional
        Searched before the others.

    Returns
    -------
    dict
        {name or alias: (entry, path of its registry)}.

    Raises
    ------
    ValueError
        When a registry cannot be read, or two registries give one name different coefficients (naming both).

    Examples
    --------
    >>> entries()["fa4-deg3"][0]["name"]
    'fa4-4.0.0b36-deg3'
    """
    found = {}
    for path in search_path(registry):
        if path == shipped_dir() and not path.exists():
            continue
        for name, entry in read(path)["entries"].items():
            for n in [name, *entry.get("aliases", ())]:
                if n in found:
                    other, where = found[n]
                    if other.get("coeffs_fp32_bits") != entry.get("coeffs_fp32_bits"):
                        raise ValueError(f"registry: {n!r} names different coefficients in {where} and {path}")
                    continue
                found[n] = (entry, path)
    return found


def poly_entry(name: str, *, registry=None) -> dict:
    """The registry entry ``name`` (or an alias of it) from the search path.

    Parameters
    ----------
    name : str
    registry : path or list of paths, optional
        Searched first (:func:`search_path`).

    Returns
    -------
    dict
        The entry as stored (``coeffs`` as exact decimal strings, ``coeffs_fp32_bits`` as hex strings, ...).

    Raises
    ------
    ValueError
        Naming ``name`` and the known names when it is absent, or when a registry cannot be read.

    Examples
    --------
    >>> e = poly_entry("fa4-deg3")
    >>> e["name"], e["release"], e["coeffs_fp32_bits"][1]
    ('fa4-4.0.0b36-deg3', '4.0.0b36', '0x3F31F519')
    >>> poly_entry("no-such-set")
    Traceback (most recent call last):
        ...
    ValueError: name: no coefficient set 'no-such-set' in the registries searched (...); known: fa4-4.0.0b36-deg1, ...
    """
    return _lookup(name, registry, "name")[0]


def _lookup(name: str, registry, what: str):
    found = entries(registry)
    if name not in found:
        where = ", ".join(str(p) for p in search_path(registry))
        known = ", ".join(sorted(n for n, (e, _) in found.items() if e.get("name") == n))
        raise ValueError(f"{what}: no coefficient set {name!r} in the registries searched ({where}); known: {known}")
    return found[name]


def _fp32(value: float) -> float:
    """value rounded to fp32; inf when beyond fp32's range (then it is not an fp32 number: the caller refuses it)."""
    try:
        return struct.unpack("<f", struct.pack("<f", value))[0]
    except OverflowError:
        return math.inf


def _from_bits(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def _parse_part(part: str, text: str) -> float:
    try:
        if part.lower().lstrip("+-").startswith("0x"):
            if "p" in part.lower():          # a C99 hexadecimal float literal, 0x1.6p-1
                return float.fromhex(part)
            bits = int(part, 16)
            if not 0 <= bits < 1 << 32:
                raise ValueError
            return _from_bits(bits)
        return float(part)
    except ValueError:
        raise ValueError(f"coeffs: expected c0,c1,... as decimal numbers or 0x fp32 bit patterns (or a set "
                         f"name), got {part!r} in {text!r}") from None


def is_name(text: str) -> bool:
    """Whether ``resolve`` reads ``text`` as a set name (not "c0,c1,...", a number or 0x bits).

    Examples
    --------
    >>> is_name("fa4-deg3"), is_name("1,0.5"), is_name("0x3f800000")
    (True, False, False)
    """
    if "," in text or text.lower().lstrip("+-").startswith("0x"):
        return False
    try:
        float(text)
    except ValueError:
        return True
    return False


def resolve(spec, *, degree=None, registry=None) -> PolySet:
    """The one way from a coefficient specification to checked fp32 coefficients (c0 first).

    Parameters
    ----------
    spec : str, sequence of real numbers, or PolySet
        - a set name or alias from the registries (:func:`search_path`), e.g. "fa4-deg3", "fa4num-minimax-deg5";
        - a text "c0,c1,..." of decimal numbers (read as Python's float() reads them), 0x fp32 bit patterns
          ("0x3f800000") or hexadecimal floats ("0x1p-1"), mixed as you like;
        - a sequence of real numbers (Python floats, numpy.float32, ...).

        Every value must be finite and exactly an fp32 number: nothing is rounded silently.
    degree : int, optional
        When given, the set must have degree + 1 coefficients.
    registry : path or list of paths, optional
        Registries searched before the others for a name.

    Returns
    -------
    PolySet
        ``.coeffs`` (floats), ``.name`` (entry name or None), ``.bits``, ``.key`` (the bits, for caches).

    Raises
    ------
    ValueError
        Naming ``coeffs`` (or ``degree``): an unknown name, a bad number, a value not exact in fp32, fewer than
        two coefficients, or a count that disagrees with ``degree``.
    TypeError
        Naming ``coeffs`` when spec is neither text nor a sequence of real numbers.

    Examples
    --------
    >>> resolve("fa4-deg1").coeffs
    (1.0, 0.9224970936775208)
    >>> resolve("1,0x3f000000").coeffs, resolve([1.0, 0.5]).key
    ((1.0, 0.5), 'fp32-3f800000-3f000000')
    >>> resolve("1,0.1")
    Traceback (most recent call last):
        ...
    ValueError: coeffs: c1 = 0.1 is not exactly an fp32 number; round it to fp32 first (e.g. numpy.float32) ...
    >>> resolve([1.0, 0.5], degree=3)
    Traceback (most recent call last):
        ...
    ValueError: degree: coeffs has 2 values (degree 1), got degree=3
    """
    name = origin = None
    if isinstance(spec, PolySet):
        values, name, origin = list(spec.coeffs), spec.name, spec.origin
    elif isinstance(spec, str):
        text = spec.strip()
        if not text:
            raise ValueError("coeffs: expected a set name or c0,c1,..., got ''")
        if is_name(text):
            entry, path = _lookup(text, registry, "coeffs")
            name, origin = entry["name"], str(path)
            values = _entry_values(entry)
        else:
            values = [_parse_part(p.strip(), spec) for p in text.split(",")]
    else:
        try:   # an array or tensor through tolist: a torch tensor iterates as 0-d tensors, not numbers
            values = list(spec.tolist() if hasattr(spec, "tolist") else spec)
        except TypeError:
            raise TypeError(f"coeffs: expected a set name, a text c0,c1,... or a sequence of fp32 numbers, got "
                            f"{type(spec).__name__}") from None
        for k, c in enumerate(values):
            if isinstance(c, bool) or not isinstance(c, numbers.Real):
                raise TypeError(f"coeffs: c{k} must be a real number, got {c!r}")
        values = [float(c) for c in values]
    for k, c in enumerate(values):
        if not math.isfinite(c) or _fp32(c) != c:
            raise ValueError(f"coeffs: c{k} = {c!r} is not exactly an fp32 number; round it to fp32 first (e.g. "
                             "numpy.float32) so the rounding is explicit")
    if len(values) < 2:
        raise ValueError(f"coeffs: expected at least 2 coefficients c0,c1 (degree >= 1), got {len(values)}")
    if degree is not None:
        if isinstance(degree, bool) or not isinstance(degree, numbers.Integral):
            raise TypeError(f"degree: expected an integer, got {degree!r}")
        if int(degree) != len(values) - 1:
            raise ValueError(f"degree: coeffs has {len(values)} values (degree {len(values) - 1}), got "
                             f"degree={degree}")
    coeffs = tuple(values)
    return PolySet(coeffs, name, tuple(fp32_bits(c) for c in coeffs), origin)


def _entry_values(entry: dict) -> list:
    name = entry.get("name")
    try:
        values = [float(Decimal(c)) for c in entry["coeffs"]]
        bits = [int(b, 16) for b in entry.get("coeffs_fp32_bits", [])]
    except (KeyError, TypeError, ArithmeticError, ValueError):
        raise ValueError(f"coeffs: entry {name!r} is corrupt (its coeffs are not decimal numbers)") from None
    if bits and [fp32_bits(c) for c in values] != bits:
        raise ValueError(f"coeffs: entry {name!r} is corrupt (coefficients and their fp32 bits disagree)")
    return values


def load_poly(name: str, *, registry=None) -> tuple:
    """Coefficients c0..cn (Python floats, exact) of the set ``name``: ``resolve(name).coeffs``.

    Usable directly as ``fa4num.ex2.fa4_emulated(x, degree, coeffs=load_poly(name))``.

    Parameters
    ----------
    name : str
        A set name or alias (see :func:`resolve`).
    registry : path or list of paths, optional
        Searched first.

    Returns
    -------
    tuple of float
        c0..cn, each exactly an fp32 value.

    Examples
    --------
    >>> load_poly("fa4-deg1")[0]
    1.0
    """
    return resolve(name, registry=registry).coeffs


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


def _inside_package(path: Path) -> Path | None:
    """The installed package's folder (or the shipped sets' folder) holding ``path``, if any."""
    target = path.resolve()
    for root in (Path(__file__).resolve().parent, shipped_dir().resolve()):
        if target == root or root in target.parents:
            return root
    return None


def check_writable(registry) -> Path:
    """Fail early (before any computation) when ``registry`` cannot be written; return it as a Path.

    A path ending in ``.json`` is one registry file; any other path a folder of set files. Never inside the
    installed package or the shipped sets. An existing registry must be one (nothing else is overwritten); the
    folder it is written in must be writable (tried, not guessed from permission bits).

    Parameters
    ----------
    registry : str or Path

    Returns
    -------
    pathlib.Path

    Raises
    ------
    ValueError
        Naming ``registry``: inside the package, a folder named .json, a file not named .json, something that
        is not a registry, or a place that cannot be written.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> check_writable(d / "new" / "registry.json") == d / "new" / "registry.json"
    True
    >>> check_writable(d / "mine") == d / "mine"
    True
    >>> check_writable(shipped_dir())
    Traceback (most recent call last):
        ...
    ValueError: registry: ... holds the sets shipped with fa4num; write to your own registry (--registry PATH, ...
    """
    path = Path(registry)
    if _inside_package(path) is not None:
        raise ValueError(f"registry: {path} holds the sets shipped with fa4num; write to your own registry "
                         f"(--registry PATH, or the user registry {user_dir()})")
    if path.suffix == ".json":
        if path.is_dir():
            raise ValueError(f"registry: {path} is a folder, not a registry file")
        if path.exists():
            read(path)   # refuse to write into something that is not a registry
        folder = path.parent if str(path.parent) else Path(".")
    else:
        if path.exists() and not path.is_dir():
            raise ValueError(f"registry: {path} is a file; a registry file's name ends in .json (any other path "
                             "is a folder of set files)")
        if path.exists():
            read(path)
        folder = path
    check_output_dir(folder, option="registry")
    return path


def write_entry(name: str, coeffs, *, source: str, metrics: dict, provenance: dict, function: str = "2^x",
                interval=(0.0, 1.0), coeff_format: str = "fp32", fit: dict | None = None, aliases=(),
                release: str | None = None, registry=None) -> Path:
    """Add or replace the entry ``name`` (letters, digits, '-', '_', '.') in a user registry.

    A registry path ending in ``.json`` is one registry file (rewritten, entries sorted); any other path is a
    folder of set files (``<name>.json`` written, as in the shipped ``polys/``). It is created if absent, and
    replaced atomically (a temporary file in the same folder, then a rename). The coefficients are stored as
    exact decimals and fp32 bit patterns; a "+dirty" code revision is cleaned when the only change in the tree
    is the file written.

    Parameters
    ----------
    name : str
    coeffs : str or sequence of float
        Anything :func:`resolve` takes.
    source : str
        Where the set comes from (e.g. "fa4num fit --degree 3").
    metrics : dict
    provenance : dict
    function : str
    interval : (float, float)
    coeff_format : str
    fit : dict, optional
        The fit's settings, stored as the entry's "fit".
    aliases : sequence of str
        Other names the set answers to (e.g. "fa4-deg3" for "fa4-4.0.0b36-deg3").
    release : str, optional
        FA4's sets: the flash-attn-4 release whose POLY_EX2 this is.
    registry : str or Path, optional
        Default: the user registry (:func:`user_dir`); never the package.

    Returns
    -------
    pathlib.Path
        The file written.

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
    if not isinstance(name, str) or not name or not all(ch.isalnum() or ch in _NAME_CHARS for ch in name) \
            or not is_name(name):
        raise ValueError(f"name: {name!r} must be non-empty letters, digits, '-', '_' or '.' (not a number)")
    coeffs = resolve(coeffs, registry=registry).coeffs
    path = check_writable(registry if registry is not None else user_dir())
    entry = {"name": name, **({"aliases": list(aliases)} if aliases else {}),
             **({"release": release} if release is not None else {}), "function": function, "interval": list(interval), "degree": len(coeffs) - 1,
             "coeff_format": coeff_format, "coeffs": [exact_decimal(c) for c in coeffs],
             "coeffs_fp32_bits": [f"0x{fp32_bits(c):08X}" for c in coeffs], "source": source,
             "metrics": metrics, "provenance": provenance}
    if fit is not None:
        entry["fit"] = fit
    if path.suffix == ".json":
        data = read(path) if path.exists() else {"schema": SCHEMA, "entries": {}}
        entry["provenance"] = _own_revision(provenance, path)
        data["entries"][name] = entry
        data["entries"] = dict(sorted(data["entries"].items()))
        target = path
    else:
        target = path / f"{name}.json"
        entry["provenance"] = _own_revision(provenance, target)
        data = {"schema": SET_SCHEMA, **entry}
    write_json(target, data)
    return target


def write_json(path: Path, data: dict) -> None:
    """Write ``data`` as indented JSON to ``path`` atomically (temporary file in the same folder, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(data, indent=1, sort_keys=False) + "\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _own_revision(provenance: dict, path: Path) -> dict:
    """The provenance with '+dirty' dropped from its code revision when the only uncommitted tracked change is
    the file written: an entry records the code it was computed with, and writing entries one after another
    must not mark the later ones as made from a modified tree."""
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
    coeffs : str or sequence of float
        Anything :func:`resolve` takes (c0 first; each exactly an fp32 number).
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
        For an unknown fmt or coefficients :func:`resolve` refuses.

    Examples
    --------
    >>> print(export((1.0, 0.5), "c", name="P"), end="")
    static const float P[2] = {0x1p+0f, 0x1p-1f};  /* c0..c1 */
    """
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"fmt: must be one of {EXPORT_FORMATS}, got {fmt!r}")
    coeffs = resolve(coeffs).coeffs
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
