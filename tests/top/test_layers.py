"""The import contract of fa4num (README "Layers"): imports point down the layer list, no cycle between
subpackages nor between the modules of one subpackage, no import of another subpackage's private module or name;
the scripts in experiments/ and benchmarks/ use public names only; the library reads no file outside fa4num/.

Every ``import``/``from ... import`` of every module is read from its AST, wherever it sits (module level or
inside a function), and so is every string constant naming an fa4num module (``importlib.import_module``
arguments and tables of module names). An attribute whose name starts with an underscore, read from a module of
another subpackage (``mufu._cache``), counts as a private import too.
"""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "fa4num"

# Layer of each subpackage (or top-level module), lowest first. A module may import from its own subpackage and
# from any subpackage of a strictly lower layer. The leaves at layer 0 hold facts that every layer reads (FA4's
# constants, the polys/ registry reader, provenance, the golden-file format, the report's section type); they
# import no other part of fa4num except leaves listed before them.
LAYERS = {
    "constants": 0, "provenance": 0, "polys": 0, "golden": 0, "section": 0, "argtypes": 0, "outputs": 0,
    "fp": 1,
    "hw": 2,
    "ex2": 3,
    "fit": 4,
    "softmax": 5,
    "attention": 6,
    "bounds": 7,
    "study": 8,
    "gpu": 9,
    "report": 10, "upstream": 10,
    "_polys_cli": 11, "cli": 12,
}
# The hooks through which the top layer reaches into each subpackage: ``<pkg>/_cli.py`` (``register``, for
# fa4num.cli) and ``<pkg>/_report.py`` (``report_sections``, for fa4num.report). They stay private so that nothing
# else depends on them; only the named top-level unit may import them.
HOOKS = {"_cli": "cli", "_report": "report"}
# the leaves among themselves: an explicit order (a leaf may import only leaves before it)
LEAF_ORDER = ("constants", "outputs", "polys", "argtypes", "provenance", "golden", "section")
MODULE_STRING = re.compile(r"^fa4num(\.[A-Za-z_][A-Za-z0-9_]*)+$")
COMPUTED_PREFIX = re.compile(r"^fa4num(\.[A-Za-z_][A-Za-z0-9_]*)*\.$")   # f"fa4num.{pkg}._report"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _unit(module: str) -> str | None:
    """The subpackage (or top-level module) a module belongs to; None for the package root ``fa4num``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def _resolve(module: str, is_pkg: bool, level: int, name: str | None) -> str:
    if level == 0:
        return name or ""
    base = module.split(".")
    if not is_pkg:
        base = base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def _is_private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def _imports(path: Path):
    """(line, imported module, imported name or None, importer module) for every import in a module."""
    module = _module_name(path)
    is_pkg = path.name == "__init__.py"
    tree = ast.parse(path.read_text(), filename=str(path))
    aliases = {}   # local name -> fa4num module it is bound to (for attribute reads)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("fa4num"):
                    out.append((node.lineno, a.name, None))
                    aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else "fa4num"
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, is_pkg, node.level, node.module)
            if not target.startswith("fa4num"):
                continue
            for a in node.names:
                out.append((node.lineno, target, a.name))
                aliases[a.asname or a.name] = f"{target}.{a.name}"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and MODULE_STRING.match(node.value):
            out.append((node.lineno, node.value, None))
        elif (isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant)
              and COMPUTED_PREFIX.match(str(node.values[0].value)) and module != "fa4num"):
            # a module name computed at run time: the contract cannot follow it, so only the root package's lazy
            # subpackage loader may build one
            out.append((node.lineno, "fa4num.<computed>", None))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and _is_private(node.attr)):
            out.append((node.lineno, aliases[node.value.id], node.attr))
    return module, out


def _all_modules():
    return sorted(p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts)


def _edges():
    """[(importer module, line, unit of importer, imported module path, unit imported, private part or None)]"""
    edges = []
    for path in _all_modules():
        module, imports = _imports(path)
        src = _unit(module)
        for line, target, name in imports:
            full = target if name is None else f"{target}.{name}"
            parts = full.split(".")
            dst = _unit(full)
            if dst is None:
                continue
            # a private part of the path below the imported unit (fa4num.fp._core, mufu._cache, _sweep_unary)
            private = next((p for p in parts[2:] if _is_private(p)), None)
            edges.append((module, line, src, full, dst, private))
    return edges


def test_no_computed_module_names():
    bad = [f"{module}:{line}" for module, line, _, full, _, _ in _edges() if full == "fa4num.<computed>"]
    assert not bad, "module names built at run time (import each module by its full name instead): " + ", ".join(bad)


def test_every_unit_has_a_layer():
    units = {_unit(_module_name(p)) for p in _all_modules()} - {None, "<computed>"}
    missing = sorted(units - set(LAYERS))
    assert not missing, f"add these subpackages/modules to the layer contract (tests/top/test_layers.py, README): {missing}"


def test_imports_point_down():
    bad = []
    for module, line, src, full, dst, _ in _edges():
        if src is None or src == dst or dst not in LAYERS or src not in LAYERS or dst == "<computed>":
            continue
        if LAYERS[src] == 0 and LAYERS[dst] == 0:
            ok = LEAF_ORDER.index(dst) < LEAF_ORDER.index(src)
        else:
            ok = LAYERS[dst] < LAYERS[src]
        if not ok:
            bad.append(f"{module}:{line} imports {full} ({src} layer {LAYERS[src]} -> {dst} layer {LAYERS[dst]})")
    assert not bad, "imports that point up or sideways:\n" + "\n".join(bad)


def test_no_cycle_between_subpackages():
    graph = {}
    for _, _, src, _, dst, _ in _edges():
        if src is not None and src != dst:
            graph.setdefault(src, set()).add(dst)
    # Tarjan-free check: a cycle exists iff some unit reaches itself
    cycles = []
    for start in graph:
        seen, stack = set(), list(graph[start])
        while stack:
            u = stack.pop()
            if u == start:
                cycles.append(start)
                break
            if u not in seen:
                seen.add(u)
                stack.extend(graph.get(u, ()))
    assert not cycles, f"subpackages on an import cycle: {sorted(cycles)}"


def test_no_private_import_across_subpackages():
    bad = [f"{module}:{line} uses {full} (private {private!r} of {dst})"
           for module, line, src, full, dst, private in _edges()
           if private and src != dst and not (HOOKS.get(private) == src and full.split(".")[2] == private)]
    assert not bad, "imports of another subpackage's private modules or names:\n" + "\n".join(bad)


def _type_checking_lines(tree) -> set:
    """Lines of the imports under ``if TYPE_CHECKING:`` (annotations only: never executed, so no import cycle)."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in node.body:
                lines.update(n.lineno for n in ast.walk(sub) if isinstance(n, (ast.Import, ast.ImportFrom)))
    return lines


