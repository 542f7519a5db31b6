"""The fitter's section of ``fa4num report``: FA4's POLY_EX2 against fa4num's sets, from the polys registry
(the shipped sets, the repository's polys/ folder).

Reads the metrics the registry already holds (computed by ``fa4num fit`` with certified bounds and exhaustive
emulation), so the section costs no computation."""
from __future__ import annotations

from fa4num.section import Section

from . import registry


def _row(name: str, e: dict) -> str:
    m = e.get("metrics", {})

    def g(key, fmt="{:.4e}"):
        v = m.get(key)
        return fmt.format(v) if isinstance(v, (int, float)) else "–"
    return (f"| `{name}` | {e['degree']} | {g('max_rel_error')} | {g('certified_rel_bound')} | "
            f"{g('ratio_to_optimum', '{:.4f}')} | {g('evaluated_rel_error')} | "
            f"{g('bf16_mismatch_share', '{:.4%}')} |")


def report_sections(ctx) -> list:
    entries = registry.read()["entries"]
    names = sorted(entries, key=lambda n: (entries[n]["degree"], not n.startswith("fa4-"), n))
    rows = [_row(n, entries[n]) for n in names if entries[n].get("function") == "2^x"
            and tuple(entries[n].get("interval", ())) == (0.0, 1.0)]
    md = f"""Coefficient sets shipped with fa4num (`polys/`, one file per set: FA4's `POLY_EX2` and fa4num's
fits), p(f) ~ 2^f on
[0, 1]. "max rel" is the real-arithmetic sup norm of p/2^f - 1, "certified" a rigorous upper bound
(python-flint ball arithmetic), "/ optimum" the ratio to the best real-coefficient polynomial with p(0) = 1,
"evaluated" the max relative error of FA4's fp32 FMA evaluation over every fp32 f in [0, 1), and "bf16
mismatch" the bf16 mismatch share (defined above) under the exact uniform measure on x in [-126, 0): every fp32
x counted with the width it covers (`fa4num.fit.bf16_mismatch_share`).
Fit your own with `fa4num fit --degree N [--objective evaluated|bf16] --write` (into the user registry).

| set | degree | max rel | certified | / optimum | evaluated | bf16 mismatch |
|---|---|---|---|---|---|---|
{chr(10).join(rows)}
"""
    section = Section("Coefficient sets: FA4 against fa4num's fits", md, [],
                      {n: entries[n].get("metrics", {}) for n in names})
    section.headline = _headline(entries)   # the report's summary line for this section
    return [section]


def _headline(entries: dict) -> str:
    """FA4's cubic against the best cubic of the registry, on the two metrics a reader compares."""
    named = {a: e for e in entries.values() for a in (e["name"], *e.get("aliases", ()))}   # FA4's by alias
    m = lambda n: named.get(n, {}).get("metrics", {})   # noqa: E731
    fa4, ours, bf = m("fa4-deg3"), m("fa4num-minimax-deg3"), m("fa4num-bf16-deg3")
    if not (fa4.get("max_rel_error") and ours.get("max_rel_error")):
        return "Coefficient sets: see the table (the registry lacks FA4's or fa4num's cubic)."
    text = (f"Coefficients (cubic on [0, 1], real arithmetic): fa4num's minimax set has {ours['max_rel_error']:.4e} "
            f"max relative error against FA4's {fa4['max_rel_error']:.4e} "
            f"({ours['max_rel_error'] / fa4['max_rel_error']:.3f}x)")
    if bf.get("bf16_mismatch_share") and fa4.get("bf16_mismatch_share"):
        text += (f"; the bf16-objective set mismatches bf16 P on {bf['bf16_mismatch_share']:.4%} of x in [-126, 0) "
                 f"(uniform measure) against FA4's {fa4['bf16_mismatch_share']:.4%}")
    return text + "."
