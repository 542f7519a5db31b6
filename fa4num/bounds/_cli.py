"""``fa4num bounds exp2`` and ``fa4num bounds attention``: the rigorous bound, the observed error and their ratio."""
from __future__ import annotations

import math

from fa4num.attention.kernels import KERNELS
from fa4num.attention.problem import DEFAULT_KERNEL


def _exp2(args) -> int:
    from .exp2 import exp2_error_bound, mufu_error_bounds
    if args.mufu:
        mb = mufu_error_bounds(args.arch)
        print(f"MUFU ex2.approx.ftz.f32 ({args.arch} tables): relative bound {mb.ex2_relative:.6g} "
              f"(results >= 2^-126; below: flushed, absolute < 2^-126)")
        print(f"MUFU rcp.approx.ftz.f32: relative bound {mb.rcp_relative:.6g}; lg2 table error "
              f"{max(mb.lg2_table_abs):.6g} (absolute, plus one fp32 ulp of the result)")
        return 0
    b = exp2_error_bound(args.degree, coeffs=args.coeffs, variant=args.variant,
                         domain=(args.lo, args.hi))
    print(f"FA4 software exp2, degree {b.degree}, {args.coeffs or 'FA4 POLY_EX2'}, {b.variant} form, "
          f"x in [{b.domain[0]:g}, {b.domain[1]:g}]")
    print(f"  relative bound      {b.relative:.6g}  (at fractions {b.argmax_f[0]:.6f}..{b.argmax_f[1]:.6f})")
    print(f"  subnormal absolute  {b.absolute_subnormal:.6g}")
    t = b.terms
    print(f"  terms: polynomial (certified) {t['polynomial']:.4g}, Cody-Waite rounding {t['cody_waite']:.3g}, "
          f"Horner rounding {t['horner_running_max']:.3g} (half-ulps per step {', '.join(f'{h:.3g}' for h in t['horner'])}), "
          f"exponent insertion {t['exponent_insertion']:g}, ftz {t['ftz']:.3g}")
    if b.observed:
        o = b.observed
        print(f"  observed (exhaustive, {o['count']} inputs): {o['max_rel']:.6g} at x = {o['max_rel_x']!r}; "
              f"bound / observed = {b.ratio_to_observed:.4f}")
    else:
        print("  observed: no cached exhaustive sweep for these arguments (python3 -m fa4num.bounds._observed)")
    return 0


def _shape(text):
    parts = [int(p) for p in text.replace("x", ",").split(",") if p]
    if len(parts) != 4 or min(parts) < 1:
        raise ValueError(f"--shape must be B,S,H,D (four positive integers), got {text!r}")
    return parts


def _attention(args) -> int:
    import ml_dtypes
    import numpy as np

    from fa4num.attention import forward

    from .validate import check
    b, s, h, d = _shape(args.shape)
    sk = args.seqlen_k or s
    dt = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
          "float8_e5m2": ml_dtypes.float8_e5m2}[args.dtype]
    rng = np.random.default_rng(args.seed)
    q = (rng.standard_normal((b, s, h, d), dtype=np.float32) * np.float32(args.q_mult)).astype(dt)
    k = rng.standard_normal((b, sk, h, d), dtype=np.float32).astype(dt)
    v = rng.standard_normal((b, sk, h, d), dtype=np.float32).astype(dt)
    opts = {}
    if args.rescale_threshold is not None:
        opts["rescale_threshold"] = args.rescale_threshold
    res = forward(q, k, v, causal=args.causal, kernel=args.kernel, softmax_scale=args.softmax_scale, **opts)
    c = check(q, k, v, res.out, res.lse, name="cli", causal=args.causal, kernel=args.kernel,
              softmax_scale=args.softmax_scale, **opts)
    print(f"{args.kernel} {args.dtype} q {b}x{s}x{h}x{d}, seqlen_k {sk}, causal={args.causal}; emulator output vs "
          f"real-arithmetic attention")
    print(f"  out: max bound {c.max_bound:.4g}, max observed {c.max_observed:.4g}, ratio {c.ratio_max:.3g} "
          f"(median per element {c.ratio_median:.3g}); violations {c.out_violations} of {c.elements}")
    print(f"  probabilistic (delta 1e-6): ratio {c.prob_ratio_max:.3g}, elements above it {c.prob_violations}")
    print(f"  lse: max bound {c.lse_max_bound:.4g}, max observed {c.lse_max_observed:.4g}, "
          f"ratio {c.lse_max_bound / c.lse_max_observed if c.lse_max_observed else math.inf:.3g}; "
          f"violations {c.lse_violations}")
    return 0 if c.out_violations == 0 and c.lse_violations == 0 else 1


def register(subparsers) -> None:
    p = subparsers.add_parser("bounds", help="rigorous error bounds: exp2 and attention (bound, observed, ratio)")
    sub = p.add_subparsers(dest="bounds_command", metavar="WHAT")
    e = sub.add_parser("exp2", help="bound of FA4's software exp2 (or the MUFU model) vs its exhaustive maximum")
    g = e.add_mutually_exclusive_group()
    g.add_argument("--degree", type=int, default=3, help="FA4 POLY_EX2 degree 1..5 (default 3)")
    g.add_argument("--coeffs", help="a polys/ registry entry name (its degree is used)")
    g.add_argument("--mufu", action="store_true", help="the MUFU ex2/rcp/lg2 models instead")
    e.add_argument("--variant", default="packed", choices=("packed", "scalar", "asm"))
    e.add_argument("--lo", type=float, default=-127.0)
    e.add_argument("--hi", type=float, default=0.0)
    e.add_argument("--arch", default="sm90")
    e.set_defaults(func=_run_exp2)
    a = sub.add_parser("attention", help="per-element bound of FA4's forward on Gaussian inputs vs the emulator")
    a.add_argument("--shape", required=True, help="B,S,H,D of q")
    a.add_argument("--seqlen-k", type=int, default=None)
    a.add_argument("--kernel", default=DEFAULT_KERNEL, choices=sorted(KERNELS))
    a.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float8_e4m3fn", "float8_e5m2"))
    a.add_argument("--causal", action="store_true")
    a.add_argument("--softmax-scale", type=float, default=None)
    a.add_argument("--rescale-threshold", type=float, default=None, help="fa4-sm100 only")
    a.add_argument("--q-mult", type=float, default=1.0, help="scale of q (larger logits)")
    a.add_argument("--seed", type=int, default=0)
    a.set_defaults(func=_attention)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _run_exp2(args) -> int:
    if args.coeffs:
        from fa4num.fit import poly_entry
        args.degree = int(poly_entry(args.coeffs)["degree"])
    return _exp2(args)
