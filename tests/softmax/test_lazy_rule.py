"""FA4 SM100's lazy-rescale rule: fa4num.softmax.lazy is the specification; every copy that cannot call it
(the torch backend, fa4num.study.skip, the Triton backend, the PTX twin) is checked against it bit for bit on
random and adversarial block maxima: NaN, +-inf, all -inf (fully masked) rows, +-0, ties at exactly the
threshold and their neighbours, thresholds 0, 4, 8 and 16."""
import math
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import torch

from fa4num.softmax import sm100
from fa4num.softmax.lazy import lazy_rescale, lazy_rescale_rows

THRESHOLDS = (0.0, 4.0, 8.0, 16.0)
ROOT = pathlib.Path(__file__).resolve().parents[2]


def corpus(threshold, *, rows=512, nblk=6, seed=0):
    """(block maxima (rows, nblk) in visiting order, scale_log2): random rows, rows with NaN / +-inf / -inf /
    +-0 blocks, fully masked rows, and rows whose second block sits at the threshold's tie and its neighbours."""
    rng = np.random.default_rng(seed + int(threshold))
    sl2 = np.float32(rng.uniform(0.05, 0.3))
    b = (rng.standard_normal((rows, nblk)) * 20).astype(np.float32)
    special = np.float32([np.nan, np.inf, -np.inf, 0.0, -0.0])
    pick = rng.random((rows, nblk)) < 0.15
    b[pick] = rng.choice(special, pick.sum())
    b[:16] = -np.inf                                     # fully masked rows
    b[16:24, :2] = -np.inf                               # masked first blocks, visible later ones
    # ties: m_blk - m_old = threshold / scale_log2 up to a few ulps either way, so that RN(RN(m_old - m_blk) *
    # scale_log2) lands on -threshold and on its neighbours
    t = np.arange(24, rows // 2)
    base = (rng.standard_normal(t.size) * 10).astype(np.float32)
    b[t, 0] = base
    target = base + np.float32(threshold / float(sl2) if threshold else 0.0)
    b[t, 1] = target + (rng.integers(-4, 5, t.size) * np.spacing(np.abs(target) + np.float32(1)))
    return b, sl2


def reference_chain(b, sl2, threshold, *, first=True):
    """The stored max after each block (visiting order) by the specification, block 0 FA4's is_first."""
    m = np.full(b.shape[0], -np.inf, np.float32)
    out = np.empty_like(b)
    for j in range(b.shape[1]):
        m, *_ = lazy_rescale_rows(m, b[:, j], scale_log2=sl2, rescale_threshold=threshold,
                                  is_first=first and j == 0)
        out[:, j] = m
    return out


def same_bits(a, b):
    return np.array_equal(np.asarray(a, np.float32).view(np.uint32), np.asarray(b, np.float32).view(np.uint32))


@pytest.mark.parametrize("threshold", THRESHOLDS)
def test_corpus_has_the_adversarial_cases(threshold):
    b, sl2 = corpus(threshold)
    _, _, acc, keep = lazy_rescale_rows(b[:, 0], b[:, 1], scale_log2=sl2, rescale_threshold=threshold,
                                        is_first=False)
    assert np.isnan(b).any() and np.isposinf(b).any() and (b == -np.inf).all(axis=1).any()
    if threshold:
        tie = acc == np.float32(-threshold)
        assert tie.sum() > 10 and keep[tie].all()                     # FSETP.GE: a tie keeps the stale max
        assert (acc < np.float32(-threshold)).any() and (acc > np.float32(-threshold)).any()
    else:
        assert not keep.any()                                         # threshold 0: no lazy branch at all


def test_scalar_rule_equals_rows_form_and_fa4_cases():
    b, sl2 = corpus(8.0, rows=256)
    f = np.float32
    for first in (True, False):
        got = lazy_rescale_rows(b[:, 0], b[:, 1], scale_log2=sl2, rescale_threshold=8.0, is_first=first)
        for i in range(0, 256, 7):
            one = lazy_rescale(b[i, 0], b[i, 1], sl2, f(8.0), first)
            assert all(same_bits(g[i], o) if g.dtype == np.float32 else g[i] == o for g, o in zip(got, one))
    # NaN: the max ignores it; a NaN exponent compares false and rescales
    assert lazy_rescale(f(3), f(np.nan), f(1), f(8), False)[:2] == (3.0, 3.0)
    m, safe, acc, keep = lazy_rescale(f(np.inf), f(1), f(1), f(8), False)
    assert math.isnan(acc) and not keep and m == np.inf
    m, safe, acc, keep = lazy_rescale(f(-np.inf), f(-np.inf), f(1), f(8), False)   # masked row: m_safe 0
    assert m == -np.inf and safe == 0 and not keep
    with pytest.raises(ValueError, match="same length"):
        lazy_rescale_rows(np.zeros(3, np.float32), np.zeros(2, np.float32), scale_log2=1.0, rescale_threshold=8.0,
                          is_first=False)


@pytest.mark.parametrize("arch", ["sm90", "libm"])
def test_sm100_step_stores_what_the_rule_says(arch):
    """Both paths of softmax_step (the fused numba kernel with tables, the array path with libm) store the
    rule's max and apply a factor of 1 exactly where it keeps the stale max."""
    b, sl2 = corpus(8.0, rows=128, nblk=4, seed=3)
    rng = np.random.default_rng(1)
    st = sm100.Sm100State.empty(b.shape[0])
    ref = reference_chain(np.where(np.isnan(b), np.float32(0), b), sl2, 8.0)   # S rows need a finite max here
    for j in range(b.shape[1]):
        s = (rng.random((b.shape[0], 32)) * -5).astype(np.float32) + np.where(np.isnan(b[:, j]), 0, b[:, j])[:, None]
        s[:, 0] = np.where(np.isnan(b[:, j]), 0, b[:, j])
        s[b[:, j] == -np.inf] = -np.inf
        s[b[:, j] == np.inf, 1:] = 0
        with np.errstate(invalid="ignore", over="ignore"):
            step = sm100.softmax_step(s, st, scale_log2=sl2, is_first=j == 0, rescale_threshold=8.0, arch=arch)
        assert same_bits(st.row_max, ref[:, j])
        if j:
            kept = (ref[:, j] == ref[:, j - 1]) | (np.isnan(ref[:, j]) & np.isnan(ref[:, j - 1]))
            assert (step.acc_scale[~step.rescaled] == 1).all() and (step.rescaled | kept).all()


@pytest.mark.parametrize("threshold", THRESHOLDS)
@pytest.mark.parametrize("nb", [1, 6])
def test_torch_backend_stale_max_is_the_rule(threshold, nb):
    from fa4num.attention.torch_backend import _stale_max
    b, sl2 = corpus(threshold)
    ref = reference_chain(b, sl2, threshold)
    got, cur = [], torch.full((b.shape[0],), -math.inf)
    for j0 in range(0, b.shape[1], nb):         # tiles of nb blocks, as the backend visits them
        m = _stale_max(cur, torch.from_numpy(b[:, j0:j0 + nb]), float(sl2), threshold, first=j0 == 0)
        got.append(m.numpy())
        cur = m[:, -1]
    assert same_bits(np.concatenate(got, axis=1), ref)


@pytest.mark.parametrize("threshold", THRESHOLDS)
def test_study_skip_scan_is_the_rule(threshold):
    """study.skip's rescale counts and stale-max lag against the reference chain. Its row starts at the first
    block with a visible key, the kernel's at its first block: the same stored max unless that first block's
    max is NaN (all-NaN scores, which a study's finite S never has), so the first block here is not NaN."""
    from fa4num.study.skip import lazy_rescale_scans
    b, sl2 = corpus(threshold, seed=5)
    b[np.isnan(b[:, 0]), 0] = np.float32(1.0)
    ref = reference_chain(b, sl2, threshold)
    prev = np.concatenate([np.full((b.shape[0], 1), -np.inf, np.float32), ref[:, :-1]], axis=1)
    moved = ref > prev
    moved[:, 0] = False
    started = np.maximum.accumulate(b > -np.inf, axis=1)
    done = (moved & np.concatenate([np.zeros((b.shape[0], 1), bool), started[:, :-1]], axis=1)).sum(axis=1)
    scan = lazy_rescale_scans(torch.from_numpy(b[:, ::-1].copy()), scale_log2=sl2, thresholds=(threshold,))[threshold]
    assert np.array_equal(scan.rescales_done, done)
    true = np.fmax.accumulate(b, axis=1)
    with np.errstate(invalid="ignore"):
        lag = (true.astype(np.float64) - ref) * np.float64(sl2)
    lag = np.where(np.concatenate([np.zeros((b.shape[0], 1), bool), started[:, :-1]], axis=1) & np.isfinite(lag),
                   lag, 0)
    # the lag is a statistic of the true max (NaN and inf poison it by design): compared on finite rows
    fin = np.isfinite(b).all(axis=1) | (b == -np.inf).all(axis=1)
    assert fin.sum() > 100 and (scan.max_lag[fin] > 0).sum() > (10 if threshold else -1)
    assert np.array_equal(scan.max_lag[fin], np.maximum(lag.max(axis=1), 0).astype(np.float32)[fin])


def _triton_rule_outputs(device):
    """The Triton backend's rule (triton_backend.update_row_max_rule) on the corpus: {threshold: (first, rest)}
    stored maxima of one block step from b[:, 0] to b[:, 1], as float32 arrays."""
    import triton
    import triton.language as tl
    from fa4num.attention import triton_backend
    global _RULE                 # a module global: Triton's interpreter resolves names there, not in closures
    _RULE = triton_backend.update_row_max_rule()

    @triton.jit
    def probe(M, B, Out, sl2, thr, first, N: tl.constexpr):
        i = tl.arange(0, N)
        tl.store(Out + i, _RULE(tl.load(M + i), tl.load(B + i), sl2, thr, first != 0))

    res = {}
    for t in THRESHOLDS:
        b, sl2 = corpus(t)
        m, blk = (torch.from_numpy(b[:, j].copy()).to(device) for j in (0, 1))
        outs = []
        for first in (1, 0):
            o = torch.empty_like(m)
            probe[(1,)](m, blk, o, float(sl2), t, first, N=m.shape[0])
            outs.append(o.cpu().numpy())
        res[t] = outs
    return res


def _check_triton(res):
    for t, (first, rest) in res.items():
        b, sl2 = corpus(t)
        for out, is_first in ((first, True), (rest, False)):
            ref, *_ = lazy_rescale_rows(b[:, 0], b[:, 1], scale_log2=sl2, rescale_threshold=t, is_first=is_first)
            assert same_bits(out, ref), (t, is_first)


def test_triton_backend_rule_on_cpu_interpreter():
    """In a fresh process with TRITON_INTERPRET=1 (set before Triton builds a kernel)."""
    pytest.importorskip("triton")
    code = ("import numpy as np, torch, tests.softmax.test_lazy_rule as t; "
            "t._check_triton(t._triton_rule_outputs(torch.device('cpu'))); print('ok')")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join(
        [str(ROOT), str(ROOT / "tests")] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert run.returncode == 0 and "ok" in run.stdout, run.stderr[-3000:]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_triton_backend_rule_on_gpu():
    pytest.importorskip("triton")
    _check_triton(_triton_rule_outputs(torch.device("cuda")))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_ptx_twin_rule_on_gpu():
    """The PTX twin's update_row_max (experiments/gpu/fa4_softmax_sm100_twin.py, inline PTX sub/mul/max.f32 on the
    GPU) gives the specification's m, m_safe, acc_scale_ and keep bit for bit, first block and later ones."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("fa4_twin", ROOT / "experiments/gpu/fa4_softmax_sm100_twin.py")
    twin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(twin)
    probe = twin.rule_probe()
    for t in THRESHOLDS:
        b, sl2 = corpus(t)
        n = b.shape[0]
        m_old, blk = (torch.from_numpy(b[:, j].copy().view(np.int32)).cuda() for j in (0, 1))
        for first in (True, False):
            out = torch.empty((n, 4), dtype=torch.int32, device="cuda")
            probe[(1,)](m_old, blk, out, n, int(sl2.view(np.int32)), t, int(not first), BLOCK=1024)
            o = out.cpu().numpy()
            ref = lazy_rescale_rows(b[:, 0], b[:, 1], scale_log2=sl2, rescale_threshold=t, is_first=first)
            # NaN payloads aside (max.f32 of two NaNs is the canonical NaN on the GPU), the same bits
            for k in (0, 1):
                got = o[:, k].view(np.float32)
                assert np.array_equal(got, ref[k], equal_nan=True) and same_bits(got[~np.isnan(got)],
                                                                               ref[k][~np.isnan(got)]), (t, first, k)
            assert np.array_equal(o[:, 3].astype(bool), ref[3]), (t, first)
            if not first:    # the first block's exponent is unused (the factor is 1)
                got = o[:, 2].view(np.float32)
                assert np.array_equal(got, ref[2], equal_nan=True) and same_bits(got[~np.isnan(got)],
                                                                               ref[2][~np.isnan(got)]), t


def test_rule_max_is_max_f32():
    """The rule's max is PTX max.f32 as fa4num.fp.scalar.f32_max models it (that model is checked against the H200's
    bits by tests/top/test_golden.py): a NaN operand ignored, and max(+0, -0) = +0 in either order, the case a
    plain ``a if a > b else b`` gets wrong and the H200's PTX twin of the rule caught. Two NaNs are left out: the
    GPU gives the canonical NaN, the rule one of its operands (NaN either way)."""
    from fa4num.fp.scalar import f32_max
    from fa4num.softmax._ops import _fmax
    vals = np.float32([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 2.0 ** -149, -(2.0 ** -149), 3.4e38])
    pairs = [(a, b) for a in vals for b in vals if not (np.isnan(a) and np.isnan(b))]
    got = np.float32([_fmax(a, b) for a, b in pairs])
    want = np.float32([f32_max(a, b, False) for a, b in pairs])
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
