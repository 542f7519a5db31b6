"""GPU-only commands on the CPU, with the device replaced by recorded H200 output: ``fa4num mufu build [--check]``
(below), ``fa4num gpu capture`` and ``fa4num gpu verify`` (at the end; ``gpu attention``'s FA4 path is in
tests/gpu/test_attention_runners.py).

The fake device answers the table inputs with the committed sm90 tables (measured on the H200: for these inputs
the tables are the device's output) and an exhaustive range with the model's output, which the test first proves
to be the H200's by its SHA-256 against the H200 digests in tests/golden/exhaustive.json.xz. So the command runs
end to end -- measure, write, compare with the previous set, sweep, report -- as it does on the GPU."""
from pathlib import Path

import numpy as np
import pytest

from fa4num import cli, golden
from fa4num.gpu import gpu_missing, mufu_build
from fa4num.gpu.ops import OpSpec
from fa4num.gpu.verify import CHUNK, HostPipeline
from fa4num.hw import load_tables

EXHAUSTIVE = Path(__file__).parents[1] / "golden" / "exhaustive.json.xz"
STEPS = [0x3F, 0xC2]     # the chunks of x in [0.5, 2) and in (-128, -32] (ex2.approx.f32 rescales below -126)


def _recorded_digests():
    doc = golden.read_exhaustive(EXHAUSTIVE)
    return {OpSpec.from_meta(e["meta"]).ptx.name: e["digests"] for e in doc["ops"].values()
            if e["meta"]["op"] == "mufu"}


