"""Run a grid's missing tasks on Dask (or in this process) and store one row per task.

Schedulers:
- ``"local"`` / ``"local:N"``: an embedded ``dask.distributed.LocalCluster`` of N single-threaded worker
  processes (N defaults to the number of CPU cores);
- ``"tcp://HOST:PORT"`` (any address ``dask.distributed.Client`` accepts): an existing cluster, whose workers
  must be able to import fa4num;
- ``"none"``: every task in this process, one after the other, without importing Dask (for machines without it,
  such as the GPU machine, and for debugging).

dask is imported only when a Dask scheduler is used.
"""
from __future__ import annotations

import datetime as _dt
import logging
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from . import store
from .grid import Grid, config_key, load_grid

FLUSH_SECONDS = 20.0    # finished rows are written at least this often (an interrupted run keeps them)


@dataclass
class RunSummary:
    """What :func:`run_grid` did: ``total`` tasks, ``computed`` now, ``cached`` from earlier runs, ``failed``."""
    grid: str
    out: Path
    total: int
    computed: int
    cached: int
    failed: list
    seconds: float

    @property
    def line(self) -> str:
        return f"{self.total} tasks: {self.computed} computed, {self.cached} cached"


def parse_scheduler(scheduler: str) -> tuple[str, int | None]:
    """("local", n_workers or None) | ("none", None) | ("address", None); ValueError on anything else."""
    s = str(scheduler)
    if s == "none":
        return "none", None
    if s == "local" or s.startswith("local:"):
        n = s.partition(":")[2]
        if n and (not n.isdigit() or int(n) < 1):
            raise ValueError(f"scheduler 'local:N' needs N >= 1 workers, got {s!r}")
        return "local", int(n) if n else None
    if "://" in s or (":" in s and s.rsplit(":", 1)[1].isdigit()):
        return "address", None
    raise ValueError(f"scheduler must be 'local', 'local:N', 'none' or a Dask scheduler address "
                     f"(tcp://HOST:PORT), got {s!r}")


