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
from .grid import RESERVED_COLUMNS, Grid, config_key, load_grid

FLUSH_SECONDS = 5.0     # finished rows are written at least this often (a killed client loses at most these)


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
    """("local", n_workers or None) | ("local-gpu", n_workers or None) | ("none", None) | ("address", None);
    ValueError on anything else."""
    s = str(scheduler)
    if s == "none":
        return "none", None
    for kind in ("local", "local-gpu"):
        if s == kind or s.startswith(kind + ":"):
            n = s.partition(":")[2]
            if n and (not n.isdigit() or int(n) < 1):
                raise ValueError(f"scheduler '{kind}:N' needs N >= 1 workers, got {s!r}")
            return kind, int(n) if n else None
    if "://" in s or (":" in s and s.rsplit(":", 1)[1].isdigit()):
        return "address", None
    raise ValueError(f"scheduler must be 'local', 'local:N', 'local-gpu', 'local-gpu:N', 'none' or a Dask scheduler address "
                     f"(tcp://HOST:PORT), got {s!r}")


def execute_task(study: str, config: dict) -> dict:
    """Run one task where it is scheduled: the study's metrics plus where (``host``, ``worker``) and how long
    (``seconds``: the study call; a worker's first task includes importing what the study imports) it ran.

    A metric named like a configuration parameter or a store column (:data:`~fa4num.study.grid.RESERVED_COLUMNS`)
    is refused (ValueError): it would overwrite that column, and a row whose key or configuration is overwritten
    is never found again by a rerun.
    """
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
    clash = sorted(set(metrics) & (set(config) | set(RESERVED_COLUMNS)))
    if clash:
        raise ValueError(f"study {study!r} returned metric(s) {clash}, which are also configuration parameters or "
                         f"store columns ({', '.join(RESERVED_COLUMNS)}); rename the metric(s)")
    row = dict(metrics)
    row.update(host=socket.gethostname(), worker=worker, seconds=round(time.perf_counter() - t0, 4),
               finished=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    return row


def execute_group(study: str, configs: list) -> list:
    """Run tasks that share one input, one after the other in one process (see :func:`task_groups`): per task
    ``("ok", row)`` or ``("error", "Type: message")``, so that one failing configuration does not lose the
    others."""
    out = []
    for cfg in configs:
        try:
            out.append(("ok", execute_task(study, cfg)))
        except Exception as exc:  # noqa: BLE001 - reported per task by the client
            out.append(("error", f"{type(exc).__name__}: {exc}"))
    return out


def task_groups(study: str, todo: list) -> list:
    """``todo`` ((key, config) pairs) split into groups that one worker runs together, in order.

    A study whose function has a ``scan_together`` attribute (axis names) computes all values of those axes
    from one pass over an input (``skip_rate``: the nine thresholds from one input's block maxima): tasks that
    differ only there form one group, so that Dask does not spread one input over several workers, each
    recomputing it. Other studies: one task per group.

    Examples
    --------
    >>> todo = [("a", {"seed": 0, "threshold": 0}), ("b", {"seed": 1, "threshold": 0}),
    ...         ("c", {"seed": 0, "threshold": 8})]
    >>> [[k for k, _ in g] for g in task_groups("skip_rate", todo)]
    [['a', 'c'], ['b']]
    >>> len(task_groups("echo", todo))
    3
    """
    from .studies import resolve_study
    together = tuple(getattr(resolve_study(study), "scan_together", ()))
    if not together:
        return [[t] for t in todo]
    groups: dict = {}
    for key, cfg in todo:
        shared = tuple(sorted((k, repr(v)) for k, v in cfg.items() if k not in together))
        groups.setdefault(shared, []).append((key, cfg))
    return list(groups.values())


def _single_threaded(nthreads: int):
    # one CPU-bound task per worker thread: torch's intra-op pool would otherwise oversubscribe the cores. A
    # worker that has not imported torch yet gets the limit through the variable torch reads at import (importing
    # torch here would cost seconds to every study that does not use it)
    n = max(1, nthreads)
    torch = sys.modules.get("torch")
    if torch is None:
        os.environ["OMP_NUM_THREADS"] = str(n)
    elif torch.get_num_threads() != n:
        torch.set_num_threads(n)


class Terminated(KeyboardInterrupt):
    """SIGTERM during :func:`run_grid` called from Python (the ``fa4num`` command has its own handler): raised
    like Ctrl-C's KeyboardInterrupt, so that the finished rows are stored before the process ends."""


def _raise_terminated(signum, frame):
    raise Terminated()


def run_grid(grid, out, *, scheduler: str = "local", progress: bool = True, compact: bool = True,
             client=None, worker_timeout: float = 60.0) -> RunSummary:
    """Compute the tasks of ``grid`` that ``out`` does not hold yet and store their rows.

    Finished rows are written at least every :data:`FLUSH_SECONDS` and on Ctrl-C or SIGTERM (rows that had
    finished on a Dask worker included), so an interrupted run keeps them and its rerun computes only the rest.

    Parameters
    ----------
    grid : Grid, str or Path
        A :class:`~fa4num.study.grid.Grid` or a grid file / name (``"smoke"``).
    out : str or Path
        The Parquet dataset directory (created if needed).
    scheduler : str
        "local" (default), "local:N", "none", or a Dask scheduler address; ignored when ``client`` is given.
    progress : bool
        Show a progress bar (tqdm, or dask's when tqdm is missing) and the Dask dashboard's address on stderr.
    compact : bool
        Rewrite the dataset as one file at the end.
    client : dask.distributed.Client, optional
        Use this client (the caller owns it).
    worker_timeout : float
        Seconds to wait for the first Dask worker (to connect to a scheduler, then for a worker to join it)
        before a TimeoutError.

    Returns
    -------
    RunSummary
        Its ``line`` is ``"N tasks: C computed, K cached"``.

    Raises
    ------
    TimeoutError
        When no worker joins the Dask scheduler within ``worker_timeout``.
    fa4num.study.store.CorruptStoreError
        When a part of ``out`` fails its checksum (``fa4num study verify DIR --repair``).

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
    import signal
    import threading
    g = grid if isinstance(grid, Grid) else load_grid(grid)
    out = Path(out)
    kind, n_workers = parse_scheduler(scheduler) if client is None else ("client", None)
    if not worker_timeout > 0:
        raise ValueError(f"worker_timeout must be > 0 seconds, got {worker_timeout!r}")
    from .studies import resolve_study, study_version
    resolve_study(g.study)                      # a bad study name fails before any work is scheduled
    version = study_version(g.study)
    # the store's modules now, not at the first flush: a Ctrl-C during that import would leave pandas half
    # imported, and the flush that follows the interrupt could not store the finished rows
    import pandas  # noqa: F401
    import pyarrow.parquet  # noqa: F401
    have = store.stored_keys(out)
    todo = []
    for cfg in g.tasks:
        key = config_key(g.study, cfg, version)
        if key not in have:
            todo.append((key, cfg))
    cached = len(g.tasks) - len(todo)
    from .grid import _signature
    params = {k for cfg in g.tasks for k in cfg} | set(_signature(g.study)[0])   # what may become a column
    from fa4num.provenance import code_revision
    base = {"study": g.study, "study_version": version, "grid": g.name, "code_revision": code_revision()}
    t0 = time.perf_counter()
    failed: list = []
    pending: list = []
    finished: set = set()
    last_flush = [time.perf_counter()]

    def flush():
        store.write_rows(out, pending)
        pending.clear()
        last_flush[0] = time.perf_counter()

    def finish(key, cfg, status, row):
        if key in finished:      # a group collected again after an interrupt cut its collection short
            return
        finished.add(key)
        if status == "ok":
            # a metric named like a parameter that this task leaves at its default, or that another block sets,
            # would fill that configuration column in the store
            clash = sorted((set(row) & params) - set(cfg))
            if clash:
                status, row = "error", (f"ValueError: study {g.study!r} returned metric(s) {clash}, which are "
                                        "parameters of the study or the grid; rename the metric(s)")
        if status != "ok":
            failed.append((cfg, row))
            return
        pending.append({"key": key, **base, **cfg, **row})
        if time.perf_counter() - last_flush[0] > FLUSH_SECONDS:
            flush()

    groups = task_groups(g.study, todo)
    bar = _bar(len(todo), g.name, progress)
    term = (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL)
    if term:
        signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        if todo and kind == "none":
            for group in groups:
                for key, cfg in group:     # one by one: Ctrl-C keeps every task finished before it
                    try:
                        finish(key, cfg, "ok", execute_task(g.study, cfg))
                    except Exception as exc:  # noqa: BLE001 - one failing configuration must not lose the others
                        finish(key, cfg, "error", f"{type(exc).__name__}: {exc}")
                    bar.update()
        elif todo:
            _run_dask(g, groups, scheduler, n_workers, client, finish, flush, bar, progress, worker_timeout)
    finally:
        # also on Ctrl-C or SIGTERM: the finished rows are stored, so that a rerun computes only the rest
        bar.close()
        flush()
        if term:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if compact and out.exists():
        store.compact(out)
    return RunSummary(g.name, out, len(g.tasks), len(todo) - len(failed), cached, failed,
                      time.perf_counter() - t0)


def _gpu_count() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _pin_gpu(gpus: int) -> int:
    """On a LocalCluster worker: make GPU (worker name mod gpus) torch's current device; returns its index."""
    import torch
    from dask.distributed import get_worker
    name = get_worker().name
    index = (int(name) if str(name).isdigit() else 0) % gpus
    torch.cuda.set_device(index)
    return index


def _run_dask(g, groups, scheduler, n_workers, client, finish, flush, bar, progress, worker_timeout):
    from dask.distributed import Client, LocalCluster, as_completed
    cluster = own = None
    if client is None:
        kind = parse_scheduler(scheduler)[0]
        if kind in ("local", "local-gpu"):
            # workers import fa4num from where this process does (a checkout that is not installed)
            root = str(Path(__file__).resolve().parents[2])
            os.environ["PYTHONPATH"] = os.pathsep.join([root] + [p for p in
                                                                 os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
            import importlib.util
            # the dashboard needs bokeh (the `study` extra); without it Dask would only warn
            dash = ":0" if importlib.util.find_spec("bokeh") is not None else None
            gpus = _gpu_count() if kind == "local-gpu" else 0
            if kind == "local-gpu" and not gpus:
                raise ValueError("scheduler 'local-gpu': no CUDA GPU here (torch.cuda.is_available() is False)")
            extra = {"resources": {"GPU": 1}} if gpus else {}
            cluster = _quiet_cluster(LocalCluster, n_workers=n_workers or gpus or os.cpu_count() or 1,
                                     threads_per_worker=1, processes=True, dashboard_address=dash,
                                     silence_logs=logging.ERROR, **extra)
            own = Client(cluster)
            if gpus:
                # LocalCluster names its workers 0..n-1: worker i computes on GPU i mod gpus (two workers may
                # share one GPU)
                own.run(_pin_gpu, gpus)
        else:
            try:
                own = Client(scheduler, timeout=worker_timeout)
            except OSError as exc:
                raise TimeoutError(f"scheduler: cannot reach the Dask scheduler at {scheduler} within "
                                   f"{worker_timeout:g} s ({exc}); start one with `dask scheduler`") from None
        client = own
    futures: dict = {}
    done: set = set()
    try:
        try:
            client.wait_for_workers(1, timeout=worker_timeout)
        except (TimeoutError, OSError):
            raise TimeoutError(f"scheduler: no Dask worker joined {client.scheduler.address} within "
                               f"{worker_timeout:g} s; start one per GPU on each host with `dask worker "
                               f"{client.scheduler.address} --nthreads 1 --resources GPU=1`") from None
        if progress and client.dashboard_link:
            print(f"Dask dashboard: {client.dashboard_link}", file=sys.stderr, flush=True)
        # workers that declare a GPU resource (`dask worker --resources GPU=1`) run one task group each at a time
        gpu = any("GPU" in w.get("resources", {}) for w in client.scheduler_info()["workers"].values())
        extra = {"resources": {"GPU": 1}} if gpu else {}
        futures = {client.submit(execute_group, g.study, [c for _, c in grp], key=f"{g.name}-{grp[0][0]}",
                                 pure=False, **extra): grp for grp in groups}
        try:
            for fut in as_completed(futures):
                _collect(fut, futures[fut], finish, bar)
                done.add(fut)
        except KeyboardInterrupt:
            # rows that finished on a worker but had not been collected yet are kept too
            for fut, grp in futures.items():
                if fut not in done and fut.status == "finished":
                    _collect(fut, grp, finish, bar)
            raise
    finally:
        flush()              # before the cluster goes down, which may take long or be interrupted again
        if own is not None:
            own.close()
        if cluster is not None:
            cluster.close()


def _collect(fut, group, finish, bar):
    try:
        results = fut.result()
    except Exception as exc:  # noqa: BLE001 - a lost worker or an unpicklable result fails the group's tasks
        results = [("error", f"{type(exc).__name__}: {exc}")] * len(group)
    for (key, cfg), (status, row) in zip(group, results):
        finish(key, cfg, status, row)
        bar.update()


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
