"""experiments/skip_granularity.py on a tiny store: the table holds every granularity with CIs over seeds, the
definitions and their version, and the sources of the "~90 %"; its shares are the stored counters' ratios."""
from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

from fa4num.study import read_store, run_grid

ROOT = Path(__file__).resolve().parents[2]
GRID = """study = "skip_rate"
[fixed]
heads = 2
head_dim = 64
device = "cpu"
[[axes]]
dist = ["rising", "llm"]
seqlen = [256, 512]
seed = [0, 1, 2]
threshold = [8]
"""


def test_table_and_figure_from_a_store(tmp_path):
    grid = tmp_path / "g.toml"
    grid.write_text(GRID)
    store = tmp_path / "store"
    run_grid(grid, store, scheduler="none", progress=False)
    spec = importlib.util.spec_from_file_location("skip_granularity", ROOT / "experiments" / "skip_granularity.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out, fig = tmp_path / "t.json", tmp_path / "f.png"
    assert mod.main(["--store", str(store), "--out", str(out), "--figure", str(fig)]) == 0
    rec = json.loads(out.read_text())
    assert fig.stat().st_size > 0 and out.with_suffix(".md").read_text().count("| rising |") == 2
    assert rec["skip_definition_version"] == 2 and all(s["url"].startswith("https://") for s in rec["claim_sources"])
    assert len(rec["rows"]) == 4 and {"provenance", "definitions"} <= set(rec)
    df = read_store(store)
    for r in rec["rows"]:
        g = df[(df.dist == r["dist"]) & (df.seqlen == r["seqlen"])]
        assert r["seeds"] == 3 and r["avoided_share_warp"]["n"] == 3
        for gran in ("row", "warp", "tile"):
            per_seed = 1 - g[f"rescales_{gran}"] / g[f"events_{gran}"]
            c = r[f"avoided_share_{gran}"]
            assert math.isclose(c["mean"], per_seed.mean()) and c["lo"] <= c["mean"] <= c["hi"]
        assert r["mults_ballot_over_always"] == g.rescales_warp.sum() / g.rescale_steps.sum()
