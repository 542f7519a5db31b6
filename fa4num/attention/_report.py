"""The attention section of ``fa4num report``: what FA4's two tricks cost on one forward pass.

One seeded bf16 problem (Gaussian q, k, v with q scaled by 2 for sharper rows, causal) is run through the
bit-exact emulators of FA4's Hopper path and of its Blackwell path with each trick switched off in turn, and
compared with fp64 attention and with that result rounded once to bf16 (the floor no kernel can beat). A column
about a trick the kernel does not have (lazy rescaling, software exp2: SM90 has neither) reads "n/a", decided
from the knobs of the kernel's options, not from its name."""
from __future__ import annotations

from dataclasses import fields

import ml_dtypes
import numpy as np

from fa4num.section import Check, Section

from . import reference
from .forward import forward
from .inputs import CaseSpec, make_inputs

# (label, kernel, options): FA4's defaults on both architectures, then the SM100 knobs one at a time
CONFIGS = (
    ("FA4 SM90 (H200 path)", "fa4-sm90", {}),
    ("FA4 SM100 defaults", "fa4-sm100", {}),
    ("SM100, rescale_threshold=0", "fa4-sm100", {"rescale_threshold": 0.0}),
    ("SM100, no software exp2", "fa4-sm100", {"ex2_emu_freq": 0}),
    ("SM100, both off", "fa4-sm100", {"rescale_threshold": 0.0, "ex2_emu_freq": 0}),
)
SHAPE, QUICK_SHAPE = (1, 1024, 4, 128), (1, 512, 2, 128)
Q_MULT = 2.0


def _inputs(shape, seed=0):
    """Seeded bf16 q, k, v of ``shape`` (q times Q_MULT): fa4num.attention.inputs' "normal" kind."""
    b, s, h, d = shape
    return make_inputs(CaseSpec("report", "normal", b, s, s, h, h, d, False, q_mult=Q_MULT, seed=seed))


