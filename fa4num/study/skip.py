"""FA4 SM100's lazy rescale, counted from per-(row, KV-block) maxima of S, at any sequence length.

The lazy-rescale decision depends on S only through each row's block maxima, so the statistic needs neither P
nor V: :func:`block_maxima` computes the maxima of S = q k^T per (head, row, KV block) with torch, chunked over
rows so that a 128k x 128k S never exists (on a GPU when one is present, else on the CPU), and
:func:`lazy_rescale_scan` replays the kernel's per-row decision over the blocks in the order the kernel visits
them (``flash_fwd_sm100.py``: the n-block loop runs from ``n_block_max - 1`` down to the first block).

Model of S. Each entry is the fp32 dot product of bf16 (or fp16) q and k rows, computed by a float32 GEMM with
TF32 off (cuBLAS SGEMM on a GPU, the CPU BLAS otherwise): products of two bf16 numbers are exact in fp32, so
this S differs from the kernel's (a tcgen05/wgmma accumulation in another order) only by the rounding of the
sums, a few fp32 ulps of sum |q_i k_i|. Maxima are then exact maxima of that S; masked keys (causal,
bottom-right aligned, and the padding of the last block) are -inf, as the kernel's mask makes them.

Decision (``softmax.py`` ``SoftmaxSm100.update_row_max``, called per block from ``flash_fwd_sm100.py``
``softmax_step``), in fp32 as the kernel computes it: m_new = max(m_stored, m_block);
acc_scale_ = RN(RN(m_stored - m_new) * scale_log2); with rescale_threshold > 0 and acc_scale_ >=
-rescale_threshold the stale max is kept (no rescale of O and row_sum), else m_stored = m_new. The row's first
block (FA4's ``is_first``) only sets the max. Counted per row:

- ``rescale_events``: blocks after the row's first where the true running max grew. This is what a kernel
  without lazy rescaling (threshold 0) rescales for, so it is the denominator of the avoided share;
- ``rescales_done``: blocks where the stored max moved up (the kernel multiplies O and row_sum by
  acc_scale != 1). Always a subset of the events; equal to them at threshold 0;
- the stale-max lag after each block, (true max - stored max) * scale_log2 in log2 units (at most about the
  threshold), as a histogram with bins of 1/64 (exact zeros counted apart), its maximum and mean.

At every granularity FA4 acts at (row, 32-row warp ballot, 128-row tile) the counters of
:mod:`fa4num.softmax.ballot` (definition version 2), counted by its ``count_block`` as the CPU emulator counts
them: with a :class:`KernelRows` layout (:func:`sm100_rows`) the rows are put in the kernel's order (pack_gqa
packs the q heads of a KV head) and each row's steps start after its tile's first KV block, as
``correction_loop`` iterates them; the vote ``acc_scale < 1`` is tested as ``acc_scale_ <
fa4num.softmax.ballot.vote_limit()`` (the same test for a monotone ex2).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from fa4num.constants import LOG2_E_F32

LAG_BINS_PER_UNIT = 64      # histogram resolution of the stale-max lag, log2 units
LAG_RANGE = 32              # lags above this (never for thresholds <= 16) go into the last bin


def scale_log2(softmax_scale: float) -> np.float32:
    """``softmax_scale * log2(e)`` as FA4 forms it: both float32, one RN multiply.

    FA4's ``utils.compute_softmax_scale_log2``.

    Parameters
    ----------
    softmax_scale : float
        Rounded to float32 first, as the kernel receives it.

    Returns
    -------
    numpy.float32

    Examples
    --------
    >>> float(scale_log2(1 / 64 ** 0.5))
    0.1803368777036667
    """
    return np.float32(np.float32(softmax_scale) * LOG2_E_F32)


def pick_device(device=None):
    """torch device for the study kernels: ``device`` if given ("cpu", "cuda", "auto"), else CUDA when present."""
    import torch
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def block_maxima(q, k, *, causal: bool = False, tile_n: int = 128, device=None, chunk_elems: int | None = None):
    """Per-(head, row, KV block) maxima of S = q k^T (unscaled, float32), FA4's S as modelled above.

    Parameters
    ----------
    q : torch.Tensor, (seqlen_q, heads, head_dim), bf16/fp16/fp32
    k : torch.Tensor, (seqlen_k, heads_kv, head_dim); heads % heads_kv == 0 (GQA: head h reads k head
        h // (heads / heads_kv), as FA4 does)
    causal : bool
        Bottom-right aligned: key j is visible from row i iff j <= i + seqlen_k - seqlen_q.
    tile_n : int
        KV block width (FA4 SM100: 128).
    device : str or torch.device, optional
        Where to compute ("auto"/None: CUDA if present).
    chunk_elems : int, optional
        Largest S chunk held at once (default 2^28 on a GPU, 2^23 on the CPU).

    Returns
    -------
    torch.Tensor
        (heads, seqlen_q, ceil(seqlen_k / tile_n)) float32 on ``device``; -inf where the block is masked.

    Examples
    --------
    >>> import torch
    >>> q = torch.ones(4, 1, 8); k = torch.arange(256.).reshape(256, 1, 1).expand(256, 1, 8)
    >>> block_maxima(q, k, tile_n=128, device="cpu")[0, 0].tolist()
    [1016.0, 2040.0]
    """
    import torch
    if q.ndim != 3 or k.ndim != 3 or q.shape[2] != k.shape[2]:
        raise ValueError(f"q and k must be (seqlen, heads, head_dim) with one head_dim, got {tuple(q.shape)} "
                         f"and {tuple(k.shape)}")
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"q heads ({q.shape[1]}) must be a multiple of k heads ({k.shape[1]})")
    if tile_n < 1:
        raise ValueError(f"tile_n must be >= 1, got {tile_n}")
    dev = pick_device(device)
    if chunk_elems is None:
        chunk_elems = 1 << (28 if dev.type == "cuda" else 23)
    if chunk_elems < 1:
        raise ValueError(f"chunk_elems must be >= 1, got {chunk_elems}")
    sq, heads, _ = q.shape
    sk = k.shape[0]
    rep = heads // k.shape[1]
    nblk = -(-sk // tile_n)
    diag = sk - sq
    out = torch.full((heads, sq, nblk), -math.inf, dtype=torch.float32, device=dev)
    rows_per_chunk = max(1, chunk_elems // max(1, nblk * tile_n))
    with _ieee_fp32_matmul():
        for h in range(heads):
            qh = q[:, h].to(dev).float()
            kh = k[:, h // rep].to(dev).float()
            for r0 in range(0, sq, rows_per_chunk):
                r1 = min(sq, r0 + rows_per_chunk)
                kend = min(sk, r1 + diag) if causal else sk   # last visible key of the chunk's last row + 1
                if kend <= 0:
                    continue
                nb = -(-kend // tile_n)
                s = qh[r0:r1] @ kh[:kend].T
                if causal:
                    c_lo = max(0, r0 + diag + 1)   # the first column some row of the chunk cannot see
                    if c_lo < kend:
                        cols = torch.arange(c_lo, kend, device=dev)
                        rows = torch.arange(r0, r1, device=dev)
                        s[:, c_lo:] = s[:, c_lo:].masked_fill(cols[None, :] > rows[:, None] + diag, -math.inf)
                if kend % tile_n:
                    s = torch.nn.functional.pad(s, (0, nb * tile_n - kend), value=-math.inf)
                out[h, r0:r1, :nb] = s.view(r1 - r0, nb, tile_n).amax(dim=-1)
    return out


class _ieee_fp32_matmul:
    """Float32 GEMMs in full fp32 for the duration (no TF32, no bf16 reduced-precision reductions)."""

    def __enter__(self):
        import torch
        self._old = (torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision())
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")

    def __exit__(self, *exc):
        import torch
        torch.backends.cuda.matmul.allow_tf32 = self._old[0]
        torch.set_float32_matmul_precision(self._old[1])


@dataclass(frozen=True)
class KernelRows:
    """How FA4 SM100 lays out the rows of block maxima (heads, seqlen_q, nblk): which q heads share a KV head
    and whether pack_gqa packs them into one row sequence (packed row = query * qhead_per_kvhead + head), the
    M tile (rows that visit the same KV blocks: q_stage x 128, x 2 for a 2-CTA pair) and the mask."""
    heads_kv: int
    pack_gqa: bool
    tile_m: int
    causal: bool
    seqlen_k: int
    tile_n: int = 128


def sm100_rows(q, k, *, causal: bool = False) -> KernelRows:
    """:class:`KernelRows` of FA4 SM100 for q (seqlen_q, heads, d) and k (seqlen_k, heads_kv, d): the tile and
    pack_gqa that ``fa4num.attention.plan`` resolves for ``kernel="fa4-sm100"`` (only shapes are read).

    Parameters
    ----------
    q, k : torch.Tensor
        (seqlen_q, heads, d) and (seqlen_k, heads_kv, d) of one sequence.
    causal : bool

    Returns
    -------
    KernelRows
        The KV-head count, pack_gqa and tile_m that order the kernel's rows.

    Examples
    --------
    >>> import torch
    >>> r = sm100_rows(torch.zeros(512, 8, 128, dtype=torch.bfloat16), torch.zeros(512, 2, 128, dtype=torch.bfloat16),
    ...                causal=True)
    >>> r.pack_gqa, r.tile_m
    (True, 256)
    """
    from fa4num.attention import plan
    problem = plan(q[None], k[None], k[None], causal=causal, kernel="fa4-sm100")
    return KernelRows(heads_kv=k.shape[1], pack_gqa=bool(problem.opts.pack_gqa), tile_m=int(problem.opts.tile_m),
                      causal=bool(causal), seqlen_k=int(k.shape[0]), tile_n=int(problem.opts.tile_n))


def _kernel_order(heads: int, seqlen_q: int, layout: KernelRows):
    """(order, sequences, rows): flat indices into (heads, seqlen_q) rows in the kernel's order, (sequences,
    rows) of it, and (rows,) n_block_min, n_block_max of each row's tile."""
    from fa4num.attention.masking import n_block_range, resolve_window
    if heads % layout.heads_kv:
        raise ValueError(f"heads ({heads}) must be a multiple of the layout's heads_kv ({layout.heads_kv})")
    rep = heads // layout.heads_kv
    idx = np.arange(heads * seqlen_q).reshape(heads, seqlen_q)
    if layout.pack_gqa and rep > 1:
        order = idx.reshape(layout.heads_kv, rep, seqlen_q).transpose(0, 2, 1).reshape(layout.heads_kv, -1)
    else:
        order = idx
    g = rep if layout.pack_gqa else 1
    nrows = order.shape[1]
    window = resolve_window(layout.causal)
    ranges = np.array([n_block_range(mb, tile_m=layout.tile_m, tile_n=layout.tile_n, seqlen_q=seqlen_q,
                                     seqlen_k=layout.seqlen_k, window=window, qhead_per_kvhead_packgqa=g)
                       for mb in range(-(-nrows // layout.tile_m))])
    per_row = np.repeat(ranges, layout.tile_m, axis=0)[:nrows]
    return order, per_row[:, 0], per_row[:, 1]


@dataclass
class LazyRescaleScan:
    """Per-row counts of :func:`lazy_rescale_scan` (numpy arrays, (rows,)) and the lag histogram.

    ``lag_hist[0]`` counts steps with lag exactly 0; ``lag_hist[i]`` (i >= 1) lags in ((i-1)/64, i/64] log2
    units, the last bin everything above. A step is a (row, block) pair after the row's first block."""
    kv_blocks: np.ndarray       # blocks with at least one visible key
    rescale_events: np.ndarray  # true max grew
    rescales_done: np.ndarray   # stored max moved up (O and row_sum rescaled)
    max_lag: np.ndarray         # float32, log2 units
    lag_sum: float
    lag_hist: np.ndarray        # int64, (LAG_RANGE * LAG_BINS_PER_UNIT + 2,)
    # fa4num.softmax.ballot.COUNTERS -> int32 (rows,): row / warp / tile counts (definition version 2)
    skip: dict = field(default_factory=dict)

    def skip_totals(self) -> dict:
        """{counter: total} of :attr:`skip` (``fa4num.softmax.ballot.shares`` takes it)."""
        return {n: int(v.sum()) for n, v in self.skip.items()}

    @property
    def steps(self) -> int:
        return int(self.lag_hist.sum())

    def lag_quantile(self, p: float) -> float:
        """Upper edge of the histogram bin holding the p-quantile of the per-step lag (within 1/64 above it)."""
        if not 0 <= p <= 1:
            raise ValueError(f"p must be in [0, 1], got {p}")
        n = self.steps
        if n == 0:
            return float("nan")
        i = int(np.searchsorted(np.cumsum(self.lag_hist), max(1, math.ceil(p * n))))
        return i / LAG_BINS_PER_UNIT


def lazy_rescale_scan(bmax, *, scale_log2, rescale_threshold: float, layout: KernelRows | None = None
                      ) -> LazyRescaleScan:
    """Replay FA4 SM100's lazy rescale (see the module docstring) over block maxima.

    Parameters
    ----------
    bmax : torch.Tensor, (..., nblk) float32
        Block maxima of S (unscaled), e.g. from :func:`block_maxima`; -inf for masked blocks. Each leading index
        is one row; blocks are visited from the last to the first.
    scale_log2 : float
        softmax_scale * log2(e) in float32 (:func:`scale_log2`).
    rescale_threshold : float
        FA4's ``rescale_threshold`` (log2 units; 0 rescales on every growth, SM100's bf16/fp16 default is 8).
    layout : KernelRows, optional
        The kernel's rows and tiles (:func:`sm100_rows`); ``bmax`` is then (heads, seqlen_q, nblk). Without
        it the last leading axis of ``bmax`` is one row sequence whose tiles all visit every block.

    Returns
    -------
    LazyRescaleScan
        Counts per row, flattened in ``bmax``'s row order.

    Examples
    --------
    >>> import torch
    >>> m = torch.tensor([[9.0, 1.0, 4.0, 0.0]])       # visited right to left: 0, 4, 1, 9
    >>> r = lazy_rescale_scan(m, scale_log2=1.0, rescale_threshold=4.0)
    >>> int(r.rescale_events[0]), int(r.rescales_done[0]), float(r.max_lag[0])
    (2, 1, 4.0)
    """
    return lazy_rescale_scans(bmax, scale_log2=scale_log2, thresholds=(rescale_threshold,),
                              layout=layout)[rescale_threshold]


def lazy_rescale_scans(bmax, *, scale_log2, thresholds, layout: KernelRows | None = None) -> dict:
    """:func:`lazy_rescale_scan` for several thresholds in one pass over the blocks: {threshold: scan}.

    Parameters
    ----------
    bmax : torch.Tensor
        Exact per-(row, KV block) maxima of S in visiting order (:func:`block_maxima`), rows first.
    scale_log2 : float
        softmax_scale * log2(e).
    thresholds : iterable of float
        FA4's ``rescale_threshold`` values, each finite and >= 0.
    layout : KernelRows, optional
        The kernel's row order, for the warp and tile counters.

    Returns
    -------
    dict
        threshold -> :class:`LazyRescaleScan`.

    Examples
    --------
    >>> import torch
    >>> m = torch.tensor([[9.0, 1.0, 4.0, 0.0]])
    >>> {t: int(r.rescales_done[0]) for t, r in lazy_rescale_scans(m, scale_log2=1.0, thresholds=(0, 4, 16)).items()}
    {0: 2, 4: 1, 16: 0}
    """
    import torch
    thresholds = tuple(thresholds)
    for t in thresholds:
        if not (t >= 0 and math.isfinite(t)):
            raise ValueError(f"rescale_threshold must be a finite number >= 0, got {t!r}")
    if not (float(scale_log2) > 0 and math.isfinite(float(scale_log2))):
        raise ValueError(f"scale_log2 must be a positive finite number, got {scale_log2!r}")
    if not thresholds:
        return {}
    nblk = bmax.shape[-1]
    if layout is None:
        lead = tuple(bmax.shape[:-1]) or (1,)
        nrows = lead[-1]
        order = np.arange(math.prod(lead)).reshape(-1, nrows)
        n_lo, n_hi = np.zeros(nrows, np.int64), np.full(nrows, nblk)
    else:
        if bmax.ndim != 3:
            raise ValueError(f"bmax must be (heads, seqlen_q, nblk) with a layout, got {tuple(bmax.shape)}")
        order, n_lo, n_hi = _kernel_order(bmax.shape[0], bmax.shape[1], layout)
    if bmax.device.type == "cpu":
        # one small vector op per KV block: a thread pool only adds synchronisation (10x slower on a busy host)
        old = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return _scan(bmax, scale_log2, thresholds, order, n_lo, n_hi)
        finally:
            torch.set_num_threads(old)
    return _scan(bmax, scale_log2, thresholds, order, n_lo, n_hi)


def _scan(bmax, scale_log2, thresholds, order, n_lo, n_hi):
    """The replay over rows in the kernel's order: ``order`` (sequences, rows) flat row indices of ``bmax``,
    ``n_lo``/``n_hi`` (rows,) each row's tile's KV block range. Returns counts in ``bmax``'s flat row order."""
    import torch

    from fa4num.softmax import ballot     # numba comes with fa4num.softmax: not on import of fa4num.study
    dev = bmax.device
    nseq, nrows = order.shape
    flat = bmax.reshape(-1, bmax.shape[-1]).to(torch.float32)
    m = flat[torch.as_tensor(order.reshape(-1), device=dev)]
    rows, nblk = m.shape
    nt = len(thresholds)
    f32 = dict(dtype=torch.float32, device=dev)
    sl2 = torch.tensor(np.float32(scale_log2), **f32)
    neg_thr = torch.tensor([-np.float32(t) for t in thresholds], **f32)[:, None]
    lazy = torch.tensor([t > 0 for t in thresholds], device=dev)[:, None]   # threshold 0: no lazy branch at all
    ninf = torch.tensor(-math.inf, **f32)
    zero64 = torch.zeros((), dtype=torch.float64, device=dev)
    stored = torch.full((nt, rows), -math.inf, **f32)
    true = torch.full((rows,), -math.inf, **f32)
    started = torch.zeros(rows, dtype=torch.bool, device=dev)
    visited = torch.zeros(rows, dtype=torch.int32, device=dev)
    events = torch.zeros(rows, dtype=torch.int32, device=dev)
    done = torch.zeros((nt, rows), dtype=torch.int32, device=dev)
    max_lag = torch.zeros((nt, rows), dtype=torch.float64, device=dev)
    nbins = LAG_RANGE * LAG_BINS_PER_UNIT + 2
    # one histogram per threshold in one bincount: bin b of threshold t at t * (nbins + 1) + b; rows that have
    # no step yet go to the extra bin nbins (dropped), so no data-dependent indexing (no GPU sync per block)
    offs = (torch.arange(nt, device=dev) * (nbins + 1))[:, None]
    hist = torch.zeros(nt * (nbins + 1), dtype=torch.int64, device=dev)
    lag_sum = torch.zeros(nt, dtype=torch.float64, device=dev)
    sl2_64 = sl2.double()
    limit = torch.tensor(ballot.vote_limit(), **f32)
    n_lo_t = torch.as_tensor(np.tile(n_lo, nseq), device=dev)
    n_hi_t = torch.as_tensor(np.tile(n_hi, nseq), device=dev)
    counters = ballot.new_counters((nt, nseq, nrows), like=m)
    zero32 = torch.zeros((), **f32)
    for n in range(nblk - 1, -1, -1):
        mb = m[:, n]
        seen = mb > ninf
        visited += seen
        step = started              # rows past their first block (the first visited one only sets the max)
        first = ~started & seen
        grew = step & (mb > true)
        events += grew
        # the rule of fa4num.softmax.lazy.lazy_rescale (the specification; tests/softmax/test_lazy_rule.py checks
        # this torch copy against it bit for bit), each op one fp32 RN: FMNMX (NaN ignored), FADD, FMUL, FSETP.GE
        m_new = torch.fmax(stored, mb)
        a = (stored - torch.where(m_new == ninf, zero32, m_new)) * sl2
        keep = lazy & (a >= neg_thr)
        done += step & ~keep & (m_new > stored)
        # the ballot's counters: steps after the tile's first block; the eager vote from the true max (the
        # stored max of a threshold-0 kernel)
        tile_step = (n_lo_t <= n) & (n < n_hi_t - 1)
        m0 = torch.fmax(true, mb)
        a0 = (true - torch.where(m0 == ninf, zero32, m0)) * sl2
        ballot.count_block(counters, step=tile_step.reshape(nseq, nrows),
                           votes=(~keep & (a < limit)).reshape(nt, nseq, nrows),
                           events=(a0 < limit).reshape(nseq, nrows).expand(nt, nseq, nrows))
        stored = torch.where(first, mb, torch.where(step & ~keep, m_new, stored))
        true = torch.where(first | step, torch.maximum(true, mb), true)
        started = started | seen
        lag = torch.where(step, (true.double() - stored.double()) * sl2_64, zero64)
        max_lag = torch.maximum(max_lag, lag)
        lag_sum += lag.sum(dim=1)
        idx = torch.where(lag > 0, torch.ceil(lag * LAG_BINS_PER_UNIT).clamp(1, nbins - 1), zero64).long()
        idx = torch.where(step, idx, nbins) + offs
        hist += torch.bincount(idx.reshape(-1), minlength=nt * (nbins + 1))
    hist = hist.reshape(nt, nbins + 1)[:, :nbins].cpu().numpy()
    flat_order = order.reshape(-1)

    def back(x):
        # (..., rows) in the kernel's order -> bmax's row order
        x = x.cpu().numpy()
        out = np.empty_like(x)
        out[..., flat_order] = x
        return out
    vis, ev = back(visited), back(events)
    done, max_lag, lag_sum = back(done), back(max_lag.float()), lag_sum.cpu().numpy()
    skip = {n: back(c.reshape(nt, rows)) for n, c in counters.items()}
    return {t: LazyRescaleScan(vis, ev, done[i], max_lag[i], float(lag_sum[i]), hist[i],
                               {n: c[i] for n, c in skip.items()})
            for i, t in enumerate(thresholds)}
