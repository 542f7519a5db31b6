"""CPU-side cost of one exhaustive-sweep step of ``fa4num gpu verify``, without a GPU.

The GPU's output is faked by the emulator's own result (zero-extended to uint32, made once outside the timing),
so this measures exactly the CPU work per chunk: the inputs (iota), the emulator, and the comparison, in
- "old": the former glue (``OpSpec.emulator`` widening to uint32 -- for the fp8 pair ops to_{e4m3,e5m2}x2(x, -x)
  with the x ^ 0x80000000 temporary and the packing copies -- then a separate count), and
- "new": ``OpSpec.sweep_emulator`` (native-width bits, no copy) with the fused loops of fa4num.gpu.compare
  (fp8: one conversion per input, checked in both byte positions), and
- "fused": fa4num.gpu.fused (the emulator's result for input pattern base + i computed inside the compare loop;
  no input or emulator-output arrays), what verify runs now.
Prints ms per step and the projected seconds for all 2^32 inputs per op.
Usage: python experiments/gpu/verify_profile.py [log2_chunk ...] [--ops NAME ...] [--json OUT]
"""
import argparse
import json
import time

import numpy as np

from fa4num.gpu import compare, fused
from fa4num.gpu.verify import exhaustive_plan

START = 0xBE000000          # an ordinary block of negative values (softmax's exp2 domain)


def _best(fn, repeat=3):
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        r = fn()
        best = min(best, time.perf_counter() - t)
    return best, r


def profile(chunk, ops=None):
    rows = []
    x = np.empty(chunk, np.uint32)
    x2 = np.empty(2 * chunk, np.uint32)
    for meta in exhaustive_plan():
        op = meta.ptx
        if ops and op.name not in ops:
            continue
        old = meta.emulator
        new, pair = meta.sweep_emulator
        compare.iota(START, x)
        old(x[:1024])
        new(x[:1024].view(np.float32))
        t_iota, _ = _best(lambda: compare.iota(START, x))
        fake = np.asarray(old(x), np.uint32).copy()          # "GPU" output of this chunk
        t_old_emu, ref = _best(lambda: np.asarray(old(x), np.uint32))
        t_old_cmp, n_old = _best(lambda: compare.count_mismatches(fake, ref))
        if pair:
            # new: the block and its sign-flipped twin together (2 chunks of inputs, one conversion each)
            compare.iota(START, x2[:chunk])
            compare.iota(START ^ 0x80000000, x2[chunk:])
            gpu2 = np.concatenate([fake, np.asarray(old(x2[chunk:]), np.uint32)])
            t_new_emu, e = _best(lambda: new(x2.view(np.float32)))
            t_new_cmp, n_new = _best(lambda: compare.count_mismatches_neg_pair(gpu2, e))
            t_fused, n_fused = _best(lambda: fused.counter(meta)((START, START ^ 0x80000000), gpu2))
            per = 2                                          # inputs per step: 2 chunks
        else:
            t_new_emu, e = _best(lambda: new(x.view(np.float32)))
            t_new_cmp, n_new = _best(lambda: compare.count_mismatches(fake, e))
            t_fused, n_fused = _best(lambda: fused.counter(meta)((START,), fake))
            per = 1
        assert n_old == 0 and n_new == 0 and n_fused == 0, (op.name, n_old, n_new, n_fused)
        steps = (1 << 32) // (chunk * per)
        r = {"op": op.name, "chunk": chunk, "iota_ms": t_iota * 1e3 * per,
             "old_emulator_ms": t_old_emu * 1e3 * per, "old_compare_ms": t_old_cmp * 1e3 * per,
             "new_emulator_ms": t_new_emu * 1e3, "new_compare_ms": t_new_cmp * 1e3,
             "old_2e32_s": (1 << 32) // chunk * (t_iota + t_old_emu + t_old_cmp),
             "new_2e32_s": steps * (per * t_iota + t_new_emu + t_new_cmp),
             "fused_ms": t_fused * 1e3, "fused_2e32_s": steps * t_fused}
        rows.append(r)
        print(f"{op.name:38s} 2^{chunk.bit_length() - 1} iota {r['iota_ms']:6.1f}  old emu {r['old_emulator_ms']:7.1f} "
              f"cmp {r['old_compare_ms']:6.1f}  new emu {r['new_emulator_ms']:7.1f} cmp {r['new_compare_ms']:6.1f} "
              f"fused {r['fused_ms']:7.1f} ms/step -> 2^32: old {r['old_2e32_s']:6.1f} s, new {r['new_2e32_s']:6.1f} s, "
              f"fused {r['fused_2e32_s']:6.1f} s", flush=True)
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("log2_chunk", nargs="*", type=int, default=[22, 24])
    p.add_argument("--ops", nargs="*", default=None)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    rows = []
    for k in a.log2_chunk:
        rows += profile(1 << k, a.ops)
        for key in ("old_2e32_s", "new_2e32_s", "fused_2e32_s"):
            print(f"  2^{k}: sum {key} = {sum(r[key] for r in rows if r['chunk'] == 1 << k):.1f} s")
    if a.json:
        from fa4num.provenance import provenance
        with open(a.json, "w") as fh:
            json.dump({"rows": rows, "provenance": provenance(tool="experiments/gpu/verify_profile.py")}, fh,
                      indent=1)


if __name__ == "__main__":
    main()
