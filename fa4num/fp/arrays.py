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
    """Whether x is a torch tensor, without importing torch (False whenever this process has not loaded it).

    Parameters
    ----------
    x : object

    Returns
    -------
    bool

    Examples
    --------
    >>> import numpy as np
    >>> is_tensor(np.zeros(2)), is_tensor([1.0])
    (False, False)
    """
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


def tensor_device(*args):
    """Device of the first torch tensor among args, or None when there is none (numpy in, numpy out).

    Parameters
    ----------
    *args : objects (arrays, tensors, numbers)

    Returns
    -------
    torch.device or None

    Examples
    --------
    >>> import numpy as np
    >>> tensor_device(np.zeros(2), 1.0) is None
    True
    """
    for x in args:
        if is_tensor(x):
            return x.device
    return None


def as_float32(x, name: str) -> np.ndarray:
    """x as a float32 numpy array, without any rounding (fa4num.fp never rounds its inputs silently).

    Parameters
    ----------
    x : float32 array / numpy scalar, torch float32 tensor (copied to the CPU), or real Python numbers / lists
        Python numbers must be exactly representable in float32.
    name : str
        The argument's name, for the error message.

    Returns
    -------
    numpy.ndarray of dtype float32, x's shape

    Raises
    ------
    ValueError
        Naming ``name``: another dtype, a non-numeric type, or a Python number that float32 cannot hold exactly.

    Examples
    --------
    >>> as_float32([0.5, 2.0], "x")
    array([0.5, 2. ], dtype=float32)
    >>> as_float32(0.1, "x")
    Traceback (most recent call last):
        ...
    ValueError: x holds values that are not exactly representable in float32; ...
    """
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
    items = np.asarray(x, dtype=object)   # a ragged list keeps its inner lists as elements, refused below
    bad = [v for v in items.ravel() if isinstance(v, bool) or not isinstance(v, numbers.Real)][:1]
    if bad:   # numpy would turn "1.5", True and None into 1.5, 1.0 and nan: nothing is coerced
        bad = bad[0]
        raise ValueError(f"{name} must hold real numbers, got {bad!r} ({type(bad).__name__}) in a "
                         f"{type(x).__name__}")
    wide = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore"):   # a value beyond fp32 becomes inf here and is refused just below
        narrow = wide.astype(np.float32)
    same = (narrow.astype(np.float64) == wide) | (np.isnan(wide) & np.isnan(narrow))
    if not np.all(same):
        raise ValueError(f"{name} holds values that are not exactly representable in float32; pass a float32 "
                         "array to say how they should be rounded")
    return narrow


def check_rounding(rounding) -> int:
    """PTX rounding modifier name -> the fa4num.fp.scalar mode int (RN=0, RZ=1, RM=2, RP=3).

    Parameters
    ----------
    rounding : {"rn", "rz", "rm", "rp"}

    Returns
    -------
    int

    Raises
    ------
    ValueError
        For any other value, listing the allowed names.

    Examples
    --------
    >>> check_rounding("rm")
    2
    >>> check_rounding("nearest")
    Traceback (most recent call last):
        ...
    ValueError: rounding must be one of ['rm', 'rn', 'rp', 'rz'] (PTX .rn/.rz/.rm/.rp), got 'nearest'
    """
    if not isinstance(rounding, str) or rounding not in ROUNDING_MODES:
        raise ValueError(f"rounding must be one of {sorted(ROUNDING_MODES)} (PTX .rn/.rz/.rm/.rp), "
                         f"got {rounding!r}")
    return ROUNDING_MODES[rounding]


def check_ftz(ftz) -> bool:
    """ftz checked to be a bool (PTX .ftz is on or off; 0/1 or strings are refused).

    Parameters
    ----------
    ftz : bool or ``numpy.bool_``

    Returns
    -------
    bool

    Raises
    ------
    ValueError
        When ftz is not a bool.

    Examples
    --------
    >>> check_ftz(True)
    True
    >>> check_ftz(1)
    Traceback (most recent call last):
        ...
    ValueError: ftz must be True or False (PTX .ftz), got 1
    """
    if not isinstance(ftz, (bool, np.bool_)):
        raise ValueError(f"ftz must be True or False (PTX .ftz), got {ftz!r}")
    return bool(ftz)


def flat(a: np.ndarray) -> np.ndarray:
    """a as a C-contiguous, writeable 1-d array, copied only when it is not one already.

    The numba loops are compiled for exactly this array type; a read-only or non-contiguous argument would compile
    (and cache) a second copy of every loop.

    Parameters
    ----------
    a : numpy.ndarray

    Returns
    -------
    numpy.ndarray, 1-d, C-contiguous, writeable (a view of a when possible)

    Examples
    --------
    >>> import numpy as np
    >>> a = np.arange(6, dtype=np.float32).reshape(2, 3)
    >>> flat(a), np.shares_memory(flat(a), a), np.shares_memory(flat(a.T), a)
    (array([0., 1., 2., 3., 4., 5.], dtype=float32), True, False)
    """
    f = np.ascontiguousarray(a).reshape(-1)
    return f if f.flags.writeable else f.copy()


def flat_broadcast(*arrays):
    """Broadcast arrays together; return the common shape and flat() views of each (copies only when needed).

    Parameters
    ----------
    *arrays : numpy.ndarray

    Returns
    -------
    (shape, flats) : (tuple of int, tuple of 1-d numpy.ndarray)

    Raises
    ------
    ValueError
        When the shapes cannot be broadcast together (the message lists them).

    Examples
    --------
    >>> import numpy as np
    >>> flat_broadcast(np.zeros((2, 1), np.float32), np.ones(3, np.float32))[0]
    (2, 3)
    >>> flat_broadcast(np.zeros(2), np.zeros(3))
    Traceback (most recent call last):
        ...
    ValueError: operands cannot be broadcast together: (2,), (3,)
    """
    try:
        shape = np.broadcast_shapes(*(a.shape for a in arrays))
    except ValueError as err:
        raise ValueError(f"operands cannot be broadcast together: {', '.join(str(a.shape) for a in arrays)}") \
            from err
    return shape, tuple(flat(a if a.shape == shape else np.broadcast_to(a, shape)) for a in arrays)


def wrap(result: np.ndarray, device):
    """Give result back as a torch tensor on ``device`` when the inputs were tensors (device not None).

    torch's own dtype is used for formats it has (bfloat16, float16, float8_e4m3fn, float8_e5m2) by viewing the
    bits, so no value is converted twice.

    Parameters
    ----------
    result : numpy.ndarray
    device : torch.device or None
        From tensor_device; None returns result unchanged.

    Returns
    -------
    numpy.ndarray (device None) or torch.Tensor on device

    Examples
    --------
    >>> import numpy as np
    >>> wrap(np.ones(2, np.float32), None)
    array([1., 1.], dtype=float32)
    """
    if device is None:
        return result
    import torch
    from .dtypes import DTYPES
    d = DTYPES.get(result.dtype.name)
    if d is not None and d.name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        # ml_dtypes arrays: torch.from_numpy has no such dtype, so move the bits (torch has no uint16: int16)
        bits = torch.from_numpy(np.ascontiguousarray(result).view(np.int16 if d.width == 16 else np.uint8))
        return bits.view(d.torch_dtype).to(device)
    return torch.from_numpy(np.ascontiguousarray(result)).to(device)