def execute_task(study: str, config: dict) -> dict:
    """Run one task where it is scheduled: the study's metrics plus where and how long it ran."""
    from .studies import resolve_study
    fn = resolve_study(study)
    worker = "local"
    try:
        from distributed import get_worker
        w = get_worker()
        worker = w.address
        _single_threaded(w.state.nthreads if hasattr(w, "state") else 1)
    except (ImportError, ValueError):
        pass
    t0 = time.perf_counter()
    metrics = fn(**config)
    row = dict(metrics)
    row.update(host=socket.gethostname(), worker=worker, seconds=round(time.perf_counter() - t0, 4),
               finished=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    return row


def _single_threaded(nthreads: int):
    # one CPU-bound task per worker thread: torch's intra-op pool would otherwise oversubscribe the cores
    import torch
    if torch.get_num_threads() != max(1, nthreads):
        torch.set_num_threads(max(1, nthreads))


def run_grid(grid, out, *, scheduler: str = "local", progress: bool = True, compact: bool = True,
             client=None) -> RunSummary:
    """Compute the tasks of ``grid`` that ``out`` does not hold yet and store their rows.

    Parameters
    ----------
    grid : Grid, str or Path
        A :class:`~fa4num.study.grid.Grid` or a grid file / name (``"smoke"``).
    out : str or Path
        The Parquet dataset directory (created if needed).
    scheduler : str
        "local" (default), "local:N", "none", or a Dask scheduler address; ignored when ``client`` is given.
    progress : bool
        Show a progress bar (tqdm, or dask's when tqdm is missing) on stderr.
    compact : bool
        Rewrite the dataset as one file at the end.
    client : dask.distributed.Client, optional
        Use this client (the caller owns it).

    Returns
    -------
    RunSummary
        Its ``line`` is ``"N tasks: C computed, K cached"``.

    Examples
    --------
    >>> import tempfile
    >>> from fa4num.study.grid import parse_grid
    >>> g = parse_grid({"study": "fa4num.study.studies:echo", "axes": [{"x": [1, 2]}]})
    >>> d = tempfile.mkdtemp()
    >>> run_grid(g, d, scheduler="none", progress=False).line
    '2 tasks: 2 computed, 0 cached'
    >>> run_grid(g, d, scheduler="none", progress=False).line
    '2 tasks: 0 computed, 2 cached'
    """
    g = grid if isinstance(grid, Grid) else load_grid(grid)
    out = Path(out)
    kind, n_workers = parse_scheduler(scheduler) if client is None else ("client", None)
    from .studies import resolve_study, study_version
    resolve_study(g.study)                      # a bad study name fails before any work is scheduled
    version = study_version(g.study)
    have = store.stored_keys(out) if out.exists() else set()
    todo = []
    for cfg in g.tasks:
        key = config_key(g.study, cfg, version)
        if key not in have:
            todo.append((key, cfg))
    cached = len(g.tasks) - len(todo)
    from fa4num.provenance import code_revision
    base = {"study": g.study, "study_version": version, "grid": g.name, "code_revision": code_revision()}
    t0 = time.perf_counter()
    failed: list = []
    pending: list = []
    last_flush = time.perf_counter()

    def finish(key, cfg, row):
        nonlocal last_flush
        pending.append({"key": key, **base, **cfg, **row})
        if time.perf_counter() - last_flush > FLUSH_SECONDS:
            store.write_rows(out, pending)
            pending.clear()
            last_flush = time.perf_counter()

    bar = _bar(len(todo), g.name, progress)
    try:
        if todo and kind == "none":
            for key, cfg in todo:
                try:
                    finish(key, cfg, execute_task(g.study, cfg))
                except Exception as exc:  # noqa: BLE001 - one failing configuration must not lose the others
                    failed.append((cfg, f"{type(exc).__name__}: {exc}"))
                bar.update()
        elif todo:
            _run_dask(g, todo, scheduler, n_workers, client, finish, failed, bar)
    finally:
        # also on Ctrl-C or SIGTERM: the finished rows are stored, so that a rerun computes only the rest
        bar.close()
        store.write_rows(out, pending)
    if compact and out.exists():
        store.compact(out)
    return RunSummary(g.name, out, len(g.tasks), len(todo) - len(failed), cached, failed,
                      time.perf_counter() - t0)


def _run_dask(g, todo, scheduler, n_workers, client, finish, failed, bar):
    from dask.distributed import Client, LocalCluster, as_completed
    cluster = own = None
    if client is None:
        if parse_scheduler(scheduler)[0] == "local":
            # workers import fa4num from where this process does (a checkout that is not installed)
            root = str(Path(__file__).resolve().parents[2])
            os.environ["PYTHONPATH"] = os.pathsep.join([root] + [p for p in
                                                                 os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
            cluster = _quiet_cluster(LocalCluster, n_workers=n_workers or os.cpu_count() or 1, threads_per_worker=1,
                                     processes=True, dashboard_address=None, silence_logs=logging.ERROR)
            own = Client(cluster)
        else:
            own = Client(scheduler)
        client = own
    try:
        futures = {client.submit(execute_task, g.study, cfg, key=f"{g.name}-{key}", pure=False): (key, cfg)
                   for key, cfg in todo}
        for fut in as_completed(futures):
            key, cfg = futures[fut]
            try:
                finish(key, cfg, fut.result())
            except Exception as exc:  # noqa: BLE001
                failed.append((cfg, f"{type(exc).__name__}: {exc}"))
            bar.update()
    finally:
        if own is not None:
            own.close()
        if cluster is not None:
            cluster.close()


def _quiet_cluster(make, **kwargs):
    """``make(**kwargs)`` with SIGINT ignored while the worker processes start: they inherit it, so that Ctrl-C
    (which the terminal sends to the whole process group) reaches only this process, which stops the cluster and
    says so in one line, instead of every worker printing its own KeyboardInterrupt traceback."""
    import signal
    import threading
    if threading.current_thread() is not threading.main_thread():
        return make(**kwargs)
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return make(**kwargs)
    finally:
        signal.signal(signal.SIGINT, old)


class _NoBar:
    def update(self, n=1):
        pass

    def close(self):
        pass


def _bar(total: int, name: str, progress: bool):
    if not progress or total == 0:
        return _NoBar()
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _PrintBar(total, name)
    return tqdm(total=total, desc=f"study {name}", unit="task", file=sys.stderr)


class _PrintBar:
    """Progress without tqdm: one stderr line every 10 % (the GPU machine has no tqdm)."""

    def __init__(self, total, name):
        self.total, self.name, self.n, self.next = total, name, 0, 0

    def update(self, n=1):
        self.n += n
        if self.n >= self.next:
            print(f"study {self.name}: {self.n}/{self.total} tasks", file=sys.stderr, flush=True)
            self.next = self.n + max(1, self.total // 10)

    def close(self):
        pass
