"""The error-bound section of ``fa4num report``: fa4num.bounds' rigorous bounds against the errors observed.

Computed in this process, in three parts: FA4's cubic software exp2 (``exp2_error_bound``) and the MUFU models
(``mufu_error_bounds``) against the exhaustive maxima over every fp32 x in [-126, 0] (swept once, cached in
fa4num/bounds/data); ``attention_error_bound`` against the emulator on one seeded problem per kernel; and against
the H200 FA4 kernel's own bits on the plain golden cases (package data): the smallest case of each input kind and
head dim (of each input kind with ``--quick``), which keeps the section to seconds. Violations are checks that
failed; a part that compared nothing says so. Where the checkout holds the full validation run
(fa4num/bounds/data/bounds_validation.json), its summary is shown with the number of golden cases it
covered against the number the golden files hold now."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from fa4num.attention import forward
from fa4num.attention import golden as attention_golden
from fa4num.attention import KERNELS
from fa4num.attention.inputs import CaseSpec, make_inputs
from fa4num.section import Check, Section

from ._observed import observed_exp2, observed_key
from .attention import attention_error_bound
from .exp2 import exp2_error_bound, mufu_error_bounds
from .validate import check, golden_cases, golden_options

VALIDATION = Path(__file__).resolve().parent / "data" / "bounds_validation.json"   # package data (experiments/bounds_validation.py writes it)
SHAPE, QUICK_SHAPE = (1, 512, 2, 128), (1, 256, 2, 64)
Q_MULT = 2.0
MUFU_ARCH = "sm90"          # the only measured MUFU tables (fa4num.hw.available_archs)


def _inputs(shape, seed=0):
    """Seeded bf16 q, k, v of ``shape`` (q times Q_MULT): fa4num.attention.inputs' "normal" kind."""
    b, s, h, d = shape
    return make_inputs(CaseSpec("report", "normal", b, s, s, h, h, d, False, q_mult=Q_MULT, seed=seed))


def _exp2_part():
    """Rows (implementation, bound, observed max, inputs swept, terms) of FA4's cubic and MUFU ex2, and the
    MUFU bounds."""
    b = exp2_error_bound(3)
    rows = [{"implementation": "FA4 software exp2, degree 3 (POLY_EX2, packed)",
             "bound": b.relative, "observed": b.observed["max_rel"] if b.observed else None,
             "observed_x": b.observed["max_rel_x"] if b.observed else None,
             "inputs": b.observed["count"] if b.observed else None,
             "terms": {k: v for k, v in b.terms.items() if isinstance(v, float)},
             "at_argmax": dict(b.terms["at_argmax"])}]
    mb = mufu_error_bounds(MUFU_ARCH)
    obs = observed_exp2(observed_key(mufu_arch=MUFU_ARCH))
    rows.append({"implementation": f"MUFU ex2.approx.ftz.f32 ({MUFU_ARCH} tables)", "bound": mb.ex2_relative,
                 "observed": obs["max_rel"] if obs else None, "observed_x": obs["max_rel_x"] if obs else None,
                 "inputs": obs["count"] if obs else None, "terms": None})
    return rows, mb


def _emulator_part(shape):
    """One seeded causal bf16 problem per kernel: (BoundCheck, AttentionBound, observed |out - exact|)."""
    q, k, v = _inputs(shape)
    res = []
    for kernel in sorted(KERNELS):
        run = forward(q, k, v, causal=True, kernel=kernel)
        bound = attention_error_bound(q, k, v, causal=True, kernel=kernel, full_terms=True)
        c = check(q, k, v, run.out, run.lse, name=kernel, causal=True, kernel=kernel, bound=bound)
        with np.errstate(invalid="ignore"):
            err = np.abs(np.asarray(run.out, np.float64) - bound.out_exact)
        res.append((c, bound, err))
    return res


