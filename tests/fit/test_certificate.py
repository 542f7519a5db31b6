"""Certificates of method="exact" re-checked with no LP (fa4num.fit.verify_certificate, `fa4num fit --verify`):
valid ones pass, and each kind of tampering is caught with its reason."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fa4num.fit import fit, fit_exp2, verify_certificate, write_certificate

CASES = {
    "exp2-3": lambda: fit_exp2(3),
    "exp2-half-3": lambda: fit("2^x", [1, 2, 3], (-0.5, 0.5), fixed={0: 1.0}),
    "sin-odd": lambda: fit("sin(x)", [1, 3, 5], (-0.785, 0.785)),
    "tanh-2": lambda: fit("tanh(x)", [1, 3, 5, 7], (0.0, 2.0)),
    "cos-even-abs": lambda: fit("cos(pi*x/2)", [0, 2, 4, 6], (0.0, 1.0), error="absolute"),
    "rsqrt-bf16": lambda: fit("1/sqrt(x)", 2, (1.0, 4.0), coeff_format="bf16"),
}


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("certs")
    return {name: write_certificate(make(), d / f"{name}.json") for name, make in CASES.items()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_valid_certificate_verifies(name, certs):
    check = verify_certificate(certs[name])
    assert check.valid, check.reason
    assert check.nodes >= 1 and check.points >= 1


def _tampered(path, tmp_path, change):
    data = json.loads(path.read_text())
    change(data)
    out = tmp_path / "tampered.json"
    out.write_text(json.dumps(data))
    return verify_certificate(out)


def _first_node_with(data, key):
    return next(rec for rec in data["witness"]["nodes"].values() if key in rec)


def _worse_winner(data):
    data["coeffs"][1] = float.fromhex("0x1.60p-1")   # a different fp32 c1: a worse set


def _drop_node(data):
    nodes = data["witness"]["nodes"]
    del nodes[max(nodes, key=len)]


def _flip_side(data):
    rec = _first_node_with(data, "lo")
    rec["lo"]["rows"] = [[i, -s] for i, s in rec["lo"]["rows"]]


def _negative_multiplier(data):
    _first_node_with(data, "lo")["lo"]["lam"][0] = -1.0


def _larger_cut(data):
    data["witness"]["bound"] *= 4.0       # the region then holds sets the witness does not cover


def _smaller_cut(data):
    data["witness"]["bound"] = data["winner_upper"] * 0.5


def _other_function(data):
    data["function"] = "2^x + x^5"


def _coarser_lattice(data):
    data["witness"]["scale"][0] *= 2     # every other fp32 value of c1 would never be visited


def _non_unimodular(data):
    for row in data["witness"]["T"]:
        row[0] *= 2


def _grid_outside(data):
    data["witness"]["grid"][1] = 2.0     # a constraint at x = 2, outside [0, 1]


@pytest.mark.parametrize("change, reason", [
    (_worse_winner, "exceeds the region's cut"),
    (_drop_node, "no witness"),
    (_flip_side, "node"),
    (_negative_multiplier, "negative multiplier"),
    (_larger_cut, "misses numbers of the format"),   # the wider region reaches a finer binade of c3
    (_smaller_cut, "exceeds the region's cut"),
    (_other_function, "exceeds the region's cut"),
    (_coarser_lattice, "misses numbers of the format"),
    (_non_unimodular, "not unimodular"),
    (_grid_outside, "outside the interval"),
    (lambda d: d.update(schema="other"), "not a fa4num-fit-certificate/1 file"),
    (lambda d: d.pop("witness"), "malformed certificate"),
])
def test_tampered_certificate_fails_with_a_reason(change, reason, certs, tmp_path):
    check = _tampered(certs["exp2-3"], tmp_path, change)
    assert not check.valid
    assert reason in check.reason and check.reason


def test_unproven_fit_has_no_certificate(tmp_path):
    r = fit_exp2(3, method="remez")
    with pytest.raises(ValueError, match="^result: only a proven fit"):
        write_certificate(r, tmp_path / "c.json")


def test_cli_verify_exit_status(certs, tmp_path):
    ok = subprocess.run([sys.executable, "-m", "fa4num.cli", "fit", "--verify", str(certs["exp2-3"])],
                        capture_output=True, text=True)
    assert ok.returncode == 0 and "valid" in ok.stdout
    data = json.loads(certs["exp2-3"].read_text())
    _worse_winner(data)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    res = subprocess.run([sys.executable, "-m", "fa4num.cli", "fit", "--verify", str(bad)],
                         capture_output=True, text=True)
    assert res.returncode == 1 and "NOT valid" in res.stdout and "exceeds the region's cut" in res.stdout
