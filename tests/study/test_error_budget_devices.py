"""The error-budget study on the GPU twin: under Triton's interpreter the twin runs on the CPU on the very
inputs the CPU path draws, so its bit-exact results must give the CPU path's metrics (the fp64 references are
numpy's and torch's: equal to ~1e-15) and the same counters."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_SCRIPT = r"""
import json, os, sys
os.environ["TRITON_INTERPRET"] = "1"
from fa4num.study.studies import error_budget
out = {}
for kw in json.loads(sys.argv[1]):
    out[json.dumps(kw)] = {d: error_budget(device=d, **kw) for d in ("cpu", "cuda")}
print(json.dumps(out))
"""

CASES = [dict(knob="rescale_threshold=4", dist="rising", seqlen=160, heads=2, head_dim=32, q_mult=3.0),
         dict(knob="default", kernel="fa4-sm90", dist="llm", seqlen=140, heads=8, head_dim=32)]


@pytest.mark.slow
def test_twin_path_gives_the_cpu_paths_metrics():
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, json.dumps(CASES)], capture_output=True, text=True,
                          timeout=1500, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(got) == len(CASES)
    for name, runs in got.items():
        cpu, twin = runs["cpu"], runs["cuda"]
        assert twin["device_name"].startswith("cpu (Triton interpreter)"), name
        for n in ("rescales", "rescales_warp", "rescale_steps", "exp2_emulated_share", "causal"):
            assert cpu[n] == twin[n], (name, n, cpu[n], twin[n])
        for n in ("rel_l2", "max_abs", "floor_rel_l2", "floor_max_abs", "lse_max_abs"):
            assert twin[n] == pytest.approx(cpu[n], rel=1e-9, abs=1e-12), (name, n)
        assert cpu["rel_l2"] > 0


def test_unknown_device_and_kernel_are_refused():
    from fa4num.study.studies import error_budget
    with pytest.raises(ValueError, match="device must be"):
        error_budget(knob="default", seqlen=64, heads=1, head_dim=32, device="tpu")
    with pytest.raises(ValueError, match="kernel must be one of"):
        error_budget(knob="default", seqlen=64, heads=1, head_dim=32, kernel="fa5")
