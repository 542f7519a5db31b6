"""Worker processes of ``fa4num gpu verify`` (spawned; this module imports nothing heavy at the top).

Most of a fresh machine's verify time used to be compilation: numba compiles one loop per rounding mode, ftz
flag and polynomial degree (fa4num.fp.arith uses numba.literally; fa4num.ex2 one specialisation per coefficient
count), and Triton one kernel per PTX string. These compilations are independent, so worker processes do them
side by side:

- "warm" workers compile the fused checks of the exhaustive sweep (fa4num.gpu.fused; needed before the sweep) and
  the emulators of the parent's golden sets (needed after it) into the shared numba cache (each task owns its
  numba functions, so no two processes ever write the same cache index), and the parent then loads them;
- "check" workers (each with a private numba cache directory, so they may compile any specialisation) run the
  small comparisons themselves on the GPU -- the binary/ternary samples and most golden sets -- and compile the
  Triton kernels the parent will need into Triton's on-disk cache.
"""
from __future__ import annotations

import os
import sys
import time

_inputs: dict = {}          # per worker: (source key) -> (numpy operands, CUDA operands)


_private = None             # this worker's own numba cache directory (check workers)


def init_worker(private_cache_root, threads):
    """Runs first in each worker. Sets numba's cache directory and thread count; numba reads them on import, and
    again here if the re-imported main module already imported it.

    Check workers (private cache) run at a lower priority: their compilations fill the cores the sweep leaves
    idle instead of slowing its parallel loops. Warm workers only compile numba code on numpy arrays; torch is
    kept out of them (fa4num.fp looks for torch tensors and would import it: seconds of CPU per process)."""
    global _private
    if private_cache_root:
        _private = os.path.join(private_cache_root, str(os.getpid()))
        os.makedirs(_private, exist_ok=True)
        os.environ["NUMBA_CACHE_DIR"] = _private
        os.nice(10)
    elif "torch" not in sys.modules:
        sys.modules["torch"] = None     # `import torch` raises ImportError here: fa4num.fp treats it as absent
    os.environ["NUMBA_NUM_THREADS"] = str(threads)
    if "numba" in sys.modules:
        from numba.core import config
        config.reload_config()
        for obj in _cached_functions():
            obj.enable_caching()        # a new cache object, located with the reloaded configuration


def _cached_functions():
    """The numba functions with an on-disk cache defined in the fa4num modules loaded so far."""
    for name, mod in list(sys.modules.items()):
        if name.startswith("fa4num."):
            for obj in vars(mod).values():
                if getattr(getattr(obj, "_cache", None), "_cache_path", None) is not None:
                    yield obj


def _assert_private_cache():
    """Every cached numba function loaded in this check worker must use its private cache directory: two
    processes writing different specialisations of one function into a shared cache index can lose entries or
    pair a key with another's code. Imports the emulator modules first so that they are covered."""
    import importlib
    if _private is None:        # running inside the parent (workers=0): its own cache, nothing side by side
        return
    for name in ("fa4num.fp.arith", "fa4num.fp.convert", "fa4num.ex2.emulate", "fa4num.hw.mufu",
                 "fa4num.gpu.compare"):
        importlib.import_module(name)
    for obj in _cached_functions():
        if not str(obj._cache._cache_path).startswith(_private):
            raise RuntimeError(f"{obj.py_func.__module__}.{obj.py_func.__name__} caches into "
                               f"{obj._cache._cache_path}, not this worker's private numba cache {_private}")


def warm_emulators(specs, compare_kernels: bool) -> float:
    """Compile the sweep emulators of ``specs`` (fa4num.gpu.ops.OpSpec; and the compare loops) into the numba
    cache; seconds taken."""
    import numpy as np

    from .. import golden
    from . import compare
    t = time.time()
    (x,) = golden.inputs("unary", 0)       # every path of every emulator (specials, large, tiny values)
    for spec in specs:
        fn, _ = spec.sweep_emulator
        fn(x.view(np.float32))
        spec.emulator(x)                    # the golden-set form (same compiled loops; the glue is numpy)
    if compare_kernels:
        b32 = np.zeros(64, np.uint32)
        compare.iota(0, b32)
        for e in (b32, np.zeros(64, np.uint16), np.zeros(64, np.uint8)):
            compare.count_mismatches(b32, e)
            compare.first_mismatches(b32, e, 10)
        compare.count_mismatches_neg_pair(b32, np.zeros(64, np.uint8))
        compare.neg_pair_words(np.zeros(64, np.uint8))
    return time.time() - t


def warm_fused(specs, part: str) -> float:
    """Compile piece ``part`` (fa4num.gpu.fused.parts) of the fused sweep checks of ``specs`` into the numba
    cache; seconds taken."""
    from . import fused
    t = time.time()
    for spec in specs:
        fused.warm(spec, part)
    return time.time() - t


def warm_kernels(ops) -> float:
    """Compile Triton kernels (fa4num.gpu.ptx.Op list) into Triton's on-disk cache by running each once."""
    import numpy as np

    from .kernels import run, run_range
    t = time.time()
    x = np.arange(256, dtype=np.uint32)
    for op, ranged in ops:
        if ranged:
            run_range(op, 0, 256)
        else:
            run(op, *([x] * op.n_in))
    import torch
    torch.cuda.synchronize()
    return time.time() - t


def make_samples(kind: str, seed: int, folder: str) -> list[str]:
    """Operands of golden generator ``kind`` for ``seed`` saved as .npy files in ``folder`` (paths returned)."""
    import numpy as np

    from .. import golden
    paths = []
    for k, a in enumerate(golden.inputs(kind, seed)):
        p = os.path.join(folder, f"{kind}_{seed}_{k}.npy")
        np.save(p, a)
        paths.append(p)
    return paths


def _operands(source):
    """(numpy operands, CUDA operands) of a check's input source, cached per worker."""
    if source not in _inputs:
        import numpy as np
        import torch

        from .. import golden
        if source[0] == "golden":
            xs = golden.inputs(source[1], source[2])
        else:                                   # ("samples", kind, n, ((path, ...) per seed, ...))
            _, kind, n, files = source
            xs = tuple(np.concatenate([np.load(f[k]) for f in files])[:n] for k in range(len(files[0])))
        _inputs[source] = (xs, [torch.from_numpy(x.view(np.int32)).cuda() for x in xs])
    return _inputs[source]


def check(items) -> list[dict]:
    """Run each (PTX op, OpSpec, source, label) on the GPU and compare with the spec's CPU emulator."""
    import numpy as np

    from . import compare
    from .kernels import run, to_numpy
    _assert_private_cache()
    results = []
    for op, spec, source, label in items:
        t = time.time()
        xs, dev = _operands(source)
        gpu = to_numpy(run(op, *dev))
        ref = np.asarray(spec.emulator(*xs), np.uint32)
        n = int(compare.count_mismatches(gpu, ref))
        ex = [] if not n else [{"inputs": [hex(int(x[j])) for x in xs], "gpu": hex(int(gpu[j])),
                                "emulator": hex(int(ref[j]))} for j in compare.first_mismatches(gpu, ref, 10)]
        results.append({"op": op.name, "ptx": op.asm, "meta": spec.to_meta(), "inputs": label, "n": int(gpu.size),
                        "mismatches": n, "examples": ex, "seconds": round(time.time() - t, 2),
                        "worker": os.getpid()})
    return results
