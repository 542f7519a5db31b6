"""Optional GPU path: run the real PTX instructions and compare them with fa4num's CPU emulators.

Importing this package needs nothing beyond numpy; the kernels (fa4num.gpu.kernels, fa4num.gpu.capture,
fa4num.gpu.verify) need torch with CUDA and Triton, and :func:`require_gpu` says clearly what is missing.
"""
from __future__ import annotations

import os


class GPUUnavailable(RuntimeError):
    """Raised by GPU commands on a machine without torch+CUDA+Triton."""


def gpu_missing() -> str | None:
    """Why the GPU path cannot run here (a sentence), or None when torch sees a CUDA GPU and Triton imports.

    Parameters
    ----------
    None

    Returns
    -------
    str or None
        Depends on the machine: e.g. "no CUDA GPU is present (torch.cuda.is_available() is False)".

    Examples
    --------
    >>> reason = gpu_missing()
    >>> reason is None or isinstance(reason, str)   # None only on a machine with CUDA, torch and Triton
    True
    """
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU is present (torch.cuda.is_available() is False)"
    try:
        import triton  # noqa: F401
    except ImportError:
        return "Triton is not installed (pip install 'fa4num[gpu]')"
    return None


def require_gpu() -> None:
    """Raise GPUUnavailable, saying what is missing, unless the GPU path can run here (gpu_missing() is None).

    Parameters
    ----------
    None

    Returns
    -------
    None

    Raises
    ------
    GPUUnavailable
        A RuntimeError whose message names the missing piece (torch, a CUDA GPU, or Triton).

    Examples
    --------
    >>> try:
    ...     require_gpu()
    ... except GPUUnavailable as err:   # on a machine without the GPU stack
    ...     assert str(err).startswith("the fa4num GPU path needs an NVIDIA GPU")
    """
    reason = gpu_missing()
    if reason is not None:
        raise GPUUnavailable(f"the fa4num GPU path needs an NVIDIA GPU with torch+CUDA and Triton: {reason}")


def run_provenance(**extra) -> dict:
    """fa4num.provenance.provenance() plus ``source_revision`` from $FA4NUM_REVISION.

    A GPU machine that gets a copy of the working tree without .git reports code_revision 'unknown', so the
    caller passes the revision along in that environment variable.

    Parameters
    ----------
    **extra
        More keys for the record (e.g. tool="experiments/gpu/...").

    Returns
    -------
    dict
        Date, code revision, Python, machine, package versions, GPU (when torch sees one), the ``extra`` keys,
        and "source_revision" when $FA4NUM_REVISION is set.

    Examples
    --------
    >>> import os
    >>> saved = os.environ.pop("FA4NUM_REVISION", None)
    >>> os.environ["FA4NUM_REVISION"] = "abc1234"
    >>> p = run_provenance(tool="doctest")
    >>> p["source_revision"], p["tool"]
    ('abc1234', 'doctest')
    >>> _ = os.environ.pop("FA4NUM_REVISION") if saved is None else os.environ.update(FA4NUM_REVISION=saved)
    """
    from ..provenance import provenance
    rev = os.environ.get("FA4NUM_REVISION")
    if rev:
        extra["source_revision"] = rev
    return provenance(**extra)
