"""Grids are validated before any work (issue 25, item 4): every error names the key; metric names that would
overwrite a configuration or store column are refused; `study summary` refuses to pool configurations."""
from __future__ import annotations

import pytest

from fa4num.study import grid as gridmod
from fa4num.study import runner, store
from fa4num.study.summary import check_seed_pooling, summarize

SKIP = {"dist": "sink", "seqlen": 256, "threshold": 8}


def _parse(fixed=None, axes=None, **top):
    return gridmod.parse_grid({"study": "skip_rate", "fixed": fixed or {}, "axes": axes or [{}], **top}, name="t")


@pytest.mark.parametrize("doc,match", [
    ({"fixed": SKIP, "axes": [{"seeds": [0, 1]}]}, r"takes no parameter 'seeds' \(axes block 0\); did you mean 'seed'"),
    ({"fixed": {**SKIP, "tile": 64}}, r"takes no parameter 'tile' \(\[fixed\]\)"),
    ({"fixed": SKIP, "axes": [{"seed": [0, 1.0]}]}, r"'seed' \(axes block 0\) of study skip_rate must be an int, "
                                                    r"got 1.0"),
    ({"fixed": {**SKIP, "seed": 0.5}}, r"'seed' \(\[fixed\]\) .* must be an int"),
    ({"fixed": {"dist": "sink", "threshold": 8}, "axes": [{"seqlen": ["256"]}]}, r"'seqlen' .* must be an int, "
                                                                               r"got '256' \(str\)"),
    ({"fixed": {"dist": "sink", "seqlen": 256}, "axes": [{"threshold": [0, "8"]}]}, r"'threshold' .* must be a float"),
    ({"fixed": {"dist": "sink", "seqlen": 256}, "axes": [{"threshold": [0, 8.5]}]}, r"'threshold' mixes value "
                                                                                   r"types: 0 \(int, axes block 0\)"),
    ({"fixed": {"seqlen": 256, "threshold": 8}, "axes": [{"dist": ["sink"]}, {"dist": [1]}]},
     r"'dist' .* must be a str"),
    ({"fixed": SKIP, "axes": [{"seed": []}]}, r"axis 'seed' \(axes block 0\) must be a non-empty list"),
    ({"fixed": SKIP, "axes": [{"seed": 3}]}, r"axis 'seed' \(axes block 0\) must be a non-empty list"),
    ({"fixed": {**SKIP, "heads": [1, 2]}}, r"'heads' \(\[fixed\]\) .* got a list .*not under \[fixed\]"),
    ({"fixed": SKIP, "axes": [{"seed": [[0]]}]}, r"'seed' \(axes block 0\) must be a bool, int, float or string"),
    ({"fixed": {"dist": "sink", "seqlen": 256}, "axes": [{"seed": [0]}]}, r"needs parameter\(s\) \['threshold'\]"),
    ({"fixed": {**SKIP, "key": "x"}}, r"parameter 'key' \(\[fixed\]\) is a column every stored row has"),
    ({"fixed": SKIP, "axes": [{"seed": [0]}], "description": 3}, r"'description' must be a string"),
    ({"fixed": SKIP, "axes": "seed"}, r"'axes' must be a table"),
])
def test_bad_grids_name_the_key(doc, match):
    with pytest.raises(ValueError, match=match):
        gridmod.parse_grid({"study": "skip_rate", **doc}, name="t")


