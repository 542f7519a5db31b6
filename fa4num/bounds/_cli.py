"""``fa4num bounds exp2``, ``fa4num bounds attention`` and ``fa4num bounds backward``: the rigorous bound, the
observed error and their ratio."""
from __future__ import annotations

import math

from fa4num.argtypes import (COEFFS_HELP, add_registry_option, add_release_option, coeffs, finite_float, int_tuple,
                             key_value, nonneg_int, not_nan_float)
from fa4num.attention.config import allowed_values, check_option
from fa4num.attention.kernels import KERNELS
from fa4num.attention.problem import DEFAULT_KERNEL
from fa4num.fp.dtypes import DTYPES

_shape = int_tuple(("batch", "seqlen_q", "heads", "head_dim"))


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
    print(f"FA4 software exp2, degree {b.degree}, {args.coeffs.label if args.coeffs else 'FA4 POLY_EX2'}, "
          f"{b.variant} form, "
          f"x in [{b.domain[0]:g}, {b.domain[1]:g}]")
    print(f"  relative bound      {b.relative:.6g}  (at fractions {b.argmax_f[0]:.6f}..{b.argmax_f[1]:.6f})")
    print(f"  subnormal absolute  {b.absolute_subnormal:.6g}")
    t = b.terms
    print(f"  terms: polynomial (certified) {t['polynomial']:.4g}, Cody-Waite rounding {t['cody_waite']:.3g}, "
          f"Horner rounding {t['horner_running']:.3g} (half-ulps per step {', '.join(f'{h:.3g}' for h in t['horner'])}), "
          f"exponent insertion {t['exponent_insertion']:g}, ftz {t['ftz']:.3g}")
    if b.observed:
        o = b.observed
        print(f"  observed (exhaustive, {o['count']} inputs): {o['max_rel']:.6g} at x = {o['max_rel_x']!r}; "
              f"bound / observed = {b.ratio_to_observed:.4f}")
    else:
        print("  observed: no cached exhaustive sweep for these arguments (python3 -m fa4num.bounds._observed)")
    return 0


def _attention(args) -> int:
    import sys

    import numpy as np

    from fa4num.attention import forward

    from .validate import check
    b, s, h, d = args.shape
    sk = s if args.seqlen_k is None else args.seqlen_k   # 0 is honoured: no keys, out 0 and LSE -inf as in FA4
    opts = {name: getattr(args, name) for name in _knobs() if getattr(args, name) is not None}
    for name in opts:
        if name not in KERNELS[args.kernel].softmax_knobs:
            have = ", ".join(n for n, kern in sorted(KERNELS.items()) if name in kern.softmax_knobs)
            raise ValueError(f"{_flag(name)}: {args.kernel} has no knob {name} (kernels that have it: {have})")
    dt = DTYPES[args.dtype].dtype
    rng = np.random.default_rng(args.seed)
    q = (rng.standard_normal((b, s, h, d), dtype=np.float32) * np.float32(args.q_mult)).astype(dt)
    k = rng.standard_normal((b, sk, h, d), dtype=np.float32).astype(dt)
    v = rng.standard_normal((b, sk, h, d), dtype=np.float32).astype(dt)
    if args.fa4_release is not None:
        opts["fa4_release"] = args.fa4_release
    if "coeffs" in opts:
        from fa4num import polys
        opts["coeffs"] = polys.resolve(opts["coeffs"], registry=args.registry).coeffs
    res = forward(q, k, v, causal=args.causal, kernel=args.kernel, softmax_scale=args.softmax_scale, **opts)
    c = check(q, k, v, res.out, res.lse, name="cli", causal=args.causal, kernel=args.kernel,
              softmax_scale=args.softmax_scale, delta=1e-6, **opts)
    print(f"{args.kernel} {args.dtype} q {b}x{s}x{h}x{d}, seqlen_k {sk}, causal={args.causal}; emulator output vs "
          f"real-arithmetic attention")
    print(f"  out: max bound {c.max_bound:.4g}, max observed {c.max_observed:.4g}, ratio {c.ratio_max:.3g} "
          f"(median per element {c.ratio_median:.3g}); violations {c.out_violations} of {c.elements}")
    print(f"  probabilistic (delta 1e-6): ratio {c.prob_ratio_max:.3g}, elements above it {c.prob_violations}")
    print(f"  lse: max bound {c.lse_max_bound:.4g}, max observed {c.lse_max_observed:.4g}, "
          f"ratio {c.lse_max_bound / c.lse_max_observed if c.lse_max_observed else math.inf:.3g}; "
          f"violations {c.lse_violations}")
    out_f = np.asarray(res.out, np.float32)
    nonfinite = int((~np.isfinite(out_f)).sum()) + int((np.isnan(res.lse) | (res.lse == np.inf)).sum())
    if c.unbounded or c.lse_unbounded or nonfinite:
        # an element whose bound is +inf (non-finite inputs, overflowing logits) is compared with nothing
        print(f"  not checked: {c.unbounded} of {c.elements} outputs and {c.lse_unbounded} of {res.lse.size} LSE "
              f"values have no finite bound; non-finite results: {nonfinite}")
    if c.out_violations or c.lse_violations:
        return 1
    if c.unbounded == c.elements and c.lse_unbounded == res.lse.size and c.elements + res.lse.size:
        print("fa4num: bounds attention checked nothing: no output or LSE value has a finite bound (non-finite "
              "logits: see --softmax-scale, --q-mult); exit status 3", file=sys.stderr)
        return 3
    return 0


