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
configuration or the study's version changes. :func:`parse_grid` validates a grid against the study
function's signature before any task is built (the rules: ``docs/study.md``).
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


# columns every stored row has besides its configuration and metrics: no parameter or metric may take these names
RESERVED_COLUMNS = ("key", "study", "study_version", "grid", "code_revision", "host", "worker", "seconds",
                    "finished")
MAX_TASKS = 20_000   # a larger grid needs max_tasks=None (``study run --yes``): a typo must not hang the client


def _where(i) -> str:
    return "[fixed]" if i is None else f"axes block {i}"


def _signature(study: str):
    """(parameters by name, takes **kwargs) of the study function; annotations resolved where they can be."""
    import inspect

    from .studies import resolve_study
    fn = resolve_study(study)
    try:
        sig = inspect.signature(fn, eval_str=True)
    except (NameError, TypeError, SyntaxError):   # an annotation that does not evaluate: no type checks
        sig = inspect.signature(fn)
    params = {n: p for n, p in sig.parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return params, any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values())


_TYPES = {int: (int,), float: (int, float), str: (str,), bool: (bool,)}


def _check_value(name: str, study: str, k: str, v, where: str, param):
    if isinstance(v, list):
        raise ValueError(f"grid {name}: parameter {k!r} ({where}) must be a bool, int, float or string, got a list "
                         f"{v!r}" + ("; an axis is a list under [[axes]], not under [fixed]" if where == "[fixed]"
                                     else ""))
    if not isinstance(v, _SCALARS):
        raise ValueError(f"grid {name}: parameter {k!r} ({where}) must be a bool, int, float or string, got {v!r}")
    want = param.annotation if param is not None else None
    if k == "seed" or k.endswith("_seed"):
        want = int          # float seeds would merge into int(seed) inside the study
    ok = _TYPES.get(want)
    if ok is not None and not (type(v) in ok):
        raise ValueError(f"grid {name}: parameter {k!r} ({where}) of study {study} must be "
                         f"{'an' if want is int else 'a'} {want.__name__}"
                         + (" (int or float)" if want is float else "") + f", got {v!r} ({type(v).__name__})")


