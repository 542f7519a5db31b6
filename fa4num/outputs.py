"""Where commands write: output folders checked before the work starts, and written atomically.

A leaf module (standard library only). :func:`check_output_dir` fails at once, naming the option, when a folder
cannot be created or written (an existing file, a read-only parent), so that no computation is lost to a bad
path. :func:`atomic_dir` builds a folder's new content beside it and swaps it in only when complete, and
:func:`atomic_files` does the same for a few files added to a shared folder: an interrupted run (Ctrl-C,
SIGTERM, a crash) leaves what was there before exactly as it was, and no temporary folder. A folder that
:func:`atomic_dir` wrote holds a manifest (:data:`MANIFEST`) naming its entries, so that a later run replaces it
only when it holds nothing else: what fa4num did not write is never deleted (:func:`foreign_entries`).

Examples
--------
>>> import tempfile, pathlib
>>> root = pathlib.Path(tempfile.mkdtemp())
>>> with atomic_dir(root / "rep") as tmp:
...     _ = (tmp / "a.txt").write_text("new")
>>> sorted(p.name for p in (root / "rep").iterdir())
['.fa4num-manifest.json', 'a.txt']
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
from pathlib import Path

MANIFEST = ".fa4num-manifest.json"   # in each folder atomic_dir wrote: the entries it wrote there


def foreign_entries(path) -> list:
    """Names of the entries of folder ``path`` that :func:`atomic_dir` did not write (all of them when it holds
    no manifest); [] for a missing or empty folder.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> with atomic_dir(d / "rep") as tmp:
    ...     _ = (tmp / "a.txt").write_text("new")
    >>> foreign_entries(d / "rep")
    []
    >>> _ = (d / "rep" / "notes.txt").write_text("mine")
    >>> foreign_entries(d / "rep")
    ['notes.txt']
    """
    path = Path(path)
    if not path.is_dir():
        return []
    names = sorted(p.name for p in path.iterdir())
    try:
        owned = set(json.loads((path / MANIFEST).read_text())["entries"]) | {MANIFEST}
    except (OSError, ValueError, KeyError, TypeError):
        owned = set()
    return [n for n in names if n not in owned]


def check_output_dir(path, *, option: str = "--out", replace: bool = False) -> Path:
    """``path`` as a Path if it is (or can be created as) a writable folder; else ValueError naming ``option``.

    With ``replace=True`` (the folder will be replaced by :func:`atomic_dir`), an existing ``path`` must hold only
    what an earlier :func:`atomic_dir` wrote there: anything else is refused, never deleted.

    Examples
    --------
    >>> check_output_dir("/proc/version", option="--out")
    Traceback (most recent call last):
    ...
    ValueError: --out: /proc/version exists and is not a folder
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{option}: {path} exists and is not a folder")
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"{option}: cannot create {path}: {existing} is not a folder")
    if not _can_write(existing):
        raise ValueError(f"{option}: cannot write to {existing}" +
                         ("" if existing == path else f" (to create {path})"))
    if path.exists() and not os.access(path.parent if str(path.parent) else Path("."), os.W_OK | os.X_OK):
        # atomic_dir renames ``path`` itself, which needs its parent to be writable
        raise ValueError(f"{option}: cannot replace {path}: its parent folder is not writable")
    if replace and (foreign := foreign_entries(path)):
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise ValueError(f"{option}: {path} holds files fa4num did not write there ({shown}); they would be "
                         "deleted: give a new or empty folder, or move them out")
    return path


def _can_write(folder: Path) -> bool:
    """Try it: permission bits say nothing for root, and nothing about a read-only mount or a full quota."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".fa4num-probe-", dir=folder)
    except OSError:
        return False
    os.close(fd)
    os.unlink(probe)
    return True


@contextlib.contextmanager
def atomic_dir(path):
    """Yield an empty temporary folder beside ``path``; on success it replaces ``path`` (its old content is
    removed) and holds a manifest of what was written, on any exception or interrupt it is deleted and ``path``
    is left untouched. Check ``path`` first with ``check_output_dir(path, replace=True)``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        entries = sorted(p.name for p in tmp.iterdir() if p.name != MANIFEST)
        (tmp / MANIFEST).write_text(json.dumps({"written_by": "fa4num", "entries": entries}, indent=1) + "\n")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    with _signals_held():   # Ctrl-C or SIGTERM between the two renames would lose both folders
        old = None
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
            os.replace(path, old / path.name)
        os.replace(tmp, path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def _signals_held():
    """SIGINT and SIGTERM are delivered after the block, not inside it (main thread; elsewhere a no-op)."""
    import threading
    held = {signal.SIGINT, signal.SIGTERM}
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextlib.contextmanager
def atomic_files(folder):
    """Yield a temporary folder inside ``folder``; on success each file written there is renamed into
    ``folder`` (replacing a file of the same name), on any exception or interrupt none is."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".partial-", dir=folder))
    try:
        yield tmp
        for f in sorted(tmp.iterdir()):
            os.replace(f, folder / f.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
