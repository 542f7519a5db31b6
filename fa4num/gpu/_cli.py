"""``fa4num gpu ...``: run the real instructions on a GPU (capture golden vectors, verify emulators), and
``fa4num mufu ...``: list the MUFU table sets of fa4num.hw, or measure a new one on the GPU at hand."""
from __future__ import annotations

import sys

from fa4num.argtypes import add_release_option, finite_float, int_tuple, key_value, nonneg_int, path_arg, positive_int


def _check_gpu() -> bool:
    from . import gpu_missing
    reason = gpu_missing()
    if reason is not None:
        print(f"fa4num gpu: no usable GPU here: {reason}. The GPU commands need an NVIDIA GPU with "
              "torch+CUDA and Triton; every CPU feature of fa4num works without one.", file=sys.stderr)
        return False
    return True


def _info(args) -> int:
    from . import gpu_missing, ptx
    from .verify import arith_plan
    reason = gpu_missing()
    if reason is None:
        import torch
        print(f"GPU: {torch.cuda.get_device_name(0)} (sm_%d%d)" % torch.cuda.get_device_capability(0))
    else:
        print(f"no usable GPU: {reason}")
    ops = [s.ptx for s in arith_plan()] + list(ptx.CONVERSIONS.values()) + list(ptx.MUFU.values())
    print(f"{len(ops)} instruction kernels + FA4 exp2 emulation (variants {', '.join(ptx.EX2_VARIANTS)}, any degree)")
    if args.list:
        from .verify import op_names
        print("operation names for `fa4num gpu verify --ops`:")
        for name in op_names():
            print("  " + name)
    return 0 if reason is None else 1


def _capture(args) -> int:
    if not _check_gpu():
        return 1
    from .capture import capture_golden
    for p in capture_golden(args.out, groups=args.groups):
        print(p)
    return 0


def _verify(args) -> int:
    if not _check_gpu():
        return 1
    from .verify import main as verify_main
    return verify_main(args)


def _attention(args) -> int:
    if args.device == "cuda" and not _check_gpu():
        return 1
    from fa4num.attention.inputs import CaseSpec

    from .attention import capture
    b, sq, h, d = args.shape
    kv_heads = h if args.kv_heads is None else args.kv_heads
    if h % kv_heads:
        raise ValueError(f"--kv-heads: must divide heads={h}, got {kv_heads}")
    spec = CaseSpec("capture", "normal", b, sq, sq if args.seqlen_k is None else args.seqlen_k, h, kv_heads, d,
                    args.causal,
                    dtype=args.dtype, softmax_scale=args.scale, seed=args.seed)
    rec = capture(spec, backends=args.backends, device=args.device, warmup=args.warmup, repeats=args.repeats,
                  out_path=args.out)
    print(f"{'backend':10s} {'median ms':>10s} {'rel L2 vs fp64':>15s} {'LSE max err':>12s}")
    for name, r in rec["runs"].items():
        if "error" in r:
            print(f"{name:10s} not run: {r['error']}")
        else:
            print(f"{name:10s} {r['median_ms']:10.3f} {r['metrics']['rel_l2']:15.4e} {r['lse_max_abs_err']:12.3e}")
    print(f"wrote {args.out}.npz and .json")
    return 0


