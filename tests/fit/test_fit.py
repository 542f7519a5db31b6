"""fa4num.fit against independent anchors: Sollya 8.0 (FA4's fpminimax call, supnorm, remez), the published
real-coefficient optima (docs/notes/fitters.md section 2, external values), FA4's POLY_EX2 as shipped
(fa4num.ex2.POLY_EX2, bit patterns copied from flash_attn/cute/utils.py), and analytic sup norms."""
from __future__ import annotations

import ast
import math
import struct

import numpy as np
import pytest

from fa4num.ex2 import POLY_EX2, fa4_emulated
from fa4num.fit import export, fit, fit_exp2, load_poly, sollya, sup_norm
from fa4num.fit import registry as reg

needs_sollya = pytest.mark.skipif(not sollya.available(), reason="sollya not installed (apt-get install sollya)")

# Published optimum (docs/notes/fitters.md, section 2): best max relative error of 2^x on [0, 1] with p(0) = 1,
# and c1..cn.
PUBLISHED_OPTIMUM = {
    1: (3.8221581e-2, [0.923556839]),
    2: (2.0533273e-3, [0.665960941, 0.329932404]),
    3: (8.5590194e-5, [0.695116786, 0.227644991, 0.0770670420]),
    4: (2.8959251e-6, [0.693044845, 0.241280205, 0.0522424742, 0.0134266843]),
    5: (8.2272126e-8, [0.693151312, 0.240164450, 0.0557999131, 0.00901703032, 0.00186713007]),
    6: (2.0123620e-9, [0.693147044, 0.240229306, 0.0554852806, 0.00967545157, 0.00124678464, 0.000216129150]),
}


@pytest.fixture(scope="module")
def default_fits():
    return {n: fit_exp2(n) for n in range(1, 6)}


def _is_fp32(c: float) -> bool:
    return float(np.float32(c)) == c


@pytest.mark.parametrize("n", sorted(PUBLISHED_OPTIMUM))
def test_real_optimum_matches_published(n):
    level, coeffs = PUBLISHED_OPTIMUM[n]
    opt = fit_exp2(n, certify_bound=False, radius=0).optimum
    assert opt.max_error == pytest.approx(level, rel=1e-7)
    assert opt.coeffs_float[0] == 1.0
    np.testing.assert_allclose(opt.coeffs_float[1:], coeffs, rtol=2e-8)


def test_defaults_fp32_c0_one_certified(default_fits):
    for n, r in default_fits.items():
        assert len(r.coeffs) == n + 1 and r.coeffs[0] == 1.0
        assert all(_is_fp32(c) for c in r.coeffs)
        assert r.certified_lower <= r.max_error <= r.certified_bound <= 1.01 * r.max_error
        assert r.max_error >= r.optimum.max_error
        assert r.path == "exact" and r.proven_optimal and r.provenance["code_revision"]


@needs_sollya
def test_defaults_beat_fa4_per_sollya_supnorm(default_fits):
    """Sollya certifies both sets: our upper end is below the lower end of FA4's enclosure, and our own
    max and certified bound agree with Sollya's enclosure."""
    for n, r in default_fits.items():
        lo, hi = sollya.supnorm(r.coeffs, accuracy=2.0 ** -40)
        fa4_lo, _ = sollya.supnorm(POLY_EX2[n], accuracy=2.0 ** -40)
        assert hi < fa4_lo
        assert lo * (1 - 1e-9) <= r.max_error <= hi * (1 + 1e-9)
        assert r.certified_bound >= lo


@pytest.mark.parametrize("n", range(1, 6))
def test_fa4_method_regenerates_poly_ex2(n):
    r = fit_exp2(n, method="fa4")
    assert r.coeffs == tuple(POLY_EX2[n])
    assert tuple(r.regeneration["own"]) == tuple(POLY_EX2[n])  # fa4num's own fpminimax, bit for bit
    if sollya.available():
        assert r.path == "sollya" and r.regeneration["bit_identical"] is True
    else:
        assert r.path == "own-fpminimax" and r.regeneration["bit_identical"] is None


