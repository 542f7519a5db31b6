"""fa4num.hw.MufuModel: one object per table set (or libm) carrying ex2/rcp/lg2/tanh and the PTX error bounds.
The table model is the measured tables bit for bit; the statistical (libm) model stays within the PTX ISA's
documented bounds of the instructions it stands for."""
import numpy as np
import pytest

from fa4num import hw
from fa4num.hw.model import PTX_BOUNDS


def _inputs(name, n=1 << 16, seed=0):
    rng = np.random.default_rng(seed)
    if name == "ex2":
        return rng.uniform(-120, 120, n).astype(np.float32)
    if name == "tanh":
        return rng.uniform(-9, 9, n).astype(np.float32)
    if name == "lg2":
        return rng.uniform(0.5, 2.0, n).astype(np.float32)             # where PTX states its absolute bound
    return np.exp2(rng.uniform(-100, 100, n)).astype(np.float32)     # rcp: positive normals


@pytest.mark.parametrize("name", ["ex2", "rcp", "lg2", "tanh"])
def test_table_model_is_the_measured_tables(name):
    m = hw.mufu_model("sm90")
    x = _inputs(name)
    direct = {"ex2": hw.mufu_ex2, "rcp": hw.mufu_rcp, "lg2": hw.mufu_lg2, "tanh": hw.mufu_tanh}[name]
    assert m.exact(name)
    assert np.array_equal(m.fn(name)(x).view(np.uint32), direct(x, arch="sm90").view(np.uint32))


@pytest.mark.parametrize("name", ["ex2", "rcp", "lg2", "tanh"])
def test_libm_model_is_within_the_ptx_bounds(name):
    """Against float64 references; the measured tables obey the same bounds, which is what lets a statistical
    run stand in for the instruction."""
    x = _inputs(name, seed=1)
    ref = {"ex2": np.exp2, "rcp": np.reciprocal, "lg2": np.log2, "tanh": np.tanh}[name](x.astype(np.float64))
    kind, bound = hw.mufu_model("libm").ptx_bound(name)
    assert (kind, bound) == PTX_BOUNDS[name] and not hw.mufu_model("libm").exact(name)
    for model in ("libm", "sm90"):
        y = hw.mufu_model(model).fn(name)(x).astype(np.float64)
        err = np.abs(y - ref) / (np.abs(ref) if kind == "relative" else 1.0)
        assert err.max() <= bound, (model, err.max(), bound)


def test_model_lookup_and_bad_names():
    m = hw.mufu_model("sm90")
    assert hw.mufu_model(m) is m and hw.mufu_model("sm90") is m and m.ex2_compact is not None
    assert hw.mufu_model("libm").ex2_compact is None
    for bad in ("sm00", 90, None):
        with pytest.raises(ValueError, match="arch must be 'libm' or one of"):
            hw.mufu_model(bad)
    with pytest.raises(ValueError, match="name must be one of"):
        m.exact("sin")
