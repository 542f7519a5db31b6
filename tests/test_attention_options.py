"""Bad feature options give the same clear ValueError, naming the argument, from every entry point that takes
them: forward, backward and the two fp64 references (issue 10's list: a window too large, a sink of the wrong
shape, cu_seqlens not increasing, softcap < 0); and a window wider than the sequence, which FA4 accepts, is
accepted everywhere and masks nothing."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from fa4num.attention import backward, forward
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
    # FA4 adds window sizes to Int32 row offsets: past 2^31 - 1 - seqlen_q - seqlen_k - 512 they would wrap
    "window-overflows-int32": (dict(window_size=(2 ** 31 - 100, 0)), r"window_size left must be in \[0, \d+\]"),
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
def test_window_wider_than_the_sequence_is_accepted_and_masks_nothing(entry):
    """FA4 accepts a window wider than the sequence (interface.py checks nothing; the mask then hides no key on
    that side), and models with a fixed window run on shorter sequences all the time: a ValueError here would
    refuse what the kernel computes. So it is accepted, and equals attention without that bound."""
    wide, full = _arrays(entry, _call(entry, window_size=(4096, 4096))), _arrays(entry, _call(entry))
    for a, b in zip(wide, full):
        assert np.array_equal(np.asarray(a).astype(np.float64), np.asarray(b).astype(np.float64))
    narrow = _arrays(entry, _call(entry, window_size=(3, 3)))
    assert not np.array_equal(np.asarray(narrow[0]).astype(np.float64), np.asarray(full[0]).astype(np.float64))


def _arrays(entry, result):
    if entry == "forward":
        return result.out, result.lse
    if entry == "attention_fp64":
        return result
    return result.dq, result.dk, result.dv
