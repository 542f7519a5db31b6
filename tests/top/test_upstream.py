"""``fa4num upstream diff``: the b36 wheel shows no drift; a wheel with one changed constant or rule fails naming it
with its file and line; the release profiles record what their wheels say.

fa4num ships no FA4 source: the tests read the real flash-attn-4 4.0.0b36 wheel (0.5 MB), from ``$FA4_WHEEL_B36``,
the device wheels of ``shared/tools/fa4-offline-wheels.sh`` or, failing both, ``pip download`` into pytest's
cache (the registry is the only network this needs; without it they skip, saying so)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from fa4num import upstream
from fa4num.attention import releases
from fa4num.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[2]
WHEEL_NAME = "flash_attn_4-4.0.0b36-py3-none-any.whl"
WHEELS_DIR = Path(os.environ.get("FA4_WHEELS", "/tmp/fa4wheels"))   # pip download flash-attn-4==4.0.0bNN


@pytest.fixture(scope="session")
def b36(request) -> Path:
    """The flash-attn-4 4.0.0b36 wheel (see the module docstring)."""
    for cand in (os.environ.get("FA4_WHEEL_B36"), ROOT / ".device-wheels" / "b" / WHEEL_NAME):
        if cand and Path(cand).exists():
            return Path(cand)
    cache = Path(request.config.cache.mkdir("fa4-wheels"))
    if not (cache / WHEEL_NAME).exists():
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                               "flash-attn-4==4.0.0b36", "-d", str(cache)], capture_output=True, text=True,
                              timeout=300)
        if proc.returncode or not (cache / WHEEL_NAME).exists():
            pytest.skip(f"the flash-attn-4 4.0.0b36 wheel could not be fetched ({proc.stderr.strip()[-200:]})")
    return cache / WHEEL_NAME


def _modified(wheel, tmp_path, file, old, new) -> Path:
    """The wheel with ``old`` replaced by ``new`` (once) in flash_attn/cute/<file>."""
    out = tmp_path / "flash_attn_4-4.0.0b36-modified.whl"
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(out, "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename == upstream.PREFIX + file:
                text = data.decode()
                assert text.count(old) >= 1, old
                data = text.replace(old, new, 1).encode()
            dst.writestr(item, data)
    return out


def _line_of(wheel, file, needle) -> int:
    with zipfile.ZipFile(wheel) as z:
        text = z.read(upstream.PREFIX + file).decode()
    return text[:text.index(needle)].count("\n") + 1


def test_b36_has_no_drift(b36, capsys):
    res = upstream.diff(b36)
    assert res.ok, res.drifts
    assert res.version == "4.0.0b36" and res.matches == ["4.0.0b36"]
    assert cli_main(["upstream", "diff", str(b36)]) == 0
    assert "no drift" in capsys.readouterr().out


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
def test_one_changed_constant_fails_naming_it(b36, tmp_path, capsys, file, old, new, fact):
    wheel = _modified(b36, tmp_path, file, old, new)
    res = upstream.diff(wheel)
    names = [d.name for d in res.drifts]
    assert fact in names and all(n == fact or n.startswith(fact + " (polys/") for n in names), names
    d = next(d for d in res.drifts if d.name == fact)
    assert d.file == upstream.PREFIX + file
    if fact != "num_splits_heuristic()":     # a rule's digest is read at its def line
        assert d.line == _line_of(b36, file, old.split("\n")[0]) or fact.startswith("POLY_EX2")
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


def test_default_profile_records_the_wheel(b36):
    """The b36 profile's facts are what the b36 sources say (fa4num/data/releases/4.0.0b36.json)."""
    assert upstream.profile_facts(releases.DEFAULT_RELEASE) == upstream.extract_profile_facts(b36)


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
