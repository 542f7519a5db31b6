"""The statistical FA4 forward on the GPU (``fa4num.attention.forward_torch``: its Triton kernel, the default on
CUDA, and its tiled torch code) against the real FA4 kernel on the same GPU, side by side in one run (issue 15,
point 4: within 20x of FA4 on (1, 32768, 16, 128) causal).

Run on the device machine after ``. fa4num/gpu/fa4-env.sh`` (FA4 and the CuTe DSL on PYTHONPATH):
    python experiments/gpu/bench_forward_torch.py --out $OUT [--rev <git rev>]
Expected wall time on an H200: ~90 s (FA4's JIT compile ~10-30 s, Triton's compile a few s per variant, the
torch backend ~0.6 s per call, the accuracy cases with the CPU statistical mode, an optional torch.compile
variant of the torch backend's tile softmax). Without FA4 (or without CUDA, for a
CPU dry run: ``--shape 1,512,2,64 --check-shape 1,256,2,64``) the FA4 rows are recorded as missing.

Timing: CUDA events around each call, one warm-up call each (FA4's JIT compile, cuBLAS heuristics), then
``--rounds`` alternating rounds, median reported. Accuracy on ``--check-shape``: max and mean |out - fp64
reference| for FA4 and forward_torch (SM90 path, the kernel the H200 runs), the share of outputs where they
are bit-identical, and the largest LSE difference; the Triton kernel against the torch backend and against
``forward(mode="statistical")`` on the CPU (outputs, LSE, every counter), for both kernels and for a feature
case (GQA, softcap, window, sink). Writes ``bench_forward_torch.json`` with provenance.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import statistics
import sys
import time

import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from fa4num.attention import forward, forward_torch  # noqa: E402
from fa4num.attention import torch_backend  # noqa: E402
from fa4num.attention import triton_backend  # noqa: E402
from fa4num.attention.problem import plan  # noqa: E402

COUNTERS = ("kv_blocks", "rescale_events", "rescales_done", "exp2_emulated", "exp2_mufu", "masked_by_window",
            "p_saturated")


def _fa4():
    """FA4's forward, or None where flash-attn-4 is not importable (CPU dry run)."""
    try:
        from flash_attn.cute import flash_attn_func
    except Exception as e:   # noqa: BLE001 - any import failure means "no FA4 here"
        print(f"FA4 not available: {type(e).__name__}: {e}")
        return None
    return lambda q, k, v, causal: flash_attn_func(q, k, v, causal=causal, return_lse=True)


def _inputs(shape, device, seed):
    b, s, h, d = shape
    g = torch.Generator(device="cpu").manual_seed(seed)
    return [torch.randn((b, s, h, d), generator=g).to(torch.bfloat16).to(device) for _ in range(3)]


def _timer(device):
    """Seconds of one call: CUDA events on a GPU, perf_counter on the CPU."""
    if device.type == "cuda":
        def run(fn):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end) / 1e3
    else:
        def run(fn):
            t = time.perf_counter()
            fn()
            return time.perf_counter() - t
    return run


def _accuracy(shape, device, fa4, seed):
    q, k, v = _inputs(shape, device, seed)
    # fp64 reference on the device (fa4num.attention.reference.attention_fp64 is the numpy twin)
    qf, kf, vf = (x.double().transpose(1, 2) for x in (q, k, v))
    sc = (qf @ kf.transpose(-1, -2)) / math.sqrt(shape[3])
    sq, sk = sc.shape[-2:]
    sc = sc.masked_fill(torch.ones(sq, sk, dtype=torch.bool, device=sc.device).triu(sk - sq + 1), -math.inf)
    ref_lse = torch.logsumexp(sc, -1)
    ref = (torch.softmax(sc, -1) @ vf).transpose(1, 2)
    res = {"shape": list(shape), "causal": True, "forward_torch_backend": _backend_name(device)}
    mine = forward_torch(q, k, v, causal=True, kernel="fa4-sm90")
    err = (mine.out.double() - ref).abs()
    res["forward_torch_sm90"] = {"max_abs_err": float(err.max()), "mean_abs_err": float(err.mean()),
                                 "max_lse_err": float((mine.lse.double() - ref_lse).abs().max())}
    if fa4 is not None:
        out, lse = fa4(q, k, v, True)
        e = (out.double() - ref).abs()
        res["fa4"] = {"max_abs_err": float(e.max()), "mean_abs_err": float(e.mean()),
                      "max_lse_err": float((lse.double() - ref_lse).abs().max())}
        res["bit_identical_share"] = float((out.view(torch.int16) == mine.out.view(torch.int16)).double().mean())
        res["max_lse_diff_vs_fa4"] = float((lse.float() - mine.lse).abs().max())
    return res


