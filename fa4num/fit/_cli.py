"""``fa4num fit`` and ``fa4num polys``: fit a coefficient set, register it, compare it with FA4's, export it."""
from __future__ import annotations

import json
import sys

from . import registry as reg


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "fit", help="fit 2^x coefficients, write a polys/ registry entry, compare with FA4's set",
        description="Fit p(f) ~ 2^f on an interval (FA4's software exp2 polynomial), certify it, write it to the "
                    "polys/ registry and print a comparison with FA4's POLY_EX2 set of the same degree.")
    p.add_argument("--degree", type=int, default=3, help="polynomial degree, 1-8 (default 3)")
    p.add_argument("--interval", type=float, nargs=2, default=(0.0, 1.0), metavar=("A", "B"))
    p.add_argument("--error", default="relative", choices=("relative", "absolute"))
    p.add_argument("--format", dest="coeff_format", default="fp32", choices=("fp32", "bf16", "fp16"))
    p.add_argument("--objective", default="minimax", choices=("minimax", "evaluated", "bf16"))
    p.add_argument("--method", default="remez", choices=("remez", "fpminimax", "fa4"))
    p.add_argument("--free-c0", action="store_true", help="let c0 vary (default: p(0) = 1 as in FA4)")
    p.add_argument("--name", help="registry entry name (default fa4num-<objective>-deg<n>)")
    p.add_argument("--registry", help=f"registry file (default {reg.DEFAULT_REGISTRY})")
    p.add_argument("--no-write", action="store_true", help="do not write the registry entry")
    p.add_argument("--quick", action="store_true",
                   help="skip the emulation metrics (exhaustive fp32 and bf16 sweeps, ~15 s per set)")
    p.add_argument("--json", action="store_true", help="print the fit result as JSON instead of the table")
    p.set_defaults(func=_cmd_fit)

    q = subparsers.add_parser("polys", help="list, show and export polys/ coefficient sets",
                              description="The polys/ registry of coefficient sets.")
    q.add_argument("--registry", help=f"registry file (default {reg.DEFAULT_REGISTRY})")
    sub = q.add_subparsers(dest="polys_command", metavar="ACTION")
    sub.add_parser("list", help="names, degrees and headline metrics").set_defaults(func=_cmd_list)
    s = sub.add_parser("show", help="one entry as JSON")
    s.add_argument("name")
    s.set_defaults(func=_cmd_show)
    e = sub.add_parser("export", help="declare a set for a kernel language")
    e.add_argument("name")
    e.add_argument("--as", dest="fmt", default="cute", choices=reg.EXPORT_FORMATS)
    e.add_argument("--symbol", help="identifier to declare (default from the entry name)")
    e.set_defaults(func=_cmd_export)
    f = sub.add_parser("add-fa4", help="(re)write FA4's POLY_EX2 sets fa4-deg1..5 with every metric")
    f.add_argument("--quick", action="store_true", help="skip the emulation metrics")
    f.set_defaults(func=_cmd_add_fa4)
    q.set_defaults(func=lambda args: (q.print_help(), 2)[1])


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def _cmd_fit(args) -> int:
    from .. import provenance as _prov
    from ._api import fit_exp2
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
    name = args.name or _default_name(args)
    if not args.no_write:
        fit_info = {k: v for k, v in result.to_dict().items()
                    if k in ("method", "path", "objective", "fixed", "error", "timings", "regeneration",
                             "optimum", "max_error", "certified_bound")}
        path = reg.write_entry(name, result.coeffs, source=f"fa4num.fit.fit_exp2 ({result.path})",
                               metrics=ours or {"max_error": result.max_error,
                                                "certified_bound": result.certified_bound},
                               provenance=_prov.provenance(), interval=tuple(args.interval),
                               coeff_format=result.coeff_format, fit=fit_info, registry=args.registry)
        print(f"wrote {name} to {path}")
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
    return 0


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


def _cmd_list(args) -> int:
    entries = reg.read(args.registry)["entries"]
    print(f"{'name':<28}{'deg':>4}{'max rel (real)':>16}{'evaluated':>14}{'bf16 mism.':>12}  source")
    for name, e in entries.items():
        m = e.get("metrics", {})
        print(f"{name:<28}{e['degree']:>4}{_fmt(m.get('max_rel_error', m.get('max_error'))):>16}"
              f"{_fmt(m.get('evaluated_rel_error')):>14}{_fmt(m.get('bf16_mismatch_share')):>12}  "
              f"{e['source'][:40]}")
    return 0


def _cmd_show(args) -> int:
    print(json.dumps(reg.poly_entry(args.name, registry=args.registry), indent=1))
    return 0


def _cmd_export(args) -> int:
    coeffs = reg.load_poly(args.name, registry=args.registry)
    sys.stdout.write(reg.export(coeffs, args.fmt, name=args.symbol or args.name.upper()))
    return 0


def _cmd_add_fa4(args) -> int:
    for name in reg.add_fa4_sets(registry=args.registry, emulation=not args.quick):
        print(f"wrote {name}")
    return 0
