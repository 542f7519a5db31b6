"""fa4num.fit against Sollya's fpminimax on a suite of kernel functions: max error and time, side by side.

For every (function, degree 3-7, coefficient format fp32/bf16/fp16):
  * fa4num: ``fit(f, monomials, interval, error=..., coeff_format=fmt)`` with the default method ("auto":
    the proven optimum by the exact search up to 5 free coefficients, the lattice point plus a neighbourhood
    search above that), its max error and certified bound;
  * Sollya 8: ``fpminimax(f, [|monomials|], [|P...|], I, error)`` with P = 24, 8, 11 bits, and its error by
    ``supnorm`` (accuracy 2^-30). Sollya's precisions have no exponent range, so a coefficient it returns may
    not be a number of the format (fp16 subnormals): ``in_format`` says so, and then Sollya is called again
    told the format's exponent range (fewer bits for coefficients below the smallest normal, monomials below
    the smallest number dropped: ``in_format_call``), and fa4num is compared with that set.
Times are wall-clock seconds of each call on the machine that runs the script (Sollya's include starting
its process, about 0.02 s); the fa4num time includes the certificate.

    python3 experiments/fit_suite.py [--quick] [--out experiments/results/fit_suite.json]

writes the JSON (with provenance), and a Markdown and a LaTeX table next to it (.md, .tex).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# name, fa4num expression, Sollya expression, interval (ours), interval (Sollya), error, lowest power
SUITE = [
    ("exp", "exp(x)", "exp(x)", (-math.log(2) / 2, math.log(2) / 2), "[-log(2)/2;log(2)/2]", "relative", 0),
    ("exp2", "2^x", "2^x", (0.0, 1.0), "[0;1]", "relative", 0),
    ("log2", "log2(1+x)", "log2(1+x)", (0.0, 1.0), "[0;1]", "relative", 1),
    ("log1p", "log1p(x)", "log1p(x)", (0.0, 1.0), "[0;1]", "relative", 1),
    ("sin", "sin(x)", "sin(x)", (0.0, math.pi / 4), "[0;pi/4]", "relative", 1),
    ("cos", "cos(x)", "cos(x)", (0.0, math.pi / 4), "[0;pi/4]", "relative", 0),
    ("tanh", "tanh(x)", "tanh(x)", (0.0, 1.0), "[0;1]", "relative", 1),
    ("erf", "erf(x)", "erf(x)", (0.0, 1.0), "[0;1]", "relative", 1),
    ("rsqrt", "1/sqrt(x)", "1/sqrt(x)", (1.0, 4.0), "[1;4]", "relative", 0),
    ("recip1p", "1/(1+x)", "1/(1+x)", (0.0, 1.0), "[0;1]", "relative", 0),
    ("sigmoid", "1/(1+exp(-x))", "1/(1+exp(-x))", (-2.0, 2.0), "[-2;2]", "relative", 0),
    ("gelu_cdf", "0.5*(1+erf(x/sqrt(2)))", "0.5*(1+erf(x/sqrt(2)))", (-2.0, 2.0), "[-2;2]", "absolute", 0),
    ("gelu_tanh", "tanh(0.7978845608028654*(x+0.044715*x^3))", "tanh(0.7978845608028654*(x+0.044715*x^3))",
     (0.0, 2.0), "[0;2]", "absolute", 0),
]
PRECISION = {"fp32": 24, "bf16": 8, "fp16": 11}


def sollya_case(expr, interval, error, monomials, fmt, precisions=None):
    from fa4num.fit import sollya
    mon = ",".join(str(k) for k in monomials)
    prec = f"{PRECISION[fmt]}..." if precisions is None else ",".join(str(p) for p in precisions)
    r = sollya.fit_and_supnorm(f"fpminimax({expr}, [|{mon}|], [|{prec}|], {interval}, {error})", expr, interval,
                               error)
    if r["error"] is None:
        return {"error": None, "seconds": r["seconds"], "failed": r["failed"][:200]}
    from fa4num.fit import get_format
    in_format = all(get_format(fmt).representable(c) for c in r["coeffs"])
    return {"error": r["error"], "seconds": r["seconds"], "coeffs": [c.hex() for c in r["coeffs"]],
            "in_format": in_format}


def sollya_in_format(expr, interval, error, monomials, fmt, first):
    """Sollya's fpminimax told the format's exponent range, for a case where its plain call returned numbers
    that are not of the format (fp16 coefficients below 2^-14, the smallest normal, have fewer bits; below
    2^-24 none). Each coefficient gets the bits the format has at the binade of the previous call's value,
    a monomial whose value is below the format's smallest number is dropped (its coefficient is 0), and the
    call is repeated until the set is in the format (4 calls at most)."""
    import math as _m
    from fa4num.fit import get_format
    f = get_format(fmt)
    mons, prev, seconds = list(monomials), first, 0.0
    for _ in range(4):
        coeffs = [float.fromhex(c) for c in prev["coeffs"]]
        keep, bits = [], []
        for k in mons:
            c = coeffs[k] if k < len(coeffs) else 0.0
            e = _m.frexp(abs(c))[1] - 1 if c else f.emin
            b = f.precision - max(0, f.emin - e)
            if b >= 1:
                keep.append(k)
                bits.append(b)
        mons = keep
        prev = sollya_case(expr, interval, error, mons, fmt, precisions=bits)
        seconds += prev["seconds"]
        if prev["error"] is None or prev["in_format"]:
            break
    return dict(prev, seconds=seconds, monomials=mons, precisions=bits)


def ours_case(expr, interval, error, monomials, fmt):
    from fa4num.fit import fit
    t0 = time.perf_counter()
    try:
        r = fit(expr, monomials, interval, error=error, coeff_format=fmt)
    except (ValueError, RuntimeError) as exc:
        return {"error": None, "seconds": time.perf_counter() - t0, "failed": str(exc)[:300]}
    return {"error": r.max_error, "certified_bound": r.certified_bound, "seconds": time.perf_counter() - t0,
            "path": r.path.split(" (")[0], "proven": r.proven_optimal, "coeffs": [c.hex() for c in r.coeffs],
            "candidates": r.exact.candidates if r.exact else None,
            "bnb": None if r.bounded is None else {"cuts": len(r.bounded.cuts), "candidates": r.bounded.candidates,
                                                   "improved": r.bounded.improved, "floor": r.bounded.floor}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "experiments" / "results" / "fit_suite.json"))
    ap.add_argument("--quick", action="store_true", help="3 functions, degrees 3-4, fp32 and bf16 (a smoke run)")
    ap.add_argument("--functions", help="comma-separated names from the suite (default all)")
    ap.add_argument("--degrees", default="3,4,5,6,7")
    ap.add_argument("--formats", default="fp32,bf16,fp16")
    args = ap.parse_args(argv)
    from fa4num.fit import sollya
    if not sollya.available():
        print("sollya is not installed (apt-get install sollya)", file=sys.stderr)
        return 2
    suite = SUITE
    degrees = [int(d) for d in args.degrees.split(",")]
    formats = args.formats.split(",")
    if args.functions:
        names = set(args.functions.split(","))
        suite = [s for s in SUITE if s[0] in names]
    if args.quick:
        suite, degrees, formats = [s for s in SUITE if s[0] in ("exp2", "sin", "rsqrt")], [3, 4], ["fp32", "bf16"]
    rows = []
    for name, expr, sexpr, interval, sinterval, error, low in suite:
        for fmt in formats:
            for n in degrees:
                monomials = list(range(low, n + 1))
                ours = ours_case(expr, interval, error, monomials, fmt)
                sol = sollya_case(sexpr, sinterval, error, monomials, fmt)
                if sol["error"] is not None and not sol["in_format"]:
                    sol["in_format_call"] = sollya_in_format(sexpr, sinterval, error, monomials, fmt, sol)
                ref = _reference(sol)
                ok = ours["error"] is not None and (ref is None or ours["error"] <= ref * (1 + 1e-9))
                rows.append({"function": name, "expression": expr, "interval": list(interval), "error_kind": error,
                             "format": fmt, "degree": n, "monomials": monomials, "fa4num": ours, "sollya": sol,
                             "fa4num_le_sollya": ok})
                _write(args.out, rows, partial=True)
                print(f"{name:10s} {fmt} n={n}: fa4num {ours['error']!s:>24} ({ours['seconds']:.2f} s, "
                      f"{ours.get('path', ours.get('failed'))})  sollya {sol['error']!s:>24} "
                      f"({sol['seconds']:.2f} s)  {'ok' if ok else 'WORSE'}", flush=True)
    out = _write(args.out, rows, partial=False)
    print(f"wrote {out} (+ .md, .tex); fa4num <= Sollya in {sum(r['fa4num_le_sollya'] for r in rows)}/{len(rows)}")
    return 0


def _write(path, rows, *, partial: bool) -> Path:
    """The JSON (rewritten after every case, so an interrupted run keeps what it measured) and the tables."""
    from fa4num.provenance import provenance
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    data = {"schema": "fa4num-fit-suite/1", "complete": not partial, "rows": rows, "provenance": provenance(),
            "all_le_sollya": all(r["fa4num_le_sollya"] for r in rows)}
    out.write_text(json.dumps(data, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(rows))
    out.with_suffix(".tex").write_text(latex(rows))
    return out


def _reference(sol):
    """The Sollya error fa4num is compared with: its plain call's, or, where that returned numbers that are
    not of the format, its call told the format's exponent range (``in_format_call``) when that succeeded."""
    alt = sol.get("in_format_call")
    if alt is not None and alt["error"] is not None and alt["in_format"]:
        return alt["error"]
    return sol["error"]


