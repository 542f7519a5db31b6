"""Storage of measured MUFU tables: exact, compact, with provenance, one file per GPU architecture.

A table is a uint32 array of fp32 result bits indexed by a 23-bit argument (see fa4num.hw.mufu for what each
index means). Stored as its first value plus first differences in the narrowest integer type that holds them
(the tables are monotone and smooth, so the differences are tiny integers), inside an npz compressed with lzma.
Decoding is integer cumulative sums: exact on every platform, with no libm involved. The file also holds the
provenance JSON of the GPU run that measured it. ``fa4num mufu build`` writes these files.
"""
from __future__ import annotations

import io
import json
import lzma
from pathlib import Path

import numpy as np

FORMAT = "fa4num-mufu-tables/1"
DATA_DIR = Path(__file__).resolve().parent / "data"


def table_path(arch: str) -> Path:
    return DATA_DIR / f"mufu_{arch}.npz.xz"


def tanh_table_path(arch: str) -> Path:
    """The ``tanh.approx.f32`` description of ``arch`` (fa4num.hw.tanh), same format, its own file: it is not
    part of the ex2/rcp/lg2 set that :func:`available_archs` lists."""
    return DATA_DIR / f"tanh_{arch}.npz.xz"


def _narrow(d: np.ndarray) -> np.ndarray:
    for dt in (np.int8, np.int16, np.int32):
        info = np.iinfo(dt)
        if d.size == 0 or (d.min() >= info.min and d.max() <= info.max):
            return d.astype(dt)
    return d.astype(np.int64)


def encode(tables: dict, provenance: dict) -> bytes:
    arrays = {"__meta__": np.frombuffer(json.dumps({"format": FORMAT, "provenance": provenance}).encode(),
                                        dtype=np.uint8)}
    for name, t in tables.items():
        t = np.asarray(t, np.uint32).astype(np.int64)
        arrays[f"{name}.first"] = t[:1].astype(np.uint32)
        arrays[f"{name}.diff"] = _narrow(np.diff(t))
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return lzma.compress(buf.getvalue(), preset=9 | lzma.PRESET_EXTREME)


def decode(blob: bytes) -> tuple[dict, dict]:
    """(tables name -> uint32 array, header dict with 'format' and 'provenance')."""
    npz = np.load(io.BytesIO(lzma.decompress(blob)))
    meta = json.loads(npz["__meta__"].tobytes())
    if meta.get("format") != FORMAT:
        raise ValueError(f"MUFU table format must be {FORMAT!r}, got {meta.get('format')!r}")
    tables = {}
    for key in npz.files:
        if key.endswith(".first"):
            name = key[:-6]
            d = npz[f"{name}.diff"].astype(np.int64)
            t = np.empty(d.size + 1, np.int64)
            t[0] = int(npz[key][0])
            np.cumsum(d, out=t[1:])
            t[1:] += t[0]
            tables[name] = t.astype(np.uint32)
    return tables, meta


def save(arch: str, tables: dict, provenance: dict, path=None) -> Path:
    path = Path(path) if path is not None else table_path(arch)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encode(tables, provenance))
    return path


def load(arch: str, path=None) -> tuple[dict, dict]:
    path = Path(path) if path is not None else table_path(arch)
    if not path.exists():
        raise ValueError(f"arch {arch!r} has no MUFU table file {path.name}; available: {available_archs()} "
                         f"(build one on that GPU with `fa4num mufu build --arch {arch}`)")
    return decode(path.read_bytes())


def available_archs() -> list[str]:
    """Architectures with a shipped MUFU table set (files fa4num/hw/data/mufu_<arch>.npz.xz).

    Parameters
    ----------
    None

    Returns
    -------
    list of str, sorted

    Examples
    --------
    >>> "sm90" in available_archs()
    True
    """
    return sorted(p.name[len("mufu_"):-len(".npz.xz")] for p in DATA_DIR.glob("mufu_*.npz.xz"))