def _backward(args) -> int:
    import numpy as np

    from .validate_backward import backward_golden_checks, check_backward
    if args.golden is not None:
        given = [f"--{n.replace('_', '-')}" for n in ("shape", "seqlen_k", "softmax_scale", "softcap")
                 if getattr(args, n) is not None]
        if given:
            raise ValueError(f"{given[0]}: --golden runs the H200 backward goldens' own problems")
        checks = backward_golden_checks(args.golden, kernel=args.kernel)
        if not checks:
            raise ValueError(f"--golden: no backward capture (fa4_sm90_bwd_*_h200.npz) in {args.golden}")
    else:
        if args.shape is None:
            raise ValueError("--shape: required (or --golden)")
        b, s, h, d = args.shape
        sk = s if args.seqlen_k is None else args.seqlen_k
        dt = DTYPES[args.dtype].dtype
        rng = np.random.default_rng(args.seed)
        q = (rng.standard_normal((b, s, h, d), dtype=np.float32) * np.float32(args.q_mult)).astype(dt)
        k, v = (rng.standard_normal((b, sk, h, d), dtype=np.float32).astype(dt) for _ in range(2))
        do = rng.standard_normal((b, s, h, d), dtype=np.float32).astype(dt)
        checks = [check_backward(q, k, v, do, name=f"{b}x{s}x{h}x{d} seqlen_k {sk}", causal=args.causal,
                                 kernel=args.kernel, softmax_scale=args.softmax_scale, softcap=args.softcap or 0.0)]
    from .validate_backward import GOLDEN_KERNEL
    src = "H200 kernel bits" if args.golden is not None and KERNELS[args.kernel] is GOLDEN_KERNEL else "emulator"
    print(f"{args.kernel} backward vs real-arithmetic gradients ({src}); bound / observed per gradient")
    bad = 0
    for c in checks:
        parts = [f"{n} {c.max_bound[n]:.3g}/{c.max_observed[n]:.3g} v{c.violations[n]}"
                 + (f" inf{c.unbounded[n]}" if c.unbounded[n] else "") for n in c.max_bound]
        print(f"  {c.name}: tightness {c.tightness:.3g}; " + ", ".join(parts)
              + ("" if c.bits_match else "  (emulated bits differ from the GPU's)"))
        bad += c.total_violations + (not c.bits_match)
    if len(checks) > 1:
        print(f"  {len(checks)} cases, violations {sum(c.total_violations for c in checks)}, tightness median "
              f"{float(np.median([c.tightness for c in checks])):.3g}, max {max(c.tightness for c in checks):.3g}")
    return 1 if bad else 0


