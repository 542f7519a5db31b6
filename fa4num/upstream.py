"""``fa4num upstream diff WHEEL``: read a flash-attn-4 wheel's numerics-bearing constants and rules without
importing it (``ast`` on the sources inside the zip) and compare them with fa4num's copies.

What is read (:func:`wheel_facts`; each fact has a name, a JSON value, and the file and line it came from):

- ``flash_attn/cute/utils.py``: ``POLY_EX2[d]`` (as fp32 bit patterns), ``LOG2_E``, the fp32 immediates of the
  ``ex2_emulation*`` / ``e2e_asm2`` inline PTX (the clamp -127 and the 1.5 * 2^23 rounding shifter);
- ``flash_fwd_sm100.py``: ``_TUNING_CONFIG`` / ``_FP8_TUNING_CONFIG`` (the ex2 fields of each key), the
  ``_tune.get("ex2_emu_*", default)`` defaults, every ``rescale_threshold = ...`` and ``max_offset = ...`` rule,
  and whether the dedicated hd256 forward kernel (``sm100_hd256_2cta_fmha_forward.py``) ships;
- ``softmax.py``: the ``apply_exp2_convert`` defaults (``ex2_emu_res``);
- ``interface.py``: the rules as normalised-AST digests: ``_tile_size_fwd_sm90``, ``_tile_size_bwd_sm90``,
  ``num_splits_heuristic``, ``_get_fwd_config``, the ``use_2cta_instrs = ...`` statements and the
  ``if pack_gqa is None`` block of ``_flash_attn_fwd``.

fa4num's side (:func:`fa4num_facts`) is its live copies where it has them as data (``fa4num.constants``, the
polys/ sets of the release, ``fa4num.attention.config``'s tuning tables and defaults) merged with the facts the
default release profile records (``fa4num/data/releases/<release>.json``, extracted from that release's wheel):
a rule whose digest differs is a rule fa4num's code was not written against. :func:`diff` compares, names each
drift with its file and line, and says which of fa4num's release profiles the wheel matches.
"""
from __future__ import annotations

import ast
import hashlib
import json
import re
import struct
import sys
import zipfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

PREFIX = "flash_attn/cute/"
FILES = ("utils.py", "flash_fwd_sm100.py", "softmax.py", "interface.py")
HD256_KERNEL = "sm100_hd256_2cta_fmha_forward.py"
RULE_FUNCTIONS = ("_tile_size_fwd_sm90", "_tile_size_bwd_sm90", "num_splits_heuristic", "_get_fwd_config")
TUNE_FIELDS = ("ex2_emu_freq", "ex2_emu_res", "ex2_emu_start_frg")
RELEASES_DIR = Path(str(resources.files("fa4num") / "data" / "releases"))


@dataclass(frozen=True)
class Fact:
    """One numerics-bearing constant or rule of a release: its value (JSON), and where it was read."""
    name: str
    value: object
    file: str
    line: int


def _f32_hex(x: float) -> str:
    return f"0x{struct.unpack('<I', struct.pack('<f', x))[0]:08X}"


def _digest(node) -> str:
    """SHA-256 (first 16 hex digits) of a node's AST without positions or docstrings: formatting and comments
    do not change it, any change of code does."""
    node = ast.parse(ast.unparse(node))
    for n in ast.walk(node):
        body = getattr(n, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            n.body = body[1:] or [ast.Pass()]
    return "sha256:" + hashlib.sha256(ast.dump(node, annotate_fields=False).encode()).hexdigest()[:16]


def _literal(node):
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None


def _utils_facts(tree, file) -> list:
    out = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name == "POLY_EX2" and isinstance(node.value, ast.Dict):
                for k, v in zip(node.value.keys, node.value.values):
                    coeffs = _literal(v)
                    if isinstance(coeffs, tuple):      # degree 0 is the float 1.0, unusable by ex2_emulation
                        out.append(Fact(f"POLY_EX2[{_literal(k)}]", [_f32_hex(c) for c in coeffs], file, v.lineno))
            elif name == "LOG2_E":
                out.append(Fact("LOG2_E", ast.unparse(node.value), file, node.lineno))
        if isinstance(node, ast.FunctionDef) and node.name.startswith(("ex2_emulation", "e2e_asm")):
            imms = sorted({m.upper() for n in ast.walk(node) if isinstance(n, ast.Constant)
                           and isinstance(n.value, str) for m in re.findall(r"0[fF][0-9A-Fa-f]{8}", n.value)})
            out.append(Fact(f"{node.name} immediates", ["0f" + m[2:] for m in imms], file, node.lineno))
    return out


def _tuning(node, name, file) -> list:
    out = []
    for k, v in zip(node.keys, node.values):
        key = _literal(k)
        entry = _literal(v) or {}
        out.append(Fact(f"{name}[{', '.join(map(str, key))}]", {f: entry.get(f) for f in TUNE_FIELDS}, file,
                        k.lineno))
    return out


def _fwd_sm100_facts(tree, file) -> list:
    out, counts = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in ("_TUNING_CONFIG", "_FP8_TUNING_CONFIG") and isinstance(node.value, ast.Dict):
                out += _tuning(node.value, name, file)
            elif name in ("rescale_threshold", "max_offset"):
                counts[name] = counts.get(name, 0) + 1
                out.append(Fact(f"{name} #{counts[name]}", ast.unparse(node.value), file, node.lineno))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and len(node.args) == 2 and isinstance(node.args[0], ast.Constant)
              and str(node.args[0].value).startswith("ex2_emu")):
            key = f"tune.get({node.args[0].value})"
            counts[key] = counts.get(key, 0) + 1
            out.append(Fact(f"{key} #{counts[key]}", _literal(node.args[1]), file, node.lineno))
    return out


