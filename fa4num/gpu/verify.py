"""``fa4num gpu verify``: every operation on the GPU against its CPU emulator, bit for bit.

- Unary operations (FA4's exp2 in its three forms at degree 3, MUFU ex2/rcp/lg2 with and without .ftz, fp32 ->
  bf16 / fp16 / e4m3 / e5m2): all 2^32 inputs. The GPU computes 2^26 inputs at a time from their index (no
  input memory) and copies them to pinned host memory in a producer thread while the numba emulators (all
  cores) compute the same chunk; a parallel count compares them.
- Binary and ternary ops (add/sub/mul/fma in rn/rz/rm/rp with and without .ftz, max/min): the golden
  generators (fa4num.golden "binary"/"ternary": specials, cancellation, ties, results near 2^-126, overflow,
  random bits) with seeds 1.. up to the requested sample size.
- Every golden set of fa4num.gpu.capture.golden_plan (seed 0), compared directly.
Optionally writes the SHA-256 of the GPU outputs per 2^24-input chunk of every unary op (for CPU CI).
Writes a summary JSON (counts, examples, timings, provenance) into ``--out``.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from numba import njit, prange

from .. import golden
from . import ptx, require_gpu, run_provenance
from .emulators import emulator

CHUNK = 1 << 26
TOTAL = 1 << 32          # inputs of an exhaustive unary sweep
DEVICE = "cuda"


@njit(parallel=True, cache=True)
def _count_diff(a, b):
    n = 0
    for i in prange(a.size):
        if a[i] != b[i]:
            n += 1
    return n


@njit(parallel=True, cache=True)
def _iota(start, out):
    for i in prange(out.size):
        out[i] = np.uint32((start + i) & 0xFFFFFFFF)


def op_names() -> list[str]:
    """Every operation name ``verify(ops=...)`` accepts (exhaustive, sampled and golden-set names)."""
    from .capture import golden_plan
    names = [op.name for op, _ in exhaustive_plan()] + [op.name for op in ptx.all_arith()]
    return list(dict.fromkeys(names + [s.op.name for s in golden_plan()]))


def exhaustive_plan() -> list:
    """(PTX op, emulator meta) for every unary operation swept over all 2^32 inputs."""
    plan = [(ptx.fa4_ex2_emulation(v, 3), {"op": "ex2emu", "variant": v, "degree": 3,
                                           "coeffs_bits": list(ptx.FA4_POLY_EX2_BITS[3])})
            for v in ptx.EX2_VARIANTS]
    plan += [(op, {"op": "mufu", "fn": name.split(".")[0], "ftz": ".ftz" in name}) for name, op in ptx.MUFU.items()]
    plan += [(ptx.CONVERSIONS["cvt.rn.bf16.f32"], {"op": "to_bf16"}),
             (ptx.CONVERSIONS["cvt.rn.f16.f32"], {"op": "to_fp16"}),
             (ptx.fp8_pair_neg("e4m3"), {"op": "to_e4m3", "packed": "hi=x,lo=-x"}),
             (ptx.fp8_pair_neg("e5m2"), {"op": "to_e5m2", "packed": "hi=x,lo=-x"})]
    return plan


def _examples(inputs, gpu, emu, limit=10):
    bad = np.flatnonzero(gpu != emu)[:limit]
    return [{"inputs": [hex(int(x[j])) for x in inputs], "gpu": hex(int(gpu[j])), "emulator": hex(int(emu[j]))}
            for j in bad]


def _sweep_unary(op, meta, *, digests: bool, pool):
    """All 2^32 inputs of ``op``: (mismatches, examples, digests or None, seconds)."""
    import torch

    from .kernels import run_range
    emu = emulator(meta)
    t0 = time.time()
    n_chunks = TOTAL // CHUNK
    bufs = [torch.empty(CHUNK, dtype=torch.int32).pin_memory() for _ in range(3)]
    q: queue.Queue = queue.Queue(maxsize=1)

    def produce():
        # kernel + device-to-host copy of chunk c+1 run while the emulators work on chunk c (torch releases
        # the GIL during the copy); three pinned buffers: one being filled, one queued, one being compared
        dev = torch.empty(CHUNK, dtype=torch.int32, device=DEVICE)
        for c in range(n_chunks):
            run_range(op, c * CHUNK, CHUNK, out=dev)
            host = bufs[c % 3]
            host.copy_(dev)
            q.put((c, host.numpy().view(np.uint32)))
        q.put(None)

    th = threading.Thread(target=produce, daemon=True)
    th.start()
    mism, examples, digs = 0, [], []
    x = np.empty(CHUNK, np.uint32)
    while (item := q.get()) is not None:
        c, gpu = item
        futs = ([pool.submit(lambda s: hashlib.sha256(gpu[s:s + golden.EXHAUSTIVE_CHUNK].data).hexdigest(), s)
                 for s in range(0, CHUNK, golden.EXHAUSTIVE_CHUNK)] if digests else [])
        _iota(c * CHUNK, x)
        ref = np.asarray(emu(x), np.uint32)
        n = _count_diff(gpu, ref)
        if n:
            mism += n
            if len(examples) < 10:
                examples += _examples([x], gpu, ref, 10 - len(examples))
        digs += [f.result() for f in futs]
    th.join()
    return mism, examples, (digs if digests else None), time.time() - t0


def _sample_inputs(kind, n, pool):
    """n operands tuples from the golden generator ``kind`` with seeds 1, 2, ... (2^20 per seed)."""
    per = golden.SIZES[kind]
    parts = list(pool.map(lambda s: golden.inputs(kind, s), range(1, max(1, n // per) + 1)))
    return tuple(np.concatenate([p[k] for p in parts])[:n] for k in range(golden.N_OPERANDS[kind]))


def _compare(op, meta, xs):
    from .kernels import run, to_numpy
    t0 = time.time()
    gpu = to_numpy(run(op, *xs))
    ref = np.asarray(emulator(meta)(*xs), np.uint32)
    n = _count_diff(gpu, ref)
    return n, (_examples(xs, gpu, ref) if n else []), time.time() - t0


def verify(*, ops=None, binary_samples=1 << 26, digests_path=None, log=print) -> dict:
    """Run every comparison; returns the summary dict (see the module docstring)."""
    if int(binary_samples) < 1:
        raise ValueError(f"binary_samples must be >= 1, got {binary_samples}")
    require_gpu()
    from .capture import golden_plan
    want = (lambda name: True) if not ops else (lambda name: name in ops)
    pool = ThreadPoolExecutor(max(4, (os.cpu_count() or 4) // 2))
    summary = {"kind": "fa4num gpu verify", "provenance": run_provenance(tool="fa4num gpu verify"),
        "results": []}
    t_all = time.time()
    # warm the numba and Triton compilations out of the timings
    from .kernels import run
    small = np.arange(1024, dtype=np.uint32)
    for op, meta in exhaustive_plan():
        if want(op.name):
            emulator(meta)(small)
            run(op, small)
            _count_diff(small, small)
    t_warm = time.time() - t_all
    digest_doc = {}
    t_ex = time.time()
    for op, meta in exhaustive_plan():
        if not want(op.name):
            continue
        n, ex, digs, sec = _sweep_unary(op, meta, digests=digests_path is not None, pool=pool)
        summary["results"].append({"op": op.name, "ptx": op.asm, "meta": meta,
                                   "inputs": "all 2^32" if TOTAL == 1 << 32 else f"first {TOTAL}", "n": TOTAL, "mismatches": n, "examples": ex, "seconds": round(sec, 2)})
        if digs is not None:
            digest_doc[op.name] = {"ptx": op.asm, "meta": meta, "digests": digs}
        log(f"{op.name:40s} {TOTAL:>10d} mismatches {n:>10d}  {sec:6.1f} s")
    t_ex = time.time() - t_ex
    t_bin = time.time()
    samples = {}
    for op in ptx.all_arith():
        if not want(op.name):
            continue
        kind = "ternary" if op.n_in == 3 else "binary"
        if kind not in samples:
            samples[kind] = _sample_inputs(kind, binary_samples, pool)
        parts = op.name.split(".")
        meta = {"op": parts[0], "ftz": "ftz" in parts}
        if parts[0] not in ("max", "min"):
            meta["rounding"] = parts[1]
        n, ex, sec = _compare(op, meta, samples[kind])
        summary["results"].append({"op": op.name, "ptx": op.asm, "meta": meta,
                                   "inputs": f"golden '{kind}' generator, seeds 1..",
                                   "n": int(samples[kind][0].size), "mismatches": n, "examples": ex,
                                   "seconds": round(sec, 2)})
        log(f"{op.name:40s} {samples[kind][0].size:>10d} mismatches {n:>10d}  {sec:6.1f} s")
    t_bin = time.time() - t_bin
    t_gold = time.time()
    cache = {}
    for spec in golden_plan():
        if not want(spec.op.name):
            continue
        if spec.kind not in cache:
            cache[spec.kind] = golden.inputs(spec.kind, 0)
        n, ex, sec = _compare(spec.op, spec.meta, cache[spec.kind])
        summary["results"].append({"op": spec.op.name, "ptx": spec.op.asm, "meta": spec.meta,
                                   "inputs": f"golden set ({spec.kind}, seed 0)", "n": int(cache[spec.kind][0].size),
                                   "mismatches": n, "examples": ex, "seconds": round(sec, 2)})
    t_gold = time.time() - t_gold
    log(f"golden sets re-checked: {sum(1 for r in summary['results'] if r['inputs'].startswith('golden set'))}")
    summary["seconds"] = {"warm_up": round(t_warm, 1), "exhaustive_unary": round(t_ex, 1),
                          "binary_samples": round(t_bin, 1), "golden_sets": round(t_gold, 1),
                          "total": round(time.time() - t_all, 1)}
    summary["total_mismatches"] = int(sum(r["mismatches"] for r in summary["results"]))
    summary["with_digests"] = digests_path is not None
    if digests_path is not None:
        golden.write_exhaustive(digests_path, digest_doc, summary["provenance"])
    pool.shutdown()
    return summary


def main(args) -> int:
    s = verify(ops=args.ops, binary_samples=args.binary_samples, digests_path=args.digests)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    gpu = s["provenance"].get("gpu", {}).get("name", "gpu").replace(" ", "_")
    path = out / f"gpu_verify_{gpu}_{stamp}.json"
    path.write_text(json.dumps(s, indent=1))
    bad = [r for r in s["results"] if r["mismatches"]]
    print(f"{len(s['results'])} comparisons, {len(bad)} with mismatches, total {s['total_mismatches']}; "
          f"times {s['seconds']}; summary {path}")
    for r in bad:
        print(f"  MISMATCH {r['op']}: {r['mismatches']} of {r['n']}; e.g. {r['examples'][:2]}")
    return 0 if not bad else 3

