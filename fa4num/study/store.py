"""The result store: a Parquet dataset (a directory of ``part-*.parquet`` files), one row per task.

Each row holds the task's ``key`` (see :func:`fa4num.study.grid.config_key`), ``study``, the configuration
columns, the metrics and provenance columns. Rows are appended as new part files while a run goes on (an
interrupted run keeps what it finished), and :func:`compact` rewrites the dataset as one file. Any Parquet reader
reads the directory (``pandas.read_parquet(DIR)`` with pyarrow).
"""
from __future__ import annotations

import os
import uuid
from pathlib import Path

PART_GLOB = "part-*.parquet"


def part_files(out) -> list[Path]:
    return sorted(Path(out).glob(PART_GLOB))


def store_dirs(root, pattern: str) -> list[Path]:
    """Result stores (directories holding part files) whose name matches ``pattern`` anywhere under ``root`` (GPU
    runs may sit in a subfolder), sorted."""
    return sorted(p for p in Path(root).glob(f"**/{pattern}") if p.is_dir() and any(p.glob(PART_GLOB)))


def merged_skip_rows(dirs):
    """Rows of several skip-rate stores; where two hold the same task (same key), a GPU row wins over a CPU row
    (the GPU run is the reference run of the full grid)."""
    import pandas as pd
    df = pd.concat([read_store(d) for d in dirs], ignore_index=True, sort=False)
    df = df.assign(_gpu=df.device.astype(str).str.startswith("cuda")).sort_values("_gpu", kind="stable")
    return df.drop_duplicates("key", keep="last").drop(columns="_gpu").reset_index(drop=True)


def stored_keys(out) -> set[str]:
    """Keys of the rows already in the dataset (only the key column is read)."""
    import pyarrow.parquet as pq
    keys: set[str] = set()
    for p in part_files(out):
        keys.update(pq.read_table(p, columns=["key"]).column("key").to_pylist())
    return keys


def read_store(out):
    """The whole result store (every Parquet part file under ``out``) as one pandas DataFrame.

    Parts written by different runs may differ in columns (a study that gained a metric): they are aligned by
    name, missing values NaN/None.

    Parameters
    ----------
    out : str or Path
        The store's folder (``fa4num study run ... --out``).

    Returns
    -------
    pandas.DataFrame
        Empty, with no columns, when there is no part file.

    Examples
    --------
    >>> import tempfile
    >>> read_store(tempfile.mkdtemp()).shape
    (0, 0)
    """
    import pandas as pd
    import pyarrow.parquet as pq
    parts = [pq.read_table(p).to_pandas() for p in part_files(out)]
    if not parts:
        return pd.DataFrame()
    return pd.concat(parts, ignore_index=True, sort=False)


def write_rows(out, rows) -> Path | None:
    """Append ``rows`` (a list of dicts or a DataFrame) as one new part file (atomically: written under a
    temporary name, then renamed)."""
    import pandas as pd
    df = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
    if df.empty:
        return None
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    name = out / f"part-{uuid.uuid4().hex[:12]}.parquet"
    tmp = name.with_suffix(".tmp")
    try:
        df.to_parquet(tmp, index=False)
        os.replace(tmp, name)
    except BaseException:   # an interrupt mid-write leaves no partial file behind
        tmp.unlink(missing_ok=True)
        raise
    return name


def compact(out) -> Path | None:
    """Rewrite the dataset as a single part file (last row wins per key); returns it (None if empty)."""
    parts = part_files(out)
    if len(parts) <= 1:
        return parts[0] if parts else None
    df = read_store(out).drop_duplicates("key", keep="last").reset_index(drop=True)
    new = write_rows(out, df)
    for p in parts:
        p.unlink()
    return new
