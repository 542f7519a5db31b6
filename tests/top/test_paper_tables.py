"""The paper's tables and number macros are generated, not typed: regenerating them from the committed results
gives the committed files byte for byte (experiments/make_tables.py and experiments/paper_numbers.py)."""
from __future__ import annotations

import importlib.util
import json
import pathlib
import sys

import numpy as np
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


def test_skip_sources_carry_todays_definition():
    """Every skip share in the paper's tables and figures comes from results written by today's counter
    definition (fa4num.softmax.ballot.SKIP_DEFINITION_VERSION): the accuracy study's JSON (its provenance and each
    row) and each skip-rate store the paper reads. A result of an older counter fails here until it is re-run."""
    pytest.importorskip("pandas")
    from fa4num.softmax.ballot import SKIP_DEFINITION_VERSION
    from fa4num.study.store import read_store
    pc = _script("paper_common")
    knobs = json.loads((ROOT / "experiments" / "results" / "fa4_knobs.json").read_text())
    assert pc.recorded_skip_definitions(knobs) == {SKIP_DEFINITION_VERSION}, "fa4_knobs.json: older skip counter"
    stale = [(r["case"], r["config"]) for r in knobs["rows"]
             if r.get("skip_definition_version") != SKIP_DEFINITION_VERSION]
    assert not stale, f"fa4_knobs.json rows of an older skip counter: {stale[:3]}"
    assert pc.SKIP_STORES
    for name in pc.SKIP_STORES:
        found = pc.recorded_skip_definitions(read_store(pc.STUDY_DATA / name))
        assert found == {SKIP_DEFINITION_VERSION}, f"fa4num/study/data/{name}: skip definition {found}"


def test_an_older_skip_definition_is_refused():
    """The table scripts refuse a result that records an older definition, or none (the first-round counter)."""
    pd = pytest.importorskip("pandas")
    from fa4num.softmax.ballot import SKIP_DEFINITION_VERSION
    pc = _script("paper_common")
    now = {"provenance": {"skip_definition_version": SKIP_DEFINITION_VERSION}}
    assert pc.require_skip_definition(now, "now.json") is now
    for old in ({"provenance": {}}, {"skip_definition_version": SKIP_DEFINITION_VERSION - 1},
                pd.DataFrame({"rescale_events": [3]}),
                pd.DataFrame({"skip_definition_version": [SKIP_DEFINITION_VERSION, SKIP_DEFINITION_VERSION - 1]})):
        with pytest.raises(ValueError, match="skip counter definition"):
            pc.require_skip_definition(old, "old result")


def test_skip_rows_keep_one_sample_per_seed_gpu_first(tmp_path, monkeypatch):
    """Two stores that ran the same configuration and seed (a CPU and a GPU run: different task keys) give one
    sample, the GPU's; a configuration only one store ran is kept, and an older definition is refused."""
    pytest.importorskip("pandas")
    from fa4num.softmax.ballot import SKIP_DEFINITION_VERSION as V
    from fa4num.study.store import write_rows
    pc = _script("paper_common")

    def row(key, device, seed, share):
        return {"key": key, "device": device, "device_used": device, "dist": "sink", "seqlen": 1024,
                "threshold": 8, "seed": seed, "avoided_share_row": share, "skip_definition_version": V}
    write_rows(tmp_path / "cpu", [row("a", "cpu", 0, 0.1), row("b", "cpu", 1, 0.2)])
    write_rows(tmp_path / "gpu", [row("c", "cuda", 0, 0.9)])
    monkeypatch.setattr(pc, "STUDY_DATA", tmp_path)
    monkeypatch.setattr(pc, "SKIP_STORES", ("cpu", "gpu"))
    got = pc.skip_rows().sort_values("seed")
    assert got[["seed", "device", "avoided_share_row"]].values.tolist() == [[0, "cuda", 0.9], [1, "cpu", 0.2]]
    write_rows(tmp_path / "old", [{**row("d", "cpu", 2, 0.5), "skip_definition_version": V - 1}])
    monkeypatch.setattr(pc, "SKIP_STORES", ("cpu", "old"))
    with pytest.raises(ValueError, match="fa4num/study/data/old"):
        pc.skip_rows()


