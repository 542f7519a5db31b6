"""How FA4 cuts one call into work, and the decisions that set its bits: :func:`plan_of` returns them as a
:class:`Plan` (tiles, q_stage, 1-/2-CTA, pack_gqa, the software-exp2 columns, every M block's KV-block ranges
and visiting order per split, the combine kernel's summation order), each with the reason FA4's rule gives.

The forward (:func:`fa4num.attention.forward`) runs from the same functions: :func:`head_groups` (which q heads
share an M tile), :func:`split_ranges` (the KV blocks of each split of an M block), :func:`visit_order` (the
order an M block visits them) and :func:`combine_order` (how the combine kernel sums the splits); the tile,
split and 2-CTA rules are the kernel's (:mod:`fa4num.attention.kernels`, :mod:`fa4num.attention.config`). No
rule has a second copy here, so a plan is the forward's schedule by construction.

Examples
--------
>>> import ml_dtypes, numpy as np
>>> from fa4num.attention import plan
>>> q = np.zeros((1, 1, 16, 256), ml_dtypes.bfloat16)
>>> k = np.zeros((1, 512, 16, 256), ml_dtypes.bfloat16)
>>> p = plan_of(plan(q, k, k, kernel="fa4-sm100"))
>>> p.ctas, p.ex2_emu_freq, len(p.emulated_columns)
(2, 14, 24)
>>> p.reasons["ctas"]
'one M block of 1 rows but hd256 decode grid 2 * 1 * 16 = 32 <= 148 SMs'
"""
from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass

import numpy as np

from . import masking as _masking
from .problem import Problem


# ---------------------------------------------------------------------------------------------- shared rules
def head_groups(kv_head: int, *, qhead_per_kvhead: int, pack_gqa: bool) -> list:
    """The q heads of KV head ``kv_head`` that share M tiles: all of them under pack-GQA (packed row = query *
    ratio + head offset, ``pack_gqa.py``), else one list per head.

    Parameters
    ----------
    kv_head : int
    qhead_per_kvhead : int
    pack_gqa : bool

    Returns
    -------
    list of lists of int

    Examples
    --------
    >>> head_groups(1, qhead_per_kvhead=3, pack_gqa=True), head_groups(1, qhead_per_kvhead=3, pack_gqa=False)
    ([[3, 4, 5]], [[3], [4], [5]])
    """
    heads = list(range(kv_head * qhead_per_kvhead, (kv_head + 1) * qhead_per_kvhead))
    return [heads] if pack_gqa and qhead_per_kvhead > 1 else [[h] for h in heads]


def split_ranges(m_block: int, *, opts, seqlen_q: int, seqlen_k: int, window, group: int, num_splits: int,
                 seqlen_k_per_split=None) -> tuple:
    """((n_block_min, n_block_max) per split) of M block ``m_block`` (``BlockInfo.get_n_block_min_max``,
    :func:`fa4num.attention.masking.n_block_range`); ``group`` q heads per packed row; ``seqlen_k_per_split``
    fixes the blocks per split (FA4's ``num_n_blocks_per_split = seqlen_k_per_split // tile_n``).

    Parameters
    ----------
    m_block : int
    opts : the kernel's resolved options (tile_m, tile_n)
    seqlen_q, seqlen_k : int
    window : fa4num.attention.masking.Window
    group : int
        q heads per packed row (1 without pack-GQA).
    num_splits : int
    seqlen_k_per_split : int, optional

    Returns
    -------
    tuple of (int, int)
        One (n_block_min, n_block_max) per split.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> from fa4num.attention.masking import resolve_window
    >>> split_ranges(1, opts=SimpleNamespace(tile_m=128, tile_n=128), seqlen_q=512, seqlen_k=512,
    ...              window=resolve_window(True), group=1, num_splits=1)
    ((0, 2),)
    """
    per = None if seqlen_k_per_split is None or num_splits == 1 else seqlen_k_per_split // opts.tile_n
    return tuple(_masking.n_block_range(m_block, tile_m=opts.tile_m, tile_n=opts.tile_n, seqlen_q=seqlen_q,
                                        seqlen_k=seqlen_k, window=window, qhead_per_kvhead_packgqa=group,
                                        split_idx=split, num_splits=num_splits, n_blocks_per_split=per)
                 for split in range(num_splits))


