"""``fa4num sweep`` (``fa4num report`` is fa4num.report)."""
from __future__ import annotations

import math

from fa4num import polys
from fa4num.argtypes import (COEFFS_HELP, add_registry_option, coeffs, nonneg_int, not_nan_float,
                             positive_int)
from fa4num.outputs import atomic_files, check_output_dir


def _sweep(args) -> int:
    out = check_output_dir(args.out)   # before any work: a bad folder must not cost the sweep
    if args.range is not None and not args.range[0] <= args.range[1]:
        raise ValueError(f"--range: LO must be <= HI, got {args.range[0]:g} {args.range[1]:g}")
    if args.grid is not None and (args.range is None or not all(map(math.isfinite, args.range))):
        raise ValueError("--grid: needs a finite --range LO HI")
    from .plots import headline, in_softmax_domain, plot_error_vs_x, plot_ulp_histogram
    from .checkpoint import SweepCheckpoint
    from .engine import Domain, fa4_implementation, mufu_implementation, sweep
    if args.impl == "fa4":
        # FA4's POLY_EX2[--degree] (default 3), or the set --coeffs names (its degree, checked against --degree)
        ps = None if args.coeffs is None else polys.resolve(args.coeffs, degree=args.degree, registry=args.registry)
        impl = fa4_implementation(3 if args.degree is None else args.degree, coeffs=ps, variant=args.variant)
    else:
        impl = mufu_implementation(arch=args.arch, ftz=not args.no_ftz)
    if args.grid is not None:
        domain = Domain(kind="grid", lo=args.range[0], hi=args.range[1], grid_bits=args.grid)
    else:
        lo, hi = args.range if args.range is not None else (-math.inf, math.inf)
        domain = Domain(lo=lo, hi=hi, stride=args.stride)
    stem = args.name or impl.name
    if not stem or "/" in stem or stem.startswith("."):
        raise ValueError(f"--name: {stem!r} must be a plain file stem (no '/', not starting with '.')")
    # finished chunks are kept here until the result is written: a re-run of an interrupted sweep resumes
    ckpt = SweepCheckpoint(out / f".{stem}.chunks")
    result = sweep(impl, domain, chunk=args.chunk, xbins=args.xbins, progress=not args.no_progress,
                   checkpoint=ckpt)
    if ckpt.resumed_chunks:
        print(f"resumed: {ckpt.resumed_chunks} chunks were finished by an earlier, interrupted run")
    with atomic_files(out) as tmp:   # all three files or none: an interrupt leaves the previous result intact
        result.to_json(tmp / f"{stem}.json")
        plot_error_vs_x(result, tmp / f"{stem}_error_vs_x.png")
        plot_ulp_histogram(result, tmp / f"{stem}_ulp_histogram.png")
    ckpt.remove()
    print(result.summary())
    print(headline(result) + ("" if in_softmax_domain(result.max_ulp_x) or result.max_ulp_x is None else
                              "; for the softmax domain alone: --range -126 0"))
    print(f"wrote {out / (stem + '.json')} and two figures")
    return 0


def register(subparsers) -> None:
    sw = subparsers.add_parser(
        "sweep", help="ulp/bf16 error statistics of an exp2 implementation over all 2^32 fp32 inputs or a range",
        description="Run an exp2 implementation over fp32 inputs against the correctly rounded 2^x: ulp "
                    "histogram, max error and where, bf16 mismatch share, per-binade table; JSON with "
                    "provenance plus figures.")
    sw.add_argument("--impl", choices=("fa4", "mufu"), default="fa4",
                    help="fa4: FA4's software exp2 (fa4num.ex2.fa4_emulated); mufu: fa4num.hw.mufu_ex2 model")
    sw.add_argument("--variant", default="packed", choices=("packed", "scalar", "asm"), help="fa4 form: packed (default), scalar or asm")
    sw.add_argument("--degree", type=positive_int, default=None, help="fa4 polynomial degree (default 3, FA4's)")
    sw.add_argument("--coeffs", type=coeffs, default=None, help=f"fa4: {COEFFS_HELP}")
    add_registry_option(sw)
    sw.add_argument("--arch", default="sm90", help="mufu: architecture of the measured tables (default sm90)")
    sw.add_argument("--no-ftz", action="store_true", help="mufu: model ex2.approx.f32 instead of .ftz")
    sw.add_argument("--range", nargs=2, type=not_nan_float, metavar=("LO", "HI"),
                    help="only x in [LO, HI] (default: all 2^32 bit patterns, NaNs included)")
    sw.add_argument("--stride", type=positive_int, default=1, help="every STRIDE-th bit pattern of the range (default 1)")
    sw.add_argument("--grid", type=nonneg_int, default=None, metavar="BITS",
                    help="instead of bit patterns: x = k*2^-BITS in [LO, HI] (uniform in x)")
    sw.add_argument("--chunk", type=positive_int, default=1 << 24, help="inputs per fused pass (default 2^24)")
    sw.add_argument("--xbins", type=nonneg_int, default=512, help="bins in x for the error-vs-x figure (finite ranges)")
    sw.add_argument("--out", default="fa4num-sweep", help="output directory (default: ./fa4num-sweep)")
    sw.add_argument("--name", default=None, help="file stem (default: the implementation's name)")
    sw.add_argument("--no-progress", action="store_true", help="no progress bar")
    sw.set_defaults(func=_sweep)