def _backend_name(device):
    ok = device.type == "cuda" and triton_backend.available()
    return "triton" if ok else "torch"


def _compare(a, b):
    """Two forward results (torch or numpy outs): output and LSE differences, counters equal or not."""
    oa = a.out.float().cpu().numpy() if hasattr(a.out, "cpu") else np.asarray(a.out, np.float32)
    ob = b.out.float().cpu().numpy() if hasattr(b.out, "cpu") else np.asarray(b.out, np.float32)
    la = a.lse.cpu().numpy() if hasattr(a.lse, "cpu") else np.asarray(a.lse)
    lb = b.lse.cpu().numpy() if hasattr(b.lse, "cpu") else np.asarray(b.lse)
    fin = np.isfinite(la) & np.isfinite(lb)
    return {"max_abs_out_diff": float(np.abs(oa - ob).max()), "share_out_differs": float((oa != ob).mean()),
            "max_lse_diff": float(np.abs(la[fin] - lb[fin]).max()) if fin.any() else 0.0,
            "lse_finite_same": bool(np.array_equal(np.isfinite(la), np.isfinite(lb))),
            "counters_equal": {n: bool(np.array_equal(getattr(a.stats, n), getattr(b.stats, n)))
                               for n in COUNTERS},
            "max_lag_diff": float(np.abs(a.stats.max_lag - b.stats.max_lag).max()),
            "sink_share_max_diff": float(np.abs(a.stats.sink_share - b.stats.sink_share).max())}