def _fake_device(flip=None):
    """A Device whose run/run_range return recorded H200 output; ``flip`` = (ptx name, input pattern) whose
    result gets one bit flipped (a GPU that disagrees with the model at one input)."""
    sm90 = load_tables("sm90")
    recorded = _recorded_digests()
    by_name = {s.ptx.name: s for s in (OpSpec.mufu(fn, ftz=z) for fn in ("ex2", "rcp", "lg2") for z in (True, False))}
    table_of = {name: (spec, x) for name, (spec, x) in mufu_build.table_inputs().items()}

    def run(op, x):
        for name, (spec, xs) in table_of.items():
            if spec.ptx == op and np.array_equal(xs, x):
                return sm90[name].copy()
        raise AssertionError(f"unexpected device call {op.name}")

    def run_range(op, start, n, out):
        x = golden.exhaustive_inputs(start // CHUNK)
        assert n == CHUNK and start % CHUNK == 0
        y = np.asarray(by_name[op.name].emulator(x), np.uint32)
        assert golden.sha256_u32(y) == recorded[op.name][start // CHUNK], "not the H200's output"
        if flip is not None and flip[0] == op.name and start <= flip[1] < start + n:
            y[flip[1] - start] ^= np.uint32(1)
        out[:n] = y
        return out

    return mufu_build.Device(run, run_range, HostPipeline)


@pytest.fixture
def fake(monkeypatch):
    def install(flip=None):
        monkeypatch.setattr(mufu_build, "device", lambda: _fake_device(flip))
        monkeypatch.setattr(mufu_build, "SWEEP_STEPS", STEPS)
    return install


def test_build_check_rebuilds_identical_tables_with_no_mismatch(fake, tmp_path, capsys):
    fake()
    out = tmp_path / "mufu_sm90.npz.xz"
    assert cli.main(["mufu", "build", "--arch", "sm90", "--out", str(out), "--check"]) == 0
    text = capsys.readouterr().out
    assert text.count("identical to the sm90 table set") == 5 and "DIFFERS" not in text
    assert text.count(" 0 mismatches") == 6
    again = load_tables("sm90", out)
    for name in mufu_build.TABLE_NAMES:
        assert np.array_equal(again[name], load_tables("sm90")[name])


def test_build_check_reports_a_device_that_disagrees(fake, tmp_path, capsys):
    fake(flip=("lg2.approx.f32", 0x3F * CHUNK + 12345))
    out = tmp_path / "mufu_sm90.npz.xz"
    assert cli.main(["mufu", "build", "--arch", "sm90", "--out", str(out), "--check"]) == 3
    captured = capsys.readouterr()
    assert "lg2.approx.f32: 1 mismatches" in captured.out and "does not describe this GPU" in captured.err
    assert hex(0x3F * CHUNK + 12345) in captured.out


def test_build_without_a_gpu_says_so():
    if gpu_missing() is None:
        pytest.skip("a GPU is present")
    assert cli.main(["mufu", "build", "--arch", "sm90", "--check"]) == 1


@pytest.mark.parametrize("name", ["ex2emu.asm.fa4d3", "cvt.rn.bf16.f32"])
def test_verify_sweep_step_on_recorded_output(name):
    """``fa4num gpu verify``'s sweep (verify.sweep_unary, the function the GPU run calls) on one 2^24 step whose
    device output is the H200's (proven by its digest), then with one planted flip: 0 and 1 mismatches."""
    from fa4num.gpu.verify import exhaustive_plan, sweep_unary
    spec = next(s for s in exhaustive_plan() if s.ptx.name == name)
    doc = golden.read_exhaustive(EXHAUSTIVE)
    digests = next(e["digests"] for e in doc["ops"].values() if OpSpec.from_meta(e["meta"]) == spec)
    step = 0xBF                                     # x in (-2, -0.5]: the softmax's own range

    def run_range(op, start, n, out, flip=None):
        y = np.asarray(spec.emulator(golden.exhaustive_inputs(start // CHUNK)), np.uint32)
        assert op == spec.ptx and golden.sha256_u32(y) == digests[start // CHUNK], "not the H200's output"
        if flip is not None:
            y[flip] ^= np.uint32(1 << 20)
        out[:n] = y
        return out

    n, ex, _, _, disagree = sweep_unary(spec, HostPipeline(CHUNK), run_range=run_range, steps=[step])
    assert (n, ex, disagree) == (0, [], [])
    n, ex, _, _, disagree = sweep_unary(spec, HostPipeline(CHUNK), steps=[step],
                                        run_range=lambda *a, **k: run_range(*a, **k, flip=777))
    assert n == 1 and ex[0]["inputs"] == [hex(step * CHUNK + 777)] and not disagree


def test_capture_command_on_recorded_output(tmp_path, monkeypatch, capsys):
    """``fa4num gpu capture --groups mufu convert`` end to end on the CPU: the device answers each golden set with
    output whose chunk digests are the H200's (tests/golden; the emulators' output, refused unless it is the
    recording), and the files the command writes hold the committed sets: names, PTX, meta, digests, vectors."""
    import sys
    import types

    from fa4num import gpu
    from fa4num.gpu import capture
    golden_dir = Path(__file__).parents[1] / "golden"
    committed = {s.name: s for f in ("mufu", "convert") for s in golden.read_file(golden_dir / f"{f}.json.xz")[1]}
    plan = {s.op.name: s for s in capture.golden_plan() if s.group in ("mufu", "convert")}

    def run(op, *xs):
        out = np.asarray(plan[op.name].spec.emulator(*xs), np.uint32)
        want = committed[op.name]
        assert golden.chunk_digests(out, want.chunk) == want.digests, f"{op.name}: not the H200's output"
        return out

    monkeypatch.setattr(gpu, "gpu_missing", lambda: None)
    monkeypatch.setattr(capture, "require_gpu", lambda: None)
    monkeypatch.setitem(sys.modules, "fa4num.gpu.kernels",
                        types.SimpleNamespace(run=run, to_numpy=lambda a: a))   # the Triton launcher
    assert cli.main(["gpu", "capture", "--out", str(tmp_path), "--groups", "mufu", "convert"]) == 0
    assert sorted(capsys.readouterr().out.split()) == sorted(str(tmp_path / f"{g}.json.xz") for g in ("mufu", "convert"))
    for group in ("mufu", "convert"):
        header, sets = golden.read_file(tmp_path / f"{group}.json.xz")
        assert header["provenance"]["tool"] == "fa4num.gpu.capture"
        assert [s.name for s in sets] == [s.name for s in golden.read_file(golden_dir / f"{group}.json.xz")[1]]
        for s in sets:
            want = committed[s.name]
            assert (s.ptx, s.kind, s.meta, s.digests, s.chunk, s.stride) == \
                (want.ptx, want.kind, want.meta, want.digests, want.chunk, want.stride), s.name
            assert np.array_equal(s.vectors, want.vectors), s.name


VERIFY_RUN = Path(__file__).parents[2] / "experiments" / "results" / "gpu_verify_NVIDIA_H200_20261130T102955Z.json"


def test_verify_command_on_a_recorded_h200_run(tmp_path, monkeypatch, capsys):
    """``fa4num gpu verify`` on the CPU, its GPU run (verify.verify) answered by the H200's recorded summary: the
    recording covers every operation of today's plan, the command writes it and exits 0; a recording with a
    mismatch makes it exit 3 and name the operation."""
    import copy
    import json

    from fa4num import gpu
    from fa4num.gpu import verify
    from fa4num.gpu.capture import golden_plan
    recorded = json.loads(VERIFY_RUN.read_text())
    plan = ({s.ptx.name for s in verify.exhaustive_plan()} | {s.ptx.name for s in verify.arith_plan()}
            | {s.op.name for s in golden_plan()})
    assert {r["op"] for r in recorded["results"]} == plan, "the plan changed since the H200 run: run it again"
    monkeypatch.setattr(gpu, "gpu_missing", lambda: None)
    for summary, status in ((recorded, 0), (copy.deepcopy(recorded), 3)):
        if status:
            bad = summary["results"][0]
            bad["mismatches"], bad["examples"] = 1, [{"x": "0x3f800000", "gpu": "0x40000000", "emulator": "0x0"}]
            summary["total_mismatches"] = 1
        monkeypatch.setattr(verify, "verify", lambda summary=summary, **kw: summary)
        assert cli.main(["gpu", "verify", "--out", str(tmp_path / str(status))]) == status
        out = capsys.readouterr().out
        assert f"{len(summary['results'])} comparisons, {int(bool(status))} with mismatches" in out
        assert ("MISMATCH " + summary["results"][0]["op"] in out) == bool(status)
        written = list((tmp_path / str(status)).glob("gpu_verify_NVIDIA_H200_*.json"))
        assert len(written) == 1 and json.loads(written[0].read_text())["results"] == summary["results"]
