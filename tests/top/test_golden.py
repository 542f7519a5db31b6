"""CPU emulators against bit-exact vectors captured on an H200 (tests/golden/, fa4num.golden format).

Each golden set holds SHA-256 digests of the GPU's outputs per chunk of a deterministic input range (2^20
inputs: specials, binade edges, cancellation, ties, results near 2^-126, overflow, random bits) plus explicit
vectors; the exhaustive file holds digests of the GPU's outputs per 2^24 chunk of all 2^32 fp32 inputs.
"""
from pathlib import Path

import numpy as np
import pytest

from fa4num import golden
from fa4num.gpu.ops import OpSpec

GOLDEN = Path(__file__).parents[1] / "golden"
FILES = ["fp.json.xz", "convert.json.xz", "ex2_emulated.json.xz", "mufu.json.xz"]
EXHAUSTIVE = GOLDEN / "exhaustive.json.xz"
# chunks of the 2^32 inputs re-checked on every run: subnormals and tiny values, [0.5, 2), [-128, -32)
EXHAUSTIVE_CHUNKS = (0x00, 0x3F, 0xC2)


def _sets():
    out = []
    for f in FILES:
        _, sets = golden.read_file(GOLDEN / f)
        out += [pytest.param(s, id=f"{f.split('.')[0]}:{s.name}") for s in sets]
    return out


@pytest.mark.parametrize("gs", _sets())
def test_emulator_matches_gpu_golden_set(gs):
    res = golden.check_set(gs, OpSpec.from_meta(gs.meta).emulator)
    assert res.n >= min(golden.SIZES[gs.kind], 10 ** 6)
    assert res.ok, f"{gs.name}: chunks {res.chunks_bad} differ; explicit vectors: {res.vectors_bad} differ, " \
                   f"e.g. (index, inputs, gpu, emulator) {res.examples[:5]}"


@pytest.mark.parametrize("f", FILES)
def test_golden_files_carry_gpu_provenance(f):
    header, sets = golden.read_file(GOLDEN / f)
    assert header["provenance"]["gpu"]["name"]
    assert header["provenance"]["packages"]["triton"]
    assert all(s.ptx and s.digests for s in sets)


def _exhaustive_cases():
    if not EXHAUSTIVE.exists():
        return []
    doc = golden.read_exhaustive(EXHAUSTIVE)
    return [pytest.param(name, k, id=f"{name}:chunk{k:02x}") for name in doc["ops"] for k in EXHAUSTIVE_CHUNKS]


@pytest.mark.parametrize("name,chunk", _exhaustive_cases())
def test_emulator_matches_gpu_exhaustive_chunk(name, chunk):
    doc = golden.read_exhaustive(EXHAUSTIVE)
    entry = doc["ops"][name]
    out = np.asarray(OpSpec.from_meta(entry["meta"]).emulator(golden.exhaustive_inputs(chunk)), np.uint32)
    assert golden.sha256_u32(out) == entry["digests"][chunk]


def test_exhaustive_file_covers_all_unary_ops():
    doc = golden.read_exhaustive(EXHAUSTIVE)
    assert doc["chunk"] * len(next(iter(doc["ops"].values()))["digests"]) == 1 << 32
    kinds = {(e["meta"]["op"], e["meta"].get("variant"), e["meta"].get("fn")) for e in doc["ops"].values()}
    for v in ("packed", "scalar", "asm"):
        assert ("ex2emu", v, None) in kinds
    for fn in ("ex2", "rcp", "lg2"):
        assert ("mufu", None, fn) in kinds


# ---- the generators --------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", sorted(golden.SIZES))
def test_inputs_are_a_pure_function_of_the_index(kind):
    full = golden.inputs(kind, 3)
    stop = golden.SIZES[kind] - 5
    part = golden.inputs(kind, 3, 1000, stop)
    assert all(np.array_equal(f[1000:stop], p) for f, p in zip(full, part))
    other = golden.inputs(kind, 4)
    assert kind == "all16" or not np.array_equal(full[0], other[0])


def test_splitmix64_matches_the_published_sequence():
    # splitmix64 with state 0: the generator adds the golden gamma, then mixes (Vigna's reference code)
    assert int(golden.splitmix64(np.array([0], np.uint64))[0]) == 0xE220A8397B1DCDAF


def test_unary_inputs_cover_every_special_and_binade_edge():
    (x,) = golden.inputs("unary")
    s = set(x.tolist())
    for bits in (0, 0x80000000, 1, 0x807FFFFF, 0x7F800000, 0xFF800000, 0x7FFFFFFF, 0xFFC00000, 0x7F7FFFFF):
        assert bits in s
    exps = (x >> 23) & 0xFF
    for e in range(256):
        assert {0, 0x7FFFFF} <= set((x[exps == e] & 0x7FFFFF).tolist())


@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # NaN/inf inputs in float casts are intended
def test_binary_inputs_hold_the_adversarial_cases():
    a, b = (v.view(np.float32).astype(np.float64) for v in golden.inputs("binary"))
    with np.errstate(all="ignore"):
        s, p = a + b, a * b
    finite = np.isfinite(s) & np.isfinite(p)
    # exact add results (float64 holds every sum of two fp32 of close exponents) halfway between two fp32
    s32 = s.astype(np.float32).astype(np.float64)
    ulp = np.spacing(np.abs(s).astype(np.float32)).astype(np.float64)
    ties = finite & (np.abs(s - s32) * 2 == ulp) & (np.abs(s) > 2.0 ** -126) & (np.abs(s) < 2.0 ** 127)
    assert ties.sum() > 1000
    assert (finite & (s == 0) & (a != 0)).sum() > 1000                       # exact cancellation
    assert (finite & (s != 0) & (np.abs(s) < 2.0 ** -126)).sum() > 1000      # subnormal sums
    below = finite & (np.abs(p) < 2.0 ** -126) & (np.abs(p) > 2.0 ** -126 * (1 - 2.0 ** -22))
    assert below.sum() > 1000                                                # products just below 2^-126
    assert (np.isfinite(a) & np.isfinite(b) & (np.abs(p) > 3.4028234663852886e38)).sum() > 1000
    nan_a = np.isnan(a)
    assert (nan_a & (b == 0)).sum() > 0 and (nan_a & np.isnan(b)).sum() > 0  # NaN with ±0 and NaN


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_ternary_inputs_hold_fma_cancellation_and_tiny_results():
    a, b, c = (v.view(np.float32).astype(np.float64) for v in golden.inputs("ternary"))
    with np.errstate(all="ignore"):
        r = a * b + c           # not exact in float64 in general; enough to count the cases' scale
    fin = np.isfinite(r)
    assert (fin & (np.abs(r) < np.abs(c) * 2.0 ** -20) & (c != 0)).sum() > 10000
    assert (fin & (r != 0) & (np.abs(r) < 2.0 ** -126)).sum() > 1000


def test_inputs_reject_bad_arguments():
    with pytest.raises(ValueError, match="kind"):
        golden.inputs("quaternary")
    with pytest.raises(ValueError, match="stop"):
        golden.inputs("unary", 0, 0, golden.SIZES["unary"] + 1)