def test_grid_size_limit_counts_before_building(tmp_path, capsys):
    from fa4num.cli import main
    huge = {"fixed": {"dist": "sink"}, "axes": [{"seqlen": list(range(1000)), "threshold": list(range(1000)),
                                                 "seed": list(range(1000))}]}
    with pytest.raises(ValueError, match=r"grid t: 1000000000 tasks, over the limit of 20000; pass --yes"):
        _parse(**huge)   # refused at once: 10^9 tasks are never built
    small = {"study": "skip_rate", "fixed": {"dist": "sink", "threshold": 8},
             "axes": [{"seqlen": [1, 2], "seed": [0, 1, 2]}]}
    assert len(gridmod.parse_grid(small)) == len(gridmod.parse_grid(small, max_tasks=None)) == 6
    with pytest.raises(ValueError, match="over the limit of 5"):
        gridmod.parse_grid(small, max_tasks=5)
    p = tmp_path / "big.toml"
    p.write_text('study = "echo"\n[[axes]]\na = [' + ", ".join(map(str, range(200))) + "]\nb = ["
                 + ", ".join(map(str, range(101))) + "]\n")
    assert main(["study", "run", str(p), "--out", str(tmp_path / "o"), "--scheduler", "none"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fa4num: error: grid big: 20200 tasks, over the limit of") and err.count("\n") == 1
    assert not (tmp_path / "o").exists()          # nothing was run
    assert str(gridmod.MAX_TASKS) in _help(["study", "run", "--help"])   # the help states the real limit


def _help(argv):
    import contextlib
    import io

    from fa4num.cli import main
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), pytest.raises(SystemExit):
        main(argv)
    return buf.getvalue().replace("\n", " ")


def test_shipped_grids_are_valid():
    # every shipped grid passes the full validation (what `study list` loads)
    assert {g.name for g in gridmod.list_grids()} >= {"smoke", "skip_rate", "error_budget"}


def test_metrics_cannot_overwrite_config_or_store_columns(tmp_path, monkeypatch):
    (tmp_path / "clash.py").write_text(
        "def seedy(x, seed=0):\n    return {'seed': 7, 'y': x}\n"           # a configuration parameter
        "def keyed(x):\n    return {'key': 'same', 'y': x}\n"                # the store's key column
        "def other(x=0, z=0):\n    return {'z': x}\n")                       # another block's parameter
    monkeypatch.syspath_prepend(str(tmp_path))
    for study, axes, bad in (("clash:seedy", [{"x": [1, 2, 3]}], "['seed']"),
                             ("clash:keyed", [{"x": [1, 2, 3]}], "['key']"),
                             ("clash:other", [{"x": [1, 2]}, {"z": [5]}], "['z']")):
        g = gridmod.parse_grid({"study": study, "axes": axes})
        out = tmp_path / study.replace(":", "_")
        res = runner.run_grid(g, out, scheduler="none", progress=False)
        clashing = [c for c, err in res.failed if bad in err and "rename" in err]
        assert clashing and len(res.failed) == len(clashing)
        # nothing overwritten was stored, so a rerun retries exactly those tasks
        assert len(store.read_store(out)) == len(g) - len(clashing)


def test_summary_counts_each_task_once_and_refuses_pooling(tmp_path):
    base = {"study": "skip_rate", "study_version": 1, "dist": "sink", "seqlen": 512, "threshold": 8,
            "heads": 2, "rescales_avoided_share": 0.5, "rescales_avoided": 1, "rescale_events": 2,
            "events_per_row": 1.0, "done_per_row": 0.5, "lag_q50": 0.0, "lag_q99": 1.0, "lag_max": 2.0,
            "device": "cpu"}
    out = tmp_path / "s"
    rows = [{**base, "key": f"k{s}", "seed": s, "rescales_avoided_share": 0.1 * s} for s in range(3)]
    store.write_rows(out, rows)
    store.write_rows(out, rows[:2])                    # a second client stored two of them again
    assert "| sink | 512 | 8 | 3 |" in summarize(out).markdown     # three seeds, not five
    store.write_rows(out, [{**base, "key": "k9", "seed": 9, "heads": 4}])
    with pytest.raises(ValueError, match=r"differ in 'heads' \(2, 4\): different configurations, not seeds"):
        summarize(out)
    import pandas as pd
    twice = pd.DataFrame([{**base, "key": "a", "seed": 0}, {**base, "key": "b", "seed": 0}])
    with pytest.raises(ValueError, match="repeat seed 0"):
        check_seed_pooling(twice, ["dist", "seqlen", "threshold"])
    versions = pd.DataFrame([{**base, "key": "a", "seed": 0}, {**base, "key": "b", "seed": 1, "study_version": 2}])
    with pytest.raises(ValueError, match="differ in 'study_version'"):
        check_seed_pooling(versions, ["dist", "seqlen", "threshold"])
