"""The paper's figures, from committed results only (seaborn colour-blind palette, one naming scheme shared with
the tables through experiments/paper_common.py).

    python experiments/paper_figures.py [NAME ...]      # paper/figures/NAME.pdf; all when no NAME is given

skip_threshold, skip_seqlen, rescales_per_row : skip-rate stores (fa4num/study/data/study_skip_rate*)
baselines     : fa4num/study/data/baselines_h200_fp64gpu.json
bounds, exp2_error : experiments/results/paper_bounds.json (experiments/paper_bounds.py)
bounds_validation : fa4num/bounds/data/bounds_validation.json (experiments/bounds_validation.py)
knobs_heatmap, sink : experiments/results/fa4_knobs.json (sink also paper_sink_jump.json)
error_budget  : experiments/results/study_error_budget
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import paper_common as pc  # noqa: E402

OUT = pc.ROOT / "paper" / "figures"
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns
    sns.set_theme(style="whitegrid", context="paper", palette="colorblind", font_scale=1.0)
    return plt, sns.color_palette("colorblind")


def _save(fig, name):
    OUT.mkdir(parents=True, exist_ok=True)
    p = OUT / f"{name}.pdf"
    fig.savefig(p, bbox_inches="tight", metadata={"CreationDate": None, "ModDate": None})
    print("wrote", p)


def skip_threshold(t):
    plt, pal = _plt()
    fig, axes = plt.subplots(2, 3, figsize=(10, 5.6), sharey=True)
    for ax, dist in zip(axes.flat, pc.DIST_ORDER):
        g = t[t.dist == dist]
        lens = sorted(g.seqlen.unique())
        show = [n for n in (512, 1024, 8192, 131072) if n in lens]
        for i, n in enumerate(show):
            h = g[g.seqlen == n].sort_values("threshold")
            y, lo, hi = (100 * h[c] for c in ("avoided_share_row", "avoided_share_row_lo", "avoided_share_row_hi"))
            ax.errorbar(h.threshold + (i - 1) * 0.15, y, yerr=[y - lo, hi - y], marker=MARKERS[i], ms=4,
                        capsize=2, lw=1.2, color=pal[i], label=f"{n // 1024}k tokens" if n >= 1024 else f"{n} tokens")
        ax.axvline(8, color="0.5", ls=":", lw=1)
        ax.set_title(pc.DIST_LABEL[dist])
        ax.set_xticks([0, 2, 4, 6, 8, 10, 12, 16])
        ax.legend(fontsize=7, loc="lower right")
    for ax in axes[1]:
        ax.set_xlabel("rescale threshold ($\\log_2$ units)")
    for ax in axes[:, 0]:
        ax.set_ylabel("rescales avoided per row (%)")
    fig.suptitle(f"Lazy rescaling: share of a threshold-0 kernel's rescales avoided per row, 95 % CI over seeds ({pc.SM100_MARK}, "
                 "decision replayed from S)", fontsize=9)
    fig.tight_layout()
    _save(fig, "skip_threshold")


def skip_seqlen(t):
    """Threshold 8 against the length: the rescales avoided per row and per 32-row warp (where FA4 SM100
    multiplies O), each against threshold 0 at the same granularity."""
    plt, pal = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    for ax, gran in zip(axes, ("row", "warp")):
        col = f"avoided_share_{gran}"
        for i, dist in enumerate(pc.DIST_ORDER):
            h = t[(t.dist == dist) & (t.threshold == 8)].sort_values("seqlen")
            y, lo, hi = (100 * h[c] for c in (col, col + "_lo", col + "_hi"))
            ax.errorbar(h.seqlen, y, yerr=[y - lo, hi - y], marker=MARKERS[i], ms=4, capsize=2, lw=1.2,
                        color=pal[i], label=pc.DIST_LABEL[dist])
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length (tokens)")
        ax.set_title("per row" if gran == "row" else "per 32-row warp (what FA4 SM100 multiplies)", fontsize=9)
        ax.axhline(90, color="0.5", ls=":", lw=1)
    axes[0].set_ylabel("rescales avoided at threshold 8 (%)")
    axes[1].legend(fontsize=7, loc="lower right", ncol=2)
    fig.suptitle(f"Lazy rescaling against sequence length, 95 % CI over seeds ({pc.SM100_MARK})", fontsize=9)
    fig.tight_layout()
    _save(fig, "skip_seqlen")


def rescales_per_row(t):
    plt, pal = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    for ax, (thr, col, title) in zip(axes, ((0, "events_per_row", "votes per row at threshold 0 (events)"),
                                            (8, "done_per_row", "votes per row at threshold 8 (rescales)"))):
        for i, dist in enumerate(pc.DIST_ORDER):
            h = t[(t.dist == dist) & (t.threshold == thr)].sort_values("seqlen")
            y = h[col].clip(lower=1e-5)
            ax.plot(h.seqlen, y, marker=MARKERS[i], ms=4, lw=1.2, color=pal[i], label=pc.DIST_LABEL[dist])
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length (tokens)")
        ax.set_title(title, fontsize=9)
    axes[0].set_ylabel("per row (mean over seeds; $10^{-5}$ = none)")
    axes[0].legend(fontsize=7, ncol=2)
    fig.suptitle(f"Rescale work per row ({pc.SM100_MARK})", fontsize=9)
    fig.tight_layout()
    _save(fig, "rescales_per_row")


def baselines(bl):
    plt, pal = _plt()
    bl = bl.assign(over=bl.rel_l2 / bl.floor_rel_l2)
    shapes = list(dict.fromkeys(bl["shape"]))
    backs = list(dict.fromkeys(bl.backend))
    fig, ax = plt.subplots(figsize=(10, 4.2))
    x = np.arange(len(shapes))
    w = 0.8 / len(backs)
    for i, b in enumerate(backs):
        h = bl[bl.backend == b].set_index("shape").reindex(shapes)
        ax.scatter(x + (i - (len(backs) - 1) / 2) * w, h.over, marker=MARKERS[i], s=22, color=pal[i], label=b,
                   zorder=3)
    ax.set_xticks(x)
    ax.set_xticklabels(shapes, rotation=35, ha="right", fontsize=7)
    ax.axhline(1, color="0.3", lw=0.8)
    ax.set_ylabel("rel. $L_2$ error / floor")
    ax.set_title("H200 kernels against an fp64 reference (floor: fp64 output rounded once)", fontsize=9)
    ax.legend(fontsize=7, ncol=len(backs), loc="upper center", bbox_to_anchor=(0.5, -0.42))
    fig.tight_layout()
    _save(fig, "baselines")


def bounds(b):
    plt, pal = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    ax = axes[0]
    g = b["golden"]
    obs = np.array([c["max_observed"] for c in g])
    bnd = np.array([c["max_bound"] for c in g])
    lo_, hi_ = obs[obs > 0].min() / 2, bnd.max() * 2
    ax.plot([lo_, hi_], [lo_, hi_], color="0.4", lw=0.8, ls="--", label="bound = observed")
    ax.scatter(obs, bnd, color=pal[0], marker="o", s=20, label="output (max over elements)", zorder=3)
    lo2 = np.array([c["lse_max_observed"] for c in g])
    lb2 = np.array([c["lse_max_bound"] for c in g])
    ax.scatter(lo2, lb2, color=pal[1], marker="s", s=20, label="LSE (max over rows)", zorder=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("observed error of the H200 kernel")
    ax.set_ylabel("per-element worst-case bound")
    ax.set_title(f"{len(g)} H200 golden cases (FA4 SM90)", fontsize=9)
    ax.legend(fontsize=7)
    ax = axes[1]
    # threshold 0 gives the same curve (the caption quotes the largest ratio): one line, not two on top of each other
    a = [r for r in b["a_priori"] if r["threshold"] == 8.0]
    ax.plot([r["seqlen_k"] for r in a], [r["bound"] for r in a], marker=MARKERS[0], color=pal[0], lw=1.4, ms=4,
            label="a-priori bound, threshold 8")
    for j, term in enumerate(("weights", "p_cast", "pv_gemm", "row_sum_rcp")):
        ax.plot([r["seqlen_k"] for r in a], [r["terms"][term] for r in a], lw=1, ls=":", color=pal[2 + j],
                marker=MARKERS[2 + j], ms=3, label=f"term: {term.replace('_', ' ')}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("$n$ = seqlen$_k$")
    ax.set_ylabel("bound on max $|O - O^*|$ ($|v| \\leq 1$)")
    ax.set_title("closed-form bound, FA4 SM100 (software exp2 columns), bf16, $d = 128$", fontsize=9)
    ax.legend(fontsize=6.5, loc="center right")
    fig.tight_layout()
    _save(fig, "bounds")


def exp2_error(b):
    """Signed relative error of the software exp2 per fraction bin (min/max envelope over the grid) for degrees 3
    and 4, and the rigorous bound (+-): the bound touches the envelope where the error peaks."""
    plt, pal = _plt()
    c = b["curve"]
    nb = c["bins"]
    f = (np.arange(nb) + 0.5) / nb
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.3))
    for ax, deg, col in zip(axes, ("3", "4"), (pal[0], pal[2])):
        d = c["degrees"][deg]
        ax.fill_between(f, d["min"], d["max"], color=col, alpha=0.55, lw=0, label="observed (min/max per bin)")
        bound = next(r["bound"] for r in b["exp2"] if str(r["degree"]) == deg)
        ax.axhline(bound, color=pal[3], ls="--", lw=1.1, label="rigorous bound ($\\pm$)")
        ax.axhline(-bound, color=pal[3], ls="--", lw=1.1)
        ax.set_xlabel("fraction $f = x - \\lfloor x \\rfloor$")
        ax.set_ylabel("$\\hat y / 2^x - 1$")
        ax.set_title(f"degree {deg} (FA4's POLY_EX2)", fontsize=9)
        ax.ticklabel_format(axis="y", style="sci", scilimits=(0, 0))
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=2)
    fig.tight_layout()
    _save(fig, "exp2_error")


def bounds_validation(bv):
    """Per case: the largest bound against the largest observed error, H200 kernel bits and the bit-exact emulator
    corpus (experiments/bounds_validation.py), coloured by witness, SM90 circles and SM100 triangles."""
    plt, pal = _plt()
    rows = [r for r in bv["cases"] if "skipped" not in r and r.get("max_observed", 0) > 0 and "max_bound" in r]

    def group(r):
        if r.get("source") == "h200":
            return pc.BV_GROUPS.get(r.get("golden_file_tag"), "H200 kernel")
        return pc.BV_GROUPS.get(f"emulator_{r.get('family')}", f"emulator, {r.get('family')}")
    groups = [g for g in pc.BV_GROUPS.values() if any(group(r) == g for r in rows)]
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    lo = min(r["max_observed"] for r in rows) / 2
    hi = max(r["max_bound"] for r in rows) * 2
    ax.fill_between([lo, hi], [lo, hi], [10 * lo, 10 * hi], color="0.9", lw=0,
                    label="bound within 10$\\times$ observed")
    ax.plot([lo, hi], [lo, hi], color="0.3", lw=0.8, ls="--", label="bound = observed")
    for i, g in enumerate(groups):
        for kern, mk in (("fa4-sm90", "o"), ("fa4-sm100", "^")):
            sel = [r for r in rows if group(r) == g and r.get("kernel", "fa4-sm90") == kern]
            if sel:
                ax.scatter([r["max_observed"] for r in sel], [r["max_bound"] for r in sel], marker=mk, s=16,
                           color=pal[i % len(pal)], alpha=0.8, lw=0,
                           label=g if kern == "fa4-sm90" or not any(group(r) == g and r.get("kernel", "fa4-sm90")
                                                                    == "fa4-sm90" for r in rows) else None)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("largest observed error of the case")
    ax.set_ylabel("largest bound of the case")
    ax.set_title("Attention bound vs observed (circles: SM90; triangles: SM100, emulated, never run on Blackwell)",
                 fontsize=8)
    ax.legend(fontsize=6.5, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    _save(fig, "bounds_validation")


def knobs_heatmap(k):
    plt, _ = _plt()
    import seaborn as sns
    rows = k["rows"]
    cfgs = list(k["summary"])
    fams = {}
    for r in rows:
        key = r["family"] if r["family"] == "sink" else r["case"]
        fams.setdefault(key, {}).setdefault(r["config"], []).append(r["rel_l2"] / r["floor_rel_l2"])
    labels = list(fams)
    m = np.array([[np.mean(fams[f][c]) for c in cfgs] for f in labels])
    fig, ax = plt.subplots(figsize=(9, 0.32 * len(labels) + 1.5))
    sns.heatmap(m, annot=True, fmt=".2f", cmap="cividis", ax=ax, annot_kws={"size": 6.5},
                xticklabels=[pc.CFG_LABEL[c] for c in cfgs],
                yticklabels=["sink (mean over $\\Delta$)" if f == "sink" else pc.case_label(f) for f in labels],
                cbar_kws={"label": "rel. $L_2$ / floor"})
    ax.set_title(f"Knobs one at a time ({pc.SM100_MARK}; SM90 path = the H200-validated emulator)", fontsize=9)
    plt.setp(ax.get_xticklabels(), rotation=30, ha="right", fontsize=7)
    plt.setp(ax.get_yticklabels(), fontsize=7)
    fig.tight_layout()
    _save(fig, "knobs_heatmap")


def sink(k):
    plt, pal = _plt()
    rows = [r for r in k["rows"] if r["family"] == "sink"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
    # the SM90 path equals threshold 0 here (Table 6): drawn once, as threshold 0, so no curve hides another
    for i, c in enumerate(("sm100-default", "sm100-rescale0")):
        h = sorted((r["param"], r["rel_l2"] / r["floor_rel_l2"]) for r in rows if r["config"] == c)
        axes[0].plot(*zip(*h), marker=MARKERS[i], color=pal[i], lw=1.2, ms=4, label=pc.CFG_LABEL[c])
    axes[0].set_xlabel("planted sink $\\Delta$ (nats)")
    axes[0].set_ylabel("rel. $L_2$ / floor")
    axes[0].legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=2)
    h = sorted((r["param"], 100 * r["avoided_share_row"], 100 * r["avoided_share_warp"], r["stats"]["max_lag"])
               for r in rows if r["config"] == "sm100-default")
    d, s, sw, lag = zip(*h)
    axes[1].plot(d, s, marker="o", color=pal[0], lw=1.2, ms=4, label="rescales avoided per row (%)")
    axes[1].plot(d, sw, marker="D", color=pal[1], lw=1.2, ms=4, ls=":", label="per 32-row warp (%)")
    sj = json.loads((pc.RESULTS / "paper_sink_jump.json").read_text())["rows"]
    axes[1].plot([r["delta_nats"] for r in sj], [100 * r["rescale_at_sink_share"] for r in sj], marker="^",
                 color=pal[2], lw=1.2, ms=4, ls="-.", label="rows rescaled at the sink's block (%)")
    ax2 = axes[1].twinx()
    ax2.plot(d, lag, marker="s", color=pal[3], lw=1.2, ms=4, ls="--", label="max lag ($\\log_2$)")
    ax2.grid(False)
    axes[1].set_xlabel("planted sink $\\Delta$ (nats)")
    axes[1].set_ylabel("%")
    ax2.set_ylabel("max lag ($\\log_2$ units)")
    lines = axes[1].get_lines() + ax2.get_lines()
    axes[1].legend(lines, [ln.get_label() for ln in lines], fontsize=7, loc="upper center",
                   bbox_to_anchor=(0.5, -0.3), ncol=2)
    axes[1].set_title("SM100 default (threshold 8)", fontsize=9)
    fig.suptitle(pc.SM100_MARK, fontsize=9)
    fig.tight_layout()
    _save(fig, "sink")


def error_budget(df):
    plt, pal = _plt()
    from fa4num.study.summary import mean_ci
    df = df[df["mode"] == "statistical"]
    dists = [d for d in pc.DIST_ORDER if d in set(df.dist)]
    knobs = [kn for kn in pc.KNOB_ORDER if kn in set(df.knob)]
    fig, ax = plt.subplots(figsize=(9, 4.2))
    y = np.arange(len(knobs))
    for i, dist in enumerate(dists):
        st = [mean_ci(df[(df.knob == kn) & (df.dist == dist)].rel_l2_over_floor) for kn in knobs]
        m = np.array([s[0] for s in st])
        err = np.array([[s[0] - s[1], s[2] - s[0]] for s in st]).T
        ax.errorbar(m, y + (i - 1) * 0.22, xerr=err, fmt=MARKERS[i], color=pal[i], ms=4, capsize=2,
                    label=pc.DIST_LABEL[dist])
    ax.set_yticks(y)
    ax.set_yticklabels([pc.KNOB_LABEL[kn] for kn in knobs], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("rel. $L_2$ error / floor (mean and 95 % CI over 5 seeds)")
    ax.set_title(f"Error budget, one knob changed from FA4's default, 512 tokens ({pc.SM100_MARK})", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    _save(fig, "error_budget")


def main(argv=None) -> int:
    names = (argv if argv is not None else sys.argv[1:]) or ["skip_threshold", "skip_seqlen", "rescales_per_row",
                                                            "baselines", "bounds", "exp2_error", "knobs_heatmap", "sink",
                                                            *(["bounds_validation"] if pc.BOUNDS_VALIDATION.exists()
                                                              else []),
                                                            "error_budget"]
    t = None
    for n in names:
        if n in ("skip_threshold", "skip_seqlen", "rescales_per_row"):
            t = pc.skip_table()[0] if t is None else t
            globals()[n](t)
        elif n == "baselines":
            baselines(pc.baselines())
        elif n in ("bounds", "exp2_error"):
            globals()[n](pc.bounds())
        elif n == "bounds_validation":
            bounds_validation(pc.bounds_validation())
        elif n in ("knobs_heatmap", "sink"):
            globals()[n](pc.knobs())
        elif n == "error_budget":
            error_budget(pc.error_budget())
        else:
            raise SystemExit(f"unknown figure {n!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
