"""Fault tests of the study store and runner (issue 25): a Dask worker SIGKILLed mid-task, the client
interrupted (SIGINT, SIGTERM) or SIGKILLed, two clients on one store, a crash inside compaction, a flipped bit
in a part file. Each checks that no finished row is lost, no task is counted twice and corruption is reported.
Tiny grids of a study that sleeps: seconds each on 2 cores."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from _signals import terminal_sigint

from fa4num.study import grid as gridmod
from fa4num.study import runner, store

ROOT = Path(__file__).resolve().parents[2]

# x: the task; marks: a folder where each task leaves a file named x once its result is ready to return
FAULT_STUDY = textwrap.dedent("""
    import os, pathlib, signal, time

    def work(x, marks, sleep=0.0, kill_at=-1):
        m = pathlib.Path(marks)
        if x == kill_at and not (m / "killed").exists():
            (m / "killed").touch()
            os.kill(os.getpid(), signal.SIGKILL)   # the worker process dies mid-task, once
        time.sleep(sleep)
        (m / str(x)).touch()
        return {"y": 2 * x}
""")


@pytest.fixture
def study(tmp_path, monkeypatch):
    """The fault study importable here and in subprocesses and Dask workers (PYTHONPATH); its marks folder."""
    (tmp_path / "faultstudy.py").write_text(FAULT_STUDY)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), str(tmp_path)]))
    marks = tmp_path / "marks"
    marks.mkdir()
    return marks


def _grid(tmp_path, marks, xs, name="g", **fixed):
    fixed_toml = "".join(f"{k} = {v!r}\n" for k, v in fixed.items())
    p = tmp_path / f"{name}.toml"
    p.write_text(f'study = "faultstudy:work"\n[fixed]\nmarks = "{marks}"\n{fixed_toml}[[axes]]\nx = {list(xs)}\n')
    return p


def _marked(marks) -> set[int]:
    return {int(p.name) for p in marks.iterdir() if p.name.isdigit()}


def _xs(out) -> list[int]:
    return sorted(store.read_store(out)["x"]) if out.exists() else []


def _cli(*args, **kw):
    return subprocess.Popen([sys.executable, "-m", "fa4num.cli", "study", *map(str, args)], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=terminal_sigint, **kw)


def _wait(cond, timeout=60.0):
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < timeout, "timed out waiting"
        time.sleep(0.02)


def _complete(grid, out, n):
    """Rerun the grid in this process: it computes only what the store lacks; then each task is stored once."""
    before = _xs(out)
    res = runner.run_grid(grid, out, scheduler="none", progress=False)
    assert not res.failed and res.line == f"{n} tasks: {n - len(before)} computed, {len(before)} cached"
    df = store.read_store(out)
    assert sorted(df["x"]) == list(range(n)) and df["key"].is_unique and (df.y == 2 * df.x).all()
    assert not store.verify_store(out).corrupt


def test_worker_sigkill_reschedules_and_loses_nothing(tmp_path, study):
    pytest.importorskip("distributed")
    from dask.distributed import Client, LocalCluster
    g = _grid(tmp_path, study, range(6), kill_at=2)
    out = tmp_path / "res"
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        res = runner.run_grid(g, out, client=client, progress=False)
    assert (study / "killed").exists()                  # a worker did die holding task 2
    assert not res.failed and res.line == "6 tasks: 6 computed, 0 cached"
    df = store.read_store(out)
    assert sorted(df.x) == list(range(6)) and df["key"].is_unique and (df.y == 2 * df.x).all()


@pytest.mark.parametrize("sig,rc", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_client_interrupt_stores_every_finished_row(tmp_path, study, sig, rc):
    g = _grid(tmp_path, study, range(40), sleep=0.1)
    out = tmp_path / "res"
    proc = _cli("run", g, "--out", out, "--scheduler", "none", "--no-progress")
    _wait(lambda: len(_marked(study)) >= 5)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == rc and err.startswith("fa4num: "), err
    done, kept = _marked(study), _xs(out)
    # every task that had finished is stored, once; only the one running when the signal came may be missing
    assert len(kept) == len(set(kept)) and set(kept) <= done and done - set(kept) <= {max(done)}
    assert len(kept) >= 5
    _complete(g, out, 40)


def test_client_sigkill_keeps_flushed_rows(tmp_path, study):
    g = _grid(tmp_path, study, range(400), sleep=0.02)
    out = tmp_path / "res"
    proc = _cli("run", g, "--out", out, "--scheduler", "none", "--no-progress")
    _wait(lambda: bool(store.part_files(out)))         # the first periodic flush has happened
    proc.kill()
    proc.communicate(timeout=30)
    rep = store.verify_store(out)
    assert not rep.corrupt                               # a killed writer leaves at most a hidden temporary file
    kept = store.read_store(out)
    assert len(kept) > 0 and kept["key"].is_unique and set(kept.x) <= _marked(study)
    _complete(g, out, 400)
    after = store.read_store(out).set_index("key")
    # the flushed rows were kept as they were, not recomputed
    assert (after.loc[kept.key, "finished"].to_numpy() == kept.finished.to_numpy()).all()


def test_two_clients_on_one_store(tmp_path, study):
    # overlapping grids: both clients may compute x = 20..39; each finishes, and every task counts once
    a = _grid(tmp_path, study, range(0, 40), name="a", sleep=0.05)
    b = _grid(tmp_path, study, range(20, 60), name="b", sleep=0.05)
    out = tmp_path / "res"
    procs = [_cli("run", g, "--out", out, "--scheduler", "none", "--no-progress") for g in (a, b)]
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], results
    df = store.read_store(out)
    assert sorted(df.x) == list(range(60)) and df["key"].is_unique
    rep = store.verify_store(out)
    assert not rep.corrupt and rep.rows == 60 and rep.duplicates == 0   # each client compacted at its end
    # each task was computed at least once, and only the 20 shared ones can have been computed twice
    computed = [int(r[0].strip().split(": ")[1].split()[0]) for r in results]
    assert 60 <= sum(computed) <= 80, results
    store.compact(out)
    assert len(store.part_files(out)) == 1 and sorted(store.read_store(out).x) == list(range(60))


CRASH = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    from fa4num.study import store
    where = sys.argv[2]
    if where == "before-rename":      # the compacted part is written but not yet renamed into place
        os.replace = lambda a, b: os._exit(9)
    else:                             # the compacted part is in place, the old parts not yet deleted
        Path.unlink = lambda self, missing_ok=False: os._exit(9)
    store.compact(sys.argv[1])
""")