def _module_graphs() -> dict:
    """{unit: {module: modules of the same unit it imports}}: an import names the longest prefix of its dotted
    path that is a module (``from fa4num.fit import _remez`` -> fa4num.fit._remez; a name re-exported by a
    package's __init__ -> the package)."""
    modules = {_module_name(p) for p in _all_modules()}
    graphs: dict = {}
    for path in _all_modules():
        module, imports = _imports(path)
        skip = _type_checking_lines(ast.parse(path.read_text(), filename=str(path)))
        unit = _unit(module)
        for line, target, name in imports:
            if line in skip:
                continue
            parts = (target if name is None else f"{target}.{name}").split(".")
            dst = next((".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in modules),
                       None)
            if unit is not None and dst not in (None, module) and _unit(dst) == unit:
                graphs.setdefault(unit, {}).setdefault(module, set()).add(dst)
    return graphs


def _cycle(graph: dict):
    """One cycle of a directed graph as a list of nodes (first == last), or None."""
    state: dict = {}
    for start in sorted(graph):
        if start in state:
            continue
        state[start] = 1
        path, stack = [start], [iter(sorted(graph.get(start, ())))]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph.get(nxt, ()))))
    return None


def test_no_cycle_between_modules_of_one_subpackage():
    """Module-level and function-level imports alike (a lazy import that closes a cycle is a cycle too)."""
    cycles = {unit: c for unit, g in _module_graphs().items() if (c := _cycle(g))}
    assert not cycles, "import cycles inside a subpackage:\n" + "\n".join(" -> ".join(c) for c in cycles.values())


