"""fa4num.polys: the one coefficient resolver (every syntax, every refusal), the registries it searches (--registry,
$FA4NUM_POLYS, the user registry) through several commands, nothing written inside the package, and the shipped
sets flagged optimal against the fitter."""
from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import numpy as np
import pytest

from fa4num import polys
from fa4num.cli import main
from fa4num.constants import POLY_EX2

FA4_3 = tuple(float(c) for c in POLY_EX2[3])


def _next_up(c: float) -> float:
    return struct.unpack("<f", struct.pack("<I", struct.unpack("<I", struct.pack("<f", c))[0] + 1))[0]


MINE = FA4_3[:3] + (_next_up(FA4_3[3]),)   # FA4's cubic, c3 one fp32 ulp up: a set no registry holds


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    """No user registry or $FA4NUM_POLYS from the machine running the tests; the user registry in tmp."""
    monkeypatch.delenv(polys.ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


def _user_set(folder: Path, name: str = "mine", coeffs=MINE) -> Path:
    return polys.write_entry(name, coeffs, source="test", metrics={}, provenance={}, registry=folder)


def _tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


# --- resolve: every syntax ---------------------------------------------------------------------------------------
def test_resolve_every_syntax_gives_the_same_set():
    bits = [struct.unpack("<I", struct.pack("<f", c))[0] for c in FA4_3]
    forms = ["fa4-deg3", "fa4-4.0.0b36-deg3", list(FA4_3), np.array(FA4_3, np.float32),
             tuple(np.float32(c) for c in FA4_3), ",".join(repr(c) for c in FA4_3),
             ",".join(f"0x{b:08x}" for b in bits), ", ".join(float.hex(c) for c in FA4_3),
             f"1, 0x{bits[1]:08X}, {FA4_3[2]!r}, {float.hex(FA4_3[3])}"]
    sets = [polys.resolve(f) for f in forms]
    assert all(s.coeffs == FA4_3 and s.bits == tuple(bits) for s in sets)
    assert {s.key for s in sets} == {"fp32-" + "-".join(f"{b:08x}" for b in bits)}
    assert sets[0].name == sets[1].name == "fa4-4.0.0b36-deg3" and sets[2].name is None
    assert polys.resolve(sets[0]) == sets[0] and polys.resolve(sets[0], degree=3).degree == 3
    assert sets[2].label == sets[2].key and sets[0].label == "fa4-4.0.0b36-deg3"


def test_resolve_takes_a_torch_tensor_like_an_array():
    # a tensor iterates as 0-d tensors: it was refused with "c0 must be a real number, got tensor(1.)"
    torch = pytest.importorskip("torch")
    assert polys.resolve(torch.tensor(FA4_3, dtype=torch.float32)).bits == polys.resolve("fa4-deg3").bits
    with pytest.raises(ValueError, match=r"c1 = 0\.1 is not exactly an fp32 number"):
        polys.resolve(torch.tensor([1.0, 0.1], dtype=torch.float64))
    with pytest.raises(TypeError, match=r"c0 must be a real number, got \[1\.0, 0\.5\]"):
        polys.resolve(np.float32([[1.0, 0.5]]))


@pytest.mark.parametrize("spec,exc,message", [
    ("1,0.1", ValueError, r"coeffs: c1 = 0\.1 is not exactly an fp32 number"),
    ([1.0, 1e-50], ValueError, "c1 = 1e-50 is not exactly an fp32 number"),
    ([1.0, float("nan")], ValueError, "c1 = nan is not exactly"),
    ("1,inf", ValueError, "c1 = inf is not exactly"),
    ([1.0, 1e40], ValueError, "not exactly an fp32 number"),
    ("0x7f800000,1", ValueError, "c0 = inf"),
    ("0x1ffffffff,1", ValueError, "coeffs: expected c0,c1,... as decimal numbers or 0x fp32 bit patterns"),
    ("1,zz", ValueError, "got 'zz' in '1,zz'"),
    ("1,", ValueError, "got '' in '1,'"),
    ("", ValueError, "coeffs: expected a set name"),
    ("1.5", ValueError, "at least 2 coefficients"),
    ([1.0], ValueError, "at least 2 coefficients"),
    ("no-such-set", ValueError, "coeffs: no coefficient set 'no-such-set' in the registries searched"),
    (3, TypeError, "coeffs: expected a set name, a text c0,c1,... or a sequence"),
    ([1.0, "0.5"], TypeError, "coeffs: c1 must be a real number"),
    ([1.0, True], TypeError, "c1 must be a real number"),
])
def test_resolve_refuses_by_name(spec, exc, message):
    with pytest.raises(exc, match=message):
        polys.resolve(spec)


def test_resolve_degree_and_poly_coeffs_agree():
    from fa4num.ex2 import poly_coeffs
    with pytest.raises(ValueError, match=r"degree: coeffs has 4 values \(degree 3\), got degree=5"):
        polys.resolve("fa4-deg3", degree=5)
    with pytest.raises(TypeError, match="degree: expected an integer"):
        polys.resolve("fa4-deg3", degree=3.0)
    # ex2's door is the resolver: same set, same refusals, as np.float32
    assert tuple(float(c) for c in poly_coeffs(3, coeffs="0x3f800000,0x3f31f519,0x3e6906a4,0x3d9df09d")) == FA4_3
    assert len(poly_coeffs(None, coeffs="fa4num-minimax-deg5")) == 6
    with pytest.raises(ValueError, match="coeffs: c1 = 0.1 is not exactly"):
        poly_coeffs(1, coeffs=(1.0, 0.1))
    with pytest.raises(ValueError, match="degree: coeffs has 4 values"):
        poly_coeffs(2, coeffs="fa4-deg3")


def test_names_and_caches_are_keyed_by_bits():
    from fa4num.bounds._observed import observed_key
    from fa4num.ex2 import fa4_implementation
    # one set, one cache record, whatever door it came through
    assert observed_key(degree=3) == observed_key(coeffs="fa4-deg3") == observed_key(coeffs=list(FA4_3)) \
        == f"fa4-packed-{polys.resolve(FA4_3).key}"
    assert observed_key(coeffs=MINE) != observed_key(degree=3)
    assert fa4_implementation(coeffs=MINE).name == f"fa4-packed-{polys.resolve(MINE).key}"
    assert fa4_implementation(coeffs="fa4-deg3").name == "fa4-4.0.0b36-deg3-packed"


# --- the shipped sets ----------------------------------------------------------------------------------------------
def test_shipped_sets_one_file_each_with_provenance():
    files = sorted(polys.shipped_dir().glob("*.json"))
    assert files and polys.shipped_dir().name in ("polys", "polys_data")
    for path in files:
        entry = json.loads(path.read_text())
        assert entry["schema"] == polys.SET_SCHEMA and entry["name"] == path.stem
        assert entry["provenance"]["code_revision"] and entry["source"]
        assert polys.resolve(path.stem).bits == tuple(int(b, 16) for b in entry["coeffs_fp32_bits"])
    # FA4's table is keyed by release, its old names are aliases; each equals fa4num.constants' POLY_EX2
    for d, cs in POLY_EX2.items():
        entry = polys.poly_entry(f"fa4-deg{d}")
        assert entry["name"] == f"fa4-{entry['release']}-deg{d}" and f"fa4-deg{d}" in entry["aliases"]
        assert polys.resolve(f"fa4-deg{d}").coeffs == tuple(float(c) for c in cs)


def test_registry_entries_flagged_optimal_are_the_fitters_optimum_bit_for_bit():
    """Every shipped set whose fit is proven optimal is what fit_exp2 returns today, bit for bit (computed here)."""
    from fa4num.fit import fit_exp2
    flagged = {name: e for name, e in polys.read()["entries"].items()
               if (e.get("fit") or {}).get("exact", {}).get("proven")}
    assert {f"fa4num-minimax-deg{n}" for n in range(1, 6)} <= set(flagged)
    for name, e in flagged.items():
        fit = e["fit"]
        r = fit_exp2(e["degree"], interval=tuple(e["interval"]), error=fit["error"],
                     coeff_format=e["coeff_format"], objective=fit["objective"],
                     fixed={int(k): v for k, v in fit["fixed"].items()})
        assert r.exact is not None and r.exact.proven, name
        assert polys.resolve(r.coeffs).bits == polys.resolve(name).bits, name


# --- user registries, through the CLI of several commands ----------------------------------------------------------
def test_user_registry_by_option_and_environment(tmp_path, monkeypatch, capsys):
    reg = tmp_path / "reg"
    _user_set(reg)
    with pytest.raises(ValueError, match="no coefficient set 'mine'"):
        polys.resolve("mine")
    assert polys.resolve("mine", registry=reg).coeffs == MINE
    _user_set(tmp_path / "other.json", "unrelated", (1.0, 0.5))
    assert polys.resolve("mine", registry=[tmp_path / "other.json", reg]).coeffs == MINE
    monkeypatch.setenv(polys.ENV_VAR, f"{tmp_path / 'nowhere'}:{reg}")
    with pytest.raises(ValueError, match="FA4NUM_POLYS: no such registry: .*nowhere"):
        polys.resolve("mine")   # a path in $FA4NUM_POLYS that does not exist is an error, not skipped
    monkeypatch.setenv(polys.ENV_VAR, str(reg))
    assert polys.resolve("mine").coeffs == MINE

    assert main(["polys", "show", "mine"]) == 0 and json.loads(capsys.readouterr().out)["name"] == "mine"
    assert main(["polys", "export", "mine", "--as", "ptx"]) == 0
    assert [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("0f")] == \
        [f"0f{b:08X}" for b in polys.resolve(MINE).bits]
    assert main(["polys", "list"]) == 0 and "\nmine " in capsys.readouterr().out
    assert main(["bounds", "exp2", "--coeffs", "mine"]) == 0
    assert "degree 3, mine, packed form" in capsys.readouterr().out
    monkeypatch.delenv(polys.ENV_VAR)
    assert main(["bounds", "exp2", "--coeffs", "mine", "--registry", str(reg)]) == 0
    out = tmp_path / "sw"
    assert main(["sweep", "--range", "-1", "-0.999", "--coeffs", "mine", "--registry", str(reg), "--out", str(out),
                 "--no-progress"]) == 0
    assert json.loads((out / "mine-packed.json").read_text())["params"]["coeffs"] == list(MINE)
    capsys.readouterr()
    assert main(["attention", "run", "--shape", "1,16,1,64", "--kernel", "fa4-sm100", "--opt", "coeffs=mine",
                 "--registry", str(reg), "--json", str(tmp_path / "a.json")]) == 0
    assert json.loads((tmp_path / "a.json").read_text())["options"]["coeffs"] == "mine"


def test_two_registries_disagreeing_on_a_name_is_an_error(tmp_path):
    _user_set(tmp_path / "a")
    _user_set(tmp_path / "b", coeffs=FA4_3)
    with pytest.raises(ValueError, match=r"registry: 'mine' names different coefficients in .*a and .*b"):
        polys.resolve("mine", registry=[tmp_path / "a", tmp_path / "b"])
    _user_set(tmp_path / "c", "fa4-deg3", coeffs=MINE)   # a user set may not redefine a shipped name either
    with pytest.raises(ValueError, match="'fa4-deg3' names different coefficients"):
        polys.resolve("fa4-deg3", registry=tmp_path / "c")


@pytest.mark.parametrize("argv,message", [
    (["sweep", "--coeffs", "1,0.1"], "--coeffs: c1 = 0.1 is not exactly an fp32 number"),
    (["sweep", "--coeffs", "1,zz"], "--coeffs: expected c0,c1,..."),
    (["sweep", "--coeffs", "mine"], "coeffs: no coefficient set 'mine'"),
    (["sweep", "--coeffs", "fa4-deg3", "--degree", "5"], "degree: coeffs has 4 values"),
    (["bounds", "exp2", "--coeffs", "0x3f800000"], "--coeffs: expected at least 2 coefficients"),
    (["bounds", "attention", "--shape", "1,16,1,64", "--kernel", "fa4-sm100", "--coeffs", "nope"],
     "coeffs: no coefficient set 'nope'"),
    (["attention", "run", "--opt", "coeffs=1,0.1"], "--opt: coeffs: c1 = 0.1 is not exactly"),
    (["polys", "export", "1,zz"], "COEFFS: expected c0,c1,..."),
    (["polys", "--registry", "{tmp}/missing", "list"], "registry: no such file: {tmp}/missing"),
])
def test_cli_coeffs_errors_one_line(argv, message, tmp_path, capsys):
    argv, message = [a.format(tmp=tmp_path) for a in argv], message.format(tmp=tmp_path)
    with pytest.raises(SystemExit) as exc:
        raise SystemExit(main(argv))
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith("fa4num: error: ") and err.count("\n") == 1, err
    assert message in err, err


# --- nothing writes inside the package ----------------------------------------------------------------------------
def test_fit_write_goes_to_the_user_registry_and_never_the_package(tmp_path, capsys):
    pkg = Path(polys.__file__).parent
    before = (_tree_digest(pkg), _tree_digest(polys.shipped_dir()))
    assert main(["fit", "--degree", "1", "--quick", "--write"]) == 0
    assert f"to {polys.user_dir()}" in capsys.readouterr().out
    assert (_tree_digest(pkg), _tree_digest(polys.shipped_dir())) == before
    assert polys.resolve("fa4num-minimax-deg1").origin == str(polys.user_dir())   # searched, found there first
    for target in (polys.shipped_dir(), polys.shipped_dir() / "x.json", pkg / "mine.json"):
        with pytest.raises(ValueError, match="registry: .* holds the sets shipped with fa4num"):
            polys.write_entry("x", (1.0, 0.5), source="", metrics={}, provenance={}, registry=target)
    assert main(["fit", "--degree", "1", "--quick", "--registry", str(polys.shipped_dir())]) == 2
    assert "--registry: " in capsys.readouterr().err
    assert (_tree_digest(pkg), _tree_digest(polys.shipped_dir())) == before


@pytest.mark.parametrize("where", ["/proc/fa4num-polys.json", "/proc/fa4num-polys", "/proc/version"])
def test_fit_refuses_an_unwritable_registry_before_the_fit(where, monkeypatch, capsys):
    if not Path("/proc/version").exists():
        pytest.skip("no /proc")
    from fa4num.fit import _api
    monkeypatch.setattr(_api, "fit", lambda *a, **k: pytest.fail("the fit ran before the check"))
    assert main(["fit", "--degree", "2", "--registry", where]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fa4num: error: --registry: ") and err.count("\n") == 1, err


def test_registry_file_and_folder_forms(tmp_path):
    file_reg, folder_reg = tmp_path / "r.json", tmp_path / "r"
    assert _user_set(file_reg) == file_reg and _user_set(folder_reg) == folder_reg / "mine.json"
    assert polys.read(file_reg)["entries"]["mine"]["coeffs"] == polys.read(folder_reg)["entries"]["mine"]["coeffs"]
    assert json.loads((folder_reg / "mine.json").read_text())["schema"] == polys.SET_SCHEMA
    (folder_reg / "junk.json").write_text("{}")
    with pytest.raises(ValueError, match="is not a fa4num-poly/1 set file"):
        polys.read(folder_reg)
    (tmp_path / "plain").write_text("x")
    with pytest.raises(ValueError, match="a registry file's name ends in .json"):
        polys.check_writable(tmp_path / "plain")
    with pytest.raises(ValueError, match="name: '1.5' must be"):
        polys.write_entry("1.5", (1.0, 0.5), source="", metrics={}, provenance={}, registry=file_reg)


def test_forward_reads_a_set_by_name_without_the_fitter():
    """attention.forward resolves a name with fa4num.polys; the fitter (mpmath, flint) is never imported."""
    import os
    import subprocess
    import sys
    code = ("import sys, numpy as np, ml_dtypes; from fa4num.attention import forward; "
            "q = np.zeros((1, 16, 1, 64), ml_dtypes.bfloat16); "
            "forward(q, q, q, kernel='fa4-sm100', coeffs='fa4num-minimax-deg5'); "
            "print([m for m in sys.modules if m.startswith('fa4num.fit') or m in ('mpmath', 'flint')])")
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=root,
                       env={**os.environ, "PYTHONPATH": str(root)})
    assert r.returncode == 0 and r.stdout.strip() == "[]", (r.stdout, r.stderr[-2000:])
