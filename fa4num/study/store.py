"""The result store: a Parquet dataset (a directory of ``part-*.parquet`` files), one row per task.

Each row holds the task's ``key`` (see :func:`fa4num.study.grid.config_key`), ``study``, the configuration
columns, the metrics and provenance columns. How the store stays trustworthy:

- every writer (a ``study run`` client) appends rows as new part files of its own, named
  ``part-CLIENT-SEQ-SHA.parquet``: CLIENT is unique to the process (host, pid, random), SEQ counts its parts and
  SHA is the first 32 hex digits of the file's SHA-256. A part is written under a hidden temporary name, synced
  and renamed, so it appears whole or not at all, and any later change to its bytes (a flipped bit) is caught by
  :func:`verify`, and by every read, which refuses a corrupt part;
- two clients may compute the same task: reads (:func:`read_store`, :func:`stored_keys`) deduplicate by key,
  so a task counts once however many parts hold it;
- :func:`compact` rewrites the live parts as one part whose Parquet metadata lists the parts it replaces, and
  only then deletes them: a crash between the two leaves parts that every reader already ignores, and the next
  compaction or ``verify --repair`` deletes;
- compaction and repair hold an exclusive lock on ``DIR/.lock`` (``flock``), writers and readers a shared one,
  so that no reader opens a part that a compaction is deleting (where the file system has no working locks,
  a reader whose part vanished lists the parts again).

Any Parquet reader reads the directory (``pandas.read_parquet(DIR)``; hidden temporary files and the lock are
skipped), but only :func:`read_store` deduplicates and skips replaced parts; compact first for other readers.
Parts of stores written before the checksums (``part-<12 hex>.parquet``) are read, and reported as unchecked.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import socket
import uuid
from dataclasses import dataclass, field
from pathlib import Path

PART_GLOB = "part-*.parquet"
LOCK_NAME = ".lock"
_TMP_GLOB = ".tmp-*.parquet"
_NAME = re.compile(r"^part-(?P<client>[A-Za-z0-9.]+)-(?P<seq>\d+)-(?P<sha>[0-9a-f]{32})\.parquet$")
_REPLACES = b"fa4num.replaces"   # Parquet key-value metadata of a compacted part: JSON list of the part names
_KEYS = b"fa4num.keys"            # ... of every part: its task keys, which survive a flipped bit in the data pages
_CLIENT: list = []                # [pid, client id, next seq] of this process


class CorruptStoreError(ValueError):
    """A part file of a result store fails its checksum or cannot be read as Parquet."""


def _client() -> tuple[str, int]:
    """This process's client id and the next part number (a forked child gets its own id)."""
    pid = os.getpid()
    if not _CLIENT or _CLIENT[0] != pid:
        host = re.sub(r"[^A-Za-z0-9]", "", socket.gethostname())[:24] or "host"
        _CLIENT[:] = [pid, f"{host}.{pid}.{uuid.uuid4().hex[:6]}", 0]
    _CLIENT[2] += 1
    return _CLIENT[1], _CLIENT[2]


@contextlib.contextmanager
def _lock(out: Path, *, exclusive: bool, create: bool = True):
    """flock on DIR/.lock. Readers pass ``create=False``: a store that no writer of this format has touched
    (a read-only or packaged one) has no lock file and gets none."""
    try:
        import fcntl
    except ImportError:          # no flock (Windows): reads still deduplicate and retry
        yield
        return
    try:
        fd = os.open(out / LOCK_NAME, (os.O_RDWR | os.O_CREAT) if create else os.O_RDONLY, 0o644)
    except FileNotFoundError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)             # closing releases the lock (and a killed process's lock is released too)


def part_files(out) -> list[Path]:
    """Every part file of the store (live, replaced or corrupt), sorted by name."""
    return sorted(Path(out).glob(PART_GLOB))


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:32]


