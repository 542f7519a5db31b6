"""The command line as a user meets it: one-line errors naming the argument (exit 2), nothing computed before a
bad output path is refused, atomic outputs, the registry only written when asked, package data."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from fa4num import polys
from fa4num.cli import main

ROOT = Path(__file__).resolve().parents[1]
BAD_INPUTS = [   # (argv, text the one-line message must contain): every case of issue 9
    (["attention", "run", "--shape", "1,2,3"], "--shape: expected batch,seqlen_q,heads,head_dim, got '1,2,3'"),
    (["attention", "run", "--shape", "a,b,c,d"], "--shape: expected"),
    (["attention", "run", "--shape", "1,32,1,64", "--kernel", "fa4-sm100", "--opt", "rescale_threshold=abc"],
     "rescale_threshold: expected a finite number >= 0"),
    (["attention", "run", "--shape", "1,32,1,64", "--kernel", "fa4-sm100", "--opt", "rescale_threshold=-1"],
     "rescale_threshold: expected"),
    (["attention", "run", "--shape", "1,32,1,64", "--kernel", "fa4-sm100", "--opt", "rescale_threshold=NaN"],
     "rescale_threshold: expected"),
    (["attention", "run", "--shape", "1,32,1,64", "--kernel", "fa4-sm100", "--opt", "max_offset=NaN"],
     "max_offset: expected an integer"),
    (["attention", "run", "--shape", "1,32,1,64", "--kernel", "fa4-sm100", "--opt", "ex2_emu_freq=1.5"],
     "ex2_emu_freq: expected an integer"),
    (["attention", "run", "--opt", "rescale_threshold"], "--opt: expected KEY=VALUE"),
    (["attention", "run", "--seqlen-k", "-1"], "--seqlen-k: expected an integer >= 0"),
    (["sweep", "--range", "nan", "0"], "--range: expected a number (not NaN), got 'nan'"),
    (["sweep", "--range", "0", "-1"], "--range: LO must be <= HI"),
    (["sweep", "--grid", "8"], "--grid: needs a finite --range"),
    (["sweep", "--coeffs", "1,zz"], "--coeffs: expected c0,c1,..."),
    (["sweep", "--coeffs", "no-such-set"], "coeffs: no coefficient set 'no-such-set'"),
    (["polys", "show", "no-such-set"], "name: no coefficient set 'no-such-set'"),
    (["polys", "export", "no-such-set"], "coeffs: no coefficient set"),
    (["polys", "--registry", "/nonexistent.json", "list"], "registry: no such file: /nonexistent.json"),
    (["fit", "--interval", "nan", "1"], "--interval: expected a finite number"),
    (["fit", "--interval", "0", "200", "--quick"], "interval: the Remez system"),
    (["attention", "golden", "--file", "/nonexistent.npz"], "--file: no such file"),
    (["study", "run", "smoke", "--out", "/proc/sys/fa4num-out"], "--out: cannot write to /proc/sys"),
    (["nosuchcommand"], "invalid choice"),
]


@pytest.mark.parametrize("argv,message", BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_bad_input_one_line_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:   # argparse's errors exit; the others return
        raise SystemExit(main(argv))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("fa4num: error: ") and err.count("\n") == 1, err
    assert message in err


def test_corrupt_registry(tmp_path, capsys):
    bad = tmp_path / "reg.json"
    bad.write_text("{not json")
    assert main(["polys", "--registry", str(bad), "list"]) == 2
    assert "registry: " in capsys.readouterr().err
    with pytest.raises(ValueError, match="is not valid JSON"):
        polys.read(bad)
    bad.write_text(json.dumps({"schema": "something-else", "entries": {}}))
    with pytest.raises(ValueError, match="is not a fa4num-polys/1 registry"):
        polys.read(bad)


def test_subprocess_no_traceback_and_debug_shows_it():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "fa4num.cli", "polys", "--registry", "/nonexistent.json", "list"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == "fa4num: error: registry: no such file: /nonexistent.json\n"
    r = subprocess.run(cmd + ["--debug"], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode != 0 and "Traceback (most recent call last)" in r.stderr


def test_help_does_not_import_the_numerics():
    code = ("import sys; from fa4num.cli import build_parser; build_parser(None); build_parser('polys'); "
            "heavy = [m for m in ('numpy', 'numba', 'torch', 'scipy', 'mpmath', 'flint') if m in sys.modules]; "
            "print(heavy)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    assert r.stdout.strip() == "[]", r.stderr


# --- forward options: refused where FA4 refuses or cannot mean them, accepted where FA4 accepts them ----------
@pytest.mark.parametrize("opts,name", [
    ({"rescale_threshold": -1.0}, "rescale_threshold"), ({"rescale_threshold": -100.0}, "rescale_threshold"),
    ({"rescale_threshold": float("nan")}, "rescale_threshold"), ({"rescale_threshold": float("inf")},
                                                                  "rescale_threshold"),
    ({"max_offset": float("nan")}, "max_offset"), ({"max_offset": 1.5}, "max_offset"),
    ({"ex2_emu_freq": 1.5}, "ex2_emu_freq"), ({"ex2_emu_freq": -2}, "ex2_emu_freq"),
    ({"ex2_emu_res": "4"}, "ex2_emu_res"), ({"fused_bias": 1}, "fused_bias"),
    ({"coeffs": [1.0, float("nan")]}, "coeffs"), ({"tile_n": 100}, "tile_n"),
])
def test_forward_refuses_bad_knobs_by_name(opts, name):
    from fa4num.attention import forward
    q = np.zeros((1, 16, 1, 64), ml_dtypes.bfloat16)
    with pytest.raises(ValueError, match=f"^{name}: expected"):
        forward(q, q, q, kernel="fa4-sm100", **opts)


def test_forward_accepts_odd_scales():
    from fa4num.attention import forward
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 16, 1, 64)).astype(ml_dtypes.bfloat16)
    for scale in (-0.5, 1e30):
        res = forward(q, q, q, softmax_scale=scale, kernel="fa4-sm90")   # FA4 runs these: no error
        assert res.out.shape == q.shape


def test_attention_run_flags_nonfinite(tmp_path, capsys):
    """softmax_scale = 1e30: the H200 gives NaN out and infinite LSE; the CLI warns, writes null, exits 3."""
    path = tmp_path / "r.json"
    argv = ["attention", "run", "--shape", "1,16,1,64", "--scale", "1e30", "--json", str(path)]
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert "fa4num: warning: non-finite results" in err
    rep = json.loads(path.read_text())
    assert rep["finite"] is False and rep["nonfinite"]["out"] + rep["nonfinite"]["lse"] > 0
    assert "NaN" not in path.read_text() and "Infinity" not in path.read_text()
    assert main(argv + ["--allow-nonfinite"]) == 0


# --- outputs checked before the work, written atomically ----------------------------------------------------
def test_sweep_refuses_a_file_as_out_before_work(tmp_path, capsys, monkeypatch):
    from fa4num.ex2 import engine
    monkeypatch.setattr(engine, "sweep", lambda *a, **k: pytest.fail("the sweep ran before the check"))
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["sweep", "--range", "-1", "0", "--out", str(f), "--no-progress"]) == 2
    assert "--out: " in capsys.readouterr().err and f.read_text() == "x"
    if Path("/proc/sys").is_dir():   # a read-only place (even for root): refused before the sweep too
        assert main(["sweep", "--range", "-1", "0", "--out", "/proc/sys/fa4num-out", "--no-progress"]) == 2
        assert "--out: cannot write to /proc/sys" in capsys.readouterr().err


def test_fit_refuses_unwritable_registry_before_work(tmp_path, monkeypatch, capsys):
    from fa4num.fit import _api
    monkeypatch.setattr(_api, "fit_exp2", lambda *a, **k: pytest.fail("the fit ran before the check"))
    (tmp_path / "file").write_text("x")
    assert main(["fit", "--degree", "2", "--registry", str(tmp_path / "file" / "reg.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fa4num: error: --registry: ") and "exists and is not a folder" in err


def test_fit_writes_only_when_asked(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))   # the user registry --write would use
    before = sorted((p.name, p.read_bytes()) for p in polys.shipped_dir().iterdir())
    assert main(["fit", "--degree", "1", "--quick"]) == 0
    assert "not written (pass --write" in capsys.readouterr().out
    assert sorted((p.name, p.read_bytes()) for p in polys.shipped_dir().iterdir()) == before
    assert not (tmp_path / "xdg").exists()
    user = tmp_path / "mine.json"
    assert main(["fit", "--degree", "1", "--quick", "--method", "fa4", "--registry", str(user)]) == 0
    assert main(["fit", "--degree", "1", "--quick", "--method", "fa4", "--registry", str(user),
                 "--name", "again"]) == 0
    out = capsys.readouterr().out
    assert "not written: " in out and "already holds these coefficients" in out
    assert list(polys.read(user)["entries"]) == ["fa4num-fa4-deg1"]


def test_report_interrupted_leaves_previous_report(tmp_path, monkeypatch):
    from fa4num import report
    out = tmp_path / "rep"
    out.mkdir()
    (out / "report.md").write_text("old report")
    (out / "old.png").write_bytes(b"old")

    def interrupted(ctx):
        (ctx.out_dir / "exp2_error_vs_x.png").write_bytes(b"half a figure")
        raise KeyboardInterrupt
    monkeypatch.setattr(report, "providers", lambda: [("exp2", interrupted)])
    with pytest.raises(KeyboardInterrupt):
        report.write_report(out, quick=True, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep"]
    assert sorted(p.name for p in out.iterdir()) == ["old.png", "report.md"]
    assert (out / "report.md").read_text() == "old report"


def test_report_refuses_a_folder_that_is_not_a_report(tmp_path):
    from fa4num import report
    (tmp_path / "precious.txt").write_text("x")
    with pytest.raises(ValueError, match="--out: .* holds no report.md"):
        report.write_report(tmp_path, quick=True, progress=False)
    assert (tmp_path / "precious.txt").read_text() == "x"


# --- packaging -----------------------------------------------------------------------------------------------
def test_data_is_package_data():
    """What the library reads at run time lives inside the package (importlib.resources), so a wheel has it; the
    coefficient sets are the top-level polys/ folder, which the build maps into the package (fa4num.polys_data)."""
    from fa4num.attention.golden import GOLDEN_SM90
    pkg = Path(__import__("fa4num").__file__).parent
    assert GOLDEN_SM90.is_file() and pkg in GOLDEN_SM90.parents
    assert polys.shipped_dir() in (pkg / "polys_data", pkg.parent / "polys")
    assert len(polys.read()["entries"]) >= 15
    text = (ROOT / "pyproject.toml").read_text()
    assert '"fa4num.polys_data" = "polys"' in text
    assert 'include=["fa4num", "fa4num.*"]' in (ROOT / "setup.py").read_text()   # not fa4num-report/ beside it


def test_registry_entry_keeps_its_revision(tmp_path):
    """Writing entries one after another (the registry file itself dirty) keeps the clean code revision."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    reg = tmp_path / "reg.json"
    polys.write_entry("a", (1.0, 0.5), source="t", metrics={}, provenance={}, registry=reg)
    subprocess.run(["git", "-C", str(tmp_path), "add", "reg.json"], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"],
                   check=True)
    polys.write_entry("b", (1.0, 0.25), source="t", metrics={}, provenance={"code_revision": "abc+dirty"},
                      registry=reg)
    polys.write_entry("c", (1.0, 0.125), source="t", metrics={}, provenance={"code_revision": "abc+dirty"},
                      registry=reg)   # now reg.json itself is modified: still the clean revision
    assert polys.read(reg)["entries"]["c"]["provenance"]["code_revision"] == "abc"
    (tmp_path / "other").write_text("x")
    subprocess.run(["git", "-C", str(tmp_path), "add", "other"], check=True)
    polys.write_entry("d", (1.0, 0.125), source="t", metrics={}, provenance={"code_revision": "abc+dirty"},
                      registry=reg)   # another tracked change: the tree really is dirty
    assert polys.read(reg)["entries"]["d"]["provenance"]["code_revision"] == "abc+dirty"