def register(subparsers) -> None:
    p = subparsers.add_parser("bounds", help="rigorous error bounds: exp2 and attention (bound, observed, ratio)")
    sub = p.add_subparsers(dest="bounds_command", metavar="WHAT")
    e = sub.add_parser("exp2", help="bound of FA4's software exp2 (or the MUFU model) vs its exhaustive maximum")
    g = e.add_mutually_exclusive_group()
    g.add_argument("--degree", type=_fa4_degree, default=None, help="FA4 POLY_EX2 degree 1..5 (default 3)")
    g.add_argument("--coeffs", type=coeffs, default=None, help=f"{COEFFS_HELP} (its degree is used)")
    g.add_argument("--mufu", action="store_true", help="the MUFU ex2/rcp/lg2 models instead")
    # defaults None, filled in _run_exp2: an option given with --mufu (or --arch without it) is refused, not ignored
    e.add_argument("--variant", default=None, choices=("packed", "scalar", "asm"), help="form (default packed)")
    e.add_argument("--lo", type=not_nan_float, default=None, help="domain of x: LO (default -127; -inf allowed)")
    e.add_argument("--hi", type=not_nan_float, default=None, help="HI (default 0, below 128)")
    e.add_argument("--arch", default=None, help="--mufu: architecture of the measured tables (default sm90)")
    add_registry_option(e)
    e.set_defaults(func=_run_exp2)
    a = sub.add_parser("attention", help="per-element bound of FA4's forward on Gaussian inputs vs the emulator")
    a.add_argument("--shape", type=_shape, required=True, help="batch,seqlen_q,heads,head_dim of q")
    a.add_argument("--seqlen-k", type=nonneg_int, default=None, help="default = seqlen_q; 0: no keys")
    a.add_argument("--kernel", default=DEFAULT_KERNEL, choices=sorted(KERNELS))
    a.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float8_e4m3fn", "float8_e5m2"))
    a.add_argument("--causal", action="store_true")
    a.add_argument("--softmax-scale", type=finite_float, default=None,
                   help="default 1/sqrt(head_dim); any finite value FA4 accepts, negative included")
    # one flag per softmax knob of the kernel objects (fa4num.attention.kernels: softmax_knobs), so a new knob
    # needs no flag of its own here; plan() checks the value for the kernel
    for name in _knobs():
        have = ", ".join(n for n, kern in sorted(KERNELS.items()) if name in kern.softmax_knobs)
        if name == "coeffs":
            a.add_argument("--coeffs", type=coeffs, default=None, help=f"{have} only: {COEFFS_HELP}")
        else:
            a.add_argument(_flag(name), dest=name, type=_knob_value(name), default=None, metavar="VALUE",
                           help=f"{have} only: {allowed_values(name)}")
    add_registry_option(a)
    a.add_argument("--q-mult", type=finite_float, default=1.0, help="scale of q (larger logits)")
    a.add_argument("--seed", type=nonneg_int, default=0)
    add_release_option(a)
    a.set_defaults(func=_attention)
    w = sub.add_parser("backward", help="per-element bounds of FA4's backward (dq, dk, dv, dsink) vs observed errors")
    w.add_argument("--golden", metavar="DIR", default=None,
                   help="every H200 backward golden case in DIR (a checkout's tests/golden/attention)")
    w.add_argument("--shape", type=_shape, default=None, help="batch,seqlen_q,heads,head_dim of q (Gaussian inputs)")
    w.add_argument("--seqlen-k", type=nonneg_int, default=None, help="default = seqlen_q")
    w.add_argument("--kernel", default=DEFAULT_KERNEL, choices=sorted(KERNELS))
    w.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    w.add_argument("--causal", action="store_true")
    w.add_argument("--softmax-scale", type=finite_float, default=None, help="default 1/sqrt(head_dim)")
    w.add_argument("--softcap", type=finite_float, default=None, help="soft cap > 0 (default none)")
    w.add_argument("--q-mult", type=finite_float, default=1.0, help="scale of q (larger logits)")
    w.add_argument("--seed", type=nonneg_int, default=0)
    w.set_defaults(func=_backward)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _fa4_degree(text: str) -> int:
    import argparse
    if text.strip().isdigit() and 1 <= int(text) <= 5:
        return int(text)
    raise argparse.ArgumentTypeError(f"expected one of FA4's POLY_EX2 degrees 1-5 (other sets: --coeffs NAME), "
                                     f"got {text!r}")


def _knobs() -> tuple:
    """The softmax knobs of every kernel, each once, in the kernels' order."""
    return tuple(dict.fromkeys(n for kern in KERNELS.values() for n in kern.softmax_knobs))


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _knob_value(name: str):
    """The argparse type of a knob's flag: the value as ``--opt`` reads it (JSON where it parses, else text),
    checked by the knob's own check (fa4num.attention.config.check_option), so a bad value is one line naming
    the flag and exit status 2."""
    import argparse

    def parse(text: str):
        value = key_value(f"{name}={text}")[1]
        try:
            check_option(name, value)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err).removeprefix(f"{name}: ")) from None
        return value

    parse.__name__ = name
    return parse


def _run_exp2(args) -> int:
    if args.mufu:
        given = [f"--{n}" for n in ("degree", "variant", "lo", "hi") if getattr(args, n) is not None]
        if given:
            raise ValueError(f"{given[0]}: the MUFU models have no polynomial or domain; --degree, --variant, --lo "
                             "and --hi are for FA4's software exp2 (without --mufu)")
        args.arch = args.arch or "sm90"
    else:
        if args.arch is not None:
            raise ValueError("--arch: picks the MUFU tables, so it needs --mufu")
        args.degree = 3 if args.degree is None else args.degree
        args.variant = args.variant or "packed"
        args.lo = -127.0 if args.lo is None else args.lo
        args.hi = 0.0 if args.hi is None else args.hi
    if not args.mufu and not args.lo <= args.hi < 128:
        raise ValueError(f"--lo/--hi: need LO <= HI < 128 (FA4's exp2 wraps the exponent from 128 on), got "
                         f"{args.lo:g} {args.hi:g}")
    if args.mufu:
        from fa4num.hw.tables import available_archs
        if args.arch not in available_archs():
            raise ValueError(f"--arch: no measured MUFU tables for {args.arch!r}; known: {available_archs()}")
    if args.coeffs is not None:
        from fa4num import polys
        args.coeffs = polys.resolve(args.coeffs, registry=args.registry)
        args.degree = args.coeffs.degree
    return _exp2(args)