def check_part(path) -> str | None:
    """Why the part file ``path`` cannot be trusted ("checksum mismatch", "not Parquet: ..."), or None.

    A part written before the checksums (no SHA in its name) is checked only for being readable Parquet.
    """
    import pyarrow.parquet as pq
    path = Path(path)
    m = _NAME.match(path.name)
    if m is not None and _sha(path) != m["sha"]:
        return "checksum mismatch"
    try:
        pq.read_metadata(path)
    except Exception as exc:  # noqa: BLE001 - any unreadable footer is corruption
        return f"not Parquet: {' '.join(str(exc).split())[:120]}"
    return None


@dataclass
class _Scan:
    live: list = field(default_factory=list)        # parts to read
    replaced: list = field(default_factory=list)    # parts a compacted part replaces (left by a crash)
    corrupt: list = field(default_factory=list)     # (path, reason)
    unchecked: list = field(default_factory=list)   # parts without a checksum in their name
    temps: list = field(default_factory=list)       # temporary files of writers that died


def _scan(out: Path) -> _Scan:
    import pyarrow.parquet as pq
    s = _Scan()
    good, replaced = [], set()
    for p in part_files(out):
        why = check_part(p)
        if why is not None:
            s.corrupt.append((p, why))
            continue
        if _NAME.match(p.name) is None:
            s.unchecked.append(p)
        good.append(p)
        meta = pq.read_schema(p).metadata or {}
        if _REPLACES in meta:
            replaced.update(json.loads(meta[_REPLACES]))
    s.live = [p for p in good if p.name not in replaced]
    s.replaced = [p for p in good if p.name in replaced]
    s.temps = sorted(out.glob(_TMP_GLOB))
    return s


def _corrupt_error(out, corrupt) -> CorruptStoreError:
    names = ", ".join(f"{p.name} ({why})" for p, why in corrupt)
    return CorruptStoreError(f"store {out}: corrupt part file(s) {names}; run `fa4num study verify {out} --repair` "
                             "to drop them (their tasks then re-run)")


def _read_live(out: Path, columns=None):
    """Concatenated rows of the live parts, under a shared lock; CorruptStoreError on a corrupt part."""
    import pandas as pd
    import pyarrow.parquet as pq
    for attempt in range(3):
        try:
            with _lock(out, exclusive=False, create=False):
                s = _scan(out)
                if s.corrupt:
                    raise _corrupt_error(out, s.corrupt)
                parts = [pq.read_table(p, columns=columns).to_pandas() for p in s.live]
            break
        except FileNotFoundError:   # a compaction on a host without working locks deleted a part: list again
            if attempt == 2:
                raise
    if not parts:
        return pd.DataFrame()
    return pd.concat(parts, ignore_index=True, sort=False)


def store_dirs(root, pattern: str) -> list[Path]:
    """Result stores (directories holding part files) whose name matches ``pattern`` anywhere under ``root`` (GPU
    runs may sit in a subfolder), sorted."""
    return sorted(p for p in Path(root).glob(f"**/{pattern}") if p.is_dir() and any(p.glob(PART_GLOB)))


def device_used(df):
    """The torch device each skip-rate row ran on: ``device_used``, or ``device`` in stores written before the
    metric was renamed (it had overwritten the ``device`` parameter)."""
    dev = df["device"].astype(str) if "device" in df else None
    if "device_used" not in df:
        return dev
    used = df["device_used"]
    return used.where(used.notna(), dev).astype(str) if dev is not None else used.astype(str)


def merged_skip_rows(dirs):
    """Rows of several skip-rate stores; where two hold the same task (same key), a GPU row wins over a CPU row
    (the GPU run is the reference run of the full grid)."""
    import pandas as pd
    df = pd.concat([read_store(d) for d in dirs], ignore_index=True, sort=False)
    df = df.assign(_gpu=device_used(df).str.startswith("cuda")).sort_values("_gpu", kind="stable")
    return df.drop_duplicates("key", keep="last").drop(columns="_gpu").reset_index(drop=True)