@pytest.mark.parametrize("where", ["before-rename", "before-delete"])
def test_crash_in_compaction(tmp_path, where):
    out = tmp_path / "res"
    for lo in (0, 5, 10):                                # three parts, each overlapping the previous
        store.write_rows(out, [{"key": f"k{i}", "x": i} for i in range(lo, lo + 8)])
    proc = subprocess.run([sys.executable, "-c", CRASH, str(out), where], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 9, proc.stderr
    rep = store.verify_store(out)
    assert not rep.corrupt and rep.rows == 18
    # a writer's temporary file, or the three parts the new one replaces: reported, and skipped by reads
    assert (len(rep.temps), len(rep.replaced)) == ((1, 0) if where == "before-rename" else (0, 3))
    df = store.read_store(out)
    assert sorted(df.x) == list(range(18)) and df["key"].is_unique   # nothing lost, nothing counted twice
    store.compact(out)                                               # the next compaction cleans up
    assert [p.name for p in out.iterdir() if not p.name.startswith(".lock")] == \
        [p.name for p in store.part_files(out)] and len(store.part_files(out)) == 1
    assert sorted(store.read_store(out).x) == list(range(18))


def test_flipped_bit_is_found_and_repair_reruns_its_tasks(tmp_path, study, capsys):
    from fa4num.cli import main
    g = _grid(tmp_path, study, range(12))
    out = tmp_path / "res"
    runner.run_grid(gridmod.load_grid(g), out, scheduler="none", progress=False)
    # split into two parts (x < 6, x >= 6) so that repair drops one and keeps the other
    df = store.read_store(out)
    for p in store.part_files(out):
        p.unlink()
    store.write_rows(out, df[df.x < 6])
    victim = store.write_rows(out, df[df.x >= 6])
    orig = victim.read_bytes()
    rng = random.Random(25)
    for bit in rng.sample(range(8 * len(orig)), 40) + [0, 8 * len(orig) - 1]:   # anywhere, ends included
        b = bytearray(orig)
        b[bit // 8] ^= 1 << (bit % 8)
        victim.write_bytes(bytes(b))
        assert [c[:2] for c in store.verify_store(out).corrupt] == [(victim.name, "checksum mismatch")], bit
    with pytest.raises(store.CorruptStoreError, match=victim.name):
        store.read_store(out)
    with pytest.raises(store.CorruptStoreError, match="verify"):
        runner.run_grid(gridmod.load_grid(g), out, scheduler="none", progress=False)
    assert main(["study", "verify", str(out)]) == 1
    text = capsys.readouterr().out
    assert f"corrupt: {victim.name} (checksum mismatch" in text
    assert main(["study", "verify", str(out), "--repair", "--grid", str(g)]) == 0
    text = capsys.readouterr().out
    assert "dropped" in text and "grid g: 6 of 12 tasks missing" in text
    assert all(f"x={x}" in text for x in range(6, 12))
    assert _xs(out) == list(range(6))
    _complete(g, out, 12)


def _writer(out, w, n):
    for i in range(n):
        store.write_rows(out, [{"key": f"w{w}-{i}", "x": i}, {"key": f"shared-{i}", "x": i}])
        if i % 3 == 0:
            store.compact(out)


def _reader(out, stop, res):
    seen, bad = 0, []
    while not stop.is_set():
        try:
            df = store.read_store(out)
        except Exception as exc:  # noqa: BLE001 - reported to the test
            bad.append(f"{type(exc).__name__}: {exc}")
            continue
        if len(df) < seen or (len(df) and not df["key"].is_unique):   # a row vanished, or one counted twice
            bad.append(f"{len(df)} rows after {seen}")
        seen = len(df)
    res.put(bad)


def test_concurrent_writers_compactions_and_reads(tmp_path):
    # three processes append and compact one store while a fourth reads it in a loop
    import multiprocessing as mp
    if "fork" not in mp.get_all_start_methods():
        pytest.skip("needs fork (the helpers are not importable by name under importlib mode)")
    ctx = mp.get_context("fork")
    out = tmp_path / "res"
    stop, res = ctx.Event(), ctx.Queue()
    reader = ctx.Process(target=_reader, args=(out, stop, res))
    reader.start()
    writers = [ctx.Process(target=_writer, args=(out, w, 10)) for w in range(3)]
    for p in writers:
        p.start()
    for p in writers:
        p.join(60)
    stop.set()
    bad = res.get(timeout=60)
    reader.join(10)
    assert [p.exitcode for p in writers] == [0, 0, 0] and bad == []
    df = store.read_store(out)
    assert len(df) == 3 * 10 + 10 and df["key"].is_unique
    assert not store.verify_store(out).corrupt
