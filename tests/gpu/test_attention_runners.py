"""The attention-kernel runners (fa4num.gpu.attention) on the CPU back ends of torch's SDPA, against fp64
attention; the CUDA back ends (FA4, flash, efficient, cudnn) run only on a GPU."""
import numpy as np
import pytest
import torch

from fa4num.attention import reference
from fa4num.gpu.attention import capture, run_attention
from fa4num.cli import main


def _torch(a):
    return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)


@pytest.mark.parametrize("backend", ["flash", "math"])
@pytest.mark.parametrize("causal,heads_kv", [(False, 4), (True, 2), (False, 1)])
def test_cpu_backends_match_fp64_attention(backend, causal, heads_kv, attention_case):
    q, k, v = attention_case(batch=2, seqlen_q=96, heads=4, heads_kv=heads_kv, causal=causal, seed=3)
    r = run_attention(_torch(q), _torch(k), _torch(v), backend=backend, causal=causal, warmup=0, repeats=2)
    out64, lse64 = reference.attention_fp64(q, k, v, causal=causal)
    assert r.out.shape == q.shape and r.out.dtype == torch.bfloat16
    assert r.lse.shape == (2, 4, 96) and r.lse.dtype == torch.float32
    assert len(r.times_ms) == 2 and r.median_ms > 0
    # bf16 kernels: relative L2 a few 1e-3 (docs/notes/h200-measurements.md section 3 has 1.7-2.3e-3 on the H200)
    assert reference.metrics(r.out.float().numpy(), out64).rel_l2 < 1e-2
    assert np.abs(r.lse.numpy() - lse64).max() < 1e-3


def test_capture_records_every_backend(tmp_path, attention_case):
    spec = attention_case(seqlen_q=64, seqlen_k=80, seed=1).spec
    rec = capture(spec, backends=("flash", "math", "cudnn"), device="cpu", warmup=0, repeats=1,
                  out_path=tmp_path / "cap")
    assert "error" in rec["runs"]["cudnn"] and "CUDA" in rec["runs"]["cudnn"]["error"]
    assert rec["runs"]["math"]["metrics"]["rel_l2"] < 1e-2
    saved = np.load(tmp_path / "cap.npz")
    assert saved["flash.out_bits"].shape == (1, 64, 2, 64) and saved["math.lse"].shape == (1, 2, 64)
    assert (tmp_path / "cap.json").stat().st_size > 0


def test_bad_requests_name_the_argument():
    q = torch.zeros(1, 8, 2, 64, dtype=torch.bfloat16)
    k = torch.zeros(1, 16, 2, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="backend"):
        run_attention(q, q, q, backend="xformers")
    with pytest.raises(ValueError, match="causal"):
        run_attention(q, k, k, backend="math", causal=True)
    with pytest.raises(ValueError, match="dtype"):
        run_attention(q.float(), q, q, backend="math")
    with pytest.raises(ValueError, match="CUDA"):
        run_attention(q, q, q, backend="fa4")
    with pytest.raises(ValueError, match="softmax_scale"):
        run_attention(q, q, q, backend="math", softmax_scale=-1.0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without a GPU")
def test_cli_says_no_gpu(capsys):
    assert main(["gpu", "attention", "--shape", "1,64,2,64"]) == 1
    assert "no usable GPU" in capsys.readouterr().err


def test_cli_fa4_path_on_recorded_h200_output(tmp_path, monkeypatch, capsys):
    """``fa4num gpu attention --backends fa4 math`` end to end on the CPU: the FA4 launch (the only step that needs
    the GPU) answers with the H200's recorded output and LSE of the same seeded problem (fa4num.attention.golden,
    case gqa_d128_nc; the inputs are proven the same by their digest); capture, metrics, files and the table are
    the command's own."""
    import hashlib
    import json

    from fa4num.attention.golden import input_digest, load
    from fa4num.gpu import attention as runners
    z, meta = load()
    case = next(c for c in meta["cases"] if c["spec"]["name"] == "gqa_d128_nc")
    gold_out, gold_lse = z["gqa_d128_nc.out_bits"], z["gqa_d128_nc.lse"]
    real = runners.run_attention

    def recorded(q, k, v, *, backend, **kw):
        if backend != "fa4":
            return real(q, k, v, backend=backend, **kw)
        assert input_digest(*(t.view(torch.int16).numpy() for t in (q, k, v))) == case["input_sha256"]
        out = torch.from_numpy(gold_out.view(np.int16).copy()).view(torch.bfloat16)
        return runners.KernelRun("fa4", out, torch.from_numpy(gold_lse.copy()), [0.25, 0.5, 0.75])

    monkeypatch.setattr(runners, "run_attention", recorded)
    s = case["spec"]
    argv = ["gpu", "attention", "--shape", f"{s['batch']},{s['seqlen_q']},{s['heads']},{s['head_dim']}",
            "--seqlen-k", str(s["seqlen_k"]), "--kv-heads", str(s["heads_kv"]), "--seed", str(s["seed"]),
            "--device", "cpu", "--backends", "fa4", "math", "--warmup", "0", "--repeats", "1",
            "--out", str(tmp_path / "cap")]
    assert main(argv) == 0
    table = capsys.readouterr().out
    assert "fa4" in table.split("\n")[1] and "not run" not in table
    saved = np.load(tmp_path / "cap.npz")
    assert hashlib.sha256(saved["fa4.out_bits"].tobytes()).hexdigest() == case["out_sha256"]
    rec = json.loads((tmp_path / "cap.json").read_text())
    fa4, math_ = rec["runs"]["fa4"], rec["runs"]["math"]
    assert fa4["median_ms"] == 0.5
    # FA4's bf16 output and torch's math back end both sit a few 1e-3 from fp64 attention (relative L2)
    assert fa4["metrics"]["rel_l2"] < 1e-2 and math_["metrics"]["rel_l2"] < 1e-2
    assert fa4["lse_max_abs_err"] < 1e-4