def parse_grid(doc: dict, *, name: str = "grid", path: Path | None = None, max_tasks: int | None = MAX_TASKS) -> Grid:
    """Build a :class:`Grid` from a parsed TOML document, validated before any task is built or run.

    The schema is documented in ``docs/study.md`` (and the module docstring).

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
    max_tasks : int or None
        Refuse a grid of more tasks (counted before duplicates are dropped, without building them); None: no
        limit.

    Returns
    -------
    Grid

    Raises
    ------
    ValueError
        Naming the grid and the key: an unknown top-level key; a missing or unknown study; a parameter the study
        does not take (with the closest name it does take), or a required one no task sets; a parameter both
        fixed and an axis, or named like a store column (:data:`RESERVED_COLUMNS`); an empty axis or one that
        is not a list; a value that is not a bool, int, float or string, or not of the type the study's
        signature gives (a seed must be an int); one parameter with values of different types (1 and "1", or
        8 and 8.0: different task keys for one configuration); more than ``max_tasks`` tasks.

    Examples
    --------
    >>> doc = {"study": "skip_rate", "fixed": {"heads": 1}, "axes": {"dist": ["sink"], "seqlen": [256, 512],
    ...        "threshold": [0, 8]}}
    >>> g = parse_grid(doc)
    >>> len(g), g.tasks[0]
    (4, {'heads': 1, 'dist': 'sink', 'seqlen': 256, 'threshold': 0})
    >>> parse_grid({"study": "skip_rate", "axes": {"dist": ["sink"], "seqlen": [], "threshold": [0]}})
    Traceback (most recent call last):
        ...
    ValueError: grid grid: axis 'seqlen' (axes block 0) must be a non-empty list
    >>> parse_grid({"study": "skip_rate", "axes": {"dist": ["sink"], "seqlen": [256], "thresold": [0]}})
    Traceback (most recent call last):
        ...
    ValueError: grid grid: study skip_rate takes no parameter 'thresold' (axes block 0); did you mean 'threshold'?
    >>> parse_grid({"study": "skip_rate", "fixed": {"dist": "sink", "seqlen": 256, "threshold": 8},
    ...             "axes": {"seed": [0, 1.5]}})
    Traceback (most recent call last):
        ...
    ValueError: grid grid: parameter 'seed' (axes block 0) of study skip_rate must be an int, got 1.5 (float)
    """
    unknown = sorted(set(doc) - {"name", "study", "description", "fixed", "axes"})
    if unknown:
        raise ValueError(f"grid {name}: unknown top-level keys {unknown}; allowed: name, study, description, "
                         "fixed, axes")
    study = doc.get("study")
    if not isinstance(study, str) or not study:
        raise ValueError(f"grid {name}: 'study' must name a study function (fa4num.study.STUDIES or module:func)")
    for k in ("name", "description"):
        if k in doc and not isinstance(doc[k], str):
            raise ValueError(f"grid {name}: {k!r} must be a string, got {doc[k]!r}")
    fixed = doc.get("fixed", {})
    if not isinstance(fixed, dict):
        raise ValueError(f"grid {name}: 'fixed' must be a table of parameters ([fixed]), got {fixed!r}")
    fixed = dict(fixed)
    blocks = doc.get("axes", [{}])
    if isinstance(blocks, dict):
        blocks = [blocks]
    if not isinstance(blocks, list) or not all(isinstance(b, dict) for b in blocks):
        raise ValueError(f"grid {name}: 'axes' must be a table ([axes]) or an array of tables ([[axes]])")
    try:
        params, var_kw = _signature(study)
    except ValueError as exc:
        raise ValueError(f"grid {name}: {exc}") from None
    types: dict = {}                          # parameter -> {type name: (where, value)}
    size = 0
    for i, block in [(None, fixed)] + list(enumerate(blocks)):
        for k, vals in block.items():
            where = _where(i)
            if k in RESERVED_COLUMNS:
                raise ValueError(f"grid {name}: parameter {k!r} ({where}) is a column every stored row has; "
                                 f"rename it (reserved: {', '.join(RESERVED_COLUMNS)})")
            if k not in params and not var_kw:
                import difflib
                close = difflib.get_close_matches(k, params, n=1)
                raise ValueError(f"grid {name}: study {study} takes no parameter {k!r} ({where}); "
                                 + (f"did you mean {close[0]!r}?" if close else f"it takes {', '.join(params)}"))
            if i is None:
                vals = [vals]
            else:
                if k in fixed:
                    raise ValueError(f"grid {name}: parameter {k!r} is both fixed and an axis ({where})")
                if not isinstance(vals, list) or not vals:
                    raise ValueError(f"grid {name}: axis {k!r} ({where}) must be a non-empty list")
            for v in vals:
                _check_value(name, study, k, v, where, params.get(k))
                types.setdefault(k, {}).setdefault(type(v).__name__, (where, v))
        if i is not None:
            n = 1
            for vals in block.values():
                n *= len(vals)
            size += n
    for k, seen in types.items():
        if len(seen) > 1:
            what = ", ".join(f"{v!r} ({t}, {w})" for t, (w, v) in seen.items())
            raise ValueError(f"grid {name}: parameter {k!r} mixes value types: {what}; write every value of one "
                             "parameter with one type (8.0 and 0.0, not 8 and 0.0: they would be different tasks)")
    if max_tasks is not None and size > max_tasks:
        raise ValueError(f"grid {name}: {size} tasks, over the limit of {max_tasks}; pass --yes "
                         "(`fa4num study run`) or max_tasks=None to run it")
    required = [n for n, p in params.items() if p.default is p.empty]
    tasks, seen_keys = [], set()
    for i, block in enumerate(blocks):
        missing = [n for n in required if n not in block and n not in fixed]
        if missing:
            raise ValueError(f"grid {name}: study {study} needs parameter(s) {missing}, set by neither [fixed] nor "
                             f"{_where(i)}")
        names = list(block)
        for combo in itertools.product(*(block[k] for k in names)):
            cfg = {**fixed, **dict(zip(names, combo))}
            key = config_key(study, cfg, 0)   # duplicates within the grid: any fixed version will do
            if key not in seen_keys:
                seen_keys.add(key)
                tasks.append(cfg)
    return Grid(doc.get("name", name), study, doc.get("description", ""), fixed, tuple(blocks), path,
                tuple(tasks))


def load_grid(name_or_path, *, max_tasks: int | None = MAX_TASKS) -> Grid:
    """Read a grid file (a path, or the name of a shipped grid, :func:`shipped_grids`).

    Parameters
    ----------
    name_or_path : str or Path
        A .toml path, or the name of a shipped grid.
    max_tasks : int or None
        As for :func:`parse_grid`.

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
    return parse_grid(doc, name=stem, path=Path(str(path)), max_tasks=max_tasks)


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
