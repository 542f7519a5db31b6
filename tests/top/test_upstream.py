"""``fa4num upstream diff``: the b36 sources (the committed fixture, or the full wheel where present) show no
drift; a wheel with one changed constant or rule fails naming it with its file and line; the release profiles
record what their wheels say."""
from __future__ import annotations

import os
import re
import zipfile
from pathlib import Path

import pytest

from fa4num import upstream
from fa4num.attention import releases
from fa4num.cli import main as cli_main

WHEEL_B36 = Path(os.environ.get("FA4_WHEEL_B36", "/work/main/.device-wheels/b/flash_attn_4-4.0.0b36-py3-none-any.whl"))
WHEELS_DIR = Path(os.environ.get("FA4_WHEELS", "/tmp/fa4wheels"))   # pip download flash-attn-4==4.0.0bNN


def _modified(tmp_path, file, old, new) -> Path:
    """The fixture with ``old`` replaced by ``new`` (once) in flash_attn/cute/<file>."""
    out = tmp_path / "flash_attn_4-4.0.0b36-modified.whl"
    with zipfile.ZipFile(upstream.FIXTURE) as src, zipfile.ZipFile(out, "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename == upstream.PREFIX + file:
                text = data.decode()
                assert text.count(old) >= 1, old
                data = text.replace(old, new, 1).encode()
            dst.writestr(item, data)
    return out


def _line_of(file, needle) -> int:
    with zipfile.ZipFile(upstream.FIXTURE) as z:
        text = z.read(upstream.PREFIX + file).decode()
    return text[:text.index(needle)].count("\n") + 1


def test_fixture_b36_has_no_drift(capsys):
    res = upstream.diff(upstream.FIXTURE)
    assert res.ok, res.drifts
    assert res.version == "4.0.0b36" and res.matches == ["4.0.0b36"]
    assert cli_main(["upstream", "diff", str(upstream.FIXTURE)]) == 0
    assert "no drift" in capsys.readouterr().out


@pytest.mark.skipif(not WHEEL_B36.exists(), reason=f"the b36 wheel is not at {WHEEL_B36} (not committed)")
def test_real_b36_wheel_has_no_drift():
    res = upstream.diff(WHEEL_B36)
    assert res.ok, res.drifts
    assert upstream.extract_profile_facts(WHEEL_B36) == upstream.extract_profile_facts(upstream.FIXTURE)


@pytest.mark.parametrize("file, old, new, fact", [
    ("utils.py", "0.695146143436431884765625", "0.6951462", "POLY_EX2[3]"),
    ("flash_fwd_sm100.py", '(True, False, 256, False): {"ex2_emu_freq": 14', '(True, False, 256, False): '
                                                                              '{"ex2_emu_freq": 12',
     "_TUNING_CONFIG[True, False, 256, False]"),
    ("flash_fwd_sm100.py", "rescale_threshold = 8.0 if", "rescale_threshold = 4.0 if", "rescale_threshold #1"),
    ("softmax.py", "ex2_emu_res: cutlass.Constexpr[int] = 4", "ex2_emu_res: cutlass.Constexpr[int] = 6",
     "apply_exp2_convert default ex2_emu_res"),
    ("interface.py", "def num_splits_heuristic(total_mblocks, num_SMs, num_n_blocks, max_splits):",
     "def num_splits_heuristic(total_mblocks, num_SMs, num_n_blocks, max_splits):\n    num_SMs = num_SMs - 1",
     "num_splits_heuristic()"),
])
def test_one_changed_constant_fails_naming_it(tmp_path, capsys, file, old, new, fact):
    wheel = _modified(tmp_path, file, old, new)
    res = upstream.diff(wheel)
    names = [d.name for d in res.drifts]
    assert fact in names and all(n == fact or n.startswith(fact + " (polys/") for n in names), names
    d = next(d for d in res.drifts if d.name == fact)
    assert d.file == upstream.PREFIX + file
    if fact != "num_splits_heuristic()":     # a rule's digest is read at its def line
        assert d.line == _line_of(file, old.split("\n")[0]) or fact.startswith("POLY_EX2")
    assert res.matches == []
    capsys.readouterr()
    assert cli_main(["upstream", "diff", str(wheel)]) == 1
    err = capsys.readouterr().err
    assert f"DRIFT {fact} at {upstream.PREFIX}{file}:{d.line}" in err


def test_not_a_wheel_is_refused(tmp_path, capsys):
    (tmp_path / "x.whl").write_text("not a zip")
    with pytest.raises(ValueError, match="not a readable zip"):
        upstream.diff(tmp_path / "x.whl")
    assert cli_main(["upstream", "diff", str(tmp_path / "x.whl")]) == 2


def test_default_profile_records_the_fixture():
    """The b36 profile's facts are what the b36 sources say (fa4num/data/releases/4.0.0b36.json)."""
    assert upstream.profile_facts(releases.DEFAULT_RELEASE) == upstream.extract_profile_facts(upstream.FIXTURE)


def _wheels():
    return sorted(WHEELS_DIR.glob("flash_attn_4-*.whl")) if WHEELS_DIR.exists() else []


@pytest.mark.skipif(not _wheels(), reason=f"no flash-attn-4 wheels in {WHEELS_DIR} (pip download them)")
def test_every_profile_records_its_wheels():
    by_version = {re.search(r"4\.0\.0b\d+", w.name).group(0): w for w in _wheels()}
    for rel in releases.known():
        for covered in releases.get(rel).covers:
            if covered in by_version:
                assert upstream.extract_profile_facts(by_version[covered]) == upstream.profile_facts(rel), covered
                res = upstream.diff(by_version[covered])
                assert rel in res.matches and res.ok == (rel == releases.DEFAULT_RELEASE)
