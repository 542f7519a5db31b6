"""The sections of `fa4num report` (contributed through fa4num.<pkg>._report), its checks, and the README's
golden-case counts against the golden files."""
import json
import re
from pathlib import Path

import numpy as np
import pytest

from fa4num.section import ReportContext
from fa4num.fit import registry


def test_fit_section_lists_every_registry_set_of_2x():
    from fa4num.fit._report import report_sections
    (sec,) = report_sections(ReportContext(Path("."), True, False))
    entries = registry.read()["entries"]
    for name, e in entries.items():
        if e.get("function") == "2^x" and tuple(e.get("interval", ())) == (0.0, 1.0):
            assert f"`{name}`" in sec.markdown
            assert sec.data[name] == e.get("metrics", {})


def test_attention_section_switches_each_trick(tmp_path):
    from fa4num.attention._report import report_sections
    (sec,) = report_sections(ReportContext(tmp_path, True, False))
    rows = {r["config"]: r for r in sec.data["rows"]}
    floor = rows.pop("fp64 rounded once to bf16 (floor)")
    assert (tmp_path / sec.figures[0]).stat().st_size > 0
    for r in rows.values():
        assert r["rel_l2"] >= floor["rel_l2"]       # nothing beats the once-rounded exact result
    default = rows["FA4 SM100 defaults"]
    assert 0 < default["max_lag"] <= 8.0            # the stale max lags by at most rescale_threshold
    assert default["skipped_share"] > 0 and default["exp2_emulated_share"] > 0
    assert rows["SM100, rescale_threshold=0"]["skipped_share"] == 0
    assert rows["SM100, rescale_threshold=0"]["max_lag"] == 0
    assert rows["SM100, no software exp2"]["exp2_emulated_share"] == 0
    # SM90 has neither trick: its rescale and software-exp2 columns are n/a, not 0
    sm90 = rows["FA4 SM90 (H200 path)"]
    assert not sm90["lazy_rescale"] and not sm90["software_exp2"]
    assert sm90["skipped_share"] is None and sm90["max_lag"] is None and sm90["exp2_emulated_share"] is None
    assert "| FA4 SM90 (H200 path) |" in sec.markdown
    assert sec.markdown.split("| FA4 SM90 (H200 path) |")[1].split("\n")[0].endswith("| n/a | n/a | n/a |")
    size = int(np.prod(sec.data["shape"]))
    assert [c.compared for c in sec.checks] == [size] * (len(rows))


def test_attention_section_with_nan_outputs_compares_nothing(tmp_path, monkeypatch):
    """All-NaN outputs: every check compared nothing, and the section says so instead of printing ratios."""
    import fa4num.attention._report as att
    make = att._inputs

    def nan_q(shape, seed=0):
        q, k, v = make(shape, seed)
        q[...] = np.nan
        return q, k, v
    monkeypatch.setattr(att, "_inputs", nan_q)
    monkeypatch.setattr(att, "QUICK_SHAPE", (1, 128, 1, 64))
    (sec,) = att.report_sections(ReportContext(tmp_path, True, False))
    assert sec.checks and all(c.empty for c in sec.checks)
    assert "Nothing compared" in sec.markdown and "nothing compared" in sec.headline and not sec.figures


def test_bounds_section_content_is_computed(tmp_path):
    """Every number of the error-bound section is the bounds API's (quick: FA4's cubic, one problem per kernel,
    a few H200 golden cases)."""
    from fa4num.attention import golden as attention_golden
    from fa4num.attention import KERNELS
    from fa4num.bounds import exp2_error_bound, mufu_error_bounds
    from fa4num.bounds._observed import observed_exp2, observed_key
    from fa4num.bounds._report import report_sections
    (sec,) = report_sections(ReportContext(tmp_path, True, False))
    assert (tmp_path / sec.figures[0]).stat().st_size > 0
    cubic, mufu = sec.data["exp2"]
    b = exp2_error_bound(3)
    assert cubic["bound"] == b.relative and cubic["observed"] == observed_exp2(observed_key())["max_rel"]
    assert f"| {b.relative / cubic['observed']:.5f} |" in sec.markdown
    assert mufu["bound"] == mufu_error_bounds("sm90").ex2_relative
    assert mufu["observed"] == observed_exp2(observed_key(mufu_arch="sm90"))["max_rel"]
    checks = {c.name: c for c in sec.checks}
    assert checks["exp2 / MUFU ex2 bound >= exhaustive max"].compared == 2
    emu = {e["kernel"]: e for e in sec.data["emulator"]}
    assert sorted(emu) == sorted(KERNELS)
    for kernel, e in emu.items():
        c = checks[f"attention bound vs emulator ({kernel})"]
        assert c.compared == int(np.prod(sec.data["shape"])) - e["unbounded"] > 0
        assert c.failed == e["out_violations"] + e["lse_violations"]
        assert e["ratio_max"] == pytest.approx(e["max_bound"] / e["max_observed"])
    meta = json.loads(str(np.load(attention_golden.GOLDEN_SM90)["meta"]))
    assert sec.data["golden_plain_cases"] == len(meta["cases"])
    gold = checks["attention bound vs H200 golden bits"]
    assert gold.compared == sum(g["elements"] - g["unbounded"] for g in sec.data["golden"]) > 0
    assert f"of the {len(meta['cases'])} plain H200 golden cases" in sec.markdown


