"""Turn a capture of experiments/gpu/fa4_capture_sm90.py into fa4num/data/golden/fa4_sm90_h200.npz (package data).

    python experiments/gpu/fa4_golden_sm90.py CAPTURE.npz [--capture-revision REV]

Cases with at most ``--full-limit`` output elements keep every output bit; larger ones keep the SHA-256 of the
output bits plus the first 8 query rows (for diagnosis). LSE is always kept in full (it is small).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import pathlib

import numpy as np

from fa4num.provenance import provenance

OUT = pathlib.Path(__file__).resolve().parents[2] / "fa4num/data/golden/fa4_sm90_h200.npz"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("capture")
    ap.add_argument("--capture-revision", default=None,
                    help="git revision whose experiments/gpu/fa4_capture_sm90.py produced the capture")
    ap.add_argument("--full-limit", type=int, default=110_000)
    args = ap.parse_args()
    z = np.load(args.capture)
    meta = json.loads(str(z["meta"]))
    arrays, cases = {}, []
    for c in meta["cases"]:
        if "error" in c:
            continue
        name = c["spec"]["name"]
        bits = z[f"{name}.out_bits"]
        entry = dict(c, out_sha256=hashlib.sha256(np.ascontiguousarray(bits).tobytes()).hexdigest(),
                     out_full=bool(bits.size <= args.full_limit))
        arrays[f"{name}.out_bits"] = bits if entry["out_full"] else bits[:, :8]
        arrays[f"{name}.lse"] = z[f"{name}.lse"]
        cases.append(entry)
    prov = dict(meta["provenance"])
    if args.capture_revision:
        prov["code_revision"] = args.capture_revision
    doc = {"format": "fa4num-attention-golden/1", "kernel": "flash_attn.cute.flash_attn_func (SM90 path)",
           "capture": prov, "written_by": provenance(), "cases": cases}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, meta=json.dumps(doc), **arrays)
    print(f"{len(cases)} cases -> {OUT} ({OUT.stat().st_size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
