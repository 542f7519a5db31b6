"""fa4num.hw.mma against MMA-Sim (PyPI ``mmasim``), an independent bit-accurate model of Hopper wgmma and
Blackwell tcgen05 (docs/notes/h200-measurements.md section 4: MMA-Sim's Hopper model matched the H200 on every bit)."""
import ml_dtypes
import numpy as np
import pytest
import torch

from fa4num.hw.mma import chunk_elements, mma_chain

mmasim = pytest.importorskip("mmasim")
from mmasim.nv_ptx import TCGen05MMA, WGMMA  # noqa: E402

TORCH = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float8_e4m3fn": torch.float8_e4m3fn,
         "float8_e5m2": torch.float8_e5m2}
PTX = {"bfloat16": "bf16", "float16": "f16", "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}
NP = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
      "float8_e5m2": ml_dtypes.float8_e5m2}


def _operands(rng, dt, m, n, k, spread, zeros=0.0, tiny=False):
    """a (m, k), b (n, k) in dtype dt with exponents spread over +-spread binades, c (m, n) fp32."""
    def draw(shape, s):
        x = rng.standard_normal(shape) * 2.0 ** rng.integers(-s, s + 1, shape)
        if tiny:   # products far below 2^-133, where a zero term's exponent decides the alignment
            x *= 2.0 ** -70
        return x.astype(np.float32)
    a = draw((m, k), spread).astype(NP[dt])
    b = draw((n, k), spread).astype(NP[dt])
    a[rng.random(a.shape) < zeros] = 0
    c = np.zeros((m, n), np.float32) if tiny else draw((m, n), spread + 4)
    return a, b, c


def _mmasim_chain(op, a, b, c, dt, chunk):
    A = torch.from_numpy(a.astype(np.float32)).to(TORCH[dt])
    B = torch.from_numpy(b.astype(np.float32)).to(TORCH[dt]).T    # (K, N)
    D = torch.from_numpy(c)
    for k0 in range(0, a.shape[1], chunk):
        D = op(A[:, k0:k0 + chunk], B[k0:k0 + chunk, :], D)
    return D.numpy()


@pytest.mark.parametrize("dt,spread", [("bfloat16", 12), ("bfloat16", 40), ("float16", 4)])
@pytest.mark.parametrize("zeros", [0.0, 0.4])
def test_wgmma_chain_matches_mmasim_hopper(dt, spread, zeros):
    rng = np.random.default_rng(spread * 7 + int(zeros * 10))
    op = WGMMA("Hopper", f"m64n32k16.f32.{PTX[dt]}.{PTX[dt]}")
    a, b, c = _operands(rng, dt, 64, 32, 128, spread, zeros)
    mine = mma_chain(a, b, c, model="wgmma", arch="sm90")
    ref = _mmasim_chain(op, a, b, c, dt, chunk_elements(a.dtype, "sm90"))
    assert (mine.view(np.uint32) != ref.view(np.uint32)).sum() == 0


def test_wgmma_zero_accumulator_and_tiny_products_match_mmasim():
    rng = np.random.default_rng(5)
    op = WGMMA("Hopper", "m64n16k16.f32.bf16.bf16")
    a, b, c = _operands(rng, "bfloat16", 64, 16, 64, 3, zeros=0.2, tiny=True)
    mine = mma_chain(a, b, None, model="wgmma")
    ref = _mmasim_chain(op, a, b, c, "bfloat16", 16)
    assert (mine.view(np.uint32) != ref.view(np.uint32)).sum() == 0
    assert (mine != 0).any()


@pytest.mark.parametrize("dt", ["bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_tcgen05_chain_matches_mmasim_blackwell(dt):
    rng = np.random.default_rng(11)
    k = 16 if dt == "bfloat16" else 32
    kind = "f16" if dt == "bfloat16" else "f8f6f4"
    op = TCGen05MMA("Blackwell", f"m64n16k{k}.kind::{kind}.f32.{PTX[dt]}.{PTX[dt]}")
    a, b, c = _operands(rng, dt, 64, 16, 4 * k, 3 if dt.startswith("float8") else 12)
    mine = mma_chain(a, b, c, model="wgmma", arch="sm100")
    ref = _mmasim_chain(op, a, b, c, dt, chunk_elements(a.dtype, "sm100"))
    assert (mine.view(np.uint32) != ref.view(np.uint32)).sum() == 0


def test_truncation_differs_from_exact_sum():
    """The alignment-and-truncate model is not an exactly rounded sum: on wide exponent spreads they differ,
    and the exact model equals float64 dot products rounded once where float64 is exact."""
    rng = np.random.default_rng(2)
    a, b, c = _operands(rng, "bfloat16", 32, 32, 64, 12)
    w = mma_chain(a, b, c, model="wgmma")
    e = mma_chain(a, b, c, model="exact", chunk=64)
    assert (w != e).mean() > 0.1
    a, b, _ = _operands(rng, "bfloat16", 32, 32, 64, 1)
    ref = (a.astype(np.float64) @ b.astype(np.float64).T).astype(np.float32)
    assert np.array_equal(mma_chain(a, b, model="exact", chunk=64), ref)


def test_bad_arguments_raise():
    a = np.zeros((4, 16), ml_dtypes.bfloat16)
    with pytest.raises(ValueError, match="model"):
        mma_chain(a, a, model="tf32")
    with pytest.raises(ValueError, match="a and b"):
        mma_chain(a, a[:, :8])
    with pytest.raises(ValueError, match="dtype"):
        mma_chain(a.astype(np.float64), a.astype(np.float64))
    with pytest.raises(ValueError, match="c must have shape"):
        mma_chain(a, a, np.zeros((3, 4), np.float32))
