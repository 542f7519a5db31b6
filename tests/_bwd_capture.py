"""What the tests of the H200 backward captures share (experiments/gpu/fa4_bwd_preprocess.py writes them): the
capture script as a module, and the bit-for-bit check of one backward result against a captured record (every
bit of dq, dk, dv through their SHA-256, and 256 sampled elements named when a digest differs; dsink in full)."""
from __future__ import annotations

import hashlib
import importlib.util
import pathlib

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def capture_script():
    spec = importlib.util.spec_from_file_location("fa4_bwd_preprocess", ROOT / "experiments/gpu/fa4_bwd_preprocess.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


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
