"""``fa4num fit``: fit a coefficient set, compare it with FA4's and, when asked, add it to a polys registry.
(``fa4num polys`` lives in fa4num/_polys_cli.py: it needs only the registry reader, not the fitter.)"""
from __future__ import annotations

import json
from pathlib import Path


from fa4num import polys

from . import registry as reg


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "fit", help="fit polynomial coefficients (2^x by default), optionally register them",
        description="Fit p ~ f on an interval with coefficients in a machine format (by default the proven "
                    "optimum) and certify it; for 2^x on [0, 1] (FA4's software exp2 polynomial) print a "
                    "comparison with FA4's POLY_EX2 set of the same degree. Nothing is written unless asked, and "
                    "never inside the installed package: --write adds the set to the user registry "
                    f"({polys.user_dir()}), --registry PATH to your own (a folder of set files, or a .json "
                    "registry file). Either is then usable by name in every command.")
    p.add_argument("--function", default="2^x",
                   help="f(x) as an expression: 2^x (default), exp(x), sin(x), log2(1+x), 1/(1+x), ...")
    p.add_argument("--degree", type=_degree, default=None, help=f"polynomial degree, 1-{_MAX_DEGREE} (default 3)")
    p.add_argument("--monomials", type=_powers, default=None, metavar="K,K,...",
                   help="powers to fit, as Sollya's [|1,3,5|] (others are 0); replaces --degree")
    p.add_argument("--interval", type=_number, nargs=2, default=(0.0, 1.0), metavar=("A", "B"),
                   help="numbers or expressions such as pi/4 (default 0 1)")
    p.add_argument("--error", default="relative", choices=("relative", "absolute"))
    p.add_argument("--weight", default=None, help="w(x) multiplying the error (an expression)")
    p.add_argument("--fixed", action="append", default=[], metavar="K=V",
                   help="hold c_K at V (repeatable); for 2^x, p(0) = 1 unless --free-c0")
    p.add_argument("--format", dest="coeff_format", default="fp32", choices=("fp32", "bf16", "fp16", "e4m3"))
    p.add_argument("--objective", default="minimax", choices=("minimax", "evaluated", "bf16"))
    p.add_argument("--method", default="auto", choices=("auto", "exact", "remez", "fpminimax", "fa4"),
                   help="auto (default): exact (proven optimal) up to 5 free coefficients, else remez")
    p.add_argument("--free-c0", action="store_true", help="2^x: let c0 vary (default: p(0) = 1 as in FA4)")
    p.add_argument("--name", help="registry entry name (default fa4num-<objective>-deg<n>)")
    p.add_argument("--write", action="store_true",
                   help=f"add the set to the user registry ({polys.user_dir()}; $XDG_DATA_HOME moves it)")
    p.add_argument("--replace", action="store_true",
                   help="overwrite a set of the same --name holding other coefficients (default: refuse)")
    p.add_argument("--registry", metavar="PATH",
                   help="add the set to this registry instead (created if absent): a folder of set files, or "
                        "one registry file when PATH ends in .json; checked before the fit")
    p.add_argument("--quick", action="store_true",
                   help="skip the new set's emulation metrics (exhaustive fp32 and bf16 sweeps, seconds; FA4's "
                        "come from the registry)")
    p.add_argument("--json", action="store_true", help="print the fit result as JSON instead of the table")
    p.add_argument("--certificate", metavar="PATH",
                   help="write the proof of optimality (method exact) to PATH, for --verify")
    p.add_argument("--verify", metavar="CERT",
                   help="re-check a certificate written by --certificate, with no LP solver, and fit nothing: "
                        "exit 0 when it proves its set optimal, 1 with the reason otherwise")
    p.set_defaults(func=_cmd_fit)



_MAX_DEGREE = 10   # fa4num.fit._api.MAX_DEGREE, written here so that `fit --help` does not import the fitter


def _degree(text: str) -> int:
    import argparse
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or not 1 <= value <= _MAX_DEGREE:
        raise argparse.ArgumentTypeError(f"expected an integer in 1-{_MAX_DEGREE}, got {text!r}")
    return value


def _number(text: str) -> float:
    """A number or a constant expression ("pi/4", "2^-20")."""
    import argparse

    from ._target import make_target
    from fa4num.argtypes import finite_float
    try:
        float(text)
    except ValueError:
        pass
    else:
        return finite_float(text)
    try:
        import mpmath
        with mpmath.workprec(128):
            return float(make_target(text).mp(mpmath.mpf(0)))
    except (ValueError, TypeError, ZeroDivisionError) as exc:
        why = str(exc) or type(exc).__name__   # ZeroDivisionError from mpmath has no text
        raise argparse.ArgumentTypeError(f"not a number or constant expression: {text!r} ({why})") from None


