"""The fused exhaustive-sweep checks of ``fa4num gpu verify`` (fa4num.gpu.fused), on the CPU.

The GPU's output is stood in for by the unfused emulator's output for the same input patterns (the widened /
packed form, fa4num.gpu.ops.OpSpec.emulator, which the golden tests check against the H200). A fused count must
be 0 on it, must count every planted bit flip (in any bit of the 32-bit word, including the zero-extension
bits of a 16-bit result), and must equal the count of the unfused path (iota + sweep emulator + compare)."""
import numpy as np
import pytest

from fa4num.gpu import compare, fused
from fa4num.gpu.ops import OpSpec
from fa4num.gpu.verify import exhaustive_plan

SIGN = 1 << 31
PLAN = {s.ptx.name: s for s in exhaustive_plan()}

# (start, log2 size) of the ranges each op is checked on: around 1.0 and small negatives (the softmax domain),
# subnormals and zero, the large positives of ex2's wide path (2^22 < x), +inf and the NaNs, the negative
# end with the wrap of the pattern past 2^32, and ranges crossing the narrow/wide boundary of ex2
RANGES = [(0x3F7F8000, 16), (0xBE000000, 17), (0x00000000, 16), (0x807F0000, 17), (0x4A7FF000, 16),
          (0x4B000000, 16), (0x7F7F8000, 16), (0x7FFF8000, 17), (0xFF800000 - (1 << 15), 16),
          (0xFFFF0000, 18), (0xC3000000 - (1 << 19), 20)]


def _inputs(starts, n):
    x = np.empty(n * len(starts), np.uint32)
    for j, s in enumerate(starts):
        compare.iota(s, x[j * n:(j + 1) * n])
    return x


def _starts(spec, s):
    return (s, s ^ SIGN) if spec.packed == "hi=x,lo=-x" else (s,)


def _unfused_count(meta, starts, gpu):
    emu, neg_pair = meta.sweep_emulator
    e = emu(_inputs(starts, gpu.size // len(starts)).view(np.float32))
    return int(compare.count_mismatches_neg_pair(gpu, e) if neg_pair else compare.count_mismatches(gpu, e))


@pytest.mark.parametrize("name", sorted(PLAN))
def test_fused_count_finds_exactly_the_planted_flips(name):
    meta = PLAN[name]
    count = fused.counter(meta)
    assert count is not None
    rng = np.random.default_rng(sum(map(ord, name)))
    for s, k in RANGES:
        starts = _starts(meta, s)
        gpu = np.asarray(meta.emulator(_inputs(starts, 1 << k)), np.uint32)
        assert count(starts, gpu) == 0, (hex(s), k)
        flips = rng.choice(gpu.size, 5, replace=False)
        bits = rng.integers(0, 32, 5)
        bad = gpu.copy()
        bad[flips] ^= np.left_shift(np.uint32(1), bits.astype(np.uint32))
        assert count(starts, bad) == 5, (hex(s), k)
        assert _unfused_count(meta, starts, bad) == 5


@pytest.mark.parametrize("name", ["ex2emu.asm.fa4d3", "ex2.approx.f32", "cvt.rn.f16.f32",
                                  "cvt.rn.satfinite.e4m3x2.f32(x,-x)"])
def test_fused_and_unfused_counts_agree_on_a_wrong_model(name):
    """A GPU output that differs from the model in many places (another op's results) is counted alike."""
    meta = PLAN[name]
    other = PLAN["ex2emu.packed.fa4d3" if name.startswith(("ex2.", "cvt")) else "ex2.approx.ftz.f32"]
    total = 0
    for s, k in RANGES[:6]:
        starts = _starts(meta, s)
        x = _inputs(starts, 1 << k)
        gpu = np.asarray(other.emulator(x), np.uint32)
        n = fused.counter(meta)(starts, gpu)
        assert n == _unfused_count(meta, starts, gpu)
        total += n
    assert total > 0


def test_ex2_degree_other_than_three_and_nudged_coefficients():
    """The ex2 counter follows the meta's coefficients (a nudged set differs from FA4's in some outputs)."""
    base = PLAN["ex2emu.scalar.fa4d3"]
    nudged = OpSpec.ex2emu(base.variant, [1065353216, 1060238618, 1047070372, 1033760922])
    starts = (0xBF800000,)
    gpu = np.asarray(base.emulator(_inputs(starts, 1 << 18)), np.uint32)
    n = fused.counter(nudged)(starts, gpu)
    assert n == _unfused_count(nudged, starts, gpu) > 0
    with pytest.raises(ValueError, match="degree"):
        OpSpec.from_meta(dict(base.to_meta(), degree=2))


def test_neg_pair_step_must_be_a_block_and_its_twin():
    meta = PLAN["cvt.rn.satfinite.e5m2x2.f32(x,-x)"]
    with pytest.raises(ValueError, match="sign-flipped twin"):
        fused.counter(meta)((0, 16), np.zeros(32, np.uint32))


def test_ops_without_a_fused_loop_get_none():
    assert fused.counter(OpSpec.arith("add", "rn")) is None
    assert fused.counter(OpSpec("to_bf16", packed="hi=a,lo=b")) is None
    with pytest.raises(ValueError, match="OpSpec"):
        fused.counter({"op": "to_bf16"})


def test_warm_runs_each_piece_and_rejects_unknown_ones():
    ex2, mufu = PLAN["ex2emu.packed.fa4d3"], PLAN["lg2.approx.ftz.f32"]
    assert fused.parts(ex2) == ("narrow", "wide", "exact") and fused.parts(mufu) == ("all",)
    for meta in (ex2, mufu, PLAN["cvt.rn.satfinite.e4m3x2.f32(x,-x)"]):
        for part in fused.parts(meta):
            fused.warm(meta, part)
    with pytest.raises(ValueError, match="part must be one of"):
        fused.warm(ex2, "all")
    with pytest.raises(ValueError, match="part must be one of"):
        fused.warm(mufu, "wide")
