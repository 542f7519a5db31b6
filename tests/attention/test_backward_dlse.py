"""The backward's ``dlse`` (FA4's gradient reaching the LSE, ``flash_bwd_preprocess.py``: D' = D - dLSE): the
fp64 reference against torch's float64 autograd (an independent oracle), the emulator against the reference, the
rows without keys, the argument checks, and the H200 capture of the real SM90 kernel
(experiments/gpu/fa4_bwd_preprocess.py --part dlse, tests/golden/attention/fa4_sm90_bwd_dlse_h200.npz)."""
from __future__ import annotations

import hashlib
import json
import pathlib

import ml_dtypes
import numpy as np
import pytest

from fa4num.attention import backward, forward
from fa4num.attention import inputs as _inputs
from _bwd_capture import assert_grads_match, capture_script
from fa4num.attention.reference import backward_fp64, backward_metrics

torch = pytest.importorskip("torch")
ROOT = pathlib.Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests/golden/attention/fa4_sm90_bwd_dlse_h200.npz"


def _case(seed=0, sq=70, sk=90, h=4, hk=2, d=64):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((1, sq, h, d)).astype(ml_dtypes.bfloat16)
    k, v = (rng.standard_normal((1, sk, hk, d)).astype(ml_dtypes.bfloat16) for _ in range(2))
    do = rng.standard_normal((1, sq, h, d)).astype(ml_dtypes.bfloat16)
    sink = (rng.standard_normal(h) * 2).astype(np.float32)
    dlse = rng.standard_normal((1, h, sq)).astype(np.float32)
    return q, k, v, do, sink, dlse


def _autograd(q, k, v, do, sink, dlse, *, causal):
    """loss = <dO, O> + <dLSE, LSE> through torch in float64: softmax over the keys and the sink logit."""
    t = [torch.tensor(np.asarray(x, np.float64), requires_grad=True) for x in (q, k, v)]
    tq, tk, tv = t
    ts = torch.tensor(sink.astype(np.float64), requires_grad=True)
    g = q.shape[2] // k.shape[2]
    kk, vv = (x.repeat_interleave(g, dim=2) for x in (tk, tv))
    s = torch.einsum("bihd,bjhd->bhij", tq, kk) / np.sqrt(q.shape[-1])
    sq, sk = q.shape[1], k.shape[1]
    if causal:      # bottom-right aligned
        mask = torch.arange(sk)[None, :] > torch.arange(sq)[:, None] + (sk - sq)
        s = s.masked_fill(mask, -torch.inf)
    full = torch.cat([s, ts.view(1, -1, 1, 1).expand(*s.shape[:3], 1)], dim=-1)
    lse = torch.logsumexp(full, dim=-1)
    p = torch.exp(s - lse[..., None])
    o = torch.einsum("bhij,bjhd->bihd", p, vv)
    loss = (o * torch.tensor(np.asarray(do, np.float64))).sum() + (lse * torch.tensor(dlse, dtype=torch.float64)).sum()
    return [x.numpy() for x in torch.autograd.grad(loss, [tq, tk, tv, ts])]