def test_interrupted_sweep_resumes(tmp_path, monkeypatch, capsys):
    """Ctrl-C after two chunks: nothing is written but the chunks; the re-run resumes and gives the same result."""
    from fa4num.ex2 import checkpoint
    argv = ["sweep", "--range", "-1", "-0.99", "--chunk", "65536", "--no-progress", "--name", "s"]
    assert main(argv + ["--out", str(tmp_path / "ref")]) == 0
    ref = json.loads((tmp_path / "ref" / "s.json").read_text())
    out = tmp_path / "run"
    real_save, calls = checkpoint.SweepCheckpoint.save, []

    def save_then_interrupt(self, *a, **k):
        real_save(self, *a, **k)
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
    monkeypatch.setattr(checkpoint.SweepCheckpoint, "save", save_then_interrupt)
    assert main(argv + ["--out", str(out)]) == 130
    assert [p.name for p in out.iterdir()] == [".s.chunks"]   # no half-written result
    monkeypatch.setattr(checkpoint.SweepCheckpoint, "save", real_save)
    capsys.readouterr()
    assert main(argv + ["--out", str(out)]) == 0
    assert "resumed: 2 chunks" in capsys.readouterr().out
    got = json.loads((out / "s.json").read_text())
    for k in ("seconds", "provenance"):
        del got[k], ref[k]
    assert got == ref and ref["count"] > 2 * 65536
    assert sorted(p.name for p in out.iterdir()) == ["s.json", "s_error_vs_x.png", "s_ulp_histogram.png"]


def test_every_listed_command_registers_itself():
    """The lazy table of fa4num.cli names a module per command: each must exist and register that command (a
    module moved without updating the table would otherwise break only when a user types the command)."""
    import argparse

    from fa4num import cli
    for name, module, _ in cli._COMMANDS:
        parser = cli.build_parser(name)
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        assert sub.choices[name].get_default("func") is not None or sub.choices[name]._subparsers is not None, \
            f"{module} does not register {name!r}"


def test_attention_run_seqlen_k_zero_is_honoured(tmp_path):
    """--seqlen-k 0 runs with no keys (it used to fall back to seqlen_q): out 0 and LSE -inf, as FA4 gives."""
    path = tmp_path / "r.json"
    assert main(["attention", "run", "--shape", "1,16,1,64", "--seqlen-k", "0", "--json", str(path)]) == 0
    rep = json.loads(path.read_text())
    assert rep["spec"]["seqlen_k"] == 0 and rep["nonfinite"]["empty_rows"] == 16 and rep["finite"] is True