def _plot(rows, path, *, shape):
    """Two panels with the same rows in the same order: out's error as a multiple of the bf16 floor (linear,
    the floor at 1), and the LSE error on a log axis with labelled ticks (the floor row has no LSE: marked)."""
    import matplotlib
    import matplotlib.ticker as mt
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns
    sns.set_theme(style="whitegrid", context="paper", palette="colorblind")
    labels = [r["config"] for r in rows]
    pos = np.arange(len(rows))
    floor = rows[0]["rel_l2"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 0.45 * len(rows) + 1.6), sharey=True)
    ratio = np.array([r["rel_l2"] / floor for r in rows])
    axes[0].barh(pos, ratio, color=["0.6"] + ["C0"] * (len(rows) - 1))
    axes[0].axvline(1.0, color="k", lw=0.8, ls="--")
    for p, r, v in zip(pos, ratio, rows):
        axes[0].text(r, p, f" {r:.3f}  ({v['rel_l2']:.2e})", va="center", fontsize=7)
    axes[0].set_xlim(0, ratio.max() * 1.35)
    axes[0].set_xlabel("relative L2 error of out vs fp64, as a multiple of the bf16 floor (1 = rounded once)")
    axes[0].set_title("output error", fontsize=9)
    lse = [r["lse_max_abs"] for r in rows]
    vals = np.array([v if v is not None else np.nan for v in lse])
    axes[1].barh(pos, vals, color="C1")
    axes[1].set_xscale("log")
    finite = vals[np.isfinite(vals) & (vals > 0)]
    if finite.size:
        axes[1].set_xlim(finite.min() / 3, finite.max() * 6)
    axes[1].xaxis.set_major_locator(mt.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axes[1].xaxis.set_major_formatter(mt.LogFormatterSciNotation(labelOnlyBase=False))
    axes[1].xaxis.set_minor_formatter(mt.NullFormatter())
    for p, v in zip(pos, lse):
        if v is None:
            axes[1].text(axes[1].get_xlim()[0] * 1.2, p, "n/a (no kernel: the fp64 result rounded once)",
                         va="center", fontsize=7, color="0.4")
        else:
            axes[1].text(v, p, f" {v:.2e}", va="center", fontsize=7)
    axes[1].set_xlabel("max |LSE - LSE_fp64| over all rows (log)")
    axes[1].set_title("LSE error", fontsize=9)
    axes[0].set_yticks(pos, labels)
    axes[0].invert_yaxis()
    fig.suptitle(f"One bf16 causal forward pass {tuple(shape)} (batch, seqlen, heads, head_dim), q x {Q_MULT:g}: "
                 "FA4's SM90 path and SM100 knobs against fp64", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def _tricks(options) -> tuple[bool, bool]:
    """(has lazy rescaling, has software exp2) of a kernel, from the knobs its resolved options carry."""
    knobs = {f.name for f in fields(options)}
    return "rescale_threshold" in knobs, "ex2_emu_freq" in knobs


def _cell(value, fmt: str) -> str:
    return "n/a" if value is None else fmt.format(value)


def report_sections(ctx) -> list:
    shape = QUICK_SHAPE if ctx.quick else SHAPE
    q, k, v = _inputs(shape)
    out64, lse64 = reference.attention_fp64(q, k, v, causal=True)
    floor = reference.metrics(reference.round_once(out64, ml_dtypes.bfloat16), out64)
    rows = [{"config": "fp64 rounded once to bf16 (floor)", "rel_l2": floor.rel_l2, "max_abs": floor.max_abs,
             "lse_max_abs": None}]
    from tqdm.auto import tqdm
    checks = []
    for label, kernel, opts in tqdm(CONFIGS, desc="report: attention forward passes", unit="pass",
                                    disable=not ctx.progress):
        res = forward(q, k, v, causal=True, kernel=kernel, **opts)
        m = reference.metrics(res.out, out64)
        s = res.stats.summary()
        lazy, soft = _tricks(res.options)
        grew = s["rescale_events"]
        # elements where both sides are numbers: a NaN output makes the metrics NaN and compares nothing
        compared = int((np.isfinite(np.asarray(res.out, np.float64)) & np.isfinite(out64)).sum())
        checks.append(Check(f"out vs fp64: {label}", compared, unit="elements"))
        with np.errstate(invalid="ignore"):   # inf - inf where a row's LSE is infinite on both sides
            lse_err = float(np.abs(np.asarray(res.lse, np.float64) - lse64).max())
        rows.append({"config": label, "kernel": kernel, "options": opts, "rel_l2": m.rel_l2,
                     "max_abs": m.max_abs, "lse_max_abs": lse_err,
                     "lazy_rescale": lazy, "software_exp2": soft,
                     "rescale_events": s["rescale_events"] if lazy else None,
                     "rescales_done": s["rescales_done"] if lazy else None,
                     "skipped_share": (s["rescales_avoided"] / grew if grew else 0.0) if lazy else None,
                     "max_lag": s["max_lag"] if lazy else None,
                     "exp2_emulated_share": (s["exp2_emulated"] / max(1, s["exp2_emulated"] + s["exp2_mufu"])
                                             if soft else None)})
    # a NaN reference or output compares nothing: no ratio to the floor, no figure, and the checks say so
    compared_all = all(c.compared for c in checks) and rows[0]["rel_l2"] > 0
    fig = "attention_configs.png"
    if compared_all:
        _plot(rows, ctx.out_dir / fig, shape=shape)
    table = "\n".join(
        f"| {r['config']} | {r['rel_l2']:.4e} | {r['max_abs']:.3e} | "
        + (f"{r['lse_max_abs']:.2e} | {_cell(r['skipped_share'], '{:.1%}')} | {_cell(r['max_lag'], '{:.2f}')} | "
           f"{_cell(r['exp2_emulated_share'], '{:.1%}')} |" if "kernel" in r else "– | – | – | – |")
        for r in rows)
    md = f"""Bit-exact emulation of one forward pass, shape (batch, seqlen, heads, head_dim) = {shape}, bf16,
causal, q, k, v ~ N(0, 1) with q scaled by {Q_MULT:g}, softmax_scale = 1/sqrt(d); errors against fp64
attention. "skipped" is the share of rescale events (blocks where the true row max grew) that the lazy
rescale avoided by keeping the stale max;
"lag" the largest stale-max lag in log2 units (at most rescale_threshold = 8); "emulated" the share of exp2
evaluations done by the software polynomial; "n/a" where the kernel has no such trick (SM90 rescales at every
new row max and computes every exp2 on MUFU). The SM90 path is checked bit for bit against the real kernel on an
H200; the SM100 path follows FA4's source (its softmax stage is checked against a PTX twin on the H200).
Explore further with `fa4num attention run --kernel fa4-sm100 --opt KEY=VALUE`.

| configuration | rel. L2 | max abs | LSE max abs | skipped | lag | emulated |
|---|---|---|---|---|---|---|
{table}

""" + (f"![attention configurations]({fig})\n" if compared_all else
       "**Nothing compared: the outputs or the fp64 reference hold no finite element in common.**\n")
    if compared_all:
        by = {r["config"]: r["rel_l2"] / rows[0]["rel_l2"] for r in rows}
        headline = (f"Attention (one bf16 causal forward {tuple(shape)}, relative L2 error of out vs fp64, as a "
                    f"multiple of the bf16 rounding floor): FA4 SM90 {by[CONFIGS[0][0]]:.3f}x, SM100 defaults "
                    f"{by[CONFIGS[1][0]]:.3f}x; lazy rescaling off {by[CONFIGS[2][0]]:.3f}x, software exp2 off "
                    f"{by[CONFIGS[3][0]]:.3f}x.")
    else:
        headline = "Attention: nothing compared (no finite output element against fp64)."
    section = Section("Attention: what lazy rescaling and the software exp2 cost", md, [fig] if compared_all else [],
                      {"shape": list(shape), "q_mult": Q_MULT, "rows": rows}, checks=checks)
    section.headline = headline   # the report's summary line for this section
    return [section]
