"""Where the time of ``fa4num gpu verify`` goes: per exhaustive op, one chunk (fa4num.gpu.verify.CHUNK inputs)
timed stage by stage.

GPU kernel + device-to-host copy (pinned), CPU emulator (numba, all cores, widened to uint32 as before the fused
compares of fa4num.gpu.compare), compare, SHA-256 of the 2^24 sub-chunks (thread pool). Prints a table and the
projected time of an all-2^32 sweep per op. experiments/gpu/verify_profile.py measures the CPU side alone.
Usage: python experiments/gpu/verify_timing.py [OUT.json]
"""
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
import hashlib

import numpy as np
import torch

from fa4num import golden
from fa4num.gpu.kernels import run_range
from fa4num.gpu.compare import count_mismatches as _count_diff, iota as _iota
from fa4num.gpu.verify import CHUNK, exhaustive_plan


def main(out=None):
    host = torch.empty(CHUNK, dtype=torch.int32).pin_memory()
    dev = torch.empty(CHUNK, dtype=torch.int32, device="cuda")
    x = np.empty(CHUNK, np.uint32)
    pool = ThreadPoolExecutor(8)
    rows = []
    start = 0xBE000000          # a chunk of ordinary negative values (softmax's exp2 domain)
    for meta in exhaustive_plan():
        op = meta.ptx
        emu = meta.emulator
        _iota(start, x)
        emu(x[:4096]); run_range(op, start, CHUNK, out=dev); torch.cuda.synchronize()
        t = time.perf_counter(); run_range(op, start, CHUNK, out=dev); torch.cuda.synchronize()
        t_gpu = time.perf_counter() - t
        t = time.perf_counter(); host.copy_(dev); t_d2h = time.perf_counter() - t
        gpu = host.numpy().view(np.uint32)
        t = time.perf_counter(); _iota(start, x); ref = np.asarray(emu(x), np.uint32); t_emu = time.perf_counter() - t
        t = time.perf_counter(); n = _count_diff(gpu, ref); t_cmp = time.perf_counter() - t
        t = time.perf_counter()
        list(pool.map(lambda s: hashlib.sha256(gpu[s:s + golden.EXHAUSTIVE_CHUNK].data).hexdigest(),
                      range(0, CHUNK, golden.EXHAUSTIVE_CHUNK)))
        t_sha = time.perf_counter() - t
        chunks = (1 << 32) // CHUNK
        rows.append({"op": op.name, "gpu_ms": t_gpu * 1e3, "d2h_ms": t_d2h * 1e3, "emulator_ms": t_emu * 1e3,
                     "compare_ms": t_cmp * 1e3, "sha256_ms": t_sha * 1e3, "mismatches_in_chunk": int(n),
                     "projected_2e32_s_no_digest": chunks * max(t_gpu + t_d2h, t_emu + t_cmp),
                     "projected_2e32_s_serial_all": chunks * (t_gpu + t_d2h + t_emu + t_cmp + t_sha)})
        r = rows[-1]
        print(f"{op.name:38s} gpu {r['gpu_ms']:6.1f} d2h {r['d2h_ms']:6.1f} emu {r['emulator_ms']:7.1f} "
              f"cmp {r['compare_ms']:5.1f} sha {r['sha256_ms']:6.1f} ms/2^26 -> 2^32: "
              f"{r['projected_2e32_s_no_digest']:5.1f} s overlapped, {r['projected_2e32_s_serial_all']:5.1f} s serial",
              flush=True)
    tot = sum(r["projected_2e32_s_no_digest"] for r in rows)
    print(f"projected exhaustive unary sweep without digests, GPU/CPU overlapped: {tot:.1f} s")
    if out:
        with open(out, "w") as fh:
            json.dump({"rows": rows, "projected_total_s": tot}, fh, indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:])