@needs_sollya
def test_fa4_method_knob_changed_matches_sollya():
    """One knob changed (bf16-precision coefficients): our own recipe vs Sollya's fpminimax."""
    r = fit_exp2(3, method="fa4", coeff_format="bf16")
    assert r.regeneration["sollya"] == sollya.fpminimax_fa4(3, precision=8)
    own_err = sup_norm("2^x", r.regeneration["own"]).max_error
    assert own_err <= r.max_error * (1 + 1e-12)


@needs_sollya
@pytest.mark.parametrize("f, n", [("exp(x)", 4), ("atan(x)", 7)])   # atan: odd, so a symmetric start is degenerate
def test_general_fit_matches_sollya_remez(f, n):
    """[-1, 1], absolute error, nothing fixed: our real optimum vs Sollya's remez + supnorm."""
    r = fit(f, n, (-1.0, 1.0), error="absolute", coeff_format="fp32")
    out = sollya.run(f"display=hexadecimal!; p = remez({f}, {n}, [-1;1], 1, 2^-60); "
                     f"s = supnorm(p, {f}, [-1;1], absolute, 2^-40); print(sup(s));")
    sollya_level = float.fromhex(out.split()[-1])
    assert r.optimum.max_error == pytest.approx(sollya_level, rel=1e-9)
    lo, hi = sollya.supnorm(r.coeffs, f, interval=(-1.0, 1.0), error="absolute")
    assert lo <= r.certified_bound and lo * (1 - 1e-9) <= r.max_error <= hi * (1 + 1e-9)
    assert all(_is_fp32(c) for c in r.coeffs)


@needs_sollya
@pytest.mark.parametrize("interval", [(-1.0, 0.0), (-0.5, 0.5)])
def test_negative_intervals_certified_against_sollya(interval):
    r = fit_exp2(3, interval=interval)
    lo, hi = sollya.supnorm(r.coeffs, interval=interval, accuracy=2.0 ** -40)
    assert lo * (1 - 1e-9) <= r.max_error <= hi * (1 + 1e-9)
    assert lo <= r.certified_bound <= 1.01 * hi


def test_certificate_sound_on_analytic_sup():
    """|x + 1e-3 sin(50x) - x| has sup exactly 1e-3; a 1e-4-wide bump between scan points is still bounded."""
    s = sup_norm("x + 0.001*sin(50*x)", [0.0, 1.0], error="absolute")
    assert s.certified_lower <= 1e-3 <= s.certified_bound <= 1e-3 * (1 + 1e-3)
    bump = sup_norm("x + 0.001*exp(-((x - 0.31370001)/0.0001)^2)", [0.0, 1.0], error="absolute")
    assert bump.certified_lower <= 1e-3 <= bump.certified_bound
    assert bump.max_error == pytest.approx(1e-3, rel=1e-12)


@pytest.mark.parametrize("fmt, n", [("bf16", 3), ("bf16", 4), ("fp16", 3), ("fp16", 4)])
def test_other_formats_exact_and_at_least_fpminimax(fmt, n):
    import ml_dtypes
    dtype = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16}[fmt]
    r = fit_exp2(n, coeff_format=fmt)
    assert all(float(dtype(c)) == c for c in r.coeffs)
    naive = [1.0] + [float(dtype(float(c))) for c in r.optimum.coeffs_float[1:]]
    assert r.max_error <= sup_norm("2^x", naive).max_error * (1 + 1e-12)
    # at least as good as fpminimax: the lattice step alone (Sollya's constrained call, which Sollya itself
    # cannot run here), and FA4's recipe at this precision (Sollya's output when installed)
    for method in ("fpminimax", "fa4"):
        assert r.max_error <= fit_exp2(n, coeff_format=fmt, method=method).max_error * (1 + 1e-12)


