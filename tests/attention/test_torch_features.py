"""forward_torch with FA4's feature options (softcap, windows, learnable sinks, varlen, paged KV, pack-GQA,
head_dim_v != head_dim) against ``forward(mode="statistical")`` and the fp64 reference (issue 10, deliver 2)."""
import ml_dtypes
import numpy as np
import pytest
import torch

from fa4num.attention import forward, forward_torch
from fa4num.attention.reference import attention_fp64

from _torch_tracking import COUNTERS, assert_torch_tracks


def _arrays(shapes, seed, q_mult=2.0):
    rng = np.random.default_rng(seed)
    out = [(rng.standard_normal(s) * (q_mult if i == 0 else 1.0)).astype(ml_dtypes.bfloat16)
           for i, s in enumerate(shapes)]
    return out, [torch.from_numpy(a.view(np.int16)).view(torch.bfloat16) for a in out]


CASES = {
    "softcap": dict(kernel="fa4-sm90", causal=True, softcap=5.0),
    "window-causal-sm100": dict(kernel="fa4-sm100", causal=True, window_size=(70, None)),
    "window-symmetric": dict(kernel="fa4-sm90", window_size=(50, 50)),
    "sink-sm90": dict(kernel="fa4-sm90", causal=True, learnable_sink=np.float32([0.5, -1.0, 2.0, 4.0])),
    "sink-window-sm100": dict(kernel="fa4-sm100", window_size=(10, 0), learnable_sink=np.float32([1, 2, 3, 4])),
    "pack-gqa-off": dict(kernel="fa4-sm90", causal=True, pack_gqa=False),
    "softcap-window-sm100": dict(kernel="fa4-sm100", softcap=8.0, window_size=(100, 20)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_torch_features_track_statistical_mode(name):
    opts = CASES[name]
    arrays, tensors = _arrays([(2, 190, 4, 64), (2, 260, 2, 64), (2, 260, 2, 64)], seed=len(name))
    exact = forward(*arrays, mode="statistical", **opts)
    fast = forward_torch(*tensors, **opts)
    assert_torch_tracks(fast, exact)
    assert np.allclose(fast.stats.sink_share, exact.stats.sink_share, rtol=1e-4, atol=1e-6)
    ref_out, ref_lse = attention_fp64(*arrays, **opts)
    o, fin = fast.out.float().numpy(), np.isfinite(exact.lse)
    assert np.abs(o - ref_out).max() <= 2.0 ** -7 * np.abs(ref_out).max()
    assert np.abs(fast.lse.numpy()[fin] - ref_lse[fin]).max() < 1e-4


@pytest.mark.parametrize("kernel", ["fa4-sm90", "fa4-sm100"])
def test_torch_varlen_and_paged(kernel):
    cu_q = np.array([0, 70, 70, 200], np.int32)          # an empty sequence in the middle
    cu_k = np.array([0, 90, 150, 310], np.int32)
    arrays, tensors = _arrays([(200, 4, 64), (310, 2, 64), (310, 2, 128)], seed=3)
    opts = dict(kernel=kernel, causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                learnable_sink=np.float32([0.0, 1.0, -2.0, 3.0]))
    exact = forward(*arrays, mode="statistical", **opts)
    fast = forward_torch(*tensors, **opts)
    assert fast.out.shape == (200, 4, 128) and fast.lse.shape == (4, 200)
    o, e = fast.out.float().numpy(), exact.out.astype(np.float32)
    assert np.abs(o - e).max() <= 2.0 ** -6 * np.abs(e).max()
    assert np.abs(fast.lse.numpy() - exact.lse).max() < 1e-4
    for c in COUNTERS:
        assert np.array_equal(getattr(fast.stats, c), getattr(exact.stats, c)), c
    # paged KV: two sequences of 3 pages of 64 keys; numerically the contiguous keys
    arrays, tensors = _arrays([(2, 150, 4, 64), (8, 64, 2, 64), (8, 64, 2, 64)], seed=5)
    pt = np.array([[5, 0, 2], [1, 7, 3]], np.int32)
    paged = forward_torch(*tensors, kernel=kernel, causal=True, page_table=pt)
    kc, vc = (t[torch.from_numpy(pt).long()].reshape(2, 192, 2, 64) for t in tensors[1:])
    dense = forward_torch(tensors[0], kc, vc, kernel=kernel, causal=True)
    assert torch.equal(paged.out, dense.out) and torch.equal(paged.lse, dense.lse)


def test_torch_pack_gqa_changes_only_visited_blocks():
    arrays, tensors = _arrays([(1, 300, 4, 64), (1, 300, 1, 64), (1, 300, 1, 64)], seed=7)
    on = forward_torch(*tensors, causal=True, pack_gqa=True)
    off = forward_torch(*tensors, causal=True, pack_gqa=False)
    assert torch.equal(on.out, off.out) and torch.equal(on.lse, off.lse)
    assert not np.array_equal(on.stats.kv_blocks, off.stats.kv_blocks)
    for pk in (True, False):
        assert np.array_equal(forward_torch(*tensors, causal=True, pack_gqa=pk).stats.kv_blocks,
                              forward(*arrays, causal=True, pack_gqa=pk, mode="statistical").stats.kv_blocks)


def test_torch_shares_forwards_argument_checks():
    _, (q, k, v) = _arrays([(1, 32, 2, 64)] * 3, seed=1)
    for kw, match in ((dict(softcap=-1.0), "softcap"), (dict(window_size=(-1, 5)), "window_size"),
                      (dict(learnable_sink=np.zeros(3, np.float32)), "learnable_sink"),
                      (dict(cu_seqlens_q=np.array([0, 40, 32])), "cu_seqlens_q"),
                      (dict(kernel="fa4-sm100", num_splits=2), "num_splits"), (dict(tile_n=100), "tile_n")):
        with pytest.raises(ValueError, match=match):
            forward_torch(q, k, v, **kw)
    with pytest.raises(TypeError, match="pack_gqa"):      # a wrong type, not coerced
        forward_torch(q, k, v, pack_gqa=1)


TRITON_CASES = [dict(kernel="fa4-sm90", causal=True), dict(kernel="fa4-sm100", causal=True),
                dict(kernel="fa4-sm100", softcap=5.0, learnable_sink=np.float32([0.5, 1, 2, 3])),
                dict(kernel="fa4-sm90", window_size=(50, 20), learnable_sink=np.float32([0, 1, -1, 2]))]


def _triton_vs_torch(device):
    """The Triton kernel against forward_torch's torch code: every counter equal, outputs a few bf16 ulps."""
    g = torch.Generator().manual_seed(0)
    for opts in TRITON_CASES:
        q = (torch.randn((1, 200, 4, 64), generator=g) * 3).to(torch.bfloat16).to(device)
        k, v = (torch.randn((1, 330, 2, 64), generator=g).to(torch.bfloat16).to(device) for _ in range(2))
        a = forward_torch(q, k, v, backend="torch", **opts)
        b = forward_torch(q, k, v, backend="triton", **opts)
        oa, ob = a.out.float().cpu(), b.out.float().cpu()
        assert (oa - ob).abs().max() <= 2.0 ** -6 * oa.abs().max(), opts
        assert (oa != ob).float().mean() < 0.01, opts
        assert (a.lse - b.lse).abs().max() < 1e-4, opts
        for c in COUNTERS + ("p_saturated",):
            assert np.array_equal(getattr(a.stats, c), getattr(b.stats, c)), (opts, c)
        assert np.allclose(a.stats.max_lag, b.stats.max_lag, atol=1e-4)
        assert np.allclose(a.stats.sink_share, b.stats.sink_share, rtol=1e-4, atol=1e-6)


def _interpreter_compat():
    """Triton 3.6's interpreter turns a loop bound into a Python int with int() of a 1-element array, which
    numpy >= 2.5 refuses; take the element instead (the kernel's right-to-left loop has runtime bounds)."""
    import triton.runtime.interpreter as interp
    original = interp._patch_lang_tensor

    def patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).reshape(-1)[0]))
    interp._patch_lang_tensor = patched


