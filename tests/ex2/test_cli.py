"""`fa4num sweep` and `fa4num report` end to end (small domains / quick mode), and registry coefficients."""
from __future__ import annotations

import json

import numpy as np
import pytest

from fa4num import polys
from fa4num.cli import main
from fa4num.ex2 import POLY_EX2, fa4_emulated


def test_registry_name_as_coeffs():
    pytest.importorskip("fa4num.fit")
    from fa4num.fit import load_poly
    x = np.random.default_rng(1).uniform(-20, 0, 1000).astype(np.float32)
    assert np.array_equal(fa4_emulated(x, 3, coeffs="fa4-deg3").view(np.uint32),
                          fa4_emulated(x, 3).view(np.uint32))
    assert load_poly("fa4-deg4") == POLY_EX2[4]


def test_sweep_command_writes_json_and_figures(tmp_path, capsys):
    rc = main(["sweep", "--range", "-1", "-0.98", "--variant", "scalar", "--coeffs",
               "0x3F800000,0x3F2A70E4,0x3EA903CA", "--out", str(tmp_path), "--name", "s", "--no-progress"])
    assert rc == 0
    data = json.loads((tmp_path / "s.json").read_text())
    assert data["params"]["degree"] == 2 and data["params"]["variant"] == "scalar"
    key = polys.resolve(data["params"]["coeffs"]).key   # a set given as numbers is named by its fp32 bits
    assert data["count"] > 0 and data["provenance"]["implementation"] == f"fa4-scalar-{key}"
    assert (tmp_path / "s_error_vs_x.png").exists() and (tmp_path / "s_ulp_histogram.png").exists()
    assert "max error" in capsys.readouterr().out


def test_sweep_names_the_coefficient_source(tmp_path):
    from fa4num.ex2 import fa4_implementation
    assert fa4_implementation(3).name == "fa4-packed-deg3"
    assert fa4_implementation(3, coeffs="fa4num-bf16-deg3").name == "fa4num-bf16-deg3-packed"
    assert main(["sweep", "--range", "-1", "-0.99", "--coeffs", "fa4-deg4", "--degree", "4", "--out", str(tmp_path),
                 "--no-progress"]) == 0
    assert (tmp_path / "fa4-4.0.0b36-deg4-packed.json").exists()   # an alias runs as its entry's name


def test_sweep_command_rejects_bad_coefficient(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:   # refused while parsing (the --coeffs type), before any work
        main(["sweep", "--range", "-1", "0", "--coeffs", "1.0,0.1", "--out", str(tmp_path), "--no-progress"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith("fa4num: error: --coeffs: c1 = 0.1 ") and err.count("\n") == 1


def test_report_quick(tmp_path):
    assert main(["report", "--quick", "--out", str(tmp_path), "--no-progress"]) == 0
    md = (tmp_path / "report.md").read_text()
    data = json.loads((tmp_path / "report.json").read_text())
    titles = [s["title"] for s in data["sections"]]
    assert titles[0] == "FA4's cubic exp2 against the correctly rounded 2^x"
    # a summary on top, one line per headline a section gave, each saying over which inputs it was measured
    summary = md.split("## Summary\n\n")[1].split("\n\n")[0].splitlines()
    assert summary == [f"- {h}" for h in data["summary"]] and len(summary) >= 5
    assert md.index("## Summary") < md.index("## How to read the numbers") < md.index("## " + titles[0])
    for line in data["summary"][:3]:
        assert "[-126, 0]" in line or "[-150, -126]" in line
    for s in data["sections"]:
        for fig in s["figures"]:
            assert (tmp_path / fig).stat().st_size > 0
            assert fig in md
    main_stats = data["sections"][0]["data"]["grid"]
    assert main_stats["count"] == 126 * 2 ** 10 + 1