def _twin(args) -> int:
    from fa4num.attention.triton_backend import interpreted
    if not interpreted() and not _check_gpu():
        return 1
    import json
    import statistics
    import time

    import numpy as np
    import torch

    from fa4num.attention import twin
    from . import run_provenance
    opts = dict(args.opt)
    b, sq, h, d = args.shape
    hk = h if args.kv_heads is None else args.kv_heads
    if h % hk:
        print(f"fa4num gpu twin: --kv-heads must divide heads={h}, got {hk}", file=sys.stderr)
        return 2
    sk = sq if args.seqlen_k is None else args.seqlen_k
    dt = torch.bfloat16 if args.dtype == "bfloat16" else torch.float16
    g = torch.Generator().manual_seed(args.seed)
    q, k, v = (torch.randn(b, n, heads, d, generator=g).to(dt) for n, heads in ((sq, h), (sk, hk), (sk, hk)))
    dev = "cpu" if interpreted() else "cuda"
    kw = dict(kernel=args.kernel, causal=args.causal, **opts)
    if args.fa4_release is not None:
        kw["fa4_release"] = args.fa4_release
    qd, kd, vd = (x.to(dev) for x in (q, k, v))
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        res = twin.forward(qd, kd, vd, **kw)
        if dev == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    rec = {"shape": [b, sq, sk, h, hk, d], "dtype": args.dtype, "options": kw,
           "median_ms": statistics.median(times), "stats": res.stats.summary()}
    print(f"twin {args.kernel} {b}x{sq}x{h}x{d} (k {sk}, kv heads {hk}) {args.dtype}: "
          f"{rec['median_ms']:.2f} ms (median of {args.repeats}, host work included)")
    print("  " + ", ".join(f"{n} {v}" for n, v in rec["stats"].items()
                           if n in ("kv_blocks", "rescale_events", "rescales_done", "rescales_warp",
                                    "exp2_emulated", "exp2_mufu")))
    code = 0
    if args.check:
        from fa4num.attention import forward
        emu = forward(q, k, v, **kw)
        diff = {"out": int((emu.out.view(torch.int16) != res.out.cpu().view(torch.int16)).sum()),
                "lse": int((emu.lse.view(torch.int32) != res.lse.cpu().view(torch.int32)).sum())}
        for n in ("rescale_events", "rescales_done", "max_lag", "rescales_warp", "events_tile"):
            a, c = np.asarray(getattr(emu.stats, n)), np.asarray(getattr(res.stats, n))
            diff[n] = int((a.view(np.int32) != c.view(np.int32)).sum())
        rec["differing_bits_vs_emulator"] = diff
        bad = {n: c for n, c in diff.items() if c}
        print("  vs the CPU emulator: " + ("0 differing bits (out, LSE, counters)" if not bad else
                                           f"DIFFERENT: {bad}"))
        code = 1 if bad else 0
    if args.json:
        rec["provenance"] = run_provenance(tool="fa4num gpu twin")
        with open(args.json, "w") as f:
            json.dump(rec, f, indent=1, default=str)
        print(f"wrote {args.json}")
    return code


def _capture_kit(args) -> int:
    from . import kit
    if args.emulate is None:
        if not _check_gpu():
            return 1
        dev = kit.CudaDevice()
    else:
        dev = kit.EmulatorDevice(args.emulate)
    cases = kit.kit_cases()
    if args.only:
        unknown = sorted(set(args.only) - {c["name"] for c in cases})
        if unknown:
            print(f"fa4num gpu capture-kit: --only: unknown case(s) {unknown}; see fa4num.gpu.kit.kit_cases()",
                  file=sys.stderr)
            return 2
        cases = [c for c in cases if c["name"] in args.only]
    kit.capture_kit(args.out, device=dev, cases=cases, sections=tuple(args.sections),
                    stride=args.stride or kit.SAMPLE_STRIDE)
    return 0


def _check_kit(args) -> int:
    import json

    from . import kit
    res = kit.check_kit(args.file, mufu_arch=args.mufu_arch, only=args.only or None)
    print(f"kit {res.path}: {res.device} ({res.arch}); emulator MUFU tables {args.mufu_arch}")
    for r in res.rows:
        print(f"  {r.status.upper() if r.status in ('differs', 'error') else r.status:12s} {r.section:9s} "
              f"{r.name:28s} {r.detail}")
    print("summary: " + ", ".join(f"{n} {c}" for n, c in sorted(res.summary().items())))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"path": res.path, "arch": res.arch, "device": res.device, "summary": res.summary(),
                       "rows": [r.__dict__ for r in res.rows]}, f, indent=1)
    if not res.ok:
        print("the emulator differs from the kit's GPU on: " + ", ".join(f"{r.section}/{r.name}"
                                                                       for r in res.failed), file=sys.stderr)
        return 1
    return 0