def _triton_checks(device, seed):
    """The Triton kernel against the torch backend (same GPU) and the CPU statistical mode (numpy)."""
    import ml_dtypes
    res = {}
    cases = {"sm90_causal": ((1, 2048, 4, 128), (1, 2048, 4, 128), dict(kernel="fa4-sm90", causal=True)),
             "sm100_causal": ((1, 2048, 4, 128), (1, 2048, 4, 128), dict(kernel="fa4-sm100", causal=True)),
             "sm90_gqa_softcap_window_sink": ((2, 700, 8, 64), (2, 900, 2, 64),
                                              dict(kernel="fa4-sm90", softcap=20.0, window_size=(300, 40),
                                                   learnable_sink=np.linspace(-1, 3, 8).astype(np.float32))),
             "sm100_gqa_sink_causal": ((1, 1000, 4, 128), (1, 1300, 2, 128),
                                       dict(kernel="fa4-sm100", causal=True,
                                            learnable_sink=np.float32([0, 1, 2, 3])))}
    g = torch.Generator(device="cpu").manual_seed(seed)
    for name, (qs, ks, opts) in cases.items():
        q = (torch.randn(qs, generator=g) * 2).to(torch.bfloat16)
        k, v = (torch.randn(ks, generator=g).to(torch.bfloat16) for _ in range(2))
        t = forward_torch(q.to(device), k.to(device), v.to(device), backend="triton", **opts)
        eager = forward_torch(q.to(device), k.to(device), v.to(device), backend="torch", **opts)
        arrays = [x.view(torch.int16).numpy().view(ml_dtypes.bfloat16) for x in (q, k, v)]
        cpu = forward(*arrays, mode="statistical", **opts)
        res[name] = {"shape_q": list(qs), "shape_kv": list(ks),
                     "options": {k_: (v_.tolist() if hasattr(v_, "tolist") else v_) for k_, v_ in opts.items()},
                     "triton_vs_torch_backend": _compare(t, eager), "triton_vs_cpu_statistical": _compare(t, cpu),
                     "torch_backend_vs_cpu_statistical": _compare(eager, cpu)}
        print(f"check {name}: triton vs torch {res[name]['triton_vs_torch_backend']['max_abs_out_diff']:.3g}, "
              f"vs cpu {res[name]['triton_vs_cpu_statistical']['max_abs_out_diff']:.3g}", flush=True)
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for bench_forward_torch.json")
    ap.add_argument("--shape", default="1,32768,16,128", help="batch,seqlen,heads,head_dim of the timed case")
    ap.add_argument("--check-shape", default="1,2048,4,128", help="shape of the accuracy case")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--compile", action="store_true", help="also time a torch.compile variant of the torch "
                    "backend's tile softmax")
    ap.add_argument("--rev", default=os.environ.get("FA4NUM_REVISION", ""))
    args = ap.parse_args(argv)
    if args.rev:
        os.environ["FA4NUM_REVISION"] = args.rev
    t_start = time.perf_counter()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    shape = tuple(int(x) for x in args.shape.split(","))
    check = tuple(int(x) for x in args.check_shape.split(","))
    fa4 = _fa4() if device.type == "cuda" else None
    q, k, v = _inputs(shape, device, seed=0)
    timer = _timer(device)
    # forward_torch's default on CUDA is the Triton kernel; "_torch" rows are its tiled torch code
    contenders = {"forward_torch_sm90": lambda: forward_torch(q, k, v, causal=True, kernel="fa4-sm90"),
                  "forward_torch_sm100": lambda: forward_torch(q, k, v, causal=True, kernel="fa4-sm100"),
                  "forward_torch_sm90_torch": lambda: forward_torch(q, k, v, causal=True, kernel="fa4-sm90",
                                                                    backend="torch")}
    if device.type == "cuda" and triton_backend.available():
        # the kernel alone with other launch shapes (block_m, num_warps, num_stages), same work
        setup = plan(q, k, v, causal=True, kernel="fa4-sm90", mode="statistical")
        for bm, nw, ns in ((128, 8, 3), (128, 8, 2), (64, 4, 3)):   # (128, 8, 3): the default
            contenders[f"triton_kernel_sm90_m{bm}_w{nw}_s{ns}"] = (
                lambda bm=bm, nw=nw, ns=ns: triton_backend.dense_triton(q, k, v, setup=setup, kernel=setup.kernel,
                                                                        block_m=bm, num_warps=nw, num_stages=ns))
    if fa4 is not None:
        contenders = {"fa4": lambda: fa4(q, k, v, True), **contenders}
    warmup = {}
    failed = {}
    for name, fn in list(contenders.items()):
        try:
            warmup[name] = timer(fn)
        except Exception as e:   # noqa: BLE001 - a launch shape that does not fit (shared memory): record it
            failed[name] = f"{type(e).__name__}: {e}"[:300]
            del contenders[name]
            continue
        print(f"warm-up {name}: {warmup[name]:.3f} s", flush=True)
    times = {name: [] for name in contenders}
    for _ in range(args.rounds):
        for name, fn in contenders.items():
            times[name].append(timer(fn))
    med = {name: statistics.median(t) for name, t in times.items()}
    result = {"benchmark": "forward_torch vs FA4 (causal, bf16)", "shape": list(shape), "rounds": args.rounds,
              "forward_torch_backend": _backend_name(device),
              "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
              "warmup_seconds": warmup, "median_seconds": med, "all_seconds": times, "failed": failed}
    if device.type == "cuda":
        result["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2 ** 30
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # written now too, so a run stopped during the optional compile variant still leaves the main timings
    (out / "bench_forward_torch.json").write_text(json.dumps({**result, "partial": True}, indent=1) + "\n")
    if args.compile:
        # the tile's elementwise chain (scale, exp2, flush, block sums, cast) fused by torch.compile: how much
        # of forward_torch's time is memory traffic between eager kernels
        plain = torch_backend.tile_p
        try:
            torch_backend.tile_p = torch.compile(plain, dynamic=False)
            fn = contenders["forward_torch_sm90"]
            result["compiled_tile_p_warmup_seconds"] = timer(fn)
            result["compiled_tile_p_median_seconds"] = statistics.median(timer(fn) for _ in range(args.rounds))
        except Exception as e:   # noqa: BLE001 - the variant is optional; record why it failed
            result["compiled_tile_p_error"] = f"{type(e).__name__}: {e}"[:500]
        finally:
            torch_backend.tile_p = plain
    if "fa4" in med:
        result["ratio_vs_fa4"] = {name: med[name] / med["fa4"] for name in med}
        if "compiled_tile_p_median_seconds" in result:
            result["ratio_vs_fa4"]["forward_torch_sm90_compiled_tile_p"] = \
                result["compiled_tile_p_median_seconds"] / med["fa4"]
        result["target_sm90_within_20x"] = result["ratio_vs_fa4"]["forward_torch_sm90"] <= 20
    result["accuracy"] = _accuracy(check, device, fa4, seed=1)
    if device.type == "cuda" and triton_backend.available():
        result["triton_checks"] = _triton_checks(device, seed=2)
    result["wall_seconds"] = time.perf_counter() - t_start
    try:
        from fa4num.gpu import run_provenance
        result["provenance"] = run_provenance()
    except Exception:   # noqa: BLE001 - fall back to the plain record
        from fa4num.provenance import provenance
        result["provenance"] = provenance()
    (out / "bench_forward_torch.json").write_text(json.dumps(result, indent=1) + "\n")
    ratios = result.get("ratio_vs_fa4", {})
    print("median s: " + ", ".join(f"{n} {t:.4f}" for n, t in med.items())
          + ("; ratio vs FA4: " + ", ".join(f"{n} {r:.1f}x" for n, r in ratios.items()) if ratios else "")
          + f"; wall {result['wall_seconds']:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
