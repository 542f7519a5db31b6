"""attention_backward_error_bound: 0 violations on the H200 backward goldens (the real kernel's gradients, checked
by digest) and on the emulator (SM100, every order of the dQ atomics, perturbed out/LSE, the statistical mode),
finite where nothing overflows, +inf where the kernel's arithmetic breaks down, and the backward's refusals."""
from __future__ import annotations

import pathlib

import ml_dtypes
import numpy as np
import pytest

from fa4num.attention import backward, forward
from fa4num.attention.reference import backward_fp64
from fa4num.bounds.backward import attention_backward_error_bound
from fa4num.bounds.validate_backward import BACKWARD_GOLDEN_FILES, backward_golden_checks, check_backward

BF = ml_dtypes.bfloat16
GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "golden/attention"


@pytest.mark.parametrize("tag", sorted(BACKWARD_GOLDEN_FILES))
def test_h200_backward_goldens(tag):
    path = GOLDEN / BACKWARD_GOLDEN_FILES[tag]
    if not path.exists():
        pytest.skip(f"no golden {path.name}")
    checks = backward_golden_checks(GOLDEN, tags=[tag])
    assert checks
    for c in checks:
        assert c.source == "h200" and c.bits_match, c.name       # the GPU's own gradients are compared
        assert c.total_violations == 0, (c.name, c.violations)
        assert not any(c.unbounded.values()), (c.name, c.unbounded)
        assert all(c.max_observed[n] > 0 for n in ("dq", "dk", "dv")), c.name
        assert c.tightness <= 10, (c.name, c.tightness)


def test_sm100_emulator_on_golden_inputs():
    path = GOLDEN / BACKWARD_GOLDEN_FILES["dev"]
    if not path.exists():
        pytest.skip(f"no golden {path.name}")
    checks = backward_golden_checks(GOLDEN, tags=["dev"], kernel="fa4-sm100")
    assert checks and all(c.kernel == "fa4-sm100" for c in checks)
    for c in checks:
        assert c.total_violations == 0, (c.name, c.violations)
        assert not any(c.unbounded.values()), c.name


def _x(rng, *shape, m=1.0, dt=BF):
    return (rng.standard_normal(shape) * m).astype(dt)


def _violations(q, k, v, do, out, lse, bwd_kw=None, **kw):
    g = backward(q, k, v, out, do, lse, **kw, **(bwd_kw or {}))
    b = attention_backward_error_bound(q, k, v, out, do, lse, **kw)
    r = backward_fp64(q, k, v, do, **{n: x for n, x in kw.items() if n not in ("kernel", "mode")})
    res = {}
    for n in ("dq", "dk", "dv"):
        err = np.abs(np.asarray(getattr(g, n)).astype(np.float64) - getattr(r, n))
        res[n] = (int((err > getattr(b, n)).sum()), int(np.isinf(getattr(b, n)).sum()))
    return res, b


@pytest.mark.parametrize("kw", [dict(), dict(kernel="fa4-sm100"), dict(causal=True, kernel="fa4-sm100")],
                         ids=["sm90", "sm100", "sm100-causal"])
