"""fa4num.attention.forward(kernel="fa4-sm90") against the real FA4 kernel's bits captured on an H200
(fa4num/data/golden/fa4_sm90_h200.npz, written by experiments/gpu/fa4_golden_sm90.py from a run of
experiments/gpu/fa4_capture_sm90.py; provenance inside the file). Every output element and every LSE must match."""
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from fa4num.attention import forward, inputs
from fa4num.attention.golden import check_case, input_digest, load

_Z, _META = load()
CASES = {c["spec"]["name"]: c for c in _META["cases"]}


def test_golden_file_has_provenance():
    cap = _META["capture"]
    assert cap["gpu"] == "NVIDIA H200" and cap["packages"]["flash-attn-4"]
    assert len(CASES) >= 20


@pytest.mark.parametrize("name", sorted(CASES))
def test_fa4_sm90_matches_h200_bits(name):
    c = check_case(CASES[name], _Z)
    assert c.inputs_match, "the seeded inputs differ from the ones the GPU saw"
    bad, bad_lse = c.out_mismatches, c.lse_mismatches
    assert (bad, bad_lse) == (0, 0), f"{name}: {bad} output and {bad_lse} LSE mismatches"


_LARGE = json.loads((Path(__file__).parents[1] / "golden" / "attention" / "fa4_sm90_h200_large.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("case", _LARGE["cases"], ids=lambda c: c["spec"]["name"])
def test_fa4_sm90_matches_h200_digests_on_long_sequences(case):
    spec = inputs.CaseSpec(**case["spec"])
    q, k, v = inputs.make_inputs(spec)
    assert input_digest(q, k, v) == case["input_sha256"]
    res = forward(q, k, v, softmax_scale=spec.softmax_scale, causal=spec.causal, kernel="fa4-sm90")
    assert hashlib.sha256(np.ascontiguousarray(res.out).view(np.uint16).tobytes()).hexdigest() == case["out_sha256"]
    assert hashlib.sha256(res.lse.tobytes()).hexdigest() == case["lse_sha256"]
