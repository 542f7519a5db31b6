"""Optional GPU path: run the real PTX instructions and compare them with fa4num's CPU emulators.

Importing this package needs nothing beyond numpy; the kernels (fa4num.gpu.kernels, fa4num.gpu.capture,
fa4num.gpu.verify) need torch with CUDA and Triton, and :func:`require_gpu` says clearly what is missing.
"""
from __future__ import annotations

import os


class GPUUnavailable(RuntimeError):
    """Raised by GPU commands on a machine without torch+CUDA+Triton."""


def gpu_missing() -> str | None:
    """Why the GPU path cannot run here (a sentence), or None when torch sees a CUDA GPU and Triton imports."""
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
    reason = gpu_missing()
    if reason is not None:
        raise GPUUnavailable(f"the fa4num GPU path needs an NVIDIA GPU with torch+CUDA and Triton: {reason}")


def run_provenance(**extra) -> dict:
    """fa4num.provenance.provenance() plus ``source_revision`` from $FA4NUM_REVISION: a GPU machine that gets a
    copy of the working tree without .git reports code_revision 'unknown', so the caller passes it along."""
    from ..provenance import provenance
    rev = os.environ.get("FA4NUM_REVISION")
    if rev:
        extra["source_revision"] = rev
    return provenance(**extra)
