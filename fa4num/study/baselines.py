"""FA4 next to the kernels people would use instead, on the same problems: table and figure across shapes.

Records are those of ``fa4num.gpu.attention.capture`` (``fa4num/study/data/baselines_h200*.json``: a list of
{"spec", "runs": {backend: {"median_ms", "metrics": {"rel_l2", "max_abs", ...}, "lse_max_abs_err"}},
"provenance"}), optionally with ``"floor"`` (fp64 rounded once to the dtype: the error no kernel can beat) and
``"reference"`` (where the fp64 reference was computed), as ``experiments/gpu/baselines_h200.py`` writes them.
The fp64 reference itself is :func:`attention_fp64_torch` (any torch device, float64).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

BACKEND_LABELS = {"fa4": "FA4", "cudnn": "cuDNN", "flash": "SDPA flash (FA2)", "efficient": "SDPA efficient",
                  "math": "SDPA math"}


def attention_fp64_torch(q, k, v, *, softmax_scale=None, causal: bool = False, chunk_rows: int | None = None):
    """fp64 attention on q, k, v's device, one (batch, head) at a time: (out (b, sq, h, d), lse (b, h, sq)).

    Same definition as ``fa4num.attention.reference.attention_fp64`` (bottom-right causal, GQA by head
    groups, rows without a visible key give out 0 and lse -inf), for sizes where numpy on a CPU is too slow.
    ``chunk_rows``: query rows per step (default: all), so that S takes chunk_rows x seqlen_k float64s (128k
    tokens need it); with ``causal`` a chunk reads only the keys its last row sees. The chunking changes at most
    the fp64 rounding of the GEMMs (their BLAS order), far below any error it measures.

    Examples
    --------
    >>> import torch
    >>> q = torch.zeros(1, 2, 1, 4); k = torch.zeros(1, 3, 1, 4); v = torch.arange(12.).reshape(1, 3, 1, 4)
    >>> out, lse = attention_fp64_torch(q, k, v)
    >>> out[0, 0, 0].tolist(), round(float(lse[0, 0, 0]), 6) == round(math.log(3), 6)
    ([4.0, 5.0, 6.0, 7.0], True)
    """
    import torch
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    if h % hk:
        raise ValueError(f"q heads ({h}) must be a multiple of k heads ({hk})")
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else float(softmax_scale)
    out = torch.zeros((b, sq, h, d), dtype=torch.float64, device=q.device)
    lse = torch.full((b, h, sq), -math.inf, dtype=torch.float64, device=q.device)
    step = sq if not chunk_rows else int(chunk_rows)
    for bi in range(b):
        for hi in range(h):
            kh, vh = k[bi, :, hi // (h // hk)].double(), v[bi, :, hi // (h // hk)].double()
            for r0 in range(0, sq, max(step, 1)):
                r1 = min(sq, r0 + step)
                # keys beyond the chunk's last diagonal are hidden from all its rows (causal)
                nk = max(0, min(sk, r1 + sk - sq)) if causal else sk
                s = (q[bi, r0:r1, hi].double() @ kh[:nk].T) * scale
                if causal:
                    hidden = (torch.arange(nk, device=q.device)[None, :]
                              > torch.arange(r0, r1, device=q.device)[:, None] + (sk - sq))
                    s = s.masked_fill(hidden, -math.inf)
                m = s.amax(dim=-1, keepdim=True) if nk else torch.full((r1 - r0, 1), -math.inf, dtype=s.dtype,
                                                                         device=q.device)
                m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
                e = torch.exp(s - m)
                z = e.sum(dim=-1)
                ok = z > 0
                out[bi, r0:r1, hi] = torch.where(ok[:, None], (e @ vh[:nk]) / torch.where(ok, z, 1.0)[:, None], 0.0)
                lse[bi, hi, r0:r1] = torch.where(ok, m[:, 0] + torch.log(torch.where(ok, z, 1.0)), -math.inf)
                del s, e
    return out, lse


def shape_label(spec: dict) -> str:
    """"1x4096x16x128 causal bf16" (GQA as heads/heads_kv, q_mult when not 1)."""
    heads = f"{spec['heads']}" if spec["heads_kv"] == spec["heads"] else f"{spec['heads']}/{spec['heads_kv']}"
    lbl = f"{spec['batch']}x{spec['seqlen_q']}x{heads}x{spec['head_dim']}"
    lbl += " causal" if spec["causal"] else ""
    lbl += " fp16" if spec.get("dtype") == "float16" else ""
    if spec.get("q_mult", 1.0) != 1.0:
        lbl += f" q*{spec['q_mult']:g}"
    return lbl


def load_baselines(paths=None):
    """All baseline records as a tidy DataFrame: one row per (shape, backend) with ``rel_l2``, ``max_abs``,
    ``lse_max_abs_err``, ``median_ms``, ``floor_rel_l2`` (NaN where the record has no floor), ``source``.
    ``paths``: files (default: the shipped fa4num/study/data/baselines_h200*.json)."""
    import pandas as pd
    if paths is None:
        from importlib.resources import files
        paths = sorted((p for p in (files(__package__) / "data").iterdir()
                        if p.name.startswith("baselines_h200") and p.name.endswith(".json")), key=lambda p: p.name)
    rows = []
    for p in paths:
        recs = json.loads(Path(p).read_text())
        for rec in recs if isinstance(recs, list) else recs.get("records", []):
            spec = rec["spec"]
            floor = (rec.get("floor") or {}).get("rel_l2", float("nan"))
            for backend, run in rec["runs"].items():
                if "error" in run:
                    continue
                m = run.get("metrics", {})
                rows.append({"shape": shape_label(spec), "seqlen": spec["seqlen_q"], "head_dim": spec["head_dim"],
                             "causal": spec["causal"], "dtype": spec.get("dtype", "bfloat16"),
                             "backend": BACKEND_LABELS.get(backend, backend), "rel_l2": m.get("rel_l2"),
                             "max_abs": m.get("max_abs"), "lse_max_abs_err": run.get("lse_max_abs_err"),
                             "median_ms": run.get("median_ms"), "floor_rel_l2": floor,
                             "reference": rec.get("reference", "numpy float64 on the CPU"),
                             "gpu": (rec.get("provenance", {}).get("gpu") or {}).get("name"),
                             "source": Path(p).name})
    df = pd.DataFrame(rows)
    if not df.empty:
        # a shape measured in two files: the later file wins
        df = df.drop_duplicates(["shape", "backend"], keep="last").reset_index(drop=True)
    return df


def baseline_table(df) -> str:
    """Markdown: one line per shape, rel. L2 error vs fp64 (and time in ms) per back end, and the floor."""
    if df.empty:
        return "(no baseline records)"
    backends = [b for b in BACKEND_LABELS.values() if b in set(df.backend)]
    head = "| shape | " + " | ".join(backends) + " | fp64 -> dtype floor |\n|---|" + "---|" * (len(backends) + 1)
    lines = [head]
    for shape, g in df.groupby("shape", sort=False):
        cells = []
        for b in backends:
            r = g[g.backend == b]
            cells.append(f"{r.rel_l2.iloc[0]:.3e} ({r.median_ms.iloc[0]:.2f} ms)" if len(r) else "–")
        fl = g.floor_rel_l2.iloc[0]
        lines.append(f"| {shape} | " + " | ".join(cells) + f" | {fl:.3e} |" if fl == fl else
                     f"| {shape} | " + " | ".join(cells) + " | – |")
    return "\n".join(lines)


def plot_baselines(df, path) -> Path:
    """Two panels across shapes: rel. L2 error vs fp64 and max |LSE error| per back end (points, log scale,
    colour-blind palette, shapes ordered by sequence length)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    import seaborn as sns
    sns.set_theme(style="whitegrid", context="paper", palette="colorblind")
    order = (df.sort_values(["seqlen", "head_dim", "causal"])["shape"].drop_duplicates().tolist())
    hue_order = [b for b in BACKEND_LABELS.values() if b in set(df.backend)]
    fig, axes = plt.subplots(1, 2, figsize=(12, 0.42 * len(order) + 1.6), sharey=True)
    for ax, col, label in ((axes[0], "rel_l2", "relative L2 error of out vs fp64"),
                           (axes[1], "lse_max_abs_err", "max |LSE - LSE_fp64|")):
        sns.stripplot(data=df, x=col, y="shape", hue="backend", order=order, hue_order=hue_order, dodge=True,
                      jitter=False, size=6, marker="o", ax=ax, legend=ax is axes[0])
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())   # minor labels overlap on short ranges
        ax.set_xlabel(label)
        ax.set_ylabel("")
    fl = df.drop_duplicates("shape").set_index("shape").floor_rel_l2
    if fl.notna().any():
        ys = [order.index(s) for s in fl.index if fl[s] == fl[s]]
        axes[0].scatter([fl[s] for s in fl.index if fl[s] == fl[s]], ys, marker="|", s=220, color="black",
                        label="fp64 rounded once (floor)", zorder=3)
    axes[0].legend(loc="lower left", bbox_to_anchor=(0, 1.01), ncol=3, fontsize=8, frameon=False)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path