def _mufu_info(args) -> int:
    from ..hw import tables
    from ..hw.mufu import TABLE_NAMES
    archs = tables.available_archs()
    print(f"MUFU table sets: {', '.join(archs) or 'none'} (in {tables.DATA_DIR})")
    for arch in archs:
        tabs, meta = tables.load(arch)
        prov = meta["provenance"]
        gpu = prov.get("gpu", {})
        size = tables.table_path(arch).stat().st_size
        print(f"  {arch}: {len(tabs)} tables ({', '.join(n for n in TABLE_NAMES if n in tabs)}), {size / 1e6:.2f} MB;"
              f" measured {prov.get('date')} on {gpu.get('name')} ({gpu.get('capability')}, driver "
              f"{gpu.get('driver')}), torch {prov.get('packages', {}).get('torch')}, "
              f"triton {prov.get('packages', {}).get('triton')}")
    return 0


def _mufu_build(args) -> int:
    from . import GPUUnavailable, mufu_build
    try:
        dev = mufu_build.device()
    except GPUUnavailable as err:
        print(f"fa4num mufu build: {err}. Building MUFU tables needs the GPU whose instructions they describe.",
              file=sys.stderr)
        return 1
    res = mufu_build.build(args.arch, out=args.out, check=args.check, dev=dev)
    print(f"wrote {res.path} ({res.path.stat().st_size / 1e6:.2f} MB)")
    for name, same in res.same_as_previous.items():
        if same is not None:
            print(f"  {name}: {'identical to' if same else 'DIFFERS from'} the {args.arch} table set before this run")
    if res.checks is None:
        return 0
    for c in res.checks:
        print(f"  {c.ptx}: {c.mismatches} mismatches over all 2^32 inputs ({c.seconds} s)"
              + (f"; e.g. {c.examples[:2]}" if c.mismatches else ""))
    if any(c.mismatches for c in res.checks):
        print("the table model does not describe this GPU completely: see fa4num/hw/mufu.py for the structure it "
              "assumes, and experiments/gpu/mufu_explore.py to find the new one", file=sys.stderr)
        return 3
    return 0


def _register_mufu(subparsers) -> None:
    p = subparsers.add_parser("mufu", help="MUFU ex2/rcp/lg2 table models: info, or build on a GPU")
    sub = p.add_subparsers(dest="mufu_command", metavar="SUBCOMMAND")
    q = sub.add_parser("info", help="list the table sets and their provenance")
    q.set_defaults(func=_mufu_info)
    q = sub.add_parser("build", help="measure the tables on this GPU (needs torch+CUDA+Triton)")
    q.add_argument("--arch", required=True, help="name of the table set, e.g. sm100 (file mufu_<arch>.npz.xz)")
    q.add_argument("--out", type=path_arg, default=None, help="output file (default: the package's data folder)")
    q.add_argument("--check", action="store_true",
                   help="then compare the models with the GPU over all 2^32 inputs (about a minute)")
    q.set_defaults(func=_mufu_build)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _problem_args(q) -> None:
    """The seeded problem's options that ``gpu attention`` and ``gpu twin`` share."""
    q.add_argument("--shape", type=int_tuple(("batch", "seqlen_q", "heads", "head_dim")), default=(1, 4096, 16, 128),
                   help="batch,seqlen_q,heads,head_dim (default 1,4096,16,128)")
    q.add_argument("--seqlen-k", type=nonneg_int, default=None, help="default = seqlen_q")
    q.add_argument("--kv-heads", type=positive_int, default=None, help="k/v heads (GQA/MQA); default = heads")
    q.add_argument("--causal", action="store_true")
    q.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    q.add_argument("--seed", type=nonneg_int, default=0)