def _softmax_facts(tree, file) -> list:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "apply_exp2_convert":
            args = node.args.args[len(node.args.args) - len(node.args.defaults):]
            return [Fact(f"apply_exp2_convert default {a.arg}", _literal(d), file, d.lineno)
                    for a, d in zip(args, node.args.defaults) if a.arg.startswith("ex2_emu")]
    return []


def _interface_facts(tree, file) -> list:
    out = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in RULE_FUNCTIONS:
            out.append(Fact(f"{node.name}()", _digest(node), file, node.lineno))
        if isinstance(node, ast.FunctionDef) and node.name == "_flash_attn_fwd":
            twocta = [n for n in ast.walk(node) if isinstance(n, ast.Assign) and len(n.targets) == 1
                      and isinstance(n.targets[0], ast.Name) and n.targets[0].id == "use_2cta_instrs"]
            if twocta:
                out.append(Fact("_flash_attn_fwd: use_2cta_instrs rule", _digest(ast.Module(twocta, [])), file,
                                twocta[0].lineno))
            pack = [n for n in ast.walk(node) if isinstance(n, ast.If) and ast.unparse(n.test) == "pack_gqa is None"]
            if pack:
                out.append(Fact("_flash_attn_fwd: pack_gqa default rule", _digest(pack[0]), file, pack[0].lineno))
    return out


_READERS = {"utils.py": _utils_facts, "flash_fwd_sm100.py": _fwd_sm100_facts, "softmax.py": _softmax_facts,
            "interface.py": _interface_facts}


def wheel_facts(wheel) -> dict:
    """The numerics-bearing facts of a flash-attn-4 wheel (or any zip holding ``flash_attn/cute/*.py``), read
    with ``ast``; nothing of it is imported or run.

    Parameters
    ----------
    wheel : str or Path
        A ``flash_attn_4-*.whl`` (a zip file).

    Returns
    -------
    dict
        name -> :class:`Fact`, plus ``"version"`` (a Fact whose value is the wheel's version, from its
        METADATA, or None).

    Raises
    ------
    ValueError
        When the file is not a zip or holds none of the files read.

    Examples
    --------
    A stand-in with one file, written here (fa4num ships no FA4 source; ``fa4num upstream diff`` reads the real
    wheel):

    >>> import io, zipfile
    >>> buf = io.BytesIO()
    >>> with zipfile.ZipFile(buf, "w") as z:
    ...     z.writestr(PREFIX + "utils.py", "POLY_EX2 = {1: (1.0, 1.0)}\\n")
    >>> facts = wheel_facts(buf)
    >>> facts["POLY_EX2[1]"].value, facts["version"].value
    (['0x3F800000', '0x3F800000'], None)
    """
    try:
        zf = zipfile.ZipFile(wheel)
    except (zipfile.BadZipFile, OSError) as err:
        raise ValueError(f"wheel: {wheel} is not a readable zip file ({err})") from None
    with zf:
        names = set(zf.namelist())
        if not any(PREFIX + f in names for f in FILES):
            raise ValueError(f"wheel: {wheel} holds none of {', '.join(PREFIX + f for f in FILES)}")
        facts = {}
        for f in FILES:
            if PREFIX + f not in names:
                continue
            tree = ast.parse(zf.read(PREFIX + f).decode())
            for fact in _READERS[f](tree, PREFIX + f):
                facts[fact.name] = fact
        facts["hd256 dedicated forward kernel"] = Fact("hd256 dedicated forward kernel",
                                                       PREFIX + HD256_KERNEL in names, PREFIX + HD256_KERNEL, 0)
        meta = next((n for n in names if n.endswith(".dist-info/METADATA")), None)
        version = None
        if meta:
            m = re.search(r"^Version: (\S+)", zf.read(meta).decode(), re.M)
            version = m.group(1) if m else None
        facts["version"] = Fact("version", version, meta or "", 0)
    return facts


