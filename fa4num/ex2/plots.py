"""Figures of sweep results (seaborn on matplotlib's Agg backend; nothing is shown on screen)."""
from __future__ import annotations

import math

import numpy as np

from .engine import SweepResult


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns
    sns.set_theme(style="whitegrid", context="paper")
    return plt, sns


def plot_error_vs_x(result: SweepResult, path, *, title: str | None = None) -> None:
    """Max and mean ulp error and bf16 mismatch share per bin of x (finite domains), or the max ulp error per
    binade of x (sweeps over everything)."""
    plt, sns = _pyplot()
    title = title or f"{result.implementation}: {result.domain}"
    if result.xbins is not None:
        xb = result.xbins
        edges = np.asarray(xb["edges"])
        mid = 0.5 * (edges[1:] + edges[:-1])
        cnt = np.asarray(xb["count"])
        keep = cnt > 0
        fig, axes = plt.subplots(2, 1, figsize=(8, 6), sharex=True, height_ratios=(2, 1))
        sns.lineplot(x=mid[keep], y=np.asarray(xb["max_ulp"])[keep], ax=axes[0], label="max", lw=1)
        sns.lineplot(x=mid[keep], y=np.asarray(xb["mean_ulp"])[keep], ax=axes[0], label="mean", lw=1)
        axes[0].set_ylabel("error vs correctly rounded (fp32 ulp)")
        share = np.asarray(xb["bf16_mismatch"])[keep] / cnt[keep]
        sns.lineplot(x=mid[keep], y=100 * share, ax=axes[1], color="C3", lw=1)
        axes[1].set_ylabel("bf16 mismatch (%)")
        axes[1].set_xlabel("x")
        axes[0].set_title(title, fontsize=9)
    else:
        rows = [b for b in result.binades if b["max_ulp"] >= 0 and b["exponent_field"] < 255]
        fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
        for ax, sign in zip(axes, "-+"):
            part = [b for b in rows if b["sign"] == sign]
            # exponent field 0 holds the subnormals and zero: drawn at -127 (their binades lie below 2^-126)
            e = [max(b["exponent_field"], 0) - 127 for b in part]
            sns.scatterplot(x=e, y=[max(b["max_ulp"], 0.5) for b in part], ax=ax, s=12)
            ax.set_yscale("log")
            ax.set_xlabel(f"floor(log2 |x|) for x {'<' if sign == '-' else '>'} 0")
        axes[0].set_ylabel("max error per binade (fp32 ulp; 0 drawn at 0.5)")
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def plot_ulp_histogram(result: SweepResult, path, *, title: str | None = None) -> None:
    """Share of inputs per ulp error (linear counts below 4096 ulp, then per power of two)."""
    plt, sns = _pyplot()
    lin = np.asarray(result.ulp_hist_linear, dtype=float)
    total = max(result.count, 1)
    fig, ax = plt.subplots(figsize=(8, 3.5))
    if lin.size > 64:   # group into 64 equal-width bins so the bars stay readable
        width = math.ceil(lin.size / 64)
        padded = np.pad(lin, (0, (-lin.size) % width))
        grouped = padded.reshape(-1, width).sum(axis=1)
        ax.bar(np.arange(grouped.size) * width, 100 * grouped / total, width=width, align="edge")
        ax.set_xlabel(f"error (fp32 ulp, bins of {width})")
    else:
        ax.bar(np.arange(lin.size), 100 * lin / total)
        ax.set_xlabel("error (fp32 ulp)")
    ax.set_ylabel("share of inputs (%)")
    big = sum(result.ulp_hist_log2.values())
    note = f"; {100 * big / total:.3g}% of inputs err by >= 4096 ulp" if big else ""
    ax.set_title((title or f"{result.implementation}: {result.domain}") + note, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
