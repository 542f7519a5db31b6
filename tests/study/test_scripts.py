"""CPU checks of the study's GPU scripts (experiments/gpu/skip_rate_h200.py, baselines_h200.py) and of the
baseline table code: the logic the lead's H200 run depends on."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from fa4num.attention import reference
from fa4num.study.baselines import attention_fp64_torch, baseline_table, load_baselines

ROOT = Path(__file__).resolve().parents[2]


def _script(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "experiments" / "gpu" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_skip_rate_script_small(tmp_path):
    mod = _script("skip_rate_h200")
    assert mod.main(["--out", str(tmp_path), "--max-seqlen", "1024", "--seeds", "1", "--dists", "llm"]) == 0
    df = pd.read_parquet(tmp_path / "study_skip_rate_h200")
    assert sorted(df.threshold) == [0, 1, 2, 4, 6, 8, 10, 12, 16]
    assert (df.rescale_events == df.rescale_events.iloc[0]).all() and df.causal.all()
    done = df.sort_values("threshold").rescales_done.to_numpy()
    assert done[0] == df.rescale_events.iloc[0] and (np.diff(done) <= 0).all()   # larger threshold, fewer
    rec = json.loads((tmp_path / "skip_rate_h200.json").read_text())
    assert rec["computed"] == 9 and rec["per_seqlen"]["1024"]["tasks"] == 9


def test_fp64_torch_reference_and_baseline_records(tmp_path, attention_case):
    q, k, v = attention_case(seqlen_q=96, seqlen_k=160, heads=4, heads_kv=2, head_dim=32, causal=True, q_mult=2.0,
                             seed=5)
    out, lse = reference.attention_fp64(q, k, v, causal=True)
    t = [torch.from_numpy(a.astype(np.float32)) for a in (q, k, v)]
    out_t, lse_t = attention_fp64_torch(*t, causal=True)
    np.testing.assert_allclose(out_t.numpy(), out, rtol=0, atol=1e-12)
    np.testing.assert_allclose(lse_t.numpy(), lse, rtol=0, atol=1e-12)
    mod = _script("baselines_h200")
    rec = mod.run_shape((1, 128, 2, 1, 64, True, "float16", 1.0), device="cpu", backends=("math",), warmup=0,
                        repeats=1, seed=0)
    assert rec["runs"]["math"]["metrics"]["rel_l2"] >= rec["floor"]["rel_l2"] * 0.5
    p = tmp_path / "b.json"
    p.write_text(json.dumps([rec]))
    df = load_baselines([p])
    assert list(df.backend) == ["SDPA math"] and df["shape"].iloc[0] == "1x128x2/1x64 causal fp16"
    assert "SDPA math" in baseline_table(df)


def test_report_section_uses_committed_smoke_results(tmp_path):
    from fa4num.study._report import report_section
    secs = report_section(tmp_path)
    smoke = secs[0]
    assert "16 tasks: 0 computed, 16 cached" in smoke.markdown   # the committed store is complete
    assert all((tmp_path / f).exists() for f in smoke.figures) and len(smoke.figures) == 3
    assert "| sink | 4096 | 8 | 2 |" in smoke.markdown


def test_merged_skip_rows_prefer_gpu_rows(tmp_path):
    from fa4num.study import store
    from fa4num.study.store import merged_skip_rows
    from fa4num.study.summary import mean_ci
    store.write_rows(tmp_path / "a", [{"key": "k1", "device": "cuda", "x": 1}, {"key": "k2", "device": "cpu", "x": 2}])
    store.write_rows(tmp_path / "b", [{"key": "k1", "device": "cpu", "x": 3}, {"key": "k3", "device": "cpu", "x": 4}])
    df = merged_skip_rows([tmp_path / "a", tmp_path / "b"]).set_index("key")
    assert df.x.to_dict() == {"k1": 1, "k2": 2, "k3": 4}
    m, lo, hi, n = mean_ci([0.5, 0.5, 0.5])
    assert (m, lo, hi, n) == (0.5, 0.5, 0.5, 3)
    assert np.isnan(mean_ci([1.0])[1])
