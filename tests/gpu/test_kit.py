"""The capture kit's file and check on the CPU: a kit written by the emulator itself (EmulatorDevice) must pass
the check, and the same file with one bit flipped in any section must fail naming that item. The GPU side
(CudaDevice) runs through the same orchestration code; only the device calls differ."""
from __future__ import annotations

import io
import json

import numpy as np
import pytest

from fa4num.cli import main as cli_main
from fa4num.gpu import kit

SMALL = [
    dict(kit.kit_cases()[0], name="fwd_small", batch=1, seqlen_q=40, seqlen_k=70, heads=2, heads_kv=1,
         head_dim=32, causal=True),
    dict(kit.kit_cases()[0], name="fwd_small_split", archs=["sm100"], batch=1, seqlen_q=2, seqlen_k=700,
         heads=2, heads_kv=2, head_dim=64, causal=False, num_splits=3),
    dict(kit.kit_cases()[0], name="fwd_fp8_on_sm90", archs=None, batch=1, seqlen_q=16, seqlen_k=16, heads=1,
         heads_kv=1, head_dim=32, fp8="float8_e4m3fn"),
    dict(next(c for c in kit.kit_cases() if c["call"] == "backward"), name="bwd_small", batch=1, seqlen_q=30,
         seqlen_k=50, heads=2, heads_kv=2, head_dim=32),
]
STRIDE = (1 << 20) + 7        # 4096 sampled inputs per MUFU form


@pytest.fixture(scope="module")
def kit_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("kit") / "kit_sm90.npz"
    kit.capture_kit(path, device=kit.EmulatorDevice("sm90"), cases=SMALL, stride=STRIDE, tables=("rcp",),
                    log=None)
    return path


def _rewrite(src, dst, key, flip_index=0):
    """Copy a kit file with one bit of array ``key`` flipped."""
    with np.load(src) as z:
        arrays = {k: z[k].copy() for k in z.files}
    flat = arrays[key].reshape(-1)
    flat[flip_index] ^= flat.dtype.type(1)
    with open(dst, "wb") as f:
        np.savez_compressed(f, **arrays)
    return dst


def test_emulator_kit_passes_its_check(kit_file):
    res = kit.check_kit(kit_file)
    status = {(r.section, r.name): r.status for r in res.rows}
    assert res.ok, res.failed
    assert status[("attention", "fwd_small")] == "equal" and status[("attention", "bwd_small")] == "equal"
    assert status[("attention", "fwd_small_split")] == "skipped"          # an SM100 case on an SM90 kit
    assert status[("attention", "fwd_fp8_on_sm90")] == "not captured"     # refused by the device: recorded
    assert status[("mufu", "rcp")] == "equal" and status[("mufu", "tanh.approx.f32")] == "equal"
    assert sum(r.section == "mma" and r.status == "equal" for r in res.rows) == len(kit.mma_probes("sm90"))
    meta, _ = kit.load_kit(kit_file)
    refused = next(r for r in meta["sections"]["attention"]["cases"] if r["case"]["name"] == "fwd_fp8_on_sm90")
    assert "float8_e4m3fn" in refused["error"]


@pytest.mark.parametrize("key, section, name", [
    ("attention.fwd_small.out", "attention", "fwd_small"),
    ("attention.fwd_small.lse", "attention", "fwd_small"),
    ("attention.bwd_small.dk", "attention", "bwd_small"),
    ("mma.float16_spread", "mma", "float16_spread"),
    ("mufu.lg2.approx.f32", "mufu", "lg2.approx.f32"),
])
def test_one_flipped_bit_fails_naming_the_item(kit_file, tmp_path, key, section, name):
    bad = _rewrite(kit_file, tmp_path / "bad.npz", key, flip_index=3)
    res = kit.check_kit(bad)
    assert [(r.section, r.name) for r in res.failed] == [(section, name)]


def test_a_changed_table_entry_is_named(kit_file, tmp_path):
    from fa4num.hw import tables as hw_tables
    with np.load(kit_file) as z:
        arrays = {k: z[k].copy() for k in z.files}
    tabs, hdr = hw_tables.decode(arrays["mufu.tables"].tobytes())
    tabs["rcp"][12345] ^= np.uint32(1)
    arrays["mufu.tables"] = np.frombuffer(hw_tables.encode(tabs, hdr["provenance"]), np.uint8)
    with open(tmp_path / "bad.npz", "wb") as f:
        np.savez_compressed(f, **arrays)
    res = kit.check_kit(tmp_path / "bad.npz")
    assert [(r.section, r.name) for r in res.failed] == [("mufu", "rcp")]
    assert "first indices [12345]" in res.failed[0].detail


def test_check_kit_cli_exit_status(kit_file, tmp_path, capsys):
    assert cli_main(["gpu", "check-kit", str(kit_file), "--json", str(tmp_path / "c.json")]) == 0
    rows = json.loads((tmp_path / "c.json").read_text())["rows"]
    assert {r["name"] for r in rows} >= {"fwd_small", "bwd_small", "rcp"}
    bad = _rewrite(kit_file, tmp_path / "bad.npz", "attention.bwd_small.dq")
    capsys.readouterr()
    assert cli_main(["gpu", "check-kit", str(bad)]) == 1
    assert "attention/bwd_small" in capsys.readouterr().err


def test_sm100_kit_runs_the_split_case(tmp_path):
    path = kit.capture_kit(tmp_path / "kit_sm100.npz", device=kit.EmulatorDevice("sm100"), cases=SMALL[:2],
                           sections=("attention",), log=None)
    res = kit.check_kit(path)
    assert res.ok and {r.name: r.status for r in res.rows} == {"fwd_small": "equal", "fwd_small_split": "equal"}
    meta, _ = kit.load_kit(path)
    assert meta["family"] == "sm100" and "fa4-sm100" in res.rows[0].detail


def test_not_a_kit_file_is_refused(tmp_path):
    buf = io.BytesIO()
    np.savez(buf, meta=np.frombuffer(json.dumps({"format": "other"}).encode(), np.uint8))
    (tmp_path / "x.npz").write_bytes(buf.getvalue())
    with pytest.raises(ValueError, match="not a capture kit file"):
        kit.check_kit(tmp_path / "x.npz")


def test_capture_kit_cli_unknown_case_exits_2(tmp_path, capsys):
    assert cli_main(["gpu", "capture-kit", "--emulate", "sm90", "--out", str(tmp_path / "k.npz"),
                     "--only", "no_such_case"]) == 2
    assert "no_such_case" in capsys.readouterr().err

