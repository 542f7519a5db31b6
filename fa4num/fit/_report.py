"""The fitter's section of ``fa4num report``: FA4's POLY_EX2 against fa4num's sets, from the polys registry
(fa4num/data/polys/registry.json).

Reads the metrics the registry already holds (computed by ``fa4num fit`` with certified bounds and exhaustive
emulation), so the section costs no computation."""
from __future__ import annotations

from fa4num.ex2.report import Section

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
    md = f"""Coefficient sets of the polys registry (`fa4num/data/polys/registry.json`: FA4's shipped `POLY_EX2` and fa4num's
fits), p(f) ~ 2^f on
[0, 1]. "max rel" is the real-arithmetic sup norm of p/2^f - 1, "certified" a rigorous upper bound
(python-flint ball arithmetic), "/ optimum" the ratio to the best real-coefficient polynomial with p(0) = 1,
"evaluated" the max relative error of FA4's fp32 FMA evaluation over every fp32 f in [0, 1), and "bf16
mismatch" the share of the softmax domain whose bf16 P differs from the correctly rounded bf16 of 2^x.
Regenerate or extend with `fa4num fit --degree N [--objective evaluated|bf16] --write`.

| set | degree | max rel | certified | / optimum | evaluated | bf16 mismatch |
|---|---|---|---|---|---|---|
{chr(10).join(rows)}
"""
    return [Section("Coefficient sets: FA4 against fa4num's fits", md, [],
                    {n: entries[n].get("metrics", {}) for n in names})]