@pytest.mark.parametrize("causal", [False, True])
def test_reference_dlse_equals_autograd(causal):
    q, k, v, do, sink, dlse = _case(1)
    ref = backward_fp64(q, k, v, do, causal=causal, learnable_sink=sink, dlse=dlse)
    want = _autograd(q, k, v, do, sink, dlse, causal=causal)
    for got, exp in zip((ref.dq, ref.dk, ref.dv, ref.dsink), want):
        np.testing.assert_allclose(got, exp, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("kernel", ["fa4-sm90", "fa4-sm100"])
def test_emulated_dlse_against_reference(kernel):
    """With dlse the emulated gradients sit at the 16-bit floor of the reference that has it, and far from the one
    that does not (dq and dk carry dLSE * P * K; dv does not see it)."""
    q, k, v, do, sink, dlse = _case(2)
    fw = forward(q, k, v, causal=True, learnable_sink=sink, kernel=kernel)
    g = backward(q, k, v, fw.out, do, fw.lse, causal=True, learnable_sink=sink, kernel=kernel, dlse=dlse)
    with_dlse = backward_metrics(g, backward_fp64(q, k, v, do, causal=True, learnable_sink=sink, dlse=dlse))
    without = backward_metrics(g, backward_fp64(q, k, v, do, causal=True, learnable_sink=sink))
    for n in ("dq", "dk", "dsink"):
        assert with_dlse[n].rel_l2 < 2e-2, (n, with_dlse[n])
        assert without[n].rel_l2 > 10 * with_dlse[n].rel_l2, (n, without[n], with_dlse[n])
    plain = backward(q, k, v, fw.out, do, fw.lse, causal=True, learnable_sink=sink, kernel=kernel)
    assert np.array_equal(np.asarray(g.dv).view(np.uint16), np.asarray(plain.dv).view(np.uint16))


def test_zero_dlse_changes_no_bit():
    q, k, v, do, sink, dlse = _case(3)
    fw = forward(q, k, v, learnable_sink=sink)
    a = backward(q, k, v, fw.out, do, fw.lse, learnable_sink=sink)
    b = backward(q, k, v, fw.out, do, fw.lse, learnable_sink=sink, dlse=np.zeros_like(dlse))
    for n in ("dq", "dk", "dv"):
        assert np.array_equal(np.asarray(getattr(a, n)).view(np.uint16), np.asarray(getattr(b, n)).view(np.uint16))
    assert np.array_equal(np.asarray(a.dsink).view(np.uint32), np.asarray(b.dsink).view(np.uint32))


def test_dlse_rows_without_keys_reach_the_sink():
    """A varlen sequence with no key: O = 0, so D' = -dLSE and its rows add +sum dLSE to dsink (FA4's empty-input
    branch returns dsink = dlse.sum() for the same reason)."""
    rng = np.random.default_rng(5)
    cq, ck = np.array([0, 30, 50], np.int32), np.array([0, 40, 40], np.int32)
    q = rng.standard_normal((50, 2, 64)).astype(ml_dtypes.bfloat16)
    k, v = (rng.standard_normal((40, 2, 64)).astype(ml_dtypes.bfloat16) for _ in range(2))
    do = rng.standard_normal((50, 2, 64)).astype(ml_dtypes.bfloat16)
    sink = np.float32([0.5, -1.5])
    dlse = rng.standard_normal((2, 50)).astype(np.float32)
    kw = dict(cu_seqlens_q=cq, cu_seqlens_k=ck, learnable_sink=sink)
    fw = forward(q, k, v, **kw)
    g = backward(q, k, v, fw.out, do, fw.lse, dlse=dlse, **kw)
    ref = backward_fp64(q, k, v, do, dlse=dlse, **kw)
    # D comes from the forward's 16-bit O in the kernel and from the exact O in the reference: bf16-level apart
    np.testing.assert_allclose(g.dsink, ref.dsink, rtol=5e-3)
    first = backward(q[:30], k, v, fw.out[:30], do[:30], fw.lse[:, :30], dlse=dlse[:, :30], learnable_sink=sink,
                     cu_seqlens_q=cq[:2], cu_seqlens_k=ck[:2])
    # the empty sequence's share: its 20 rows' dLSE, summed in fp32 (the test allows the reduction's rounding)
    np.testing.assert_allclose(g.dsink - first.dsink, dlse[:, 30:].astype(np.float64).sum(axis=1), rtol=1e-4)


def test_dlse_checked():
    q, k, v, do, sink, dlse = _case(4)
    fw = forward(q, k, v)
    with pytest.raises(ValueError, match="dlse must be float32 of shape"):
        backward(q, k, v, fw.out, do, fw.lse, dlse=dlse.astype(np.float64))
    with pytest.raises(ValueError, match="dlse must be float32 of shape"):
        backward(q, k, v, fw.out, do, fw.lse, dlse=dlse[:, :, :-1])
    with pytest.raises(ValueError, match="dlse must have the LSE's shape"):
        backward_fp64(q, k, v, do, dlse=dlse[0])




def _records():
    if not GOLDEN.exists():
        pytest.skip(f"no H200 capture {GOLDEN.name} (experiments/gpu/fa4_bwd_preprocess.py --part dlse)")
    z = np.load(GOLDEN)
    return z, {r["case"]["name"]: r for r in json.loads(str(z["meta"]))["cases"]}


@pytest.mark.parametrize("name", [c["name"] for c in capture_script().DLSE_CASES])
def test_dlse_backward_matches_h200(name):
    """dq, dk, dv (SHA-256 of every bit) and dsink of the real FA4 SM90 backward with dlse, captured on the H200."""
    z, recs = _records()
    rec = recs[name]
    assert "error" not in rec, rec["error"]
    case = rec["case"]
    script = capture_script()
    a = script.case_arrays(case, _inputs)
    kw = {"learnable_sink": a["learnable_sink"]} if "learnable_sink" in a else {}
    if "cu_seqlens_q" in a:
        kw.update(cu_seqlens_q=a["cu_seqlens_q"], cu_seqlens_k=a["cu_seqlens_k"])
    fw = forward(a["q"], a["k"], a["v"], softmax_scale=case["softmax_scale"], causal=case["causal"], **kw)
    assert hashlib.sha256(np.ascontiguousarray(fw.out).view(np.uint16).tobytes()).hexdigest() == \
        rec["digests"]["out"], f"{name}: forward out"
    lse = z[f"{name}.lse"]
    dlse = script.dlse_of(case, lse.shape)
    assert hashlib.sha256(dlse.tobytes()).hexdigest() == rec["dlse_sha256"]
    g = backward(a["q"], a["k"], a["v"], fw.out, a["dout"], lse, softmax_scale=case["softmax_scale"],
                 causal=case["causal"], dlse=dlse, **kw)
    assert_grads_match(z, name, rec, g, has_sink="learnable_sink" in a)
