"""Argument checking and array plumbing shared by the fa4num.fp functions.

fa4num never rounds an input silently: arrays must already have the dtype an operation is defined on (float32
for the arithmetic), and Python numbers or lists are accepted only when every value is exactly representable.
torch tensors are accepted; the computation runs on the CPU and the result comes back as a tensor on the
device of the first tensor argument.
"""
from __future__ import annotations

import numbers
import sys

import numpy as np

from .scalar import ROUNDING_MODES


def _torch():
    """torch if this process has imported it, else None: an object can only be a tensor once torch is loaded,
    and importing it just to check would cost seconds in every numpy-only process."""
    return sys.modules.get("torch")


def is_tensor(x) -> bool:
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


def tensor_device(*args):
    """Device of the first torch tensor among args, or None when there is none."""
    for x in args:
        if is_tensor(x):
            return x.device
    return None


def as_float32(x, name: str) -> np.ndarray:
    """x as a float32 numpy array, without any rounding; ValueError naming ``name`` otherwise."""
    if is_tensor(x):
        import torch
        if x.dtype != torch.float32:
            raise ValueError(f"{name} must be a float32 tensor, got {x.dtype}; convert it explicitly "
                             "(fa4num.fp never rounds its inputs silently)")
        return x.detach().cpu().numpy()
    if isinstance(x, (np.ndarray, np.generic)):
        if x.dtype != np.float32:
            raise ValueError(f"{name} must have dtype float32, got {x.dtype}; convert it explicitly "
                             "(fa4num.fp never rounds its inputs silently)")
        return np.asarray(x)
    if isinstance(x, bool) or not isinstance(x, (numbers.Real, list, tuple)):
        raise ValueError(f"{name} must be a float32 array, a torch float32 tensor, or real Python numbers; "
                         f"got {type(x).__name__}")
    wide = np.asarray(x, dtype=np.float64)
    narrow = wide.astype(np.float32)
    same = (narrow.astype(np.float64) == wide) | (np.isnan(wide) & np.isnan(narrow))
    if not np.all(same):
        raise ValueError(f"{name} holds values that are not exactly representable in float32; pass a float32 "
                         "array to say how they should be rounded")
    return narrow


def check_rounding(rounding) -> int:
    """PTX rounding modifier name -> the fa4num.fp.scalar mode int."""
    if not isinstance(rounding, str) or rounding not in ROUNDING_MODES:
        raise ValueError(f"rounding must be one of {sorted(ROUNDING_MODES)} (PTX .rn/.rz/.rm/.rp), "
                         f"got {rounding!r}")
    return ROUNDING_MODES[rounding]


def check_ftz(ftz) -> bool:
    if not isinstance(ftz, (bool, np.bool_)):
        raise ValueError(f"ftz must be True or False (PTX .ftz), got {ftz!r}")
    return bool(ftz)


def flat(a: np.ndarray) -> np.ndarray:
    """a as a C-contiguous, writeable 1-d array, copied only when it is not one already. The numba loops are compiled
    for exactly this array type; a read-only or non-contiguous argument would compile (and cache) a second copy of
    every loop."""
    f = np.ascontiguousarray(a).reshape(-1)
    return f if f.flags.writeable else f.copy()


def flat_broadcast(*arrays):
    """Broadcast arrays together; return the common shape and flat() views of each (copies only when needed)."""
    try:
        shape = np.broadcast_shapes(*(a.shape for a in arrays))
    except ValueError as err:
        raise ValueError(f"operands cannot be broadcast together: {', '.join(str(a.shape) for a in arrays)}") \
            from err
    return shape, tuple(flat(a if a.shape == shape else np.broadcast_to(a, shape)) for a in arrays)


def wrap(result: np.ndarray, device):
    """Give result back as a torch tensor on ``device`` when the inputs were tensors (device not None).

    torch's own dtype is used for formats it has (bfloat16, float16, float8_e4m3fn, float8_e5m2) by viewing the
    bits, so no value is converted twice."""
    if device is None:
        return result
    import torch
    name = result.dtype.name
    views = {"bfloat16": (np.int16, torch.bfloat16), "float8_e4m3fn": (np.uint8, torch.float8_e4m3fn),
             "float8_e5m2": (np.uint8, torch.float8_e5m2)}
    if name in views:
        bits_dtype, torch_dtype = views[name]
        bits = torch.from_numpy(np.ascontiguousarray(result).view(bits_dtype))
        return bits.view(torch_dtype).to(device)
    return torch.from_numpy(np.ascontiguousarray(result)).to(device)