def _golden_part(cases, quick: bool):
    """BoundCheck of the smallest plain H200 golden case (the package-data file) of each input kind (one-hot,
    exact products, Gaussian) and head dim (each kind only, quick), and how many plain cases exist."""
    plain = [c for c in cases if c[1] == attention_golden.GOLDEN_SM90.name]
    smallest = {}
    for c in plain:
        key = c[2]["kind"] if quick else (c[2]["kind"], c[2]["head_dim"])
        if key not in smallest or c[3].size < smallest[key][3].size:
            smallest[key] = c
    chosen = list(smallest.values())
    checks = [check(q, k, v, vals, lse, name=name, source="h200", idx=idx, kernel="fa4-sm90", **golden_options(spec))
              for name, _f, spec, q, k, v, vals, idx, lse in chosen]
    return checks, len(plain)


def _validation_summary():
    """The committed full validation run's summary (checkouts only), or None."""
    if not VALIDATION.exists():
        return None
    return json.loads(VALIDATION.read_text())["summary"]


def _plot(emu, path, *, shape):
    """Left: bound against observed error per output element (log-log; every point above the diagonal is a bound
    that holds). Right: the bound's largest term per error source, per kernel."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns
    sns.set_theme(style="whitegrid", context="paper", palette="colorblind")
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    rng = np.random.default_rng(0)
    lo, hi = np.inf, 0.0
    for i, (c, bound, err) in enumerate(emu):
        e, b = err.reshape(-1), bound.out.reshape(-1)
        keep = np.isfinite(b) & (e > 0)
        e, b = e[keep], b[keep]
        if e.size > 3000:   # a sample keeps the figure small and quick; the check used every element
            pick = rng.choice(e.size, 3000, replace=False)
            e, b = e[pick], b[pick]
        if e.size:
            axes[0].scatter(e, b, s=3, alpha=0.4, color=f"C{i}", label=c.kernel, rasterized=True)
            lo, hi = min(lo, e.min(), b.min()), max(hi, e.max(), b.max())
    if hi > 0:
        axes[0].plot([lo, hi], [lo, hi], color="k", lw=0.8, ls="--", label="bound = observed")
    axes[0].set_xscale("log")
    axes[0].set_yscale("log")
    axes[0].set_xlabel("observed |out - exact| per element (emulator vs real arithmetic)")
    axes[0].set_ylabel("rigorous bound per element")
    axes[0].legend(fontsize=7, markerscale=3)
    axes[0].set_title("bound vs observed (above the diagonal: the bound holds)", fontsize=9)
    names = sorted({t for _, bound, _ in emu for t, v in bound.terms.items() if v > 0},
                   key=lambda t: -max(bound.terms.get(t, 0.0) for _, bound, _ in emu))
    pos = np.arange(len(names))
    width = 0.8 / max(1, len(emu))
    for i, (c, bound, _) in enumerate(emu):
        vals = [bound.terms.get(t, 0.0) or np.nan for t in names]
        axes[1].barh(pos + i * width, vals, height=width, color=f"C{i}", label=c.kernel)
    axes[1].set_yticks(pos + width * (len(emu) - 1) / 2, names)
    axes[1].invert_yaxis()
    axes[1].set_xscale("log")
    axes[1].set_xlabel("largest contribution to the bound over the elements (absolute, units of out)")
    axes[1].legend(fontsize=7)
    axes[1].set_title("the bound's terms", fontsize=9)
    fig.suptitle(f"attention_error_bound on one bf16 causal forward pass {tuple(shape)}, q x {Q_MULT:g}", fontsize=9)
    fig.subplots_adjust(left=0.07, right=0.99, bottom=0.13, top=0.86, wspace=0.33)   # tight_layout costs seconds
    fig.savefig(path, dpi=130)
    plt.close(fig)


def _g(v, fmt="{:.4g}"):
    return fmt.format(v) if v is not None and math.isfinite(v) else ("inf" if v == math.inf else "n/a")


def report_sections(ctx) -> list:
    """``fa4num report`` hook (fa4num.report.providers): the error-bound section.

    Parameters
    ----------
    ctx : fa4num.section.ReportContext
        Output folder for the figure and the quick flag (a smaller problem, fewer golden cases).

    Returns
    -------
    list of fa4num.section.Section
        One section; its checks: the exp2/MUFU bounds against the exhaustive maxima (a bound below its observed
        maximum fails), the attention bound against the emulator per kernel and against the H200 golden bits
        (a violated element fails; a check with no element under a finite bound compared nothing).
    """
    shape = QUICK_SHAPE if ctx.quick else SHAPE
    exp2_rows, mb = _exp2_part()
    emu = _emulator_part(shape)
    cases = golden_cases()
    gold, gold_total = _golden_part(cases, ctx.quick)
    fig = "bounds_vs_observed.png"
    _plot(emu, ctx.out_dir / fig, shape=shape)

    with_obs = [r for r in exp2_rows if r["observed"] is not None]
    checks = [Check("exp2 / MUFU ex2 bound >= exhaustive max", len(with_obs),
                    sum(r["bound"] < r["observed"] for r in with_obs), unit="implementations")]
    exp2_table = "\n".join(
        f"| {r['implementation']} | {r['bound']:.6g} | "
        + (f"{r['observed']:.6g} (x = {r['observed_x']!r}) | {r['bound'] / r['observed']:.5f} |"
           if r["observed"] is not None else "no cached sweep | – |") for r in exp2_rows)
    terms, at = next((r["terms"], r["at_argmax"]) for r in exp2_rows if r["terms"])
    at_arg = ", ".join(f"{k.replace('_', ' ')} {v:.4g}" for k, v in at.items())
    emu_rows = []
    for c, bound, _ in emu:
        bounded = c.elements - c.unbounded
        checks.append(Check(f"attention bound vs emulator ({c.kernel})", bounded, c.out_violations + c.lse_violations,
                            unit="elements"))
        emu_rows.append(f"| {c.kernel} | {bounded:,} | {c.out_violations} / {c.lse_violations} | "
                        f"{_g(c.max_observed)} | {_g(c.max_bound)} | {_g(c.ratio_max, '{:.3g}')} | "
                        f"{_g(c.ratio_median, '{:.3g}')} | {_g(c.lse_max_observed)} | {_g(c.lse_max_bound)} |")
    g_elems = sum(c.elements - c.unbounded for c in gold)
    g_viol = sum(c.out_violations + c.lse_violations for c in gold)
    checks.append(Check("attention bound vs H200 golden bits", g_elems, g_viol, unit="elements"))
    ratios = sorted(c.ratio_max for c in gold if math.isfinite(c.ratio_max))
    g_med = float(np.median(ratios)) if ratios else None
    if gold:
        gold_line = (f"{len(gold)} of the {gold_total} plain H200 golden cases (the smallest of each input kind"
                     f"{'' if ctx.quick else ' and head dim'}): {g_elems:,} output elements under a finite bound, "
                     f"**{g_viol} violations**; tightness (largest bound / largest observed per case) median "
                     f"{_g(g_med, '{:.3g}')}, worst {_g(ratios[-1] if ratios else None, '{:.3g}')}")
        if len(ratios) < len(gold):
            n = len(gold) - len(ratios)
            gold_line += f" ({n} case{'s' if n > 1 else ''} with no observed error on the stored elements)"
        gold_line += "."
    else:
        gold_line = "**no golden case found: this check compared nothing.**"
    summary = _validation_summary()
    modelled = len(cases)
    if summary:
        h, e = summary["h200"], summary["emulator"]
        stale = ("" if h["cases"] == modelled else
                 f" **The golden files now hold {modelled} modelled forward cases: the run is stale; re-run "
                 "`python experiments/bounds_validation.py`.**")
        full_run = (f"The full validation run (`fa4num/bounds/data/bounds_validation.json`): "
                    f"{h['cases']} H200 golden forward cases (the golden files hold {modelled} that the bound "
                    f"models), {h['out_violations'] + h['lse_violations']} violations over {h['elements']:,} "
                    f"elements, tightness median {h['tightness_case_median']:.3g}, worst "
                    f"{h['tightness_case_worst']:.3g}; {e['cases']} emulator cases, "
                    f"{e['out_violations'] + e['lse_violations']} violations.{stale}\n")
    else:
        full_run = ("The full validation run (`experiments/bounds_validation.py`) is not in this installation: "
                    f"the golden files hold {modelled} forward cases the bound models.\n")
    swept = max(r["inputs"] or 0 for r in exp2_rows)
    md = f"""Rigorous bounds (`fa4num.bounds`, derivation in `docs/bounds.md`) against what is observed. A bound holds
