"""Summaries of study results: means over seeds with 95 % confidence intervals, Markdown tables, figures.

Confidence intervals are Student-t intervals over the seeds (each seed one independent input: the rows, blocks
and heads of one input are not independent of each other, so the seed is the unit). With fewer than two seeds
the interval is NaN. Figures use seaborn's colour-blind palette, one line per sequence length or threshold with
its interval as a band or bar, never a cloud of points.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

DIST_ORDER = ("gaussian", "outliers", "sink", "rising", "llm", "minilm")


def mean_ci(values, *, level: float = 0.95) -> tuple[float, float, float, int]:
    """(mean, low, high, n) of a Student-t interval over ``values`` (NaNs dropped).

    Examples
    --------
    >>> m, lo, hi, n = mean_ci([1.0, 2.0, 3.0])
    >>> m, n, round(hi - m, 4)
    (2.0, 3, 2.4841)
    """
    from scipy import stats
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    x = np.asarray(values, np.float64)
    x = x[np.isfinite(x)]
    n = x.size
    if n == 0:
        return float("nan"), float("nan"), float("nan"), 0
    m = float(x.mean())
    if n < 2:
        return m, float("nan"), float("nan"), 1
    half = float(stats.t.ppf(0.5 + level / 2, n - 1) * x.std(ddof=1) / math.sqrt(n))
    return m, m - half, m + half, n


def ci_table(df, by: list, metrics: list, *, level: float = 0.95):
    """One row per group of ``by``: for each metric its mean, ``_lo``, ``_hi`` and the number of seeds ``n``."""
    import pandas as pd
    rows = []
    for key, g in df.groupby(by, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        row = dict(zip(by, key))
        for m in metrics:
            mu, lo, hi, n = mean_ci(g[m], level=level)
            row.update({m: mu, f"{m}_lo": lo, f"{m}_hi": hi})
            row["n"] = n
        rows.append(row)
    return pd.DataFrame(rows)


def check_seed_pooling(df, by: list, *, seed: str = "seed") -> None:
    """Refuse to pool as seeds rows that are different configurations.

    Within each group of ``by``, every configuration parameter of the study (its function's parameters, less
    ``by`` and ``seed``) and the study version must take one value, and each seed must occur once; else the
    interval would be over a mixture, and narrower than the seeds support.

    Raises
    ------
    ValueError
        Naming the group and the parameter whose values differ (or the repeated seed).

    Examples
    --------
    >>> import pandas as pd
    >>> df = pd.DataFrame({"study": "skip_rate", "dist": "sink", "seqlen": 512, "threshold": 8, "seed": [0, 1],
    ...                    "heads": [2, 4]})
    >>> check_seed_pooling(df, ["dist", "seqlen", "threshold"])
    Traceback (most recent call last):
    ...
    ValueError: summary: rows of dist=sink, seqlen=512, threshold=8 differ in 'heads' (2, 4): different configurations, not seeds; summarise one configuration per group (filter the rows or use one store per configuration)
    """
    from .grid import _signature
    studies = sorted(set(df["study"].astype(str)))
    if len(studies) != 1:
        raise ValueError(f"summary: the store holds rows of several studies {studies}; summarise one at a time")
    params, _ = _signature(studies[0])
    cols = [c for c in list(params) + ["study_version"] if c in df.columns and c not in by and c != seed]
    for key, g in df.groupby(by, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        label = ", ".join(f"{b}={k}" for b, k in zip(by, key))
        for c in cols:
            vals = g[c].drop_duplicates()
            if len(vals) > 1:
                shown = ", ".join(str(v) for v in sorted(vals, key=str)[:4])
                raise ValueError(f"summary: rows of {label} differ in {c!r} ({shown}): different configurations, "
                                 "not seeds; summarise one configuration per group (filter the rows or use one "
                                 "store per configuration)")
        if seed in g and g[seed].duplicated().any():
            raise ValueError(f"summary: rows of {label} repeat seed {g[seed][g[seed].duplicated()].iloc[0]} "
                             "under different task keys; summarise one configuration per group")


SKIP_METRICS = ["rescales_avoided_share", "events_per_row", "done_per_row", "lag_q50", "lag_q99", "lag_max"]


def skip_table(df):
    """CI table of a skip_rate store by (dist, seqlen, threshold), plus the pooled share
    (sum of avoided / sum of events over the seeds) and the device(s) that computed it."""
    t = ci_table(df, ["dist", "seqlen", "threshold"], SKIP_METRICS)
    pooled = df.groupby(["dist", "seqlen", "threshold"]).apply(
        lambda g: g.rescales_avoided.sum() / g.rescale_events.sum() if g.rescale_events.sum() else float("nan"),
        include_groups=False)
    t["pooled_avoided_share"] = pooled.to_numpy()
    from .store import device_used
    dev = df.assign(_dev=device_used(df)).groupby(["dist", "seqlen", "threshold"])["_dev"].agg(
        lambda s: ",".join(sorted(set(s))))
    t["device"] = dev.to_numpy()
    return t


def _fmt_ci(m, lo, hi, pct=True):
    if m != m:
        return "–"
    f = (lambda v: f"{100 * v:.1f}") if pct else (lambda v: f"{v:.3g}")
    return f"{f(m)} [{f(lo)}, {f(hi)}]" if lo == lo else f(m)


def skip_markdown(t, *, thresholds=(0, 8), seqlens=None) -> str:
    """Markdown: avoided share (%) with 95 % CI and rescales done per row, per distribution and length."""
    sel = t[t.threshold.isin(thresholds)]
    if seqlens is not None:
        sel = sel[sel.seqlen.isin(seqlens)]
    lines = ["| dist | seqlen | threshold | seeds | avoided % [95 % CI] | rescales done / row | events / row | "
             "lag q99 | lag max |", "|---|---|---|---|---|---|---|---|---|"]
    order = {d: i for i, d in enumerate(DIST_ORDER)}
    sel = sel.assign(_o=sel.dist.map(lambda d: order.get(d, 99))).sort_values(["_o", "seqlen", "threshold"])
    for r in sel.itertuples():
        lines.append(f"| {r.dist} | {r.seqlen} | {r.threshold:g} | {r.n} | "
                     f"{_fmt_ci(r.rescales_avoided_share, r.rescales_avoided_share_lo, r.rescales_avoided_share_hi)}"
                     f" | {r.done_per_row:.3g} | {r.events_per_row:.3g} | {r.lag_q99:.2f} | {r.lag_max:.2f} |")
    return "\n".join(lines)


def _sns():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns
    sns.set_theme(style="whitegrid", context="paper", palette="colorblind")
    return plt, sns


def plot_skip_vs_threshold(t, path) -> Path:
    """Avoided share vs threshold, one panel per distribution, one line per sequence length (95 % CI bands)."""
    plt, sns = _sns()
    dists = [d for d in DIST_ORDER if d in set(t.dist)]
    lens = sorted(set(t.seqlen))
    pal = sns.color_palette("colorblind", len(lens)) if len(lens) <= 10 else sns.color_palette("viridis", len(lens))
    fig, axes = plt.subplots(1, len(dists), figsize=(2.9 * len(dists), 3.0), sharey=True, squeeze=False)
    for ax, d in zip(axes[0], dists):
        for c, n in zip(pal, lens):
            g = t[(t.dist == d) & (t.seqlen == n)].sort_values("threshold")
            if g.empty:
                continue
            ax.plot(g.threshold, 100 * g.rescales_avoided_share, marker="o", ms=3, color=c, label=f"{n}")
            ax.fill_between(g.threshold, 100 * g.rescales_avoided_share_lo, 100 * g.rescales_avoided_share_hi,
                            color=c, alpha=0.2, lw=0)
        ax.set_title(d)
        ax.set_xlabel("rescale_threshold (log2 units)")
        ax.axvline(8, color="grey", lw=0.8, ls=":")
    axes[0][0].set_ylabel("rescales avoided (% of events)")
    axes[0][-1].legend(title="seqlen", fontsize=7, title_fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return _save(fig, plt, path)


def plot_done_vs_seqlen(t, path) -> Path:
    """Rescales done per row vs sequence length (log-log), one panel per distribution, one line per threshold;
    threshold 0 is the number of rescale events (what a kernel without lazy rescaling does)."""
    plt, sns = _sns()
    dists = [d for d in DIST_ORDER if d in set(t.dist) and t[t.dist == d].seqlen.nunique() > 1]
    thr = sorted(set(t.threshold))
    pal = sns.color_palette("colorblind", len(thr)) if len(thr) <= 10 else sns.color_palette("viridis", len(thr))
    fig, axes = plt.subplots(1, max(1, len(dists)), figsize=(2.9 * max(1, len(dists)), 3.0), sharey=True,
                             squeeze=False)
    for ax, d in zip(axes[0], dists):
        for c, th in zip(pal, thr):
            g = t[(t.dist == d) & (t.threshold == th)].sort_values("seqlen")
            ax.plot(g.seqlen, g.done_per_row, marker="o", ms=3, color=c, label=f"{th:g}")
            ax.fill_between(g.seqlen, g.done_per_row_lo, g.done_per_row_hi, color=c, alpha=0.2, lw=0)
        ax.set_xscale("log", base=2)
        # symlog: zero rescales (Gaussian rows at threshold 8) stay on the plot at 0
        ax.set_yscale("symlog", linthresh=1e-2)
        ax.set_title(d)
        ax.set_xlabel("sequence length")
    axes[0][0].set_ylabel("rescales done per row")
    axes[0][-1].legend(title="threshold", fontsize=7, title_fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return _save(fig, plt, path)


def plot_lag(t, path) -> Path:
    """Stale-max lag (99th percentile over (row, block) steps, and maximum) vs threshold per distribution, at the
    longest sequence length of each distribution."""
    plt, sns = _sns()
    dists = [d for d in DIST_ORDER if d in set(t.dist)]
    fig, ax = plt.subplots(figsize=(5.2, 3.2))
    pal = sns.color_palette("colorblind", len(dists))
    for c, d in zip(pal, dists):
        g = t[(t.dist == d) & (t.seqlen == t[t.dist == d].seqlen.max())].sort_values("threshold")
        ax.plot(g.threshold, g.lag_q99, marker="o", ms=3, color=c, label=f"{d} ({g.seqlen.iloc[0]})")
        ax.plot(g.threshold, g.lag_max, ls="--", lw=0.8, color=c)
    lim = float(t.threshold.max())
    ax.plot([0, lim], [0, lim], color="grey", lw=0.8, ls=":")
    ax.set_xlabel("rescale_threshold")
    ax.set_ylabel("stale-max lag, log2 units\n(solid: q99 of steps, dashed: max)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, plt, path)


def plot_error_budget(df, path) -> Path:
    """Error-budget study: rel. L2 error over the floor (fp64 rounded once) per knob with 95 % CIs, one colour
    per distribution."""
    plt, sns = _sns()
    # one (mode, seqlen) per figure: the statistical block when present (it has every knob)
    mode = "statistical" if (df["mode"] == "statistical").any() else df["mode"].iloc[0]
    df = df[df["mode"] == mode]
    df = df[df.seqlen == df.seqlen.max()]
    t = ci_table(df, ["knob", "dist"], ["rel_l2_over_floor", "lse_max_abs"])
    knobs = sorted(set(df.knob), key=lambda k: (k != "default", k))
    dists = [d for d in DIST_ORDER if d in set(t.dist)]
    fig, axes = plt.subplots(1, 2, figsize=(11, 0.35 * len(knobs) + 1.6), sharey=True)
    pal = sns.color_palette("colorblind", len(dists))
    off = np.linspace(-0.25, 0.25, len(dists)) if len(dists) > 1 else [0.0]
    for ax, m, label in ((axes[0], "rel_l2_over_floor", "rel. L2 error / floor (fp64 rounded once)"),
                         (axes[1], "lse_max_abs", "max |LSE - LSE_fp64|")):
        for c, o, d in zip(pal, off, dists):
            g = t[t.dist == d].set_index("knob").reindex(knobs)
            y = np.arange(len(knobs)) + o
            lo = (g[m] - g[f"{m}_lo"]).fillna(0).clip(lower=0)
            hi = (g[f"{m}_hi"] - g[m]).fillna(0).clip(lower=0)
            ax.errorbar(g[m], y, xerr=[lo, hi], fmt="o", ms=4, color=c, label=d, capsize=2)
        ax.set_xlabel(label)
    axes[1].set_xscale("log")
    axes[0].set_yticks(range(len(knobs)), knobs)
    axes[0].invert_yaxis()
    axes[0].legend(fontsize=7)
    fig.suptitle(f"FA4 SM100 forward, one knob changed ({mode} mode, {int(df.seqlen.iloc[0])} tokens), "
                 "95 % CI over seeds", fontsize=9)
    fig.tight_layout()
    return _save(fig, plt, path)


def _save(fig, plt, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


@dataclass
class Summary:
    """Markdown text, the figure files written and the CI table (DataFrame)."""
    markdown: str
    figures: list = field(default_factory=list)
    table: object = None


def summarize(out, *, fig_dir=None, prefix: str = "study") -> Summary:
    """Summarise a result store (skip_rate or error_budget rows); figures into ``fig_dir`` when given.

    Each task counts once (the store's reads deduplicate by key), and rows of one group that are different
    configurations are refused, not pooled as seeds (:func:`check_seed_pooling`).

    Examples
    --------
    >>> import tempfile
    >>> from fa4num.study import run_grid, parse_grid
    >>> d = tempfile.mkdtemp()
    >>> g = parse_grid({"study": "skip_rate", "fixed": {"heads": 1, "head_dim": 64, "device": "cpu", "seqlen": 512},
    ...                 "axes": [{"dist": ["sink"], "seed": [0, 1], "threshold": [0, 8]}]})
    >>> _ = run_grid(g, d, scheduler="none", progress=False)
    >>> "| sink | 512 | 8 | 2 |" in summarize(d).markdown
    True
    """
    from .store import read_store
    df = read_store(out)
    if df.empty:
        return Summary(f"(no results in {out})")
    study = df.study.iloc[0]
    figs = []
    if study == "skip_rate":
        check_seed_pooling(df, ["dist", "seqlen", "threshold"])
        t = skip_table(df)
        md = skip_markdown(t, thresholds=sorted(set(t.threshold) & {0, 4, 8, 16}) or sorted(set(t.threshold)))
        if fig_dir is not None:
            figs.append(plot_skip_vs_threshold(t, Path(fig_dir) / f"{prefix}_skip_vs_threshold.png"))
            if t.seqlen.nunique() > 1:
                figs.append(plot_done_vs_seqlen(t, Path(fig_dir) / f"{prefix}_done_vs_seqlen.png"))
            figs.append(plot_lag(t, Path(fig_dir) / f"{prefix}_lag.png"))
        return Summary(md, figs, t)
    if study == "error_budget":
        check_seed_pooling(df, ["knob", "dist", "seqlen", "mode"])
        t = ci_table(df, ["knob", "dist", "seqlen", "mode"], ["rel_l2", "rel_l2_over_floor", "lse_max_abs"])
        lines = ["| knob | dist | seqlen | mode | seeds | rel. L2 [95 % CI] | / floor | LSE max abs |",
                 "|---|---|---|---|---|---|---|---|"]
        for r in t.itertuples():
            lines.append(f"| {r.knob} | {r.dist} | {r.seqlen} | {r.mode} | {r.n} | "
                         f"{_fmt_ci(r.rel_l2, r.rel_l2_lo, r.rel_l2_hi, pct=False)} | {r.rel_l2_over_floor:.4f} | "
                         f"{r.lse_max_abs:.2e} |")
        if fig_dir is not None:
            figs.append(plot_error_budget(df, Path(fig_dir) / f"{prefix}_error_budget.png"))
        return Summary("\n".join(lines), figs, t)
    return Summary(f"(no summary for study {study!r}; {len(df)} rows)")
