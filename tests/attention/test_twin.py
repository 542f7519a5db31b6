"""The GPU twin (fa4num.attention.twin) from the CPU.

- The emulator against the twin's H200 outputs: tests/golden/twin_h200.json.xz holds, per case of
  experiments/gpu/twin_cases.py, the SHA-256 of the twin's out, LSE and counters as the H200 computed them (each
  case also equal to the emulator there, experiments/results/h200_20261201/twin_vs_emulator.json). Inputs are a
  pure function of the case, so CI re-runs the emulator on the cases a 2-core machine affords and compares.
- The same for the varlen, seqused, paged and split-KV set (twin_cases.layout_cases), against
  tests/golden/twin_h200_layouts.json.xz: skipped until that file is captured (twin_validate.py OUT --set layouts).
- The twin's own kernel source in Triton's interpreter, each PTX instruction and tl.dot through fa4num's models
  (fa4num.attention._twin_interp), against the emulator on tiny shapes, in a subprocess (TRITON_INTERPRET must be set
  before Triton is imported): dense calls, and varlen / seqused / paged KV / split-KV; the split tables against
  the emulator's schedule.
- What the twin refuses, and the closed-form visible-key count it uses, against masking.visible.
- On a GPU (marked): the twin against the emulator on fresh cases.
"""
from __future__ import annotations

import importlib.util
import os
import json
import lzma
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from fa4num.attention import forward, plan
from fa4num.attention import masking
from fa4num.gpu import gpu_missing
from fa4num.attention import twin

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests/golden/twin_h200.json.xz"


