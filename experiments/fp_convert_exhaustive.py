"""One-off: fa4num.fp.to_bf16 / to_fp16 / to_e4m3 / to_e5m2 on all 2^32 float32 bit patterns, against ml_dtypes
(numpy for fp16) after clamping to ±max finite for the satfinite fp8 conversions, and NaN -> fa4num.fp.NAN_BITS.
ml_dtypes' casts round to nearest even from float32 in one step, so where the semantics agree (everything but
saturation and NaN bits) the two must be bit-identical. Writes experiments/results/fp_convert_exhaustive.json.

Run: python experiments/fp_convert_exhaustive.py   (a few minutes on 2 cores)
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

import fa4num.fp as fp
from fa4num.fp.convert import FORMATS
from fa4num.provenance import provenance

CHUNK = 1 << 24
OUT = Path(__file__).with_name("results") / "fp_convert_exhaustive.json"


def main():
    result = {"inputs": 1 << 32, "formats": {}}
    for fmt in ("bf16", "fp16", "e4m3", "e5m2"):
        f = FORMATS[fmt]
        bits_dtype = np.uint16 if f.width == 16 else np.uint8
        to = getattr(fp, "to_" + fmt)
        mismatches, examples, t0 = 0, [], time.time()
        for lo in range(0, 1 << 32, CHUNK):
            x = np.arange(lo, lo + CHUNK, dtype=np.uint64).astype(np.uint32).view(np.float32)
            got = to(x).view(bits_dtype)
            with np.errstate(over="ignore", invalid="ignore"):
                clamped = np.clip(x, -f.max_finite, f.max_finite) if f.satfinite else x
                want = clamped.astype(f.dtype).view(bits_dtype)
            want = np.where(np.isnan(x), bits_dtype(fp.NAN_BITS[fmt]), want)
            bad = np.flatnonzero(got != want)
            mismatches += bad.size
            examples += [[hex(int(x[i:i + 1].view(np.uint32)[0])), hex(int(got[i])), hex(int(want[i]))]
                         for i in bad[: 5 - len(examples)]]
        result["formats"][fmt] = {"mismatches": int(mismatches), "examples": examples,
                                  "seconds": round(time.time() - t0, 1)}
        print(fmt, result["formats"][fmt], flush=True)
    result["provenance"] = provenance()
    OUT.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
