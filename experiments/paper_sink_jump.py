"""What FA4's threshold sees at a planted sink: the jump of the running maximum at the sink's block, per row.

    python experiments/paper_sink_jump.py     # seconds -> experiments/results/paper_sink_jump.json

For the planted sinks of experiments/fa4_knobs.py (same inputs: shape, seed, Delta), the SM100 lazy-rescale
decision is replayed over the per-(row, KV block) maxima of S (fa4num.study.skip). Per Delta: the jump at the
sink's block (the block FA4 visits last) over the maximum of the blocks before it, in nats (median and
quartiles over rows), and the share of rows whose sink block forces a rescale at threshold 8. The threshold acts on
that jump (over the stored, possibly stale, maximum), not on Delta.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))


def main() -> int:
    import math

    import torch

    import fa4_knobs
    from fa4num.provenance import provenance
    from fa4num.study.skip import block_maxima, lazy_rescale_scan, scale_log2
    shape = (1, 512, 4, 128)
    scale = 1.0 / math.sqrt(shape[-1])
    sl2 = scale_log2(scale)
    rows = []
    for delta in fa4_knobs.SINK_DELTAS:
        q, k, _ = fa4_knobs.planted_sink(shape, delta, seed=0)
        qt = torch.from_numpy(np.asarray(q[0], np.float32))
        kt = torch.from_numpy(np.asarray(k[0], np.float32))
        bmax = block_maxima(qt, kt, device="cpu")                  # (heads, rows, blocks), key 0 in block 0
        bmax = bmax.reshape(-1, bmax.shape[-1])
        full = lazy_rescale_scan(bmax, scale_log2=sl2, rescale_threshold=8.0)
        before = lazy_rescale_scan(bmax[:, 1:], scale_log2=sl2, rescale_threshold=8.0)
        at_sink = (full.rescales_done - before.rescales_done).astype(np.int64)
        jump = ((bmax[:, 0] - bmax[:, 1:].max(dim=-1).values) * scale).numpy().astype(np.float64)
        rows.append({"delta_nats": delta, "rows": int(bmax.shape[0]),
                     "jump_nats_median": float(np.median(jump)),
                     "jump_nats_q25": float(np.quantile(jump, 0.25)), "jump_nats_q75": float(np.quantile(jump, 0.75)),
                     "rescale_at_sink_share": float((at_sink > 0).mean())})
        print(rows[-1])
    out = {"provenance": provenance(kind="paper_sink_jump"), "shape": list(shape), "seed": 0,
           "threshold": 8.0, "threshold_nats": 8.0 * math.log(2), "rows": rows}
    p = ROOT / "experiments" / "results" / "paper_sink_jump.json"
    p.write_text(json.dumps(out, indent=1) + "\n")
    print("wrote", p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