def stored_keys(out) -> set[str]:
    """Keys of the rows already in the store (only the key column of the live parts is read).

    Raises CorruptStoreError when a part is corrupt: a run must not recompute on top of a damaged store
    without saying so (``fa4num study verify DIR --repair`` drops the part).
    """
    out = Path(out)
    if not out.is_dir():
        return set()
    df = _read_live(out, columns=["key"])
    return set(df["key"]) if not df.empty else set()


def read_store(out):
    """The result store under ``out`` as one pandas DataFrame, one row per task key.

    Parts written by different runs may differ in columns (a study that gained a metric): they are aligned by
    name, missing values NaN/None. A key stored twice (two clients computed the same task) gives one row, the
    one in the last part by name; parts a compaction replaced are skipped.

    Parameters
    ----------
    out : str or Path
        The store's folder (``fa4num study run ... --out``).

    Returns
    -------
    pandas.DataFrame
        Empty, with no columns, when there is no part file.

    Raises
    ------
    CorruptStoreError
        (a ValueError) naming the parts that fail their checksum or are not Parquet.

    Examples
    --------
    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> read_store(d).shape
    (0, 0)
    >>> _ = write_rows(d, [{"key": "a", "x": 1}]); _ = write_rows(d, [{"key": "a", "x": 1}, {"key": "b", "x": 2}])
    >>> read_store(d).shape
    (2, 2)
    """
    out = Path(out)
    if not out.is_dir():
        import pandas as pd
        return pd.DataFrame()
    df = _read_live(out)
    if df.empty or "key" not in df:
        return df
    return df.drop_duplicates("key", keep="last").reset_index(drop=True)


def write_rows(out, rows, *, replaces=()) -> Path | None:
    """Append ``rows`` (a list of dicts or a DataFrame) as one new part file of this client, atomically (written
    under a hidden temporary name, synced, renamed to a name holding its checksum); None when there are no rows.

    ``replaces``: names of the parts this one supersedes (compaction), kept in its Parquet metadata.
    """
    import pandas as pd
    df = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
    if df.empty:
        return None
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with _lock(out, exclusive=False):
        return _write_part(out, df, replaces)