# ------------------------------------------------------------------------------------- fa4num's side
def profile_facts(release: str) -> dict:
    """name -> value recorded for a release profile (``fa4num/data/releases/<release>.json``)."""
    path = RELEASES_DIR / f"{release}.json"
    if not path.exists():
        raise ValueError(f"release: no profile {release!r}; known: {known_releases()}")
    return json.loads(path.read_text())["facts"]


def known_releases() -> list[str]:
    """The release profiles that record facts (newest last)."""
    return sorted((p.stem for p in RELEASES_DIR.glob("*.json")), key=lambda r: int(r.rsplit("b", 1)[1]))


def fa4num_facts(release: str | None = None) -> dict:
    """name -> (value, where in fa4num) of fa4num's copies: the live constants and tables for the facts fa4num
    keeps as data, the profile's recorded facts for the rules (digests) and expressions.

    Parameters
    ----------
    release : str, optional
        The profile (default: the release fa4num models, :data:`fa4num.attention.releases.DEFAULT_RELEASE`).

    Returns
    -------
    dict
    """
    from fa4num import polys
    from fa4num.attention import config, releases
    from fa4num.constants import POLY_EX2_BITS
    release = release or releases.DEFAULT_RELEASE
    prof = releases.get(release)
    out = {n: (v, f"fa4num/data/releases/{release}.json") for n, v in profile_facts(release).items()}
    if release == releases.DEFAULT_RELEASE:
        # the live copies the code runs: they must say what the default release's wheel says
        for d, bits in POLY_EX2_BITS.items():
            out[f"POLY_EX2[{d}]"] = ([f"0x{b:08X}" for b in bits], "fa4num/constants.py POLY_EX2_BITS")
    for d in range(1, 6):
        name = f"fa4-{release}-deg{d}"
        try:
            ps = polys.resolve(name)
        except ValueError:
            continue
        out[f"POLY_EX2[{d}] (polys/{name}.json)"] = ([f"0x{b:08X}" for b in ps.bits], f"polys/{name}.json")
    where = ("fa4num/attention/config.py SM100_TUNING / SM100_FP8_TUNING" if release == releases.DEFAULT_RELEASE
             else f"fa4num/data/releases/{release}.json")
    for table, name in zip(config.tuning_tables(prof), ("_TUNING_CONFIG", "_FP8_TUNING_CONFIG")):
        for key, entry in table.items():
            out[f"{name}[{', '.join(map(str, key))}]"] = (dict(zip(TUNE_FIELDS, (entry[0], entry[1], entry[2]))),
                                                          where)
    if release == releases.DEFAULT_RELEASE:
        out["apply_exp2_convert default ex2_emu_res"] = (config.Sm100Options().ex2_emu_res,
                                                         "fa4num/attention/config.py Sm100Options.ex2_emu_res")
    return out


@dataclass(frozen=True)
class Drift:
    """A fact whose wheel value differs from fa4num's (``ours`` None: fa4num has no copy; ``theirs`` None: the
    wheel lacks it)."""
    name: str
    theirs: object
    ours: object
    file: str
    line: int
    where_ours: str


@dataclass(frozen=True)
class DiffResult:
    """``upstream diff``'s answer: the wheel's version, the drifts against the compared profile, and the
    profiles whose recorded facts the wheel matches exactly (with the count of differing facts for each)."""
    wheel: str
    version: object
    release: str
    drifts: list
    matches: list
    distance: dict

    @property
    def ok(self) -> bool:
        return not self.drifts


