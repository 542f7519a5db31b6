"""Grids: a TOML file naming a study function and its parameter axes; each task is one configuration.

Format (the shipped grids are ``fa4num/study/grids/*.toml``, package data; read with :mod:`tomllib`)::

    name = "smoke"                      # optional, defaults to the file's stem
    study = "skip_rate"                 # a name in fa4num.study.STUDIES, or "package.module:function"
    description = "..."
    [fixed]                             # parameters every task gets
    heads = 2
    [[axes]]                            # one or more blocks; each is a Cartesian product of its lists
    dist = ["gaussian", "sink"]
    seqlen = [1024, 4096]
    [[axes]]
    dist = ["minilm"]
    seqlen = [512]

The tasks are the union of the blocks' products (duplicates once), each merged with ``fixed``. A task's key is a
hash of the study (name and version) and its configuration, so results stored under it stay valid until the
configuration or the study's version changes.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

_SCALARS = (bool, int, float, str)


@dataclass(frozen=True)
class Grid:
    """A parsed grid: ``tasks`` are plain dicts of scalars, in file order."""
    name: str
    study: str
    description: str
    fixed: dict
    axes: tuple
    path: Path | None = None
    tasks: tuple = field(default=(), repr=False)

    def __len__(self) -> int:
        return len(self.tasks)


def shipped_grids() -> dict:
    """The grids shipped with fa4num (``fa4num/study/grids/*.toml``, package data), by name."""
    from importlib.resources import files
    folder = files(__package__) / "grids"
    return {p.name[:-5]: p for p in sorted(folder.iterdir(), key=lambda t: t.name) if p.name.endswith(".toml")}


def find_grid(name_or_path):
    """A grid file from a path to a .toml file or the name of a shipped grid (``smoke`` -> smoke.toml).

    Examples
    --------
    >>> find_grid("smoke").name
    'smoke.toml'
    >>> find_grid("nosuch")
    Traceback (most recent call last):
    ...
    ValueError: grid: expected a .toml file or one of ['error_budget', 'scaling', 'skip_rate', 'smoke'], got 'nosuch'
    """
    text = str(name_or_path)
    p = Path(text)
    if p.suffix == ".toml" or "/" in text or p.exists():
        if p.is_file():
            return p
        raise ValueError(f"grid: {text} is not a file" + (" (a folder)" if p.is_dir() else "") +
                         "; give a .toml grid file or a shipped grid's name")
    grids = shipped_grids()
    if text in grids:
        return grids[text]
    raise ValueError(f"grid: expected a .toml file or one of {sorted(grids)}, got {text!r}")


def list_grids() -> list[Grid]:
    """Every grid shipped with fa4num (package data ``fa4num/study/grids``), by name.

    A file that does not parse raises (``fa4num study list`` reports it).

    Parameters
    ----------
    None

    Returns
    -------
    list of Grid, sorted by name

    Raises
    ------
    ValueError
        From parse_grid, for a grid file that is not valid.

    Examples
    --------
    >>> "smoke" in [g.name for g in list_grids()]
    True
    """
    return [load_grid(p) for p in shipped_grids().values()]


def _check_scalar(where: str, name: str, value):
    if not isinstance(value, _SCALARS):
        raise ValueError(f"{where}: parameter {name!r} must be a bool, int, float or string, got {value!r}")


def parse_grid(doc: dict, *, name: str = "grid", path: Path | None = None) -> Grid:
    """Build a :class:`Grid` from a parsed TOML document (see the module docstring for the format).

    Parameters
    ----------
    doc : dict
        Top-level keys: "study" (required), "name", "description", "fixed" (a table of scalars) and "axes" (a
        table or an array of tables of non-empty lists; each block is a Cartesian product, blocks are
        concatenated, duplicate tasks dropped).
    name : str
        The grid's name, for error messages.
    path : Path, optional
        The file it came from.

    Returns
    -------
    Grid

    Raises
    ------
    ValueError
        Naming the grid: unknown keys, a missing study, a parameter both fixed and an axis, an empty axis, or a
        value that is not a bool, int, float or string.

    Examples
    --------
    >>> doc = {"study": "skip_rate", "fixed": {"heads": 1}, "axes": {"seqlen": [256, 512], "threshold": [0, 8]}}
    >>> g = parse_grid(doc)
    >>> len(g), g.tasks[0]
    (4, {'heads': 1, 'seqlen': 256, 'threshold': 0})
    >>> parse_grid({"study": "skip_rate", "axes": {"seqlen": []}})
    Traceback (most recent call last):
        ...
    ValueError: grid grid: axis 'seqlen' (axes block 0) must be a non-empty list
    """
    unknown = sorted(set(doc) - {"name", "study", "description", "fixed", "axes"})
    if unknown:
        raise ValueError(f"grid {name}: unknown top-level keys {unknown}; allowed: name, study, description, "
                         "fixed, axes")
    study = doc.get("study")
    if not isinstance(study, str) or not study:
        raise ValueError(f"grid {name}: 'study' must name a study function (fa4num.study.STUDIES or module:func)")
    fixed = dict(doc.get("fixed", {}))
    for k, v in fixed.items():
        _check_scalar(f"grid {name} [fixed]", k, v)
    blocks = doc.get("axes", [{}])
    if isinstance(blocks, dict):
        blocks = [blocks]
    tasks, seen = [], set()
    for i, block in enumerate(blocks):
        for k, vals in block.items():
            if k in fixed:
                raise ValueError(f"grid {name}: parameter {k!r} is both fixed and an axis (axes block {i})")
            if not isinstance(vals, list) or not vals:
                raise ValueError(f"grid {name}: axis {k!r} (axes block {i}) must be a non-empty list")
            for v in vals:
                _check_scalar(f"grid {name} axes block {i}", k, v)
        names = list(block)
        for combo in itertools.product(*(block[k] for k in names)):
            cfg = {**fixed, **dict(zip(names, combo))}
            key = config_key(study, cfg)
            if key not in seen:
                seen.add(key)
                tasks.append(cfg)
    return Grid(doc.get("name", name), study, doc.get("description", ""), fixed, tuple(blocks), path,
                tuple(tasks))


def load_grid(name_or_path) -> Grid:
    """Read a grid file (a path, or the name of a shipped grid, :func:`shipped_grids`).

    Parameters
    ----------
    name_or_path : str or Path
        A .toml path, or the name of a shipped grid.

    Returns
    -------
    Grid

    Raises
    ------
    ValueError
        When no such grid exists or the file is not a valid grid (parse_grid).

    Examples
    --------
    >>> g = load_grid("smoke")
    >>> g.study, len(g) <= 16
    ('skip_rate', True)
    """
    path = find_grid(name_or_path)
    stem = path.name[:-5] if path.name.endswith(".toml") else path.name
    try:
        doc = tomllib.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise ValueError(f"grid: cannot read {path} as TOML ({' '.join(str(err).split())})") from None
    return parse_grid(doc, name=stem, path=Path(str(path)))


def config_key(study: str, config: dict, version: int | None = None) -> str:
    """16 hex digits of SHA-256 over the study, its version and the configuration (JSON, sorted keys).

    The result store's key of one task: a rerun skips configurations whose key is already stored, and bumping a
    study's ``version`` invalidates its old rows.

    Parameters
    ----------
    study : str
    config : dict
        The task's parameters (JSON-serialisable scalars).
    version : int, optional
        Default: the registered study's ``version`` attribute (1 when it has none).

    Returns
    -------
    str
        16 lowercase hex digits.

    Examples
    --------
    >>> k = config_key("skip_rate", {"seqlen": 512, "dist": "sink"}, version=1)
    >>> len(k), k == config_key("skip_rate", {"dist": "sink", "seqlen": 512}, version=1)   # key order is irrelevant
    (16, True)
    >>> k == config_key("skip_rate", {"seqlen": 512, "dist": "sink"}, version=2)
    False
    """
    if version is None:
        from .studies import study_version
        version = study_version(study)
    blob = json.dumps({"study": study, "version": version, "config": config}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
