"""FA4 SM100's lazy-rescale rule, written once: this module is the specification.

``flash_attn/cute/softmax.py`` ``SoftmaxSm100.update_row_max`` (called per KV block from ``flash_fwd_sm100.py``
``softmax_step``): the stored row max moves up only when the block's max exceeds it by more than
``rescale_threshold`` in log2 units; otherwise the stale max is kept and neither O nor the row sum is rescaled.
In fp32, as the kernel computes it (one RN per operation)::

    m_new     = max.f32(m_old, m_blk)          (a NaN operand is ignored; the first block: m_new = m_blk)
    m_safe    = 0 if m_new == -inf else m_new
    acc_scale_ = RN(RN(m_old - m_safe) * scale_log2)          (FADD, FMUL; not on the first block)
    keep      = rescale_threshold > 0 and acc_scale_ >= -rescale_threshold    (FSETP.GE: NaN compares false)
    keep      -> m_new = m_safe = m_old  (and acc_scale = 1: the correction warps see a factor of 1.0)

The kernel takes the decision per thread (one row each) and the warp ballots whether any of its 32 rows
rescales; a lane whose factor is 1.0 leaves O unchanged, so the ballot is invisible in the bits and the rule
is per row. :func:`lazy_rescale` is the scalar form (numba, callable from the fused kernels);
:func:`lazy_rescale_rows` applies it over arrays of rows. Every other copy (the numpy and numba SM100 paths,
the torch and Triton backends, ``fa4num.study.skip``, the PTX twin in ``experiments/gpu``) calls it or is
tested against it bit for bit (``tests/softmax/test_lazy_rule.py``).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ._ops import _fmax


@njit(cache=True, nogil=True, inline="always")
def lazy_rescale(m_old, m_blk, scale_log2, rescale_threshold, is_first):
    """One row's ``update_row_max`` decision (``softmax.py`` ``SoftmaxSm100.update_row_max``), the reference.

    All values float32 (numba scalars or numpy float32); the arithmetic is one RN fp32 operation per step as
    in the module docstring. Compiled by numba, so the fused kernels inline it; callable from Python as well.

    Parameters
    ----------
    m_old : float32
        The stored (possibly stale) row max before this block; -inf before the row's first block.
    m_blk : float32
        This block's row max (``fmax_reduce`` of the S row, masked entries -inf).
    scale_log2 : float32
        softmax_scale * log2(e) (``fa4num.softmax.scale_log2_of``).
    rescale_threshold : float32
        FA4's ``rescale_threshold`` (log2 units); 0 disables the lazy branch.
    is_first : bool
        The row's first KV block (FA4's ``is_first``): the max is set, nothing is compared.

    Returns
    -------
    (m_stored, m_safe, acc_scale_, keep) : (float32, float32, float32, bool)
        The max the row stores after the block, the max the exponent subtracts (0 for an all -inf row), the
        rescale exponent RN(RN(m_old - m_safe) * scale_log2) that ex2 turns into O's factor (0 on the first
        block, where no factor is applied), and whether the stale max was kept (the factor is then 1).

    Examples
    --------
    >>> import numpy as np
    >>> f = np.float32
    >>> lazy_rescale(f(10), f(14), f(2), f(8), False)      # grew by 4 * 2 = 8 log2 units: kept (>=)
    (10.0, 10.0, -8.0, True)
    >>> lazy_rescale(f(10), f(14.5), f(2), f(8), False)    # grew by 9: rescaled
    (14.5, 14.5, -9.0, False)
    """
    m_new = m_blk if is_first else _fmax(m_old, m_blk)
    m_safe = np.float32(0) if m_new == -np.inf else m_new
    if is_first:
        return m_new, m_safe, np.float32(0), False
    acc_scale_ = (m_old - m_safe) * scale_log2
    keep = rescale_threshold > 0 and acc_scale_ >= -rescale_threshold
    if keep:
        return m_old, m_old, acc_scale_, True
    return m_new, m_safe, acc_scale_, False


@njit(cache=True, nogil=True)
def _rows(m_old, m_blk, scale_log2, rescale_threshold, is_first, m_stored, m_safe, acc_scale_, keep):
    for i in range(m_old.shape[0]):
        m_stored[i], m_safe[i], acc_scale_[i], keep[i] = lazy_rescale(m_old[i], m_blk[i], scale_log2,
                                                                      rescale_threshold, is_first)


def lazy_rescale_rows(m_old, m_blk, *, scale_log2, rescale_threshold, is_first: bool):
    """:func:`lazy_rescale` over rows: the vectorised form of the reference rule.

    Parameters
    ----------
    m_old, m_blk : array_like of float32, shape (R,)
        Stored maxima before the block and the block's row maxima.
    scale_log2, rescale_threshold : float
        Rounded to float32 first, as the kernel receives them.
    is_first : bool

    Returns
    -------
    (m_stored, m_safe, acc_scale_, keep) : float32, float32, float32 and bool arrays of shape (R,)

    Examples
    --------
    >>> import numpy as np
    >>> m, safe, a, keep = lazy_rescale_rows(np.float32([0, 0, -np.inf]), np.float32([3, 5, -np.inf]),
    ...                                      scale_log2=2.0, rescale_threshold=8.0, is_first=False)
    >>> m.tolist(), a.tolist(), keep.tolist()
    ([0.0, 5.0, -inf], [-6.0, -10.0, -inf], [True, False, False])
    """
    m_old = np.ascontiguousarray(m_old, dtype=np.float32).reshape(-1)
    m_blk = np.ascontiguousarray(m_blk, dtype=np.float32).reshape(-1)
    if m_old.shape != m_blk.shape:
        raise ValueError(f"m_old and m_blk must have the same length, got {m_old.shape[0]} and {m_blk.shape[0]}")
    r = m_old.shape[0]
    m_stored, m_safe, acc_scale_ = (np.empty(r, np.float32) for _ in range(3))
    keep = np.empty(r, np.bool_)
    _rows(m_old, m_blk, np.float32(scale_log2), np.float32(rescale_threshold), bool(is_first), m_stored, m_safe,
          acc_scale_, keep)
    return m_stored, m_safe, acc_scale_, keep
