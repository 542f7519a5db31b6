"""fa4num.softmax.ballot: the row / warp / tile groups and the vote test the skip study uses without a MUFU."""
import numpy as np
import pytest
import torch

from fa4num import hw
from fa4num.softmax import ballot


@pytest.mark.parametrize("rows", [1, 32, 128])
@pytest.mark.parametrize("row0", [0, 64, 100])
def test_group_any_numpy_torch_and_loop_agree(rows, row0):
    rng = np.random.default_rng(rows + row0)
    flags = rng.random((3, 300)) < 0.01
    got = ballot.group_any(flags, rows, row0=row0)
    got_t = ballot.group_any(torch.from_numpy(flags), rows, row0=row0).numpy()
    idx = (row0 + np.arange(300)) // rows
    want = np.stack([[f[idx == g].any() for g in idx] for f in flags])
    assert np.array_equal(got, want) and np.array_equal(got_t, want)


def test_count_block_counts_each_granularity():
    c = ballot.new_counters(256)
    votes = np.zeros(256, bool)
    votes[[5, 200]] = True
    events = votes.copy()
    events[40] = True
    ballot.count_block(c, step=True, votes=votes, events=events)
    ballot.count_block(c, step=False, votes=votes, events=events)      # the tile's first block: nothing counted
    tot = {n: int(v.sum()) for n, v in c.items()}
    assert tot["rescale_steps"] == 256 and tot["rescales_row"] == 2 and tot["events_row"] == 3
    assert tot["rescales_warp"] == 64 and tot["events_warp"] == 96
    assert tot["rescales_tile"] == 256 and tot["events_tile"] == 256


@pytest.mark.parametrize("ftz", [True, False])
def test_vote_limit_is_the_ex2_below_one_test(ftz):
    """Every fp32 within 2^16 ulps of the limit, and every 2^12-th pattern of [-1, -0]: ex2(x) < 1 <=> x < b."""
    b = ballot.vote_limit("sm90", ftz=ftz)
    ex2 = hw.mufu_model("sm90").ex2
    bits = int(np.float32(b).view(np.uint32))
    near = np.arange(bits - (1 << 16), bits + (1 << 16), dtype=np.int64)
    wide = np.arange(0x80000000, int(np.float32(-1).view(np.uint32)), 1 << 12, dtype=np.int64)
    x = np.concatenate([near, wide]).astype(np.uint32).view(np.float32)
    x = np.concatenate([x, np.float32([-np.inf, -0.0, 0.0])])
    assert np.array_equal(ex2(x, ftz=ftz) < 1, x < b)