def visit_order(n_lo: int, n_hi: int, *, split_kv: bool, ascending: bool = False) -> list:
    """The KV blocks an M block (or one split of it) visits, in order: ``n_hi - 1`` first (with the sequence
    mask), then right to left (``flash_fwd_sm90.py`` ``mma``, ``flash_fwd_sm100.py`` ``softmax_loop``). An empty
    range runs one fully masked iteration of block ``n_hi - 1`` (-1: a block of zeros), except a split of a
    split-KV call, which ``has_kv_work`` skips (O = 0, LSE = -inf).

    Parameters
    ----------
    n_lo, n_hi : int
        (n_block_min, n_block_max).
    split_kv : bool
        The range is one split of a split-KV call.
    ascending : bool
        Left to right instead (the dedicated hd256 kernel of 4.0.0b22-b33, ``for step in range(start, end)``;
        an empty range runs block ``n_hi - 1`` masked, as the generic kernel's does).

    Returns
    -------
    list of int

    Examples
    --------
    >>> visit_order(0, 3, split_kv=False), visit_order(2, 2, split_kv=False), visit_order(2, 2, split_kv=True)
    ([2, 1, 0], [1], [])
    """
    if n_hi <= n_lo and split_kv:
        return []
    order = [n_hi - 1] + list(range(n_hi - 2, n_lo - 1, -1))
    return order[::-1] if ascending else order


def sparse_visits(mask_list, full_list) -> list:
    """The KV blocks a block-sparse M block visits: its mask blocks, then its full blocks, each list from its last
    entry to its first (``block_sparse_utils.py`` ``consume_block_sparse_loads`` on SM90,
    ``softmax_block_sparse_sm100`` on SM100), as (n, mask_mod applies, seqlen masked): the first block of each
    list is visited with seqlen masking, the rest without; the mask_mod runs on the mask blocks only.

    Parameters
    ----------
    mask_list, full_list : lists of int
        The block indices of FA4's ``mask_block_idx`` / ``full_block_idx`` row, ``*_block_cnt`` long.

    Returns
    -------
    list of (int, bool, bool)

    Examples
    --------
    >>> sparse_visits([0, 2], [1, 3])
    [(2, True, True), (0, True, False), (3, False, True), (1, False, False)]
    """
    out = []
    for blocks, use_mod in ((mask_list, True), (full_list, False)):
        out += [(n, use_mod, i == 0) for i, n in enumerate(reversed(blocks))]
    return out