def _write_part(out: Path, df, replaces) -> Path:
    # the caller holds the store's lock (shared for a writer, exclusive for a compaction)
    import pyarrow as pa
    import pyarrow.parquet as pq
    table = pa.Table.from_pandas(df, preserve_index=False)
    meta = dict(table.schema.metadata or {})
    if "key" in df:
        meta[_KEYS] = json.dumps(sorted(set(df["key"]))).encode()
    if replaces:
        meta[_REPLACES] = json.dumps(sorted(replaces)).encode()
    table = table.replace_schema_metadata(meta)
    client, seq = _client()
    tmp = out / f".tmp-{client}-{seq:06d}.parquet"
    try:
        pq.write_table(table, tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        name = out / f"part-{client}-{seq:06d}-{_sha(tmp)}.parquet"
        os.replace(tmp, name)
    except BaseException:   # an interrupt mid-write leaves no partial file behind
        tmp.unlink(missing_ok=True)
        raise
    _sync_dir(out)
    return name


def _sync_dir(out: Path):
    # the rename itself must reach the disk before the parts it replaces are deleted
    try:
        fd = os.open(out, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def compact(out) -> Path | None:
    """Rewrite the live parts as one part (one row per key); returns it (None if the store is empty).

    Crash-safe: the new part names the parts it replaces and is in place before any of them is deleted; a
    store with one live part and nothing left over is not rewritten. A corrupt part stops it
    (CorruptStoreError): ``fa4num study verify DIR --repair`` first.
    """
    out = Path(out)
    if not out.is_dir():
        return None
    parts = part_files(out)
    if len(parts) <= 1 and not any(out.glob(_TMP_GLOB)):
        return parts[0] if parts else None     # nothing to do: no lock file is created (packaged stores)
    with _lock(out, exclusive=True):
        s = _scan(out)
        if s.corrupt:
            raise _corrupt_error(out, s.corrupt)
        if len(s.live) <= 1:
            for p in s.replaced + s.temps:      # only a dead writer leaves files while we hold the lock
                p.unlink(missing_ok=True)
            return s.live[0] if s.live else None
        import pandas as pd
        import pyarrow.parquet as pq
        df = pd.concat([pq.read_table(p).to_pandas() for p in s.live], ignore_index=True, sort=False)
        df = df.drop_duplicates("key", keep="last").reset_index(drop=True)
        old = s.live + s.replaced
        new = _write_part(out, df, [p.name for p in old])
        for p in old + s.temps:
            p.unlink(missing_ok=True)
        return new


@dataclass
class VerifyReport:
    """What :func:`verify_store` found: ``parts`` (number of part files), ``rows`` (distinct task keys in the live
    parts), ``corrupt`` ((part name, reason, keys it held or None when unreadable) per corrupt part),
    ``lost_keys`` (keys of corrupt parts that no other part holds: those tasks re-run), ``duplicates`` (extra
    copies of keys, counted once by reads), ``replaced`` (parts left by an interrupted compaction),
    ``temps`` (temporary files of writers that died), ``unchecked`` (parts without a checksum) and whether
    ``repaired``."""
    out: Path
    parts: int
    rows: int
    corrupt: list
    lost_keys: list
    duplicates: int
    replaced: list
    temps: list
    unchecked: list
    repaired: bool

    @property
    def ok(self) -> bool:
        """No corrupt part left (leftovers of crashes are harmless: reads skip them)."""
        return not self.corrupt or self.repaired


def _keys_of(path: Path):
    """The task keys a corrupt part held: from its key column, else from its footer's key list, else None."""
    import pyarrow.parquet as pq
    try:
        return sorted(set(pq.read_table(path, columns=["key"]).column("key").to_pylist()))
    except Exception:  # noqa: BLE001 - a corrupt part may not parse at all
        pass
    try:
        return json.loads((pq.read_schema(path).metadata or {})[_KEYS])
    except Exception:  # noqa: BLE001
        return None


def verify_store(out, *, repair: bool = False) -> VerifyReport:
    """Check every part of a store against its checksum; with ``repair``, delete corrupt parts, parts left by an
    interrupted compaction and temporary files of dead writers (under the store's exclusive lock).

    Parameters
    ----------
    out : str or Path
        The store's folder.
    repair : bool
        Drop what cannot be trusted. The tasks of a dropped part re-run on the next ``study run``.

    Returns
    -------
    VerifyReport

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> d = Path(tempfile.mkdtemp())
    >>> p = write_rows(d, [{"key": "a", "x": 1}])
    >>> verify_store(d).corrupt
    []
    >>> b = bytearray(p.read_bytes()); b[40] ^= 1; _ = p.write_bytes(bytes(b))   # flip one bit
    >>> r = verify_store(d, repair=True)
    >>> r.corrupt[0][1], r.lost_keys, list(d.glob("part-*"))
    ('checksum mismatch', ['a'], [])
    """
    out = Path(out)
    if not out.is_dir():
        raise ValueError(f"out: {out} is not a folder; give the --out folder of a `fa4num study run`")
    with _lock(out, exclusive=repair, create=repair):
        n_parts = len(part_files(out))
        s = _scan(out)
        corrupt = [(p.name, why, _keys_of(p)) for p, why in s.corrupt]
        import pyarrow.parquet as pq
        keys = [k for p in s.live for k in pq.read_table(p, columns=["key"]).column("key").to_pylist()]
        have = set(keys)
        lost = sorted({k for _, _, ks in corrupt for k in (ks or ()) if k not in have})
        if repair:
            for p in [p for p, _ in s.corrupt] + s.replaced + s.temps:
                p.unlink(missing_ok=True)
    return VerifyReport(out, n_parts, len(have), corrupt, lost, len(keys) - len(have), [p.name for p in s.replaced],
                        [p.name for p in s.temps], [p.name for p in s.unchecked], repair)
