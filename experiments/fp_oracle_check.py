"""One-off check of fa4num.fp's IEEE binary32 arithmetic against gmpy2/MPFR on 10^6 cases per op and mode.

For each op in add/sub/mul/fma: fa4num.fp.cases.arith_cases(op, N, seed=SEED) (random bit patterns, random
values, exact ties, cancellation, subnormal results, overflow, specials), gmpy2 in rn/rz/rm/rp, and fa4num.fp on
the same operands. Writes fa4num/fp/data/oracle_check.json: per op/mode the number of cases, the number of
mismatches, and SHA-256 digests of the operands and of gmpy2's result bits. tests/fp/test_arith.py recomputes
fa4num.fp's results on the same operands in CI and compares their digest with gmpy2's, so the full 10^6 cases are
re-checked on every run without running MPFR there.

Run: python experiments/fp_oracle_check.py   (about 5 minutes on 2 cores)
"""
from __future__ import annotations

import hashlib
import json
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

import fa4num.fp as fp
from fa4num.fp.cases import arith_cases
from fa4num.fp.oracle import gmpy2_arith_modes
from fa4num.provenance import provenance

N = 1_000_000
SEED = 20261130
CHUNK = 125_000
OUT = Path(fp.__file__).with_name("data") / "oracle_check.json"


def digest(*arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).view(np.uint8).tobytes())
    return h.hexdigest()


def _oracle_chunk(args):
    op, lo, hi = args
    operands = [x[lo:hi] for x in arith_cases(op, N, seed=SEED)]
    return gmpy2_arith_modes(op, *operands)


def main():
    t0 = time.time()
    result = {"n": N, "seed": SEED, "generator": "fa4num.fp.cases.arith_cases", "ops": {}}
    with ProcessPoolExecutor(2) as pool:
        for op in ("add", "sub", "mul", "fma"):
            operands = arith_cases(op, N, seed=SEED)
            chunks = list(pool.map(_oracle_chunk, [(op, lo, min(lo + CHUNK, N)) for lo in range(0, N, CHUNK)]))
            entry = {"operands_sha256": digest(*operands), "modes": {}}
            for mode in ("rn", "rz", "rm", "rp"):
                ref = np.concatenate([c[mode] for c in chunks])
                got = getattr(fp, op)(*operands, rounding=mode)
                bad = np.flatnonzero(got.view(np.uint32) != ref.view(np.uint32))
                entry["modes"][mode] = {
                    "cases": N, "mismatches": int(bad.size), "gmpy2_sha256": digest(ref),
                    "first_mismatches": [[hex(int(x[i].view(np.uint32))) for x in (*operands, got, ref)]
                                         for i in bad[:5]]}
                print(op, mode, "mismatches:", bad.size, flush=True)
            result["ops"][op] = entry
    result["seconds"] = round(time.time() - t0, 1)
    result["provenance"] = provenance()
    OUT.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
