"""The fused compare loops of ``fa4num gpu verify`` (fa4num.gpu.compare) and its sweep emulators, on the CPU.

The GPU output is stood in for by the packed/widened emulator result (fa4num.gpu.ops.OpSpec.emulator, the form the
golden tests use), so these tests check that the native-width path of the sweep counts exactly the differences
the widened path would."""
import numpy as np
import pytest

from fa4num import golden
from fa4num.gpu import compare
from fa4num.gpu.ops import OpSpec

N = 1 << 16


def _block(start, n=N):
    x = np.empty(n, np.uint32)
    compare.iota(start, x)
    return x


def test_iota_wraps_modulo_2_32():
    x = _block(0xFFFFFFF0, 32)
    assert np.array_equal(x, (np.arange(32, dtype=np.uint64) + 0xFFFFFFF0).astype(np.uint32))


@pytest.mark.parametrize("meta", [{"op": "to_bf16"}, {"op": "to_fp16"}, {"op": "mufu", "fn": "rcp", "ftz": True}])
def test_native_width_compare_counts_what_the_widened_one_counts(meta):
    spec = OpSpec.from_meta(meta)
    (x,) = golden.inputs("unary", 0)
    wide = np.asarray(spec.emulator(x), np.uint32)
    fn, neg_pair = spec.sweep_emulator
    e = fn(x.view(np.float32))
    assert not neg_pair and e.dtype.itemsize == (4 if meta["op"] == "mufu" else 2)
    assert compare.count_mismatches(wide, e) == 0
    rng = np.random.default_rng(5)
    bad = np.sort(rng.choice(x.size, 7, replace=False))
    gpu = wide.copy()
    gpu[bad] ^= np.uint32(1 << 16) if e.dtype.itemsize < 4 else np.uint32(1)   # also bits above a 16-bit result
    assert compare.count_mismatches(gpu, e) == 7
    assert np.array_equal(compare.first_mismatches(gpu, e, 5), bad[:5])


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_fp8_neg_pair_checks_each_conversion_in_both_bytes(fmt):
    spec = OpSpec(f"to_{fmt}", packed="hi=x,lo=-x")
    start = 0x3F000000 - N // 2                      # around 0.5: normal, both signs via the twin block
    x = np.concatenate([_block(start), _block(start + (1 << 31))])
    gpu = np.asarray(spec.emulator(x), np.uint32)   # cvt...x2(x, -x) words, as the GPU returns them
    fn, neg_pair = spec.sweep_emulator
    e = fn(x.view(np.float32))
    assert neg_pair and e.dtype == np.uint8 and e.size == x.size
    assert compare.count_mismatches_neg_pair(gpu, e) == 0
    assert np.array_equal(compare.neg_pair_words(e), gpu)
    for j in (3, N + 11):                            # a wrong low byte in the first half, high byte in the second
        gpu[j] ^= np.uint32(0x100 if j >= N else 0x1)
    assert compare.count_mismatches_neg_pair(gpu, e) == 2
    assert list(compare.first_mismatches(gpu, compare.neg_pair_words(e), 10)) == [3, N + 11]


def test_sweep_emulator_rejects_binary_ops():
    with pytest.raises(ValueError, match="exhaustive-sweep emulator"):
        OpSpec.from_meta({"op": "add", "rounding": "rn", "ftz": False}).sweep_emulator
