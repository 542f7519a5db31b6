"""A reproducibility hazard of FA4's SM100 path: at head dim 256 a decode row's bits depend on the batch size.

    python experiments/paper_hd256_hazard.py     # a minute on 2 cores -> experiments/results/paper_hd256_hazard.json

For decode (one query row) at 16 heads and head dim 256, the same logical sequence run at batch 1 and at batch 8
(fa4num.attention.same_bits over one store of sequences, so the shared batch entry has the same q, k, v): FA4
SM100 picks the 2-CTA kernel only when the grid is small (interface.py), and only that configuration's tuning
emulates exp2 in software, so the two calls round differently. Per seqlen_k: rows compared, rows with equal
bits, output elements that differ, and the decisions that differ with the planner's reasons. SM100 is emulated
from FA4's source (b36), never run on a Blackwell GPU.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SEQLENS_K = (128, 512, 2048)
BATCHES = (1, 8)
HEADS, HEAD_DIM = 16, 256


def main() -> int:
    from fa4num.attention import same_bits
    from fa4num.attention.compare import CallSpec, plan_call
    from fa4num.provenance import provenance
    rows = []
    for sk in SEQLENS_K:
        a, b = (CallSpec(batch=n, seqlen_q=1, seqlen_k=sk, heads=HEADS, head_dim=HEAD_DIM,
                         fa4={"kernel": "fa4-sm100"}) for n in BATCHES)
        r = same_bits(plan_call(a, store=[a, b]), plan_call(b, store=[a, b]), rows=[(0, 0)])
        rows.append({"seqlen_k": sk, "batches": list(BATCHES), "rows": r.rows, "rows_equal": r.rows_equal,
                     "predicted_equal": r.predicted_equal, "out_elements_differ": r.out_elements_differ,
                     "out_elements": r.out_elements,
                     "decisions": {k: [str(x) for x in v] for k, v in r.decisions.items()},
                     "emulated_columns": [len(x) for x in r.decisions.get("emulated_columns", ((), ()))],
                     "reasons": {k: str(v) for k, v in r.reasons.items()}})
        print(rows[-1], flush=True)
    out = {"provenance": provenance(kind="paper_hd256_hazard"), "kernel": "fa4-sm100", "heads": HEADS,
           "head_dim": HEAD_DIM, "seqlen_q": 1, "rows": rows}
    p = ROOT / "experiments" / "results" / "paper_hd256_hazard.json"
    p.write_text(json.dumps(out, indent=1) + "\n")
    print("wrote", p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
