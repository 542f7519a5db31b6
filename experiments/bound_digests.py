"""SHA-256 of every array ``attention_error_bound`` returns (out, lse, out_probabilistic, out_exact, lse_exact) on
the quick emulator corpus of experiments/bounds_validation.py, with GQA, windows, softcap and sinks added: the
bits a speed-up of the bound must keep (tests/bounds/test_bound_digests.py recomputes and compares them).

    python experiments/bound_digests.py [--out tests/golden/bounds/attention_bound_digests.json]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))

from bounds_validation import FAMILIES, configs, make_inputs  # noqa: E402

from fa4num.bounds import attention_error_bound  # noqa: E402

ARRAYS = ("out", "lse", "out_probabilistic", "out_exact", "lse_exact")
DEFAULT = ROOT / "tests/golden/bounds/attention_bound_digests.json"
# every case asks for the probabilistic variant too (out_probabilistic is pinned with the rest)
DELTA = 1e-6


def cases():
    """(name, q, k, v, kwargs): the quick corpus (families x configs at head_dim 64) plus feature cases."""
    for fam in ("gaussian", "sink", "rising"):
        assert fam in FAMILIES
        for kernel, dt, opts in configs(True):
            q, k, v = make_inputs(fam, seqlen_q=96, seqlen_k=300, heads=1, head_dim=64, dtype=dt, seed=3)
            yield (f"{fam}_{kernel}_{dt}_{opts.get('rescale_threshold', '')}", q, k, v,
                   dict(kernel=kernel, delta=DELTA, **opts))
    rng = np.random.default_rng(5)
    q, k, v = make_inputs("gaussian", seqlen_q=80, seqlen_k=260, heads=4, head_dim=64, dtype="bfloat16", seed=9)
    k, v = k[:, :, :2], v[:, :, :2]
    for kernel in ("fa4-sm90", "fa4-sm100"):
        yield f"gqa_causal_{kernel}", q, k, v, dict(kernel=kernel, causal=True, delta=DELTA)
        yield f"window_softcap_{kernel}", q, k, v, dict(kernel=kernel, window_size=(40, 8), softcap=5.0, delta=DELTA)
        yield f"sink_{kernel}", q, k, v, dict(kernel=kernel, learnable_sink=rng.standard_normal(4).astype(np.float32),
                                              delta=DELTA)


def platform() -> str:
    """CPU model and BLAS core: float64 BLAS results (and so the bits) may differ on another machine."""
    import numpy as np
    info = Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []

    def field(key):
        return next((ln.split(":", 1)[1].strip() for ln in info if ln.split(":", 1)[0].strip() == key), "?")
    # the model name alone ("AMD EPYC") does not tell the microarchitecture, whose BLAS kernels round differently
    cpu = f"{field('model name')} family {field('cpu family')} model {field('model')}"
    blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    return f"{cpu} | numpy {np.__version__} | {blas.get('name')} {blas.get('version')}"


def digests() -> dict:
    out = {"_platform": platform()}
    for name, q, k, v, kw in cases():
        b = attention_error_bound(q, k, v, **kw)
        out[name] = {a: hashlib.sha256(np.ascontiguousarray(getattr(b, a)).tobytes()).hexdigest() for a in ARRAYS}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(DEFAULT))
    args = ap.parse_args(argv)
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(digests(), indent=1, sort_keys=True) + "\n")
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
