"""``fa4num sweep`` (``fa4num report`` is fa4num.report)."""
from __future__ import annotations

import math

from fa4num import polys
from fa4num.argtypes import (COEFFS_HELP, add_registry_option, coeffs, nonneg_int, not_nan_float,
                             path_arg, positive_int)
from fa4num.outputs import atomic_files, check_output_dir


_FP32_MAX = 3.4028234663852886e38


def _fp32_range(lo: float, hi: float) -> tuple:
    """[lo, hi] narrowed to the fp32 values inside it (ends rounded inwards, never outwards), or ValueError
    naming --range when it holds none."""
    import numpy as np
    for end in (lo, hi):
        if math.isfinite(end) and abs(end) > _FP32_MAX:
            raise ValueError(f"--range: LO and HI must lie within fp32's range, finite ends in "
                             f"[-{_FP32_MAX:.9g}, {_FP32_MAX:.9g}] or -inf/inf, got {lo:g} {hi:g}")
    lo32, hi32 = np.float32(lo), np.float32(hi)
    if float(lo32) < lo:   # compared in float64: numpy would compare in float32, where lo == lo32
        lo32 = np.nextafter(lo32, np.float32(np.inf))
    if float(hi32) > hi:
        hi32 = np.nextafter(hi32, np.float32(-np.inf))
    if not lo32 <= hi32:
        raise ValueError(f"--range: [{lo!r}, {hi!r}] holds no fp32 value; give LO <= HI with at least one fp32 "
                         "number between them")
    return float(lo32), float(hi32)


def _grid_bits(text: str) -> int:
    import argparse
    bits = nonneg_int(text)
    if bits > 149:   # 2^-149 is fp32's smallest step
        raise argparse.ArgumentTypeError(f"expected an integer in 0-149, got {text!r}")
    return bits


def _sweep(args) -> int:
    out = check_output_dir(args.out)   # before any work: a bad folder must not cost the sweep
    if args.range is not None and not args.range[0] <= args.range[1]:
        raise ValueError(f"--range: LO must be <= HI, got {args.range[0]:g} {args.range[1]:g}")
    if args.grid is not None and (args.range is None or not all(map(math.isfinite, args.range))):
        raise ValueError("--grid: needs a finite --range LO HI")
    if args.impl == "mufu" and (args.degree is not None or args.coeffs is not None or args.variant is not None):
        raise ValueError("--impl: mufu has no polynomial; --degree, --coeffs and --variant are for --impl fa4")
    if args.impl == "fa4" and (args.arch is not None or args.no_ftz):
        raise ValueError("--impl: fa4 is FA4's software exp2; --arch and --no-ftz are for --impl mufu")
    if args.range is not None and args.grid is None:
        args.range = _fp32_range(*args.range)
    if args.grid is not None:
        scale = 2.0 ** -args.grid
        k0, k1 = math.ceil(args.range[0] / scale), math.floor(args.range[1] / scale)
        if k0 > k1:
            raise ValueError(f"--range: [{args.range[0]:g}, {args.range[1]:g}] holds no grid point k*2^-{args.grid}")
        if max(abs(k0), abs(k1)) >= 1 << 24:
            raise ValueError(f"--grid: {args.grid} bits on [{args.range[0]:g}, {args.range[1]:g}] gives points that "
                             "are not exact in fp32 (|k| < 2^24 needed): fewer bits or a narrower --range")
    from .plots import headline, in_softmax_domain, plot_error_vs_x, plot_ulp_histogram
    from .checkpoint import SweepCheckpoint
    from .engine import Domain, fa4_implementation, mufu_implementation, sweep
    if args.impl == "fa4":
        # FA4's POLY_EX2[--degree] (default 3), or the set --coeffs names (its degree, checked against --degree)
        ps = None if args.coeffs is None else polys.resolve(args.coeffs, degree=args.degree, registry=args.registry)
        try:
            impl = fa4_implementation(3 if args.degree is None else args.degree, coeffs=ps,
                                      variant=args.variant or "packed")
        except ValueError as exc:
            text = " ".join(str(exc).split())
            raise (ValueError(f"--degree: {text}") if text.startswith("degree") and args.coeffs is None
                   else exc) from None
    else:
        from fa4num.hw.tables import available_archs
        if (args.arch or "sm90") not in available_archs():
            raise ValueError(f"--arch: no measured MUFU tables for {args.arch!r}; known: {available_archs()}")
        impl = mufu_implementation(arch=args.arch or "sm90", ftz=not args.no_ftz)
    if args.grid is not None:
        domain = Domain(kind="grid", lo=args.range[0], hi=args.range[1], grid_bits=args.grid)
    else:
        lo, hi = args.range if args.range is not None else (-math.inf, math.inf)
        domain = Domain(lo=lo, hi=hi, stride=args.stride)
    stem = impl.name if args.name is None else args.name
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
    sw.add_argument("--variant", default=None, choices=("packed", "scalar", "asm"),
                    help="fa4 form: packed (default), scalar or asm")
    sw.add_argument("--degree", type=positive_int, default=None, help="fa4 polynomial degree (default 3, FA4's)")
    sw.add_argument("--coeffs", type=coeffs, default=None, help=f"fa4: {COEFFS_HELP}")
    add_registry_option(sw)
    sw.add_argument("--arch", default=None, help="mufu: architecture of the measured tables (default sm90)")
    sw.add_argument("--no-ftz", action="store_true", help="mufu: model ex2.approx.f32 instead of .ftz")
    sw.add_argument("--range", nargs=2, type=not_nan_float, metavar=("LO", "HI"),
                    help="only x in [LO, HI] (default: all 2^32 bit patterns, NaNs included)")
    sw.add_argument("--stride", type=positive_int, default=1, help="every STRIDE-th bit pattern of the range (default 1)")
    sw.add_argument("--grid", type=_grid_bits, default=None, metavar="BITS",
                    help="instead of bit patterns: x = k*2^-BITS in [LO, HI] (uniform in x)")
    sw.add_argument("--chunk", type=positive_int, default=1 << 24, help="inputs per fused pass (default 2^24)")
    sw.add_argument("--xbins", type=positive_int, default=512, help="bins in x for the error-vs-x figure (finite ranges; >= 1)")
    sw.add_argument("--out", type=path_arg, default="fa4num-sweep", help="output directory (default: ./fa4num-sweep)")
    sw.add_argument("--name", default=None, help="file stem (default: the implementation's name)")
    sw.add_argument("--no-progress", action="store_true", help="no progress bar")
    sw.set_defaults(func=_sweep)

