"""gmpy2 (MPFR) oracle for the IEEE binary32 operations: independent of fa4num.fp's own kernels.

MPFR rounds every operation correctly in the context's mode; ``gmpy2.ieee(32)`` gives precision 24, the float32
exponent range and subnormals, so each result is exactly what IEEE 754 binary32 prescribes, including the signs
of exact zeros. NaN results are reported as NVIDIA's canonical NaN (0x7FFFFFFF), the pattern fa4num.fp must
produce. No .ftz: MPFR has no flush-to-zero, which is checked against GPU golden vectors instead.

It runs a Python loop (~0.1-0.3 M operations/s): use it for samples, not sweeps.
"""
from __future__ import annotations

import gmpy2
import numpy as np

from .scalar import CANONICAL_NAN_BITS

__all__ = ["gmpy2_arith", "gmpy2_arith_modes", "MPFR_ROUNDING"]

MPFR_ROUNDING = {"rn": gmpy2.RoundToNearest, "rz": gmpy2.RoundToZero, "rm": gmpy2.RoundDown,
                 "rp": gmpy2.RoundUp}
_OPS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "fma": gmpy2.fma}


def gmpy2_arith(op, *operands, rounding="rn") -> np.ndarray:
    """op of float32 arrays, each result rounded once by MPFR in IEEE binary32 (``gmpy2.ieee(32)``).

    An oracle independent of fa4num.fp's kernels: correct rounding, subnormals and signs of exact zeros as IEEE 754
    prescribes; NaN results come out as NVIDIA's canonical NaN (0x7FFFFFFF). No .ftz. A Python loop: for samples.

    Parameters
    ----------
    op : {"add", "sub", "mul", "fma"}
    *operands : float32 arrays of one shape
        Two operands (three for fma: a * b + c).
    rounding : {"rn", "rz", "rm", "rp"}

    Returns
    -------
    float32 array of the operands' shape

    Raises
    ------
    ValueError
        For an unknown op or rounding, the wrong number of operands, or an operand that is not float32.

    Examples
    --------
    >>> import numpy as np
    >>> one, tiny = np.array([1.0], np.float32), np.array([2 ** -30], np.float32)
    >>> gmpy2_arith("add", one, tiny), gmpy2_arith("add", one, tiny, rounding="rp")
    (array([1.], dtype=float32), array([1.0000001], dtype=float32))
    """
    return gmpy2_arith_modes(op, *operands, roundings=(rounding,))[rounding]


def gmpy2_arith_modes(op, *operands, roundings=tuple(MPFR_ROUNDING)) -> dict:
    """{rounding: gmpy2_arith(op, *operands, rounding=rounding)}, converting the operands to MPFR once.

    The conversion costs several times the operation itself, so checking all four modes this way is about 4x
    cheaper than four calls.

    Parameters
    ----------
    op : {"add", "sub", "mul", "fma"}
    *operands : float32 arrays of one shape
    roundings : iterable of {"rn", "rz", "rm", "rp"}
        Default: all four.

    Returns
    -------
    dict mapping each rounding name to a float32 array of the operands' shape

    Raises
    ------
    ValueError
        As gmpy2_arith.

    Examples
    --------
    >>> import numpy as np
    >>> r = gmpy2_arith_modes("sub", np.array([1.0], np.float32), np.array([2 ** -30], np.float32))
    >>> {m: float(v[0]) for m, v in r.items()}
    {'rn': 1.0, 'rz': 0.9999999403953552, 'rm': 0.9999999403953552, 'rp': 1.0}
    """
    if op not in _OPS:
        raise ValueError(f"op must be one of {sorted(_OPS)}, got {op!r}")
    for r in roundings:
        if r not in MPFR_ROUNDING:
            raise ValueError(f"rounding must be one of {sorted(MPFR_ROUNDING)}, got {r!r}")
    arrays = [np.asarray(x) for x in operands]
    if len(arrays) != (3 if op == "fma" else 2) or any(a.dtype != np.float32 for a in arrays):
        raise ValueError(f"{op} takes {3 if op == 'fma' else 2} float32 arrays")
    f = _OPS[op]
    with gmpy2.context(precision=53):  # float32 -> Python float -> 53-bit mpfr: exact
        columns = [list(map(gmpy2.mpfr, a.reshape(-1).tolist())) for a in arrays]
    results = {}
    for r in roundings:
        ctx = gmpy2.ieee(32)
        ctx.round = MPFR_ROUNDING[r]
        with ctx:
            out = np.array(list(map(float, map(f, *columns))), np.float64).astype(np.float32)
        out[np.isnan(out)] = np.uint32(CANONICAL_NAN_BITS).view(np.float32)
        results[r] = out.reshape(arrays[0].shape)
    return results
