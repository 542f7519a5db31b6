"""Dask as its users expect (issue 25, item 5): a clear error within a timeout when no worker joins, the
dashboard's address printed, one input's threshold scan kept on one worker."""
from __future__ import annotations

import pytest

from fa4num.study import grid as gridmod
from fa4num.study import runner, store

pytest.importorskip("distributed")

ECHO = gridmod.parse_grid({"study": "echo", "axes": [{"x": [1, 2]}]})


def test_no_worker_is_a_clear_error_within_the_timeout(tmp_path, capsys):
    from dask.distributed import LocalCluster

    from fa4num.cli import main
    with LocalCluster(n_workers=0, dashboard_address=None) as empty:
        with pytest.raises(TimeoutError, match=r"no Dask worker joined tcp://.* within 1 s; start one .*"
                                               r"dask worker tcp://\S+ --nthreads 1 --resources GPU=1"):
            runner.run_grid(ECHO, tmp_path / "a", scheduler=empty.scheduler_address, progress=False,
                            worker_timeout=1)
        p = tmp_path / "g.toml"
        p.write_text('study = "echo"\n[[axes]]\nx = [1]\n')
        assert main(["study", "run", str(p), "--out", str(tmp_path / "b"), "--scheduler", empty.scheduler_address,
                     "--worker-timeout", "1", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("fa4num: error: scheduler: no Dask worker joined") and err.count("\n") == 1
    with pytest.raises(TimeoutError, match="cannot reach the Dask scheduler at tcp://127.0.0.1:9"):
        runner.run_grid(ECHO, tmp_path / "c", scheduler="tcp://127.0.0.1:9", progress=False, worker_timeout=1)
    assert not store.part_files(tmp_path / "a") and not (tmp_path / "b").exists()


def test_local_cluster_prints_its_dashboard(tmp_path, capsys):
    pytest.importorskip("bokeh")
    res = runner.run_grid(ECHO, tmp_path / "d", scheduler="local:1", progress=True)
    assert res.line == "2 tasks: 2 computed, 0 cached"
    assert "Dask dashboard: http://" in capsys.readouterr().err
