"""``fa4num gpu ...``: run the real instructions on a GPU (capture golden vectors, verify emulators)."""
from __future__ import annotations

import sys


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
    reason = gpu_missing()
    if reason is None:
        import torch
        print(f"GPU: {torch.cuda.get_device_name(0)} (sm_%d%d)" % torch.cuda.get_device_capability(0))
    else:
        print(f"no usable GPU: {reason}")
    ops = ptx.all_arith() + list(ptx.CONVERSIONS.values()) + list(ptx.MUFU.values())
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


def register(subparsers) -> None:
    p = subparsers.add_parser("gpu", help="run the real PTX on a GPU: capture golden vectors, verify emulators")
    sub = p.add_subparsers(dest="gpu_command", metavar="SUBCOMMAND")
    q = sub.add_parser("info", help="say whether a usable GPU is present and what can run")
    q.add_argument("--list", action="store_true", help="list the operation names")
    q.set_defaults(func=_info)
    q = sub.add_parser("capture", help="capture all golden vector files (tests/golden format)")
    q.add_argument("--out", default="tests/golden", help="output folder (default tests/golden)")
    q.add_argument("--groups", nargs="*", default=None,
                   help="subset of: fp convert ex2_emulated mufu (default all)")
    q.set_defaults(func=_capture)
    q = sub.add_parser("verify", help="compare every operation with the CPU emulators (all 2^32 unary inputs)")
    q.add_argument("--out", default="experiments/results", help="folder for the summary JSON")
    q.add_argument("--ops", nargs="*", default=None, help="subset of operation names (default all)")
    q.add_argument("--binary-samples", type=int, default=1 << 24,
                   help="input pairs/triples per binary/ternary op and mode (default 2^24)")
    q.add_argument("--digests", default=None,
                   help="also write per-2^24-chunk SHA-256 digests of the unary GPU outputs to this file "
                        "(a capture artifact for CPU CI; slows the sweep down)")
    q.add_argument("--workers", type=int, default=None,
                   help="worker processes for compilation and the small comparisons (default: half the cores)")
    q.set_defaults(func=_verify)
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