def _budget_row(kernel, knob, dist, seqlen, seed, err, *, heads=2, warp=0, device="NVIDIA H200"):
    steps = (seqlen // 128 - 1) * seqlen * heads
    return {"key": f"{kernel}-{knob}-{dist}-{seqlen}-{seed}-{heads}", "study": "error_budget", "mode": "bitexact",
            "kernel": kernel, "knob": knob, "dist": dist, "seqlen": seqlen, "seed": seed, "heads": heads,
            "head_dim": 128, "rel_l2_over_floor": err, "rescales_warp": warp, "rescale_steps": steps,
            "causal": False, "device_name": device}


def test_scale_budget_shows_missing_cells_and_refuses_mixtures(tmp_path):
    """The bit-exact budget at scale (paper_numbers.error_budget_scale / mitigation) shows a cell the stores lack
    as "---" (never interpolated between the lengths around it), averages the seeds of the cells it has, picks up
    a length added later (marking a cell with fewer seeds than the others by its seed count), and refuses to pool
    different configurations as seeds."""
    pytest.importorskip("pandas")
    from fa4num.study.store import write_rows
    pn = _script("paper_numbers")
    rows = [_budget_row(k, kn, "rising", n, s, e + s / 100, warp=w * n * 2)
            for k, kn, e, w in (("fa4-sm90", "default", 1.2, 7), ("fa4-sm100", "rescale_threshold=0", 1.2, 7),
                                ("fa4-sm100", "default", 1.4, 1))
            for n in (1024, 131072) for s in (0, 1, 2)]
    write_rows(tmp_path / "study_error_budget_gpu", rows)
    tex, m = pn.error_budget_scale(pn.scale_rows(tmp_path))
    # the second panel's row (rising, LLM-like); its first four cells are rising at 1k, 8k, 32k, 128k
    line = [r for r in tex.splitlines() if r.startswith("SM100 default")][-1]
    rising = line.split(" & ")[1:5]
    assert rising[1] == rising[2] == pn.MISSING and rising[0] != pn.MISSING and rising[3] != pn.MISSING
    assert rising[0].startswith("$1.410(")          # mean of 1.40, 1.41, 1.42; half-width in last-digit units
    assert "\\newcommand{\\ebsLenRisingHi}{128k}" in m
    mit, _ = pn.mitigation(pn.scale_rows(tmp_path))
    r8k = [r for r in mit.splitlines() if r.startswith("rising & 8k")]
    assert not r8k                               # a length with no threshold run at all is left out
    write_rows(tmp_path / "study_error_budget_gpu",
               [_budget_row("fa4-sm100", "default", "rising", 8192, s, 1.3) for s in (0, 1)])
    tex, _ = pn.error_budget_scale(pn.scale_rows(tmp_path))
    line = [r for r in tex.splitlines() if r.startswith("SM100 default")][-1]
    assert line.split(" & ")[2] == "$1.300(0)^{(2)}$"     # 2 of the 3 seeds the other cells hold
    write_rows(tmp_path / "study_error_budget_gpu",
               [_budget_row("fa4-sm100", "default", "rising", 8192, 2, 1.3, heads=4)])
    with pytest.raises(ValueError, match="different configurations"):
        pn.scale_rows(tmp_path)


def test_paired_budget_resolves_a_shift_the_unpaired_intervals_hide(tmp_path):
    """paper_numbers.paired_budget pairs a knob with the default seed by seed: a knob that adds 0.002 to every
    seed of a cell whose seeds spread by 0.04 overlaps the default's unpaired interval but its paired interval
    excludes 0; a knob with the default's exact errors excludes nothing; a seed the default lacks is not paired."""
    pytest.importorskip("pandas")
    from fa4num.study.store import write_rows
    pn = _script("paper_numbers")
    spread = (0.0, 0.04, 0.01, 0.03, 0.02)
    rows = [_budget_row("fa4-sm100", kn, "rising", 1024, s, 1.3 + spread[s] + shift)
            for kn, shift in (("default", 0.0), ("max_offset=8", 0.002), ("fused_bias=false", 0.0))
            for s in range(5)]
    rows.append(_budget_row("fa4-sm100", "fused_bias=false", "rising", 8192, 0, 1.3))   # no default to pair with
    write_rows(tmp_path / "study_error_budget_gpu", rows)
    df = pn.scale_rows(tmp_path)
    cells = pn._cells(df)
    a, b = cells[("fa4-sm100", "max_offset=8", "rising", 1024)], cells[("fa4-sm100", "default", "rising", 1024)]
    assert a["lo"] < b["hi"]                       # the unpaired intervals overlap
    diffs = pn.paired_diffs(df)
    assert ("fa4-sm100", "fused_bias=false", "rising", 8192) not in diffs
    assert np.allclose(diffs[("fa4-sm100", "max_offset=8", "rising", 1024)], 0.002)
    tex, m, summary = pn.paired_budget(df)
    assert summary[("fa4-sm100", "max_offset=8")]["up"] == 1
    assert summary[("fa4-sm100", "fused_bias=false")]["up"] + summary[("fa4-sm100", "fused_bias=false")]["down"] == 0
    assert "\\newcommand{\\prComparisons}{2}" in m


def test_paper_latex_static_checks():
    """paper/check_tex.py finds nothing: braces and environments balance, no text-mode _, every \\ref has a
    \\label, every \\cite a bib entry, every number macro the text uses is generated, every \\input exists."""
    spec = importlib.util.spec_from_file_location("check_tex", ROOT / "paper" / "check_tex.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.check() == []


def test_provenance_lists_every_dirty_record_the_paper_reads(tmp_path):
    """paper_numbers.provenance() names exactly the JSON results (and golden captures, stores) whose
    code_revision is not a plain commit (+dirty, or another + mark, shown); and every JSON result the Makefile
    rebuilds the macros from is among the files it checks."""
    pn = _script("paper_numbers")
    res = tmp_path / "experiments" / "results"
    res.mkdir(parents=True)
    (res / "paper_bounds.json").write_text(json.dumps({"provenance": {"code_revision": "abcdef0123+dirty"}}))
    (res / "paper_stale_max.json").write_text(json.dumps({"provenance": {"code_revision": "1234567abc"}}))
    (res / "fit_suite.json").write_text(json.dumps({"rows": []}))          # records no revision: not counted
    (res / "fit_suite_bench.json").write_text(json.dumps({"provenance": {"code_revision": "89abcde+lead-x"}}))
    base = tmp_path / "fa4num" / "study" / "data"
    base.mkdir(parents=True)
    (base / "baselines_h200_fp64gpu.json").write_text(json.dumps(
        [{"provenance": {"code_revision": "7654321+dirty"}}, {"provenance": {"code_revision": "7654321+dirty"}}]))
    m = pn.provenance(tmp_path)
    assert r"\newcommand{\provJsonRecorded}{4}" in m
    assert r"\newcommand{\provJsonDirtyCount}{3}" in m
    assert r"\texttt{fit\_\allowbreak{}suite\_\allowbreak{}bench.json} (89abcde+lead-x)" in m
    assert r"\texttt{paper\_\allowbreak{}bounds.json} (abcdef0)" in m
    assert r"\texttt{baselines\_\allowbreak{}h200\_\allowbreak{}fp64gpu.json} (7654321)" in m
    assert "stale" not in m
    assert r"\newcommand{\provStoresRecorded}{0}" in m and r"\newcommand{\provStoresDirty}{none}" in m
    assert r"\newcommand{\provGoldensRecorded}{0}" in m
    # the Makefile's JSON prerequisites of the number macros are all checked
    make = (ROOT / "paper" / "Makefile").read_text()
    import re
    names = {p.replace("$(RES)", "experiments/results").replace("$(STUDY)", "fa4num/study/data")
             for p in re.findall(r"\$\((?:RES|STUDY)\)/[\w/.]+\.json", make)}
    checked = {p.relative_to(ROOT).as_posix() for g in pn.PAPER_JSON for p in ROOT.glob(g)}
    assert names and names <= checked, sorted(names - checked)
