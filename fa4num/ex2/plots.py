"""Figures of sweep results (seaborn on matplotlib's Agg backend; nothing is shown on screen).

Every figure has a title saying what was swept and where, marks FA4's softmax domain (the exp2 inputs the
softmax produces: x in [-126, 0]), uses log or symlog axes where values span decades (so that errors of 0-2 ulp
stay visible next to millions), and never draws two series on top of each other.
"""
from __future__ import annotations

import math

import numpy as np

from .engine import SweepResult

SOFTMAX_DOMAIN = (-126.0, 0.0)   # x = S*scale_log2 - max <= 0, above FA4's -127 clamp: 2^x is a normal fp32
_SOFTMAX_LABEL = "softmax domain [-126, 0]"


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns
    sns.set_theme(style="whitegrid", context="paper", palette="colorblind")
    return plt, sns


def _coarse(values, counts, nbins: int):
    """Sum ``values`` and ``counts`` into at most ``nbins`` groups of consecutive bins (for shares: a share per
    fine bin of a few dozen inputs takes only a few values and draws a comb)."""
    values, counts = np.asarray(values, float), np.asarray(counts, float)
    width = max(1, math.ceil(values.size / nbins))
    pad = (-values.size) % width
    v = np.pad(values, (0, pad)).reshape(-1, width).sum(axis=1)
    c = np.pad(counts, (0, pad)).reshape(-1, width).sum(axis=1)
    return v, c, width


def _mark_softmax(ax, lo: float, hi: float) -> None:
    """Shade the part of [lo, hi] outside the softmax domain (and say so), if any."""
    a, b = SOFTMAX_DOMAIN
    for s0, s1 in ((lo, min(hi, a)), (max(lo, b), hi)):
        if s1 > s0:
            ax.axvspan(s0, s1, color="0.85", zorder=0, label="outside the softmax domain")