def flex_visits(problem: Problem, m_block: int, *, batch: int, head: int, seqlen_q: int, seqlen_k: int,
                group: int) -> tuple:
    """The visits of M block ``m_block`` of one sequence and q head, one list per split: (n, mask_mod applies,
    seqlen masked) per KV block in visiting order. Dense calls: :func:`split_ranges` visited by
    :func:`visit_order`, the mask_mod on every block, seqlen masking on the first; block-sparse calls: the
    M block's sparse query block (first query row // block rows, ``sparse_tensor_m_block``) visited by
    :func:`sparse_visits`.

    Parameters
    ----------
    problem : Problem
    m_block, batch, head : int
    seqlen_q, seqlen_k : int
        The sequence's lengths.
    group : int
        q heads per packed row (1 without pack-GQA).

    Returns
    -------
    tuple of lists of (int, bool, bool)

    Examples
    --------
    >>> import ml_dtypes, numpy as np
    >>> from fa4num.attention import plan
    >>> q = np.zeros((1, 300, 1, 64), ml_dtypes.bfloat16)
    >>> flex_visits(plan(q, q, q, kernel="fa4-sm100"), 0, batch=0, head=0, seqlen_q=300, seqlen_k=300, group=1)
    ([(2, True, True), (1, True, False), (0, True, False)],)
    """
    opts = problem.opts
    sparse = None if problem.flex is None else problem.flex.block_sparse
    if sparse is not None:
        row = m_block * opts.tile_m // group
        return (sparse_visits(*sparse.lists(batch, head, row // sparse.block_size[0])),)
    split = problem.kernel.split_kv and opts.num_splits > 1
    out = []
    for lo, hi in split_ranges(m_block, opts=opts, seqlen_q=seqlen_q, seqlen_k=seqlen_k, window=problem.window,
                               group=group, num_splits=problem.num_splits,
                               seqlen_k_per_split=problem.seqlen_k_per_split):
        # the block with the sequence mask is n_hi - 1: visited first right to left, last by an ascending kernel
        out.append([(n, True, n == hi - 1) for n in visit_order(lo, hi, split_kv=split,
                                                                 ascending=problem.kernel.visit_ascending)])
    return tuple(out)


def combine_order(num_splits: int, head_dim_v: int) -> tuple[int, int, int]:
    """(tile_m, lanes, padded splits) of ``flash_fwd_combine.py``: 8 rows per CTA for head_dim_v > 64 (16
    otherwise), ``256 // tile_m`` lanes each summing splits lane, lane + lanes, ... before a shuffle butterfly,
    splits padded to 2^max(ceil(log2 num_splits), 4, 5 with tile_m 8).

    Parameters
    ----------
    num_splits, head_dim_v : int

    Returns
    -------
    (tile_m, lanes, padded splits) : (int, int, int)

    Examples
    --------
    >>> combine_order(3, 128), combine_order(40, 64)
    ((8, 32, 32), (16, 16, 64))
    """
    tile_m = 8 if head_dim_v > 64 else 16
    lanes = 256 // tile_m
    log_max = max(math.ceil(math.log2(num_splits)), 4, 5 if tile_m == 8 else 0)
    return tile_m, lanes, 1 << log_max


# ---------------------------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class TilePlan:
    """One M tile of one sequence and KV head: its q heads, packed rows ``rows`` = [start, end) (row = query *
    len(heads) + head offset), the queries it holds, and per split the KV-block range and visiting order."""
    seq: int
    kv_head: int
    heads: tuple
    m_block: int
    rows: tuple
    queries: tuple          # [first, end) query indices in the sequence
    splits: tuple           # ((n_block_min, n_block_max), ...) per split
    visits: tuple           # (blocks in visiting order, ...) per split


@dataclass(frozen=True)
class Plan:
    """The decisions of one call that set its bits (:func:`plan_of`).

    ``tile_m`` counts the rows that share one KV-block range (q_stage x 128 x CTAs on SM100); ``ctas`` is 2 for
    SM100's 2-CTA clusters; ``emulated_columns`` the columns of a KV block whose exp2 runs in software;
    ``num_splits``/``seqlen_k_per_split`` split-KV; ``combine`` (tile_m, lanes, padded splits) of the combine
    kernel when split; ``reasons`` FA4's rule behind each choice; ``tiles`` every M tile's ranges and order.
    """
    kernel: str
    tile_m: int
    tile_n: int
    q_stage: int
    ctas: int
    pack_gqa: bool
    num_splits: int
    seqlen_k_per_split: object
    emulated_columns: tuple
    ex2_emu_freq: int
    ex2_emu_res: int
    ex2_emu_start_frg: int
    rescale_threshold: object   # SM100's lazy-rescale threshold; None for eager rescaling (SM90)
    combine: object             # (tile_m, lanes, padded splits) or None
    reasons: dict
    tiles: tuple

    DECISIONS = ("kernel", "tile_m", "tile_n", "q_stage", "ctas", "pack_gqa", "num_splits", "seqlen_k_per_split",
                 "emulated_columns", "rescale_threshold", "combine")

    def decisions(self) -> dict:
        """The call-wide decisions (:attr:`DECISIONS`) as a dict."""
        return {n: getattr(self, n) for n in self.DECISIONS}

    def tile_of(self, seq: int, query: int, head: int) -> TilePlan:
        """The tile holding query ``query`` of head ``head`` in sequence ``seq``; KeyError if none does."""
        for t in self._by_head.get((seq, head), ()):
            row = query * len(t.heads) + t.heads.index(head)
            if t.rows[0] <= row < t.rows[1]:
                return t
        raise KeyError(f"no tile holds sequence {seq}, query {query}, head {head}")

    @functools.cached_property
    def _by_head(self) -> dict:
        index = {}
        for t in self.tiles:
            for h in t.heads:
                index.setdefault((t.seq, h), []).append(t)
        return index

    def as_dict(self) -> dict:
        d = asdict(self)
        d["emulated_columns"] = list(self.emulated_columns)
        return d


def plan_of(problem: Problem) -> Plan:
    """The bit-setting decisions of ``problem``'s forward, from the kernel's own rules.

    Parameters
    ----------
    problem : Problem
        :func:`fa4num.attention.plan` of the call (its inputs are not read).

    Returns
    -------
    Plan
        Tiles, q_stage, CTAs, pack_gqa, software-exp2 columns, splits, combine order, the reasons, and every M
        tile's KV-block ranges and visiting order.

    Examples
    --------
    >>> import ml_dtypes, numpy as np
    >>> from fa4num.attention import plan
    >>> q = np.zeros((1, 300, 2, 128), ml_dtypes.bfloat16)
    >>> p = plan_of(plan(q, q, q, causal=True))
    >>> p.tile_m, p.tile_n, [t.visits for t in p.tiles if t.heads == (0,)]
    (128, 128, [((0,),), ((1, 0),), ((2, 1, 0),)])
    """
    if not isinstance(problem, Problem):
        raise TypeError(f"problem must be a Problem from fa4num.attention.plan, got {type(problem).__name__}")
    kern, opts = problem.kernel, problem.opts
    emu = kern.emulated_columns(opts)
    cols = () if emu is None else tuple(int(c) for c in np.flatnonzero(emu))
    ns = problem.num_splits
    g_all = problem.qhead_per_kvhead
    d = kern.decisions(problem)
    q_stage, ctas, threshold, reasons = d["q_stage"], d["ctas"], d["rescale_threshold"], dict(d["reasons"])
    reasons["pack_gqa"] = ("pack_gqa given" if problem.pack_gqa_given is not None else
                           f"FA4's default for {g_all} q heads per KV head")
    w = problem.window
    mask = "a local window" if w.local else "causal" if w.causal else "no mask"
    reasons["tile"] = f"{kern.name} tile for head dims ({problem.head_dim}, {problem.head_dim_v}) with {mask}" + (
        f", overridden by {sorted(set(problem.overrides) & {'tile_m', 'tile_n'})}"
        if set(problem.overrides) & {"tile_m", "tile_n"} else "")
    fl = problem.flex
    if fl is not None and fl.block_sparse is not None:
        reasons["visits"] = ("block-sparse: each M block visits its mask blocks, then its full blocks, each list "
                             "from its last entry to its first (block_sparse_utils.py), the mask_mod on mask blocks "
                             "only; the dense call of the same mask_mod visits every KV block right to left with "
                             "the mask_mod. Their bits differ where a row's nonempty blocks come in another order "
                             "(full blocks left of a mask block: document masks), or a listed full block is not "
                             "full; fa4num.attention.same_bits compares the two per row")
    elif fl is not None and fl.mask_mod is not None:
        reasons["visits"] = ("dense mask_mod: every KV block right to left with the mask_mod (causal and "
                             "window_size do not prune blocks; FA4 drops them with a mask_mod)")
    tiles = []
    split = kern.split_kv and ns > 1
    for seq in problem.seqs:
        sq, sk = seq.q.shape[0], seq.k.shape[0]
        if sq == 0 or sk == 0:
            continue    # no tile runs: out 0, LSE -inf (or the sink)
        for kvh in range(problem.heads_kv):
            for grp in head_groups(kvh, qhead_per_kvhead=g_all, pack_gqa=opts.pack_gqa):
                ng = len(grp)
                nrows = sq * ng
                for mb in range(-(-nrows // opts.tile_m)):
                    r0, r1 = mb * opts.tile_m, min((mb + 1) * opts.tile_m, nrows)
                    rngs = split_ranges(mb, opts=opts, seqlen_q=sq, seqlen_k=sk, window=problem.window, group=ng,
                                        num_splits=ns, seqlen_k_per_split=problem.seqlen_k_per_split)
                    visits = flex_visits(problem, mb, batch=seq.batch, head=grp[0], seqlen_q=sq, seqlen_k=sk,
                                         group=ng)
                    tiles.append(TilePlan(seq.batch, kvh, tuple(grp), mb, (r0, r1), (r0 // ng, -(-r1 // ng)),
                                          rngs, tuple(tuple(n for n, _, _ in v) for v in visits)))
    return Plan(kernel=kern.name, tile_m=opts.tile_m, tile_n=opts.tile_n, q_stage=q_stage, ctas=ctas,
                pack_gqa=bool(opts.pack_gqa), num_splits=ns, seqlen_k_per_split=problem.seqlen_k_per_split,
                emulated_columns=cols, ex2_emu_freq=getattr(opts, "ex2_emu_freq", 0),
                ex2_emu_res=getattr(opts, "ex2_emu_res", 0), ex2_emu_start_frg=getattr(opts, "ex2_emu_start_frg", 0),
                rescale_threshold=threshold, combine=combine_order(ns, problem.head_dim_v) if split else None,
                reasons=reasons, tiles=tuple(tiles))


__all__ = ["Plan", "TilePlan", "plan_of", "head_groups", "split_ranges", "visit_order", "combine_order",
           "sparse_visits", "flex_visits"]
