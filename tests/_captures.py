"""What the tests of the H200 captures share: the capture scripts of experiments/gpu/ as modules (their case lists
and input generators are the tests' too), and the bit-for-bit check of one backward result against a record of
fa4_bwd_preprocess.py (every bit of dq, dk, dv through their SHA-256, and 256 sampled elements named when a digest
differs; dsink in full)."""
from __future__ import annotations

import hashlib
import importlib.util
import pathlib
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def load_experiment(name: str):
    """experiments/gpu/NAME.py as a module, registered under NAME (its dataclasses resolve their module)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "experiments" / "gpu" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def capture_script():
    return load_experiment("fa4_bwd_preprocess")


def assert_grads_match(z, name: str, rec: dict, g, *, has_sink: bool) -> None:
    for arr in ("dq", "dk", "dv"):
        bits = np.ascontiguousarray(getattr(g, arr)).view(np.uint16)
        if hashlib.sha256(bits.tobytes()).hexdigest() != rec["digests"][arr]:
            idx, want = z[f"{name}.{arr}_sample_idx"], z[f"{name}.{arr}_sample_bits"]
            bad = int((bits.reshape(-1)[idx] != want).sum())
            pytest.fail(f"{name}.{arr}: digest differs, {bad}/{idx.size} sampled elements differ")
    if has_sink:
        want = z[f"{name}.dsink"]
        assert np.array_equal(np.asarray(g.dsink, np.float32).view(np.uint32), want.view(np.uint32)), \
            (name, g.dsink, want)