def plot_error_vs_x(result: SweepResult, path, *, title: str | None = None) -> None:
    """Max ulp error per bin of x, mean ulp error where it differs visibly from the max, and the bf16 mismatch
    share on coarser bins (finite domains); or the max ulp error per binade of x, softmax domain marked
    (sweeps over everything)."""
    plt, sns = _pyplot()
    title = title or f"{result.implementation}: {result.domain}"
    if result.xbins is not None:
        xb = result.xbins
        edges = np.asarray(xb["edges"])
        mid = 0.5 * (edges[1:] + edges[:-1])
        cnt = np.asarray(xb["count"])
        keep = cnt > 0
        mx = np.asarray(xb["max_ulp"], float)[keep]
        mean = np.asarray(xb["mean_ulp"], float)[keep]
        fig, axes = plt.subplots(3, 1, figsize=(8, 7.5), sharex=True, height_ratios=(2, 1.2, 1.2))
        symlog = mx.max(initial=0) > 64 * max(1.0, np.median(mx) if mx.size else 1.0)
        axes[0].plot(mid[keep], mx, lw=1, color="C0")
        axes[0].set_ylabel("max error in bin\n(fp32 ulp)")
        axes[1].plot(mid[keep], mx - mean, lw=1, color="C1")
        axes[1].set_ylabel("max - mean\n(fp32 ulp)")
        for ax in axes[:2]:
            if symlog:   # a few huge outliers would flatten the rest
                ax.set_yscale("symlog", linthresh=1, linscale=0.6)
        v, c, width = _coarse(xb["bf16_mismatch"], cnt, 64)
        w = (edges[-1] - edges[0]) / cnt.size * width
        left = edges[0] + w * np.arange(v.size)
        share = np.divide(100 * v, c, out=np.zeros_like(v), where=c > 0)
        axes[2].bar(left, share, width=w, align="edge", color="C2")
        axes[2].set_ylabel(f"bf16 mismatch (%)\n{v.size} bins")
        axes[2].set_xlabel("x")
        for ax in axes:
            _mark_softmax(ax, edges[0], edges[-1])
        if axes[0].get_legend_handles_labels()[0]:
            axes[0].legend(loc="best", fontsize=8)
        axes[0].set_title(title, fontsize=9)
    else:
        rows = [b for b in result.binades if b["max_ulp"] >= 0 and b["exponent_field"] < 255]
        fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), sharey=True)
        for ax, sign in zip(axes, "-+"):
            part = [b for b in rows if b["sign"] == sign]
            # exponent field 0 holds the subnormals and zero: drawn at -127 (their binades lie below 2^-126)
            e = np.array([max(b["exponent_field"], 0) - 127 for b in part])
            y = np.array([max(b["max_ulp"], 0.5) for b in part])
            # x < 0 with |x| < 2^6 lies in the softmax domain [-126, 0]; the binade [-128, -64) straddles -126
            inside = (e <= 5) if sign == "-" else np.zeros(e.size, bool)
            straddle = (e == 6) if sign == "-" else np.zeros(e.size, bool)
            outside = ~inside & ~straddle
            if sign == "-":
                ax.axvspan(-127.5, 5.5, color="C2", alpha=0.12, zorder=0, label="softmax domain")
            for sel, style in ((inside, dict(color="C0", marker="o", label="inside the softmax domain")),
                               (straddle, dict(color="0.4", marker="^", label="[-128, -64): straddles -126")),
                               (outside, dict(color="C3", marker="x", label="outside the softmax domain"))):
                if sel.any():
                    ax.scatter(e[sel], y[sel], s=14, **style)
            ax.set_yscale("log")
            ax.set_xlabel(f"floor(log2 |x|) for x {'<' if sign == '-' else '>'} 0")
            ax.set_title("x < 0" if sign == "-" else "x > 0 (outside the softmax domain)", fontsize=9)
            ax.legend(fontsize=7, loc="upper left")
        axes[0].set_ylabel("max error per binade (fp32 ulp; 0 drawn at 0.5)")
        fig.suptitle(f"{title}\n{headline(result)}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def in_softmax_domain(x) -> bool:
    """Whether an exp2 input x lies in FA4's softmax domain [-126, 0] (see SOFTMAX_DOMAIN)."""
    return x is not None and SOFTMAX_DOMAIN[0] <= x <= SOFTMAX_DOMAIN[1]


def headline(result: SweepResult) -> str:
    """The max error and where, saying whether that x is one the softmax can produce.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> headline(SimpleNamespace(max_ulp=4278190080, max_ulp_x=384.0))
    'max error 4278190080 ulp at x = 384.0 (outside the softmax domain [-126, 0])'
    """
    if result.max_ulp_x is None:
        return "no inputs"
    where = "inside" if in_softmax_domain(result.max_ulp_x) else "outside"
    return f"max error {result.max_ulp} ulp at x = {result.max_ulp_x!r} ({where} the softmax domain [-126, 0])"


def ulp_classes(result: SweepResult) -> tuple[list, np.ndarray]:
    """(labels, counts) of the ulp error in classes 0, 1, 2, 3, then [4, 8), [8, 16), ... (powers of two), from
    the sweep's linear and log2 histograms.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> ulp_classes(SimpleNamespace(ulp_hist_linear=[5, 3, 0, 0, 1, 0, 0, 0, 2], ulp_hist_log2={"2^13": 4}))
    (['0', '1', '2', '3', '4-7', '8-15', '2^13-2^14'], array([5, 3, 0, 0, 1, 2, 4]))
    """
    lin = np.asarray(result.ulp_hist_linear, np.int64)
    labels, counts = [], []
    for d in range(min(4, lin.size)):
        labels.append(str(d))
        counts.append(int(lin[d]))
    k = 2
    while (1 << k) < lin.size:
        labels.append(f"{1 << k}-{(1 << (k + 1)) - 1}")
        counts.append(int(lin[1 << k: 1 << (k + 1)].sum()))
        k += 1
    for key in sorted(result.ulp_hist_log2, key=lambda s: int(s.split("^")[1])):
        e = int(key.split("^")[1])
        labels.append(f"2^{e}-2^{e + 1}")
        counts.append(int(result.ulp_hist_log2[key]))
    return labels, np.asarray(counts, np.int64)


def plot_ulp_histogram(result: SweepResult, path, *, title: str | None = None) -> None:
    """Share of inputs per class of ulp error (0, 1, 2, 3, then powers of two) on a log axis: 0-2 ulp and
    errors of millions of ulp are both readable."""
    plt, sns = _pyplot()
    labels, counts = ulp_classes(result)
    total = max(result.count, 1)
    share = 100 * counts / total
    fig, ax = plt.subplots(figsize=(max(6.0, 0.42 * len(labels) + 2), 3.8))
    pos = np.arange(len(labels))
    ax.bar(pos, np.where(counts > 0, share, np.nan), color="C0")
    ax.set_yscale("log")
    ax.set_xticks(pos, labels, rotation=45 if len(labels) > 10 else 0, ha="right" if len(labels) > 10 else "center",
                  fontsize=7)
    ax.set_xlabel("error against the correctly rounded 2^x (fp32 ulp)")
    ax.set_ylabel("share of inputs (%, log)")
    nz = counts > 0
    if nz.any():
        ax.set_ylim(share[nz].min() / 3, 200)
    for p, s, c in zip(pos, share, counts):
        if c:
            ax.text(p, s * 1.15, f"{s:.2g}", ha="center", va="bottom", fontsize=6)
    ax.set_title(f"{title or result.implementation + ': ' + result.domain}\n{result.count:,} inputs; "
                 f"max error {result.max_ulp} ulp", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
