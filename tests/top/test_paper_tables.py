"""The paper's tables and number macros are generated, not typed: regenerating them from the committed results
gives the committed files byte for byte (experiments/make_tables.py and experiments/paper_numbers.py)."""
from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TABLES = ROOT / "paper" / "tables"


def _script(name):
    sys.path.insert(0, str(ROOT / "experiments"))
    try:
        spec = importlib.util.spec_from_file_location(name, ROOT / "experiments" / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(ROOT / "experiments"))


@pytest.mark.parametrize("script", ["make_tables", "paper_numbers"])
def test_tables_regenerate_byte_for_byte(script, tmp_path, capsys):
    pytest.importorskip("pandas")
    assert _script(script).main(["--out", str(tmp_path)]) == 0
    made = sorted(tmp_path.glob("*.tex"))
    assert made
    for p in made:
        assert p.read_text() == (TABLES / p.name).read_text(), f"paper/tables/{p.name} is stale: run make -C paper"
