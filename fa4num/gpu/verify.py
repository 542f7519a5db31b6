"""``fa4num gpu verify``: every operation on the GPU against its CPU emulator, bit for bit.

- Unary operations (FA4's exp2 in its three forms at degree 3, MUFU ex2/rcp/lg2 with and without .ftz, fp32 ->
  bf16 / fp16 / e4m3 / e5m2): all 2^32 inputs, 2^24 per step. The GPU computes a step's inputs from their index
  (no input memory); its kernel and the asynchronous copy into pinned memory (a side CUDA stream) run while the
  CPU checks the previous step with one fused numba loop (fa4num.gpu.fused: the emulator's result for input
  pattern base + i computed in registers and compared with the GPU word; no input or emulator-output arrays).
  Only a step with mismatches (or an op without a fused loop) takes the unfused path: inputs (iota), the
  emulator's output in its own width, a count (fa4num.gpu.compare) that must equal the fused one, and the
  first mismatching inputs. The fp8 ops run ``cvt...x2.f32 d, x, -x``; a step takes a block and its
  sign-flipped twin block, so each fp8 conversion is emulated once and checked in both bytes.
- Binary and ternary ops (add/sub/mul/fma in rn/rz/rm/rp with and without .ftz, max/min): the golden
  generators (fa4num.golden "binary"/"ternary": specials, cancellation, ties, results near 2^-126, overflow,
  random bits) with seeds 1.. up to the requested sample size.
- Every golden set of fa4num.gpu.capture.golden_plan (seed 0), compared directly.

Compilation (numba per mode/degree, Triton per PTX string) is spread over worker processes (fa4num.gpu._pool),
which also run the small comparisons while the parent sweeps. ``digests_path`` adds the SHA-256 of the GPU
outputs per 2^24-input chunk of every unary op (a capture artifact for CPU CI; it makes the sweep slower).
Writes a summary JSON (counts, examples, timings, provenance) into ``--out``.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import multiprocessing
import os
import shutil
import tempfile
import time
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import numpy as np

from .. import golden
from . import _pool, compare, fused, ptx, require_gpu, run_provenance
from .ops import OpSpec, arith_plan   # arith_plan: in ops, so that capture (golden sets) shares it

CHUNK = golden.EXHAUSTIVE_CHUNK     # inputs per sweep step (2^24, the digest chunk)
TOTAL = 1 << 32                     # inputs of an exhaustive unary sweep
SIGN = 1 << 31
DEVICE = "cuda"


def op_names() -> list[str]:
    """Every operation name ``verify(ops=...)`` accepts (exhaustive, sampled and golden-set names)."""
    from .capture import golden_plan
    names = [s.ptx.name for s in exhaustive_plan()] + [s.ptx.name for s in arith_plan()]
    return list(dict.fromkeys(names + [s.op.name for s in golden_plan()]))


def exhaustive_plan() -> list[OpSpec]:
    """Every unary operation swept over all 2^32 inputs: FA4's exp2 (three forms, degree 3), the six MUFU
    forms, fp32 -> bf16 / fp16, and the fp8 pair conversions run as ``cvt...x2.f32 d, x, -x``."""
    plan = [OpSpec.fa4_ex2(v, 3) for v in ptx.EX2_VARIANTS]
    plan += [OpSpec.mufu(fn, ftz=ftz) for fn in ("ex2", "rcp", "lg2") for ftz in (True, False)]
    plan += [OpSpec("to_bf16"), OpSpec("to_fp16"), OpSpec("to_e4m3", packed="hi=x,lo=-x"),
             OpSpec("to_e5m2", packed="hi=x,lo=-x")]
    return plan


class Pipeline:
    """Step k+1's GPU work (kernels, then an asynchronous copy into pinned host memory, on a side stream) runs
    while the CPU checks step k. ``hold`` buffers: a check may keep its buffer busy with futures (digests) that
    must finish before the buffer is filled again."""

    def __init__(self, capacity: int, hold: int = 2):
        import torch
        self.torch = torch
        self.stream = torch.cuda.Stream()
        self.dev = torch.empty(capacity, dtype=torch.int32, device=DEVICE)
        self.host = [torch.empty(capacity, dtype=torch.int32).pin_memory() for _ in range(max(2, hold))]
        self.busy = [[] for _ in self.host]

    def map(self, items, launch, check) -> list:
        """``launch(item, dev) -> n`` enqueues kernels writing dev[:n] (on the current stream);
        ``check(item, gpu) -> (result, futures)`` gets the n result bits as a uint32 array."""
        torch = self.torch

        def start(k):
            b = k % len(self.host)
            for f in self.busy[b]:
                f.result()
            with torch.cuda.stream(self.stream):
                n = launch(items[k], self.dev)
                host = self.host[b][:n]
                host.copy_(self.dev[:n], non_blocking=True)
                ev = torch.cuda.Event()
                ev.record(self.stream)
            return b, host, ev

        out = []
        nxt = start(0) if items else None
        for k in range(len(items)):
            b, host, ev = nxt
            if k + 1 < len(items):
                nxt = start(k + 1)
            ev.synchronize()
            res, self.busy[b] = check(items[k], host.numpy().view(np.uint32))
            out.append(res)
        for fs in self.busy:
            for f in fs:
                f.result()
        return out


class HostPipeline:
    """:class:`Pipeline`'s interface without a GPU: each step is launched into a host buffer and checked in turn
    (for a device runner that returns numpy arrays, e.g. recorded device output in a CPU test)."""

    def __init__(self, capacity: int):
        self.dev = np.empty(capacity, np.uint32)

    def map(self, items, launch, check) -> list:
        out = []
        for item in items:
            n = launch(item, self.dev)
            res, futs = check(item, self.dev[:n])
            for f in futs:
                f.result()
            out.append(res)
        return out


def sweep_unary(spec: OpSpec, pipe, *, hasher=None, run_range=None, steps=None):
    """All 2^32 inputs of the unary ``spec`` on the device, each step checked against its emulator.

    Parameters
    ----------
    spec : OpSpec
        A unary operation (see :func:`exhaustive_plan`).
    pipe : Pipeline or HostPipeline
        Runs the device work of each step while the CPU checks the one before (``map(items, launch, check)``).
    hasher : executor, optional
        Computes the SHA-256 digest of each 2^24-input chunk of the device's output.
    run_range : callable, optional
        ``run_range(op, start, n, out=dev)`` runs the PTX op over inputs start..start+n-1 (default: the Triton
        kernel of fa4num.gpu.kernels); a CPU test passes recorded device output here.
    steps : list of int, optional
        Only these sweep steps (indexes into the 256, or for the fp8 pairs 128, steps of the full sweep).

    Returns
    -------
    tuple
        (mismatches, examples, digests (chunk -> hex) or None, seconds, steps where the fused count differed
        from the unfused one -- a bug in fa4num.gpu.fused; the unfused count is the one kept).
    """
    if run_range is None:
        from .kernels import run_range
    op = spec.ptx
    emu, neg_pair = spec.sweep_emulator
    fused_count = fused.counter(spec)
    t0 = time.time()
    all_steps = _steps(neg_pair)
    steps = all_steps if steps is None else [all_steps[k] for k in steps]
    x = np.empty(CHUNK * len(steps[0]), np.uint32)
    xf = x.view(np.float32)
    tally = {"n": 0, "examples": [], "digests": {}, "fused_disagree": []}

    def launch(starts, dev):
        for j, s in enumerate(starts):
            run_range(op, s, CHUNK, out=dev[j * CHUNK:(j + 1) * CHUNK])
        return CHUNK * len(starts)

    def check(starts, gpu):
        futs = []
        if hasher is not None:
            for j, s in enumerate(starts):
                futs.append(hasher.submit(_digest, tally["digests"], s // CHUNK, gpu[j * CHUNK:(j + 1) * CHUNK]))
        # fused: emulate input base + i in registers and compare (no input or emulator-output arrays); the
        # unfused path below runs for ops without a fused loop, and for a step with mismatches (its examples)
        n = fused_count(starts, gpu) if fused_count is not None else None
        if n == 0:
            return None, futs
        for j, s in enumerate(starts):
            compare.iota(s, x[j * CHUNK:(j + 1) * CHUNK])
        e = emu(xf)
        n_unfused = compare.count_mismatches_neg_pair(gpu, e) if neg_pair else compare.count_mismatches(gpu, e)
        if n is not None and n != n_unfused:
            tally["fused_disagree"].append({"starts": [hex(v) for v in starts], "fused": n, "unfused": int(n_unfused)})
        n = n_unfused
        if n:
            tally["n"] += int(n)
            want = compare.neg_pair_words(e) if neg_pair else e
            for j in compare.first_mismatches(gpu, want, 10 - len(tally["examples"])):
                tally["examples"].append({"inputs": [hex(int(x[j]))], "gpu": hex(int(gpu[j])),
                                          "emulator": hex(int(want[j]))})
        return None, futs

    pipe.map(steps, launch, check)
    digs = None if hasher is None else [tally["digests"][k] for k in sorted(tally["digests"])]
    return tally["n"], tally["examples"], digs, time.time() - t0, tally["fused_disagree"]


def _steps(neg_pair: bool) -> list[tuple]:
    """Start patterns of each sweep step: one 2^24 block, or for the fp8 (x, -x) ops a block of the positive half
    with its sign-flipped twin block (together they cover all 2^32 inputs once)."""
    if neg_pair:
        return [(c * CHUNK, c * CHUNK + SIGN) for c in range(SIGN // CHUNK)]
    return [(c * CHUNK,) for c in range(TOTAL // CHUNK)]


def _digest(into: dict, chunk: int, gpu) -> None:
    into[chunk] = hashlib.sha256(gpu.data).hexdigest()


def _fused_groups(specs) -> list:
    """The sweep's fused checks as (specs, part) tasks that share no numba function (fa4num.gpu.fused.parts): each
    ex2 piece for all forms together (closures of one function: one cache index), every other op on its own."""
    groups: dict = {}
    for s in specs:
        for part in fused.parts(s):
            key = ("ex2emu", part) if s.op == "ex2emu" else (s.op, s.fn, s.ftz)
            groups.setdefault(key, ([], part))[0].append(s)
    return list(groups.values())


def _warm_groups(specs) -> list:
    """The sweep emulators split into tasks that share no numba function (safe to compile side by side into
    one cache): the ex2 variants together, each MUFU function, each conversion."""
    groups: dict = {}
    for s in specs:
        key = s.compile_key
        groups.setdefault(key[:2] if key[0] != "ex2emu" else ("ex2emu",), []).append(s)
    return list(groups.values())


class _Inline:
    """An executor that runs each task at submit time in this process (``workers=0``, or no processes here)."""

    def submit(self, fn, *args):
        f = Future()
        try:
            f.set_result(fn(*args))
        except Exception as exc:  # noqa: BLE001 -- handed to whoever waits on the future, as a pool would
            f.set_exception(exc)
        return f

    def shutdown(self, cancel_futures=False):
        pass


def _pools(n_check: int, n_warm: int, private_root: str, log):
    """(check pool, warm pool): spawned processes (the parent holds a CUDA context: no fork), or inline
    executors when ``n_check`` is 0 or processes cannot start here."""
    if n_check == 0:
        return _Inline(), _Inline()
    ctx = multiprocessing.get_context("spawn")
    check = ProcessPoolExecutor(n_check, mp_context=ctx, initializer=_pool.init_worker,
                                initargs=(private_root, 2))
    warm = ProcessPoolExecutor(n_warm, mp_context=ctx, initializer=_pool.init_worker, initargs=(None, 2))
    try:
        check.submit(os.getpid).result(timeout=120)
        warm.submit(os.getpid).result(timeout=120)
    except Exception as exc:  # noqa: BLE001 -- any failure to start processes: run everything here instead
        log(f"worker processes unavailable ({exc!r}); compiling and comparing in this process")
        check.shutdown(cancel_futures=True)
        warm.shutdown(cancel_futures=True)
        return _Inline(), _Inline()
    return check, warm


def _spread(pool, fn, items: list, workers: int) -> list:
    """``fn`` over ``items`` split round-robin into at most ``workers`` tasks; their futures."""
    k = max(1, workers)
    return [pool.submit(fn, items[i::k]) for i in range(min(k, len(items)))]


def verify(*, ops=None, binary_samples=1 << 24, digests_path=None, workers=None, log=print) -> dict:
    """Run every comparison; returns the summary dict (see the module docstring).

    workers: processes for compilation and the small comparisons (default: half the CPU cores, at least 2; 0 runs
    everything in this process)."""
    if int(binary_samples) < 1:
        raise ValueError(f"binary_samples must be >= 1, got {binary_samples}")
    ncpu = os.cpu_count() or 4
    workers = max(2, ncpu // 2) if workers is None else int(workers)
    if workers < 0:
        raise ValueError(f"workers must be >= 0 (0: everything in this process), got {workers}")
    require_gpu()
    from .capture import golden_plan
    want = (lambda name: True) if not ops else (lambda name: name in ops)
    t_all = time.time()
    plan = [s for s in exhaustive_plan() if want(s.ptx.name)]
    own_keys = {s.compile_key for s in plan}
    # golden sets whose emulator code the parent compiles anyway run in the parent; the rest in the workers
    gold = [s for s in golden_plan() if want(s.op.name)]
    gold_own = [s for s in gold if s.spec.compile_key in own_keys]
    arith = [s for s in arith_plan() if want(s.ptx.name)]
    tmp = tempfile.mkdtemp(prefix="fa4num-verify-")
    check_pool, warm_pool = _pools(workers, max(1, len(_fused_groups(plan))), os.path.join(tmp, "numba"), log)
    try:
        # 1. side by side: numba for the sweep (warm pool, shared cache: first the fused checks the sweep needs,
        #    then the emulators of the parent's golden sets, needed after it), Triton kernels for the parent, the
        #    binary/ternary samples, the worker-side golden sets (check pool, private caches)
        warm_futs = [warm_pool.submit(_pool.warm_fused, g, part) for g, part in _fused_groups(plan)]
        emu_futs = [warm_pool.submit(_pool.warm_emulators, g, False) for g in _warm_groups(plan)]
        emu_futs.append(warm_pool.submit(_pool.warm_emulators, [], True))
        # Triton: the sweep's kernels first (needed before it), then those of the parent's golden sets (after it)
        kern_futs = _spread(check_pool, _pool.warm_kernels, [(s.ptx, True) for s in plan], workers)
        gold_kern_futs = _spread(check_pool, _pool.warm_kernels, [(s.op, False) for s in gold_own], workers)
        kinds = sorted({"ternary" if s.n_in == 3 else "binary" for s in arith})
        per = golden.SIZES["binary"]
        seeds = range(1, max(1, -(-int(binary_samples) // per)) + 1)
        sample_futs = {(k, s): check_pool.submit(_pool.make_samples, k, s, tmp) for k in kinds for s in seeds}
        by_key: dict = {}
        for s in gold:
            if s not in gold_own:
                by_key.setdefault(s.spec.compile_key, []).append(
                    (s.op, s.spec, ("golden", s.kind, 0), f"golden set ({s.kind}, seed 0)"))
        # golden sets of the ex2 degrees and the widening conversions need no samples: start them now
        check_futs = [check_pool.submit(_pool.check, by_key.pop(k))
                      for k in sorted(by_key, key=lambda k: -len(by_key[k])) if k[0] != "fp"]
        # the parent meanwhile: CUDA, pinned buffers
        pipe = Pipeline(2 * CHUNK, hold=8 if digests_path is not None else 2)
        # load the fused checks from the numba cache while the workers go on with the Triton kernels (and the
        # golden-set emulators), then the kernels (a first launch finds them in Triton's disk cache)
        from .kernels import run_range
        for f in warm_futs:
            f.result()
        for s in plan:
            for part in fused.parts(s):
                fused.warm(s, part)
        for f in kern_futs:
            f.result()
        for s in plan:
            run_range(s.ptx, 0, 1024)
        t_warm = time.time() - t_all
        log(f"warm-up (compilation in {workers} + {len(warm_futs)} processes) {t_warm:.1f} s")
        # 2. binary/ternary samples (their golden sets too: same compiled loop) go to the check workers
        files = {k: tuple(tuple(sample_futs[(k, s)].result()) for s in seeds) for k in kinds}
        for s in arith:
            kind = "ternary" if s.n_in == 3 else "binary"
            by_key.setdefault(s.compile_key, []).append(
                (s.ptx, s, ("samples", kind, int(binary_samples), files[kind]), f"golden '{kind}' generator, seeds 1.."))
        check_futs += [check_pool.submit(_pool.check, items) for items in by_key.values()]
        # 3. the exhaustive sweeps
        summary = {"kind": "fa4num gpu verify", "provenance": run_provenance(tool="fa4num gpu verify"),
                   "results": []}
        digest_doc = {}
        hasher = ThreadPoolExecutor(max(2, ncpu // 2)) if digests_path is not None else None
        t_ex = time.time()
        for spec in plan:
            op = spec.ptx
            n, ex, digs, sec, disagree = sweep_unary(spec, pipe, hasher=hasher)
            summary["results"].append({"op": op.name, "ptx": op.asm, "meta": spec.to_meta(), "inputs": "all 2^32",
                                       "n": TOTAL, "mismatches": n, "examples": ex, "seconds": round(sec, 2)})
            if disagree:
                summary["results"][-1]["fused_disagreements"] = disagree[:10]
                log(f"{op.name}: fused and unfused counts differ in {len(disagree)} steps, e.g. {disagree[0]}")
            if digs is not None:
                digest_doc[op.name] = {"ptx": op.asm, "meta": spec.to_meta(), "digests": digs}
            log(f"{op.name:40s} {TOTAL:>10d} mismatches {n:>10d}  {sec:6.1f} s")
        t_ex = time.time() - t_ex
        if hasher is not None:
            hasher.shutdown()
        # 4. the parent's golden sets (their emulators compiled during the sweep), then the workers' results
        t_rest = time.time()
        for f in emu_futs + gold_kern_futs:
            f.result()
        summary["results"] += _check_golden_own(gold_own, pipe)
        for f in check_futs:
            summary["results"] += f.result()
        t_rest = time.time() - t_rest
    finally:
        check_pool.shutdown(cancel_futures=True)
        warm_pool.shutdown(cancel_futures=True)
        shutil.rmtree(tmp, ignore_errors=True)
    n_gold = sum(1 for r in summary["results"] if r["inputs"].startswith("golden set"))
    n_bin = sum(1 for r in summary["results"] if r["inputs"].startswith("golden '"))
    for r in summary["results"][len(plan):]:
        if r["mismatches"]:
            log(f"{r['op']:40s} {r['n']:>10d} mismatches {r['mismatches']:>10d}  ({r['inputs']})")
    log(f"binary/ternary sample comparisons: {n_bin}; golden sets re-checked: {n_gold}")
    summary["seconds"] = {"warm_up": round(t_warm, 1), "exhaustive_unary": round(t_ex, 1),
                          "after_sweep_golden_and_samples": round(t_rest, 1),
                          "total": round(time.time() - t_all, 1)}
    summary["workers"] = workers
    summary["chunk"] = CHUNK
    summary["binary_samples"] = int(binary_samples)
    summary["total_mismatches"] = int(sum(r["mismatches"] for r in summary["results"]))
    summary["with_digests"] = digests_path is not None
    if digests_path is not None:
        golden.write_exhaustive(digests_path, digest_doc, summary["provenance"])
    return summary


def _check_golden_own(specs, pipe: Pipeline) -> list[dict]:
    """Golden sets (seed 0) whose emulator the parent has compiled for the sweep, pipelined like the sweep."""
    from .kernels import run
    cache: dict = {}
    for s in specs:
        if s.kind not in cache:
            xs = golden.inputs(s.kind, 0)
            cache[s.kind] = (xs, [pipe.torch.from_numpy(x.view(np.int32)).to(DEVICE) for x in xs])

    def launch(s, dev):
        out = run(s.op, *cache[s.kind][1])
        dev[:out.numel()].copy_(out)
        return out.numel()

    def check(s, gpu):
        t = time.time()
        xs = cache[s.kind][0]
        ref = np.asarray(s.spec.emulator(*xs), np.uint32)
        n = int(compare.count_mismatches(gpu, ref))
        ex = [] if not n else [{"inputs": [hex(int(x[j])) for x in xs], "gpu": hex(int(gpu[j])),
                                "emulator": hex(int(ref[j]))} for j in compare.first_mismatches(gpu, ref, 10)]
        return {"op": s.op.name, "ptx": s.op.asm, "meta": s.spec.to_meta(), "inputs": f"golden set ({s.kind}, seed 0)",
                "n": int(gpu.size), "mismatches": n, "examples": ex, "seconds": round(time.time() - t, 2)}, []

    return pipe.map(specs, launch, check)


def main(args) -> int:
    s = verify(ops=args.ops, binary_samples=args.binary_samples, digests_path=args.digests, workers=args.workers)
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