when no observed error exceeds it; "bound / observed" (tightness) says how much room it leaves.

**Software exp2 and MUFU** (relative error, every fp32 x in [-126, 0] where 2^x is normal; the exhaustive
maxima were swept once over all {swept:,} such inputs, `python -m fa4num.bounds._observed`):

| implementation | rigorous bound | exhaustive max | bound / observed |
|---|---|---|---|
{exp2_table}

The cubic's terms, each at its largest over the fraction pieces: polynomial (certified sup of p/2^f - 1 on
[0, 1]) {terms['polynomial']:.4g}, Cody-Waite rounding {terms['cody_waite']:.3g}, Horner rounding
{terms['horner_running']:.3g}, exponent insertion {terms['exponent_insertion']:g}, ftz {terms['ftz']:g}; on the
piece where the bound is attained they are {at_arg}. MUFU ({MUFU_ARCH} tables): rcp.approx relative bound
{mb.rcp_relative:.4g}, lg2 table error {max(mb.lg2_table_abs):.4g} (absolute, plus one fp32 ulp of the result).

**Attention, against the emulator** (`attention_error_bound` vs `forward` on one problem per kernel: shape
(batch, seqlen, heads, head_dim) = {shape}, bf16, causal, q, k, v ~ N(0, 1) with q scaled by {Q_MULT:g};
errors against real-arithmetic attention; the fa4-sm100 row is FA4's Blackwell path emulated from its source,
never run on a Blackwell GPU):

