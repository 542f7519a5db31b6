"""``fa4num mufu ...``: inspect the MUFU tables, or measure them on the GPU at hand (a new arch)."""
from __future__ import annotations

import sys


def _info(args) -> int:
    from . import tables
    from .mufu import TABLE_NAMES
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


def _build(args) -> int:
    from ..gpu import gpu_missing
    reason = gpu_missing()
    if reason is not None:
        print(f"fa4num mufu build: no usable GPU here: {reason}. Building MUFU tables needs the GPU whose "
              "instructions they describe (NVIDIA, torch+CUDA, Triton).", file=sys.stderr)
        return 1
    from ..gpu import run_provenance
    from . import build, tables
    tabs = build.measure_tables()
    path = tables.save(args.arch, tabs, run_provenance(tool="fa4num mufu build", arch=args.arch), path=args.out)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)")
    if args.check:
        from .build import check_tables
        bad = check_tables(args.arch, path=path)
        for name, n in bad.items():
            print(f"  {name}: {n} mismatches over all 2^32 inputs")
        if any(bad.values()):
            print("the table model does not describe this GPU completely: see fa4num/hw/mufu.py for the "
                  "structure it assumes, and experiments/gpu/mufu_explore.py to find the new one", file=sys.stderr)
            return 3
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("mufu", help="MUFU ex2/rcp/lg2 table models: info, or build on a GPU")
    sub = p.add_subparsers(dest="mufu_command", metavar="SUBCOMMAND")
    q = sub.add_parser("info", help="list the table sets and their provenance")
    q.set_defaults(func=_info)
    q = sub.add_parser("build", help="measure the tables on this GPU (needs torch+CUDA+Triton)")
    q.add_argument("--arch", required=True, help="name of the table set, e.g. sm100 (file mufu_<arch>.npz.xz)")
    q.add_argument("--out", default=None, help="output file (default: the package's data folder)")
    q.add_argument("--check", action="store_true",
                   help="then compare the models with the GPU over all 2^32 inputs (about a minute)")
    q.set_defaults(func=_build)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
