"""Provenance records attached to every result fa4num writes (JSON, golden vectors, tables)."""
from __future__ import annotations

import datetime as _dt
import functools
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

_PACKAGES = ("fa4num", "numpy", "numba", "ml_dtypes", "mpmath", "gmpy2", "python-flint", "scipy", "torch",
             "triton", "flash-attn-4", "nvidia-cutlass-dsl")


def code_revision(path: str | Path | None = None) -> str:
    """Git revision of the fa4num checkout (suffix '+dirty' when it has uncommitted changes). Where there is no
    git checkout (a copy of the tree shipped to a GPU machine), $FA4NUM_REVISION if set, else 'unknown'."""
    root = Path(path) if path is not None else Path(__file__).resolve().parent.parent
    try:
        # both git commands at once: each costs a process start (~30 ms), paid in every command that writes
        # a result (a fresh `fa4num fit` among them)
        pipe = dict(stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        rev_p = subprocess.Popen(["git", "-C", str(root), "rev-parse", "HEAD"], **pipe)
        dirty_p = subprocess.Popen(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"], **pipe)
        rev, dirty = (p.communicate(timeout=10)[0].strip() for p in (rev_p, dirty_p))
        if rev_p.returncode != 0:
            raise subprocess.SubprocessError(f"git rev-parse exited {rev_p.returncode}")
        return rev + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return os.environ.get("FA4NUM_REVISION", "unknown")


@functools.lru_cache(maxsize=8)   # importlib.metadata reads every installed distribution: 20 ms a call
def _versions(names: tuple) -> tuple:
    out = []
    for name in names:
        try:
            out.append((name, metadata.version(name)))
        except metadata.PackageNotFoundError:
            continue
    return tuple(out)


def package_versions(names=_PACKAGES) -> dict:
    """Installed versions of ``names`` (those installed). Read once per process: what a process runs is what
    it imported, which a later install does not change."""
    return dict(_versions(tuple(names)))


def gpu_info() -> dict | None:
    """Name, compute capability and driver of the first CUDA device, or None without one (or when torch has not
    been imported: importing it costs seconds, and a process that never imported torch ran nothing on a GPU)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    if not torch.cuda.is_available():
        return None
    info = {"name": torch.cuda.get_device_name(0),
            "capability": "sm_%d%d" % torch.cuda.get_device_capability(0),
            "cuda": torch.version.cuda}
    try:
        info["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                        capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return info


def provenance(**extra) -> dict:
    """A dict saying what produced a result: date, code revision, host, packages, GPU (if any), plus `extra`."""
    rec = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "code_revision": code_revision(),
        "python": platform.python_version(),
        "machine": f"{platform.system()} {platform.machine()} {platform.processor()}".strip(),
        "packages": package_versions(),
    }
    gpu = gpu_info()
    if gpu is not None:
        rec["gpu"] = gpu
    rec.update(extra)
    return rec