| kernel | elements | violations (out / LSE) | max observed | max bound | bound / observed | median per element \
| LSE max observed | LSE max bound |
|---|---|---|---|---|---|---|---|---|
{chr(10).join(emu_rows)}

**Attention, against the real kernel's bits**: {gold_line}

{full_run}
![bound vs observed]({fig})
"""
    cubic = next((r["bound"] / r["observed"] for r in with_obs if r["terms"]), None)
    emu_viol = sum(c.out_violations + c.lse_violations for c, _, _ in emu)
    tight = ", ".join(f"{c.kernel} {_g(c.ratio_max, '{:.3g}')}" for c, _, _ in emu)
    headline = (f"Error bounds: FA4's cubic exp2 bound / exhaustive max {_g(cubic, '{:.5f}')}; attention bound "
                f"{emu_viol + g_viol} violations (emulator on {tuple(shape)} per kernel and {len(gold)} H200 golden "
                f"cases), tightness (largest bound / largest observed) {tight}"
                f"{f', H200 median {g_med:.3g}' if g_med else ''}.")
    data = {"exp2": exp2_rows, "mufu": {"arch": mb.arch, "ex2_relative": mb.ex2_relative,
                                        "rcp_relative": mb.rcp_relative, "lg2_table_abs": list(mb.lg2_table_abs)},
            "shape": list(shape), "q_mult": Q_MULT,
            "emulator": [dict(c.as_dict(), terms=bound.terms) for c, bound, _ in emu],
            "golden": [c.as_dict() for c in gold], "golden_plain_cases": gold_total,
            "golden_modelled_cases": modelled, "validation_summary": summary}
    return [Section("Error bounds: rigorous bounds against observed errors", md, [fig], data, headline, checks)]
