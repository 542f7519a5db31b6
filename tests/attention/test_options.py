"""Bad feature options give the same clear ValueError, naming the argument, from every entry point that takes
them: forward, backward and the two fp64 references (issue 10's list: a window too large, a sink of the wrong
shape, cu_seqlens not increasing, softcap < 0). A window side wider than the sequence masks nothing; FA4 accepts
it, fa4num refuses it (pass None: the same bits, tested here), and a window as wide as the sequence is accepted."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from fa4num.attention import backward, forward
from fa4num.attention.masking import check_window_range, resolve_window
from fa4num.attention.reference import attention_fp64, backward_fp64

BF16 = ml_dtypes.bfloat16


def _inputs(varlen=False):
    rng = np.random.default_rng(0)
    shape = (40, 2, 64) if varlen else (1, 20, 2, 64)
    q, k, v, do = (rng.standard_normal(shape).astype(BF16) for _ in range(4))
    return q, k, v, do


def _call(entry, varlen=False, **kw):
    q, k, v, do = _inputs(varlen)
    if varlen:
        kw = {"cu_seqlens_k": np.int32([0, 20, 40]), **kw}
    if entry == "forward":
        return forward(q, k, v, **kw)
    if entry == "backward":
        lse = np.zeros((2, 40) if varlen else (1, 2, 20), np.float32)
        return backward(q, k, v, do, do, lse, **kw)
    if entry == "attention_fp64":
        return attention_fp64(q, k, v, **kw)
    return backward_fp64(q, k, v, do, **kw)


ENTRIES = ["forward", "backward", "attention_fp64", "backward_fp64"]
BAD = {
    # the sequences are 20 long: a left side above seqlen_k, or a right side above seqlen_q, masks nothing
    "window-left-wider-than-sequence": (dict(window_size=(21, 0)), r"window_size left must be in \[0, 20\] \(seqlen_k"),
    "window-right-wider-than-sequence": (dict(window_size=(3, 4096)),
                                         r"window_size right must be in \[0, 20\] \(seqlen_q"),
    "window-int32-max": (dict(window_size=(2 ** 31 - 100, 0)), r"window_size left must be in \[0, 20\]"),
    "window-negative-side": (dict(window_size=(-1, 4)), "window_size left must be >= 0"),
    "sink-wrong-shape": (dict(learnable_sink=np.zeros(3, np.float32)), r"learnable_sink .*shape \(heads,\) = \(2,\)"),
    "sink-not-float": (dict(learnable_sink=np.zeros(2, np.int32)), "learnable_sink must be a float array"),
    "softcap-negative": (dict(softcap=-1.0), "softcap must be a finite float >= 0"),
    "softcap-inf": (dict(softcap=float("inf")), "softcap must be a finite float >= 0"),
    "max-seqlen-short": (dict(max_seqlen_q=10), r"max_seqlen_q must be >= the longest sequence \(20\)"),
}


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("bad", sorted(BAD))
def test_bad_option_names_the_argument(entry, bad):
    kw, match = BAD[bad]
    with pytest.raises(ValueError, match=match):
        _call(entry, **kw)


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("cu", [[0, 41, 40], [5, 20, 40]])
def test_cu_seqlens_not_increasing(entry, cu):
    with pytest.raises(ValueError, match="cu_seqlens_q must start at 0 and be non-decreasing"):
        _call(entry, varlen=True, cu_seqlens_q=np.int32(cu))


@pytest.mark.parametrize("entry", ENTRIES)
def test_window_as_wide_as_the_sequence_is_accepted_and_equals_none(entry):
    """The widest accepted window (left = seqlen_k, right = seqlen_q) masks nothing: the same bits as no bound,
    which is what the refusal of a wider window tells the user to pass instead; a narrow one differs."""
    wide, full = _arrays(entry, _call(entry, window_size=(20, 20))), _arrays(entry, _call(entry))
    for a, b in zip(wide, full):
        assert np.array_equal(np.asarray(a).astype(np.float64), np.asarray(b).astype(np.float64))
    narrow = _arrays(entry, _call(entry, window_size=(3, 3)))
    assert not np.array_equal(np.asarray(narrow[0]).astype(np.float64), np.asarray(full[0]).astype(np.float64))


@pytest.mark.parametrize("entry", ENTRIES)
def test_window_bound_is_the_longest_sequence_not_max_seqlen(entry):
    """Varlen: a window between the shorter and the longer sequence still masks keys of the longer one and is
    accepted; the bound is the longest actual sequence, not a larger declared max_seqlen_k."""
    cu = np.int32([0, 12, 40])
    kw = dict(cu_seqlens_q=cu, cu_seqlens_k=cu, window_size=(25, 0))
    if entry in ("forward", "attention_fp64"):
        kw.update(max_seqlen_q=64, max_seqlen_k=64)
    _call(entry, varlen=True, **kw)
    with pytest.raises(ValueError, match=r"window_size left must be in \[0, 28\]"):
        _call(entry, varlen=True, **{**kw, "window_size": (29, 0)})


def test_window_past_int32_offsets_is_refused():
    """FA4 adds window sizes to Int32 row offsets: with sequences near 2^30 tokens even a window inside the
    sequence could wrap (checked on the function, since such arrays do not fit in memory)."""
    w = resolve_window(False, (1000, 0))
    check_window_range(w, seqlen_q=2 ** 20, seqlen_k=2 ** 20)
    with pytest.raises(ValueError, match="FA4 adds it to Int32 row offsets, which would wrap"):
        check_window_range(w, seqlen_q=2 ** 30, seqlen_k=2 ** 30)


def _arrays(entry, result):
    if entry == "forward":
        return result.out, result.lse
    if entry == "attention_fp64":
        return result
    return result.dq, result.dk, result.dv


def test_the_bound_checks_the_window_like_forward():
    """attention_error_bound takes forward's options and refuses the same windows; for varlen against the
    longest sequence (a window wider than the shorter sequence alone is accepted, as by forward)."""
    from fa4num.bounds import attention_error_bound
    q, k, v, _ = _inputs()
    with pytest.raises(ValueError, match=r"window_size left must be in \[0, 20\]"):
        attention_error_bound(q, k, v, window_size=(21, 0))
    qv, kv, vv, _ = _inputs(varlen=True)
    cu = np.int32([0, 12, 40])
    attention_error_bound(qv, kv, vv, cu_seqlens_q=cu, cu_seqlens_k=cu, window_size=(25, 0))
    with pytest.raises(ValueError, match=r"window_size left must be in \[0, 28\]"):
        attention_error_bound(qv, kv, vv, cu_seqlens_q=cu, cu_seqlens_k=cu, window_size=(29, 0))


@pytest.mark.parametrize("knob", [dict(rescale_threshold=4.0), dict(coeffs="fa4-deg3"), dict(rescale=4.0)])
def test_an_option_the_kernel_lacks_names_the_kernel(knob):
    # an SM100 knob on the default fa4-sm90 said "for this kernel", leaving the user to guess which kernel
    with pytest.raises(ValueError, match=rf"unknown option\(s\) \['{next(iter(knob))}'\] for kernel='fa4-sm90'"):
        _call("forward", **knob)
