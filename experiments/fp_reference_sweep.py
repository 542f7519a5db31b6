"""One-off check of the correctly rounded references over every float32 input, and against gmpy2 on a sample.

For each of exp2/log2/rcp into float32 and bfloat16: run the numba scalar kernel (fa4num.fp.reference.*_cr_f32 /
*_cr_bf16) on all 2^32 bit patterns, count the inputs flagged hard (a midpoint within K_RUN ulp64) and the inputs
the kernel could not settle (ok=False; must be 0 with the committed tables), and time the sweep. Then compare
fa4num.fp.exp2_cr/log2_cr/rcp_cr with gmpy2 on SAMPLE random bit patterns plus every hard input found.
Writes experiments/results/fp_reference_sweep.json.

Run: python experiments/fp_reference_sweep.py   (several minutes on 2 cores)
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from numba import njit, prange

import fa4num.fp as fp
from fa4num.fp import reference as ref
from fa4num.fp.scalar import u32_to_f32
from fa4num.provenance import provenance

SAMPLE = 200_000
CHUNK = 1 << 26
OUT = Path(__file__).with_name("results") / "fp_reference_sweep.json"
KERNELS = {("exp2", "float32"): ref.exp2_cr_f32, ("exp2", "bfloat16"): ref.exp2_cr_bf16,
           ("log2", "float32"): ref.log2_cr_f32, ("log2", "bfloat16"): ref.log2_cr_bf16,
           ("rcp", "float32"): ref.rcp_cr_f32, ("rcp", "bfloat16"): ref.rcp_cr_bf16}
API = {"exp2": fp.exp2_cr, "log2": fp.log2_cr, "rcp": fp.rcp_cr}


def _hard_case_inputs(func: str, target: str) -> np.ndarray:
    """Input bits of the committed hard-case table of ``func`` in ``target`` (ref.TABLE_PATH; rcp has none)."""
    if not ref.TABLE_PATH.exists():
        return np.zeros(0, np.uint32)
    with np.load(ref.TABLE_PATH) as z:
        name = f"{func}_{target}_x"
        return np.ascontiguousarray(z[name]) if name in z.files else np.zeros(0, np.uint32)


def make_sweep(kernel):
    @njit(parallel=True)
    def sweep(start, n, not_ok):
        checksum = np.uint64(0)
        for i in prange(n):
            y, ok = kernel(u32_to_f32(np.uint32(start + i)))
            not_ok[i] = not ok
            checksum += np.uint64(np.float32(y).view(np.uint32))
        return checksum
    return sweep


def main():
    result = {"k_run_ulp64": ref.K_RUN, "k_table_ulp64": ref.K_TABLE, "sample": SAMPLE, "cases": {}}
    rng = np.random.default_rng(0)
    sample = rng.integers(0, 1 << 32, SAMPLE, dtype=np.uint64).astype(np.uint32).view(np.float32)
    not_ok = np.empty(CHUNK, np.bool_)
    for (func, target), kernel in KERNELS.items():
        sweep = make_sweep(kernel)
        sweep(0, 16, not_ok)  # compile
        bad, t0 = [], time.time()
        for lo in range(0, 1 << 32, CHUNK):
            sweep(lo, CHUNK, not_ok)
            bad.append(np.flatnonzero(not_ok).astype(np.uint32) + np.uint32(lo))
        seconds = time.time() - t0
        bad = np.concatenate(bad)
        table_x = _hard_case_inputs(func, target)
        x = np.concatenate([sample, table_x.view(np.float32), bad.view(np.float32)])
        got = np.asarray(API[func](x, target))
        want = ref.gmpy2_reference(func, x, target).view(np.uint32)  # bf16 values (or the NaN) in float32
        if target == "bfloat16":  # compare bf16 bits: the upper half of the float32 holding the bf16 value
            got, want = got.view(np.uint16), (want >> np.uint32(16)).astype(np.uint16)
        else:
            got = got.view(np.uint32)
        mism = int(np.count_nonzero(got != want))
        result["cases"][f"{func}_{target}"] = {
            "sweep_inputs": 1 << 32, "sweep_seconds": round(seconds, 1),
            "sweep_melem_per_s": round((1 << 32) / seconds / 1e6, 1), "unsettled_in_numba": int(bad.size),
            "table_entries": int(table_x.size), "gmpy2_checked": int(x.size), "gmpy2_mismatches": mism}
        print(func, target, result["cases"][f"{func}_{target}"], flush=True)
    result["provenance"] = provenance()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
