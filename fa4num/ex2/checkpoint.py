"""Resumable sweeps: the finished chunks of a :func:`fa4num.ex2.engine.sweep` kept in a folder.

The folder holds ``state.npz``: the manifest (what is swept -- implementation, domain, chunk size, bins -- and
which chunks are finished, with the seconds they took) and the sweep's running totals after those chunks, in
one file replaced atomically after every chunk (``manifest.json`` is a readable copy of the manifest). An
interrupted sweep loses at most the chunk in flight; a
re-run with the same arguments skips the finished chunks and gives the same result as an uninterrupted run
(chunks are processed in the same order, so "first input where the maximum occurs" is kept too).

Examples
--------
>>> import tempfile
>>> from fa4num.ex2.engine import Domain, sweep
>>> folder = tempfile.mkdtemp()
>>> dom = Domain(lo=-1.0, hi=-0.5)
>>> r1 = sweep(domain=dom, chunk=1 << 20, progress=False, checkpoint=SweepCheckpoint(folder))
>>> again = SweepCheckpoint(folder)   # as if the first run had been interrupted after its last chunk
>>> r2 = sweep(domain=dom, chunk=1 << 20, progress=False, checkpoint=again)
>>> again.resumed_chunks, (r2.count, r2.max_ulp, r2.ulp_hist_linear) == (r1.count, r1.max_ulp, r1.ulp_hist_linear)
(9, True)
>>> again.remove()
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

SCHEMA = "fa4num-sweep-checkpoint/2"   # /2: totals are the arrays of fa4num.ex2.engine.Stats


class SweepCheckpoint:
    """Finished chunks of one sweep, in ``folder`` (created on the first save)."""

    def __init__(self, folder):
        self.folder = Path(folder)
        self.resumed_chunks = 0
        self.seconds_before = 0.0
        self._done: list = []
        self._key = None

    @property
    def finished(self) -> bool:
        """True while the folder holds finished chunks of an incomplete sweep."""
        return (self.folder / "state.npz").is_file()

    def start(self, key: dict, totals) -> set:
        """Restore ``totals`` (the engine's running :class:`~fa4num.ex2.engine.Stats`, modified in place) from a
        previous run of the same sweep (``key`` equal); return the ids of its finished chunks (empty when there is
        nothing to resume)."""
        self._key = json.loads(json.dumps(key, default=_plain))
        path = self.folder / "state.npz"
        if not path.is_file():
            return set()
        try:
            with np.load(path) as z:
                meta = json.loads(str(z["_manifest"]))
                arrays = {k: z[k] for k in z.files if k != "_manifest"}
        except (OSError, ValueError, KeyError):
            return set()   # unreadable: start afresh (the chunks are recomputed, nothing wrong is kept)
        if meta.get("schema") != SCHEMA or meta.get("key") != self._key:
            return set()   # another sweep's chunks: not ours to resume
        mine = totals.arrays()
        if set(arrays) != set(mine) or any(arrays[k].dtype != v.dtype or arrays[k].shape != v.shape
                                           for k, v in mine.items()):
            return set()
        for name, value in arrays.items():
            mine[name][...] = value
        self._done = [tuple(c) for c in meta["done"]]
        self.resumed_chunks = len(self._done)
        self.seconds_before = float(meta.get("seconds", 0.0))
        return set(self._done)

    def save(self, chunk_id: tuple, totals, seconds: float) -> None:
        """Record chunk ``chunk_id`` as finished with the running ``totals`` after it."""
        self._done.append(tuple(chunk_id))
        self.folder.mkdir(parents=True, exist_ok=True)
        arrays = totals.arrays()
        meta = {"schema": SCHEMA, "key": self._key, "done": self._done, "seconds": self.seconds_before + seconds}
        # the manifest travels inside the totals' file, so one rename publishes both: a crash can never pair a
        # chunk list with totals that include more (or fewer) chunks
        fd, tmp = tempfile.mkstemp(prefix=".state-", suffix=".npz", dir=self.folder)
        try:
            with os.fdopen(fd, "wb") as fh:
                np.savez(fh, _manifest=np.array(json.dumps(meta)), **arrays)
            os.replace(tmp, self.folder / "state.npz")
        except BaseException:
            os.unlink(tmp)
            raise
        (self.folder / "manifest.json").write_text(json.dumps(meta, indent=1))   # a readable copy

    def remove(self) -> None:
        """Forget the chunks (the sweep is complete and its result written)."""
        shutil.rmtree(self.folder, ignore_errors=True)


def _plain(v):
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, (tuple, list)):
        return [_plain(x) for x in v]
    return v
