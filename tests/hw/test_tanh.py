"""fa4num.hw.tanh: the compact binade description of a MUFU table (identity / constant / table over the top
mantissa bits) and its rebuild, checked on a synthetic 12-bit-mantissa format with a known structure; the
GPU script's describe/rebuild pair is the same code."""
import importlib.util
import pathlib

import numpy as np
import pytest

from fa4num.hw import tanh

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("mufu_tanh_script", ROOT / "experiments/gpu/mufu_tanh.py")
script = importlib.util.module_from_spec(spec)
spec.loader.exec_module(script)

MB, EB = 6, 4   # synthetic format: sign, 4 exponent bits, 6 mantissa bits


def _fake(bits):
    """identity for small exponents, a table ignoring 2 low bits in the middle, constant at the top; odd."""
    s = (bits >> (MB + EB)) & 1
    e = (bits >> MB) & ((1 << EB) - 1)
    m = bits & ((1 << MB) - 1)
    mag = np.where(e < 5, bits & ~np.uint32(1 << (MB + EB)),
                   np.where(e >= 12, np.uint32(777), (e * 1000 + (m >> 2) * 7).astype(np.uint32)))
    return (mag | (s << 20)).astype(np.uint32)


def test_describe_and_rebuild_round_trip():
    desc, stats = script.describe_all(lambda start, n: _fake(np.arange(start, start + n, dtype=np.uint32)),
                                      mbits=MB, ebits=EB)
    everything = np.arange(1 << (1 + MB + EB), dtype=np.uint32)
    assert np.array_equal(script.rebuild(desc, everything, mbits=MB, ebits=EB), _fake(everything))
    kinds = {(r["sign"], r["exp"]): (r["kind"], r["drop"]) for r in stats}
    assert kinds[(0, 3)][0] == "identity"
    assert kinds[(0, 7)] == ("table", 2) and kinds[(0, 13)][0] == "const"
    # a change of one output bit is caught by the rebuild
    bad = _fake(everything)
    bad[100] ^= 1
    assert not np.array_equal(script.rebuild(desc, everything, mbits=MB, ebits=EB), bad)


def test_describe_binade_finds_the_largest_drop():
    out = np.repeat(np.arange(16, dtype=np.uint32), 8)      # constant on groups of 8 -> drop 3
    k, d, c, t = tanh.describe_binade(out, np.arange(128, dtype=np.uint32) + 5, mbits=7)
    assert (k, d) == (tanh.KINDS["table"], 3) and np.array_equal(t, np.arange(16))


def test_shipped_table_missing_table_and_dtype():
    """The sm90 table ships (tanh odd, saturating, near libm's tanh); an arch without a table and a
    non-float32 input are refused by name, never silently rounded or replaced."""
    assert tanh.tanh_table_available("sm90")
    x = np.float32([0.0, 0.5, -0.5, 20.0])
    y = tanh.mufu_tanh(x)
    assert y.dtype == np.float32 and y[0] == 0 and y[1] == -y[2] and abs(y[1] - np.tanh(0.5)) < 1e-3 and y[3] == 1
    assert not tanh.tanh_table_available("sm999")
    with pytest.raises(ValueError, match="no measured tanh"):
        tanh.mufu_tanh(x, arch="sm999")
    with pytest.raises(ValueError, match="x must have dtype float32, got float64"):
        tanh.mufu_tanh(x.astype(np.float64))

def test_tanh_table_stored_like_the_other_mufu_tables(tmp_path):
    """The shipped description is a fa4num.hw.tables file; a GPU capture (raw table or first differences)
    converts into the same file bit for bit, and a capture whose self-check failed is refused."""
    import json

    from fa4num.hw import tables
    t = tanh.tanh_table("sm90")
    assert tables.tanh_table_path("sm90").exists() and "tanh_sm90" not in tables.available_archs()
    meta = json.dumps({"provenance": {"gpu": "test"}, "binades": []})
    fields = {k: t[k] for k in ("kind", "drop", "const", "offset")}
    for form in ({"table": t["table"]}, {"table_diff": np.diff(t["table"].astype(np.int64), prepend=0)}):
        cap = tmp_path / "capture.npz"
        np.savez(cap, mismatches=np.int64(0), meta=meta, **fields, **form)
        out = tanh.save_tanh_table("sm90", cap, path=tmp_path / "tanh_sm90.npz.xz")
        got, prov = tables.decode(out.read_bytes())
        assert np.array_equal(got["tanh_table"], t["table"]) and prov["provenance"]["gpu"] == "test"
        assert all(np.array_equal(got[f"tanh_{k}"].reshape(2, 256), v) for k, v in fields.items())
    np.savez(cap, mismatches=np.int64(3), meta=meta, **fields, table=t["table"])
    with pytest.raises(ValueError, match="3 mismatches"):
        tanh.save_tanh_table("sm90", cap, path=tmp_path / "x.npz.xz")
