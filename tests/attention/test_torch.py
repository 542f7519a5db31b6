"""fa4num.attention.forward_torch: the statistical mode in torch (same code on CPU and GPU) against the
bit-exact numpy emulation."""
import numpy as np
import pytest
import torch

from fa4num.attention import forward, forward_torch, inputs

from _torch_tracking import assert_torch_tracks


def _tensors(spec):
    q, k, v = inputs.make_inputs(spec)
    if spec.dtype == "bfloat16":
        return (q, k, v), [torch.from_numpy(x.view(np.int16)).view(torch.bfloat16) for x in (q, k, v)]
    return (q, k, v), [torch.from_numpy(x) for x in (q, k, v)]


@pytest.mark.parametrize("kernel,d,causal,dtype", [("fa4-sm90", 128, True, "bfloat16"),
                                                   ("fa4-sm90", 64, False, "float16"),
                                                   ("fa4-sm100", 128, False, "bfloat16")])
def test_torch_statistical_mode_tracks_bit_exact(kernel, d, causal, dtype):
    spec = inputs.CaseSpec("t", "normal", 2, 200, 330, 4, 2, d, causal, dtype=dtype, q_mult=2.0, seed=4)
    arrays, tensors = _tensors(spec)
    exact = forward(*arrays, causal=causal, kernel=kernel)
    fast = forward_torch(*tensors, causal=causal, kernel=kernel)
    assert_torch_tracks(fast, exact)


def test_torch_backend_rejects_bad_input():
    spec = inputs.CaseSpec("t", "normal", 1, 16, 16, 2, 2, 64, False)
    _, (q, k, v) = _tensors(spec)
    with pytest.raises(ValueError, match="dtype"):
        forward_torch(q.float(), k.float(), v.float())
    with pytest.raises(ValueError, match="multiple of k/v heads"):
        forward_torch(torch.cat([q, q[:, :, :1]], dim=2), k, v)
    q2 = q.clone()
    q2[0, 0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="q contains NaN"):
        forward_torch(q2, k, v)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_torch_backend_same_on_gpu_and_cpu():
    spec = inputs.CaseSpec("t", "normal", 1, 256, 256, 2, 2, 128, True, seed=1)
    _, tensors = _tensors(spec)
    cpu = forward_torch(*tensors, causal=True)
    gpu = forward_torch(*(t.cuda() for t in tensors), causal=True)
    assert (cpu.out.float() - gpu.out.float().cpu()).abs().max() <= 2.0 ** -7


@pytest.mark.parametrize("kernel,causal,sq,sk,h,hk,tile", [("fa4-sm100", True, 300, 700, 4, 2, 1 << 16),
                                                          ("fa4-sm100", False, 257, 513, 2, 2, 1 << 17),
                                                          ("fa4-sm90", True, 400, 400, 2, 1, 1 << 16)])
def test_torch_tiles_agree_with_one_tile(kernel, causal, sq, sk, h, hk, tile):
    """Small tiles (several query tiles, one or a few KV blocks per tile) give the counters of one big tile
    exactly and the same output up to the rounding of the rescale products."""
    spec = inputs.CaseSpec("t", "normal", 1, sq, sk, h, hk, 128, causal, q_mult=3.0, seed=9)
    _, tensors = _tensors(spec)
    one = forward_torch(*tensors, causal=causal, kernel=kernel)
    tiled = forward_torch(*tensors, causal=causal, kernel=kernel, max_tile_elems=tile)
    for name in ("kv_blocks", "rescale_events", "rescales_done", "p_saturated", "masked_by_window"):
        assert np.array_equal(getattr(tiled.stats, name), getattr(one.stats, name)), name
    assert np.allclose(tiled.stats.max_lag, one.stats.max_lag)
    assert one.stats.rescales_done.sum() > 0
    o1, o2 = one.out.float(), tiled.out.float()
    assert (o1 - o2).abs().max() <= 2.0 ** -7 * o1.abs().max()
    assert (o1 != o2).float().mean() < 0.01
    assert torch.allclose(one.lse, tiled.lse, atol=1e-5, rtol=0)


def test_takes_the_ml_dtypes_arrays_forward_takes():
    """forward takes ml_dtypes bf16 numpy arrays; forward_torch takes the same arrays (their bits, reinterpreted)
    and gives what it gives for the equal torch tensors."""
    import ml_dtypes
    from fa4num.attention import forward_torch
    a = np.random.default_rng(3).standard_normal((1, 40, 2, 64)).astype(ml_dtypes.bfloat16)
    t = torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
    got, want = forward_torch(a, a, a, causal=True), forward_torch(t, t, t, causal=True)
    assert got.out.dtype == torch.bfloat16 and torch.equal(got.out, want.out) and torch.equal(got.lse, want.lse)
