"""The fit and attention sections of `fa4num report` (contributed through fa4num.<pkg>._report)."""
from pathlib import Path

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
    assert rows["FA4 SM90 (H200 path)"]["skipped_share"] == 0


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
