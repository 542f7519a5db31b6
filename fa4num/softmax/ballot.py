"""What FA4 SM100's correction warps rescale, counted at the granularities the kernel acts at: written once.

``flash_fwd_sm100.py`` ``correction_loop``: the four correction warps of a CTA own the ``m_block_size`` = 128
rows of one q_stage tile, one row per thread (``tidx`` = the row in the stage tile, warp ``tidx // 32``). For
every KV block after the tile's first (``total_block_count - 1`` iterations per stage) each thread reads its
row's factor from ``sScale`` and the warp takes ``should_rescale = vote_ballot_sync(scale < 1.0) != 0``; when
it passes, ``correction_rescale`` multiplies all 32 rows' O (head_dim_v columns each, ``mul.rn.f32x2``), the
rows whose factor is 1.0 included. Rows are in the kernel's order: under pack_gqa the packed row
``query * qhead_per_kvhead + head`` of one KV head, so a warp mixes heads; q_stage = 2 and the 2-CTA tile
are two (four) such 128-row tiles side by side, so a warp is always 32 consecutive rows and a tile 128
consecutive rows of a (batch, KV head) row sequence counted from its first row.

Definitions (version :data:`SKIP_DEFINITION_VERSION`), all counted per row, over the *steps*: the (row, KV
block) pairs after the first block of the row's tile (of each split with split-KV):

- ``rescale_steps``: the steps. An always-rescale kernel (FA2 / FA3, FA4 on SM90: ``rescale_o`` every block)
  multiplies O on every step, ``rescale_steps * head_dim_v`` multiplies.
- a row *votes* on a step when its factor is below 1: ``acc_scale = ex2.approx.ftz(acc_scale_) < 1`` where the
  lazy rule (:func:`fa4num.softmax.lazy.lazy_rescale`) did not keep the stale max. ``rescales_row`` counts the
  row's votes, ``rescales_warp`` the steps where some row of its warp voted (the ballot: the row's O *is*
  multiplied then), ``rescales_tile`` the steps where some row of its 128-row tile voted (what a tile-wide
  decision would multiply; FA4 decides per warp).
- ``events_{row,warp,tile}``: the same for an eager kernel, FA4 with ``rescale_threshold = 0`` (a row votes
  when the true running max grew by more than MUFU's ex2 can tell from 1). The share the lazy rule avoids at
  a granularity is ``1 - rescales / events``; the share it skips against always-rescale ``1 - rescales /
  rescale_steps``.
- O-rescale work in multiplies = ``rescales_warp * head_dim_v`` (FA4 SM100), against ``rescale_steps *
  head_dim_v`` (always-rescale); rows past the end of a sequence (a partial last warp's idle lanes) are not
  counted on either side.

:func:`count_block` adds one KV block's votes to the counters; the CPU emulator (``fa4num.attention.forward``)
and the skip study's replay (``fa4num.study.skip``) both call it, on numpy arrays and on torch tensors.
:func:`vote_limit` turns the factor test into a test on ``acc_scale_`` for code that has no MUFU model.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

SKIP_DEFINITION_VERSION = 2     # 1: per-row events / rescales done only (fa4num.attention.AttentionStats)
WARP_ROWS = 32                  # rows per correction warp (one TMEM lane, one thread, per row)
TILE_ROWS = 128                 # rows per q_stage tile (m_block_size): the four correction warps
GRANULARITIES = {"row": 1, "warp": WARP_ROWS, "tile": TILE_ROWS}
COUNTERS = ("rescale_steps",) + tuple(f"{k}_{g}" for k in ("rescales", "events") for g in GRANULARITIES)


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch")


def group_any(flags, rows: int, *, row0: int = 0):
    """Per row: whether any row of its group of ``rows`` consecutive rows is set; groups start at the multiples
    of ``rows`` of the row index ``row0 + i`` (i along the last axis); partial groups hold the rows they have.

    Parameters
    ----------
    flags : numpy or torch bool array, (..., R)
    rows : int
        Group size (1: the flags themselves).
    row0 : int
        Row index of ``flags[..., 0]`` in its row sequence (an SM90 tile of 192 rows starts mid-group).

    Returns
    -------
    bool array of the same kind and shape

    Examples
    --------
    >>> import numpy as np
    >>> group_any(np.array([0, 0, 1, 0, 0], bool), 2).tolist()
    [False, False, True, True, False]
    >>> group_any(np.array([0, 0, 1, 0, 0], bool), 2, row0=1).tolist()   # groups (row0-1, 0), (1, 2), (3, 4)
    [False, True, True, False, False]
    """
    if rows == 1:
        return flags
    r = flags.shape[-1]
    front = row0 % rows
    back = -(front + r) % rows
    lead = flags.shape[:-1]
    if _is_torch(flags):
        import torch
        padded = torch.nn.functional.pad(flags, (front, back)) if front or back else flags
        anyg = padded.reshape(*lead, -1, rows).any(dim=-1)
        return anyg.repeat_interleave(rows, dim=-1)[..., front:front + r]
    padded = np.pad(flags, [(0, 0)] * len(lead) + [(front, back)]) if front or back else flags
    anyg = padded.reshape(*lead, -1, rows).any(axis=-1)
    return np.repeat(anyg, rows, axis=-1)[..., front:front + r]


def new_counters(shape, *, like=None) -> dict:
    """Zeroed :data:`COUNTERS` (int32), numpy arrays or, with ``like`` a torch tensor, tensors on its device."""
    if like is not None and _is_torch(like):
        import torch
        return {n: torch.zeros(shape, dtype=torch.int32, device=like.device) for n in COUNTERS}
    return {n: np.zeros(shape, np.int32) for n in COUNTERS}


def count_block(counters: dict, *, step, votes, events, row0: int = 0) -> None:
    """Add one KV block to ``counters`` (from :func:`new_counters`), in place.

    Parameters
    ----------
    counters : dict
        :data:`COUNTERS` -> int arrays (..., R), rows in the kernel's order (module docstring).
    step : bool array (..., R) or bool
        The block is a step of the row (after its tile's first block); the same for all rows of a tile.
    votes : bool array (..., R)
        The row's factor is below 1 (it votes in the ballot).
    events : bool array (..., R)
        The row would vote with rescale_threshold = 0.
    row0 : int
        Row index of the first row in its row sequence (:func:`group_any`).

    Examples
    --------
    >>> import numpy as np
    >>> c = new_counters(64)
    >>> v = np.zeros(64, bool); v[3] = True
    >>> count_block(c, step=True, votes=v, events=v | (np.arange(64) == 40))
    >>> [int(c[n].sum()) for n in ("rescales_row", "rescales_warp", "events_warp", "events_tile")]
    [1, 32, 64, 64]
    """
    votes = votes & step
    events = events & step
    counters["rescale_steps"] += step
    for g, rows in GRANULARITIES.items():
        counters[f"rescales_{g}"] += group_any(votes, rows, row0=row0)
        counters[f"events_{g}"] += group_any(events, rows, row0=row0)


def shares(totals: dict, *, head_dim_v: int) -> dict:
    """Skip shares and O-rescale work from summed counters ({name: int}, :data:`COUNTERS`).

    Returns
    -------
    dict
        ``avoided_share_{g}`` = 1 - rescales / events (NaN without events), ``skipped_share_{g}`` = 1 -
        rescales / rescale_steps (NaN without steps) for g in row, warp, tile; ``rescale_mults_ballot`` (the
        warp ballot's), ``rescale_mults_row`` (if each row decided alone), ``rescale_mults_always``
        (always-rescale), ``rescale_mults_eager`` (threshold 0, with the ballot) and
        ``skip_definition_version``.

    Examples
    --------
    >>> t = dict(rescale_steps=100, rescales_row=5, rescales_warp=20, rescales_tile=40, events_row=50,
    ...          events_warp=80, events_tile=90)
    >>> s = shares(t, head_dim_v=64)
    >>> s["avoided_share_row"], s["skipped_share_warp"], s["rescale_mults_ballot"]
    (0.9, 0.8, 1280)
    """
    def ratio(a, b):
        return 1 - a / b if b else float("nan")
    out = {}
    for g in GRANULARITIES:
        out[f"avoided_share_{g}"] = ratio(int(totals[f"rescales_{g}"]), int(totals[f"events_{g}"]))
        out[f"skipped_share_{g}"] = ratio(int(totals[f"rescales_{g}"]), int(totals["rescale_steps"]))
    out["rescale_mults_ballot"] = int(totals["rescales_warp"]) * head_dim_v
    out["rescale_mults_row"] = int(totals["rescales_row"]) * head_dim_v
    out["rescale_mults_always"] = int(totals["rescale_steps"]) * head_dim_v
    out["rescale_mults_eager"] = int(totals["events_warp"]) * head_dim_v
    out["skip_definition_version"] = SKIP_DEFINITION_VERSION
    return out


@lru_cache(maxsize=8)
def vote_limit(arch: str = "sm90", *, ftz: bool = True) -> np.float32:
    """The fp32 ``b`` with ``ex2.approx(.ftz)(x) < 1  <=>  x < b`` for x <= 0 under ``arch``'s MUFU model.

    The ballot tests the factor; code that replays the rule without a MUFU model (the skip study, on torch)
    tests ``acc_scale_ < vote_limit()`` instead: the same vote, since ex2 is monotone (``tests/softmax/
    test_ballot.py`` checks every fp32 around the limit). ``b`` is the most negative x whose ex2 is 1: a
    growth of the max by less than about 2^-24 log2 units leaves the factor at 1.0 and the row does not vote.

    Parameters
    ----------
    arch : str
        A MUFU model (``fa4num.hw.mufu_model``); SM100's emulation uses the H200 tables ("sm90").
    ftz : bool
        ``ex2.approx.ftz`` (SM100) or ``ex2.approx`` (SM103's ``cute.math.exp2``).

    Returns
    -------
    numpy.float32 (negative)

    Examples
    --------
    >>> -2.0 ** -23 < float(vote_limit()) < 0
    True
    """
    from fa4num import hw
    ex2 = hw.mufu_model(arch).ex2

    def is_one(bits):
        return bool(ex2(np.array([bits], np.uint32).view(np.float32), ftz=ftz)[0] == 1)

    # bit patterns of negative floats grow with |x|: bisect between -0 (ex2 = 1) and -1 (ex2 = 0.5)
    lo, hi = 0x80000000, int(np.float32(-1).view(np.uint32))
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if is_one(mid):
            lo = mid
        else:
            hi = mid
    return np.array([lo], np.uint32).view(np.float32)[0]