def _e(v):
    return "–" if v is None else f"{v:.4e}"


def markdown(rows) -> str:
    lines = ["| function | format | n | fa4num max error | proven | fa4num s | Sollya fpminimax error | Sollya s "
             "| ratio |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        o, s = r["fa4num"], r["sollya"]
        ref = _reference(s)
        ratio = f"{o['error'] / ref:.6f}" if o["error"] and ref else "–"
        flag = ""
        if not s.get("in_format", True):
            flag = f" (not in format; told the format's range: {_e(ref)})" if ref != s["error"] else \
                " (not in format)"
        lines.append(f"| {r['function']} | {r['format']} | {r['degree']} | {_e(o['error'])} | "
                     f"{'yes' if o.get('proven') else 'no'} | {o['seconds']:.2f} | {_e(s['error'])}{flag} | "
                     f"{s['seconds']:.2f} | {ratio} |")
    return "\n".join(lines) + "\n"


def latex(rows) -> str:
    out = [r"\begin{tabular}{llrrcrrr}", r"\toprule",
           r"function & format & $n$ & fa4num error & proven & s & Sollya error & s \\", r"\midrule"]
    for r in rows:
        o, s = r["fa4num"], r["sollya"]
        name = r["function"].replace("_", r"\_")
        mark = r"\checkmark" if o.get("proven") else ""
        ref = _reference(s)
        star = "$^*$" if ref != s["error"] else ""    # Sollya told the format's exponent range
        out.append(f"{name} & {r['format']} & {r['degree']} & {_e(o['error'])} & {mark} & {o['seconds']:.2f} & "
                   f"{_e(ref)}{star} & {s['seconds']:.2f} " + "\\\\")
    out += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