@pytest.mark.parametrize("kwargs, arg", [
    (dict(degree=0), "degree"), (dict(degree=11), "degree"), (dict(degree=2.5), "degree"),
    (dict(interval=(1.0, 0.0)), "interval"), (dict(interval=(0.5, 0.5)), "interval"),
    (dict(interval=(0.0, math.inf)), "interval"), (dict(interval=(0.0,)), "interval"),
    (dict(coeff_format="fp8"), "coeff_format"), (dict(objective="l2"), "objective"),
    (dict(method="lolremez"), "method"), (dict(error="ulp"), "error"),
    (dict(fixed={0: 0.1}), "fixed"), (dict(fixed={7: 1.0}), "fixed"),
])
def test_bad_requests_name_the_argument(kwargs, arg):
    with pytest.raises(ValueError, match=arg):
        fit_exp2(**kwargs)


@pytest.mark.parametrize("f, interval, error", [
    ("1/(x-0.3)", (0.0, 1.0), "absolute"),     # pole inside
    ("log(x)", (0.0, 1.0), "absolute"),        # -inf at an endpoint
    ("sqrt(x - 0.5)", (0.0, 1.0), "absolute"),  # not real on part of the interval
    ("x - 0.5", (0.0, 1.0), "relative"),       # relative error undefined at the zero
    ("foo(x)", (0.0, 1.0), "absolute"),        # unknown function
])
def test_bad_functions(f, interval, error):
    with pytest.raises(ValueError, match="^f:"):
        fit(f, 3, interval, error=error)


def test_emulation_objective_needs_exp2_setting():
    with pytest.raises(ValueError, match="objective"):
        fit("exp(x)", 3, (0.0, 1.0), objective="bf16")


def test_registry_fa4_entries_and_loader(tmp_path):
    for n in range(1, 6):
        assert load_poly(f"fa4-deg{n}") == tuple(POLY_EX2[n])
    path = tmp_path / "reg.json"
    coeffs = (1.0, 0.6951461434364319, 0.22756439447402954, 0.07711908966302872)
    reg.write_entry("mine-3", coeffs, source="test", metrics={}, provenance={}, registry=path)
    assert load_poly("mine-3", registry=path) == coeffs
    with pytest.raises(ValueError, match="coeffs: no coefficient set 'missing'"):
        load_poly("missing", registry=path)
    with pytest.raises(ValueError, match="name"):
        reg.write_entry("bad name", coeffs, source="", metrics={}, provenance={}, registry=path)


def test_exports_round_trip():
    coeffs = tuple(POLY_EX2[5])
    cute = export(coeffs, "cute", name="P")
    assert ast.literal_eval(cute.split("=", 1)[1].split("#")[0].strip()) == coeffs
    c = export(coeffs, "c", name="P")
    lits = c[c.index("{") + 1:c.index("}")].split(",")
    assert tuple(float.fromhex(s.strip().rstrip("f")) for s in lits) == coeffs
    ptx = [ln for ln in export(coeffs, "ptx").splitlines() if ln.startswith("0f")]
    assert tuple(struct.unpack("<f", struct.pack("<I", int(h[2:], 16)))[0] for h in ptx) == coeffs
    assert ptx[1] == "0f3F31725F"   # FA4's own constant for c1 of the degree-5 set
    triton = export(coeffs, "triton", name="P")
    vals = [float(ln.split("tl.constexpr(")[1].split(")")[0]) for ln in triton.splitlines() if "constexpr(" in ln]
    assert tuple(vals) == coeffs
    with pytest.raises(ValueError, match="coeffs"):
        export((1.0, 0.1), "c")
    with pytest.raises(ValueError, match="fmt"):
        export(coeffs, "verilog")


