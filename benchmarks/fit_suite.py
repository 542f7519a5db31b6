"""Benchmark: fa4num.fit against Sollya's fpminimax on the kernel-function cases of benchmarks/fit_cases.json
(exp2 on FA4's reductions [0, 1), [-0.5, 0.5], [-1, 0] with p(0) = 1, exp, rsqrt, erf, atan, sigmoid,
softplus, tanh, GELU's tanh form, log2, log1p, expm1, sin, cos; fp32, bf16, fp16, e4m3 coefficients).

For each case:
  * fa4num: ``fit(f, monomials, interval, error=..., coeff_format=..., fixed=...)`` (method "auto"), its wall
    time (the certificate included);
  * Sollya 8 (when installed): ``fpminimax(f, [|monomials|], [|P...|], I, error[, floating, constrained part])``
    then ``supnorm`` (accuracy 2^-30), the process's wall time. Sollya's precisions have no exponent range:
    ``in_format`` says whether its coefficients are numbers of the format;
  * both sets' errors measured independently of both tools: mpmath at 200 bits on a dense grid, each local
    maximum refined by golden section (``measured``).
The table: error ratio fa4num / Sollya (<= 1 + 1e-6 is "ok") and time ratio, with the median time ratio.

    python benchmarks/fit_suite.py [--cases benchmarks/fit_cases.json] [--only SUBSTRING] [--out FILE]

writes the JSON (default experiments/results/fit_suite_bench.json, rewritten after every case) and a Markdown
table next to it (.md). tests/fit/test_robust.py runs two of the cases.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CASES = ROOT / "benchmarks" / "fit_cases.json"
PRECISION = {"fp32": 24, "bf16": 8, "fp16": 11, "e4m3": 4}
_NAMES = {"pi": math.pi, "ln2": math.log(2)}


def load_cases(path=CASES) -> list[dict]:
    """The case list, intervals evaluated to floats (``"pi/4"``, ``"ln2/2"``)."""
    cases = json.loads(Path(path).read_text())["cases"]
    for c in cases:
        c["bounds"] = [float(eval(v, {"__builtins__": {}}, _NAMES)) for v in c["interval"]]  # noqa: S307
        c["fixed_powers"] = {int(k): v for k, v in c["fixed"].items()}
    return cases


def _mp_lambda(expr: str):
    """f as an mpmath function, from the case's text alone (not fa4num's parser)."""
    import mpmath
    ns = {name: getattr(mpmath, name) for name in ("exp", "log", "sqrt", "sin", "cos", "tan", "atan", "erf",
                                                    "tanh", "log1p", "expm1")}
    ns.update(pi=mpmath.pi, ln2=mpmath.ln2, log2=lambda v: mpmath.log(v, 2))
    return eval(f"lambda x: ({expr.replace('^', '**')})", {"__builtins__": {}, **ns})  # noqa: S307


def measured_error(case: dict, coeffs, *, points: int = 2001) -> float:
    """max |e| of ``coeffs`` in mpmath (200 bits) over ``points`` equispaced points, each local maximum
    refined by golden section between its neighbours. At a zero of f (relative error) the limit is taken 2^-60 away."""
    import mpmath
    f = _mp_lambda(case["f"])
    rel = case["error"] == "relative"
    a, b = case["bounds"]
    with mpmath.workprec(200):
        cs = [mpmath.mpf(c) for c in coeffs[::-1]]

        def err(x):
            fx = f(x)
            if rel and fx == 0:
                x = x + mpmath.mpf(2) ** -60 if x < b else x - mpmath.mpf(2) ** -60
                fx = f(x)
            p = mpmath.polyval(cs, x)
            return abs(p / fx - 1) if rel else abs(p - fx)

        xs = [mpmath.mpf(a) + (mpmath.mpf(b) - a) * i / (points - 1) for i in range(points)]
        es = [err(x) for x in xs]
        best = max(es)
        g = (mpmath.sqrt(5) - 1) / 2
        # every local maximum of the grid is refined (an equioscillating error has degree + 2 peaks of
        # nearly one height: the grid's largest points may all sit on the peaks it happens to sample best)
        peaks = [i for i in range(points) if es[i] >= es[max(i - 1, 0)] and es[i] >= es[min(i + 1, points - 1)]]
        for i in sorted(peaks, key=lambda j: -es[j])[:64]:
            lo, hi = xs[max(i - 1, 0)], xs[min(i + 1, points - 1)]
            for _ in range(50):
                x1, x2 = hi - g * (hi - lo), lo + g * (hi - lo)
                if err(x1) > err(x2):
                    hi = x2
                else:
                    lo = x1
            best = max(best, err((lo + hi) / 2))
        return float(best)


def run_fa4num(case: dict) -> dict:
    from fa4num.fit import fit
    t0 = time.perf_counter()
    try:
        r = fit(case["f"], case["monomials"], tuple(case["bounds"]), error=case["error"],
                coeff_format=case["format"], fixed=case["fixed_powers"] or None)
    except (ValueError, RuntimeError) as exc:
        return {"error": None, "seconds": time.perf_counter() - t0, "failed": f"{type(exc).__name__}: {exc}"}
    return {"error": r.max_error, "certified_bound": r.certified_bound, "seconds": time.perf_counter() - t0,
            "path": r.path.split(" (")[0], "proven": r.proven_optimal, "coeffs": [c.hex() for c in r.coeffs]}


def run_sollya(case: dict) -> dict:
    from fa4num.fit import get_format, sollya
    a, b = case["bounds"]
    interval = f"[{sollya.exact(a)};{sollya.exact(b)}]"
    fixed = case["fixed_powers"]
    mons = ",".join(str(k) for k in case["monomials"] if k not in fixed)
    constrained = "" if not fixed else ", floating, " + " + ".join(f"{sollya.exact(v)}*x^{k}"
                                                                    for k, v in fixed.items())
    f = case["sollya_f"]
    r = sollya.fit_and_supnorm(f"fpminimax({f}, [|{mons}|], [|{PRECISION[case['format']]}...|], {interval}, "
                               f"{case['error']}{constrained})", f, interval, case["error"])
    if r["error"] is None:
        return {"error": None, "seconds": r["seconds"], "failed": r["failed"]}
    fmt = get_format(case["format"])
    return {"error": r["error"], "seconds": r["seconds"], "coeffs": [c.hex() for c in r["coeffs"]],
            "in_format": all(fmt.representable(c) for c in r["coeffs"])}


def run_case(case: dict, *, with_sollya: bool) -> dict:
    """One row: both tools, both sets measured independently, the ratios."""
    ours = run_fa4num(case)
    row = {"name": case["name"], "format": case["format"], "fa4num": ours, "sollya": None}
    if ours["error"] is not None:
        ours["measured"] = measured_error(case, [float.fromhex(c) for c in ours["coeffs"]])
    if with_sollya:
        sol = run_sollya(case)
        row["sollya"] = sol
        if sol["error"] is not None:
            sol["measured"] = measured_error(case, [float.fromhex(c) for c in sol["coeffs"]])
            if ours["error"] is not None:
                row["error_ratio"] = ours["measured"] / sol["measured"]
                row["time_ratio"] = ours["seconds"] / sol["seconds"]
                row["ok"] = row["error_ratio"] <= 1 + 1e-6
    return row


def markdown(rows: list[dict]) -> str:
    def e(v):
        return "–" if v is None else f"{v:.4e}"
    lines = ["| case | fa4num error | proven | fa4num s | Sollya error | Sollya s | error ratio | time ratio |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        o, s = r["fa4num"], r["sollya"] or {}
        ours = o.get("measured") if o["error"] is not None else None
        note = "" if o["error"] is not None else f" (refused: {o['failed'][:60]})"
        sol = s.get("measured")
        flag = "" if s.get("in_format", True) else " (not in format)"
        lines.append(f"| {r['name']} | {e(ours)}{note} | {'yes' if o.get('proven') else 'no'} | "
                     f"{o['seconds']:.2f} | {e(sol)}{flag} | {s.get('seconds', math.nan):.2f} | "
                     f"{r.get('error_ratio', math.nan):.6f} | {r.get('time_ratio', math.nan):.2f} |")
    ratios = [r["time_ratio"] for r in rows if "time_ratio" in r]
    worse = [r["name"] for r in rows if r.get("ok") is False]
    if ratios:
        lines.append(f"\nmedian time ratio {statistics.median(ratios):.2f} over {len(ratios)} cases; "
                     f"fa4num worse than Sollya beyond 1e-6: {worse or 'none'}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=str(CASES))
    ap.add_argument("--only", help="run the cases whose name contains this text")
    ap.add_argument("--out", default=str(ROOT / "experiments" / "results" / "fit_suite_bench.json"))
    args = ap.parse_args(argv)
    from fa4num.fit import sollya
    with_sollya = sollya.available()
    if not with_sollya:
        print("sollya is not installed (apt-get install sollya): fa4num's side only", file=sys.stderr)
    cases = [c for c in load_cases(args.cases) if not args.only or args.only in c["name"]]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for case in cases:
        row = run_case(case, with_sollya=with_sollya)
        rows.append(row)
        out.write_text(json.dumps({"schema": "fa4num-fit-suite-bench/1", "complete": False, "rows": rows},
                                  indent=1) + "\n")
        o, s = row["fa4num"], row["sollya"] or {}
        print(f"{case['name']:40s} fa4num {o.get('measured', o.get('failed'))!s:>24} ({o['seconds']:.2f} s)  "
              f"sollya {s.get('measured', s.get('failed'))!s:>24} ({s.get('seconds', math.nan):.2f} s)  "
              f"{'' if row.get('ok', True) else 'WORSE'}", flush=True)
    from fa4num.provenance import provenance
    out.write_text(json.dumps({"schema": "fa4num-fit-suite-bench/1", "complete": True, "rows": rows,
                               "provenance": provenance()}, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(rows))
    print(f"wrote {out} and {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
