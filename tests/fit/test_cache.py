"""The user cache behind ``fa4num fit`` (fa4num.fit._memo): the same text with and without it, invalidated by
what the numbers depend on, kept outside the package, and a cache hit that imports none of the fitter."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import fa4num
from fa4num.cli import main
from fa4num.fit import _api, _memo, registry

ROOT = Path(__file__).resolve().parents[2]


def _timing_line(line: str) -> bool:
    """The line saying how long the fit took ("fit 0.10 s (remez ...)", or on a cache hit "fit read from the user
    cache ...: computed DATE in 0.10 s (remez ...)"): a measurement, not a result."""
    return line.startswith("fit ") and (line[4:5].isdigit() or line.startswith("fit read from the user cache"))


def _run(capsys, argv) -> str:
    assert main(argv) == 0
    return capsys.readouterr().out


def test_fit_prints_the_same_text_with_and_without_the_cache(tmp_path, monkeypatch, capsys):
    # a set no registry entry holds, with the emulation metrics: the exhaustive sweeps are what is cached
    argv = ["fit", "--degree", "1", "--free-c0"]
    monkeypatch.setenv("FA4NUM_NO_CACHE", "1")
    uncached = _run(capsys, argv)
    monkeypatch.delenv("FA4NUM_NO_CACHE")
    monkeypatch.setenv("FA4NUM_CACHE_DIR", str(tmp_path))
    computed = _run(capsys, argv)
    assert sorted(p.parent.name for p in tmp_path.rglob("*.pickle")) == ["describe", "fit"]
    # a hit computes nothing: neither the fit nor a metric
    monkeypatch.setattr(_api, "fit", lambda *a, **k: pytest.fail("the fit ran on a cache hit"))
    monkeypatch.setattr(registry, "_describe", lambda *a, **k: pytest.fail("describe measured on a cache hit"))
    cached = _run(capsys, argv)
    # the stored FitResult, its timings included; the timing line says it was read from the cache
    assert [line for line in cached.splitlines() if not _timing_line(line)] == \
        [line for line in computed.splitlines() if not _timing_line(line)]
    said = [line for line in cached.splitlines() if _timing_line(line)]
    assert len(said) == 1 and said[0].startswith("fit read from the user cache") and str(tmp_path) in said[0]
    assert not any(line.startswith("fit read from") for line in computed.splitlines())
    keep = [line for line in uncached.splitlines() if not _timing_line(line)]
    assert keep == [line for line in cached.splitlines() if not _timing_line(line)]
    assert len(keep) == len(cached.splitlines()) - 1


def test_fit_json_same_with_and_without_the_cache(tmp_path, monkeypatch, capsys):
    argv = ["fit", "--degree", "1", "--json"]
    monkeypatch.setenv("FA4NUM_NO_CACHE", "1")
    uncached = json.loads(_run(capsys, argv))
    monkeypatch.delenv("FA4NUM_NO_CACHE")
    monkeypatch.setenv("FA4NUM_CACHE_DIR", str(tmp_path))
    computed = json.loads(_run(capsys, argv))
    cached = json.loads(_run(capsys, argv))
    assert cached["timings"].pop("from_cache") is True and "from_cache" not in computed["timings"]
    assert cached == computed
    for d in (uncached, cached):   # a measurement and a date: the rest are results, bit for bit
        d.pop("timings"), d["provenance"].pop("date")
        d["exact"].pop("seconds")
    assert cached == uncached


def test_an_entry_is_read_back_only_under_its_own_key(tmp_path, monkeypatch):
    monkeypatch.setenv("FA4NUM_CACHE_DIR", str(tmp_path))
    calls = []

    def compute():
        calls.append(1)
        return len(calls)

    assert _memo.remember("t", ("a", 1.0.hex()), compute) == 1
    assert _memo.remember("t", ("a", 1.0.hex()), compute) == 1      # a hit
    assert _memo.remember("t", ("a", 2.0.hex()), compute) == 2      # another input
    monkeypatch.setattr(_memo, "code_key", lambda: "another fa4num")
    assert _memo.remember("t", ("a", 1.0.hex()), compute) == 3      # another code or package versions
    _memo._path("t", ("a", 2.0.hex())).write_bytes(b"\x80truncated")
    assert _memo.remember("t", ("a", 2.0.hex()), compute) == 4      # a damaged entry is recomputed
    assert _memo.remember("t", ("a", 2.0.hex()), compute) == 4      # and replaced
    assert _memo.remember("t", ("b",), lambda: (lambda: 0)) is not None   # an unpicklable value is not kept
    monkeypatch.setenv("FA4NUM_NO_CACHE", "1")
    assert _memo.remember("t", ("a", 2.0.hex()), compute) == 5      # off
    assert len(calls) == 5
    assert not list(tmp_path.rglob(".tmp-*"))                      # no temporary file left behind


def test_code_key_follows_the_source_and_the_version(tmp_path, monkeypatch):
    (tmp_path / "mod.py").write_text("X = 1\n")
    monkeypatch.setattr(_memo, "_PKG_ROOT", tmp_path)
    keys = []
    for change in (lambda: None, lambda: (tmp_path / "mod.py").write_text("X = 2\n"),
                   lambda: monkeypatch.setattr(fa4num, "__version__", "9.9.9"),
                   lambda: (tmp_path / "__pycache__").mkdir() or (tmp_path / "__pycache__" / "m.pyc").write_text("")):
        change()
        _memo.code_key.cache_clear()
        keys.append(_memo.code_key())
    _memo.code_key.cache_clear()
    assert len(set(keys[:3])) == 3 and keys[3] == keys[2]   # compiled files are not the source


def test_plain_keys_refuse_what_they_cannot_name():
    assert _memo.plain({"weight": None, "fixed": {0: 1.0}}) == _memo.plain({"fixed": {0: 1.0}, "weight": None})
    assert _memo.plain(0.1) != _memo.plain(0.1 + 2 ** -56)   # floats by their bits
    assert _memo.plain({"weight": abs}) is None and _memo.plain([1.0, abs]) is None


def test_the_cache_lives_in_the_user_cache_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("FA4NUM_CACHE_DIR", raising=False)
    monkeypatch.delenv("FA4NUM_NO_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert _memo.cache_dir() == tmp_path / "fa4num"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert Path(fa4num.__file__).resolve().parent not in _memo.cache_dir().resolve().parents


def _imported(argv, env) -> list:
    code = ("import sys; from fa4num.cli import main; assert main(%r) == 0; "
            "print(sorted(m for m in ('numba', 'ml_dtypes', 'mpmath', 'flint', 'scipy', 'fa4num.fit._api') "
            "if m in sys.modules))" % (argv,))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(ROOT), **env})
    return json.loads(r.stdout.strip().splitlines()[-1].replace("'", '"'))


def test_a_fresh_fit_imports_only_what_it_needs(tmp_path):
    env = {"FA4NUM_CACHE_DIR": str(tmp_path)}
    argv = ["fit", "--degree", "2", "--quick"]
    # computed: the fitter, but neither numba (FA4's metrics are stored, --quick measures none) nor ml_dtypes
    assert _imported(argv, env) == ["fa4num.fit._api", "flint", "mpmath"]
    assert _imported(argv, env) == []   # read back: no fitter, no mpmath, flint, numba, ml_dtypes or scipy