def _powers(text: str) -> list:
    import argparse
    what = f"comma-separated distinct powers in 0-{_MAX_DEGREE} such as 1,3,5"
    try:
        powers = [int(k) for k in text.replace("[|", "").replace("|]", "").split(",") if k.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if not powers or len(set(powers)) != len(powers) or not all(0 <= k <= _MAX_DEGREE for k in powers):
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return powers


# the fitter's argument names (its ValueErrors start with "name: ") -> this command's options
_OPTION_OF = {"f": "--function", "fixed": "--fixed", "interval": "--interval", "weight": "--weight",
              "error": "--error", "coeff_format": "--format", "objective": "--objective", "method": "--method"}


def _as_option(exc: ValueError, args) -> ValueError:
    """The fitter's error with its argument name replaced by the option the user typed."""
    name, sep, rest = str(exc).partition(": ")
    option = "--monomials" if name == "degree" and args.monomials is not None else \
        "--degree" if name == "degree" else _OPTION_OF.get(name)
    return ValueError(f"{option}: {rest}") if sep and option else exc


def _check_weight(text: str, a: float, b: float) -> None:
    """--weight must be an expression in x, finite and non-zero on [A, B] (a zero weight leaves the error
    unconstrained there and the fit has no solution)."""
    from ._target import check_target, make_target
    try:
        w = make_target(text)
        check_target(w, a, b, relative=True)   # relative=True: refuses zeros as well as poles and NaN
    except ValueError as exc:
        msg = " ".join(str(exc).split()).removeprefix("f: ").replace("relative error is undefined there",
                                                                       "the fit is undefined there")
        raise ValueError(f"--weight: w(x) = {text!r} must be finite and non-zero on [{a:g}, {b:g}]: {msg}") from None


def _fixed(items) -> dict:
    """["0=1", "2=0.5"] -> {0: 1.0, 2: 0.5}."""
    import argparse
    out = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k.strip().isdigit():
            raise ValueError(f"--fixed: expected K=V (a power and a value), got {item!r}")
        try:
            out[int(k)] = _number(v)
        except argparse.ArgumentTypeError as exc:
            raise ValueError(f"--fixed: {exc}") from None
    return out


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def _cmd_verify(path: str) -> int:
    from ._api import verify_certificate
    check = verify_certificate(path)
    if check.valid:
        print(f"{path}: valid: the set is optimal in its format ({check.nodes} nodes, {check.points} points "
              f"re-checked; winner's certified error <= {check.winner_upper:.6g})")
        return 0
    print(f"{path}: NOT valid: {check.reason}")
    return 1


def _cmd_fit(args) -> int:
    if args.verify is not None:
        return _cmd_verify(args.verify)
    from .. import provenance as _prov
    from . import _memo
    from ._memo import fit   # the fit through the user cache: a repeated command recomputes nothing
    from ._target import EXP2, make_target
    if args.monomials is not None and args.degree is not None:
        raise ValueError("degree: give --degree or --monomials, not both")
    degree = args.monomials if args.monomials is not None else (3 if args.degree is None else args.degree)
    args.degree = max(degree) if isinstance(degree, list) else degree
    try:
        exp2 = make_target(args.function).name.replace(" ", "") in (EXP2.name, "2**x")
    except ValueError as exc:
        raise _as_option(exc, args) from None
    fixed = _fixed(args.fixed)
    if exp2 and not args.free_c0 and 0 not in fixed and (args.monomials is None or 0 not in args.monomials):
        fixed[0] = 1.0    # FA4's p(0) = 1
    a, b = args.interval
    if not a < b:
        raise ValueError(f"--interval: A must be < B, got {a:g} {b:g}")
    if args.weight is not None:
        _check_weight(args.weight, a, b)
    target = None
    if args.json and (args.write or args.registry is not None):
        raise ValueError("--json: prints the fit only; it does not register it (drop --write/--registry, or --json)")
    if args.write or args.registry is not None:   # checked before the fit: a bad path must not cost the work
        try:
            target = reg.check_writable(args.registry if args.registry is not None else reg.user_dir())
        except ValueError as err:
            option = "--registry" if args.registry is not None else "--write"
            raise ValueError(f"{option}: {str(err).removeprefix('registry: ')}") from None
    name = args.name or _default_name(args)
    if not all(ch.isalnum() or ch in "-_." for ch in name):
        raise ValueError(f"--name: {name!r} must be letters, digits, '-', '_' or '.'")
    try:
        result = fit(EXP2 if exp2 else args.function, degree, tuple(args.interval), error=args.error,
                     coeff_format=args.coeff_format, fixed=fixed, weight=args.weight, objective=args.objective,
                     method=args.method)
    except ValueError as exc:
        raise _as_option(exc, args) from None
    if args.certificate is not None:
        from ._api import write_certificate
        try:
            write_certificate(result, args.certificate)
        except ValueError as exc:
            raise ValueError(f"--certificate: {str(exc).split(': ', 1)[-1]}") from None
        except OSError as exc:
            raise ValueError(f"--certificate: cannot write {args.certificate}: {exc.strerror}") from None
    if args.json:
        print(json.dumps(result.to_dict(), indent=1))
        return 0
    unit = exp2 and tuple(args.interval) == (0.0, 1.0) and args.error == "relative" and args.weight is None
    # the p(0) = 1 optimum the ratios are taken to is the fit's own optimum when the fit fixed c0 = 1 only
    optimum = result.optimum.max_error if fixed == {0: 1.0} and args.monomials is None else None
    own = (result.max_error, result.argmax, result.certified_bound) if result.certified_bound is not None else None
    ours = reg.describe(result.coeffs, emulation=not args.quick, stored=True, rel_optimum=optimum,
                        rel_error=own) if unit else {}
    fa4 = reg.fa4_sets().get(args.degree) if unit else None
    theirs = reg.describe(fa4, emulation=not args.quick, stored=True, rel_optimum=optimum) if fa4 else {}
    if target is not None and (same := _same_coeffs(result.coeffs, target, name)):
        where = f"not written: {target} already holds these coefficients as {same}"
    elif target is not None:
        held = _entry_bits(target, name)
        if held is not None and held != [f"0x{reg.fp32_bits(c):08X}" for c in result.coeffs] and not args.replace:
            # a set of the user's under this name would be lost (the fit is cached: a re-run with --replace is quick)
            raise ValueError(f"--name: {target} already holds a different set named {name}; give another --name, "
                             "or --replace to overwrite it")
        fit_info = {k: v for k, v in result.to_dict().items()
                    if k in ("method", "path", "objective", "fixed", "error", "timings", "regeneration",
                             "optimum", "max_error", "certified_bound", "monomials", "weight")}
        if result.exact is not None:
            fit_info["exact"] = {"proven": result.exact.proven, "candidates": result.exact.candidates,
                                 "rivals": len(result.exact.rivals), "bound": result.exact.bound,
                                 "box": {str(k): v for k, v in result.exact.box.items()}}
        path = reg.write_entry(name, result.coeffs, source=f"fa4num.fit.fit ({result.path})",
                               function=result.function,
                               metrics={k: v for k, v in ours.items() if k != "stored_in"} or {"max_error": result.max_error,
                                                "certified_bound": result.certified_bound},
                               provenance=_prov.provenance(), interval=tuple(args.interval),
                               coeff_format=result.coeff_format, fit=fit_info, registry=target)
        where = f"wrote {name} to {path}"
    else:
        where = f"not written (pass --write to add {name} to {reg.user_dir()}, or --registry PATH)"
    rows = [(f"c{k} (fp32 bits)", f"0x{reg.fp32_bits(result.coeffs[k]):08X}",
             f"0x{reg.fp32_bits(fa4[k]):08X}" if fa4 else None) for k in range(args.degree + 1)]
    if result.exact is not None:
        rows.append(("proven optimal (exact)", f"{result.exact.proven} ({result.exact.candidates} in region)",
                     None))
    if result.regeneration is not None:
        rows.append(("own fpminimax == Sollya", str(result.regeneration["bit_identical"]), None))
    rows += [("path", result.path, "sollya fpminimax" if fa4 else None),
             (f"max {args.error[:3]} error (real)", result.max_error, theirs.get("max_rel_error")),
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
    took = (f"{t['total']:.2f} s (remez {t['remez']:.2f}, rounding {t['rounding']:.2f}, "
            f"certify {t.get('certify', 0):.3f})")
    if t.get("from_cache"):   # say so: the numbers are the same bits, but nothing was recomputed
        print(f"fit read from the user cache ({_memo.cache_dir()}; FA4NUM_NO_CACHE=1 recomputes): computed "
              f"{result.provenance.get('date', '?')} in {took}")
    else:
        print(f"fit {took}")
    print(where)
    return 0


def _entry_bits(registry: Path, name: str):
    """The fp32 bit patterns stored under ``name`` in ``registry``, or None when it has no such entry."""
    if not registry.exists():
        return None
    entry = reg.read(registry)["entries"].get(name)
    return None if entry is None else entry.get("coeffs_fp32_bits")


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
    name = f"fa4num-{args.objective if args.method in ('remez', 'auto') else args.method}-deg{args.degree}"
    if args.function.replace(" ", "") not in ("2^x", "2**x"):
        name = "fit-" + "".join(ch if ch.isalnum() else "_" for ch in args.function).strip("_") + \
            f"-deg{args.degree}"
    if args.monomials is not None:
        name += "-m" + "_".join(str(k) for k in args.monomials)
    if args.coeff_format != "fp32":
        name += f"-{args.coeff_format}"
    if args.free_c0:
        name += "-freec0"
    if args.error != "relative":
        name += f"-{args.error}"
    if tuple(args.interval) != (0.0, 1.0):
        name += f"-{args.interval[0]:g}_{args.interval[1]:g}".replace("+", "")   # 1e+30: '+' is not a name character
    return name
