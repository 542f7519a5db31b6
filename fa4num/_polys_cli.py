"""``fa4num polys ...``: list, show and export coefficient sets. Reads the registries with the leaf module
:mod:`fa4num.polys` only, so the command starts as fast as Python does."""
from __future__ import annotations

import json
import sys

from . import polys as reg
from .argtypes import add_registry_option, coeffs


def register(subparsers) -> None:
    q = subparsers.add_parser("polys", help="list, show and export coefficient sets of the polys registries",
                              description="Coefficient sets for FA4's software exp2, searched in --registry, "
                                          f"${reg.ENV_VAR}, the user registry ({reg.user_dir()}) and the "
                                          f"sets shipped with fa4num ({reg.shipped_dir()}).")
    add_registry_option(q)
    sub = q.add_subparsers(dest="polys_command", metavar="ACTION")
    sub.add_parser("list", help="names, degrees and headline metrics").set_defaults(func=_cmd_list)
    s = sub.add_parser("show", help="one entry as JSON")
    s.add_argument("name")
    s.set_defaults(func=_cmd_show)
    e = sub.add_parser("export", help="declare a set for a kernel language")
    e.add_argument("coeffs", type=coeffs, metavar="COEFFS", help="a set name, or c0,c1,... (decimals, 0x bits)")
    e.add_argument("--as", dest="fmt", default="cute", choices=reg.EXPORT_FORMATS)
    e.add_argument("--symbol", help="identifier to declare (default from the entry name)")
    e.set_defaults(func=_cmd_export)
    f = sub.add_parser("add-fa4", help="(re)write FA4's POLY_EX2 sets (fa4-<release>-deg1..5) with every metric "
                                       "into --registry PATH (default: the user registry)")
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
    found = reg.entries(args.registry)
    print(f"{'name':<28}{'deg':>4}{'max rel (real)':>16}{'evaluated':>14}{'bf16 mism.':>12}  source")
    for name, (e, _) in sorted(found.items()):
        if e.get("name") != name:
            continue   # an alias: listed with its entry
        m = e.get("metrics", {})
        aliases = f" (alias {', '.join(e['aliases'])})" if e.get("aliases") else ""
        print(f"{name:<28}{e.get('degree', '?'):>4}{_fmt(m.get('max_rel_error', m.get('max_error'))):>16}"
              f"{_fmt(m.get('evaluated_rel_error')):>14}{_fmt(m.get('bf16_mismatch_share')):>12}  "
              f"{str(e.get('source', ''))[:40]}{aliases}")
    return 0


def _cmd_show(args) -> int:
    print(json.dumps(reg.poly_entry(args.name, registry=args.registry), indent=1))
    return 0


def _cmd_export(args) -> int:
    ps = reg.resolve(args.coeffs, registry=args.registry)
    sys.stdout.write(reg.export(ps.coeffs, args.fmt, name=args.symbol or ps.label.upper()))
    return 0


def _cmd_add_fa4(args) -> int:
    from .fit.registry import add_fa4_sets   # the metrics need the fitter
    target = args.registry[-1] if args.registry else reg.user_dir()
    reg.check_writable(target)
    for name in add_fa4_sets(registry=target, emulation=not args.quick):
        print(f"wrote {name}")
    return 0
