"""fa4num.study: the block-maxima fast path against the bit-exact forward, the grid runner on a LocalCluster,
the result store and the grid format."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from fa4num.attention import forward
from fa4num.study import grid as gridmod
from fa4num.study import runner, store
from fa4num.study.skip import LAG_BINS_PER_UNIT, block_maxima, lazy_rescale_scan, scale_log2
from fa4num.study.studies import parse_knob, skip_rate

# (causal, seqlen_q, seqlen_k, heads, heads_kv, rescale_threshold): unaligned lengths, GQA, bottom-right causal
CASES = [(False, 300, 700, 2, 2, 8.0), (True, 700, 700, 4, 2, 8.0), (True, 500, 900, 2, 1, 0.0),
         (False, 384, 384, 2, 2, 2.0)]


def _events_brute_force(s: np.ndarray, tile_n: int) -> np.ndarray:
    """Per row: blocks, visited last to first, whose max exceeds every earlier visited key (plain loops)."""
    out = np.zeros(s.shape[0], np.int64)
    nblk = -(-s.shape[1] // tile_n)
    for r in range(s.shape[0]):
        best = -math.inf
        for n in range(nblk - 1, -1, -1):
            m = s[r, n * tile_n:(n + 1) * tile_n].max()
            if m == -math.inf:
                continue
            if best > -math.inf and m > best:
                out[r] += 1
            best = max(best, m)
    return out


@pytest.mark.parametrize("causal,sq,sk,h,hk,thr", CASES)
def test_block_maxima_scan_equals_forward(causal, sq, sk, h, hk, thr, attention_case):
    # q, k on the 1/8 grid: S is exact in fp32 in any order, so the fast path and forward see the same S and
    # their lazy-rescale decisions must agree row by row
    q, k, v = attention_case(kind="exact", seqlen_q=sq, seqlen_k=sk, heads=h, heads_kv=hk, causal=causal, q_mult=4.0,
                             seed=3)
    res = forward(q, k, v, causal=causal, kernel="fa4-sm100", mode="statistical", rescale_threshold=thr)
    qt, kt = (torch.from_numpy(a[0].astype(np.float32)) for a in (q, k))
    bm = block_maxima(qt, kt, causal=causal, device="cpu", chunk_elems=50_000)   # several row chunks
    scan = lazy_rescale_scan(bm, scale_log2=scale_log2(1 / 8), rescale_threshold=thr)
    st = res.stats
    done_fwd = st.rescales_done[0].reshape(-1)
    np.testing.assert_array_equal(scan.rescales_done, done_fwd)
    np.testing.assert_array_equal(scan.max_lag, st.max_lag[0].reshape(-1))
    if hasattr(st, "rescale_events"):
        np.testing.assert_array_equal(scan.rescale_events, st.rescale_events[0].reshape(-1))
    # events from S itself, by loops
    s = np.einsum("qhd,khd->hqk", q[0].astype(np.float64), np.repeat(k[0].astype(np.float64), h // hk, axis=1))
    if causal:
        s = np.where(np.arange(sk)[None, None, :] > np.arange(sq)[None, :, None] + (sk - sq), -np.inf, s)
    np.testing.assert_array_equal(scan.rescale_events, _events_brute_force(s.reshape(h * sq, sk), 128))
    assert (scan.rescales_done <= scan.rescale_events).all()
    if thr == 0:
        np.testing.assert_array_equal(scan.rescales_done, scan.rescale_events)
    else:
        assert scan.rescales_done.sum() < scan.rescale_events.sum()
        assert scan.max_lag.max() <= thr


def test_scan_lag_histogram_and_quantiles():
    m = torch.tensor([[9.0, 1.0, 4.0, 0.0], [0.0, 0.5, 0.25, 0.125]])
    r = lazy_rescale_scan(m, scale_log2=1.0, rescale_threshold=4.0)
    # row 0 visits 0, 4, 1, 9: lags 4, 4, 0; row 1 visits 0.125, 0.25, 0.5, 0: lags 0.125, 0.375, 0.375
    assert r.steps == 6
    assert r.lag_hist[0] == 1 and r.lag_hist[4 * LAG_BINS_PER_UNIT] == 2
    assert r.lag_quantile(1.0) == 4.0 and r.lag_quantile(0.0) == 0.0
    assert r.lag_sum == pytest.approx(8.875)
    with pytest.raises(ValueError, match="rescale_threshold"):
        lazy_rescale_scan(m, scale_log2=1.0, rescale_threshold=-1)


def test_skip_rate_threshold_zero_avoids_nothing():
    r0 = skip_rate(dist="rising", seqlen=640, threshold=0, heads=1, head_dim=64, device="cpu")
    r8 = skip_rate(dist="rising", seqlen=640, threshold=8, heads=1, head_dim=64, device="cpu")
    assert r0["rescale_events"] == r8["rescale_events"] > 0
    assert r0["rescales_avoided_share"] == 0.0 and r0["lag_max"] == 0.0
    assert 0 < r8["rescales_avoided_share"] <= 1


def _write_grid(tmp_path, text):
    p = tmp_path / "g.toml"
    p.write_text(text)
    return p


def test_grid_format_and_errors(tmp_path):
    g = gridmod.load_grid(_write_grid(tmp_path, 'study = "echo"\n[fixed]\na = 1\n[[axes]]\nb = [1, 2]\nc = ["x"]\n'
                                                '[[axes]]\nb = [2, 3]\nc = ["x"]\n'))
    assert [t["b"] for t in g.tasks] == [1, 2, 3] and all(t["a"] == 1 for t in g.tasks)
    with pytest.raises(ValueError, match="both fixed and an axis"):
        gridmod.parse_grid({"study": "echo", "fixed": {"a": 1}, "axes": [{"a": [1]}]})
    with pytest.raises(ValueError, match="non-empty list"):
        gridmod.parse_grid({"study": "echo", "axes": [{"a": []}]})
    with pytest.raises(ValueError, match="unknown top-level"):
        gridmod.parse_grid({"study": "echo", "axis": {}})
    with pytest.raises(ValueError, match="grid: expected a .toml file or one of"):
        gridmod.find_grid("no-such-grid")
    assert gridmod.config_key("echo", {"a": 1}) != gridmod.config_key("echo", {"a": 1}, version=2)
    for bad in ("local:0", "locale", "cluster"):
        with pytest.raises(ValueError, match="scheduler"):
            runner.parse_scheduler(bad)
    assert runner.parse_scheduler("tcp://10.0.0.1:8786") == ("address", None)
    assert parse_knob("ex2_emu_freq=0,coeffs=fa4-deg4") == {"ex2_emu_freq": 0, "coeffs": "fa4-deg4"}
    with pytest.raises(ValueError, match="knob"):
        parse_knob("threshold=8")


def test_cli_run_in_process_and_store(tmp_path, capsys):
    from fa4num.cli import main
    p = _write_grid(tmp_path, 'study = "echo"\n[[axes]]\nx = [1, 2, 3]\n')
    out = tmp_path / "res"
    assert main(["study", "run", str(p), "--out", str(out), "--scheduler", "none", "--no-progress",
                 "--no-compact"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == "3 tasks: 3 computed, 0 cached"
    store.write_rows(out, [{"key": "extra", "x": 9}])
    assert len(store.part_files(out)) == 2
    store.compact(out)
    assert len(store.part_files(out)) == 1
    assert sorted(store.read_store(out)["x"]) == [1, 2, 3, 9]
    p.write_text('study = "echo"\n[[axes]]\nx = [1, 2, 3, 4]\n')
    main(["study", "run", str(p), "--out", str(out), "--scheduler", "none", "--no-progress"])
    assert capsys.readouterr().out.strip().splitlines()[-1] == "4 tasks: 1 computed, 3 cached"


def test_smoke_grid_on_local_cluster(tmp_path):
    pytest.importorskip("distributed")
    from dask.distributed import Client, LocalCluster
    g = gridmod.load_grid("smoke")
    assert len(g) <= 16 and {0, 8} <= {t["threshold"] for t in g.tasks}
    out = tmp_path / "smoke"
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        first = runner.run_grid(g, out, client=client, progress=False)
        second = runner.run_grid(g, out, client=client, progress=False)
        # any scheduler address runs a grid, as `--scheduler tcp://HOST:PORT` does
        echo = gridmod.parse_grid({"study": "echo", "axes": [{"x": [1, 2, 3]}]})
        by_address = runner.run_grid(echo, tmp_path / "echo", scheduler=cluster.scheduler_address, progress=False)
    assert by_address.line == "3 tasks: 3 computed, 0 cached"
    assert store.read_store(tmp_path / "echo").worker.str.startswith("tcp://").all()   # ran on the workers
    assert first.line == f"{len(g)} tasks: {len(g)} computed, 0 cached" and not first.failed
    assert second.line == f"{len(g)} tasks: 0 computed, {len(g)} cached"
    df = pd.read_parquet(out)   # a Parquet dataset any reader opens
    assert len(df) == len(g) and df["key"].is_unique
    # one input's thresholds ran as one Dask task: its block maxima were computed once, on one worker
    assert (df.groupby(["dist", "seqlen", "seed"]).worker.nunique() == 1).all() and df.worker.nunique() == 2
    need = {"threshold", "seqlen", "dist", "seed", "rescale_events", "rescales_done", "rescales_avoided_share",
            "lag_q50", "lag_q90", "lag_q99", "lag_max", "code_revision", "host", "worker", "seconds"}
    assert need <= set(df.columns)
    t0 = df[df.threshold == 0]
    assert (t0.rescales_avoided_share == 0).all() and (t0.rescale_events > 0).all()
    t8 = df[df.threshold == 8]
    assert (t8.rescales_avoided_share > 0).all() and (t8.lag_max <= 8).all()
