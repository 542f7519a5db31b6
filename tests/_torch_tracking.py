"""What "forward_torch tracks the CPU forward" means, asserted in one place (used by tests/attention/test_torch.py and
tests/attention/test_torch_features.py): out within 2^-6 of the largest output and differing in under 5 % of elements,
the same finite LSE entries within 1e-4, and every lazy-rescale / exp2 counter identical."""
import numpy as np

COUNTERS = ("kv_blocks", "rescale_events", "rescales_done", "exp2_emulated", "exp2_mufu", "masked_by_window")


def assert_torch_tracks(fast, exact):
    o, e = fast.out.float().numpy(), exact.out.astype(np.float32)
    assert np.abs(o - e).max() <= 2.0 ** -6 * np.abs(e).max()
    assert (o != e).mean() < 0.05
    fin = np.isfinite(exact.lse)
    assert np.array_equal(np.isfinite(fast.lse.numpy()), fin)
    assert np.abs(fast.lse.numpy()[fin] - exact.lse[fin]).max() < 1e-4
    for c in COUNTERS:
        assert np.array_equal(getattr(fast.stats, c), getattr(exact.stats, c)), c
