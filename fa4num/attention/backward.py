"""``backward``: FA4's attention backward pass (SM90, as the H200 runs it), emulated on the CPU bit for bit.

FA4 b36 runs three kernels (``interface.py`` ``_flash_attn_bwd``); this module follows each step:

1. Preprocess (``flash_bwd_preprocess.py`` ``FlashAttentionBackwardPreprocess.kernel``), per query row:
   ``D = rowsum(dO * O)`` in fp32 from the 16-bit O and dO. Each thread of a row holds 8 consecutive columns
   per 128-bit load (``threads_per_row = gmem_k_block_size / 8`` threads, ``gmem_k_block_size`` = 128, 64 or
   32 by the padded head_dim_v), folds its columns left to right into 0.0 (``TensorSSA.reduce``; a product of
   two 16-bit values is exact in fp32, so whether NVVM contracts it into an FMA does not matter), then
   ``utils.warp_reduce`` adds the threads' partials with a butterfly (``shfl.bfly`` offsets 1, 2, 4, ...).
   ``lse_log2 = RN(lse * LOG2_E)`` (0 for lse = -inf; padding rows get +inf, so their P is 0).
2. Main kernel (``flash_bwd_sm90.py`` ``FlashAttentionBackwardSm90``), one CTA per KV block ``n_block`` of
   ``tile_n`` keys, visiting the query blocks ``m_block_min .. m_block_max - 1`` in increasing order
   (``mma``, ``BlockInfo.get_m_block_min_max``); per block ``mma_one_m_block``:
     S  = Q K^T                  wgmma, fp32 accumulator, k16 steps over head_dim (``mma_qk_fn``);
     softcap (``score_mod``, before the mask): S <- softcap * tanh(RN(RN(S * scale) / softcap)) and the
          softmax uses scale_log2 = LOG2_E (``utils.create_softcap_scoremod``, ``fa4num.softmax.scoremod``);
     mask: key >= seqlen_k, causal / local window -> -inf (``mask.py`` ``AttentionMask.apply_mask``);
     P  = ex2.approx.ftz(fma.rn(S, scale_log2, -lse_log2))  (``cute.math.exp2(..., fastmath=True)``; the
          multiply-subtract is contracted to one FFMA);
     dP = dO V^T                 wgmma, k16 steps over head_dim_v (``mma_dov_fn``);
     dS = RN(P * RN(dP - D))     fp32, the fp32 P (not the 16-bit copy); with softcap then
          dS <- RN(dS * fma(-t, t, 1)), t the tanh of the unmodified score (``score_mod_bwd``);
     P and dS are rounded to the input dtype (``utils.cvt_f16``, RN) for the next three GEMMs:
     dV += P^T dO, dK += dS^T Q  wgmma chained over the m blocks in the same fp32 accumulator (k16 steps over
          the query rows: ``mma_pdo_fn``, ``mma_dsq_fn``);
     dQ_blk = dS K               wgmma from zero over the tile_n keys (``mma_dsk_fn``), then added in fp32
          (RN) into the dQaccum buffer with ``cp.reduce.async.bulk.add.f32`` (``dQaccum_store``).
   Deterministic mode orders those adds with a semaphore per m block: the KV block ``n_block`` waits for
   ``lock_value = n_block`` (increasing n) or, when ``spt`` = causal or local, for
   ``n_block_max(m_block) - 1 - n_block`` (decreasing n). Without it the order is whatever the CTAs reach.
   Epilogue (``epilogue_dKV``): without GQA dK = RN(acc_dK * softmax_scale) and dV = acc_dV are rounded to the
   input dtype; with GQA each query head adds its unscaled fp32 acc_dK / acc_dV into dK/dVaccum
   (bulk add, RN), heads in increasing order in deterministic mode (``lock_value = head % qhead_per_kvhead``).
3. Postprocess (``flash_bwd_postprocess.py``): dQ = RN(dQaccum * softmax_scale) -> dtype (RN); with GQA
   dK = RN(dKaccum * softmax_scale), dV = RN(dVaccum * 1.0) -> dtype. With a learnable sink the dQ postprocess
   also reduces dsink per head (:func:`dsink_sm90`; the sink is inside the LSE, so dq/dk/dv do not change).

Tiles: ``interface.py`` ``_tile_size_bwd_sm90`` (:func:`sm90_bwd_tile`). The tensor-core model is
``fa4num.hw.mma.mma_chain`` (MMA-Sim's Hopper fused dot-product-add, checked on the H200). A GEMM's result does
not depend on the thread layout (``SdP_swapAB`` etc. swap operands, not the k order), only on the k16 chunks,
which start at each m block (a multiple of 16 rows) or at the KV block's first key.

``kernel="fa4-sm100"``: Blackwell's backward (``flash_bwd_sm100.py`` ``FlashAttentionBackwardSm100``), emulated
from source, not run on a Blackwell GPU. Its per-element arithmetic is the SM90 one (``compute_loop``: packed
``fma_packed_f32x2(S, scale_log2, -lse_log2)`` then ``exp2(fastmath)`` = ex2.approx.ftz, no software exp2;
``sub_packed_f32x2`` / ``mul_packed_f32x2`` for dS, RN; ``cvt_f16``), the GEMMs are tcgen05 MMAs (the
``sm100`` accumulator of ``fa4num.hw.mma``), and the tile differs: tile_m = tile_n = 128 (``interface.py``), and
for head_dim >= 128 a 2-CTA cluster whose pair of KV blocks acts as one block of 256 keys: BlockInfo's
``tile_n * cluster_size``, the dQ MMA's reduction over 256 keys (``mma_tiler_dsk``) and one dQaccum add per
cluster (``dQacc_reduce``, ``_dq_semaphore_lock_value``: the same increasing / spt-decreasing order).
The preprocess and postprocess are the SM90 ones (hdim_multiple_of 32). MUFU.EX2 uses the H200 tables (no
Blackwell table is available). head_dim 256 runs a dedicated kernel (``sm100_hd256_*``) that is not emulated.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

import numpy as np

from fa4num import fp, hw
from fa4num.hw.mma import mma_chain
from fa4num.softmax import scoremod

from . import config, masking
from . import flex as _flex
from .kernels import BwdTile, sm90_bwd_tile, sm100_bwd_tile
from .problem import NP_DTYPES, Problem, check_bool, check_lse, given_or_plan, to_numpy

LOG2_E_F32 = np.float32(math.log2(math.e))   # utils.LOG2_E as the kernel's Float32 constant (0x3FB8AA3B)
# the kernel knobs the backward reads (the others steer the forward's softmax, which the backward recomputes
# from the LSE instead)
BACKWARD_OPTIONS = frozenset({"gemm", "mufu_arch", "tile_m", "tile_n", "use_2cta_instrs"})


@dataclass
class BackwardStats:
    """Per-row and per-key quantities of the emulated run (arrays shaped like ``lse``: (batch, heads, seqlen_q),
    or (heads, total_q) for varlen; key arrays (batch, heads, seqlen_k) / (heads, total_k))."""
    dpsum: np.ndarray        # float32 D = rowsum(dO * O), as the preprocess computes it
    lse_log2: np.ndarray     # float32 lse * log2(e) as the preprocess stores it (0 for lse = -inf)
    kv_blocks: np.ndarray    # int32 KV blocks whose dQ tile is added into the row's dQaccum
    q_blocks: np.ndarray     # int32 query blocks the key's KV block visits for this query head
    p_flushed: np.ndarray    # int32 visible keys whose recomputed P is 0 (ex2.approx.ftz underflow)

    def summary(self) -> dict:
        return {"kv_blocks": int(self.kv_blocks.sum()), "q_blocks": int(self.q_blocks.sum()),
                "p_flushed": int(self.p_flushed.sum()),
                "max_abs_dpsum": float(np.abs(self.dpsum).max(initial=0))}


@dataclass
class BackwardResult:
    """What ``backward`` returns: dq, dk, dv (and dsink), statistics and the options that were used."""

    dq: object           # q's shape and dtype (numpy or torch, like the inputs)
    dk: object           # k's shape and dtype
    dv: object           # v's shape and dtype
    stats: BackwardStats
    kernel: str
    options: dict = field(repr=False)
    softmax_scale: float = 0.0
    deterministic: bool = True
    dsink: object = None  # (heads,) in learnable_sink's dtype when a learnable sink was given


@dataclass(frozen=True)
class _Run:
    tile: BwdTile
    arch: str                  # tensor-core accumulator model of fa4num.hw.mma
    window: masking.Window
    scale: np.float32          # softmax_scale as the kernel's Float32 argument
    scale_log2: np.float32
    dt: np.dtype
    gemm: str
    mufu_arch: str
    spt: bool                  # dQ adds in decreasing n (deterministic and causal/local)
    dq_order: tuple | None     # an explicit order of the KV blocks' dQ adds (studies of deterministic=False)
    softcap: float             # 0: no score_mod
    flex: object = None        # fa4num.attention.flex.Flex (score_mod / score_mod_bwd / mask_mod) or None


def _ex2(x, arch):
    """``ex2.approx.ftz.f32`` through the MUFU model of ``arch`` (measured tables, or libm for the statistical
    mode: fa4num.hw.mufu_model)."""
    return np.asarray(hw.mufu_model(arch).ex2(x, ftz=True), np.float32).reshape(x.shape)


def _ffma(a, b, c):
    return np.asarray(fp.fma(a, b, c), np.float32)


def dpsum_sm90(o, dout, *, head_dim_v_padded: int | None = None) -> np.ndarray:
    """D = rowsum(dO * O) as ``flash_bwd_preprocess.py`` computes it: (rows,) float32 from (rows, d) arrays.

    ``_setup_attributes`` copies with ``copy_utils.tiled_copy_2d``: 128-bit vectors of 8 elements,
    ``threads_per_row = gmem_k_block_size // 8`` with ``gmem_k_block_size`` the largest of 128, 64, 32, 16
    dividing ``head_dim_v_padded``, so thread t of a row holds columns ``k * gmem_k_block_size + 8t + e``
    (e < 8, k < head_dim_v_padded / gmem_k_block_size) as a register tensor ((8), CPY_M, CPY_K). ``kernel``
    reduces it with ``TensorSSA.reduce(ADD, init_val=0.0, reduction_profile=(0, None, 1))``, which folds the
    products into 0.0 one RN add at a time with the vector element e outer and the copy repeat k inner
    (columns 8t, 8t + kblk, 8t + 2 kblk, ..., then 8t + 1, ...; each product of two 16-bit values is exact in
    fp32, so FMA contraction changes nothing). The ``threads_per_row`` partials are then added by a butterfly
    (``utils.warp_reduce``). ``head_dim_v_padded`` is head_dim_v rounded up to the accumulator multiple (32,
    or 64 for hd > 128), zero columns beyond it (``check_hdim_v_oob``: the registers are zero-filled).
    The order is pinned by the H200 capture of the preprocess alone for head dims 64, 72, 96, 128, 192, 256
    (tests/attention/test_backward_preprocess.py): with one repeat (64, 128) any fold order of the 8 elements agrees,
    with 2 or 3 repeats only element-outer matches every row.

    Parameters
    ----------
    o, dout : arrays of shape (rows, head_dim_v)
        The forward's output and its gradient (bf16 / fp16 in FA4; converted to float32 exactly).
    head_dim_v_padded : int, optional
        A multiple of 8, >= head_dim_v; default head_dim_v rounded up to 32.

    Returns
    -------
    float32 array of shape (rows,)

    Raises
    ------
    ValueError
        When head_dim_v_padded is not a multiple of 8 or is below head_dim_v.

    Examples
    --------
    >>> import ml_dtypes
    >>> o = np.ones((1, 64), ml_dtypes.bfloat16); g = np.full((1, 64), 0.5, ml_dtypes.bfloat16)
    >>> float(dpsum_sm90(o, g)[0])
    32.0
    """
    o = np.asarray(o).astype(np.float32)
    g = np.asarray(dout).astype(np.float32)
    rows, d = o.shape
    dp = head_dim_v_padded or -(-d // 32) * 32
    if dp < d or dp % 8:
        raise ValueError(f"head_dim_v_padded must be a multiple of 8 and >= head_dim_v ({d}), got {dp}")
    if dp > d:
        o = np.pad(o, ((0, 0), (0, dp - d)))
        g = np.pad(g, ((0, 0), (0, dp - d)))
    kblk, tpr = dpsum_layout(dp)
    parts = np.zeros((rows, tpr), np.float32)
    for e in range(8):                      # vector element outer ...
        for r in range(dp // kblk):         # ... copy repeat (CPY_K) inner
            cols = r * kblk + np.arange(tpr) * 8 + e
            parts = parts + o[:, cols] * g[:, cols]
    return _butterfly_lane0(parts)     # shfl.bfly offset 1, 2, 4, ...: lane 0 ends with the pairwise tree


def dpsum_layout(head_dim_v_padded: int) -> tuple[int, int]:
    """(gmem_k_block_size, threads_per_row) of the preprocess's copy (:func:`dpsum_sm90`): the largest of 128,
    64, 32, 16 dividing ``head_dim_v_padded``, and 8 columns per thread.

    Parameters
    ----------
    head_dim_v_padded : int
        head_dim_v rounded up to the accumulator multiple (a multiple of 8).

    Returns
    -------
    tuple of int
        (gmem_k_block_size, threads_per_row).

    Examples
    --------
    >>> dpsum_layout(96)
    (32, 4)
    """
    dp = head_dim_v_padded
    kblk = 128 if dp % 128 == 0 else 64 if dp % 64 == 0 else 32 if dp % 32 == 0 else 16
    return kblk, kblk // 8


def lse_log2(lse) -> np.ndarray:
    """The preprocess's ``lse_log2``: RN(lse * LOG2_E) in fp32, 0 for lse = -inf.

    Parameters
    ----------
    lse : array
        The forward's LSE (natural log), converted to float32.

    Returns
    -------
    numpy.ndarray
        float32 of lse's shape.

    Examples
    --------
    >>> lse_log2(np.float32([-np.inf, 0.0])).tolist()
    [0.0, 0.0]
    """
    lse = np.asarray(lse, np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        return np.where(lse == -np.inf, np.float32(0), lse * LOG2_E_F32).astype(np.float32)


def dq_postprocess_threads(kern, tile: BwdTile) -> int:
    """Threads of the dQ postprocess CTA (which reduces dsink): 128 with ``dQ_single_wg`` (SM90 hd 96), else
    the kernel's.

    Parameters
    ----------
    kern : Kernel
        A kernel of fa4num.attention.KERNELS.
    tile : BwdTile
        The backward's tile (:func:`prepare`).

    Returns
    -------
    int

    Examples
    --------
    >>> from fa4num.attention import KERNELS
    >>> dq_postprocess_threads(KERNELS["fa4-sm90"], sm90_bwd_tile(96))
    128
    """
    return 128 if tile.dQ_single_wg else kern.dq_postprocess_threads


def _butterfly_lane0(parts):
    """What lane 0 holds after ``utils.warp_reduce`` over the last axis (shfl.bfly offsets 1, 2, 4, ...)."""
    while parts.shape[-1] > 1:
        parts = parts[..., 0::2] + parts[..., 1::2]
    return parts[..., 0]


def dsink_sm90(sink, lse, dpsum, *, num_threads: int = 256) -> np.float32:
    """dsink of one head as ``flash_bwd_postprocess.py`` reduces it (``dsink_row_term``, ``block_sum``).

    ``lse`` and ``dpsum`` are lists of per-sequence float32 rows (batches, or varlen sequences, in order).
    Thread t adds the rows t, t + num_threads, ... of each sequence in turn, each term
    -p * D with p = 1 for lse = -inf else ex2.approx.ftz(RN(RN(sink - lse) * LOG2_E)), by one ``fma.rn``
    (NVVM contracts the product into the running sum); the CTA then sums its threads: a butterfly inside each
    warp, the warps' lane-0 values written to shared memory, and a butterfly over them in warp 0 (lanes past
    the last warp add 0.0). Bit-exact against the H200's dsink on the 4 learnable-sink backward cases of
    tests/golden/attention/fa4_sm90_bwd_sink_h200.npz (batch and varlen, head dims 64/96/128, bf16 and fp16;
    tests/attention/test_backward_sink.py).

    Parameters
    ----------
    sink : float
        The head's learnable sink logit (float32).
    lse : list of float32 arrays
        Per-sequence LSE rows of this head (natural log; -inf for an empty row).
    dpsum : list of float32 arrays
        The matching D = rowsum(dO * O) rows (dpsum_sm90).
    num_threads : int
        Threads of the postprocess CTA: a multiple of 32 in [32, 1024].

    Returns
    -------
    numpy.float32
        dsink of the head.

    Raises
    ------
    ValueError
        When num_threads is not a multiple of 32 in [32, 1024].

    Examples
    --------
    >>> float(dsink_sm90(0.0, [np.float32([-np.inf, -np.inf])], [np.float32([1.0, 2.0])]))
    -3.0
    """
    if num_threads % 32 or not 32 <= num_threads <= 1024:
        raise ValueError(f"num_threads must be a multiple of 32 in [32, 1024], got {num_threads}")
    sink = np.float32(sink)
    acc = np.zeros(num_threads, np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        for lse_rows, d_rows in zip(lse, dpsum):
            lse_rows = np.asarray(lse_rows, np.float32)
            d_rows = np.asarray(d_rows, np.float32)
            n = lse_rows.size
            for r0 in range(0, n, num_threads):
                sl = slice(r0, min(r0 + num_threads, n))
                x = ((sink - lse_rows[sl]).astype(np.float32) * LOG2_E_F32).astype(np.float32)
                p = np.where(lse_rows[sl] == -np.inf, np.float32(1), _ex2(x, "sm90"))
                acc[:sl.stop - r0] = _ffma(-p, d_rows[sl], acc[:sl.stop - r0])
    warp_sums = _butterfly_lane0(acc.reshape(num_threads // 32, 32))
    lanes = np.zeros(32, np.float32)
    lanes[:warp_sums.size] = warp_sums
    return np.float32(_butterfly_lane0(lanes))


def _pad16(a, axis):
    n = a.shape[axis]
    extra = -n % 16
    if not extra:
        return a
    pad = [(0, 0)] * a.ndim
    pad[axis] = (0, extra)
    return np.pad(a, pad)


def _gemm(a, b, run, c=None):
    """D = C + a @ b.T through the tensor-core model, k padded with zeros to a whole k16 step."""
    return mma_chain(_pad16(a, 1), _pad16(b, 1), c, model=run.gemm, arch=run.arch)


def _one_sequence(qs, ks, vs, os_, dos, lses, run: _Run, *, batch: int = 0, offsets=(0, 0), dlses=None):
    """One sequence (all heads). qs (sq, h, d), ks/vs (sk, hk, d), lses (h, sq), dlses (h, sq) or None;
    ``batch`` and ``offsets`` (varlen starts) are what a score_mod / mask_mod sees.
    Returns dq, dk, dv (fp32 before the final conversion) and per-row/key stats."""
    sq, h, d = qs.shape
    sk, hk, dv_dim = vs.shape
    g = h // hk
    tm, tn = run.tile.tile_m, run.tile.tile_n
    dvp = -(-dv_dim // run.tile.hdim_multiple_of) * run.tile.hdim_multiple_of
    dq = np.zeros((sq, h, d), np.float32)
    dk = np.zeros((sk, hk, d), np.float32)
    dv = np.zeros((sk, hk, dv_dim), np.float32)
    st = {"dpsum": np.zeros((h, sq), np.float32), "lse_log2": np.zeros((h, sq), np.float32),
          "kv_blocks": np.zeros((h, sq), np.int32), "q_blocks": np.zeros((h, sk), np.int32),
          "p_flushed": np.zeros((h, sq), np.int32)}
    if sq and sk == 0 and dlses is not None:
        # no key: O = 0, so the preprocess's D' = 0 - dLSE, which the sink's gradient reads
        st["dpsum"] = np.float32(0) - dlses
    if sq == 0 or sk == 0:
        return dq, dk, dv, st
    nblk = -(-sk // tn)
    m_tot = -(-sq // tm)
    rows_pad = m_tot * tm
    # deterministic dQ order (dQaccum_store semaphores): increasing n, or decreasing n when spt
    order = range(nblk - 1, -1, -1) if run.spt else range(nblk)
    if run.dq_order is not None:
        if sorted(run.dq_order) != list(range(nblk)):
            raise ValueError(f"dq_order must be a permutation of range({nblk}) (the KV blocks), got {run.dq_order}")
        order = run.dq_order
    fl = run.flex
    seqinfo = _flex.SeqlenInfo(sq, sk, *offsets)
    with np.errstate(invalid="ignore", over="ignore"):
        for hh in range(h):
            kh = hh // g
            qh = np.zeros((rows_pad, d), run.dt)
            qh[:sq] = qs[:, hh]
            doh = np.zeros((rows_pad, dv_dim), run.dt)
            doh[:sq] = dos[:, hh]
            dpsum = np.zeros(rows_pad, np.float32)
            dpsum[:sq] = dpsum_sm90(os_[:, hh], dos[:, hh], head_dim_v_padded=dvp)
            if dlses is not None:
                # flash_bwd_preprocess.py: with a differentiable LSE, D' = D - dLSE (one fp32 subtraction);
                # dS = P (dP - D') then carries the LSE's gradient, and so does dsink
                dpsum[:sq] -= dlses[hh]
            lse = lses[hh].astype(np.float32)
            l2 = np.full(rows_pad, np.inf, np.float32)      # rows past seqlen_q: lse = +inf -> P = 0
            l2[:sq] = lse_log2(lse)
            st["dpsum"][hh] = dpsum[:sq]
            st["lse_log2"][hh] = l2[:sq]
            dq_acc = np.zeros((rows_pad, d), np.float32)
            for n in order:
                c0, c1 = n * tn, min(n * tn + tn, sk)
                kb = np.zeros((tn, d), run.dt)
                kb[:c1 - c0] = ks[c0:c1, kh]
                vb = np.zeros((tn, dv_dim), run.dt)
                vb[:c1 - c0] = vs[c0:c1, kh]
                visits = _m_visits(run, n, batch=batch, head=hh, m_tot=m_tot, seqlen_q=sq, seqlen_k=sk)
                if not visits:      # no query block sees this KV block: dK = dV = 0 (written as zeros)
                    continue
                # the visited query blocks' rows in visiting order: the GEMMs over them chain in that order
                rows = np.concatenate([np.arange(m * tm, (m + 1) * tm) for m, _ in visits])
                st["q_blocks"][hh, c0:c1] = len(visits)
                s = _gemm(qh[rows], kb, run)
                s_pre = s
                # what a mod sees of this block (flash_bwd_sm90.py apply_score_mod / apply_mask: every block
                # is masked with mask_seqlen=True, so indices wrap with aux tensors)
                idx = dict(batch=batch, heads=np.full(rows.size, hh), q_idx=rows, kv_idx=np.arange(c0, c0 + tn),
                           seqinfo=seqinfo)
                if fl is not None and fl.score_mod is not None:
                    s = _flex.apply_score_mod(s, fl, softmax_scale=run.scale, arch=run.mufu_arch, **idx)
                elif run.softcap:
                    s = scoremod.softcap_scores(s, softcap=run.softcap, softmax_scale=run.scale,
                                                arch=run.mufu_arch)
                vis = masking.visible(rows[:, None], np.arange(c0, c0 + tn)[None, :], seqlen_q=sq, seqlen_k=sk,
                                      window=run.window)
                if fl is not None and fl.mask_mod is not None:
                    # the mask_mod on every block of a dense call, on the partial (mask) blocks of a sparse one
                    use = np.concatenate([np.full(tm, u) for _, u in visits])[:, None]
                    vis = vis & (_flex.mask_mod_keep(fl, wrap=True, arch=run.mufu_arch, **idx) | ~use)
                s = np.where(vis, s, np.float32(-np.inf))
                p = _ex2(_ffma(s, run.scale_log2, -l2[rows, None]), run.mufu_arch)
                dp = _gemm(doh[rows], vb, run)
                ds = (p * (dp - dpsum[rows, None])).astype(np.float32)
                if fl is not None and fl.score_mod is not None:
                    ds = _flex.apply_score_mod_bwd(ds, s_pre, fl, softmax_scale=run.scale, arch=run.mufu_arch,
                                                   **idx)
                elif run.softcap:
                    ds = scoremod.softcap_grad(ds, s_pre, softcap=run.softcap, softmax_scale=run.scale,
                                               arch=run.mufu_arch)
                pq = p.astype(run.dt)
                dsq = ds.astype(run.dt)
                acc_dv = _gemm(np.ascontiguousarray(pq.T), np.ascontiguousarray(doh[rows].T), run)
                acc_dk = _gemm(np.ascontiguousarray(dsq.T), np.ascontiguousarray(qh[rows].T), run)
                dq_blk = _gemm(dsq, np.ascontiguousarray(kb.T), run)
                dq_acc[rows] += dq_blk       # fp32 RN, one bulk add per (m block, n block)
                live = rows < sq
                st["kv_blocks"][hh, rows[live]] += 1
                st["p_flushed"][hh, rows[live]] += ((p == 0) & vis & (s > -np.inf))[live].sum(axis=1,
                                                                                            dtype=np.int32)
                nk = c1 - c0
                if g == 1:
                    dk[c0:c1, kh] = (acc_dk[:nk] * run.scale).astype(np.float32)
                    dv[c0:c1, kh] = acc_dv[:nk]
                else:      # dK/dVaccum += head's tile, heads in increasing order (deterministic semaphores)
                    dk[c0:c1, kh] += acc_dk[:nk]
                    dv[c0:c1, kh] += acc_dv[:nk]
            dq[:, hh] = dq_acc[:sq] * run.scale
    if g > 1:
        dk *= run.scale
    return dq, dk, dv, st


def _m_visits(run: _Run, n_block: int, *, batch: int, head: int, m_tot: int, seqlen_q: int, seqlen_k: int) -> list:
    """The query blocks KV block ``n_block`` visits, in order, each with whether the mask_mod applies: dense,
    ``BlockInfo.get_m_block_min_max`` in increasing order (the mask_mod on all); block-sparse
    (``block_sparse_utils.py`` ``consume_block_sparse_mma_bwd_sm90``), the partial list then the full list, each
    in list order, every sparse block cut into ``q_subtile_factor`` M blocks below ``m_block_max``."""
    tm, tn = run.tile.tile_m, run.tile.tile_n
    sparse = None if run.flex is None else run.flex.block_sparse_bwd
    if sparse is None:
        m0, m1 = masking.m_block_range(n_block, tile_m=tm, tile_n=tn, seqlen_q=seqlen_q, seqlen_k=seqlen_k,
                                       window=run.window)
        return [(m, True) for m in range(m0, m1)]
    qsf = sparse.block_size[0] // tm
    partial, full = sparse.lists(batch, head, n_block)
    return [(i * qsf + o, use) for blocks, use in ((partial, True), (full, False)) for i in blocks
            for o in range(qsf) if i * qsf + o < m_tot]


def _check_flex_backward(problem: Problem):
    """The problem's FlexAttention arguments for the backward, or None; ValueError naming the argument for what
    the emulated backward does not model (``flash_bwd_sm90.py``'s mod path is emulated; the rest is refused)."""
    fl = problem.flex
    if fl is None:
        return None
    if not problem.kernel.name.endswith("sm90"):
        raise ValueError(f"{'/'.join(problem.flex_args())} in the backward: modelled for kernel='fa4-sm90' only, "
                         f"not {problem.kernel.name!r}")
    sparse = fl.block_sparse_bwd
    if sparse is not None:
        tile = problem.kernel.backward_tile(problem)
        if sparse.block_size[1] != tile.tile_n or sparse.block_size[0] % tile.tile_m:
            raise ValueError(f"block_sparse_tensors_bwd.block_size must be (a multiple of tile_m = {tile.tile_m}, "
                             f"tile_n = {tile.tile_n}) for the {problem.kernel.name} backward, got "
                             f"{sparse.block_size}")
    if fl.score_mod is not None and fl.score_mod_bwd is None:
        raise ValueError("score_mod_bwd is required with a score_mod for the backward (FA4 asserts this)")
    if fl.score_mod is not None and problem.qhead_per_kvhead > 1:
        # flash_bwd_sm90.py passes qhead_per_kvhead to the score_mod's index math on unpacked query rows
        raise ValueError("score_mod with GQA/MQA (heads != heads_kv) in the backward is not modelled by fa4num "
                         "(FA4 b36's SM90 backward maps its indices as if the rows were packed)")
    return fl


def _validate(problem: Problem, oa, doa, lse) -> np.ndarray:
    """What the backward refuses beyond :func:`~fa4num.attention.problem.plan`'s checks; returns the LSE."""
    if problem.dtype not in ("bfloat16", "float16"):
        raise ValueError(f"dtype must be bfloat16 or float16 for FA4's backward, got {problem.dtype}")
    if (problem.cu_seqlens_q is None) != (problem.cu_seqlens_k is None):
        raise ValueError("cu_seqlens_q and cu_seqlens_k must be given together for the backward")
    for name, given in (("page_table", problem.page_table is not None), ("q_descale/k_descale/v_descale",
                        problem.descaled), ("num_splits", problem.num_splits_given != 1)):
        if given:
            raise ValueError(f"{name} is not supported by FA4's backward")
    extra = sorted(set(problem.overrides) - BACKWARD_OPTIONS)
    if extra:
        raise ValueError(f"option(s) {extra} steer the forward only; the backward takes {sorted(BACKWARD_OPTIONS)}")
    q = problem.q
    want_o = tuple(q.shape[:-1]) + (problem.head_dim_v,)
    for name, a in (("out", oa), ("dout", doa)):
        if a.dtype != NP_DTYPES[problem.dtype]:
            raise ValueError(f"q, k, v, out, dout must share one dtype, got {problem.dtype} and {name} {a.dtype}")
    if oa.shape != want_o or doa.shape != want_o:
        raise ValueError(f"out and dout must have shape {want_o} (q's with v's head_dim), got {oa.shape} and "
                         f"{doa.shape}")
    h = problem.heads
    return check_lse(lse, (h, q.shape[0]) if problem.varlen else (q.shape[0], h, q.shape[1]))


def prepare(problem: Problem, out, dout, lse) -> tuple:
    """What every consumer of FA4's backward checks first: ``(out, dout, lse, tile)`` as numpy arrays and the
    backward's :class:`BwdTile` (the kernel's, with the ``tile_m``/``tile_n`` overrides); ValueError for what the
    backward refuses (:func:`backward`'s checks, one set of messages for the emulator and the bounds).

    Parameters
    ----------
    problem : Problem
        ``plan(q, k, v, **FA4 arguments)``.
    out, dout, lse : arrays or torch tensors
        The forward's output, the incoming gradient and the forward's LSE, as :func:`backward` takes them.

    Returns
    -------
    tuple
        (out, dout, lse as numpy arrays, BwdTile).

    Raises
    ------
    ValueError
        For what FA4's backward refuses (dtype, paged KV, split-KV, forward-only knobs, shapes, head dims, tiles,
        a softmax_scale that is not finite and nonzero).

    Examples
    --------
    >>> import ml_dtypes
    >>> from fa4num.attention import forward, plan
    >>> x = np.ones((1, 32, 1, 64), ml_dtypes.bfloat16)
    >>> fw = forward(x, x, x)
    >>> prepare(plan(x, x, x), fw.out, x, fw.lse)[3].tile_n
    128
    """
    oa, _ = to_numpy(out, "out")
    doa, _ = to_numpy(dout, "dout")
    lsea = _validate(problem, oa, doa, lse)
    tile = problem.kernel.backward_tile(problem, use_2cta_instrs=problem.overrides.get("use_2cta_instrs"))
    tile_m, tile_n = (problem.overrides.get(n) for n in ("tile_m", "tile_n"))
    if tile_m is not None or tile_n is not None:
        tm = tile.tile_m if tile_m is None else tile_m
        tn = tile.tile_n if tile_n is None else tile_n
        if tm < 16 or tm % 16 or tn < 16 or tn % 16:
            raise ValueError(f"tile_m and tile_n must be positive multiples of 16, got {tm}, {tn}")
        tile = BwdTile(tm, tn, tile.hdim_multiple_of, tile.dQ_single_wg, tile.cta_group)
    scale = problem.softmax_scale
    if not (math.isfinite(scale) and scale != 0):
        raise ValueError(f"softmax_scale must be a finite nonzero float for the backward, got {scale}")
    return oa, doa, lsea, tile


def _block_order(dq_order) -> tuple:
    """``dq_order`` as a tuple of ints; TypeError naming it for a string, floats or bools (int() would turn
    "random" into an error about 'r', and 1.7 or True into block 1)."""
    items = None if isinstance(dq_order, (str, bytes)) else list(getattr(dq_order, "tolist", lambda: dq_order)())
    if items is None or not all(isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in items):
        raise TypeError(f"dq_order must be None or a sequence of KV block indices (ints), got {dq_order!r:.80}")
    return tuple(int(i) for i in items)


def backward(q=None, k=None, v=None, out=None, dout=None, lse=None, *, problem: Problem | None = None,
             deterministic=True, dq_order=None, dlse=None, **fa4_args) -> BackwardResult:
    """Emulate FA4's backward pass; returns ``BackwardResult(dq, dk, dv, stats)``.

    ``backward(q, k, v, out, dout, lse, **fa4_args)`` is ``backward(out=out, dout=dout, lse=lse,
    problem=plan(q, k, v, **fa4_args))`` (:func:`fa4num.attention.problem.plan`: the forward's checks, one set
    of messages); the backward then refuses what FA4's backward does not run (fp8, paged KV, split-KV, the
    forward-only softmax knobs).

    Parameters
    ----------
    q, k, v : arrays or torch tensors in FA4's layout, (batch, seqlen, heads, head_dim) (varlen: (total,
        heads, head_dim)), bfloat16 (ml_dtypes) or float16; heads % heads_kv == 0 (GQA/MQA).
    out, dout : the forward output (q's shape and dtype) and the incoming gradient.
    lse : float32 (batch, heads, seqlen_q) (varlen: (heads, total_q)), the forward's LSE (natural log).
    softmax_scale : default 1/sqrt(head_dim), used as the kernel's Float32 argument.
    causal : bottom-right aligned causal mask.
    kernel : "fa4-sm90" (the Hopper backward the H200 runs) or "fa4-sm100" (Blackwell's, emulated from source,
        not run on a Blackwell GPU; ``use_2cta_instrs`` option as FA4's default, head_dim <= 192).
    deterministic : True (FA4's ``deterministic=True``: the dQ adds in the semaphore order, see the module
        docstring). False emulates one admissible order of the unordered adds (increasing KV block, heads in
        order); the real kernel's dQ then varies run to run in the last bits, and with GQA so do dK and dV
        (their per-head adds lose the semaphore too).
    fa4_args : FA4's feature names ``window_size=(left, right)``, ``cu_seqlens_q``/``cu_seqlens_k`` (+
        ``max_seqlen_q``/``max_seqlen_k``, checked to cover the longest sequence, else unused), ``softcap``,
        ``pack_gqa`` (ignored: FA4's backward runs without it), ``learnable_sink`` (float (heads,): dq/dk/dv
        do not change given the forward's LSE; ``.dsink`` is reduced as the postprocess does,
        :func:`dsink_sm90`); emulator knobs
        ``mode`` ("bitexact" or "statistical": fp32 BLAS GEMMs and numpy exp2), ``gemm`` (the tensor-core
        model of config.GEMM_IMPL, with the kernel's own accumulator), ``mufu_arch`` ("libm" or a table set of
        fa4num.hw), ``tile_m``/``tile_n`` (the backward's tile), ``use_2cta_instrs`` (fa4-sm100).
    dq_order : (a
        permutation of the KV blocks: the order of their dQaccum adds in every query block, to enumerate
        what ``deterministic=False`` can produce).
    dlse : float32 array or tensor shaped like ``lse``, optional
        The gradient reaching the forward's LSE (FA4's ``dlse``, when the LSE feeds the loss): the preprocess
        subtracts it from D = rowsum(dO * O) in fp32 (``flash_bwd_preprocess.py``), which changes dq, dk and
        the sink's gradient (dv does not see it).

    Returns
    -------
    BackwardResult
        ``dq``, ``dk``, ``dv`` in the shapes and dtypes of q, k, v (numpy or torch, like the inputs); ``dsink``
        ((heads,), with a learnable sink); ``stats`` (:class:`BackwardStats`); the kernel, options, scale and
        ``deterministic`` it ran with.

    Examples
    --------
    >>> import ml_dtypes
    >>> rng = np.random.default_rng(0)
    >>> q, k, v, do = (rng.standard_normal((1, 32, 1, 64)).astype(ml_dtypes.bfloat16) for _ in range(4))
    >>> from fa4num.attention import forward
    >>> fw = forward(q, k, v)
    >>> g = backward(q, k, v, fw.out, do, fw.lse)
    >>> g.dq.shape, g.dq.dtype.name
    ((1, 32, 1, 64), 'bfloat16')
    """
    if problem is None and q is not None and k is not None and v is not None:
        (qa, device), (ka, _), (va, _) = to_numpy(q, "q"), to_numpy(k, "k"), to_numpy(v, "v")
        problem = given_or_plan(None, qa, ka, va, fa4_args, who="backward")
    else:
        problem = given_or_plan(problem, q, k, v, fa4_args, who="backward")
        (qa, device), (ka, _), (va, _) = (to_numpy(x, n) for x, n in ((problem.q, "q"), (problem.k, "k"),
                                                                        (problem.v, "v")))
    kern, opts, window, softcap = problem.kernel, problem.opts, problem.window, problem.softcap
    deterministic = check_bool(deterministic, "deterministic")
    if out is None or dout is None or lse is None:
        raise TypeError("backward needs out, dout and lse (the forward's output and LSE, and the gradient)")
    oa, doa, lsea, tile = prepare(problem, out, dout, lse)
    dlsea = None
    if dlse is not None:
        dlsea = check_lse(dlse, lsea.shape, name="dlse", what="the gradient reaching the LSE; FA4 takes Float32")
    dq_order = None if dq_order is None else _block_order(dq_order)
    s32 = problem.softmax_scale_f32
    # with a score_mod the kernel keeps softmax_scale apart and exponentiates with LOG2_E alone
    # (utils.compute_softmax_scale_log2 / flash_bwd_sm90.py __call__)
    fl = _check_flex_backward(problem)
    if fl is not None and fl.block_sparse_bwd is not None and deterministic:
        # flash_bwd_sm90.py asserts it; captured on the H200 (experiments/gpu/flex_capture.py, bwd_bs_* cases)
        raise ValueError("deterministic=True with block_sparse_tensors_bwd: FA4 4.0.0b36's SM90 backward "
                         "asserts 'Deterministic not implemented for block-sparse backward'; pass "
                         "deterministic=False (and dq_order= for one order of its dQ atomics)")
    sl2 = scoremod.SCALE_LOG2_WITH_SCOREMOD if softcap or (fl is not None and fl.score_mod is not None) \
        else np.float32(s32 * LOG2_E_F32)
    # the gemm option names the tensor-core model; the accumulator is always the kernel's own
    gemm = config.GEMM_IMPL[opts.gemm][0]
    mufu_arch = opts.mufu_arch
    run = _Run(tile=tile, arch=kern.accumulator, window=window, scale=s32, scale_log2=sl2, dt=qa.dtype, gemm=gemm,
               mufu_arch=mufu_arch, spt=bool(deterministic and window.masked), dq_order=dq_order, softcap=softcap,
               flex=fl)
    varlen = problem.varlen
    sink = problem.sink

    dq = np.zeros(qa.shape, np.float32)
    dk = np.zeros(ka.shape, np.float32)
    dv = np.zeros(va.shape, np.float32)
    h = qa.shape[-2]
    if varlen:
        cq, ck = problem.cu_seqlens_q, problem.cu_seqlens_k
        seqs = [(slice(cq[i], cq[i + 1]), slice(ck[i], ck[i + 1])) for i in range(cq.size - 1)]
        stats = {n: np.zeros((h, qa.shape[0]), t) for n, t in
                 (("dpsum", np.float32), ("lse_log2", np.float32), ("kv_blocks", np.int32), ("p_flushed", np.int32))}
        stats["q_blocks"] = np.zeros((h, ka.shape[0]), np.int32)
        for i, (sqs, sks) in enumerate(seqs):
            r = _one_sequence(qa[sqs], ka[sks], va[sks], oa[sqs], doa[sqs], lsea[:, sqs], run, batch=i,
                              offsets=(int(cq[i]), int(ck[i])), dlses=None if dlsea is None else dlsea[:, sqs])
            dq[sqs], dk[sks], dv[sks] = r[0], r[1], r[2]
            for n, a in r[3].items():
                stats[n][:, sks if n == "q_blocks" else sqs] = a
    else:
        b, sq = qa.shape[:2]
        sk = ka.shape[1]
        stats = {n: np.zeros((b, h, sq), t) for n, t in
                 (("dpsum", np.float32), ("lse_log2", np.float32), ("kv_blocks", np.int32), ("p_flushed", np.int32))}
        stats["q_blocks"] = np.zeros((b, h, sk), np.int32)
        for bi in range(b):
            r = _one_sequence(qa[bi], ka[bi], va[bi], oa[bi], doa[bi], lsea[bi], run, batch=bi,
                              dlses=None if dlsea is None else dlsea[bi])
            dq[bi], dk[bi], dv[bi] = r[0], r[1], r[2]
            for n, a in r[3].items():
                stats[n][bi] = a
    dsink = None
    if sink is not None:
        nthr = dq_postprocess_threads(kern, tile)
        if varlen:
            per_seq = [lsea[:, s_] for s_, _ in seqs]
            dps = [stats["dpsum"][:, s_] for s_, _ in seqs]
        else:
            per_seq = [lsea[bi] for bi in range(lsea.shape[0])]
            dps = [stats["dpsum"][bi] for bi in range(lsea.shape[0])]
        dsink = np.array([dsink_sm90(sink[hh], [x[hh] for x in per_seq], [x[hh] for x in dps],
                                     num_threads=nthr) for hh in range(h)], np.float32).astype(problem.sink_dtype)
    res = [x.astype(qa.dtype) for x in (dq, dk, dv)]
    if device is not None:
        import torch
        tdt = torch.bfloat16 if qa.dtype == NP_DTYPES["bfloat16"] else torch.float16
        res = [torch.from_numpy(x.view(np.int16)).view(tdt).to(device) for x in res]
    used = {"mode": problem.mode, "gemm": gemm, "mufu_arch": mufu_arch, "tile_m": tile.tile_m, "tile_n": tile.tile_n,
            "cta_group": tile.cta_group, "softcap": softcap,
            "tanh_exact": not softcap or scoremod.tanh_is_exact(mufu_arch),
            "window": window, "varlen": varlen}
    return BackwardResult(*res, BackwardStats(**stats), kern.name, used, float(s32), deterministic, dsink)


__all__ = ["backward", "prepare", "dpsum_layout", "lse_log2", "dq_postprocess_threads", "BackwardResult", "BackwardStats", "BwdTile", "sm90_bwd_tile", "sm100_bwd_tile",
           "dpsum_sm90", "dsink_sm90"]
