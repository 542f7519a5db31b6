"""Measure ``tanh.approx.f32`` (MUFU.TANH, the soft cap's tanh in FA4) over all 2^32 inputs on the GPU at hand and
write the compact exact model that fa4num.hw.tanh loads.

Each binade (sign, exponent field) is described as identity, constant, or a table over the top 23 - drop
mantissa bits (fa4num.hw.tanh.describe_binade). The script then rebuilds every output from that description on
the GPU and counts mismatches against the measured outputs (must be 0; the file records the count and
fa4num.hw.tanh refuses a file with mismatches).

Run on the device machine (needs torch with CUDA and Triton; about 2-3 minutes on an H200, mostly numpy):
    python experiments/gpu/mufu_tanh.py --out $OUT
Writes $OUT/mufu_tanh_sm90_h200.npz (kind, drop, const, offset, table, mismatches, meta JSON with provenance and
per-binade statistics). Store it with the other MUFU tables (fa4num/hw/data/tanh_<arch>.npz.xz, the format of
fa4num.hw.tables) on the CPU:
    python -c "from fa4num.hw.tanh import save_tanh_table; save_tanh_table('sm90', 'DIR/mufu_tanh_sm90_h200.npz')"
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fa4num.hw.tanh import KINDS, describe_binade  # noqa: E402

ASM = "tanh.approx.f32 $0, $1;"
CHUNK_BINADES = 32           # one chunk = 32 binades = 2^28 inputs


def describe_all(measure, *, mbits=23, ebits=8):
    """Describe every binade. ``measure(start, n)`` returns the output bits (uint32 numpy) of the inputs
    start .. start + n - 1. Small ``mbits``/``ebits`` let a test run the same code on a synthetic format."""
    nbin = 1 << ebits
    kind = np.zeros((2, nbin), np.uint8)
    drop = np.zeros((2, nbin), np.uint8)
    const = np.zeros((2, nbin), np.uint32)
    offset = np.zeros((2, nbin), np.int64)
    tables, pos, stats = [], 0, []
    per = min(CHUNK_BINADES, nbin)
    for s in (0, 1):
        for e0 in range(0, nbin, per):
            start = (s << (mbits + ebits)) | (e0 << mbits)
            out = measure(start, per << mbits)
            for j in range(per):
                e = e0 + j
                ob = out[j << mbits:(j + 1) << mbits]
                ib = (np.uint32(start + (j << mbits)) + np.arange(1 << mbits, dtype=np.uint32)).astype(np.uint32)
                k, d, c, t = describe_binade(ob, ib, mbits)
                kind[s, e], drop[s, e], const[s, e], offset[s, e] = k, d, c, pos
                tables.append(t)
                pos += t.size
                stats.append({"sign": s, "exp": e, "kind": [n for n, v in KINDS.items() if v == k][0], "drop": d,
                              "runs": int(np.count_nonzero(np.diff(ob.astype(np.int64)))) + 1})
    table = np.concatenate(tables) if tables else np.zeros(0, np.uint32)
    return dict(kind=kind, drop=drop, const=const, offset=offset, table=table), stats


def rebuild(desc, in_bits, *, mbits=23, ebits=8):
    """Outputs the description gives for ``in_bits`` (numpy uint32), the same rule as fa4num.hw.tanh."""
    s = (in_bits >> (mbits + ebits)).astype(np.int64) & 1
    e = ((in_bits >> mbits) & ((1 << ebits) - 1)).astype(np.int64)
    m = (in_bits & ((1 << mbits) - 1)).astype(np.int64)
    k = desc["kind"][s, e]
    idx = np.where(k == KINDS["table"], desc["offset"][s, e] + (m >> desc["drop"][s, e]), 0)
    tab = desc["table"] if desc["table"].size else np.zeros(1, np.uint32)
    return np.where(k == KINDS["identity"], in_bits,
                    np.where(k == KINDS["const"], desc["const"][s, e], tab[np.minimum(idx, tab.size - 1)]))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--arch", default="sm90")
    args = ap.parse_args()
    import torch
    from fa4num.gpu import run_provenance
    from fa4num.gpu.kernels import run, run_range, to_numpy
    from fa4num.gpu.ptx import Op
    op = Op("tanh.approx.f32", 1, ASM)
    t0 = time.time()

    def measure(start, n):
        return to_numpy(run_range(op, start, n))

    desc, stats = describe_all(measure)
    print(f"described in {time.time() - t0:.1f}s; table entries {desc['table'].size}", flush=True)
    # self-check: the description is exact by construction on what was measured; check it (and run-to-run
    # determinism) against fresh measurements: every input of two chunks (around 1.0 and its negative) and
    # 2^24 random inputs
    bad = 0
    for start in (0x30000000, 0xB0000000):
        ib = (np.uint32(start) + np.arange(1 << 28, dtype=np.uint32)).astype(np.uint32)
        bad += int((rebuild(desc, ib) != measure(start, 1 << 28)).sum())
    rng = np.random.default_rng(0)
    ib = rng.integers(0, 1 << 32, 1 << 24, dtype=np.uint64).astype(np.uint32)
    got = to_numpy(run(op, ib))
    bad += int((rebuild(desc, ib) != got).sum())
    print(f"self-check: {bad} mismatches ({time.time() - t0:.1f}s)", flush=True)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"provenance": run_provenance(instruction="tanh.approx.f32", torch=torch.__version__),
            "binades": stats}
    path = out / f"mufu_tanh_{args.arch}_h200.npz"
    np.savez_compressed(path, mismatches=np.int64(bad), meta=json.dumps(meta), **desc)
    print(f"-> {path} ({path.stat().st_size / 1e6:.1f} MB)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