def _cases_module():
    spec = importlib.util.spec_from_file_location("twin_cases", ROOT / "experiments/gpu/twin_cases.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


TC = _cases_module()
# what a 2-core CI machine affords: the corpus minus its 2k-8k-token cases (the H200 checked those)
CPU_CASES = [c for c in TC.cases() if c["sq"] * c["sk"] * c["h"] <= 2_000_000]


def _golden():
    return json.loads(lzma.decompress(GOLDEN.read_bytes()))


def test_golden_covers_the_corpus_with_provenance():
    doc = _golden()
    assert doc["provenance"]["gpu"]["name"] == "NVIDIA H200"
    assert set(doc["cases"]) == {c["name"] for c in TC.cases()}
    kernels = {c["kernel"] for c in TC.cases()}
    dtypes = {c["dtype"] for c in TC.cases()}
    assert kernels == {"fa4-sm90", "fa4-sm100"} and dtypes == {"bfloat16", "float16"}
    assert len(doc["cases"]) >= 60


@pytest.mark.parametrize("case", CPU_CASES, ids=[c["name"] for c in CPU_CASES])
def test_emulator_equals_the_twin_on_the_h200(case):
    want = _golden()["cases"][case["name"]]
    q, k, v, kw = TC.inputs(case)
    got = TC.digest(forward(q, k, v, **kw))
    assert got == want, {n: got[n] == want[n] for n in want}


GOLDEN_LAYOUTS = ROOT / "tests/golden/twin_h200_layouts.json.xz"


def _work(case) -> int:
    """query-key pairs per head times heads, summed over the case's sequences (what the emulator's time grows
    with)."""
    q, k, v, kw = TC.inputs(case)
    return sum(s.q.shape[0] * s.k.shape[0] for s in plan(q, k, v, **kw).seqs) * case["h"]


LAYOUT_CASES = TC.layout_cases()


def test_layout_cases_cover_the_features_and_the_twin_takes_them():
    """The H200 set for varlen, seqused, paged KV and split-KV (experiments/gpu/twin_validate.py --set layouts):
    at least 12 cases, both kernels, both dtypes, every layout and split mode, 128 to 8k tokens, none refused."""
    cs = LAYOUT_CASES
    assert len(cs) >= 12 and len({c["name"] for c in cs}) == len(cs)
    assert {c["kernel"] for c in cs} == {"fa4-sm90", "fa4-sm100"}
    assert {c["dtype"] for c in cs} == {"bfloat16", "float16"}
    longest = []
    seen = set()
    for c in cs:
        q, k, v, kw = TC.inputs(c)
        p = plan(q, k, v, **kw)
        assert twin.refusal(p) is None, c["name"]
        longest.append(max(max(s.q.shape[0], s.k.shape[0]) for s in p.seqs))
        seen |= {n for n in ("cu_seqlens_q", "cu_seqlens_k", "page_table", "seqused_q", "seqused_k",
                             "seqlen_k_per_split") if n in kw}
        seen |= {"split"} if p.num_splits > 1 else set()
        seen |= {"heuristic-split"} if kw.get("num_splits") == 0 and p.num_splits > 1 else set()
        if c.get("paged"):
            seen |= {"page-not-tile"} if c["paged"]["page_size"] % p.opts.tile_n else set()
    assert seen == {"cu_seqlens_q", "cu_seqlens_k", "page_table", "seqused_q", "seqused_k", "seqlen_k_per_split",
                    "split", "heuristic-split", "page-not-tile"}
    assert min(longest) >= 128 and max(longest) == 8192


_NOT_CAPTURED = dict(condition=not GOLDEN_LAYOUTS.exists(), reason="the H200 digests of the layout cases are not "
                     "captured yet (python experiments/gpu/twin_validate.py OUT --set layouts)")


@pytest.mark.skipif(**_NOT_CAPTURED)
def test_layout_golden_covers_the_set_with_provenance():
    doc = json.loads(lzma.decompress(GOLDEN_LAYOUTS.read_bytes()))
    assert doc["provenance"]["gpu"]["name"] == "NVIDIA H200"
    assert set(doc["cases"]) == {c["name"] for c in LAYOUT_CASES}


@pytest.mark.skipif(**_NOT_CAPTURED)
@pytest.mark.parametrize("case", [c for c in LAYOUT_CASES if _work(c) <= 3_000_000],
                         ids=lambda c: c["name"])
def test_emulator_equals_the_twin_on_the_h200_layouts(case):
    want = json.loads(lzma.decompress(GOLDEN_LAYOUTS.read_bytes()))["cases"][case["name"]]
    q, k, v, kw = TC.inputs(case)
    got = TC.digest(forward(q, k, v, **kw))
    assert got == want, {n: got[n] == want[n] for n in want}


def test_the_cpu_subset_is_most_of_the_corpus():
    assert len(CPU_CASES) >= 0.8 * len(TC.cases())


_INTERP = r"""
import json, os, sys
os.environ["TRITON_INTERPRET"] = "1"
import numpy as np, torch
from fa4num.attention import forward
from fa4num.attention import twin
sys.path.insert(0, "experiments/gpu")
from twin_flex_validate import flex_kwargs
out = {}
for name, kw, shape, dt, *mods in json.loads(sys.argv[1]):
    # shape: (b, sq, sk, h, hk, d) of a dense call, or {"q": ..., "k": ..., "v": ...} of a varlen or paged one
    if isinstance(shape, list):
        b, sq, sk, h, hk, d = shape
        shape = {"q": (b, sq, h, d), "k": (b, sk, hk, d), "v": (b, sk, hk, d)}
    g = torch.Generator().manual_seed(len(name))
    dtype = torch.bfloat16 if dt == "bfloat16" else torch.float16
    q = (torch.randn(*shape["q"], generator=g) * 2).to(dtype)
    k = torch.randn(*shape["k"], generator=g).to(dtype)
    v = torch.randn(*shape["v"], generator=g).to(dtype)
    if "learnable_sink" in kw:
        kw["learnable_sink"] = np.asarray(kw["learnable_sink"], np.float32)
    if mods:        # FlexAttention (dense calls): the mods as experiments/gpu/twin_flex_validate.flex_kwargs takes them
        kw.update(flex_kwargs(mods[0], batch=b, heads=h, seqlen_q=sq, seqlen_k=sk))
    for n in ("cu_seqlens_q", "cu_seqlens_k", "page_table", "seqused_q", "seqused_k"):
        if n in kw:
            kw[n] = np.asarray(kw[n], np.int32)
    e, t = forward(q, k, v, **kw), twin.forward(q, k, v, **kw)
    diff = {"out": int((e.out.view(torch.int16) != t.out.view(torch.int16)).sum()),
            "lse": int((e.lse.view(torch.int32) != t.lse.view(torch.int32)).sum())}
    for n in ("kv_blocks", "rescale_events", "rescales_done", "max_lag", "p_saturated", "exp2_emulated",
              "masked_by_window", "sink_share", "rescale_steps", "rescales_row", "rescales_warp", "rescales_tile",
              "events_row", "events_warp", "events_tile"):
        diff[n] = int((np.asarray(getattr(e.stats, n)).view(np.int32)
                       != np.asarray(getattr(t.stats, n)).view(np.int32)).sum())
    diff["rescales_done_total"] = int(np.asarray(t.stats.rescales_done).sum())
    diff["rescale_events_total"] = int(np.asarray(t.stats.rescale_events).sum())
    diff["empty_rows_total"] = int(torch.isneginf(t.lse).sum())
    out[name] = diff
print(json.dumps(out))
"""

INTERP_CASES = [
    ("sm100-lazy", dict(kernel="fa4-sm100", causal=True, tile_m=32, tile_n=32, rescale_threshold=2.0,
                        ex2_emu_freq=4, ex2_emu_res=2), (1, 40, 100, 2, 1, 16), "bfloat16"),
    ("sm100-sink-softcap", dict(kernel="fa4-sm100", softcap=3.0, learnable_sink=[0.5, -1.0], tile_m=32,
                                tile_n=32, max_offset=8, pack_gqa=False, fused_bias=False, is_sm103=True),
     (1, 40, 100, 2, 1, 16), "bfloat16"),
    ("sm90-window-fp16", dict(kernel="fa4-sm90", window_size=(20, 3), tile_m=96, tile_n=32),
     (1, 100, 100, 2, 2, 16), "float16"),
    ("sm100-tile128-gqa", dict(kernel="fa4-sm100", causal=True, tile_n=32, rescale_threshold=1.0),
     (1, 150, 200, 2, 1, 16), "bfloat16"),
]


def _interpreted(cases) -> dict:
    """{case name: differing bits per output} of the twin in Triton's interpreter against the emulator."""
    proc = subprocess.run([sys.executable, "-c", _INTERP, json.dumps(cases)], capture_output=True,
                          text=True, timeout=1500, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_twin_kernel_in_the_interpreter_equals_the_emulator():
    """The twin's kernel, run by Triton's interpreter on fa4num's instruction models: 0 differing bits in out,
    LSE and every counter, on the lazy rescale (a threshold that skips), the software exp2 columns, the sink, the
    soft cap, the unfused bias, SM103's rescale exp2, pack-GQA on and off, windows and fp16, and M blocks
    that straddle the 128-row groups the programs hold (tile_m 96): every skip counter too."""
    got = _interpreted(INTERP_CASES)
    totals = {}
    for name, diff in got.items():
        totals[name] = diff.pop("rescale_events_total"), diff.pop("rescales_done_total")
        diff.pop("empty_rows_total")
        assert all(v == 0 for v in diff.values()), (name, diff)
    events, done = totals["sm100-lazy"]
    assert events > done > 0, totals       # the lazy rule both rescales and skips there


_SINK4 = [0.5, -1.0, 2.0, 0.0]
INTERP_LAYOUT_CASES = [
    # varlen q and k, causal, pack-GQA; the middle sequence has one query and no keys (out 0, LSE = the sink)
    ("varlen-causal-packgqa", dict(kernel="fa4-sm100", causal=True, tile_m=32, tile_n=32, pack_gqa=True,
                                   cu_seqlens_q=[0, 30, 31, 70], cu_seqlens_k=[0, 50, 50, 90],
                                   learnable_sink=_SINK4, rescale_threshold=2.0),
     {"q": (70, 4, 16), "k": (90, 2, 16), "v": (90, 2, 16)}, "bfloat16"),
    ("varlen-sm90-window-fp16", dict(kernel="fa4-sm90", window_size=(20, 3), tile_n=32,
                                     cu_seqlens_q=[0, 45, 100], cu_seqlens_k=[0, 60, 100]),
     {"q": (100, 2, 16), "k": (100, 1, 16), "v": (100, 1, 16)}, "float16"),
    # pages of 24 keys under 32-key tiles, seqused_k and seqused_q cutting both sequences
    ("paged-seqused", dict(kernel="fa4-sm100", causal=True, tile_m=32, tile_n=32, page_table=[[3, 0, 5], [6, 1, 2]],
                           seqused_k=[70, 41], seqused_q=[30, 17]),
     {"q": (2, 30, 2, 16), "k": (7, 24, 1, 16), "v": (7, 24, 1, 16)}, "bfloat16"),
    ("paged-sm90-fp16", dict(kernel="fa4-sm90", tile_n=32, page_table=[[1, 0], [2, 3]]),
     {"q": (2, 20, 2, 16), "k": (4, 40, 2, 16), "v": (4, 40, 2, 16)}, "float16"),
    # split-KV: 2 splits with a sink, 3 causal splits (some empty: no KV work) with the lazy rescale
    ("split2-sink", dict(kernel="fa4-sm100", num_splits=2, tile_m=32, tile_n=32, learnable_sink=[0.5, 3.0]),
     (1, 40, 100, 2, 1, 16), "bfloat16"),
    ("split3-causal-fp16", dict(kernel="fa4-sm100", causal=True, num_splits=3, tile_m=32, tile_n=32,
                                rescale_threshold=2.0, ex2_emu_freq=4, learnable_sink=[-1.0, 1.0]),
     (1, 40, 100, 2, 1, 16), "float16"),
    # split-KV over varlen keys, the blocks per split fixed
    ("split-varlen-per-split", dict(kernel="fa4-sm100", num_splits=3, seqlen_k_per_split=32, tile_m=32, tile_n=32,
                                    cu_seqlens_q=[0, 20, 40], cu_seqlens_k=[0, 70, 90]),
     {"q": (40, 2, 16), "k": (90, 2, 16), "v": (90, 2, 16)}, "bfloat16"),
    # split-KV over varlen with a window, a sequence without keys (the sink alone) and one without used queries
    ("split-varlen-empty-window", dict(kernel="fa4-sm100", num_splits=2, tile_m=32, tile_n=32, window_size=(30, 5),
                                       cu_seqlens_q=[0, 10, 30, 50], cu_seqlens_k=[0, 0, 70, 80], seqused_q=[10, 0, 15],
                                       learnable_sink=[1.0, -2.0]),
     {"q": (50, 2, 16), "k": (80, 2, 16), "v": (80, 2, 16)}, "bfloat16"),
]


@pytest.mark.slow
def test_twin_layouts_and_splits_in_the_interpreter_equal_the_emulator():
    """Varlen (causal, pack-GQA, a sequence without keys), seqused_q/k, paged KV (pages that are not a multiple
    of tile_n) and SM100 split-KV (2 and 3 splits, the sink, causal, empty splits, seqlen_k_per_split, over varlen
    with a sequence without keys and one without used queries) through
    the twin's kernel in Triton's interpreter: 0 differing bits in out, LSE and every counter."""
    got = _interpreted(INTERP_LAYOUT_CASES)
    for name, diff in got.items():
        for total in ("rescale_events_total", "rescales_done_total", "empty_rows_total"):   # values, not diffs
            diff.pop(total)
        assert all(v == 0 for v in diff.values()), (name, diff)
    assert set(got) == {c[0] for c in INTERP_LAYOUT_CASES}


@pytest.mark.parametrize("kwargs", [dict(num_splits=2, causal=True), dict(num_splits=3, window_size=(70, 10)),
                                    dict(num_splits=4, seqlen_k_per_split=128, causal=True), dict(num_splits=1)])
def test_schedule_tables_are_the_emulators_visits(kwargs):
    """The twin's per-split (first block, count) table gives exactly the KV blocks and order of the emulator's
    schedule (flex_visits: consecutive blocks right to left; an empty split is count 0), and its per-row KV
    blocks and rescale steps are those visits counted."""
    torch = pytest.importorskip("torch")
    from fa4num.attention.schedule import flex_visits
    q = np.zeros((1, 300, 4, 64), ml_dtypes.bfloat16)
    k = np.zeros((1, 500, 2, 64), ml_dtypes.bfloat16)
    p = plan(q, k, k, kernel="fa4-sm100", tile_n=64, **kwargs)
    group = 2 if p.opts.pack_gqa else 1
    progs, ranges, per_row = (x.numpy() for x in twin._schedule(torch.device("cpu"), p, sq=300, sk=500, group=group,
                                                                 bm=128))
    nmb = -(-300 * group // p.opts.tile_m)
    blocks = np.zeros(300 * group, np.int64)
    steps = np.zeros(300 * group, np.int64)
    for mb in range(nmb):
        visits = flex_visits(p, mb, batch=0, head=0, seqlen_q=300, seqlen_k=500, group=group)
        assert len(visits) == ranges.shape[0] == p.num_splits
        for split, vis in enumerate(visits):
            first, count = ranges[split, mb]
            assert [first - i for i in range(count)] == [n for n, _, _ in vis]
            rows = slice(mb * p.opts.tile_m, (mb + 1) * p.opts.tile_m)
            blocks[rows] += len(vis)
            steps[rows] += max(len(vis) - 1, 0)
    np.testing.assert_array_equal(per_row[0].reshape(-1), blocks)
    np.testing.assert_array_equal(per_row[1].reshape(-1), steps)


def test_a_sparse_calls_tables_never_serve_a_dense_call():
    """The launch tables are cached by shape: a block-sparse call's (its sparse lists) and a dense call's of the
    same shape are kept apart, so the dense call after the sparse one visits its own KV range."""
    torch = pytest.importorskip("torch")
    from fa4num.attention import flex
    q = np.zeros((1, 256, 2, 64), ml_dtypes.bfloat16)
    # two documents of 128 tokens: the sparse lists skip the other document's block, the dense call visits both
    docs = [np.repeat(np.arange(2, dtype=np.int32), 128)[None]]
    bs = flex.block_sparse_tensors(flex.document_mask(), batch=1, heads=2, seqlen_q=256, seqlen_k=256,
                                   block_size=(128, 128), aux_tensors=docs)
    dense = plan(q, q, q, kernel="fa4-sm90", tile_m=128, mask_mod=flex.document_mask(), aux_tensors=docs)
    sparse = plan(q, q, q, kernel="fa4-sm90", mask_mod=flex.document_mask(), aux_tensors=docs,
                  block_sparse_tensors=bs)
    twin._SCHEDULES.clear()
    fresh = [x.clone() for x in twin._schedule(torch.device("cpu"), dense, sq=256, sk=256, group=1, bm=128)]
    twin._SCHEDULES.clear()
    twin._schedule(torch.device("cpu"), sparse, sq=256, sk=256, group=1, bm=128)
    after = twin._schedule(torch.device("cpu"), dense, sq=256, sk=256, group=1, bm=128)
    for a, b in zip(fresh, after):
        assert torch.equal(a, b)


def _q(shape=(1, 64, 2, 64), dt=ml_dtypes.bfloat16):
    return np.ones(shape, dt)


@pytest.mark.parametrize("kwargs, word", [
    (dict(kernel="fa4-sm90", mode="statistical"), "statistical"),
    (dict(kernel="fa4-sm90", gemm="exact"), "gemm"),
    (dict(kernel="fa4-sm90", mufu_arch="libm"), "mufu_arch"),
])
def test_refusals_name_the_argument(kwargs, word):
    q = _q()
    why = twin.refusal(plan(q, q, q, **kwargs))
    assert why is not None and word in why


def test_fp8_is_refused_and_the_layouts_and_splits_are_taken():
    q8 = np.ones((1, 64, 2, 64), ml_dtypes.float8_e4m3fn)
    assert "fp8" in twin.refusal(plan(q8, q8, q8, kernel="fa4-sm100"))
    q = np.ones((64, 2, 64), ml_dtypes.bfloat16)
    cu = np.array([0, 30, 64], np.int32)
    assert twin.refusal(plan(q, q, q, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=34, max_seqlen_k=34)) is None
    kv = np.ones((3, 48, 2, 64), ml_dtypes.bfloat16)
    assert twin.refusal(plan(_q(), kv, kv, page_table=np.array([[2, 0]]), seqused_k=np.array([90]),
                             seqused_q=np.array([50]))) is None
    assert twin.refusal(plan(_q(), _q(), _q(), kernel="fa4-sm100", num_splits=3)) is None
    assert twin.refusal(plan(_q(), _q(), _q(), kernel="fa4-sm100", tile_n=64)) is None


def test_forward_raises_the_refusal():
    torch = pytest.importorskip("torch")
    q = torch.ones(1, 64, 2, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="statistical"):
        twin.forward(q, q, q, kernel="fa4-sm90", mode="statistical")


@pytest.mark.parametrize("causal, window", [(False, (None, None)), (True, (None, None)), (False, (5, 2)),
                                            (False, (None, 3)), (False, (7, None)), (True, (4, None))])
@pytest.mark.parametrize("sq, sk", [(10, 30), (30, 10), (17, 17)])
def test_visible_count_is_the_visible_mask_summed(causal, window, sq, sk):
    w = masking.resolve_window(causal, window)
    rows = np.arange(sq)
    vis = masking.visible(rows[:, None], np.arange(sk)[None, :], seqlen_q=sq, seqlen_k=sk, window=w)
    want = np.broadcast_to(vis, (sq, sk)).sum(axis=1)
    np.testing.assert_array_equal(masking.visible_count(rows, seqlen_q=sq, seqlen_k=sk, window=w), want)


@pytest.mark.gpu
@pytest.mark.skipif(gpu_missing() is not None, reason=f"no usable GPU: {gpu_missing()}")
@pytest.mark.parametrize("kernel", ["fa4-sm90", "fa4-sm100"])
def test_twin_equals_the_emulator_on_the_gpu(kernel):
    import torch
    g = torch.Generator().manual_seed(11)
    q = (torch.randn(2, 333, 6, 128, generator=g) * 3).to(torch.bfloat16)
    k = torch.randn(2, 777, 2, 128, generator=g).to(torch.bfloat16)
    v = torch.randn(2, 777, 2, 128, generator=g).to(torch.bfloat16)
    kw = dict(kernel=kernel, window_size=(300, 40), learnable_sink=np.linspace(-1, 2, 6).astype(np.float32))
    e = forward(q, k, v, **kw)          # torch inputs: torch outputs on their (CPU) device
    t = twin.forward(q.cuda(), k.cuda(), v.cuda(), **kw)
    assert torch.equal(e.out.view(torch.int16), t.out.cpu().view(torch.int16))
    assert torch.equal(e.lse.view(torch.int32), t.lse.cpu().view(torch.int32))
    for n in ("rescale_events", "rescales_done", "max_lag", "kv_blocks", "rescales_warp", "events_tile"):
        np.testing.assert_array_equal(np.asarray(getattr(e.stats, n)), np.asarray(getattr(t.stats, n)))


@pytest.mark.gpu
@pytest.mark.skipif(gpu_missing() is not None, reason=f"no usable GPU: {gpu_missing()}")
@pytest.mark.parametrize("name", ["varlen", "paged-seqused", "split"])
def test_twin_layouts_equal_the_emulator_on_the_gpu(name):
    import torch
    g = torch.Generator().manual_seed(12)
    kw = dict(kernel="fa4-sm100", causal=True, learnable_sink=np.linspace(-1, 2, 4).astype(np.float32))
    if name == "varlen":
        q, k, v = (torch.randn(n, h, 128, generator=g).to(torch.bfloat16) for n, h in ((900, 4), (1300, 2), (1300, 2)))
        kw.update(cu_seqlens_q=np.array([0, 300, 301, 900]), cu_seqlens_k=np.array([0, 500, 500, 1300]))
    elif name == "paged-seqused":
        q = torch.randn(2, 600, 4, 128, generator=g).to(torch.bfloat16)
        k, v = (torch.randn(20, 96, 2, 128, generator=g).to(torch.bfloat16) for _ in range(2))
        kw.update(page_table=np.array([[4, 1, 7, 0, 9, 3, 2, 8], [10, 11, 5, 6, 12, 13, 14, 15]]),
                  seqused_k=np.array([700, 411]), seqused_q=np.array([600, 99]))
    else:
        q = torch.randn(1, 777, 4, 128, generator=g).to(torch.bfloat16)
        k, v = (torch.randn(1, 3000, 2, 128, generator=g).to(torch.bfloat16) for _ in range(2))
        kw.update(num_splits=3, rescale_threshold=4.0)
    e = forward(q, k, v, **kw)
    t = twin.forward(q.cuda(), k.cuda(), v.cuda(), **kw)
    assert torch.equal(e.out.view(torch.int16), t.out.cpu().view(torch.int16))
    assert torch.equal(e.lse.view(torch.int32), t.lse.cpu().view(torch.int32))
    for n in ("rescale_events", "rescales_done", "max_lag", "kv_blocks", "rescale_steps", "rescales_warp",
              "events_tile", "masked_by_window", "sink_share"):
        np.testing.assert_array_equal(np.asarray(getattr(e.stats, n)), np.asarray(getattr(t.stats, n)))


@pytest.mark.skipif(gpu_missing() is None, reason="a GPU is present")
def test_cli_without_a_gpu_says_so_in_one_line():
    proc = subprocess.run([sys.executable, "-m", "fa4num.cli", "gpu", "twin", "--shape", "1,64,2,32"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "TRITON_INTERPRET": "0"})
    assert proc.returncode == 1
    assert len(proc.stderr.strip().splitlines()) == 1 and "no usable GPU" in proc.stderr


@pytest.mark.slow
def test_cli_check_in_the_interpreter():
    """``fa4num gpu twin --check``: the twin (Triton's interpreter here) against the CPU emulator, bit for bit."""
    proc = subprocess.run([sys.executable, "-m", "fa4num.cli", "gpu", "twin", "--shape", "1,40,2,16",
                           "--seqlen-k", "100", "--kv-heads", "1", "--causal", "--opt", "tile_m=32", "--opt",
                           "tile_n=32", "--opt", "rescale_threshold=2", "--repeats", "1", "--check"],
                          capture_output=True, text=True, timeout=900, cwd=ROOT,
                          env={**os.environ, "TRITON_INTERPRET": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "0 differing bits" in proc.stdout
    bad = subprocess.run([sys.executable, "-m", "fa4num.cli", "gpu", "twin", "--opt", "rescale_threshold"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env={**os.environ, "TRITON_INTERPRET": "1"})
    assert bad.returncode == 2 and "KEY=VALUE" in bad.stderr


# --- FlexAttention's built-in mods in the twin (issue 28) ------------------------------------------------------

_SMALL = (1, 40, 100, 2, 1, 16)
_TILES = dict(tile_m=32, tile_n=32)
FLEX_BUILTINS = [      # (name, mods as experiments/gpu/twin_flex_validate.flex_kwargs takes them, extra FA4
                       # arguments, shape, dtype): every built-in, on both kernels below
    ("alibi", {"score_mod": ["alibi_mod", {}], "aux": [["slopes"]]}, dict(_TILES, causal=True), _SMALL, "bfloat16"),
    ("alibi-exp2-nocontract", {"score_mod": ["alibi_exp2_mod", {"contract": False}]}, _TILES, _SMALL, "float16"),
    ("rel-bias-clamp", {"score_mod": ["rel_bias_mod", {"clamp": 7}]}, dict(_TILES, window_size=(30, 5)), _SMALL,
     "bfloat16"),
    ("rel-bias-nocontract", {"score_mod": ["rel_bias_mod", {"contract": False}]}, _TILES, _SMALL, "bfloat16"),
    ("softcap-mod", {"score_mod": ["softcap_mod", {"softcap": 3.0}]}, _TILES, _SMALL, "bfloat16"),
    ("causal-mask", {"mask_mod": ["causal_mask", {}]}, _TILES, (1, 100, 40, 2, 1, 16), "bfloat16"),
    ("window-mask", {"mask_mod": ["sliding_window_mask", {"left": 20, "right": None}]}, _TILES, _SMALL, "float16"),
    ("prefix-lm", {"mask_mod": ["prefix_lm_mask", {"prefix": 10}]}, _TILES, _SMALL, "bfloat16"),
    # per-head ids under pack-GQA (rows of two heads in one program), with ALiBi from a second aux tensor
    ("document-alibi-gqa", {"mask_mod": ["document_mask", {}], "score_mod": ["alibi_mod", {"aux_index": 1}],
                            "aux": [["docs3", [30, 1, 39]], ["slopes"]]},
     dict(_TILES, pack_gqa=True), (1, 70, 70, 4, 2, 16), "bfloat16"),
    ("document-128", {"mask_mod": ["document_mask", {}], "aux": [["docs", [100, 50]]]}, dict(tile_n=32),
     (1, 150, 150, 2, 2, 16), "bfloat16"),
    # block sparsity: mask blocks then full blocks, each right to left, per head and broadcast over heads,
    # without full blocks (block-sparse document masks are refused: test_flex_refusals_name_the_argument)
    ("sparse-causal", {"mask_mod": ["causal_mask", {}], "sparse": {"block": [64, 32], "full": True}}, _TILES,
     (1, 100, 100, 2, 2, 16), "float16"),
    ("sparse-prefix-nofull-bcast", {"mask_mod": ["prefix_lm_mask", {"prefix": 40}],
                                    "sparse": {"block": [64, 32], "full": False, "heads": 1}},
     _TILES, (1, 100, 100, 4, 2, 16), "bfloat16"),
]
FLEX_CASES = [(f"{k.split('-')[1]}-{n}", dict(kw, kernel=k), sh, dt, m) for k in ("fa4-sm90", "fa4-sm100")
              for n, m, kw, sh, dt in FLEX_BUILTINS]


@pytest.mark.slow
def test_twin_runs_the_flex_builtins_with_the_emulators_bits():
    """Every built-in score_mod and mask_mod of fa4num.attention.flex through the twin's kernel in Triton's
    interpreter, both kernels: 0 differing bits in out, LSE and every counter against the emulator (contracted
    and plain bias adds, fp16, a window with a score_mod, 128-row M blocks, per-head document ids under
    pack-GQA, rows the mask empties, block-sparse lists)."""
    proc = subprocess.run([sys.executable, "-c", _INTERP, json.dumps(FLEX_CASES)], capture_output=True,
                          text=True, timeout=1500, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(got) == {c[0] for c in FLEX_CASES}
    masked = {}
    for name, diff in got.items():
        masked[name] = diff.pop("empty_rows_total")
        for n in ("rescale_events_total", "rescales_done_total"):
            diff.pop(n)
        assert all(x == 0 for x in diff.values()), (name, diff)
    assert masked["sm90-causal-mask"] > 0 and masked["sm100-causal-mask"] > 0, masked     # empty rows were run


def _lambda_mod(score, b, h, q_idx, kv_idx, seqlen_info, aux_tensors):
    return score


def test_flex_refusals_name_the_argument():
    from fa4num.attention import flex
    q = _q()
    why = twin.refusal(plan(q, q, q, score_mod=_lambda_mod))
    assert why.startswith("score_mod=_lambda_mod: a Python callable cannot run") and "flex.alibi_mod" in why
    why = twin.refusal(plan(q, q, q, mask_mod=lambda b, h, qi, ki, si, aux: qi >= ki))
    assert why.startswith("mask_mod=<lambda>") and "flex.document_mask" in why
    # a sparse list whose later block crosses seqlen_k: FA4 reads unspecified memory there
    bs = flex.block_sparse_tensors(flex.causal_mask(), batch=1, heads=2, seqlen_q=64, seqlen_k=100,
                                   block_size=(128, 32))
    assert bs["mask_block_cnt"][0, 0, 0] == 4     # every block partial (the query block's padded rows)
    bs["mask_block_idx"][..., :4] = bs["mask_block_idx"][..., 3::-1].copy()    # visited 0, 1, 2, 3: 3 not first
    why = twin.refusal(plan(q, q[:, :1].repeat(100, 1), q[:, :1].repeat(100, 1), tile_n=32,
                            mask_mod=flex.causal_mask(), block_sparse_tensors=bs))
    assert why is not None and why.startswith("block_sparse_tensors: KV block 3"), why
    assert twin.refusal(plan(q, q, q, score_mod=flex.rel_bias_mod(), aux_scalars=(1.0,))).startswith("aux_scalars:")
    assert "aux_tensors[0]" in twin.refusal(plan(q, q, q, score_mod=flex.alibi_mod()))
    short = np.zeros((1, 10), np.int32)
    assert "document ids" in twin.refusal(plan(q, q, q, mask_mod=flex.document_mask(), aux_tensors=[short]))
    ok = flex.block_sparse_tensors(flex.causal_mask(), batch=1, heads=2, seqlen_q=64, seqlen_k=64,
                                   block_size=(128, 128))
    for kw in (dict(score_mod=flex.softcap_mod(5.0)), dict(score_mod=flex.alibi_exp2_mod(), causal=True),
               dict(mask_mod=flex.causal_mask(), block_sparse_tensors=ok),
               dict(mask_mod=flex.prefix_lm_mask(3), score_mod=flex.alibi_mod(), aux_tensors=[flex.alibi_slopes(2)])):
        assert twin.refusal(plan(q, q, q, **kw)) is None, kw
    # a block-sparse document mask: refused (its LSE differed on the H200, twin_flex_validate.json)
    docs = np.repeat(np.arange(2, dtype=np.int32), 32)[None]
    bsd = flex.block_sparse_tensors(flex.document_mask(), batch=1, heads=2, seqlen_q=64, seqlen_k=64,
                                    block_size=(128, 128), aux_tensors=[docs])
    why = twin.refusal(plan(q, q, q, mask_mod=flex.document_mask(), aux_tensors=[docs], block_sparse_tensors=bsd))
    assert why is not None and why.startswith("block_sparse_tensors with mask_mod=document_mask"), why
    # the built-ins on a varlen, paged or split call: refused by name (the twin runs those one sequence or one
    # split at a time, the built-ins index a dense call)
    qv = np.ones((64, 2, 64), ml_dtypes.bfloat16)
    cu = np.array([0, 30, 64], np.int32)
    kv = np.ones((3, 48, 2, 64), ml_dtypes.bfloat16)
    for call, arg in ((plan(qv, qv, qv, cu_seqlens_q=cu, cu_seqlens_k=cu, score_mod=flex.softcap_mod(5.0)),
                       "cu_seqlens_q"),
                      (plan(q, kv, kv, page_table=np.array([[2, 0]]), mask_mod=flex.causal_mask()), "page_table"),
                      (plan(q, q, q, kernel="fa4-sm100", num_splits=2, score_mod=flex.softcap_mod(5.0)),
                       "num_splits=2")):
        why = twin.refusal(call)
        assert why is not None and arg in why and "dense calls only" in why, why


def _flex_validate_module():
    spec = importlib.util.spec_from_file_location("twin_flex_validate",
                                                  ROOT / "experiments/gpu/twin_flex_validate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_gpu_flex_validation_covers_every_builtin_and_the_goldens():
    """experiments/gpu/twin_flex_validate.py's CPU side: its cases cover every built-in the twin runs on both
    kernels, bf16 and fp16, 128 to 8192 tokens, and the twin takes each; it finds the SM90 flex goldens the twin
    takes (every forward record, block-sparse ones included, but the two mods written as lambdas and the block-sparse
    document masks)."""
    from fa4num.attention import _twin_flex
    val = _flex_validate_module()
    cs = val.cases()
    assert len(cs) >= 10
    for kernel in ("fa4-sm90", "fa4-sm100"):
        mine = [c for c in cs if c["kernel"] == kernel]
        kinds = {c["mods"][a][0] for c in mine for a in ("score_mod", "mask_mod") if a in c["mods"]}
        assert kinds == set(_twin_flex.SCORE_MOD_KINDS) | set(_twin_flex.MASK_MOD_KINDS), kernel
        assert {c["dtype"] for c in mine} == {"bfloat16", "float16"}
        assert min(c["sq"] for c in mine) == 128 and max(c["sq"] for c in mine) == 8192
    for c in cs:    # every case runs but the block-sparse document masks, which the twin refuses
        q, k, v, kw = val.case_call(c)
        why = twin.refusal(plan(q, k, v, **kw))
        assert (why is not None) == ("sparse-document" in c["name"]), (c["name"], why)
    if not val.GOLDEN.exists():
        pytest.skip("the SM90 flex golden file is absent")
    recs, cap = val.golden_records()
    names = {r[0]["case"]["name"].split(".", 1)[1] for r in recs}
    every = {r["case"]["name"].split(".", 1)[1] for r in cap.read(val.GOLDEN)[1]["cases"] if "error" not in r}
    assert names == every - {"sm_identity_d128", "sm_times_two_d64", "bs_document_d128", "bs_document_nofull_d128"}
    assert any(n.startswith("bs_") for n in names)


_INTERP_GOLDEN = r"""
import json, os, sys
os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, "experiments/gpu")
import numpy as np
import twin_flex_validate as val
from fa4num.attention import plan, twin
recs, cap = val.golden_records()
out = {}
for rec, kw, arrs in recs:
    if rec["case"]["name"] in sys.argv[1:]:
        res = twin.forward_on(plan(arrs["q"], arrs["k"], arrs["v"], **kw), device="cuda")
        got = {"out": cap._sha(res.out.view(np.uint16)), "lse": cap._sha(res.lse)}
        out[rec["case"]["name"]] = {n: got[n] == rec["sha256"][n] for n in got}
print(json.dumps(out))
"""


@pytest.mark.slow
@pytest.mark.skipif(not (ROOT / "tests/golden/attention/fa4_sm90_flex_h200.npz").exists(),
                    reason="the SM90 flex golden file is absent")
def test_twin_in_the_interpreter_gives_the_real_kernels_flex_bits():
    """The twin's kernel (Triton's interpreter, fa4num's instruction models) on a golden record of the real FA4
    SM90 kernel with a mask_mod (sliding_window_mask(64, 0), 333 tokens, d 64): the kernel's SHA-256 of out and
    LSE, as the H200 captured them."""
    name = "dev.mm_window64_0_d64"
    proc = subprocess.run([sys.executable, "-c", _INTERP_GOLDEN, name], capture_output=True, text=True,
                          timeout=1500, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {name: {"out": True, "lse": True}}
