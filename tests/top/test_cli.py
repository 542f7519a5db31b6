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
from _signals import terminal_sigint

from fa4num import polys
from fa4num.cli import main

ROOT = Path(__file__).resolve().parents[2]
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
    # issue 21: out-of-range values are refused, not replaced; the message names the option and the range
    (["fit", "--degree", "0"], "--degree: expected an integer in 1-10, got '0'"),
    (["fit", "--degree", "11"], "--degree: expected an integer in 1-10"),
    (["fit", "--degree", "three"], "--degree: expected an integer in 1-10"),
    (["fit", "--weight", "0"], "--weight: w(x) = '0' must be finite and non-zero on [0, 1]"),
    (["fit", "--weight", "1/(x-0.5)"], "--weight: w(x) = '1/(x-0.5)' must be finite and non-zero"),
    (["fit", "--weight", "nosuch(x)"], "--weight:"),
    (["fit", "--monomials", "1,1"], "--monomials: expected comma-separated distinct powers in 0-10"),
    (["fit", "--monomials", "12"], "--monomials: expected"),
    (["fit", "--interval", "1", "0"], "--interval: A must be < B"),
    (["fit", "--fixed", "a=b"], "--fixed: expected K=V"),
    (["fit", "--interval", "0", "pi/0"], "--interval: not a number or constant expression: 'pi/0' (ZeroDivisionError)"),
    (["fit", "--fixed", "7=1", "--degree", "3"], "--fixed: power 7 outside 0-3"),
    (["fit", "--function", "nosuch(x)"], "--function: unknown name 'nosuch'"),
    (["fit", "--function", "1/x", "--interval", "-1", "1"], "--function: 1/x has a pole"),
    (["bounds", "attention", "--shape", "1,16,1"], "--shape: expected batch,seqlen_q,heads,head_dim"),
    (["bounds", "attention", "--shape", "1,16,1,64", "--q-mult", "nan"], "--q-mult: expected a finite number"),
    (["bounds", "attention", "--shape", "1,16,1,64", "--softmax-scale", "inf"], "--softmax-scale: expected a finite"),
    (["bounds", "attention", "--shape", "1,16,1,64", "--seqlen-k", "-3"], "--seqlen-k: expected an integer >= 0"),
    (["bounds", "attention", "--shape", "1,16,1,64", "--kernel", "fa4-sm100", "--rescale-threshold", "-1"],
     "--rescale-threshold: expected a finite number >= 0"),
    (["bounds", "attention", "--shape", "1,16,1,64", "--rescale-threshold", "4"],
     "--rescale-threshold: fa4-sm90 has no knob rescale_threshold (kernels that have it: fa4-sm100)"),
    (["bounds", "attention", "--shape", "1,16,1,64", "--kernel", "fa4-sm100", "--fused-bias", "maybe"],
     "--fused-bias: expected true or false, got 'maybe'"),
    (["bounds", "exp2", "--degree", "0"], "--degree: expected one of FA4's POLY_EX2 degrees 1-5"),
    (["bounds", "exp2", "--lo", "nan"], "--lo: expected a number (not NaN)"),
    (["bounds", "exp2", "--lo", "1", "--hi", "-1e3"], "--lo/--hi: need LO <= HI < 128"),
    (["bounds", "exp2", "--hi", "inf"], "--lo/--hi: need LO <= HI < 128"),
    (["bounds", "exp2", "--mufu", "--arch", "sm12"], "--arch: no measured MUFU tables for 'sm12'"),
    # --degree 3 was its default, and argparse's exclusive group takes a default value as "not given"
    (["bounds", "exp2", "--mufu", "--degree", "3"], "--degree: not allowed with argument --mufu"),
    (["bounds", "exp2", "--mufu", "--variant", "asm"], "--variant: the MUFU models have no polynomial"),
    (["bounds", "exp2", "--mufu", "--lo", "-1"], "--lo: the MUFU models have no polynomial or domain"),
    (["bounds", "exp2", "--arch", "sm100"], "--arch: picks the MUFU tables, so it needs --mufu"),
    (["bounds", "attention", "--shape", "1,16,1,64", "--coeffs", "fa4-deg3"],
     "--coeffs: fa4-sm90 has no knob coeffs (kernels that have it: fa4-sm100)"),
    (["sweep", "--range", "inf", "nan"], "--range: expected a number (not NaN)"),
    (["attention", "run", "--shape", "1,16,1,64", "--kernel", "fa4-sm100", "--opt", "coeffs=1,0.5", "--opt",
      "coeffs=fa4-deg3"], "--opt: coeffs given more than once"),
    (["sweep", "--range", "1e40", "2e40"], "--range: LO and HI must lie within fp32's range"),
    (["sweep", "--range", "-1", "0", "--xbins", "0"], "--xbins: expected an integer >= 1"),
    (["sweep", "--range", "-1e39", "0"], "--range: LO and HI must lie within fp32's range"),
    (["sweep", "--range", "1.00000001", "1.00000002"], "--range: [1.00000001, 1.00000002] holds no fp32 value"),
    (["sweep", "--range", "0.1", "0.1", "--grid", "2"], "--range: [0.1, 0.1] holds no grid point"),
    (["sweep", "--range", "-126", "0", "--grid", "30"], "--grid: 30 bits on [-126, 0] gives points that are not"),
    (["sweep", "--range", "-1", "0", "--grid", "150"], "--grid: expected an integer in 0-149"),
    (["sweep", "--degree", "9", "--range", "0", "1"], "--degree: degree must be one of [1, 2, 3, 4, 5]"),
    (["sweep", "--impl", "mufu", "--degree", "3"], "--impl: mufu has no polynomial"),
    (["sweep", "--arch", "sm90"], "--impl: fa4 is FA4's software exp2; --arch and --no-ftz are for --impl mufu"),
    (["sweep", "--impl", "mufu", "--arch", "sm12", "--range", "0", "1"], "--arch: no measured MUFU tables"),
    (["study", "summary", "/nonexistent-study"], "out: /nonexistent-study does not exist"),
    (["study", "summary", "/proc/version"], "out: /proc/version is not a folder"),
    (["study", "run", "no-such-grid", "--out", "/tmp"], "grid: expected a .toml file or one of ['error_budget',"),
    (["study", "run", "/nonexistent.toml", "--out", "/tmp"], "grid: /nonexistent.toml is not a file"),
    (["study", "run", "smoke", "--out", "/tmp/fa4num-never", "--scheduler", "local:0"],
     "--scheduler: scheduler 'local:N' needs N >= 1"),
    (["attention", "run", "--shape", "1,16,1,64", "--scale", "nan"], "--scale: expected a number (not NaN)"),
    # an empty path is a mistake, not the current folder
    (["study", "run", "smoke", "--out", ""], "--out: expected a file or folder path, got ''"),
    (["sweep", "--out", " ", "--range", "1", "1"], "--out: expected a file or folder path"),
    (["report", "--out", ""], "--out: expected a file or folder path"),
    (["attention", "run", "--shape", "1,16,1,64", "--json", ""], "--json: expected a file or folder path"),
    (["sweep", "--name", "", "--range", "1", "1", "--out", "/tmp/fa4num-never"], "--name: '' must be a plain"),
    (["gpu", "attention", "--device", "cpu", "--shape", "1,16,2,64", "--kv-heads", "3"], "--kv-heads: must divide"),
    (["gpu", "attention", "--device", "cpu", "--scale", "nan"], "--scale: expected a finite number"),
    (["attention", "backward", "--dlse-mult", "nan"], "--dlse-mult: expected a finite number"),
    (["attention", "backward", "--shape", "1,64,2,256", "--kernel", "fa4-sm100"], "head_dim"),
    (["attention", "backward", "--window", "5"], "--window"),
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