def test_triton_kernel_logic_on_cpu_interpreter():
    """The Triton kernel's steps run on the CPU through Triton's interpreter (TRITON_INTERPRET=1, set before the
    kernel is first built, so in a fresh process)."""
    pytest.importorskip("triton")
    import subprocess
    import sys
    code = ("import torch, tests.attention.test_torch_features as t; t._interpreter_compat(); "
            "t._triton_vs_torch(torch.device('cpu')); print('ok')")
    import os
    import pathlib
    root = pathlib.Path(__file__).resolve().parents[2]
    # tests/ too, as pytest puts it on sys.path: the module imports its helper _torch_tracking from there
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join([str(root), str(root / "tests")] + [
        p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    run = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True)
    assert run.returncode == 0 and "ok" in run.stdout, run.stderr[-3000:]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_triton_kernel_matches_torch_backend_on_gpu():
    pytest.importorskip("triton")
    _triton_vs_torch(torch.device("cuda"))


def test_torch_fp8_descales():
    """SM100 fp8 with per-(batch, kv head) descales, one run per kv head, against forward's statistical mode."""
    rng = np.random.default_rng(11)
    shapes = [(2, 150, 4, 64), (2, 200, 2, 64), (2, 200, 2, 64)]
    arrays = [(rng.standard_normal(sh) * 4).astype(ml_dtypes.float8_e4m3fn) for sh in shapes]
    tensors = [torch.from_numpy(a.view(np.uint8)).view(torch.float8_e4m3fn) for a in arrays]
    opts = dict(kernel="fa4-sm100", causal=True, q_descale=rng.uniform(0.5, 2, (2, 2)).astype(np.float32),
                k_descale=rng.uniform(0.5, 2, (2, 2)).astype(np.float32),
                v_descale=rng.uniform(0.5, 2, (2, 2)).astype(np.float32))
    exact = forward(*arrays, mode="statistical", **opts)
    fast = forward_torch(*tensors, **opts)
    assert fast.out.dtype == torch.bfloat16
    o, e = fast.out.float().numpy(), exact.out.astype(np.float32)
    assert np.abs(o - e).max() <= 2.0 ** -6 * np.abs(e).max()
    assert np.abs(fast.lse.numpy() - exact.lse).max() < 1e-4
    for c in COUNTERS + ("p_saturated",):
        assert np.array_equal(getattr(fast.stats, c), getattr(exact.stats, c)), c
    plain = forward_torch(*tensors, kernel="fa4-sm100", causal=True)
    assert not torch.equal(plain.out, fast.out)
