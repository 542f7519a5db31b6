"""fa4num.softmax.sm100 against FA4's SM100 softmax instruction sequence run on an H200 (Triton twin,
experiments/gpu/fa4_softmax_sm100_twin.py): the first rows of every distribution explicitly here, all
>= 10^6 rows through the stored SHA-256 digests in the slow test."""
import hashlib
import importlib.util
import json
import pathlib

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("fa4_twin", ROOT / "experiments/gpu/fa4_softmax_sm100_twin.py")
twin = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(twin)
_Z = np.load(twin.GOLDEN)
_META = json.loads(str(_Z["meta"]))
CASES = [(c["config"], c["dist"]) for c in _META["cases"]]


def test_twin_golden_covers_a_million_rows():
    assert sum(c["rows"] for c in _META["cases"]) >= 10 ** 6
    assert {"gaussian", "outliers", "sink", "jumps", "masked"} <= {d for _, d in CASES}


@pytest.mark.parametrize("config,dist", CASES)
def test_sm100_softmax_first_rows_match_h200(config, dist):
    cfg = twin.CONFIGS[config]
    s = twin._scores(dist, cfg)[:_META["golden_rows"]]
    out, _ = twin.emulate(s, cfg)
    bad = {k: int((v != _Z[f"{config}.{dist}.{k}"]).sum()) for k, v in out.items()}
    assert not any(bad.values()), bad


@pytest.mark.slow
@pytest.mark.parametrize("config,dist", CASES)
def test_sm100_softmax_all_rows_match_h200_digests(config, dist):
    cfg = twin.CONFIGS[config]
    s = twin._scores(dist, cfg)
    parts = [twin.emulate(s[r:r + 32768], cfg)[0] for r in range(0, len(s), 32768)]
    case = next(c for c in _META["cases"] if (c["config"], c["dist"]) == (config, dist))
    for k in twin.KEYS:
        full = np.concatenate([p[k] for p in parts])
        assert hashlib.sha256(full.tobytes()).hexdigest() == case["sha256"][k], k