def _compare(theirs: dict, ours: dict) -> list:
    drifts = []
    for name in sorted(set(theirs) | set(ours)):
        if name == "version" or name.endswith(".json)"):
            continue
        t = theirs.get(name)
        o = ours.get(name)
        tv = None if t is None else t.value
        ov = None if o is None else o[0]
        if tv != ov:
            drifts.append(Drift(name, tv, ov, t.file if t else "", t.line if t else 0, o[1] if o else ""))
    # the polys/ sets of the release are fa4num's copies of POLY_EX2 as well
    for name, (ov, where) in ours.items():
        if name.endswith(".json)"):
            base = name.split(" ")[0]
            t = theirs.get(base)
            if t is not None and t.value != ov:
                drifts.append(Drift(name, t.value, ov, t.file, t.line, where))
    return drifts


def diff(wheel, *, release: str | None = None) -> DiffResult:
    """Compare a wheel's facts with fa4num's copies (the profile ``release``, default fa4num's release).

    Parameters
    ----------
    wheel : str or Path
    release : str, optional
        The profile to compare with (default: :data:`fa4num.attention.releases.DEFAULT_RELEASE`, whose live
        copies in fa4num's code are compared too).

    Returns
    -------
    DiffResult

    Examples
    --------
    A stand-in whose degree-3 POLY_EX2 is not FA4's (the real wheel gives ``r.ok`` True and ``r.matches``
    ['4.0.0b36']):

    >>> import io, zipfile
    >>> buf = io.BytesIO()
    >>> with zipfile.ZipFile(buf, "w") as z:
    ...     z.writestr(PREFIX + "utils.py", "POLY_EX2 = {3: (1.0, 0.5, 0.25, 0.125)}\\n")
    >>> r = diff(buf)
    >>> r.ok, "POLY_EX2[3]" in [d.name for d in r.drifts]
    (False, True)
    """
    from fa4num.attention import releases
    release = release or releases.DEFAULT_RELEASE
    theirs = wheel_facts(wheel)
    drifts = _compare(theirs, fa4num_facts(release))
    distance = {}
    for rel in known_releases():
        distance[rel] = len(_compare(theirs, {n: (v, rel) for n, v in profile_facts(rel).items()}))
    matches = [r for r, n in distance.items() if n == 0]
    return DiffResult(str(wheel), theirs["version"].value, release, drifts, matches, distance)


def extract_profile_facts(wheel) -> dict:
    """name -> value of a wheel's facts, as a release profile records them (``fa4num/data/releases``)."""
    return {n: f.value for n, f in sorted(wheel_facts(wheel).items()) if n != "version"}


# ------------------------------------------------------------------------------------------------ CLI
def _short(v) -> str:
    s = json.dumps(v)
    return s if len(s) <= 90 else s[:87] + "..."


def _diff_cmd(args) -> int:
    res = diff(args.wheel, release=args.release)
    print(f"wheel {res.wheel}: flash-attn-4 {res.version}; compared with fa4num's copies for release {res.release}")
    if res.ok:
        print(f"no drift: every numerics-bearing constant and rule read equals fa4num's ({res.release})")
    for d in res.drifts:
        print(f"DRIFT {d.name} at {d.file}:{d.line}: wheel {_short(d.theirs)}, fa4num {_short(d.ours)} "
              f"({d.where_ours or 'no copy'})", file=sys.stderr if not args.quiet_drift else sys.stdout)
    if res.matches:
        print("matches fa4num release profile(s): " + ", ".join(res.matches)
              + f" (select with fa4_release=\"{res.matches[-1]}\" / --fa4-release {res.matches[-1]})")
    else:
        near = min(res.distance, key=res.distance.get)
        print(f"matches no fa4num release profile; nearest {near} ({res.distance[near]} facts differ)")
    return 0 if res.ok else 1


def register(subparsers) -> None:
    from fa4num.argtypes import path_arg
    p = subparsers.add_parser("upstream", help="compare a flash-attn-4 wheel's numerics constants and rules with "
                                                "fa4num's copies")
    sub = p.add_subparsers(dest="upstream_command", metavar="SUBCOMMAND")
    q = sub.add_parser("diff", help="read WHEEL with ast (nothing imported) and report every drift; exit 1 on any")
    q.add_argument("wheel", type=path_arg)
    q.add_argument("--release", default=None, help="the fa4num release profile to compare with (default: "
                                                   "fa4num's release)")
    q.add_argument("--quiet-drift", action="store_true", help="print drifts on stdout instead of stderr")
    q.set_defaults(func=_diff_cmd)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
