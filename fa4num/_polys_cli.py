"""``fa4num polys ...``: list, show and export the coefficient sets of a polys registry. Reads the registry with
the leaf module :mod:`fa4num.polys` only, so the command starts as fast as Python does."""
from __future__ import annotations

import json
import sys

from . import polys as reg


def register(subparsers) -> None:
    q = subparsers.add_parser("polys", help="list, show and export coefficient sets of the polys registry",
                              description="The polys registry of coefficient sets (default: the one shipped "
                                          f"with fa4num, {reg.default_registry()}).")
    q.add_argument("--registry", metavar="FILE", help="another registry file (it must exist)")
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


def _cmd_list(args) -> int:
    entries = reg.read(args.registry)["entries"]
    print(f"{'name':<28}{'deg':>4}{'max rel (real)':>16}{'evaluated':>14}{'bf16 mism.':>12}  source")
    for name, e in entries.items():
        m = e.get("metrics", {})
        print(f"{name:<28}{e.get('degree', '?'):>4}{_fmt(m.get('max_rel_error', m.get('max_error'))):>16}"
              f"{_fmt(m.get('evaluated_rel_error')):>14}{_fmt(m.get('bf16_mismatch_share')):>12}  "
              f"{str(e.get('source', ''))[:40]}")
    return 0


def _cmd_show(args) -> int:
    print(json.dumps(reg.poly_entry(args.name, registry=args.registry), indent=1))
    return 0


def _cmd_export(args) -> int:
    coeffs = reg.load_poly(args.name, registry=args.registry)
    sys.stdout.write(reg.export(coeffs, args.fmt, name=args.symbol or args.name.upper()))
    return 0


def _cmd_add_fa4(args) -> int:
    from .fit.registry import add_fa4_sets   # the metrics need the fitter
    reg.check_writable(args.registry if args.registry is not None else reg.default_registry())
    for name in add_fa4_sets(registry=args.registry, emulation=not args.quick):
        print(f"wrote {name}")
    return 0