def test_bounds_section_without_golden_cases_says_so(tmp_path, monkeypatch):
    import fa4num.bounds._report as bnd
    monkeypatch.setattr(bnd, "golden_cases", lambda: [])
    monkeypatch.setattr(bnd, "QUICK_SHAPE", (1, 64, 1, 64))
    (sec,) = bnd.report_sections(ReportContext(tmp_path, True, False))
    assert {c.name: c for c in sec.checks}["attention bound vs H200 golden bits"].empty
    assert "no golden case found: this check compared nothing" in sec.markdown


def test_report_command_exits_nonzero_when_a_section_fails(tmp_path, monkeypatch):
    """A provider that raises: its section holds the traceback, the other sections are written, exit status 1."""
    import json

    import fa4num.report as report
    from fa4num import cli
    from fa4num.section import Section

    def broken(ctx):
        raise RuntimeError("boom")
    monkeypatch.setattr(report, "providers", lambda: [("fine", lambda ctx: [Section("Fine", "text")]),
                                                      ("bad", broken)])
    assert cli.main(["report", "--out", str(tmp_path), "--quick", "--no-progress"]) == 1
    md = (tmp_path / "report.md").read_text()
    assert "## Fine" in md and "## bad: section failed" in md and "RuntimeError: boom" in md
    assert json.loads((tmp_path / "report.json").read_text())["failed"] == ["bad"]
    monkeypatch.setattr(report, "providers", lambda: [("fine", lambda ctx: [Section("Fine", "text")])])
    assert cli.main(["report", "--out", str(tmp_path), "--quick", "--no-progress"]) == 0


@pytest.mark.parametrize("check, message", [
    ({"compared": 0}, "checks that compared nothing: Golden: cases"),
    ({"compared": 5, "failed": 1}, "checks that failed: Golden: cases"),
])
def test_report_exits_nonzero_when_a_check_compares_nothing_or_fails(tmp_path, monkeypatch, capsys, check, message):
    import fa4num.report as report
    from fa4num import cli
    from fa4num.section import Check, Section
    monkeypatch.setattr(report, "providers", lambda: [("g", lambda ctx: [
        Section("Golden", "text", checks=[Check("cases", unit="cases", **check)])])])
    assert cli.main(["report", "--out", str(tmp_path), "--quick", "--no-progress"]) == 1
    assert message in capsys.readouterr().err
    md = (tmp_path / "report.md").read_text()
    assert "## Checks" in md and "| Golden | cases |" in md
    doc = json.loads((tmp_path / "report.json").read_text())
    assert doc["empty_checks" if not check["compared"] else "failed_checks"] == ["Golden: cases"]


def _measured_table() -> str:
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    return text.split("## What has been measured", 1)[1].split("\n## ", 1)[0]


def _number(pattern: str, text: str) -> tuple:
    m = re.search(pattern, text)
    assert m, f"README's 'What has been measured' no longer matches {pattern!r}"
    return tuple(int(g.replace(",", "")) for g in m.groups())


def test_readme_counts_are_the_golden_files_counts():
    """Each count the README's "What has been measured" cites is the one golden_counts() (the report's source)
    computes from the committed golden files, and the bounds row's counts are the committed validation run's."""
    from fa4num.report import golden_counts
    golden = Path(__file__).resolve().parents[1] / "golden"
    c = {k: v["cases"] for k, v in golden_counts(search=(golden, golden / "attention")).items()}
    t = _measured_table()
    assert _number(r"(\d+) golden sets", t) == (c["instruction_sets"],)
    assert _number(r"given the same S: ([\d,]+) rows", t) == (c["softmax_twin"],)
    assert _number(r"on the H200: (\d+) cases \(", t) == (c["forward"] + c["forward_large"],)
    assert _number(r"on (\d+) feature cases \((\d+) dev, (\d+) never-seen holdout\)", t) == (
        c["features_dev"] + c["features_holdout"], c["features_dev"], c["features_holdout"])
    assert _number(r"(\d+) dq/dk/dv cases \((\d+) dev, (\d+) holdout\), (\d+) learnable-sink", t) == (
        c["backward_dev"] + c["backward_holdout"], c["backward_dev"], c["backward_holdout"], c["backward_sink"])
    assert _number(r"the preprocess's D on (\d+) cases", t) == (c["backward_preprocess"],)
    assert _number(r"(\d+) wide-window cases \((\d+) forward, (\d+) backward\)", t) == (
        c["wide_window"] + c["backward_wide_window"], c["wide_window"], c["backward_wide_window"])
    golden_fwd = c["forward"] + c["features_dev"] + c["features_holdout"]
    assert _number(r"the (\d+) golden forward cases of the plain and feature captures \((\d+) \+ (\d+)", t) == (
        golden_fwd, c["forward"], c["features_dev"] + c["features_holdout"])
    run = Path(__file__).resolve().parents[2] / "fa4num" / "bounds" / "data" / "bounds_validation.json"
    summary = json.loads(run.read_text())["summary"]
    assert summary["h200"]["cases"] == golden_fwd        # the committed run covered every such case
    assert _number(r"vs the emulator \((\d+) cases", t) == (summary["emulator"]["cases"],)


def test_study_section_counts_its_tasks(tmp_path):
    """The smoke-grid section's check is the grid's tasks (none failed); a grid with no task would compare nothing."""
    from fa4num.study._report import report_sections
    from fa4num.study.grid import load_grid
    smoke = next(s for s in report_sections(ReportContext(tmp_path, True, False)) if "smoke grid" in s.title)
    (c,) = smoke.checks
    assert (c.compared, c.failed) == (len(load_grid("smoke").tasks), 0)
