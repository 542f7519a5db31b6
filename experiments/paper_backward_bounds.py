"""The backward bound on the real kernel's gradients: fa4num.bounds.attention_backward_error_bound against every
H200 backward golden (dev, holdout, sink, wide window; tests/golden/attention/fa4_sm90_bwd_*_h200.npz).

    python experiments/paper_backward_bounds.py    # ~1 min -> experiments/results/paper_backward_bounds.json

Per case (fa4num.bounds.validate_backward.backward_golden_checks): whether the emulated dq, dk, dv carry the GPU's
SHA-256 (so the errors are the real kernel's), the violations |grad - fp64 gradient| > bound per gradient, the
elements with an infinite bound, and the tightness (largest finite bound / largest observed error, the largest over
the gradients). tests/bounds/test_backward_bounds.py asserts the same per case; this file is what the paper reads.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    from fa4num.bounds.validate_backward import BACKWARD_GOLDEN_FILES, backward_golden_checks
    from fa4num.provenance import provenance
    golden = ROOT / "tests" / "golden" / "attention"
    rows = []
    for tag in sorted(BACKWARD_GOLDEN_FILES):
        for c in backward_golden_checks(golden, tags=[tag]):
            rows.append({"set": tag, **c.as_dict()})
            print(c.name, c.violations, f"tightness {c.tightness:.3f}", flush=True)
    out = {"provenance": provenance(kind="paper_backward_bounds"), "kernel": "fa4-sm90",
           "goldens": {t: BACKWARD_GOLDEN_FILES[t] for t in sorted(BACKWARD_GOLDEN_FILES)}, "cases": rows}
    p = ROOT / "experiments" / "results" / "paper_backward_bounds.json"
    p.write_text(json.dumps(out, indent=1) + "\n")
    print("wrote", p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
