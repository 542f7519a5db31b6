"""FA4 SM100's lazy-rescale rule in Triton, for the Triton backend (imported only when Triton runs).

A module of its own so that ``triton.language`` is among the jit function's globals, where Triton's CPU
interpreter looks for it. The specification is :func:`fa4num.softmax.lazy.lazy_rescale`.
"""
import triton
import triton.language as tl


@triton.jit
def update_row_max(m, blk, sl2, threshold, first):
    """``softmax.py`` ``SoftmaxSm100.update_row_max``: the max stored after the block. Keep the stale max unless
    the new one exceeds it by more than rescale_threshold (log2 units); the first block only sets it;
    tl.maximum ignores a NaN operand, as max.f32 does; a tie of the zeros is made +0 in either order, as max.f32
    orders them (on the GPU tl.maximum is max.f32 already; the CPU interpreter's numpy maximum is not)."""
    new = tl.maximum(m, blk)
    new = tl.where(m == blk, tl.where(m.to(tl.int32, bitcast=True) < 0, blk, m), new)   # -0 vs +0: the +0
    new_safe = tl.where(new == float("-inf"), 0.0, new)
    keep = (threshold > 0) & ((m - new_safe) * sl2 >= -threshold)
    return tl.where(first, blk, tl.where(keep, m, new))
