"""``fa4num fit``: fit a coefficient set, compare it with FA4's and, when asked, add it to a polys registry.
(``fa4num polys`` lives in fa4num/_polys_cli.py: it needs only the registry reader, not the fitter.)"""
from __future__ import annotations

import json
from pathlib import Path

from fa4num.argtypes import finite_float

from . import registry as reg


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "fit", help="fit 2^x coefficients, compare with FA4's set, optionally register them",
        description="Fit p(f) ~ 2^f on an interval (FA4's software exp2 polynomial), certify it and print a "
                    "comparison with FA4's POLY_EX2 set of the same degree. Nothing is written unless asked: "
                    "--write adds the set to the registry shipped with fa4num, --registry FILE to your own file.")
    p.add_argument("--degree", type=int, default=3, help="polynomial degree, 1-8 (default 3)")
    p.add_argument("--interval", type=finite_float, nargs=2, default=(0.0, 1.0), metavar=("A", "B"))
    p.add_argument("--error", default="relative", choices=("relative", "absolute"))
    p.add_argument("--format", dest="coeff_format", default="fp32", choices=("fp32", "bf16", "fp16"))
    p.add_argument("--objective", default="minimax", choices=("minimax", "evaluated", "bf16"))
    p.add_argument("--method", default="remez", choices=("remez", "fpminimax", "fa4"))
    p.add_argument("--free-c0", action="store_true", help="let c0 vary (default: p(0) = 1 as in FA4)")
    p.add_argument("--name", help="registry entry name (default fa4num-<objective>-deg<n>)")
    p.add_argument("--write", action="store_true",
                   help=f"add the set to the shipped registry ({reg.DEFAULT_REGISTRY})")
    p.add_argument("--registry", metavar="FILE",
                   help="add the set to this registry file instead (created if absent)")
    p.add_argument("--quick", action="store_true",
                   help="skip the emulation metrics (exhaustive fp32 and bf16 sweeps, ~15 s per set)")
    p.add_argument("--json", action="store_true", help="print the fit result as JSON instead of the table")
    p.set_defaults(func=_cmd_fit)



def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def _cmd_fit(args) -> int:
    from .. import provenance as _prov
    from ._api import fit_exp2
    target = None
    if args.json and (args.write or args.registry is not None):
        raise ValueError("--json: prints the fit only; it does not register it (drop --write/--registry, or --json)")
    if args.write or args.registry is not None:   # checked before the fit: a bad path must not cost the work
        target = reg.check_writable(args.registry if args.registry is not None else reg.default_registry())
    name = args.name or _default_name(args)
    if not all(ch.isalnum() or ch in "-_." for ch in name):
        raise ValueError(f"--name: {name!r} must be letters, digits, '-', '_' or '.'")
    result = fit_exp2(args.degree, interval=tuple(args.interval), error=args.error,
                      coeff_format=args.coeff_format, objective=args.objective, method=args.method,
                      fixed={} if args.free_c0 else None)
    if args.json:
        print(json.dumps(result.to_dict(), indent=1))
        return 0
    unit = tuple(args.interval) == (0.0, 1.0) and args.error == "relative"
    ours = reg.describe(result.coeffs, emulation=not args.quick) if unit else {}
    fa4 = reg.fa4_sets().get(args.degree) if unit else None
    theirs = reg.describe(fa4, emulation=not args.quick) if fa4 else {}
    if target is not None and (same := _same_coeffs(result.coeffs, target, name)):
        where = f"not written: {target} already holds these coefficients as {same}"
    elif target is not None:
        fit_info = {k: v for k, v in result.to_dict().items()
                    if k in ("method", "path", "objective", "fixed", "error", "timings", "regeneration",
                             "optimum", "max_error", "certified_bound")}
        path = reg.write_entry(name, result.coeffs, source=f"fa4num.fit.fit_exp2 ({result.path})",
                               metrics=ours or {"max_error": result.max_error,
                                                "certified_bound": result.certified_bound},
                               provenance=_prov.provenance(), interval=tuple(args.interval),
                               coeff_format=result.coeff_format, fit=fit_info, registry=args.registry)
        where = f"wrote {name} to {path}"
    else:
        where = f"not written (pass --write to add {name} to {reg.default_registry()}, or --registry FILE)"
    rows = [(f"c{k} (fp32 bits)", f"0x{reg.fp32_bits(result.coeffs[k]):08X}",
             f"0x{reg.fp32_bits(fa4[k]):08X}" if fa4 else None) for k in range(args.degree + 1)]
    if result.regeneration is not None:
        rows.append(("own fpminimax == Sollya", str(result.regeneration["bit_identical"]), None))
    rows += [("path", result.path, "sollya fpminimax" if fa4 else None),
             ("max rel error (real)", result.max_error, theirs.get("max_rel_error")),
             ("certified bound", result.certified_bound, theirs.get("certified_rel_bound")),
             ("ratio to optimum", ours.get("ratio_to_optimum"), theirs.get("ratio_to_optimum")),
             ("max abs error", ours.get("max_abs_error"), theirs.get("max_abs_error"))]
    if ours and not args.quick:
        rows += [("evaluated max rel (fp32)", ours["evaluated_rel_error"], theirs.get("evaluated_rel_error")),
                 ("bf16 mismatch [-126,0)", ours["bf16_mismatch_share"], theirs.get("bf16_mismatch_share")),
                 ("bf16 mismatch [-127,0)", ours["bf16_mismatch_share_with_subnormal"],
                  theirs.get("bf16_mismatch_share_with_subnormal"))]
    head = ("", name, f"FA4 POLY_EX2[{args.degree}]" if fa4 else "FA4 (no set)", "ours/FA4")
    print(f"{head[0]:<26}{head[1]:>24}{head[2]:>24}{head[3]:>10}")
    for label, a, b in rows:
        ratio = f"{a / b:.4f}" if isinstance(a, float) and isinstance(b, float) and b else ""
        print(f"{label:<26}{_fmt(a):>24}{_fmt(b):>24}{ratio:>10}")
    t = result.timings
    print(f"fit {t['total']:.2f} s (remez {t['remez']:.2f}, rounding {t['rounding']:.2f}, "
          f"certify {t.get('certify', 0):.3f})")
    print(where)
    return 0


def _same_coeffs(coeffs, registry: Path, name: str):
    """Name of another entry of ``registry`` with exactly these coefficients (a second copy would only add
    noise: ``--method fa4`` regenerates FA4's sets, which the registry holds as fa4-degN), or None."""
    if not registry.exists():
        return None
    bits = [f"0x{reg.fp32_bits(c):08X}" for c in coeffs]
    return next((n for n, e in reg.read(registry)["entries"].items()
                 if n != name and e.get("coeffs_fp32_bits") == bits), None)


def _default_name(args) -> str:
    """fa4num-<objective or method>-deg<n>[-<format>][-freec0][-<a>_<b>]: distinct settings, distinct names."""
    name = f"fa4num-{args.objective if args.method == 'remez' else args.method}-deg{args.degree}"
    if args.coeff_format != "fp32":
        name += f"-{args.coeff_format}"
    if args.free_c0:
        name += "-freec0"
    if args.error != "relative":
        name += f"-{args.error}"
    if tuple(args.interval) != (0.0, 1.0):
        name += f"-{args.interval[0]:g}_{args.interval[1]:g}"
    return name