def test_cycle_finder():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


SCRIPT_DIRS = ("experiments", "benchmarks")


def test_scripts_use_public_names_only():
    """The scripts are the library's first users: what they need is public (no ``_name`` module or name of
    fa4num, a hook module included), so a refactoring inside a subpackage cannot break them unseen."""
    bad = []
    for folder in SCRIPT_DIRS:
        for path in sorted((PKG.parent / folder).rglob("*.py")):
            _, imports = _imports(path)
            for line, target, name in imports:
                full = target if name is None else f"{target}.{name}"
                private = [p for p in full.split(".")[1:] if _is_private(p)]
                if full.split(".")[0] == "fa4num" and private:
                    bad.append(f"{path.relative_to(PKG.parent)}:{line} uses {full}")
    assert not bad, "scripts that use private parts of fa4num:\n" + "\n".join(bad)


# --- the library reads no file outside fa4num/ ----------------------------------------------------------------
# How a module can name a path outside the package: ``Path(__file__)`` walked up past fa4num/ (``.parents[k]``
# or ``.parent.parent...``). Files the library reads at run time are package data instead (importlib.resources
# or a path under its own folder), so a wheel behaves like the checkout. Two modules go above the package for
# something that is not a data file, and one for the package data the build maps in from outside it; they are the
# only ones allowed to:
NOT_DATA = {
    "fa4num.provenance": "the git revision of the checkout the code runs from (git metadata, 'unknown' without)",
    "fa4num.study.runner": "PYTHONPATH for Dask workers: the folder fa4num is imported from (an import path)",
    "fa4num.polys": "the repository's polys/ folder in a checkout: package data that the build maps into the wheel "
                    "as fa4num/polys_data (pyproject package-dir), read from there when installed",
}
# Modules that still read a file outside fa4num/ (PENDING: the data must move into the package; this set may
# only shrink: an entry that no longer reads outside fails the test). Empty since issue 21.
PENDING_OUTSIDE: dict = {}


def _depth_above_package(node, module_depth: int) -> int:
    """How many folders above fa4num/ a ``Path(__file__)...`` expression reaches (<= 0: inside the package)."""
    ups, n = 0, node
    while True:
        if isinstance(n, ast.Attribute) and n.attr == "parent":
            ups, n = ups + 1, n.value
        elif (isinstance(n, ast.Subscript) and isinstance(n.value, ast.Attribute) and n.value.attr == "parents"
              and isinstance(n.slice, ast.Constant) and isinstance(n.slice.value, int)):
            ups, n = ups + n.slice.value + 1, n.value.value
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("resolve", "absolute"):
            n = n.func.value
        else:
            break
    anchored = any(isinstance(x, ast.Name) and x.id == "__file__" for x in ast.walk(n))
    return ups - module_depth if anchored else 0


def _outside_reads(path: Path, source: str | None = None) -> list:
    """Lines of ``path`` (a module of fa4num) whose ``__file__``-anchored path leaves the package folder."""
    tree = ast.parse(path.read_text() if source is None else source)
    depth = len(path.relative_to(PKG).parts)   # fa4num/x.py: 1 (its .parent is fa4num/), fa4num/a/x.py: 2
    seen = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Attribute, ast.Subscript)) and _depth_above_package(node, depth) > 0:
            seen.add(node.lineno)
    return sorted(seen)


