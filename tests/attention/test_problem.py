"""plan(): FA4's call checked once, for every consumer (forward, backward, forward_torch, the fp64 reference, the
bound); the KERNELS registry; the problem= convention."""
import dataclasses

import ml_dtypes
import numpy as np
import pytest

from fa4num.attention import KERNELS, Problem, backward, forward, plan
from fa4num.attention.config import sm100_defaults
from fa4num.attention.reference import attention_fp64, backward_fp64
from fa4num.bounds import attention_error_bound
from fa4num.bounds.validate import check


def _qkv(sq=20, sk=20, h=2, hk=2, d=64, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((1, s, n, d)).astype(ml_dtypes.bfloat16)
                 for s, n in ((sq, h), (sk, hk), (sk, hk)))


def _call(entry, **kw):
    q, k, v = _qkv()
    if entry == "forward":
        return forward(q, k, v, **kw)
    if entry == "backward":
        return backward(q, k, v, q, q, np.zeros((1, 2, 20), np.float32), **kw)
    if entry == "bound":
        return attention_error_bound(q, k, v, **kw)
    if entry == "attention_fp64":
        return attention_fp64(q, k, v, **kw)
    return plan(q, k, v, **kw)


ENTRIES = ["plan", "forward", "backward", "bound"]
WRONG_TYPES = {
    # a string is truthy: causal="no" would run causal
    "causal-str": (dict(causal="no"), "causal must be True or False"),
    "causal-int": (dict(causal=1), "causal must be True or False"),
    "scale-str": (dict(softmax_scale="0.1"), "softmax_scale must be None or a real number"),
    "scale-bool": (dict(softmax_scale=True), "softmax_scale must be None or a real number"),
    "softcap-str": (dict(softcap="30"), "softcap must be a finite float"),
    "pack_gqa-str": (dict(pack_gqa="yes"), "pack_gqa must be None, True or False"),
    "num_splits-float": (dict(num_splits=1.0), "num_splits must be an int"),
    "max_seqlen-str": (dict(max_seqlen_q="40"), "max_seqlen_q must be None or an int"),
}


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("bad", sorted(WRONG_TYPES))
def test_wrong_types_are_refused_not_coerced(entry, bad):
    kw, match = WRONG_TYPES[bad]
    with pytest.raises(TypeError, match=match):
        _call(entry, **kw)


@pytest.mark.parametrize("bad", ["causal-str", "scale-str", "softcap-str"])
def test_the_reference_refuses_the_same_types(bad):
    kw, match = WRONG_TYPES[bad]
    with pytest.raises(TypeError, match=match):
        _call("attention_fp64", **kw)


def test_numpy_scalars_are_accepted():
    q, k, v = _qkv()
    a = forward(q, k, v, causal=np.bool_(True), softmax_scale=np.float32(0.125), num_splits=np.int64(1))
    b = forward(q, k, v, causal=True, softmax_scale=0.125)
    assert np.array_equal(a.out.view(np.uint16), b.out.view(np.uint16))


@pytest.mark.parametrize("lse_dtype", [np.float16, np.float64, ml_dtypes.bfloat16])
def test_backward_refuses_an_lse_that_is_not_float32(lse_dtype):
    q, k, v = _qkv()
    fw = forward(q, k, v)
    with pytest.raises(ValueError, match="lse must be float32"):
        backward(q, k, v, fw.out, q, fw.lse.astype(lse_dtype))
    with pytest.raises(ValueError, match=r"lse must be float32 of shape \(1, 2, 20\)"):
        backward(q, k, v, fw.out, q, fw.lse[:, :1])


def test_backward_refuses_what_steers_the_forward_only():
    q, k, v = _qkv()
    fw = forward(q, k, v, kernel="fa4-sm100")
    with pytest.raises(ValueError, match=r"\['rescale_threshold'\] steer the forward only"):
        backward(q, k, v, fw.out, q, fw.lse, kernel="fa4-sm100", rescale_threshold=0.0)
    with pytest.raises(ValueError, match="num_splits is not supported by FA4's backward"):
        backward(q, k, v, fw.out, q, fw.lse, kernel="fa4-sm100", num_splits=2)
    with pytest.raises(TypeError, match="deterministic must be True or False"):
        backward(q, k, v, fw.out, q, fw.lse, deterministic="no")