def test_evaluated_objective_beats_fa4_on_every_fp32_input():
    """Degree 5, where fp32 evaluation error is as large as the approximation error."""
    from fa4num.fit import evaluated_error
    r = fit_exp2(5, objective="evaluated")
    full = r.metrics["evaluated"]
    assert full["inputs"] == 0x3F800000 and r.objective_value == full["value"]
    assert full["value"] >= evaluated_error(r.coeffs, inputs="grid")["value"]  # a subset cannot exceed it
    # FA4's max over the 2^-23 grid is a lower bound of its max over every input: beating it is enough
    assert full["value"] < evaluated_error(POLY_EX2[5], inputs="grid")["value"]
    assert full["value"] >= r.max_error * (1 - 1e-3)  # fp32 inputs sit densely around the real peak


def test_evaluated_error_skips_only_inputs_its_bound_covers():
    """evaluated_error skips a piece of 2^14 inputs when a rigorous bound of the error over it is below the max
    found; the bound must hold on every input of the skipped pieces with the largest bounds (where it is
    tightest), and the max be the exhaustive one (the registry holds FA4's, measured exhaustively)."""
    from fa4num.fit import _objectives, evaluated_error
    from fa4num.fit.registry import poly_entry
    for degree in (3, 5):
        coeffs = tuple(float(c) for c in POLY_EX2[degree])
        res = evaluated_error(coeffs)
        skipped = res["bounded"]
        assert skipped is not None and res["evaluated"] + skipped["inputs"] == res["inputs"] == 0x3F800000
        assert skipped["bound"] < res["value"]
        metrics = poly_entry(f"fa4-deg{degree}")["metrics"]
        assert (res["value"], res["argmax"]) == (metrics["evaluated_rel_error"], metrics["evaluated_argmax"])
        starts, bounds = _objectives._piece_bounds(coeffs)
        below = np.flatnonzero(bounds < res["value"])
        assert skipped["inputs"] <= below.size * _objectives._PIECE   # it skips no piece whose bound reaches the max
        for i in below[np.argsort(-bounds[below])[:8]]:
            x = np.arange(starts[i], starts[i] + _objectives._PIECE, dtype=np.uint32).view(np.float32)
            p = fa4_emulated(x, degree, coeffs=coeffs).astype(np.float64)
            assert np.max(np.abs(p / np.exp2(x.astype(np.float64)) - 1)) <= bounds[i]


def test_evaluated_error_pruned_equals_exhaustive():
    """The pruned pass gives the value and argmax of running every input through the emulator (on [0.25, 1),
    2^24 inputs, for a degree where the bounds skip most pieces and one where they skip few)."""
    from fa4num.fit import _objectives
    lo = int(np.float32(0.25).view(np.uint32))
    for coeffs in (tuple(float(c) for c in POLY_EX2[3]), fit_exp2(5).coeffs):
        fast = _objectives._evaluated_error(coeffs, "all", True, lo)
        full = _objectives._evaluated_error(coeffs, "all", False, lo)
        assert (fast["value"], fast["argmax"]) == (full["value"], full["argmax"])
        assert fast["evaluated"] <= full["evaluated"] == full["inputs"]


def test_bf16_reference_steps_equal_every_element():
    """The step search for RN_bf16(2^x) over monotone inputs gives the bits exp2_cr gives element by element."""
    from fa4num.fit import _objectives
    from fa4num.fp import exp2_cr
    lo = np.float32(0.5).view(np.uint32)
    for x in (_objectives._frac_grid()[::7], -np.arange(lo, lo + (1 << 21), dtype=np.uint32).view(np.float32),
              (-127.0 + np.arange(1 << 17) * 2.0 ** -17).astype(np.float32)):
        assert np.array_equal(_objectives._ref_bits(x), exp2_cr(x, dtype="bfloat16").view(np.uint16))


