"""Build fa4num/fp/data/cr_hard_cases.npz, the hard-case tables of fa4num.fp.reference.

For exp2 and log2, and for the float32 and bfloat16 targets, every float32 input whose libm float64 value lies
within K_TABLE ulp64 of a rounding midpoint of the target is listed with its correctly rounded result from
gmpy2/MPFR. One pass over all 2^32 inputs (about a minute on 2 cores). Run: python -m fa4num.fp._tables
"""
from __future__ import annotations

import json
import time

import numpy as np
from numba import njit, prange

from .scalar import u32_to_f32
from .reference import (_BF16_PREC, _BF16_QMIN, _EXP2_BF16_CUT, _EXP2_F32_CUT, _F32_PREC, _F32_QMIN, K_RUN,
                        K_TABLE, TABLE_PATH, exp2_approx, gmpy2_reference, log2_approx)

_CASES = (("exp2", "float32"), ("exp2", "bfloat16"), ("log2", "float32"), ("log2", "bfloat16"))


@njit(parallel=True, cache=True)
def _hard_mask(start, n, k_ulp, mask):
    """mask[i, j] = input bits start + i is a hard case j of _CASES at k_ulp."""
    for i in prange(n):
        x = u32_to_f32(np.uint32(start + i))
        mask[i, 0] = exp2_approx(x, _F32_PREC, _F32_QMIN, _EXP2_F32_CUT, k_ulp)[1]
        mask[i, 1] = exp2_approx(x, _BF16_PREC, _BF16_QMIN, _EXP2_BF16_CUT, k_ulp)[1]
        mask[i, 2] = log2_approx(x, _F32_PREC, _F32_QMIN, k_ulp)[1]
        mask[i, 3] = log2_approx(x, _BF16_PREC, _BF16_QMIN, k_ulp)[1]


def hard_inputs(k_ulp: int, *, start: int = 0, stop: int = 1 << 32, chunk: int = 1 << 25) -> dict:
    """{(func, target): sorted uint32 bits of the inputs in [start, stop) flagged at k_ulp}."""
    found = {c: [] for c in _CASES}
    mask = np.empty((chunk, len(_CASES)), np.bool_)
    for lo in range(start, stop, chunk):
        n = min(chunk, stop - lo)
        _hard_mask(lo, n, k_ulp, mask)
        for j, c in enumerate(_CASES):
            found[c].append(np.flatnonzero(mask[:n, j]).astype(np.uint32) + np.uint32(lo))
    return {c: np.concatenate(v) for c, v in found.items()}


def build(path=TABLE_PATH) -> dict:
    t0 = time.time()
    hard = hard_inputs(K_TABLE)
    arrays, summary = {}, {}
    for (func, target), bits in hard.items():
        y = gmpy2_reference(func, bits.view(np.float32), target)
        arrays[f"{func}_{target}_x"] = bits
        arrays[f"{func}_{target}_y"] = y
        summary[f"{func}_{target}"] = int(bits.size)
    from fa4num.provenance import provenance
    meta = {"k_table_ulp64": K_TABLE, "k_run_ulp64": K_RUN, "entries": summary, "seconds": time.time() - t0,
            "provenance": provenance()}
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, meta=np.array(json.dumps(meta)), **arrays)
    return meta


if __name__ == "__main__":
    print(json.dumps(build(), indent=1, default=str))