def test_every_order_of_the_atomics(kw):
    """deterministic=False: the bound holds for every order of the dQ adds (all permutations of the KV blocks) and,
    with GQA, of the dK/dV head adds."""
    rng = np.random.default_rng(7)
    q, k, v, do = _x(rng, 1, 64, 4, 64), _x(rng, 1, 300, 2, 64), _x(rng, 1, 300, 2, 64), _x(rng, 1, 64, 4, 64)
    fw = forward(q, k, v, **kw)
    nblk = -(-300 // 128)
    import itertools
    for perm in itertools.permutations(range(nblk)):
        res, _ = _violations(q, k, v, do, fw.out, fw.lse, bwd_kw=dict(dq_order=perm, deterministic=False), **kw)
        assert all(vi == 0 and inf == 0 for vi, inf in res.values()), (perm, res)


@pytest.mark.parametrize("label", ["lse", "out", "statistical", "scale", "softcap", "sink", "fp16"])
def test_emulator_cases(label):
    """Given out/LSE that are not the forward's (the bound measures their error), the statistical mode (PTX's
    MUFU bound, BLAS GEMMs), large scales, a tight soft cap, a learnable sink and fp16."""
    rng = np.random.default_rng(11)
    dt = np.float16 if label == "fp16" else BF
    q, k, v, do = (_x(rng, 1, 90, 2, 64, dt=dt), _x(rng, 1, 200, 2, 64, dt=dt), _x(rng, 1, 200, 2, 64, dt=dt),
                   _x(rng, 1, 90, 2, 64, dt=dt))
    kw = {"scale": dict(softmax_scale=3.0), "softcap": dict(softcap=1.0, softmax_scale=2.0),
          "sink": dict(learnable_sink=rng.standard_normal(2).astype(np.float32) * 3),
          "statistical": dict(mode="statistical")}.get(label, {})
    fw = forward(q, k, v, **kw)
    out, lse = fw.out, fw.lse
    if label == "lse":
        lse = (lse + np.float32(0.01)).astype(np.float32)
    if label == "out":
        out = (out.astype(np.float32) * 1.01).astype(dt)
    res, b = _violations(q, k, v, do, out, lse, **kw)
    assert all(vi == 0 and inf == 0 for vi, inf in res.values()), res
    if label == "sink":
        g = backward(q, k, v, out, do, lse, **kw)
        r = backward_fp64(q, k, v, do, **kw)
        assert np.all(np.abs(g.dsink.astype(np.float64) - r.dsink) <= b.dsink) and np.isfinite(b.dsink).all()


def test_unbounded_cases():
    """+inf where the kernel's arithmetic breaks down: a negative scale or one that is 0 in fp32 (masked scores
    give NaN or +inf exponents), a non-finite input (its head only), a dS beyond fp16's range."""
    rng = np.random.default_rng(3)
    q, k, v, do = _x(rng, 1, 40, 2, 64), _x(rng, 1, 150, 2, 64), _x(rng, 1, 150, 2, 64), _x(rng, 1, 40, 2, 64)
    for scale in (-0.1, 1e-46):
        fw = forward(q, k, v, softmax_scale=scale)
        b = attention_backward_error_bound(q, k, v, fw.out, do, fw.lse, softmax_scale=scale)
        assert all(np.isinf(getattr(b, n)).all() for n in ("dq", "dk", "dv"))
    qn = q.copy()
    qn[0, 3, 1, 5] = np.inf
    fw = forward(qn, k, v)
    b = attention_backward_error_bound(qn, k, v, fw.out, do, fw.lse)
    assert np.isinf(b.dq[:, :, 1]).all() and np.isfinite(b.dq[:, :, 0]).all()
    assert np.isnan(b.dq_exact[:, :, 1]).all()
    h = np.float16
    q, k = _x(rng, 1, 40, 1, 64, dt=h), _x(rng, 1, 150, 1, 64, dt=h)
    v, do = _x(rng, 1, 150, 1, 64, m=3000, dt=h), _x(rng, 1, 40, 1, 64, m=3000, dt=h)
    fw = forward(q, k, v)
    g = backward(q, k, v, fw.out, do, fw.lse)
    b = attention_backward_error_bound(q, k, v, fw.out, do, fw.lse)
    assert not np.isfinite(np.asarray(g.dq, np.float64)).all()      # the kernel's dS overflowed fp16
    assert np.isinf(b.dq[~np.isfinite(np.asarray(g.dq, np.float64))]).all()


def test_refuses_what_the_backward_refuses():
    rng = np.random.default_rng(0)
    q, k, v, do = _x(rng, 1, 32, 2, 64), _x(rng, 1, 64, 2, 64), _x(rng, 1, 64, 2, 64), _x(rng, 1, 32, 2, 64)
    fw = forward(q, k, v)
    for kw, match in ((dict(num_splits=2), "num_splits"), (dict(rescale_threshold=8.0, kernel="fa4-sm100"),
                                                          "forward only")):
        with pytest.raises(ValueError, match=match):
            backward(q, k, v, fw.out, do, fw.lse, **kw)
        with pytest.raises(ValueError, match=match):
            attention_backward_error_bound(q, k, v, fw.out, do, fw.lse, **kw)
    with pytest.raises(ValueError, match="dout"):
        attention_backward_error_bound(q, k, v, fw.out, q[..., :32], fw.lse)
    with pytest.raises(TypeError, match="problem"):
        attention_backward_error_bound(q, k, v, fw.out, do, fw.lse, problem=object())


def test_check_backward_reports_violations_honestly():
    """check_backward counts an error above the bound: a bound shrunk below the observed error is caught."""
    rng = np.random.default_rng(2)
    q, k, v, do = _x(rng, 1, 48, 1, 64), _x(rng, 1, 48, 1, 64), _x(rng, 1, 48, 1, 64), _x(rng, 1, 48, 1, 64)
    c = check_backward(q, k, v, do)
    assert c.total_violations == 0 and c.tightness >= 1
    fw = forward(q, k, v)
    g = backward(q, k, v, fw.out, do, fw.lse)
    b = attention_backward_error_bound(q, k, v, fw.out, do, fw.lse)
    err = np.abs(g.dq.astype(np.float64) - backward_fp64(q, k, v, do).dq)
    assert ((err > b.dq / 2) & (err > 0)).any()     # the bound is tight enough to be broken by halving it
    from fa4num.attention import plan
    bp = attention_backward_error_bound(out=fw.out, dout=do, lse=fw.lse, problem=plan(q, k, v))
    assert all(np.array_equal(getattr(bp, n), getattr(b, n)) for n in ("dq", "dk", "dv"))


def test_cli_backward(capsys):
    from fa4num.cli import main
    assert main(["bounds", "backward", "--shape", "1,40,2,64", "--causal", "--kernel", "fa4-sm100"]) == 0
    out = capsys.readouterr().out
    assert "fa4-sm100 backward" in out and " v0" in out and "tightness" in out
    for argv, text in ((["bounds", "backward"], "--shape: required"),
                       (["bounds", "backward", "--golden", str(GOLDEN), "--softcap", "2"], "--softcap: --golden"),
                       (["bounds", "backward", "--golden", "/nonexistent"], "--golden: no backward capture"),
                       (["bounds", "backward", "--shape", "1,40,2,64", "--dtype", "float8_e4m3fn"], "--dtype")):
        try:
            code = main(argv)
        except SystemExit as e:      # argparse's own refusals
            code = e.code
        assert code == 2
        err = capsys.readouterr().err
        assert text in err and len(err.strip().splitlines()) <= 3, err