def test_bf16_binades_proven_free_of_mismatches_have_none():
    """bf16_mismatch_share skips a binade of (-2^-9, 0) when ball arithmetic proves bf16 P = 1.0 there; counting
    it directly must then find no mismatch (the largest such binade, where the margin is smallest)."""
    from fa4num.fit import _objectives
    from fa4num.fp import to_bf16
    j = 9
    lo = np.float32(2.0 ** -(j + 1)).view(np.uint32)
    x = -np.arange(lo, lo + (1 << 23), dtype=np.uint32).view(np.float32)
    for degree in (3, 4, 5):
        coeffs = tuple(float(c) for c in POLY_EX2[degree])
        assert _objectives._bf16_one_certain(coeffs, 1 - 2.0 ** -j, 1 - 2.0 ** -(j + 1))
        assert np.all(to_bf16(fa4_emulated(x, degree, coeffs=coeffs)).view(np.uint16) == 0x3F80)
    # the linear set's error (3.8 %) is too large for the proof there: that binade is counted
    assert not _objectives._bf16_one_certain(tuple(float(c) for c in POLY_EX2[1]), 1 - 2.0 ** -j,
                                             1 - 2.0 ** -(j + 1))


def test_bf16_share_decomposition_matches_direct_count():
    """The per-binade shares come from the 2^-23 fraction grid; counting every fp32 x of the binade
    [-126, -64) directly with the emulator and the correctly rounded reference gives the same share."""
    from fa4num.fit import bf16_mismatch_share
    from fa4num.fp import exp2_cr, to_bf16
    parts = bf16_mismatch_share(POLY_EX2[3], domain="frac")["parts"]
    # every fp32 x in [-126, -64) is -y for y in (64, 126]: consecutive bit patterns
    y_bits = np.arange(np.float32(64.0).view(np.uint32) + 1, np.float32(126.0).view(np.uint32) + 1,
                       dtype=np.uint32)
    x = -y_bits.view(np.float32)
    mismatch = to_bf16(fa4_emulated(x, 3)).view(np.uint16) != exp2_cr(x, dtype="bfloat16").view(np.uint16)
    assert np.mean(mismatch) == parts["[-126,-64)"]


def test_bf16_objective_beats_fa4_cubic():
    from fa4num.fit import bf16_mismatch_share
    r = fit_exp2(3, objective="bf16")
    assert r.coeffs[0] == 1.0 and all(_is_fp32(c) for c in r.coeffs)
    fa4 = bf16_mismatch_share(POLY_EX2[3])
    assert r.metrics["bf16"]["value"] <= 0.9 * fa4["value"]
    assert r.objective_value == r.metrics["bf16"]["value"]


def test_cli_fit_writes_entry_and_compares(tmp_path, capsys):
    from fa4num.cli import main
    path = tmp_path / "reg.json"
    assert main(["fit", "--degree", "2", "--quick", "--registry", str(path)]) == 0
    out = capsys.readouterr().out
    assert "FA4 POLY_EX2[2]" in out and "max rel error (real)" in out
    coeffs = load_poly("fa4num-minimax-deg2", registry=path)
    assert coeffs[0] == 1.0 and len(coeffs) == 3
    assert main(["polys", "--registry", str(path), "export", "fa4num-minimax-deg2", "--as", "ptx"]) == 0
    ptx = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("0f")]
    assert ptx == [f"0f{reg.fp32_bits(c):08X}" for c in coeffs]


def test_describe_stored_metrics_are_what_describe_computes():
    """The CLI takes FA4's metrics from the shipped registry (describe(stored=True)); they must be the numbers
    describe computes now, so a change of a metric's definition shows up here rather than as stale output."""
    coeffs = tuple(float(c) for c in POLY_EX2[3])
    stored = reg.describe(coeffs, stored=True)
    assert stored.pop("stored_in") == "fa4-4.0.0b36-deg3"
    fresh = reg.describe(coeffs)
    assert stored == {k: fresh[k] for k in stored}
    assert "stored_in" not in reg.describe((1.0, 0.5), stored=True, emulation=False)   # not in the registry