@pytest.mark.parametrize("interrupt, status, line", [(KeyboardInterrupt, 130, "fa4num: interrupted\n"),
                                                     ("terminated", 143, "fa4num: terminated (SIGTERM)\n")])
def test_interrupt_while_the_command_is_imported_is_one_line(monkeypatch, capsys, interrupt, status, line):
    """A Ctrl-C in the first second of `fa4num sweep`, while its module (numba, numpy) is imported, printed a
    30-line import traceback; SIGTERM then printed nothing."""
    from fa4num import cli
    exc = cli.Terminated() if interrupt == "terminated" else interrupt()

    def slow_import(command):
        raise exc
    monkeypatch.setattr(cli, "build_parser", slow_import)
    assert main(["sweep", "--range", "-1", "0"]) == status
    assert capsys.readouterr().err == line


def test_attention_golden_refuses_an_empty_file(tmp_path, capsys):
    empty = tmp_path / "empty.npz"   # numpy raised EOFError: "error: EOFError: No data left in file", exit 1
    empty.write_bytes(b"")
    assert main(["attention", "golden", "--file", str(empty)]) == 2
    assert capsys.readouterr().err.startswith(f"fa4num: error: --file: {empty} is not a golden file")


def test_closed_pipe_is_quiet():
    """`fa4num polys list | head -1`: the reader is gone before the output is written. No error line, no
    traceback, the shell's status for SIGPIPE (it printed "fa4num: error: [Errno 32] Broken pipe")."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        r = subprocess.run([sys.executable, "-m", "fa4num.cli", "polys", "list"], stdout=write_end,
                           stderr=subprocess.PIPE, text=True, env=env, timeout=60)
    finally:
        os.close(write_end)
    assert (r.returncode, r.stderr) == (141, "")


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


@pytest.mark.parametrize("suffix", ["", ".json"])   # a folder of set files, or one registry file
def test_fit_never_replaces_another_set_of_that_name(tmp_path, capsys, suffix):
    """`fit --degree 3 --name mine` into a registry whose `mine` is the user's degree-2 set silently replaced it.
    The same set again is fine; other coefficients need --replace."""
    user = tmp_path / f"reg{suffix}"
    fit = ["fit", "--quick", "--name", "mine", "--registry", str(user)]
    assert main([*fit, "--degree", "2"]) == 0
    kept = polys.read(user)["entries"]["mine"]["coeffs_fp32_bits"]
    assert main([*fit, "--degree", "2"]) == 0
    capsys.readouterr()
    assert main([*fit, "--degree", "3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--name: {user} already holds a different set named mine" in err
    assert polys.read(user)["entries"]["mine"]["coeffs_fp32_bits"] == kept
    assert main([*fit, "--degree", "3", "--replace"]) == 0
    assert len(polys.read(user)["entries"]["mine"]["coeffs_fp32_bits"]) == 4


def test_report_interrupted_leaves_previous_report(tmp_path, monkeypatch):
    from fa4num import report
    from fa4num.outputs import MANIFEST, atomic_dir
    out = tmp_path / "rep"
    with atomic_dir(out) as tmp:   # a previous report
        (tmp / "report.md").write_text("old report")
        (tmp / "old.png").write_bytes(b"old")

    def interrupted(ctx):
        (ctx.out_dir / "exp2_error_vs_x.png").write_bytes(b"half a figure")
        raise KeyboardInterrupt
    monkeypatch.setattr(report, "providers", lambda: [("exp2", interrupted)])
    with pytest.raises(KeyboardInterrupt):
        report.write_report(out, quick=True, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep"]
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST, "old.png", "report.md"]
    assert (out / "report.md").read_text() == "old report"


def test_report_refuses_a_folder_that_is_not_a_report(tmp_path):
    from fa4num import report
    (tmp_path / "precious.txt").write_text("x")
    (tmp_path / "report.md").write_text("my own notes, not a report fa4num wrote")
    with pytest.raises(ValueError, match="--out: .* holds files fa4num did not write there .*precious.txt"):
        report.write_report(tmp_path, quick=True, progress=False)
    assert (tmp_path / "precious.txt").read_text() == "x"


def test_report_out_never_deletes_what_it_did_not_write(tmp_path, capsys):
    """A file the user put into a report folder: the next report is refused (one line, exit 2), the file kept;
    a folder holding only a previous report's files is replaced."""
    from fa4num import report
    out = tmp_path / "rep"
    sections = [("mine", lambda ctx: [report.Section("Mine", "text")])]
    assert report.write_report(out, progress=False, sections=sections).ok
    assert report.write_report(out, progress=False, sections=sections).ok   # its own files: replaced
    (out / "notes.txt").write_text("mine")
    assert main(["report", "--quick", "--no-progress", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--out:" in err and "notes.txt" in err
    assert (out / "notes.txt").read_text() == "mine" and (out / "report.md").exists()


def test_study_summary_of_a_folder_without_results(tmp_path, capsys):
    assert main(["study", "summary", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds no study results" in err
    smoke = Path(__import__("fa4num").__file__).parent / "study" / "data" / "study_smoke"
    assert main(["study", "summary", str(smoke), "--figures", str(tmp_path / "figs")]) == 0
    assert "wrote 3 figures" in capsys.readouterr().out
    assert sorted(p.suffix for p in (tmp_path / "figs").iterdir()) == [".png"] * 3   # no temporary folder left


def test_fit_degree_limit_is_the_fitters():
    from fa4num.fit import _api, _cli
    assert _cli._MAX_DEGREE == _api.MAX_DEGREE


def test_fit_default_name_is_a_valid_name():
    """An interval printed as 1e+30 made the default name one that --name's own check refuses."""
    from fa4num import cli
    from fa4num.fit import _cli
    args = cli.build_parser("fit").parse_args(["fit", "--interval", "-1e-30", "1e30"])
    args.degree = 3
    name = _cli._default_name(args)
    assert name.endswith("-1e-30_1e30") and all(ch.isalnum() or ch in "-_." for ch in name)


def test_negative_numbers_in_scientific_form_are_values():
    """argparse alone reads -1e3 and -inf as options ("expected 2 arguments"): fa4num's parser reads them as
    numbers, and an option is still an option."""
    from fa4num import cli
    args = cli.build_parser("sweep").parse_args(["sweep", "--range", "-1e3", "-inf", "--no-progress"])
    assert args.range == [-1000.0, float("-inf")] and args.no_progress
    args = cli.build_parser("bounds").parse_args(["bounds", "exp2", "--lo", "-1.5E+2", "--hi", "-.5"])
    assert (args.lo, args.hi) == (-150.0, -0.5)


def test_bounds_attention_that_checks_nothing_says_so(capsys):
    """softmax_scale < 0 or huge logits: FA4 gives NaN everywhere and no element has a finite bound. The run says
    it checked nothing and exits 3 (it used to print "violations 0 of N" and exit 0)."""
    for extra in (["--softmax-scale", "-1"], ["--q-mult", "1e30"]):
        assert main(["bounds", "attention", "--shape", "1,16,1,64", *extra]) == 3
        cap = capsys.readouterr()
        assert "not checked: 1024 of 1024 outputs" in cap.out
        assert cap.err.count("\n") == 1 and "checked nothing" in cap.err
    assert main(["bounds", "attention", "--shape", "1,16,1,64"]) == 0
    assert "not checked" not in capsys.readouterr().out


def test_bounds_attention_seqlen_k_zero_is_honoured(capsys):
    """--seqlen-k 0 runs with no keys (it used to be replaced by seqlen_q): FA4's out is 0, and so is the bound."""
    assert main(["bounds", "attention", "--shape", "1,16,1,64", "--seqlen-k", "0"]) == 0
    out = capsys.readouterr().out
    assert "seqlen_k 0," in out and "violations 0 of 1024" in out


def _interrupt_when(proc, ready, sig, timeout=120.0):
    """Send ``sig`` to ``proc``'s process group (as a terminal's Ctrl-C does) once ``ready()`` holds."""
    import signal
    import time
    t0 = time.monotonic()
    while not ready():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() - t0 < timeout
        time.sleep(0.05)
    os.killpg(proc.pid, getattr(signal, sig))
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


@pytest.mark.parametrize("sig,code,line", [("SIGINT", 130, "fa4num: interrupted\n"),
                                           ("SIGTERM", 143, "fa4num: terminated (SIGTERM)\n")])
def test_report_interrupt_leaves_no_temp_folder(tmp_path, sig, code, line):
    out = tmp_path / "rep"
    proc = subprocess.Popen([sys.executable, "-m", "fa4num.cli", "report", "--quick", "--out", str(out)],
                            cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=terminal_sigint)
    rc, _, err = _interrupt_when(proc, lambda: any(p.name.endswith(".tmp") for p in tmp_path.iterdir()), sig)
    assert rc == code and err.endswith(line) and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == []   # no report, no temporary folder


def test_study_ctrl_c_one_line_and_resumes(tmp_path):
    """Ctrl-C on a study on a LocalCluster: one line (no worker tracebacks), the finished rows stored, and the
    rerun computes only the rest."""
    pytest.importorskip("distributed")
    (tmp_path / "slowstudy.py").write_text(
        "import pathlib, time\n"
        "def slow(x, marks):\n"
        "    pathlib.Path(marks, str(x)).touch()\n"
        "    time.sleep(0.2 if x < 2 else 60)\n"
        "    return {'y': x}\n")
    marks = tmp_path / "marks"
    marks.mkdir()
    grid = tmp_path / "g.toml"
    grid.write_text(f'study = "slowstudy:slow"\n[fixed]\nmarks = "{marks}"\n[[axes]]\nx = [0, 1, 2, 3]\n')
    out = tmp_path / "res"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    proc = subprocess.Popen([sys.executable, "-m", "fa4num.cli", "study", "run", str(grid), "--out", str(out),
                             "--scheduler", "local:1", "--no-progress"], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=terminal_sigint)
    rc, _, err = _interrupt_when(proc, lambda: (marks / "2").exists(), "SIGINT")
    assert rc == 130 and err == "fa4num: interrupted\n", err
    from fa4num.study import store
    # what had come back to the client by then is stored (x = 1 may still have been in flight on the worker's
    # other thread when x = 2 started: which of 0, 1 are stored is timing, that nothing else is, is not)
    kept = sorted(store.read_store(out)["x"]) if any(out.glob("part-*")) else []
    assert set(kept) <= {0, 1} and len(set(kept)) == len(kept)
    assert [p.name for p in out.iterdir() if not p.name.startswith(("part-", ".lock"))] == []   # no temporary file
    grid.write_text(grid.read_text().replace("x = [0, 1, 2, 3]", "x = [0, 1, 2]"))
    (tmp_path / "slowstudy.py").write_text("def slow(x, marks):\n    return {'y': x}\n")
    done = subprocess.run([sys.executable, "-m", "fa4num.cli", "study", "run", str(grid), "--out", str(out),
                           "--scheduler", "none", "--no-progress"], env=env, text=True, capture_output=True)
    # the rerun computes exactly what was not stored, and the store then holds each task once
    assert done.returncode == 0 and done.stdout.strip() == \
        f"3 tasks: {3 - len(kept)} computed, {len(kept)} cached", done
    assert sorted(store.read_store(out)["x"]) == [0, 1, 2]


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
    for pattern in ("*.toml", "*.parquet"):   # the study grids and the committed study results
        assert f'"{pattern}"' in text


def test_grids_ship_with_the_package(capsys):
    """`study list` shows exactly the grids under fa4num/study/grids (package data), wherever it runs from."""
    from fa4num.study.grid import list_grids
    pkg = Path(__import__("fa4num").__file__).parent
    shipped = sorted(p.stem for p in (pkg / "study" / "grids").glob("*.toml"))
    assert {"smoke", "skip_rate", "error_budget"} <= set(shipped)
    assert [g.name for g in list_grids()] == shipped and all(pkg in g.path.parents for g in list_grids())
    assert main(["study", "list"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line.startswith("  ")]
    assert listed == shipped


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


# --- attention run --score-mod / --mask-mod (issue 28): FlexAttention's built-ins, in the reference too ------
MOD_BAD_INPUTS = [
    (["attention", "run", "--shape", "1,64,2,32", "--score-mod", "bogus"], "--score-mod: expected alibi, alibi-exp2"),
    (["attention", "run", "--shape", "1,64,2,32", "--score-mod", "softcap=0"], "--score-mod: expected"),
    (["attention", "run", "--shape", "1,64,2,32", "--score-mod", "relative-bias=-2"], "--score-mod: expected"),
    (["attention", "run", "--shape", "1,64,2,32", "--mask-mod", "window=3"], "--mask-mod: expected causal, window="),
    (["attention", "run", "--shape", "1,64,2,32", "--mask-mod", "prefix-lm=x"], "--mask-mod: expected"),
    (["attention", "run", "--shape", "1,64,2,32", "--mask-mod", "document=10,10"],
     "--mask-mod: document lengths must add up to the sequence length"),
    (["attention", "run", "--shape", "1,64,2,32", "--mask-mod", "causal", "--causal"],
     "--mask-mod: cannot be combined with --causal or --window"),
    (["attention", "run", "--shape", "1,64,2,32", "--score-mod", "softcap=3", "--softcap", "2"],
     "--score-mod: cannot be combined with --softcap"),
]


@pytest.mark.parametrize("argv,message", MOD_BAD_INPUTS, ids=[" ".join(a) for a, _ in MOD_BAD_INPUTS])
def test_mod_flags_bad_input_one_line_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        raise SystemExit(main(argv))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("fa4num: error: ") and err.count("\n") == 1, err
    assert message in err


def _run_report(capsys, *flags):
    assert main(["attention", "run", "--shape", "1,128,2,64", *flags]) == 0
    return json.loads(capsys.readouterr().out)


def test_mod_flags_reach_the_forward_and_the_reference(capsys):
    """--mask-mod causal is causal=True's mask: the same error against fp64 up to float64 sums (had the reference
    ignored the mask_mod, it would be the unmasked attention); ALiBi's bias (up to 0.25 * 127) and a document mask are far
    from the unmodified attention, so a small error against fp64 says the reference applied them; soft cap as a
    score_mod is softcap='s rule (the reference's tanh differs by float32 ulps only)."""
    causal = _run_report(capsys, "--causal")
    mask = _run_report(capsys, "--mask-mod", "causal")
    assert mask["features"] == {"mask_mod": "causal_mask()"}
    for key, val in causal["vs_fp64"].items():      # float64 summation order aside
        assert mask["vs_fp64"][key] == pytest.approx(val, rel=1e-12), key
    assert mask["lse_max_abs_err"] == pytest.approx(causal["lse_max_abs_err"], rel=1e-12)
    both = _run_report(capsys, "--score-mod", "alibi", "--mask-mod", "document=50,78")
    assert both["features"] == {"score_mod": "alibi_mod(aux_index=1, contract=True)",
                                "mask_mod": "document_mask(aux_index=0)"}
    assert both["finite"] and both["vs_fp64"]["rel_l2"] < 1e-2 and both["lse_max_abs_err"] < 1e-2, both["vs_fp64"]
    capped = _run_report(capsys, "--score-mod", "softcap=5", "--q-mult", "3")
    opt = _run_report(capsys, "--softcap", "5", "--q-mult", "3")
    assert abs(capped["vs_fp64"]["max_abs"] - opt["vs_fp64"]["max_abs"]) < 1e-6
    assert capped["stats"] == opt["stats"]


# --- attention backward (issue 26): one forward + backward on seeded inputs, against fp64 gradients ---------
def _backward_report(capsys, *flags):
    assert main(["attention", "backward", "--shape", "1,96,2,64", *flags]) == 0
    return json.loads(capsys.readouterr().out)


def test_attention_backward_reports_gradients_at_the_floor(capsys):
    """Every gradient within a few times its rounded-once floor; with --dlse-mult the reference takes the LSE's
    gradient too (had it not, dq and dk would be off by the dLSE * P * K term, far above the floor)."""
    plain = _backward_report(capsys, "--causal", "--sink-mult", "2", "--kv-heads", "1")
    assert set(plain["vs_fp64"]) == {"dq", "dk", "dv", "dsink"} and plain["deterministic"] is True
    for n in ("dq", "dk", "dv"):
        assert plain["vs_fp64"][n]["rel_l2"] < 4 * plain["floor_rounded_once"][n]["rel_l2"], n
    dl = _backward_report(capsys, "--causal", "--sink-mult", "2", "--kv-heads", "1", "--dlse-mult", "1")
    assert dl["features"]["dlse_mult"] == 1.0
    for n in ("dq", "dk"):
        assert dl["vs_fp64"][n]["rel_l2"] < 4 * dl["floor_rounded_once"][n]["rel_l2"], n
    assert dl["vs_fp64"]["dv"] == plain["vs_fp64"]["dv"]        # dv does not see the LSE's gradient
    varlen = _backward_report(capsys, "--shape", "2,80,2,64", "--varlen", "80,33", "--kernel", "fa4-sm100")
    assert varlen["features"]["cu_seqlens_q"] == [0, 80, 113] and varlen["kernel"] == "fa4-sm100"