def test_the_library_reads_nothing_outside_the_package():
    found = {_module_name(p): _outside_reads(p) for p in _all_modules()}
    found = {m: lines for m, lines in found.items() if lines}
    bad = [f"{m}:{lines}" for m, lines in found.items() if m not in NOT_DATA and m not in PENDING_OUTSIDE]
    assert not bad, "modules that read files outside fa4num/ (make them package data):\n" + "\n".join(bad)
    fixed = sorted(set(PENDING_OUTSIDE) - set(found))
    assert not fixed, f"no longer read outside fa4num/: remove them from PENDING_OUTSIDE: {fixed}"


@pytest.mark.parametrize("source, outside", [
    ("ROOT = Path(__file__).resolve().parents[2] / 'tests'\n", True),
    ("ROOT = Path(__file__).parent.parent.parent / 'experiments'\n", True),
    ("DATA = Path(__file__).resolve().parent / 'data'\n", False),
    ("DATA = Path(__file__).parents[1] / 'data' / 'polys'\n", False),
])
def test_the_outside_read_finder(source, outside):
    """fa4num/ex2/x.py: parents[1] and .parent.parent are fa4num/ (inside), parents[2] is the checkout."""
    assert bool(_outside_reads(PKG / "ex2" / "x.py", source)) == outside


@pytest.mark.parametrize("source, expected", [
    ("from fa4num.fp._tables import main\n", "private"),
    ("def f():\n    from fa4num.gpu import verify\n", "up"),
    ("import importlib\nimportlib.import_module('fa4num.gpu.verify')\n", "up"),
    ("import importlib\nimportlib.import_module(f'fa4num.{name}._report')\n", "computed"),
    ("from fa4num.hw import mufu\nmufu._cache.clear()\n", "private"),
    ("from fa4num.attention import _cli\n", "private"),          # a hook, but only for fa4num.cli
])
def test_the_checker_sees_each_kind_of_import(tmp_path, monkeypatch, source, expected):
    """The contract catches what it claims to: a private module, a function-level import, an importlib string
    and a private attribute of another subpackage's module (a fake module inside fa4num.ex2)."""
    fake = PKG / "ex2" / "_layers_probe.py"
    monkeypatch.setattr(sys.modules[__name__], "_all_modules", lambda: [fake])
    original = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: source if self == fake else original(self, *a, **k))
    if expected == "private":
        with pytest.raises(AssertionError, match="private"):
            test_no_private_import_across_subpackages()
    elif expected == "computed":
        with pytest.raises(AssertionError, match="built at run time"):
            test_no_computed_module_names()
    else:
        with pytest.raises(AssertionError, match="point up"):
            test_imports_point_down()


def test_readme_layer_diagram_matches_the_contract():
    """The README's diagram names every layer, top first, in LAYERS' order (the leaves in LEAF_ORDER)."""
    text = (PKG.parent / "README.md").read_text()
    start = text.index("### Layers")
    block = text[text.index("```", start) + 3: text.index("```", text.index("```", start) + 3)]
    first = {}
    for name in LAYERS:
        m = re.search(r"(?<!\w)" + re.escape(name) + r"(?!\w)", block)
        assert m is not None, f"the README's layer diagram does not name {name!r}"
        first[name] = m.start()
    top_down = sorted((n for n in LAYERS if LAYERS[n]), key=first.get)
    assert [LAYERS[n] for n in top_down] == sorted((LAYERS[n] for n in top_down), reverse=True), top_down
    leaves = sorted((n for n in LAYERS if not LAYERS[n]), key=first.get)
    assert leaves == list(LEAF_ORDER) and max(first[n] for n in top_down) < first[leaves[0]]
