"""A user cache of deterministic results: a fresh ``fa4num fit`` recomputes nothing it has computed before.

What is cached is a pure function of its key: the fit of ``fa4num fit`` (:func:`fit`, the command's own door,
the library's :func:`fa4num.fit.fit` always computes) and the metrics of :func:`fa4num.fit.registry.describe`
(the exhaustive emulation sweeps cost seconds). The key holds the call's arguments (floats by their bits), the
files of fa4num (see :func:`code_key`), fa4num's version, and the versions of Python and of the packages the
numbers come from; a change of any of these is another key, so an entry is never stale. Entries live in the user
cache (``$FA4NUM_CACHE_DIR``, else ``$XDG_CACHE_HOME/fa4num``, else ``~/.cache/fa4num``), never inside the
installed package; ``FA4NUM_NO_CACHE=1`` turns the cache off. A cached value is the pickled object itself, so
what is printed from it is the same text, bit for bit, as from a computation (the fit's timing line included:
it says how long the fit took when it ran).

This module imports only the standard library (and fa4num's root): a cache hit costs no numpy, mpmath or flint.
"""
from __future__ import annotations

import functools
import hashlib
import os
import pickle
import sys
import tempfile
from pathlib import Path

import fa4num

# distributions whose code produces the cached numbers (mpmath through gmpy2, the emulation through numba and
# llvmlite); their installed versions are part of every key
_PACKAGES = ("numpy", "scipy", "mpmath", "gmpy2", "python_flint", "numba", "llvmlite", "ml_dtypes")
_PKG_ROOT = Path(fa4num.__file__).resolve().parent


def cache_dir() -> Path | None:
    """Where entries are kept, or None when ``FA4NUM_NO_CACHE`` is set (to anything but "" or "0").

    Examples
    --------
    >>> import os
    >>> os.environ["FA4NUM_NO_CACHE"] = "1"
    >>> cache_dir() is None
    True
    >>> del os.environ["FA4NUM_NO_CACHE"]
    """
    if os.environ.get("FA4NUM_NO_CACHE", "") not in ("", "0"):
        return None
    if os.environ.get("FA4NUM_CACHE_DIR"):
        return Path(os.environ["FA4NUM_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "fa4num"


@functools.lru_cache(maxsize=1)
def code_key() -> str:
    """Digest of what the cached numbers depend on besides the call: fa4num's version and every file of the
    package (the content of the source and of every other file under 64 KiB, so an edit in a checkout changes it;
    size and modification time of the larger data tables, which are replaced, not edited, and would cost tens
    of milliseconds to read), Python's version, the packages' versions."""
    h = hashlib.blake2b(digest_size=20)
    h.update(f"fa4num {fa4num.__version__} python {sys.version}\n".encode())
    for path in sorted(p for p in _PKG_ROOT.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        h.update(str(path.relative_to(_PKG_ROOT)).encode() + b"\0")
        st = path.stat()
        small = st.st_size < 1 << 16 or path.suffix == ".py"
        h.update(path.read_bytes() if small else f"{st.st_size} {st.st_mtime_ns}".encode())
    h.update(repr(_versions()).encode())
    return h.hexdigest()


def _versions() -> dict:
    """{distribution: version} read from the ``*.dist-info`` folders on sys.path (importlib.metadata costs 0.1 s
    to import; a folder listing costs a millisecond)."""
    found = {}
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if not name.endswith(".dist-info"):
                continue
            dist, _, version = name[: -len(".dist-info")].partition("-")
            dist = dist.lower().replace("-", "_")
            if dist in _PACKAGES and dist not in found:
                found[dist] = version
    return found


def _path(kind: str, key) -> Path | None:
    root = cache_dir()
    if root is None:
        return None
    digest = hashlib.blake2b(repr((code_key(), kind, key)).encode(), digest_size=20).hexdigest()
    return root / kind / f"{digest}.pickle"


def remember(kind: str, key, compute, *, on_hit=None):
    """``compute()``, or the value an earlier call with the same ``kind``, ``key`` and code_key returned.

    ``key`` must be a plain value (tuples, strings, ints, floats as their hex form) whose repr says everything
    the result depends on. A cache that cannot be read or written is skipped (the value is computed).
    ``on_hit``, if given, is called (no arguments) when the value comes from the cache.

    Examples
    --------
    >>> import os, tempfile
    >>> os.environ["FA4NUM_CACHE_DIR"] = tempfile.mkdtemp()
    >>> calls = []
    >>> remember("doctest", ("x", 1), lambda: calls.append(1) or 42), remember("doctest", ("x", 1), lambda: 0)
    (42, 42)
    >>> len(calls)
    1
    >>> del os.environ["FA4NUM_CACHE_DIR"]
    """
    path = _path(kind, key)
    if path is not None:
        try:
            with open(path, "rb") as fh:
                stored_key, value = pickle.load(fh)
            if stored_key == (kind, key):
                if on_hit is not None:
                    on_hit()
                return value
        except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError, ValueError):
            pass
    value = compute()
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".pickle")
            try:
                with os.fdopen(fd, "wb") as fh:
                    pickle.dump(((kind, key), value), fh, protocol=pickle.HIGHEST_PROTOCOL)
                os.replace(tmp, path)   # atomic: a concurrent reader sees the old file or the whole new one
            except BaseException:
                os.unlink(tmp)
                raise
        except (OSError, pickle.PicklingError, TypeError, AttributeError):   # no room, read-only, unpicklable
            pass
    return value


def plain(value):
    """``value`` as a cache key part: floats by their exact hex form, containers recursively; None when it
    holds something else (a callable: no key can say what it computes)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value.hex()
    if isinstance(value, (list, tuple)):
        parts = tuple(plain(v) for v in value)
        return None if any(p is None and v is not None for p, v in zip(parts, value)) else ("seq", parts)
    if isinstance(value, dict):
        items = [(repr(plain(k)), plain(v)) for k, v in value.items()]
        if any(p is None and v is not None for (_, p), v in zip(items, value.values())):
            return None
        return ("map", tuple(sorted(items)))
    return None


def fit(f, degree, interval=(0.0, 1.0), **options):
    """:func:`fa4num.fit.fit` for ``fa4num fit``, through the cache when the call is a plain value (``f`` an
    expression or fa4num's 2^x target, every option a number, string or container of them) and not
    method="fa4" (which runs Sollya when it is installed: not a function of the key).

    The FitResult returned from the cache is the one computed then, its ``timings`` and ``provenance`` (the
    date, revision and packages of that computation) included, plus ``timings["from_cache"] = True`` so that
    what is printed can say the fit was not recomputed."""
    from ._target import EXP2

    def compute():
        from ._api import fit as fit_   # on a miss only: the fitter's modules cost a tenth of a second
        return fit_(f, degree, interval, **options)

    name = f if isinstance(f, str) else EXP2.name if f is EXP2 else None   # fit reads a target by its name
    key = (name, plain(degree), plain(tuple(interval)), plain(options))
    if None in key or options.get("method") == "fa4":
        return compute()
    hit = []
    result = remember("fit", key, compute, on_hit=lambda: hit.append(True))
    if hit:
        from dataclasses import replace
        result = replace(result, timings={**result.timings, "from_cache": True})
    return result
