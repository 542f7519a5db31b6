"""Launch-shape probe of the GPU twin on the H200: kernel time at (1, 32768, 16, 128) causal bf16 for a few
num_warps / num_stages, SM90 and SM100 numerics (CUDA events, median of 5). Speed only; the bits do not depend
on the launch shape (twin_validate.py checks them).

    python experiments/gpu/twin_probe.py OUT_DIR
"""
import json
import statistics
import sys
from pathlib import Path

import torch

from fa4num.attention import twin


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(1, 32768, 16, 128, generator=g, device="cuda").to(torch.bfloat16) for _ in range(3))
    rows = []
    for kernel in ("fa4-sm90", "fa4-sm100"):
        for nw, ns in ((8, 1), (4, 1), (8, 2), (16, 1)):
            try:
                twin.forward(q, k, v, causal=True, kernel=kernel, num_warps=nw, num_stages=ns)
                ts = []
                for _ in range(5):
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    a.record()
                    twin.forward(q, k, v, causal=True, kernel=kernel, num_warps=nw, num_stages=ns)
                    b.record()
                    torch.cuda.synchronize()
                    ts.append(a.elapsed_time(b))
                row = dict(kernel=kernel, num_warps=nw, num_stages=ns, ms=round(statistics.median(ts), 3))
            except Exception as e:  # a launch shape that does not compile is reported, not fatal
                row = dict(kernel=kernel, num_warps=nw, num_stages=ns, error=f"{type(e).__name__}: {str(e)[:200]}")
            rows.append(row)
            print(json.dumps(row), flush=True)
    (out / "twin_probe.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
