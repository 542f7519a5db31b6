"""fa4num.fp.dtypes, the one dtype table: every number derived from the format agrees with ml_dtypes and torch,
and every spelling resolves to its entry."""
import ml_dtypes
import numpy as np
import pytest
import torch

from fa4num.fp.dtypes import DTYPES, dtype_info


@pytest.mark.parametrize("name", list(DTYPES))
def test_table_agrees_with_ml_dtypes_and_torch(name):
    d = DTYPES[name]
    fi = ml_dtypes.finfo(d.dtype)
    assert d.max_finite == float(fi.max) == torch.finfo(d.torch_dtype).max
    assert d.min_normal_exp == int(fi.minexp) and d.mant == int(fi.nmant)
    assert d.unit_roundoff == float(fi.eps) / 2
    assert d.subnormal_half_spacing == float(fi.smallest_subnormal) / 2
    assert d.bits_dtype.itemsize * 8 == d.width == d.dtype.itemsize * 8
    assert d.has_inf == bool(np.isinf(np.array(np.inf, np.float32).astype(d.dtype)))


@pytest.mark.parametrize("name", list(DTYPES))
def test_every_spelling_resolves(name):
    d = DTYPES[name]
    for spelling in (d.name, d.short, f"torch.{d.name}", d.dtype, d.torch_dtype, np.zeros(1, d.dtype).dtype):
        assert dtype_info(spelling) is d


def test_unknown_dtype_names_the_argument():
    for bad in ("int8", np.int32, torch.int16, 3):
        with pytest.raises(ValueError, match="dtype must be one of"):
            dtype_info(bad)
