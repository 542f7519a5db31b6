"""Kernel knobs from one place: the kernel object passes each softmax knob to its step by name
(``step_knobs``), the backends, the twin and the bound refuse by name a knob they do not implement
(``Kernel.knob_refusal``), and the knob table and the ``bounds attention`` flags come from the options
dataclasses."""
from __future__ import annotations

import dataclasses
import inspect

import ml_dtypes
import numpy as np
import pytest
import torch
from _torch_tracking import assert_torch_tracks

from fa4num.attention import forward, forward_torch, plan
from fa4num.attention import kernels as kernels_mod
from fa4num.attention.kernels import KERNELS, knob_table
from fa4num.bounds import attention as bound_mod
from fa4num.cli import main
from fa4num.attention import twin
from fa4num.softmax import sm90, sm100


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_step_knobs_are_the_steps_parameters_that_are_options(name):
    kern = KERNELS[name]
    step = {"fa4-sm90": sm90.online_softmax, "fa4-sm100": sm100.softmax_step}[name]
    fields = [f.name for f in dataclasses.fields(kern.options_type)]
    params = inspect.signature(step).parameters
    assert kern.step_knobs == tuple(n for n in fields if n in params) and kern.step_knobs
    assert set(kern.step_knobs) <= set(kern.softmax_knobs) <= set(fields)


@pytest.mark.parametrize("module, kernel, attr, overrides", [
    (sm100, "fa4-sm100", "softmax_step",
     dict(rescale_threshold=4.0, max_offset=1, poly_degree=4, fused_bias=False, ex2_emu_freq=16)),
    (sm90, "fa4-sm90", "online_softmax", dict(ffma_exponent=False)),
])
def test_the_kernel_passes_each_step_knob_by_name(monkeypatch, attention_case, module, kernel, attr, overrides):
    seen = []
    real = getattr(module, attr)

    def spy(*args, **kwargs):
        seen.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, attr, spy)
    q, k, v = attention_case(seqlen_q=64, seqlen_k=256, heads=1, head_dim=64, seed=2)
    res = forward(q, k, v, kernel=kernel, **overrides)
    assert seen
    for n in KERNELS[kernel].step_knobs:
        assert all(kw[n] == getattr(res.options, n) for kw in seen), n
    for n, value in overrides.items():
        assert getattr(res.options, n) == value


def test_knob_table_lists_every_field_of_every_kernel():
    rows = {line.split()[0]: line for line in knob_table().splitlines()[1:]}
    for kern in KERNELS.values():
        for f in dataclasses.fields(kern.options_type):
            assert kern.name in rows[f.name], f.name
    assert "softmax step" in rows["rescale_threshold"] and "column rule" in rows["ex2_emu_freq"]


def _bf16(shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(torch.bfloat16)


def test_forward_torch_refuses_a_knob_it_does_not_run_by_name():
    q = _bf16((1, 64, 2, 64))
    # SM90's FMUL + FADD exponent is not in the torch backend: refused, not silently run as FFMA
    with pytest.raises(ValueError, match=r"^ffma_exponent=False: not implemented by forward_torch \(FA4 runs "
                                         r"ffma_exponent=True here\)"):
        forward_torch(q, q, q, kernel="fa4-sm90", ffma_exponent=False)
    # FA4's own value, given explicitly, is no knob change
    forward_torch(q, q, q, kernel="fa4-sm90", ffma_exponent=True)
    # the Triton kernel leaves the bias to Triton's contraction: the unfused bias runs in torch only
    with pytest.raises(ValueError, match="^fused_bias=False: not implemented by backend='triton'"):
        forward_torch(q, q, q, kernel="fa4-sm100", fused_bias=False, backend="triton")


def test_forward_torch_runs_fused_bias_false():
    q, k, v = _bf16((1, 200, 2, 64), 1) * 3, _bf16((1, 300, 2, 64), 2), _bf16((1, 300, 2, 64), 3)
    got = forward_torch(q, k, v, fused_bias=False, causal=True, kernel="fa4-sm100")
    assert got.options.fused_bias is False
    arrays = [x.view(torch.int16).numpy().view(ml_dtypes.bfloat16) for x in (q, k, v)]
    assert_torch_tracks(got, forward(*arrays, fused_bias=False, causal=True, kernel="fa4-sm100"))


def test_the_twin_refuses_a_knob_it_does_not_run_by_name():
    q = np.ones((1, 64, 2, 64), ml_dtypes.bfloat16)
    why = twin.refusal(plan(q, q, q, kernel="fa4-sm90", ffma_exponent=False))
    assert why.startswith("ffma_exponent=False: not implemented by the GPU twin")
    assert twin.refusal(plan(q, q, q, kernel="fa4-sm100", fused_bias=False, is_sm103=True)) is None


def test_the_bound_refuses_a_knob_it_does_not_model(monkeypatch, attention_case):
    q, k, v = attention_case(seqlen_q=64, seqlen_k=64, heads=1, head_dim=64)
    bound_mod.attention_error_bound(q, k, v, kernel="fa4-sm100", fused_bias=False)
    # a knob outside MODELLED_KNOBS (as a new knob without its bound term would be) is refused by name
    monkeypatch.setattr(bound_mod, "MODELLED_KNOBS", bound_mod.MODELLED_KNOBS - {"fused_bias"})
    with pytest.raises(ValueError, match="^fused_bias=False: not implemented by attention_error_bound"):
        bound_mod.attention_error_bound(q, k, v, kernel="fa4-sm100", fused_bias=False)
    bound_mod.attention_error_bound(q, k, v, kernel="fa4-sm100", fused_bias=True)


def test_knob_refusal_compares_with_fa4s_choice_for_the_call():
    q = np.ones((1, 300, 2, 128), ml_dtypes.bfloat16)
    p = plan(q, q, q, kernel="fa4-sm100", is_sm103=True)
    # is_sm103 picks another tuning entry: still a knob FA4 does not run on a B200 by itself
    assert p.kernel.knob_refusal(p, set(), who="x").startswith("is_sm103=True: not implemented by x")
    p = plan(q, q, q, kernel="fa4-sm100", ex2_emu_freq=plan(q, q, q, kernel="fa4-sm100").opts.ex2_emu_freq)
    assert p.kernel.knob_refusal(p, set(), who="x") is None
    assert kernels_mod.SM100.knob_refusal(p, {"ex2_emu_freq"}, who="x") is None


def test_bounds_attention_has_a_flag_per_softmax_knob(capsys):
    shape = ["--shape", "1,64,1,64"]
    assert main(["bounds", "attention", "--kernel", "fa4-sm100", "--fused-bias", "false", "--max-offset", "1",
                 *shape]) == 0
    assert "violations 0 of 4096" in capsys.readouterr().out
    assert main(["bounds", "attention", "--kernel", "fa4-sm100", "--max-offset", "8", "--rescale-threshold", "200",
                 *shape]) == 2
    assert "max_offset + rescale_threshold must stay below" in capsys.readouterr().err
