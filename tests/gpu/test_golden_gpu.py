"""GPU-side tests (``-m gpu``; skipped without torch+CUDA+Triton): the GPU at hand against the committed golden
vectors and the MUFU models. Plus the CPU-side promise that GPU commands say clearly when no GPU is present."""
from pathlib import Path

import numpy as np
import pytest

from fa4num import golden
from fa4num.gpu import gpu_missing

GOLDEN = Path(__file__).parents[1] / "golden"
needs_gpu = pytest.mark.skipif(gpu_missing() is not None, reason=f"no usable GPU: {gpu_missing()}")


def _capability():
    import torch
    return "sm_%d%d" % torch.cuda.get_device_capability(0)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("f", ["fp.json.xz", "convert.json.xz", "ex2_emulated.json.xz", "mufu.json.xz"])
def test_gpu_reproduces_the_golden_digests(f):
    from fa4num.gpu import ptx
    from fa4num.gpu.kernels import run, to_numpy
    header, sets = golden.read_file(GOLDEN / f)
    if header["provenance"]["gpu"]["capability"] != _capability() and f == "mufu.json.xz":
        pytest.skip("MUFU results are architecture-specific")
    for gs in sets:
        xs = golden.inputs(gs.kind, gs.seed, gs.start, gs.stop)
        out = to_numpy(run(ptx.Op(gs.name, len(xs), gs.ptx), *xs))
        assert golden.chunk_digests(out, gs.chunk) == gs.digests, gs.name


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("fn", ["ex2", "rcp", "lg2"])
@pytest.mark.parametrize("ftz", [True, False])
def test_gpu_mufu_equals_the_model(fn, ftz):
    from fa4num import hw
    from fa4num.gpu import ptx
    from fa4num.gpu.kernels import run, to_numpy
    arch = _capability().replace("_", "")
    if arch not in hw.available_archs():
        pytest.skip(f"no MUFU tables for {arch}: build them with `fa4num mufu build --arch {arch}`")
    x = (golden.splitmix64(np.arange(1 << 22, dtype=np.uint64) + np.uint64(77)) >> np.uint64(32)).astype(np.uint32)
    gpu = to_numpy(run(ptx.MUFU[f"{fn}.approx{'.ftz' if ftz else ''}.f32"], x))
    model = getattr(hw, f"mufu_{fn}")(x.view(np.float32), ftz=ftz, arch=arch).view(np.uint32)
    assert np.array_equal(gpu, model)


@pytest.mark.skipif(gpu_missing() is None, reason="a GPU is present")
def test_gpu_commands_say_that_no_gpu_is_present(capsys, tmp_path):
    from fa4num.gpu import GPUUnavailable, _cli, require_gpu
    assert _cli.main(["capture", "--out", str(tmp_path)]) == 1
    assert _cli.main(["verify", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "no usable GPU" in err and "CPU feature" in err
    with pytest.raises(GPUUnavailable, match="needs an NVIDIA GPU"):
        require_gpu()
    assert not any(tmp_path.iterdir())