def test_problem_convention_gives_the_same_bits():
    q, k, v = _qkv(sq=40, sk=70, h=4, hk=2)
    kw = dict(causal=True, kernel="fa4-sm100", window_size=(16, None), learnable_sink=np.float32([0.5, 0, 1, -1]))
    p = plan(q, k, v, **kw)
    a, b = forward(q, k, v, **kw), forward(problem=p)
    assert np.array_equal(a.out.view(np.uint16), b.out.view(np.uint16)) and np.array_equal(a.lse, b.lse)
    ga = backward(q, k, v, a.out, q, a.lse, **kw)
    gb = backward(out=a.out, dout=q, lse=a.lse, problem=p)
    assert all(np.array_equal(x.view(np.uint16), y.view(np.uint16)) for x, y in ((ga.dq, gb.dq), (ga.dk, gb.dk)))
    ba, bb = attention_error_bound(q, k, v, **kw), attention_error_bound(problem=p)
    assert np.array_equal(ba.out, bb.out)
    ra, rb = attention_fp64(q, k, v, **kw), attention_fp64(problem=p)
    assert np.array_equal(ra[0], rb[0]) and np.array_equal(ra[1], rb[1])
    fa, fb = backward_fp64(q, k, v, q, **kw), backward_fp64(dout=q, problem=p)
    assert all(np.array_equal(getattr(fa, n), getattr(fb, n)) for n in ("dq", "dk", "dv"))
    assert (fa.dsink is None) == (fb.dsink is None) and (fa.dsink is None or np.array_equal(fa.dsink, fb.dsink))
    ca, cb = check(q, k, v, a.out, a.lse, **kw), check(out=a.out, lse=a.lse, problem=p)
    assert (ca.out_violations, ca.max_bound, ca.kernel) == (cb.out_violations, cb.max_bound, cb.kernel)
    with pytest.raises(TypeError, match="not both"):
        attention_fp64(problem=p, causal=True)
    with pytest.raises(TypeError, match="not both"):
        backward_fp64(q, dout=q, problem=p)
    with pytest.raises(TypeError, match="not both"):
        forward(q, k, v, problem=p)
    with pytest.raises(TypeError, match="not both"):
        forward(problem=p, causal=False)
    with pytest.raises(TypeError, match="problem must be a Problem"):
        forward(problem={"causal": True})


def test_problem_is_frozen_and_resolved_once():
    q, k, v = _qkv()
    p = plan(q, k, v, kernel="fa4-sm100", softmax_scale=0.3, ex2_emu_freq=8)
    assert isinstance(p, Problem) and p.kernel is KERNELS["fa4-sm100"]
    assert p.opts.ex2_emu_freq == 8 and p.softmax_scale == 0.3 and p.softmax_scale_f32 == np.float32(0.3)
    with pytest.raises(AttributeError):
        p.softmax_scale = 1.0


def test_bound_uses_the_forwards_options_pack_gqa_false():
    """The bug of three parsers: with GQA on SM100 and pack_gqa=False the forward runs ex2_emu_freq 16 (no
    pack-GQA frequency), the old bound parser dropped pack_gqa and bounded freq 10's columns instead."""
    q, k, v = _qkv(sq=64, sk=256, h=4, hk=1, d=128)
    fw = forward(q, k, v, kernel="fa4-sm100", pack_gqa=False)
    default = sm100_defaults(dtype="bfloat16", head_dim=128, causal=False, seqlen_q=64, qhead_per_kvhead=4)
    assert fw.options.ex2_emu_freq == 16 != default.ex2_emu_freq
    b = attention_error_bound(q, k, v, kernel="fa4-sm100", pack_gqa=False)
    assert b.options["ex2_emu_freq"] == fw.options.ex2_emu_freq and b.options["pack_gqa"] is False
    err = np.abs(fw.out.astype(np.float64) - b.out_exact)
    assert (err <= b.out).all()


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_kernel_registry(name):
    kern = KERNELS[name]
    assert kern.name == name and "bfloat16" in kern.dtypes
    q, k, v = _qkv()
    p = plan(q, k, v, kernel=name)
    assert type(p.opts) is type(kern.defaults(p)) and p.opts.tile_n == kern.defaults(p).tile_n
    # the knobs studies vary (fa4num.study.studies.KNOB_NAMES) are fields of the kernel's options
    assert kern.softmax_knobs and set(kern.softmax_knobs) <= {f.name for f in dataclasses.fields(p.opts)}
    with pytest.raises(ValueError, match=f"kernel {name!r}"):
        kern.check_dtype("float32")
    with pytest.raises(ValueError, match="kernel must be one of"):
        plan(q, k, v, kernel=name.upper())


def test_bound_refuses_what_it_does_not_model():
    q, k, v = _qkv(d=64)
    with pytest.raises(ValueError, match="num_splits != 1: not modelled"):
        attention_error_bound(q, k, v, kernel="fa4-sm100", num_splits=2)


def test_no_code_compares_kernel_names():
    """Kernels are objects of KERNELS: a comparison with a kernel name (``kernel == "fa4-sm90"``) would make any
    third kernel silently behave as one of these two."""
    import pathlib
    import re
    import fa4num
    pattern = re.compile(r"""(==|!=)\s*["']fa4-sm|["']fa4-sm\w*["']\s*(==|!=)|kernel\s*(==|!=)""")
    found = [f"{p.name}:{i}: {line.strip()}" for p in pathlib.Path(fa4num.__file__).parent.rglob("*.py")
             for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert not found, "\n".join(found)
