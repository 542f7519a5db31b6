"""fa4num.hw MUFU models: API, the accuracy PTX documents, ftz vs non-ftz, and exact table storage.

Bit-exactness against the H200 is checked in tests/top/test_golden.py (golden sets and exhaustive-chunk digests)."""
import numpy as np
import pytest

from fa4num import fp, golden
from fa4num.hw import available_archs, mufu_ex2, mufu_lg2, mufu_rcp, table_provenance, tables
from fa4num.hw.mufu import TABLE_NAMES

FNS = {"ex2": mufu_ex2, "rcp": mufu_rcp, "lg2": mufu_lg2}


def _unary():
    return golden.inputs("unary")[0].view(np.float32)


def _normal(y, r):
    return np.isfinite(y) & np.isfinite(r) & (np.abs(r) >= np.float32(2.0 ** -126))


def test_ex2_within_ptx_bound_of_2_ulp():
    x = _unary()
    with np.errstate(all="ignore"):
        y, r = mufu_ex2(x), np.asarray(fp.exp2_cr(x), np.float32)
    m = _normal(y, r)
    assert m.sum() > 10 ** 5
    assert np.max(np.abs(fp.ulp_distance(y[m], r[m]))) <= 2


def test_rcp_within_ptx_bound_of_1_ulp():
    x = _unary()
    with np.errstate(all="ignore"):
        y, r = mufu_rcp(x), np.asarray(fp.rcp_cr(x), np.float32)
    m = _normal(y, r)
    assert np.max(np.abs(fp.ulp_distance(y[m], r[m]))) <= 1


def test_lg2_within_ptx_bounds():
    # PTX: 2^-22 absolute error on (0.5, 2), 2^-22 relative elsewhere
    x = _unary()
    x = x[np.isfinite(x) & (x >= np.float32(2.0 ** -126))]
    y = mufu_lg2(x).astype(np.float64)
    exact = np.log2(x.astype(np.float64))
    near1 = (x > 0.5) & (x < 2)
    assert np.max(np.abs(y[near1] - exact[near1])) <= 2.0 ** -22
    assert np.max(np.abs(y[~near1] / exact[~near1] - 1)) <= 2.0 ** -22


def test_lg2_negates_in_ones_complement():
    # the structure the model relies on: lg2(2^-k) is -(k - 2^-23) truncated, not -k
    for k in (1, 2, 20, 126):
        x = np.array([2.0 ** -k], np.float32)
        expect = np.float32(-(k - 2.0 ** -23)) if k <= 2 else -np.nextafter(np.float32(k), np.float32(0))
        assert mufu_lg2(x)[0] == expect


@pytest.mark.parametrize("fn", sorted(FNS))
def test_ftz_and_non_ftz_differ_only_at_the_subnormal_ends(fn):
    x = _unary()
    with np.errstate(all="ignore"):
        a, b = FNS[fn](x, ftz=True), FNS[fn](x, ftz=False)
    differ = a.view(np.uint32) != b.view(np.uint32)
    tiny_in = np.abs(x) < np.float32(2.0 ** -126)
    tiny_out = (np.abs(b) < np.float32(2.0 ** -126)) | (np.abs(a) < np.float32(2.0 ** -126))
    assert differ.any()
    assert not (differ & ~tiny_in & ~tiny_out).any()


@pytest.mark.parametrize("fn", sorted(FNS))
def test_special_values(fn):
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan], np.float32)
    y = FNS[fn](x)
    with np.errstate(all="ignore"):
        ref = {"ex2": np.exp2, "rcp": lambda v: np.float32(1) / v, "lg2": np.log2}[fn](x)
    assert np.array_equal(y, ref.astype(np.float32), equal_nan=True)
    nan_bits = y.view(np.uint32)[np.isnan(y)]
    assert np.all(nan_bits == 0x7FFFFFFF)             # NVIDIA's canonical NaN


def test_shapes_and_torch_tensors():
    torch = pytest.importorskip("torch")
    x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(2, 3, 4)
    for f in FNS.values():
        y = f(x)
        assert y.shape == x.shape and y.dtype == np.float32
        t = f(torch.from_numpy(x))
        assert isinstance(t, torch.Tensor) and np.array_equal(t.numpy().view(np.uint32), y.view(np.uint32))


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="float32"):
        mufu_ex2(np.ones(3))
    with pytest.raises(ValueError, match="arch"):
        mufu_rcp(np.ones(3, np.float32), arch="sm_nope")
    with pytest.raises(ValueError, match="ftz"):
        mufu_lg2(np.ones(3, np.float32), ftz="yes")



def test_inputs_follow_fa4_emulateds_rule():
    """A list or Python number exact in fp32 is taken, as fa4num.ex2.fa4_emulated takes it (mufu_ex2([-1.0]) said
    "x must be a float32 array, got dtype float64"); a string, a float64 array or an inexact number is refused."""
    x = np.float32([-1.0, 0.5])
    assert np.array_equal(mufu_ex2([-1.0, 0.5]).view(np.uint32), mufu_ex2(x).view(np.uint32))
    assert mufu_rcp(2.0) == mufu_rcp(np.float32(2.0))
    for bad, match in (("1.0", "x must be a float32 array"), (np.ones(2), "x must have dtype float32, got float64"),
                       ([0.1], "not exactly representable in float32")):
        with pytest.raises(ValueError, match=match):
            mufu_ex2(bad)


def test_tables_are_stored_exactly_with_provenance():
    assert "sm90" in available_archs()
    tabs, meta = tables.load("sm90")
    assert set(TABLE_NAMES) <= set(tabs)
    assert all(t.size == 1 << 23 and t.dtype == np.uint32 for t in tabs.values())
    again, _ = tables.decode(tables.encode(tabs, meta["provenance"]))
    assert all(np.array_equal(again[k], tabs[k]) for k in tabs)
    prov = table_provenance("sm90")
    assert prov["gpu"]["capability"] == "sm_90" and prov["date"]
    assert tables.table_path("sm90").stat().st_size < 4 * 2 ** 20


def test_tables_are_the_instruction_outputs_they_claim():
    # the tables are the model's own outputs on the binades that define them
    tabs, _ = tables.load("sm90")
    g = np.arange(1 << 23, dtype=np.uint32)
    frac = (g.astype(np.float64) * 2.0 ** -23).astype(np.float32)
    assert np.array_equal(mufu_ex2(frac).view(np.uint32), tabs["ex2_pos"])
    assert np.array_equal(mufu_ex2(-frac).view(np.uint32), tabs["ex2_neg"])
    assert np.array_equal(mufu_rcp((g | np.uint32(0x3F800000)).view(np.float32)).view(np.uint32), tabs["rcp"])
    assert np.array_equal(mufu_lg2((g | np.uint32(0x3F000000)).view(np.float32)).view(np.uint32), tabs["lg2_e-1"])
