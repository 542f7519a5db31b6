"""fa4num.attention.forward_torch: the statistical mode in torch (same code on CPU and GPU) against the
bit-exact numpy emulation."""
import numpy as np
import pytest
import torch

from fa4num.attention import forward, forward_torch, inputs


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
    o, e = fast.out.float().numpy(), exact.out.astype(np.float32)
    assert np.abs(o - e).max() <= 2.0 ** -6 * np.abs(e).max()
    assert (o != e).mean() < 0.05
    fin = np.isfinite(exact.lse)
    assert np.array_equal(np.isfinite(fast.lse.numpy()), fin)
    assert np.abs(fast.lse.numpy()[fin] - exact.lse[fin]).max() < 1e-4
    for name in ("kv_blocks", "rescale_events", "rescales_done", "exp2_emulated", "exp2_mufu", "masked_by_window"):
        assert np.array_equal(getattr(fast.stats, name), getattr(exact.stats, name)), name


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