def register(subparsers) -> None:
    _register_mufu(subparsers)
    p = subparsers.add_parser("gpu", help="run the real PTX on a GPU: capture golden vectors, verify emulators")
    sub = p.add_subparsers(dest="gpu_command", metavar="SUBCOMMAND")
    q = sub.add_parser("info", help="say whether a usable GPU is present and what can run")
    q.add_argument("--list", action="store_true", help="list the operation names")
    q.set_defaults(func=_info)
    q = sub.add_parser("capture", help="capture all golden vector files (tests/golden format)")
    q.add_argument("--out", type=path_arg, default="tests/golden", help="output folder (default tests/golden)")
    q.add_argument("--groups", nargs="*", default=None,
                   help="subset of: fp convert ex2_emulated mufu (default all)")
    q.set_defaults(func=_capture)
    q = sub.add_parser("verify", help="compare every operation with the CPU emulators (all 2^32 unary inputs)")
    q.add_argument("--out", type=path_arg, default="experiments/results", help="folder for the summary JSON")
    q.add_argument("--ops", nargs="*", default=None, help="subset of operation names (default all)")
    q.add_argument("--binary-samples", type=positive_int, default=1 << 24,
                   help="input pairs/triples per binary/ternary op and mode (default 2^24)")
    q.add_argument("--digests", type=path_arg, default=None,
                   help="also write per-2^24-chunk SHA-256 digests of the unary GPU outputs to this file "
                        "(a capture artifact for CPU CI; slows the sweep down)")
    q.add_argument("--workers", type=positive_int, default=None,
                   help="worker processes for compilation and the small comparisons (default: half the cores)")
    q.set_defaults(func=_verify)
    from .attention import BACKENDS
    q = sub.add_parser("attention", help="run FA4 and torch's SDPA back ends on one seeded problem: out, LSE, "
                                         "CUDA-event timings, errors vs fp64, saved with provenance")
    _problem_args(q)
    q.add_argument("--scale", type=finite_float, default=None, help="softmax_scale (default 1/sqrt(head_dim))")
    q.add_argument("--backends", nargs="*", default=list(BACKENDS), choices=BACKENDS)
    q.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                   help="cpu runs torch's 'flash' (CPU kernel) and 'math' back ends only")
    q.add_argument("--warmup", type=nonneg_int, default=3)
    q.add_argument("--repeats", type=positive_int, default=10)
    q.add_argument("--out", type=path_arg, default="experiments/results/attention_capture", help="path stem for .npz and .json")
    q.set_defaults(func=_attention)
    from fa4num.attention.kernels import KERNELS
    q = sub.add_parser("twin", help="the GPU twin: attention.forward's exact bits on the GPU, timed; --check compares "
                                    "with the CPU emulator")
    _problem_args(q)
    q.add_argument("--kernel", default="fa4-sm100", choices=sorted(KERNELS))
    q.add_argument("--opt", action="append", type=key_value, default=[], metavar="KEY=VALUE",
                   help="an FA4 argument or kernel knob (repeatable), e.g. rescale_threshold=4, softcap=30")
    q.add_argument("--repeats", type=positive_int, default=3)
    q.add_argument("--check", action="store_true", help="also run the CPU emulator and compare the bits")
    q.add_argument("--json", type=path_arg, default=None, help="write the record (with provenance) here")
    add_release_option(q)
    q.set_defaults(func=_twin)
    q = sub.add_parser("capture-kit", help="the capture kit: MUFU tables and sweeps, a tensor-core probe and FA4's "
                                           "forward/backward on a fixed case list, into one file (SM90 or SM100)")
    q.add_argument("--out", type=path_arg, required=True, help="the kit file to write (.npz)")
    q.add_argument("--sections", nargs="+", default=["mufu", "mma", "attention"],
                   choices=("mufu", "mma", "attention"))
    q.add_argument("--only", nargs="+", default=None, metavar="CASE", help="attention cases to run (default all)")
    q.add_argument("--stride", type=positive_int, default=None,
                   help="the sampled MUFU sweep's stride over the 2^32 fp32 inputs (default fa4num.gpu.kit."
                        "SAMPLE_STRIDE, 4099)")
    q.add_argument("--emulate", default=None, choices=("sm90", "sm100", "sm103"),
                   help="no GPU: write the kit fa4num's emulator predicts for this arch (a dry run)")
    q.set_defaults(func=_capture_kit)
    q = sub.add_parser("check-kit", help="check the emulator against a capture-kit file; exit 1 naming what differs")
    q.add_argument("file", type=path_arg)
    q.add_argument("--mufu-arch", default="sm90", help="the emulator's MUFU table set (default sm90)")
    q.add_argument("--only", nargs="+", default=None, metavar="NAME", help="items to check (default all)")
    q.add_argument("--json", type=path_arg, default=None, help="also write the rows here")
    q.set_defaults(func=_check_kit)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def main(argv=None) -> int:
    """``python -m fa4num.gpu._cli SUBCOMMAND ...``: the gpu commands without the rest of the fa4num CLI."""
    import argparse
    parser = argparse.ArgumentParser(prog="fa4num")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["gpu", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
