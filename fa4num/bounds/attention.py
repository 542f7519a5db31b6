"""Per-element error bounds of FA4's attention forward (out and LSE) against real-arithmetic attention.

A running-error analysis with computed quantities, evaluated in float64 per (batch, head) and, on the (query,
key) grid, per block of query rows on a thread pool (_score_rows): S = Q K^T and |Q||K|^T, the exact softmax
weights w = 2^(lambda (S - M)) (lambda = softmax_scale log2 e, M the row max), then |V|-weighted sums of w and of
w * theta (theta = each weight's relative error bound; the sums that only scale error terms in fp32, rounded up).
Every term is derived in docs/bounds.md; the FA4 step each one models is named where it is computed. The
kernel is never run: the bound holds for whatever bits the kernel produces within its hardware models
(fa4num.hw.mma tensor-core truncation, MUFU tables, fa4num.bounds.exp2 for the software exp2).

Worst case (``out``, ``lse``) and, when asked for a ``delta``, probabilistic (``out_probabilistic``: holds with
probability >= 1 - delta per element under the model of Higham and Mary, SIAM J. Sci. Comput. 41 (2019)
A2815-A2835, with Hoeffding's inequality, assumed for two sources only: (A1) the P-cast errors of keys with
distinct scores are independent and mean-zero (keys of equal score share one error and count as one variable),
(A2) the row sum's RN errors are independent and mean-zero. The PV chain truncates (RZ: biased, measured mean -4
to -20 u per step) and keeps its worst case, as do the weights' systematic errors. A1 and A2 are assumptions
about the inputs, not properties of the hardware; docs/bounds.md section 8 gives what experiments/prob_bound_check.py measured).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np
from numba import njit
from threadpoolctl import threadpool_limits

from fa4num.attention import config
from fa4num.attention.flex import SeqlenInfo, block_keep
from fa4num.attention.kernels import get as get_kernel
from fa4num.attention.problem import DEFAULT_KERNEL, Problem, given_or_plan
from fa4num.attention.schedule import flex_visits, head_groups
from fa4num.fp.dtypes import DTYPES
from fa4num.hw import mufu_model, tanh_table
from fa4num.hw.mma import ACCUMULATORS, chunk_elements
from fa4num.softmax import LN2_F32, LOG2_E_F32, scale_log2_of

from .exp2 import exp2_error_bound, mufu_error_bounds

__all__ = ["AttentionBound", "attention_error_bound", "P_FORMATS"]

U32 = 2.0 ** -24
# P's format after the cast (cvt.rn / cvt.rn.satfinite): unit roundoff, half the smallest subnormal spacing,
# largest finite value
_NARROW = {n: d for n, d in DTYPES.items() if d.width < 32}     # the input formats (fa4num.fp.dtypes)
P_FORMATS = {n: (d.unit_roundoff, d.subnormal_half_spacing, d.max_finite) for n, d in _NARROW.items()}
_NP = {n: d.dtype for n, d in _NARROW.items()}
_TORCH = {f"torch.{n}": n for n in _NARROW}
# the bound is evaluated in float64 from sums of at most ~1e6 terms: relative evaluation error far below 2^-30
_F64_SAFETY = 1.0 + 2.0 ** -30
# the most keys per row for which that margin is proved (sums of at most 2^20 terms: gamma_n < 2^-32, paper H4)
_MAX_KEYS = 1 << 20
# the terms that need their own |V|-weighted GEMM per head: reported with full_terms=True only
_GEMM_TERMS = ("s_gemm", "softcap", "score_mod", "scale_exponent")
# the kernel knobs the bound models, each with its term (below); any other knob set to a value that is not FA4's
# is refused by name (fa4num.attention.kernels.Kernel.knob_refusal), not bounded as if FA4's
MODELLED_KNOBS = frozenset({"tile_m", "tile_n", "gemm", "ffma_exponent", "mufu_arch", "pack_gqa", "use_2cta_instrs",
                            "is_sm103", "fused_bias", "rescale_threshold", "max_offset", "ex2_emu_freq", "ex2_emu_res",
                            "ex2_emu_start_frg", "poly_degree", "coeffs"})
# documented PTX bounds (fa4num.hw.MufuModel.ptx_bound), used when the emulator runs numpy's libm
# (mufu_arch="libm", statistical mode), and for tanh.approx.f32 where no measured table exists (the H200 table
# measures 2^-16.5, see _tanh_abs_error)
_LIBM = mufu_model("libm")
_PTX_EX2_REL, _PTX_RCP_REL, _PTX_LG2_ABS, _PTX_TANH_REL = (_LIBM.ptx_bound(n)[1] for n in ("ex2", "rcp", "lg2", "tanh"))


@dataclass
class AttentionBound:
    """Bounds on ``|kernel - exact|`` for FA4's forward.

    Elements with no finite bound (docs/bounds.md, section 5.8) have ``out``/``lse`` = +inf: rows that see a
    non-finite q, k or v value, rows where the kernel's fp32 arithmetic can overflow (huge softmax_scale) and
    every element for a negative softmax_scale; their ``out_exact``/``lse_exact`` are NaN where the exact value
    is undefined (a NaN or infinite input in the row's visible keys, its query or the value column).

    Attributes
    ----------
    out : numpy.ndarray
        (batch, seqlen_q, heads, head_dim) float64: worst-case bound per output element.
    lse : numpy.ndarray
        (batch, heads, seqlen_q) float64: worst-case bound on the natural-log LSE per row.
    out_probabilistic : numpy.ndarray or None
        As ``out``, holding with probability >= 1 - delta per element under assumptions A1-A2 of the module
        docstring (Higham-Mary model for the P cast and the row sum; worst case elsewhere); None unless the
        bound was asked for a ``delta``.
    out_exact : numpy.ndarray
        The real-arithmetic attention (float64, its evaluation error is inside the bound).
    lse_exact : numpy.ndarray
        Its LSE.
    terms : dict
        Per source, the largest contribution over the elements (absolute units of out): exp2_mufu,
        exp2_software, rescale, p_cast, row_sum, pv_gemm, rcp, out_cast, and with ``full_terms`` s_gemm,
        scale_exponent, softcap or score_mod; lse_terms likewise for the LSE.
    a_priori : dict
        Closed-form normwise bound on ``max |out - exact|`` (see ``a_priori_bound``).
    """
    out: np.ndarray
    lse: np.ndarray
    out_probabilistic: np.ndarray
    out_exact: np.ndarray
    lse_exact: np.ndarray
    terms: dict
    lse_terms: dict
    a_priori: dict
    kernel: str
    delta: float
    options: dict = field(repr=False, default_factory=dict)


def _as_array(x, name):
    mod = type(x).__module__
    if mod.startswith("torch"):
        import torch
        dt = _TORCH.get(str(x.dtype))
        if dt is None:
            raise ValueError(f"{name} dtype must be one of {tuple(_TORCH)}, got {x.dtype}")
        t = x.detach().contiguous().cpu()
        raw = t.view(torch.int16 if _NP[dt].itemsize == 2 else torch.uint8).numpy()
        return raw.view(_NP[dt])
    a = np.asarray(x)
    if a.dtype.name not in _NP:
        raise ValueError(f"{name} dtype must be one of {tuple(_NP)}, got {a.dtype}")
    return a


@functools.lru_cache(maxsize=64)
def _sw_bound(deg, coeffs, hi):
    return exp2_error_bound(deg, coeffs=coeffs, variant="packed", domain=(-math.inf, hi))


def _gamma(n, u):
    """(1 + u)^n - 1, rounded up (n roundings of relative size u in a chain)."""
    return math.expm1(n * math.log1p(u)) * _F64_SAFETY


@dataclass(frozen=True)
class _Gemm:
    """Error model of one accumulation chain: per chunk |err| <= gamma (|C| + sum |terms|) + eta."""
    gamma: float
    eta: float
    chunk: int

    def chain(self, nchunks, absum, u_extra=0.0, nextra=0):
        """Bound of the accumulated error of ``nchunks`` chained steps (plus ``nextra`` RN multiplications of
        the accumulator, each relative ``u_extra``) over terms with absolute sum ``absum``."""
        nchunks = np.asarray(nchunks, np.float64)
        nextra = np.asarray(nextra, np.float64)
        growth = np.exp(nchunks * math.log1p(self.gamma) + nextra * math.log1p(u_extra))
        return np.expm1(np.log(growth)) * absum * _F64_SAFETY + nchunks * self.eta * growth


def _gemm_model(gemm: str, arch: str, dtype: str, k_total: int) -> _Gemm:
    """fa4num.hw.mma models. "wgmma": every term and C truncated to F bits below the largest exponent, then RZ to
    fp32: per chunk |err| < (L+1) 2^-F max|term| + 2^-23 |sum| (+ the floor of pinned exponents); "exact": one RN
    per chunk; "blas": fp32 BLAS in any order, gamma_{K} over the whole sum."""
    minexp = _NARROW[dtype].min_normal_exp
    if gemm == "wgmma":
        acc = ACCUMULATORS[arch]
        L = chunk_elements(_NP[dtype], arch)
        F = acc.fraction_bits
        trunc = (L + 1) * 2.0 ** -F
        g = trunc + 2.0 ** -23 * (1 + trunc)
        # terms whose exponent is pinned (subnormal inputs, zeros at e_zero, fp32 subnormal accumulators)
        eta = (L + 1) * 2.0 ** (max(2 * minexp + 2, acc.e_zero, -126) - F) + 2.0 ** -149
        return _Gemm(g * _F64_SAFETY, eta, L)
    if gemm == "exact":
        L = chunk_elements(_NP[dtype], arch)
        return _Gemm(U32 * _F64_SAFETY, 2.0 ** -150, L)
    # BLAS: treat the whole product as one chunk with gamma_{K+1}
    return _Gemm(_gamma(k_total + 1, U32), (k_total + 1) * 2.0 ** -150, max(k_total, 1))


# the fp32 absolute sums (_abs_gemm) run over blocks of at most this many terms, added in float64: the relative
# widening (K + 4) 2^-23 stays below 2^-13 whatever the number of keys
_ABS_GEMM_BLOCK = 1024


def _abs_gemm(a, b):
    """An upper bound on a @ b for nonnegative a, b (float64 or fp32 arrays) from fp32 BLAS, half the cost of
    float64 (docs/bounds.md, section 9.1). Over each block of K <= 1024 terms: every entry rounds to fp32 (RN:
    |err| <= 2^-24 |x| + 2^-150), each product and addition rounds (RN, or within 2^-150 absolutely below
    2^-126; an FMA rounds once; any order), so the block's fp32 result times (1 + 2^-23)^(K+4) >= (1 + 2^-24)^(K+3),
    plus (K + 2) 2^-148 (1 + max a + max b) for the absolute parts, is at least its exact value; the blocks are
    added in float64 (widened by 2^-50 per block). An fp32 overflow gives +inf."""
    kdim = a.shape[1]
    a32 = a if a.dtype == np.float32 else a.astype(np.float32)
    b32 = b if b.dtype == np.float32 else b.astype(np.float32)
    blk = max(1, min(kdim, _ABS_GEMM_BLOCK))
    nblk = -(-kdim // blk)
    with np.errstate(over="ignore"):
        r = np.zeros((a.shape[0], b.shape[1]))
        for s0 in range(0, kdim, blk):
            r += (a32[:, s0:s0 + blk] @ b32[s0:s0 + blk]).astype(np.float64)
    mag = 1.0 + float(a32.max(initial=0.0)) + float(b32.max(initial=0.0))
    return r * ((1 + (blk + 4) * 2.0 ** -23) * (1 + nblk * 2.0 ** -50)) + nblk * (blk + 2) * 2.0 ** -148 * mag


def _delta_lambda(softmax_scale: float) -> tuple[float, float, float]:
    """(sl2 as the kernel has it, exact lambda = softmax_scale log2 e rounded to float64, |sl2 - lambda| up)."""
    import mpmath
    sl2 = float(scale_log2_of(softmax_scale))
    with mpmath.workprec(200):
        lam = mpmath.mpf(softmax_scale) * mpmath.log(2) ** -1
        dl = abs(mpmath.mpf(sl2) - lam)
        ln2err = abs(mpmath.mpf(float(LN2_F32)) - mpmath.log(2))
        return sl2, float(lam), float(dl) * (1 + 2.0 ** -50), float(ln2err) * (1 + 2.0 ** -50)


def attention_error_bound(q=None, k=None, v=None, *, problem: Problem | None = None, delta=None,
                          full_terms=False, **fa4_args) -> AttentionBound:
    """Rigorous per-element bound on ``|out_kernel - out_exact|`` and ``|lse_kernel - lse_exact|`` for FA4's forward.

    Parameters
    ----------
    q, k, v : arrays or torch tensors
        FA4's layout (batch, seqlen, heads, head_dim), as fa4num.attention.forward takes them.
    problem : Problem, optional
        ``plan(q, k, v, **fa4_args)`` already made (then no q, k, v, fa4_args): the kernel options the bound
        uses are exactly the forward's (one parser, :func:`fa4num.attention.problem.plan`).
    delta : float, optional
        Also compute ``out_probabilistic``, failing with probability at most ``delta`` per element
        (0 < delta < 1; 1e-6 in the paper). None (default): no probabilistic variant (``out_probabilistic`` is
        None), which saves a GEMM and the tie analysis per head.
    full_terms : bool
        Also report the terms that need their own GEMM with ``|V|`` per head (``s_gemm``, ``scale_exponent``,
        ``softcap`` / ``score_mod``); without (default), ``terms`` lacks those keys. The bound is the same.
    **fa4_args
        fa4num.attention.forward's arguments (softmax_scale: out_exact uses this real number, the kernel its fp32
        scale_log2; causal, kernel, window_size, learnable_sink, cu_seqlens_q/cu_seqlens_k with 3-D q, k, v
        (varlen), page_table (paged KV), pack_gqa, rescale_threshold, max_offset, ex2_emu_freq, coeffs, gemm, ...),
        resolved by the forward's own :func:`fa4num.attention.plan`; head_dim_v may differ from head_dim.
        FlexAttention (docs/bounds.md, 5.7a): any ``mask_mod`` and ``block_sparse_tensors`` (the exact attention
        is over the entries the forward keeps, the stale max replayed in its visiting order: mask blocks, then
        full blocks); a ``score_mod`` only as one of fa4num.attention.flex's built-ins (softcap_mod, alibi_mod,
        alibi_exp2_mod, rel_bias_mod), bounded against the real-arithmetic form it carries (``mod.builtin``: score
        times softmax_scale plus the exact bias); a user score_mod is refused by name. Not
        modelled, and refused by name: fp8 descales, split-KV (num_splits resolved != 1), a knob outside
        ``MODELLED_KNOBS`` set to a value that is not FA4's. Configurations
        without a finite bound (fp32 overflow, a scale that is 0 in fp32, ...) get +inf (docs/bounds.md, 5.8).

    Returns
    -------
    AttentionBound

    Examples
    --------
    >>> import numpy as np, ml_dtypes
    >>> from fa4num.attention import forward
    >>> from fa4num.bounds import attention_error_bound
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = (rng.standard_normal((1, 64, 1, 64)).astype(ml_dtypes.bfloat16) for _ in range(3))
    >>> b = attention_error_bound(q, k, v)
    >>> out = forward(q, k, v).out.astype(np.float64)
    >>> bool((np.abs(out - b.out_exact) <= b.out).all())
    True
    """
    problem = given_or_plan(problem, q, k, v, fa4_args, who="attention_error_bound")
    fl = problem.flex
    if fl is not None and fl.score_mod is not None and getattr(fl.score_mod, "builtin", None) is None:
        # a user callable's fp32 arithmetic has no known error against any real function: refused by name
        raise ValueError(f"score_mod: attention_error_bound bounds the built-in score_mods of "
                         f"fa4num.attention.flex (softcap_mod, alibi_mod, alibi_exp2_mod, rel_bias_mod) only, got "
                         f"{getattr(fl.score_mod, '__name__', type(fl.score_mod).__name__)!r}")
    if delta is not None and not (isinstance(delta, float) and 0.0 < delta < 1.0):
        raise ValueError(f"delta must be None or a float in (0, 1), got {delta!r}")
    if not isinstance(full_terms, bool):
        raise ValueError(f"full_terms must be a bool, got {full_terms!r}")
    # refused, not bounded: the fp8 descales and split-KV's combine kernel are outside this analysis (the
    # forward runs both); plan() has already refused what the kernel itself refuses (head dims, dtypes)
    if problem.descaled:
        raise ValueError("q_descale/k_descale/v_descale: fp8 descales are not modelled by attention_error_bound")
    if problem.num_splits != 1:
        raise ValueError(f"num_splits != 1: not modelled by attention_error_bound (split-KV resolved to "
                         f"{problem.num_splits} splits; pass num_splits=1)")
    why = problem.kernel.knob_refusal(problem, MODELLED_KNOBS, who="attention_error_bound")
    if why is not None:
        raise ValueError(why)
    if problem.sink is not None and not np.isfinite(problem.sink).all():
        raise ValueError(f"learnable_sink must be a finite float array of shape (heads,) = ({problem.heads},) for "
                         "the bound")
    scale = problem.softmax_scale
    qa, ka, va = _as_array(problem.q, "q"), _as_array(problem.k, "k"), _as_array(problem.v, "v")
    # rows without a finite bound (docs/bounds.md, section 5.8) carry inf and NaN through the float64 evaluation.
    # The grid work alternates numba kernels on every core with BLAS calls per block of rows (_score_rows); BLAS
    # threads that spin after a call would take the cores from the next kernel (twice the time on 2 cores), so
    # BLAS runs on one thread for the call (threadpoolctl; the process' setting is restored on return)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"), threadpool_limits(limits=1, user_api="blas"):
        if not math.isfinite(scale):
            return _unbounded(_bound_dense_or_varlen(qa, ka, va, problem=problem, softmax_scale=1.0, delta=delta,
                                                     full_terms=full_terms),
                              exact=False)
        if _scale_vanishes(scale, problem.softcap):
            # the kernel's fp32 scale_log2 is 0 (or its fp32 scale, under a soft cap, is infinite): masked
            # scores give -inf * 0 = NaN in the exponent (docs/bounds.md, section 5.8)
            return _unbounded(_bound_dense_or_varlen(qa, ka, va, problem=problem, softmax_scale=scale, delta=delta,
                                                     full_terms=full_terms))
        return _bound_dense_or_varlen(qa, ka, va, problem=problem, softmax_scale=scale, delta=delta,
                                      full_terms=full_terms)


def _scale_vanishes(scale: float, softcap: float) -> bool:
    """True when the kernel's exponent scale is unusable: scale_log2 = RN(RN(scale) LOG2_E) is 0 or infinite
    without a soft cap; RN(scale) is infinite with one (its scale_log2 is LOG2_E)."""
    if softcap:
        return not math.isfinite(float(np.float32(scale)))
    with np.errstate(over="ignore"):
        sl2 = float(scale_log2_of(scale))
    return sl2 == 0.0 or not math.isfinite(sl2)


def _unbounded(p: AttentionBound, *, exact: bool = True) -> AttentionBound:
    """``p`` with no finite bound anywhere (and, with ``exact=False``, no defined exact value)."""
    for a in (p.out, p.out_probabilistic, p.lse):
        if a is not None:
            a[...] = np.inf
    if not exact:
        p.out_exact[...] = np.nan
        p.lse_exact[...] = np.nan
    p.terms = dict.fromkeys(p.terms, math.inf)
    p.lse_terms = dict.fromkeys(p.lse_terms, math.inf)
    p.a_priori = {**p.a_priori, "bound": math.inf}
    return p


def _bound_dense_or_varlen(qa, ka, va, *, problem, softmax_scale, delta, full_terms):
    if not problem.varlen and problem.page_table is None:
        return _bound_dense(qa, ka, va, problem=problem, softmax_scale=softmax_scale, delta=delta,
                            full_terms=full_terms)
    return _bound_sequences(qa, ka, va, problem=problem, softmax_scale=softmax_scale, delta=delta,
                            full_terms=full_terms)


def _bound_sequences(qa, ka, va, *, problem, softmax_scale, delta, full_terms):
    """Varlen (flash_attn_varlen_func) and paged KV: every sequence is its own attention problem with its own
    masks and KV blocks (seqlen_info.py offsets; a page table only changes where keys are read from, the
    problem's sequences gather them), bounded one by one with the kernel's configuration (the problem's
    options, resolved for the whole call: page_size and varlen select FA4's tuning there)."""
    seqs = problem.sequences(qa, ka, va)
    if any(s.k.shape[0] == 0 and s.q.shape[0] > 0 for s in seqs):
        raise ValueError("cu_seqlens_k: a sequence with queries and no key is not modelled by the bound")
    h, dv = problem.heads, problem.head_dim_v
    out = np.zeros(qa.shape[:-1] + (dv,))
    out_p, out_x = np.zeros_like(out) if delta is not None else None, np.zeros_like(out)
    lse_shape = (h, qa.shape[0]) if problem.varlen_q else (qa.shape[0], h, qa.shape[1])
    lse, lse_x = np.zeros(lse_shape), np.full(lse_shape, -np.inf)
    parts = []
    for sq_ in seqs:
        if sq_.q.shape[0] == 0:
            continue
        p = _bound_dense(sq_.q[None], sq_.k[None], sq_.v[None], problem=problem, softmax_scale=softmax_scale,
                         delta=delta, full_terms=full_terms, seq_meta=(sq_.batch, SeqlenInfo(
                             sq_.q.shape[0], sq_.k.shape[0],
                             0 if problem.cu_seqlens_q is None else int(problem.cu_seqlens_q[sq_.batch]),
                             0 if problem.cu_seqlens_k is None else int(problem.cu_seqlens_k[sq_.batch]))))
        out[sq_.out_index], out_x[sq_.out_index] = p.out[0], p.out_exact[0]
        if out_p is not None:
            out_p[sq_.out_index] = p.out_probabilistic[0]
        for hh in range(h):
            lse[sq_.lse_index(hh)], lse_x[sq_.lse_index(hh)] = p.lse[0, hh], p.lse_exact[0, hh]
        parts.append(p)
    if not parts:
        raise ValueError("cu_seqlens_q: every sequence is empty")
    merge = {n: max(p.terms[n] for p in parts) for n in parts[0].terms}
    lmerge = {n: max(p.lse_terms[n] for p in parts) for n in parts[0].lse_terms}
    ap = max((p.a_priori for p in parts), key=lambda a: a["bound"])
    return AttentionBound(out=out, lse=lse, out_probabilistic=out_p, out_exact=out_x, lse_exact=lse_x, terms=merge,
                          lse_terms=lmerge, a_priori=ap, kernel=problem.kernel.name, delta=delta,
                          options=parts[0].options)


@dataclass(frozen=True)
class _Rows:
    """The keys each query row of one (sequence, head) sees and the KV blocks it visits. first..last: the span of
    its visible keys (first > last: none); vis: bool (seqlen_q, seqlen_k) of the visible keys, None when they are
    the whole span; nvis: their count; nblk: the KV blocks holding one, in visiting order ``order[:, :nblk]``
    (the kernel's other blocks are fully masked for the row: P = 0 exactly, the max unchanged, no error); fb_lo..
    fb_hi: the keys of the first of them; bad: rows whose kernel sums over other keys than the exact attention
    (a key visited twice, a kept key past seqlen_k in a block visited without seqlen masking): no finite bound."""
    first: np.ndarray
    last: np.ndarray
    vis: np.ndarray | None
    nvis: np.ndarray
    nblk: np.ndarray
    fb_lo: np.ndarray
    fb_hi: np.ndarray
    order: np.ndarray
    bad: np.ndarray


def _window_rows(window, sq: int, sk: int, tn: int) -> _Rows:
    """Causal / sliding-window / no mask (masking.py, bottom-right aligned): one contiguous range of keys per row,
    its KV blocks visited right to left (block_info.py get_n_block_min_max)."""
    diag = np.arange(sq, dtype=np.int64) + (sk - sq)
    last = np.full(sq, sk - 1, np.int64)
    first = np.zeros(sq, np.int64)
    if window.causal:
        last = np.minimum(diag, sk - 1)
    elif window.local:
        if window.right is not None:
            last = np.minimum(diag + window.right, sk - 1)
        if window.left is not None:
            first = np.maximum(diag - window.left, 0)
    nvis = np.maximum(last - first + 1, 0)
    nblk = np.where(nvis > 0, last // tn - first // tn + 1, 0)
    kb = np.arange(int(nblk.max(initial=0)))
    order = np.where(kb[None, :] < nblk[:, None], (last // tn)[:, None] - kb[None, :], -1)
    return _Rows(first, last, None, nvis, nblk, np.maximum(last // tn * tn, first), last, order,
                 np.zeros(sq, bool))


def _flex_rows(problem, *, batch: int, head: int, seqinfo, seqlen_q: int, seqlen_k: int, tn: int) -> _Rows:
    """A mask_mod or block-sparse call: per M block the forward's own visits (fa4num.attention.schedule.flex_visits:
    every KV block right to left for a dense mask_mod; a sparse call's mask blocks, then its full blocks, each list
    from its last entry) and, per visit, the entries the kernel keeps (fa4num.attention.flex.block_keep: seqlen
    masking on the visit that has it, the mask_mod on the blocks that take it)."""
    opts, fl = problem.opts, problem.flex
    g_all = problem.qhead_per_kvhead
    grp = next(g for g in head_groups(head // g_all, qhead_per_kvhead=g_all, pack_gqa=opts.pack_gqa) if head in g)
    ng = len(grp)
    sq, sk = seqlen_q, seqlen_k
    nb = -(-sk // tn)
    mbs = (np.arange(sq) * ng + grp.index(head)) // opts.tile_m
    vis = np.zeros((sq, sk), bool)
    bad = np.zeros(sq, bool)
    order_rows, counts = {}, np.zeros(sq, np.int64)
    for mb in np.unique(mbs):
        rr = np.flatnonzero(mbs == mb)
        (visits,) = flex_visits(problem, int(mb), batch=batch, head=grp[0], seqlen_q=sq, seqlen_k=sk, group=ng)
        seen = np.zeros((rr.size, nb * tn), bool)
        ordr = np.full((rr.size, len(visits)), -1, np.int64)
        cnt = np.zeros(rr.size, np.int64)
        for n, use_mod, seqlen_masked in visits:
            if n < 0:
                continue     # a tile with no KV block: masked everywhere
            cols = n * tn + np.arange(tn)
            keep = block_keep(fl, window=problem.window, cols=cols, seqlen_masked=seqlen_masked, use_mod=use_mod,
                              batch=batch, heads=np.full(rr.size, head), q_idx=rr, seqlen_q=sq, seqlen_k=sk,
                              seqinfo=seqinfo, arch=opts.mufu_arch)
            bad[rr] |= (keep & seen[:, cols]).any(axis=1)
            seen[:, cols] |= keep
            anyk = keep.any(axis=1)
            ordr[anyk, cnt[anyk]] = n
            cnt += anyk
        bad[rr] |= seen[:, sk:].any(axis=1)
        vis[rr] = seen[:, :sk]
        counts[rr] = cnt
        for i, r in enumerate(rr):
            order_rows[r] = ordr[i]
    nvis = vis.sum(axis=1)
    has = nvis > 0
    first = np.where(has, vis.argmax(axis=1), 0)
    last = np.where(has, sk - 1 - vis[:, ::-1].argmax(axis=1), -1)
    order = np.full((sq, int(counts.max(initial=0))), -1, np.int64)
    for r, o in order_rows.items():
        order[r, :counts[r]] = o[:counts[r]]
    fb = np.maximum(order[:, 0], 0) if order.shape[1] else np.zeros(sq, np.int64)
    return _Rows(first, last, vis, nvis, counts, fb * tn, np.minimum(fb * tn + tn - 1, sk - 1), order, bad)


def _bias_scores(S, A, rho, *, form, scale, head, aux, ex2_rel, row0=0):
    """(S', rho', rho_b): the exact score S' = S scale + b of an additive built-in score_mod (float64), a bound rho'
    on |S'_kernel - S'| and its part rho_b from the mod's own operations (docs/bounds.md, section 5.7); S holds
    the query rows from ``row0`` on.

    The real-arithmetic bias b (fa4num.attention.flex, the mod's ``form``), with dist = |q_idx - kv_idx|:
    rel_bias_mod: min(dist, clamp); alibi_mod: -slope dist with slope the fp32 aux value; alibi_exp2_mod:
    -2^(-8 (h+1) c) dist with c its fp32 constant. Kernel (softmax.apply_score_mod_inner): x = RN(S_k s32) then
    RN(x + b32), or with ``contract`` one FFMA fma(S_k, s32, b32); b32 the mod's fp32 bias (an exact int below
    2^24; RN(slope dist), computed here exactly as the kernel does; the exp2 slope within ex2.approx's relative
    error of 2^(RN(-8 (h+1) c)), the argument's rounding computed exactly). With |S_k - S| <= rho and
    e0 = rho s32 + |S| |s32 - scale| (+ 2^-24 (|S| + rho) s32 without contraction):
      |S'_k - S'| <= (e0 + |b32 - b|) + 2^-24 (|S'| + e0 + |b32 - b|)     (+ float64's evaluation of S')."""
    kind, p = form
    n_q, n_k = S.shape
    u = U32
    s32 = float(np.float32(scale))
    # S holds the query rows row0 .. row0 + n_q of the sequence (a block of _score_rows)
    dist = np.abs(np.arange(row0, row0 + n_q)[:, None] - np.arange(n_k)[None, :])
    if kind == "rel_bias_mod":
        b = (dist if p["clamp"] is None else np.minimum(dist, p["clamp"])).astype(np.float64)
        eb = np.abs(b.astype(np.float32).astype(np.float64) - b)
    elif kind == "alibi_mod":
        slope = np.asarray(aux[p["aux_index"]]).astype(np.float32)[head]
        b = -float(slope) * dist
        eb = np.abs(-(slope * dist.astype(np.float32)).astype(np.float64) - b)
    elif kind == "alibi_exp2_mod":
        e = -8 * (head + 1)
        arg = e * p["c"]                                      # exact in float64 (c is an fp32 value)
        arg32 = float(np.float32(e) * np.float32(p["c"]))
        if arg32 < -125:
            raise ValueError(f"score_mod: alibi_exp2_mod's slope 2^{arg32:g} is subnormal (head {head}); not bounded")
        slope = 2.0 ** arg
        rel = math.expm1(abs(arg32 - arg) * math.log(2) + math.log1p(ex2_rel)) * _F64_SAFETY
        b = -slope * dist
        eb = dist * slope * rel + u * dist * slope * (1 + rel)
    else:
        raise ValueError(f"score_mod: no bound for the built-in form {kind!r}")
    Sx = S * scale + b
    e0 = rho * s32 + np.abs(S) * abs(s32 - scale)
    if not p["contract"]:
        e0 = e0 + u * (np.abs(S) + rho) * s32
    own = (eb + u * (np.abs(Sx) + e0 + eb)) * _F64_SAFETY
    f64 = 2.0 ** -51 * (np.abs(S) * abs(scale) + np.abs(b))
    return Sx, (e0 * _F64_SAFETY + own + f64) * _F64_SAFETY, (own + f64) * _F64_SAFETY


def _bound_dense(qa, ka, va, *, problem, softmax_scale, delta, full_terms, seq_meta=None):
    """attention_error_bound for 4-D q, k, v (one sequence of a varlen call, or the whole dense call), with the
    problem's kernel options; ``softmax_scale``: the problem's, or its opposite (a negative scale's reflection);
    ``seq_meta``: (batch index, fa4num.attention.flex.SeqlenInfo) of a varlen call's sequence (what a mod sees)."""
    kern, opts = problem.kernel, problem.opts
    dt = problem.dtype
    b, sq, h, d = qa.shape
    sk, hk, dv = ka.shape[1], ka.shape[2], va.shape[3]
    if sk > _MAX_KEYS:
        # H4 (the float64 evaluation inside the 1 + 2^-30 margin) is proved for sums of at most 2^20 terms
        raise ValueError(f"seqlen_k must be at most 2^20 = {_MAX_KEYS} keys per sequence for the bound (H4: its "
                         f"float64 evaluation margin), got {sk}")
    h_per_kv = h // hk
    if softmax_scale < 0:
        # FA4 subtracts the row max of S, not of S * scale: with a negative scale its exponents are positive
        # (masked -inf scores give +inf), outside this analysis. The exact attention is that of -q and |scale|
        # (softcap's tanh is odd); no finite bound is claimed (docs/bounds.md, section 5.8)
        return _unbounded(_bound_dense(-qa, ka, va, problem=problem, softmax_scale=-softmax_scale, delta=delta,
                                       full_terms=full_terms, seq_meta=seq_meta))
    # non-finite inputs: bounded with zeros in their place, then every element they reach is unbounded (+inf)
    # and its exact value undefined (NaN) -- docs/bounds.md, section 5.8
    bad_q, bad_k, bad_v = (~np.isfinite(a.astype(np.float32)) for a in (qa, ka, va))
    bad_q, bad_k = bad_q.any(axis=3), bad_k.any(axis=3)
    if bad_q.any() or bad_k.any() or bad_v.any():
        qa, ka, va = (np.where(np.isfinite(a.astype(np.float32)), a, np.zeros((), a.dtype)) for a in (qa, ka, va))
    softcap, window = problem.softcap, problem.window
    fl = problem.flex
    # a built-in score_mod's real-arithmetic form (fa4num.attention.flex); softcap_mod's is softcap='s
    form = None if fl is None or fl.score_mod is None else getattr(fl.score_mod, "builtin", None)
    if form is not None and form[0] == "softcap_mod":
        softcap, form = form[1]["softcap"], None
    scored = bool(softcap) or form is not None
    sink = None if problem.sink is None else problem.sink.astype(np.float64)
    scale = softmax_scale
    # with a score_mod the softmax runs on the modified score with scale_log2 = LOG2_E (compute_softmax_scale_log2)
    sl2, lam, dlam, dln2 = _delta_lambda(1.0 if scored else scale)
    tanh_err = _tanh_abs_error(opts.mufu_arch) if softcap else None

    # --- per-kernel constants -------------------------------------------------------------------------------
    thr = float(getattr(opts, "rescale_threshold", 0.0))
    off = float(getattr(opts, "max_offset", 0.0))
    tn = opts.tile_n
    if not mufu_model(opts.mufu_arch).exact("ex2"):     # the statistical mode: the PTX bounds
        ex2_rel, rcp_rel, lg2_abs = _PTX_EX2_REL, _PTX_RCP_REL, (lambda e: _PTX_LG2_ABS * max(1, abs(e) + 1))
    else:
        mb = mufu_error_bounds(opts.mufu_arch)
        ex2_rel, rcp_rel, lg2_abs = mb.ex2_relative, mb.rcp_relative, mb.lg2_absolute
    emu_cols = kern.emulated_columns(opts)
    emu_cols = np.zeros(tn, bool) if emu_cols is None else emu_cols
    sw = None
    if emu_cols.any():
        # the problem's coefficients are resolved to fp32 (their degree is opts.poly_degree); softmax arguments
        # reach thr + off (+ rounding): domain up to thr + off + 1
        coeffs = None if opts.coeffs is None else tuple(float(c) for c in opts.coeffs)
        sw = _sw_bound(opts.poly_degree, coeffs, thr + off + 1.0)
    # absolute error of a P value (normalised by c >= 2^(off - rho sl2)): MUFU flush below 2^-126, the software
    # exp2's subnormal results, and a rescale factor flushed to 0 (contributions below 2^-126 of 2^(thr+off))
    eta_exp = max(2.0 ** -126, sw.absolute_subnormal if sw is not None else 0.0) * (1 + 2.0 ** (thr + off + 1))
    u_p, eta_p, pmax = P_FORMATS[dt]
    p_ulp_min = 2 * eta_p                   # the spacing of P's subnormals (eta_p is half of it)
    out_dt = "bfloat16" if dt.startswith("float8") else dt
    # the gemm option names a tensor-core model and its accumulator table ("tcgen05" = the wgmma model with
    # Blackwell's table), config.GEMM_IMPL
    gemm, gemm_arch = config.GEMM_IMPL[opts.gemm]
    gemm_s = _gemm_model(gemm, gemm_arch, dt, d)
    pv_k = tn if gemm != "blas" else -(-sk // tn) * tn
    gemm_pv = _gemm_model(gemm, gemm_arch, dt, pv_k)
    probabilistic = delta is not None
    lam_p = math.sqrt(2.0 * math.log(6.0 / delta)) if probabilistic else 0.0  # Hoeffding, delta/3 per random sum

    out_b = np.zeros((b, sq, h, dv))
    out_p = np.zeros((b, sq, h, dv)) if probabilistic else None
    out_x = np.zeros((b, sq, h, dv))
    lse_b = np.zeros((b, h, sq))
    lse_x = np.full((b, h, sq), -np.inf)
    names = ("s_gemm", "softcap", "score_mod", "scale_exponent", "exp2_mufu", "exp2_software", "rescale", "p_cast",
             "row_sum", "pv_gemm", "rcp", "out_cast")
    if not full_terms:
        names = tuple(n for n in names if n not in _GEMM_TERMS)
    terms = {n: 0.0 for n in names}
    lse_names = ("weights", "row_sum", "lg2", "scale", "roundings")
    lterms = {n: 0.0 for n in lse_names}
    vmax_all = 0.0
    col = np.arange(sk)
    emu_key = emu_cols[col % tn]
    # a mask_mod or block sparsity: each (sequence, head) has its own visible keys and visiting order
    flex_rows = fl is not None and (fl.mask_mod is not None or fl.block_sparse is not None)
    rows_w = None if flex_rows else _window_rows(window, sq, sk, tn)
    log_ex2_col = np.where(emu_key, math.log1p(sw.relative) if sw is not None else 0.0, math.log1p(ex2_rel))
    # knobs of one kernel's options only: SM100's fused_bias=False adds a rounding, SM90's ffma_exponent=False
    # evaluates the exponent as FMUL + FADD
    nround_bias = 1 if getattr(opts, "fused_bias", True) else 2
    fmul_x = not getattr(opts, "ffma_exponent", True)
    # SoftmaxSm100 (the lazily rescaling kernel): packed row-sum accumulators and max_offset in the epilogue
    bw = kern.lazy_rescale
    emu_idx = np.flatnonzero(emu_key)
    for bb in range(b):
        batch, seqinfo = (bb, SeqlenInfo(sq, sk)) if seq_meta is None else seq_meta
        for hh in range(h):
            kv = hh // h_per_kv
            rows = rows_w if rows_w is not None else _flex_rows(problem, batch=batch, head=hh, seqinfo=seqinfo,
                                                                seqlen_q=sq, seqlen_k=sk, tn=tn)
            first, last, nvis, nblk = rows.first, rows.last, rows.nvis, rows.nblk
            has = nvis > 0
            nresc = np.maximum(nblk - 1, 0)
            Q = qa[bb, :, hh].astype(np.float64)
            K = ka[bb, :, kv].astype(np.float64)
            V = va[bb, :, kv].astype(np.float64)
            aV = np.abs(V)
            vmax_all = max(vmax_all, float(aV.max(initial=0.0)))
            if rows.vis is None:
                # sum over the visible keys of |V| per column, from prefix sums (the visible keys are a contiguous
                # range; + the prefix sums' own float64 error, at most sk 2^-53 of the total each; rows that see
                # no key, e.g. causal with seqlen_q > seqlen_k, have last < first: clipped indices, and has masks
                # them)
                cV = np.concatenate([np.zeros((1, dv)), np.cumsum(aV, axis=0)])
                hi_, lo_ = cV[np.clip(last + 1, 0, sk)], cV[np.clip(first, 0, sk)]
                Vabs = np.where(has[:, None], hi_ - lo_ + sk * 2.0 ** -52 * hi_, 0.0)
            else:
                Vabs = rows.vis @ aV
                Vabs = Vabs + sk * 2.0 ** -52 * Vabs
            # everything on the (query, key) grid, a block of rows at a time (_score_rows): the per-row quantities
            # and the |V|-weighted sums; blocks of a few MB come back from the heap instead of fresh pages
            Kt = np.ascontiguousarray(K.T)
            rb = _row_block(sk)
            aV32 = aV.astype(np.float32)
            score = functools.partial(
                _score_rows, Q=Q, Kt=Kt, V=V, aV=aV, aV32=aV32, rows=rows, gemm_s=gemm_s, gemm=gemm, col=col,
                softcap=softcap, form=form, scored=scored, scale=scale, d=d, tanh_err=tanh_err, fl=fl, hh=hh,
                ex2_rel=ex2_rel, nresc=nresc, log_ex2_col=log_ex2_col, sl2=sl2, lam=lam, dlam=dlam, thr=thr, off=off,
                nround_bias=nround_bias, fmul_x=fmul_x, tn=tn, bw=bw, u_p=u_p, p_ulp_min=p_ulp_min,
                probabilistic=probabilistic, full_terms=full_terms, emu_idx=emu_idx)
            starts = list(range(0, max(sq, 1), rb))
            blocks = list(_pool().map(lambda r0: score(r0, min(r0 + rb, sq)), starts))
            blk = {n_: np.concatenate([x[n_] for x in blocks]) for n_ in blocks[0]}
            Mf, rho_m, W, wth, theta_max, log_resc = (blk[n_] for n_ in ("M", "rho_m", "W", "wth", "theta_max",
                                                                           "log_resc"))
            fits = blk["fits"]
            # learnable sink (softmax.py apply_learnable_sink / Softmax.finalize): one more weight in the row sum,
            # with no value (docs/bounds.md, section 5.6)
            w_s, th_s, e_empty = _sink_weight(None if sink is None else sink[hh], Mf, rho_m, has & fits,
                                              lam=lam, sl2=sl2, dlam=dlam, thr=thr, off=off, ex2_rel=ex2_rel,
                                              lg2_abs=lg2_abs, dln2=dln2, lazy=bw)
            Wd = np.where(has, W + w_s, 1.0)
            wth = wth + w_s * th_s
            n_eta = nvis + (sink is not None)                   # weights that carry an absolute error
            ostar = blk["wV"] / Wd[:, None]
            G, H = blk["G"], blk["H"]
            # normalisation constant c of the kernel's weights: c >= 2^(off - rho sl2); A_j <= (1+ex2)^blocks
            cinv = 2.0 ** (-off) * np.exp2(rho_m * sl2)
            a_up = np.exp(nresc * math.log1p(ex2_rel))
            eta_w = eta_exp * cinv * a_up                       # absolute error of a normalised weight
            tau = (wth + n_eta * eta_w) / Wd
            # rows whose weights' error bound reaches 1/2 of the row sum (|S| error times scale_log2 not well below
            # 1, e.g. a huge softmax_scale) or whose fp32 arithmetic can overflow get no finite bound
            ok = has & fits & (tau < 0.5) & ~rows.bad
            # fp8/fp16 P must stay finite (cvt.rn.satfinite): P <= 2^(thr + off) (1 + theta) < max
            pmax_est = 2.0 ** (thr + off) * (1 + float(theta_max[ok].max(initial=0.0))) * \
                np.exp2(2 * rho_m[ok].max(initial=0) * sl2)
            if pmax_est >= pmax:
                raise ValueError(f"P can reach {pmax_est:.4g} >= the largest {dt} ({pmax}); saturation is not "
                                 "bounded here (lower rescale_threshold/max_offset)")
            # fp32 overflow of the PV accumulator or the row sum (fa4num.hw.mma saturates at FLT_MAX): every P the
            # kernel holds is below P_row = 2^(thr + off + 1) (1 + theta_max) 2^(2 rho_m sl2) (its max is stale by
            # at most thr, and rescales only shrink), so |O| <= P_row (1 + u_p) sum |v_j| times the chain's growth
            # and the row sum <= P_row (|J| + 1) (1 + gamma_D) (the sink's P is below 2^126, _sink_weight).
            # Elements (rows) where these reach 2^127 get no finite bound (docs/bounds.md, section 5.8)
            p_row = 2.0 ** (thr + off + 1) * (1 + theta_max) * np.exp2(2 * rho_m * sl2)
            nch_o = nblk * -(-tn // gemm_pv.chunk) if gemm != "blas" else np.minimum(nblk, 1)
            growth = np.exp(nch_o * math.log1p(gemm_pv.gamma) + nresc * math.log1p(U32)) * _F64_SAFETY
            o_mag = (p_row * (1 + u_p) * growth)[:, None] * Vabs + (nch_o * gemm_pv.eta * growth)[:, None]
            pv_ovf = ~(o_mag < 2.0 ** 127)
            ok &= p_row * (nvis + 2) * 2 < 2.0 ** 127
            denom = Wd * (1 - tau)
            # ô - o*: consistent weight errors (the same w_j (1 + theta_j) in numerator and row sum)
            t_w = (H + np.abs(ostar) * wth[:, None] + eta_w[:, None] * (Vabs + n_eta[:, None] * np.abs(ostar))) \
                / denom[:, None]
            Gp = G + H + eta_w[:, None] * Vabs
            # P cast (apply_exp2_convert / cvt.rn.bf16x2.f32): numerator only, the row sum adds fp32 P; the
            # cast sum from _weights_casts
            eta_pn = eta_p * cinv * a_up
            t_p = (blk["WR"] + u_p * eta_w[:, None] * Vabs + eta_pn[:, None] * Vabs) / denom[:, None]
            # PV GEMM chain (tiled_mma_pv) with the O rescales RN(O * acc_scale) in between (correction_rescale)
            nch = nblk * -(-tn // gemm_pv.chunk) if gemm != "blas" else np.minimum(nblk, 1)
            T_abs = (1 + u_p) * Gp + eta_pn[:, None] * Vabs
            nch = np.broadcast_to(nch, (sq,)).astype(np.float64)
            t_pv = gemm_pv.chain(nch[:, None], T_abs, U32, nresc[:, None]) / denom[:, None]
            # row sum: each P passes through at most D roundings (docs/bounds.md, section 5.5). sm90: one lane's
            # sequential fold over every block (tile_n/4 per block, the FFMA init among them) + 2 butterfly adds.
            # sm100 (fadd_reduce): the eight accumulators are combined every block, so the running sum passes
            # RN(row_sum * acc_scale), the add into A0, tile_n/8 - 1 adds and the 3 combining adds per block:
            # a first-block P meets tile_n/8 + 2 roundings there and tile_n/8 + 4 in each later block
            D = _row_sum_depth(bw, nblk, tn)
            if gemm == "blas":
                D = D + nblk
            D = D + (sink is not None)                          # row_sum + P_sink
            g_D = np.expm1(D * math.log1p(U32)) * _F64_SAFETY
            # final scale (correction epilogue / finalize): rcp.approx then FMUL RN
            eps = (1 + rcp_rel) * (1 + U32) / (1 - g_D) - 1
            R = t_p + t_pv
            err_o = t_w + R + eps[:, None] * (np.abs(ostar) + t_w + R)
            # output cast (RN to the output dtype), through the monotonicity of RN: o lies in [o* - B, o* + B]
            cast = _cast_bound(ostar, err_o, out_dt)
            bound = cast * _F64_SAFETY
            # probabilistic (docs/bounds.md, section 8): the P-cast errors of keys with distinct scores and the
            # row sum's RN roundings random (Hoeffding / Higham-Mary gamma~); keys of one score share their cast
            # error (one variable per score), and the PV chain truncates (RZ, biased): worst case
            if probabilistic:
                w2v2 = blk["w2v2"]
                t_p_prob = (lam_p * u_p * w2v2 + eta_pn[:, None] * Vabs) / denom[:, None]
                Dv = np.broadcast_to(D, (sq,)).astype(np.float64)
                # the row sum's relative error is that of the worst of its n_eta products of (1 + delta) factors:
                # Higham-Mary's gamma~_D per product, with a union over the n_eta of them (their Theorem 3.1),
                # so lambda from delta / (3 n_eta) rather than delta / 3
                lam_d = np.sqrt(2.0 * np.log(6.0 * np.maximum(n_eta, 1) / delta))
                g_D_prob = np.expm1(lam_d * np.sqrt(Dv) * U32 + Dv * U32 * U32 / (1 - U32)) * _F64_SAFETY
                eps_p = (1 + rcp_rel) * (1 + U32) / (1 - np.minimum(g_D, g_D_prob)) - 1
                Rp = np.minimum(t_p_prob, t_p) + t_pv
                err_p = t_w + Rp + eps_p[:, None] * (np.abs(ostar) + t_w + Rp)
                bound_p = _cast_bound(ostar, err_p, out_dt) * _F64_SAFETY
            hm = has[:, None]
            out_b[bb, :, hh] = np.where(hm, bound, 0.0)
            if probabilistic:
                out_p[bb, :, hh] = np.where(hm, np.minimum(bound_p, bound), 0.0)
            out_x[bb, :, hh] = np.where(hm, ostar, 0.0)
            # terms (largest over elements), in units of out
            share = np.where(hm, 1.0, 0.0) / denom[:, None]
            if full_terms:
                # the terms that need their own |V|-weighted GEMMs
                if scored:
                    _upd(terms, "softcap" if softcap else "score_mod", blk["t_sc"] * share)
                _upd(terms, "s_gemm", blk["t_s"] * share)
                _upd(terms, "scale_exponent", blk["t_x"] * share)
            G_emu = blk["G_emu"]
            _upd(terms, "exp2_software", (G_emu * share * (sw.relative if sw is not None else 0.0)))
            _upd(terms, "exp2_mufu", ((G - G_emu) * share * ex2_rel))
            _upd(terms, "rescale", ((G * np.expm1(log_resc)[:, None]) * share))
            _upd(terms, "p_cast", t_p * hm)
            _upd(terms, "pv_gemm", t_pv * hm)
            _upd(terms, "row_sum", (g_D[:, None] * np.abs(ostar)) * hm)
            _upd(terms, "rcp", (rcp_rel * np.abs(ostar)) * hm)
            _upd(terms, "out_cast", (bound - err_o) * hm)
            # --- LSE (finalize / correction_loop): (m sl2 + lg2(row_sum) - off) ln2, roundings in fp32 -----
            with np.errstate(divide="ignore"):
                lse_star = np.where(has, (lam * Mf + np.log2(Wd)) * math.log(2), -np.inf)
            lw = -np.log2(1 - tau)
            lr = -np.log2(1 - g_D)
            # exponents of the row sum: c W (1 +- ...) with W in [1, n], c in [2^(off - rho sl2), 2^(off+thr+..)]
            n_w = np.maximum(nvis, 1) + w_s * (1 + th_s)        # W (1 + ...) <= nvis (+ the sink's weight)
            emax = np.where(ok, np.ceil(np.log2(n_w) + off + thr + 2 * rho_m * sl2 + 1), 0)
            emin = np.where(ok, np.floor(off - rho_m * sl2 - 1), 0)
            # lg2's absolute error by the largest |exponent| of the row sum, once per distinct exponent
            e_abs = np.maximum(np.abs(emax), np.abs(emin)).astype(np.int64)
            e_u, e_inv = np.unique(e_abs, return_inverse=True)
            lg2e = np.array([lg2_abs(int(e)) for e in e_u])[e_inv.reshape(-1)] if sq else np.zeros(0)
            lscale = np.abs(Mf) * dlam
            core = lw + lr + lg2e + lscale
            t1 = (np.abs(lse_star) / math.log(2) + core) * (1 + 2.0 ** -22)   # |m sl2 + lg2 - off| upper
            lg_mag = np.log2(n_w) + off + thr + 2 + core
            nround = 3 if bw else 2
            rnd = U32 * t1 * math.log(2) * (nround - 1) + dln2 * t1 + U32 * (np.abs(lse_star) + core) \
                + (U32 * lg_mag * math.log(2) if bw else 0.0) \
                + (U32 * (t1 + lg_mag) * math.log(2) if not bw and sink is not None else 0.0)
            lb = (core * math.log(2) + rnd) * _F64_SAFETY
            lse_b[bb, hh] = np.where(has, lb, e_empty)
            # a row with no visible key: out 0, and LSE = the sink when there is one
            lse_x[bb, hh] = np.where(has, lse_star, -np.inf if sink is None else sink[hh])
            for n, val in (("weights", lw * math.log(2)), ("row_sum", lr * math.log(2)),
                           ("lg2", lg2e * math.log(2)), ("scale", lscale * math.log(2)), ("roundings", rnd)):
                lterms[n] = max(lterms[n], float(np.max(np.where(ok, val, 0.0), initial=0.0)))
            # no finite bound (docs/bounds.md, section 5.8): rows past the analysis' limits, what non-finite inputs
            # reach
            unb = has & ~ok
            out_b[bb, unb, hh] = np.inf
            if probabilistic:
                out_p[bb, unb, hh] = np.inf
            lse_b[bb, hh, unb] = np.inf
            ovf = has[:, None] & pv_ovf
            out_b[bb, :, hh] = np.where(ovf, np.inf, out_b[bb, :, hh])
            if probabilistic:
                out_p[bb, :, hh] = np.where(ovf, np.inf, out_p[bb, :, hh])
            if rows.vis is None:
                kv_bad = np.concatenate([[0], np.cumsum(bad_k[bb, :, kv])])
                sees_bad = kv_bad[np.clip(last + 1, 0, sk)] - kv_bad[np.clip(first, 0, sk)] > 0
            else:
                sees_bad = (rows.vis & bad_k[bb, None, :, kv]).any(axis=1)
            undef = bad_q[bb, :, hh] | (has & sees_bad)
            # a non-finite V[j, c] reaches column c of every row: the PV GEMM multiplies it by the P = 0 of the rows
            # whose tile visits j's block with j masked (0 * inf = NaN), and the exact value of rows that see j
            undef_v = undef[:, None] | bad_v[bb, :, kv].any(axis=0)[None, :]
            for a, val in ((out_b, np.inf), (out_p, np.inf), (out_x, np.nan)):
                if a is not None:
                    a[bb, :, hh] = np.where(undef_v, val, a[bb, :, hh])
            lse_b[bb, hh, undef] = np.inf
            lse_x[bb, hh, undef] = np.nan
    # a NaN in the float64 evaluation (inf - inf at the analysis' limits) claims nothing
    for a in (out_b, out_p, lse_b):
        if a is not None:
            a[np.isnan(a)] = np.inf
    try:
        ap = a_priori_bound(head_dim=d, seqlen_k=sk, threshold=thr, max_offset=off, dtype=dt, kernel=kern.name,
                            exp2_relative=max(ex2_rel, sw.relative if sw is not None else 0.0),
                            rescale_exp2_relative=ex2_rel,
                            qk_abs_max=float(np.abs(qa.astype(np.float64)).max(initial=0) *
                                             np.abs(ka.astype(np.float64)).max(initial=0)),
                            v_abs_max=vmax_all, scale_log2=sl2, tile_n=tn)
    except OverflowError:
        ap = {"bound": math.inf, "terms": {}, "formula": "overflows (huge softmax_scale)"}
    if softcap or fl is not None:
        ap = {"bound": math.inf, "terms": {}, "formula": "not derived with softcap or FlexAttention"}
    return AttentionBound(out=out_b, lse=lse_b, out_probabilistic=out_p, out_exact=out_x, lse_exact=lse_x,
                          terms=terms, lse_terms=lterms, a_priori=ap, kernel=kern.name, delta=delta,
                          options={k2: getattr(opts, k2) for k2 in vars(opts)})


@functools.lru_cache(maxsize=8)
def _tanh_abs_error(arch: str) -> np.ndarray:
    """e[E] >= |tanh.approx.f32(y) - tanh(y)| for every fp32 y with |y| < 2^(E - 126) (E = 0..254), computed from
    the measured table of ``arch`` (fa4num.hw.tanh_table): per binade, identity |y - tanh y| <= |y|^3 / 3 at its
    top; const and table entries are constant over an interval of inputs on which tanh is monotone, so their
    largest error is at the interval's ends; plus 2^-52 for float64's tanh; then the running maximum over E.
    Without a table (another arch, or libm): the PTX ISA's relative error, e[E] = 2^-10.987 min(1, 2^(E-126))."""
    E = np.arange(255)
    top = np.ldexp(1.0, E - 126)
    t = tanh_table(arch) if mufu_model(arch).exact("tanh") else None
    if t is None:
        return _PTX_TANH_REL * np.minimum(1.0, top)
    err = np.zeros((2, 255))

    def val(sign, e, m):
        bits = (np.uint32(sign) << np.uint32(31)) | (np.uint32(e) << np.uint32(23)) | m.astype(np.uint32)
        return np.abs(bits.view(np.float32).astype(np.float64))

    for sgn in (0, 1):
        for e in range(255):
            kind = int(t["kind"][sgn, e])
            if kind == 0:                                   # identity
                err[sgn, e] = val(sgn, e, np.array([0x7FFFFF]))[0] ** 3 / 3
                continue
            if kind == 1:                                   # const
                out = np.abs(np.array([t["const"][sgn, e]], np.uint32).view(np.float32).astype(np.float64))
                lo, hi = val(sgn, e, np.array([0])), val(sgn, e, np.array([0x7FFFFF]))
            else:                                           # table: groups of 2^drop mantissas
                drop = int(t["drop"][sgn, e])
                g = np.arange(1 << (23 - drop), dtype=np.int64)
                out = np.abs(t["table"][t["offset"][sgn, e] + g].view(np.float32).astype(np.float64))
                lo, hi = val(sgn, e, g << drop), val(sgn, e, ((g + 1) << drop) - 1)
            err[sgn, e] = max(np.abs(out - np.tanh(lo)).max(), np.abs(out - np.tanh(hi)).max())
    return np.maximum.accumulate(err.max(axis=0) * (1 + 2.0 ** -40) + 2.0 ** -52)


def _softcap_scores(S, A, rho, *, softcap, scale, d, tanh_err):
    """(S', rho', rho_sc, dt): the exact soft-capped score S' = cap tanh(S scale / cap) (float64), a bound rho' on
    |S'_kernel - S'|, its part rho_sc from the soft cap's own operations (docs/bounds.md, section 5.7) and a bound
    dt on |t - tanh z| of the kernel's t = tanh.approx(y) (the backward's 1 - t^2).

    Kernel (utils.create_softcap_scoremod, fa4num.softmax.scoremod): x = RN(S_k s32), y = RN(x / c32) (div.rn),
    t = tanh.approx(y), S'_k = RN(c32 t), with s32, c32 the fp32 scale and cap. With a = s32/c32,
    b = |s32/c32 - scale/cap| and |S_k - S| <= rho:
      |y - z| <= dz = rho a + (|S| + rho) b + (|S| + rho) a gamma_2          (z = S scale / cap)
      |S'_k - S'| <= |c32 - cap| + cap min(dz, 2) + c32 e_tanh(|z| + dz) + 2^-24 c32 (min(1, |tanh z| + dz) + e_tanh)
    (|tanh'| <= 1), plus the float64 evaluation of S' (cap |dS| scale / cap + 2^-50 cap (1 + |z|))."""
    u = U32
    s32, c32 = float(np.float32(scale)), float(np.float32(softcap))
    a = s32 / c32 * (1 + 2.0 ** -52)
    b = abs(s32 / c32 - scale / softcap) + 2.0 ** -51 * abs(scale / softcap)
    z = S * (scale / softcap)
    Sx = softcap * np.tanh(z)
    aS = np.abs(S) + rho
    g2 = 2 * u + u * u
    dz = (rho * a + aS * b + aS * a * g2) * (1 + 2.0 ** -40)
    f64 = d * 2.0 ** -52 * A * abs(scale) + 2.0 ** -50 * softcap * (1 + np.abs(z))
    yup = (np.abs(z) + dz + f64 / softcap) * (1 + 2.0 ** -40)
    ea = tanh_err[np.clip(np.frexp(yup)[1] + 126, 0, 254)]
    own = abs(c32 - softcap) + softcap * np.minimum(aS * (b + a * g2), 2.0) + c32 * ea \
        + u * c32 * (np.minimum(1.0, np.abs(np.tanh(z)) + dz + 2.0 ** -50) + ea)
    prop = softcap * np.minimum(rho * a, 2.0)
    # |t_kernel - tanh z| for the backward's 1 - t^2 (the same t = tanh.approx(y); |tanh'| <= 1)
    dt = (np.minimum(dz + f64 / softcap, 2.0) + ea) * _F64_SAFETY
    return Sx, (own + prop + f64) * _F64_SAFETY, (own + f64) * _F64_SAFETY, dt


@functools.lru_cache(maxsize=1)
def _pool():
    """The worker threads of _score_rows: one per numba thread, each running the serial kernels and one-thread
    BLAS on its own blocks of rows (the kernels release the GIL)."""
    from concurrent.futures import ThreadPoolExecutor
    import numba
    return ThreadPoolExecutor(max_workers=numba.get_num_threads(), thread_name_prefix="fa4num-bound")


def _row_block(seqlen_k: int) -> int:
    """Rows per block of _score_rows: one float64 (rows x seqlen_k) array of about 1 MB, so that a block's arrays
    stay in a core's cache between the kernels and its GEMMs (at least 16 rows; 64 at 2048 keys, fastest there)."""
    return max(16, (1 << 17) // max(seqlen_k, 1))


def _score_rows(r0, r1, *, Q, Kt, V, aV, aV32, rows, gemm_s, gemm, col, softcap, form, scored, scale, d, tanh_err, fl,
                hh, ex2_rel, nresc, log_ex2_col, sl2, lam, dlam, thr, off, nround_bias, fmul_x, tn, bw, u_p,
                p_ulp_min, probabilistic, full_terms, emu_idx) -> dict:
    """Query rows r0..r1 of one (sequence, head) on the (query, key) grid: the S GEMM's values and error, the
    score_mod, the weights and their errors with the P casts (_weights_casts), and the |V|-weighted sums, as
    per-row arrays (what _bound_dense needs of the grid). Every quantity is per row, so blocks of rows give the
    same values as the whole grid."""
    sl = slice(r0, r1)
    first, last = rows.first[sl], rows.last[sl]
    vis_b = None if rows.vis is None else rows.vis[sl]
    # S GEMM (flash_fwd_*: tiled_mma_qk, fa4num.hw.mma): S, |Q||K|^T and the chain's running bound
    S, A, rho, a_max, rho_max = _s_error(Q[sl], None, gemm_s, gemm, first, last, Kt=Kt)
    # fp32 overflow of S (or of S * scale before a score_mod, or of the exponent): no finite bound
    s_mag = (a_max + rho_max) * (1 + 2.0 ** -20)
    fits = s_mag * max(1.0, abs(scale) if scored else 1.0) < 2.0 ** 126
    rho_sc = None
    if softcap:
        # score_mod (utils.create_softcap_scoremod): S <- RN(cap tanh.approx(RN(RN(S scale) / cap)))
        S, rho, rho_sc, _ = _softcap_scores(S, A, rho, softcap=softcap, scale=scale, d=d, tanh_err=tanh_err)
        A = np.zeros_like(A)
    elif form is not None:
        # an additive built-in score_mod: S <- RN(RN(S scale) + bias) or fma(S, scale, bias); the bias of these
        # rows (query positions r0..r1)
        S, rho, rho_sc = _bias_scores(S, A, rho, form=form, scale=scale, head=hh, aux=fl.aux_tensors,
                                      ex2_rel=ex2_rel, row0=r0)
        A = np.zeros_like(A)
    if form is not None or vis_b is not None:
        # only the keys a row sees enter below; zeros elsewhere (as outside first..last without a bias)
        keep = (col[None, :] >= first[:, None]) & (col[None, :] <= last[:, None]) if vis_b is None else vis_b
        S, A, rho = (np.where(keep, x, 0.0) for x in (S, A, rho))
        if scored:
            rho_sc = np.where(keep, rho_sc, 0.0)
    # exponent (softmax.py scale_subtract_rowmax / online_softmax), rescales (update_row_max) and exp2 per element
    # in one fused pass (_weights_casts documents each term), with each P's relative cast error r_j <= u_p from its
    # enclosure at the stale max (Lemma 4: 0-ish for an arg-max cast as 2^off exactly, the exact distance to P's
    # grid where the enclosure allows)
    vis = vis_b if vis_b is not None else np.ones((1, 1), np.bool_)
    w, w3, w2, ws, wx, M, rho_m, abs_s, W, wth, theta_max, log_resc = _weights_casts(
        S, A, rho, first, last, rows.fb_lo[sl], rows.fb_hi[sl], vis, vis_b is not None, nresc[sl], log_ex2_col,
        sl2, lam, dlam, d * 2.0 ** -52, thr, off, nround_bias, fmul_x, math.log1p(ex2_rel), rows.order[sl],
        rows.nblk[sl], tn, bw, u_p, p_ulp_min, probabilistic, full_terms)
    fits &= (abs_s + rho_m) * sl2 + thr + off < 2.0 ** 126
    # the exact output's numerator in float64; the |V|-weighted sums that only scale error terms in fp32, rounded
    # up (_abs_gemm), in one GEMM
    nr = r1 - r0
    G, H, WR = np.split(_abs_gemm(w3.reshape(3 * nr, -1), aV32), 3) if nr else (np.zeros((0, aV.shape[1])),) * 3
    out = dict(M=M, rho_m=rho_m, W=W, wth=wth, theta_max=theta_max, log_resc=log_resc, fits=fits, wV=w @ V,
               G=G, H=H, WR=WR,
               G_emu=w[:, emu_idx] @ aV[emu_idx] if emu_idx.size else np.zeros((r1 - r0, aV.shape[1])))
    if probabilistic:
        out["w2v2"] = _tied_root_sum_squares(S, w2, V)
    if full_terms:
        # the terms' own GEMMs (diagnostics: largest contribution of each source)
        if scored:
            ws = w * np.expm1(np.maximum(rho - rho_sc, 0.0) * sl2 * math.log(2))
            out["t_sc"] = (w * np.expm1(rho_sc * sl2 * math.log(2))) @ aV
        out["t_s"] = ws @ aV
        out["t_x"] = wx @ aV
    return out


def _s_error(Q, K, g: _Gemm, gemm: str, first, last, *, Kt=None):
    """(S, A, rho, max A, max rho) over the visible keys first[i]..last[i] of each row (0 elsewhere): S = Q K^T and
    A = |Q||K|^T in float64, rho >= |S_kernel - S| (the float64 evaluation error of S, d 2^-52 A, included), and
    the row maxima of A and rho (0 for a row with no key).

    rho follows the chunk chain with the partial sums S_k: chunk k adds at most trunc * max(|C_k|, |terms|)
    (alignment truncation) + 2^-23 |C_{k+1}| (RZ to fp32) for the wgmma model (one RN, 2^-24 |C_{k+1}|, for
    "exact"); |C_k| <= |S_k| + rho_k. BLAS: gamma_d A."""
    trunc = g.gamma - 2.0 ** -23 if gemm == "wgmma" else 0.0
    rz = 2.0 ** -23 if gemm == "wgmma" else 2.0 ** -24
    Kt = np.ascontiguousarray(K.T) if Kt is None else Kt         # K^T: given when one K serves several calls
    d52 = Q.shape[1] * 2.0 ** -52
    blas = gemm == "blas"
    S, A, rho, a_max, rho_max = _s_error_kernel(np.ascontiguousarray(Q), Kt, g.chunk, trunc, rz, g.eta, first,
                                                last, not blas, _F64_SAFETY, d52)
    # (the chunk chain's rho * _F64_SAFETY + d 2^-52 A is formed in the kernel)
    if blas:
        rho = g.chain(1, A) + d52 * A
        rho_max = rho.max(axis=1, initial=0.0)
    return S, A, rho, a_max, rho_max


@njit(nogil=True, cache=True)
def _s_error_kernel(Q, Kt, L, trunc, rz, eta, first, last, finish, safety, d52):
    """S, A and the chunk chain's rho of _s_error, one row per task. Within a chunk each key's partial sums run
    over the terms in order (t += q_k K_kj, c += |q_k| |K_kj|: the bits of a plain loop), eight terms per pass
    over the keys with the sums held in registers, so the loop over keys vectorises with one load and store of
    the sums per eight terms. ``finish``: rho returned as rho * safety + d52 A. Also the row maxima of A, rho."""
    m, d = Q.shape
    n = Kt.shape[1]
    S = np.zeros((m, n))
    A = np.zeros((m, n))
    rho = np.zeros((m, n))
    a_max = np.zeros(m)
    rho_max = np.zeros(m)
    for i in range(m):
        lo = first[i]
        nn = last[i] + 1 - lo
        if nn <= 0:
            continue
        part = np.zeros(nn)
        r = np.zeros(nn)
        a = np.zeros(nn)
        t = np.empty(nn)
        c = np.empty(nn)
        for k0 in range(0, d, L):
            kend = min(k0 + L, d)
            t[:] = 0.0
            c[:] = 0.0
            kk = k0
            while kk + 8 <= kend:
                q0, q1, q2, q3 = Q[i, kk], Q[i, kk + 1], Q[i, kk + 2], Q[i, kk + 3]
                q4, q5, q6, q7 = Q[i, kk + 4], Q[i, kk + 5], Q[i, kk + 6], Q[i, kk + 7]
                a0, a1, a2, a3 = abs(q0), abs(q1), abs(q2), abs(q3)
                a4, a5, a6, a7 = abs(q4), abs(q5), abs(q6), abs(q7)
                # 1-D row slices: indexing Kt[kk, lo + j] directly keeps numba from vectorising the loop
                k_0, k_1 = Kt[kk, lo:lo + nn], Kt[kk + 1, lo:lo + nn]
                k_2, k_3 = Kt[kk + 2, lo:lo + nn], Kt[kk + 3, lo:lo + nn]
                k_4, k_5 = Kt[kk + 4, lo:lo + nn], Kt[kk + 5, lo:lo + nn]
                k_6, k_7 = Kt[kk + 6, lo:lo + nn], Kt[kk + 7, lo:lo + nn]
                for j in range(nn):
                    x0, x1, x2, x3 = k_0[j], k_1[j], k_2[j], k_3[j]
                    x4, x5, x6, x7 = k_4[j], k_5[j], k_6[j], k_7[j]
                    s = t[j]
                    s += q0 * x0
                    s += q1 * x1
                    s += q2 * x2
                    s += q3 * x3
                    s += q4 * x4
                    s += q5 * x5
                    s += q6 * x6
                    s += q7 * x7
                    t[j] = s
                    v = c[j]
                    v += a0 * abs(x0)
                    v += a1 * abs(x1)
                    v += a2 * abs(x2)
                    v += a3 * abs(x3)
                    v += a4 * abs(x4)
                    v += a5 * abs(x5)
                    v += a6 * abs(x6)
                    v += a7 * abs(x7)
                    c[j] = v
                kk += 8
            while kk < kend:
                qv = Q[i, kk]
                aq = abs(qv)
                kr = Kt[kk, lo:lo + nn]
                for j in range(nn):
                    t[j] += qv * kr[j]
                    c[j] += aq * abs(kr[j])
                kk += 1
            for j in range(nn):
                p = part[j]
                rr = r[j]
                tr = trunc * (abs(p) + rr + c[j])
                nxt = p + t[j]
                r[j] = rr + (tr + rz * (abs(nxt) + rr + tr)) / (1 - rz) + eta
                part[j] = nxt
                a[j] += c[j]
        if finish:
            for j in range(nn):
                r[j] = r[j] * safety + d52 * a[j]
        S[i, lo:lo + nn] = part
        A[i, lo:lo + nn] = a
        rho[i, lo:lo + nn] = r
        ma = 0.0
        mr = 0.0
        for j in range(nn):
            ma = max(ma, a[j])
            mr = max(mr, r[j])
        a_max[i] = ma
        rho_max[i] = mr
    return S, A, rho, a_max, rho_max


# ln 2 rounded up (float64): 0x3FE62E42FEFA39F0 is just above ln 2 = 0.693147180559945309417...
_LN2_UP = float.fromhex("0x1.62e42fefa39f0p-1")


@njit(cache=True, nogil=True, inline="always")
def _expm1_up(y):
    """An upper bound on e^y - 1 for y >= 0 (float64, within 2^-49 relative above it). For y <= 2^-6 the Taylor
    sum to y^4 plus y^5/100 >= the tail sum_{k>=5} y^k / k! (= y^5/120 (1 + y/6 + ...) <= y^5/119), evaluated
    by Horner with nonnegative terms (each rounding <= 2^-53 relative: < 2^-50 in all, inside the 1 + 2^-49
    factor); beyond, libm's expm1 (< 1 ulp) times the same factor. The polynomial costs a fraction of the call."""
    if y <= 0.015625:
        return y * (1.0 + y * (0.5 + y * (0.16666666666666669 + y * (0.041666666666666671 + y * 0.01)))) \
            * (1.0 + 2.0 ** -49)
    return math.expm1(y) * (1.0 + 2.0 ** -49)


@njit(cache=True, nogil=True, inline="always")
def _rn_format(x, u, ulp_min):
    """RN (ties to even) of a positive real x (float64) to a format of unit roundoff u (ulp 2u at [1, 2)) whose
    subnormal spacing is ulp_min; exact in float64: x / ulp is a power-of-two scaling."""
    # floor(log2 x) from the exponent field (x normal); the ulp 2u 2^e and its inverse built from exponent fields
    # (2u and ulp_min are powers of two; no libm ldexp, no division); x / ulp is exact and below 2^52, where adding
    # and subtracting 2^52 rounds to an integer, ties to even: np.round's value, faster
    e = np.int64((np.float64(x).view(np.int64) >> 52) & 0x7FF) - 1023
    k = np.int64((np.float64(2.0 * u).view(np.int64) >> 52) & 0x7FF) - 1023
    emin = np.int64((np.float64(ulp_min).view(np.int64) >> 52) & 0x7FF) - 1023
    E = max(e + k, emin)
    ulp = np.int64((E + 1023) << 52).view(np.float64)
    inv = np.int64((1023 - E) << 52).view(np.float64)
    y = x * inv
    return ((y + 4503599627370496.0) - 4503599627370496.0) * ulp


@njit(nogil=True, cache=True)
def _weights_casts(S, A, rho, first, last, fb_lo, fb_hi, vis, masked, nresc, log_ex2_col, sl2, lam, dlam, d52, thr,
                   off, nround_bias, fmul_x, log1p_ex2, order, nord, tn, lazy, u_p, ulp_min, want_w2, want_diag):
    """The softmax weights, their relative error bounds and the P casts' errors, per visible element, in one pass
    per row while the row's S, rho and weights are in cache (docs/bounds.md, sections 3 and 5.4).

    Weights (per row over its visible keys: first..last, and ``vis`` where ``masked``, a mask_mod or block
    sparsity): M (max S), rho_m (max rho), the max F of the first visited block (its keys fb_lo..fb_hi), and the
    rescale term log_resc = (2^-24 sl2 (M - F + 2 rho_m)) ln 2 + nresc ln(1 + e_ex2) (update_row_max's FADD/FMUL
    telescoping over the rises of the stored max, one MUFU ex2 per rescale). Per element, with gap = M - S >= 0:
    the exponent error in log2 units e_s + e_scale + e_round, where e_s = sl2 rho + lambda d 2^-52 A (S GEMM),
    e_scale = |sl2 - lambda| gap (scale_log2 in fp32), e_round = 2^-24 |x| + nround_bias 2^-24 |bias| (the FFMA
    x = S sl2 - m sl2, softmax.py scale_subtract_rowmax; a separate FMUL adds 2^-24 |S sl2| when fmul_x), and
    theta = 2^(e) (1 + e_exp2(column)) exp(log_resc) - 1; the exact weight w = 2^(-lambda gap).

    Casts: (w + w theta) r with r a bound on the relative error |RN_p(P) - P| / P of the cast of the fp32 P the
    kernel holds (Lemma 4); r = u_p where nothing sharper is known. The enclosure [lo, hi] of P comes from the
    stored row max at the time of the element's block: the kernel's max is that of its own scores (within rho of
    S), the blocks run from the last to the first (block_info.py), and on SM100 a rise of at most ``thr`` (log2
    units) keeps the stale max (lazy.py's rule, replayed on enclosures: a decision the enclosures cannot settle
    takes both outcomes); ``order[i, :nord[i]]`` are the KV blocks holding row i's visible keys in the kernel's
    visiting order (right to left; a block-sparse call's mask blocks, then its full blocks). Where the stored max
    after a block includes the block's own max (SM90, threshold 0, a rescale, the first block), S_j <= m and the
    argument is <= off: the arg-max's P is 2^off up to the exponent's roundings. x = RN(s sl2 + b),
    b = RN(off - m sl2) (one more rounding without fused_bias; fmul_x: a separate FMUL of s sl2), P = ex2(x)
    within the column's relative error. RN_p is monotone on the reals: when lo and hi round to the same g,
    every P between does, and |g - P| / P is largest at an end.

    Returns w, fp32 (RN) copies of w, w theta and (w + w theta) r stacked (3 x n x n: one GEMM), and where asked
    w^2 (1 + theta)^2 (``want_w2``: the probabilistic variant), w (2^e_s - 1), w (2^(e_scale + e_round) - 1)
    (``want_diag``: the terms s_gemm, scale_exponent), n x n with 0 where masked (1 x 1 when not asked), and per row M, rho_m, max |S|, sum w, sum w theta
    (both in the block order), max theta, log_resc. Every visible key lies in one of the row's listed blocks."""
    m, n = S.shape
    ln2 = math.log(2.0)
    u = 2.0 ** -24
    w = np.zeros((m, n))
    # fp32 copies (RN) of w, w theta and the cast terms for the |V|-weighted sums, taken in fp32 and rounded up
    # (_abs_gemm); w theta in float64 only per row, for the casts
    w3 = np.zeros((3, m, n), np.float32)
    w32, wt32, wr32 = w3[0], w3[1], w3[2]
    w2 = np.zeros((m, n) if want_w2 else (1, 1))
    ws = np.zeros((m, n) if want_diag else (1, 1))
    wx = np.zeros((m, n) if want_diag else (1, 1))
    Mf = np.zeros(m)
    rho_m = np.zeros(m)
    abs_s = np.zeros(m)
    W = np.zeros(m)
    wth = np.zeros(m)
    thmax = np.zeros(m)
    log_resc = np.zeros(m)
    # the ex2 error's factors per column, once
    lo_f = np.empty(n)
    hi_f = np.empty(n)
    for j in range(n):
        lo_f[j] = 1 - math.expm1(log_ex2_col[j])
        hi_f[j] = math.exp(log_ex2_col[j])
    for i in range(m):
        lo, hi = first[i], last[i] + 1
        if hi <= lo:
            continue
        # --- the row's maxima -------------------------------------------------------------------------------
        M = -np.inf
        F = -np.inf
        rm = 0.0
        absS = 0.0
        for j in range(lo, hi):
            if masked and not vis[i, j]:
                continue
            s = S[i, j]
            M = max(M, s)
            rm = max(rm, rho[i, j])
            absS = max(absS, abs(s))
            if fb_lo[i] <= j <= fb_hi[i]:
                F = max(F, s)
        bias_mag = (absS + rm) * sl2 + off
        rise = max(M - F, 0.0) + 2 * rm
        lres = 2.0000001 * u * sl2 * rise * ln2 + nresc[i] * log1p_ex2
        sw = 0.0
        swt = 0.0
        tmax = 0.0
        # --- per element, in the kernel's block order: the weight and its error, then its P's cast --------------
        olo = -np.inf
        ohi = -np.inf
        for kb in range(nord[i]):
            t = order[i, kb]
            j0 = max(lo, t * tn)
            j1 = min(hi - 1, t * tn + tn - 1)
            blo = -np.inf
            bhi = -np.inf
            for j in range(j0, j1 + 1):
                if masked and not vis[i, j]:
                    continue
                blo = max(blo, S[i, j] - rho[i, j])
                bhi = max(bhi, S[i, j] + rho[i, j])
            if kb == 0:
                mlo, mhi, covers = blo, bhi, True
            else:
                rlo = max(0.0, blo - ohi) * sl2 * (1 - 4 * u)
                rhi = max(0.0, bhi - olo) * sl2 * (1 + 4 * u)
                mlo, mhi = max(olo, blo), max(ohi, bhi)
                covers = True
                if lazy and thr > 0:
                    if rhi < thr:          # kept for sure: the stale max
                        mlo, mhi, covers = olo, ohi, False
                    elif not rlo > thr:    # either outcome
                        mlo, mhi, covers = olo, max(ohi, bhi), False
            bmag = max(abs(mlo), abs(mhi)) * sl2 + abs(off)
            for j in range(j0, j1 + 1):
                if masked and not vis[i, j]:
                    continue
                s = S[i, j]
                rj_ = rho[i, j]
                # the weight and its relative error bound theta
                gap = M - s
                es = sl2 * rj_ + lam * d52 * A[i, j]
                esc = dlam * gap
                er = u * ((gap + 2 * rm) * sl2 + thr + off) + nround_bias * u * bias_mag
                if fmul_x:
                    er += u * (abs(s) + rj_) * sl2
                th = _expm1_up((es + esc + er) * ln2 + log_ex2_col[j] + lres) * (1.0 + 2.0 ** -30)
                ww = np.exp2(-lam * gap)
                wwt = ww * th
                w[i, j] = ww
                w32[i, j] = ww
                wt32[i, j] = wwt
                if want_w2:
                    w2[i, j] = ww * ww * (1 + th) * (1 + th)
                if want_diag:
                    ws[i, j] = ww * math.expm1(es * ln2)
                    wx[i, j] = ww * math.expm1((esc + er) * ln2)
                sw += ww
                swt += wwt
                tmax = max(tmax, th)
                # the cast of its P: the enclosure [plo, phi] at the stored max of the block's time
                dlo = s - rj_ - mhi
                dhi = s + rj_ - mlo
                if covers:
                    dhi = min(dhi, 0.0)
                xlo = dlo * sl2 + off
                xhi = dhi * sl2 + off
                xmag = max(abs(xlo), abs(xhi))
                eta = u * (xmag + nround_bias * bmag) * 1.0000001 + u * u * (xmag + bmag)
                if fmul_x:
                    eta += u * (abs(s) + rj_) * sl2 * 1.0000001
                xlo -= eta
                xhi += eta
                rj = u_p
                if xlo >= -100.0 and xhi <= 100.0 and xhi - xlo < 1.0:
                    e_lo = np.exp2(xlo)
                    plo = e_lo * lo_f[j] * (1 - 2.0 ** -50)
                    # 2^xhi = 2^xlo 2^(xhi - xlo), the second factor from _expm1_up (upward; the libm 2^xlo's
                    # error and the products' roundings inside the wider margin)
                    phi = e_lo * (1.0 + _expm1_up((xhi - xlo) * _LN2_UP)) * hi_f[j] * (1 + 2.0 ** -48)
                    g = _rn_format(plo, u_p, ulp_min)
                    if plo > 0 and g == _rn_format(phi, u_p, ulp_min):
                        # |g - P| / P over P in [plo, phi] is at most max(|g - plo|, |phi - g|) / plo
                        rj = min(u_p, max(abs(g - plo), abs(phi - g)) / plo * (1 + 2.0 ** -40))
                wr32[i, j] = (ww + wwt) * rj
            olo, ohi = mlo, mhi
        Mf[i] = M
        rho_m[i] = rm
        abs_s[i] = absS
        W[i] = sw
        wth[i] = swt
        thmax[i] = tmax
        log_resc[i] = lres
    return w, w3, w2, ws, wx, Mf, rho_m, abs_s, W, wth, thmax, log_resc


def _sink_weight(sigma, Mf, rho_m, has, *, lam, sl2, dlam, thr, off, ex2_rel, lg2_abs, dln2, lazy):
    """The learnable sink's exact weight w_s = 2^(sigma log2 e - lambda M) (relative to the row max, like w),
    the relative error bound theta_s of the kernel's P_sink / c, and the LSE bound of rows with no key.

    Kernel (Softmax.finalize on SM90, apply_learnable_sink on SM100): P_sink = ex2.approx(x_s) with
    x_s = RN(RN(sigma LOG2_E) - RN(m sl2)) (SM90) or RN(fma(sigma, LOG2_E, -RN(m sl2)) + max_offset) (SM100).
    x_s - log2(c w_s) = sigma (LOG2_E_F32 - log2 e) + (lambda - sl2) M + roundings (2^-24 of |sigma LOG2_E|,
    |m sl2| and twice |x_s|); the stored max m lies within rho_m + thr/sl2 of M."""
    n = Mf.shape[0]
    if sigma is None:
        return np.zeros(n), np.zeros(n), np.zeros(n)
    log2e = 1.0 / math.log(2)
    l2e_err = abs(float(LOG2_E_F32) - log2e) * (1 + 2.0 ** -40)
    with np.errstate(over="ignore"):
        lw = sigma * log2e - lam * Mf                      # log2 w_s
    mag_ms = (np.abs(Mf) + rho_m) * sl2 + thr
    mag_x = np.abs(lw) + dlam * np.abs(Mf) + sl2 * rho_m + thr + off
    e = abs(sigma) * l2e_err + dlam * np.abs(Mf) + U32 * (abs(sigma) * log2e + mag_ms + 2 * mag_x) * (1 + 2.0 ** -20)
    th = np.expm1(e * math.log(2) + math.log1p(ex2_rel)) * _F64_SAFETY
    if np.any(has & (lw + thr + off + 1 >= 126)):
        raise ValueError("learnable_sink: the sink's P would overflow fp32 (sink far above the scaled logits)")
    w_s = np.where(has, np.exp2(np.minimum(lw, 126.0)), 0.0)
    # no key: LSE = RN(RN(RN(sigma LOG2_E) + lg2(1)) LN2) (SM90) or RN(fma(RN(sigma RN(LOG2_E / sl2)), sl2,
    # RN(lg2(2^off) - off)) LN2) (SM100): at most 8 roundings of magnitude |sigma| (1 + 2^-20), the two
    # constants' errors and lg2's
    rel = (abs(float(LOG2_E_F32) * float(LN2_F32) - 1) + 8 * U32) * (1 + 2.0 ** -20) + dln2 * log2e
    e_empty = abs(sigma) * rel + 2 * lg2_abs(int(abs(off)) + 1) * math.log(2) * (1 + 2.0 ** -20)
    if lazy:
        # SM100's m = RN(sigma RN(LOG2_E / sl2)), as the kernel computes it: at a tiny scale_log2 the quotient
        # or the product overflows and the LSE is +-inf or NaN (no finite bound); subnormal intermediates lose
        # up to 2^-150 each, scaled back by sl2
        with np.errstate(over="ignore", invalid="ignore"):
            m_empty = np.float32(sigma) * (LOG2_E_F32 / np.float32(sl2))
        if not np.isfinite(m_empty):
            return w_s, np.where(has, th, 0.0), np.where(has, 0.0, math.inf)
        e_empty += (abs(sigma) + 1) * 2.0 ** -149 * sl2 * math.log(2)
    return w_s, np.where(has, th, 0.0), np.where(has, 0.0, e_empty * _F64_SAFETY)


def _row_sum_depth(lazy: bool, blocks, tile_n: int):
    """The most fp32 roundings one P meets on its way into the row sum over ``blocks`` KV blocks (docs/bounds.md,
    section 5.5, Lemma 3). SM90 (``lazy`` False): each lane folds tile_n/4 values per block (the FFMA
    RN(row_sum * scale + P) among them), then 2 butterfly adds. SM100 (``lazy``, ``fadd_reduce`` with eight
    accumulators combined every block): a first-block P meets tile_n/8 - 1 adds and the 3 combining adds; every
    later block adds RN(row_sum * acc_scale), its add into A0, tile_n/8 - 1 adds and 3 combining adds."""
    blocks = np.asarray(blocks)
    if not lazy:
        return blocks * (tile_n // 4) + 2
    return np.maximum(blocks * (tile_n // 8 + 4) - 2, 0)


def _upd(terms, name, arr):
    terms[name] = max(terms[name], float(np.max(arr, initial=0.0)))


def _tied_root_sum_squares(S, w2, V):
    """sqrt(sum_g (sum_{j in g} w_j (1 + theta_j) |v_j|)^2) per row and column, g the keys of one row with equal
    scores: they get the same P, hence the same cast error, so each group is one random variable of the
    Hoeffding sum (rows without ties: sqrt(sum_j w2_j v_j^2))."""
    out = np.sqrt(w2 @ (V * V))
    wa, aV = np.sqrt(w2), np.abs(V)
    # rows whose ties all lie among keys of weight 0 (masked keys' zeros): every group's sum is its one weighted
    # term exactly, computed in numba in the grouped order; rows with a real tie in numpy below
    real = _tie_rows(S, wa, aV, out)
    for i in np.flatnonzero(real):
        out[i] = _grouped_row(S[i], wa[i], aV)
    return out


def _grouped_row(s_row, wa_row, aV):
    """One row's tied sum: the keys sorted by score (stable), each group of equal scores summed, then the root of
    the groups' sum of squares per column."""
    o = np.argsort(s_row, kind="stable")
    s = s_row[o]
    starts = np.flatnonzero(np.concatenate([[True], s[1:] != s[:-1]]))
    g = np.add.reduceat(wa_row[o, None] * aV[o], starts, axis=0)
    return np.sqrt((g * g).sum(axis=0))


@njit(cache=True, nogil=True)
def _has_tie(row, bits, idx, zeros, size):
    """Whether two of row[idx] are equal, or one is 0 while ``zeros`` > 0, or ``zeros`` > 1: an open-addressing
    hash set of the values hashed by their bits ``bits`` (row viewed as int64; 0 for -0; a NaN equals nothing),
    linear in len(idx)."""
    if zeros > 1:
        return True
    keys = np.empty(size)
    used = np.zeros(size, np.bool_)
    mask = size - 1
    for t in range(idx.size):
        x = row[idx[t]]
        if x != x:
            continue
        if x == 0.0:
            if zeros > 0:
                return True
            x = 0.0
        h = np.int64((np.uint64(bits[idx[t]] if x != 0.0 else 0) * np.uint64(0x9E3779B97F4A7C15))
                     >> np.uint64(40)) & mask
        while used[h]:
            if keys[h] == x:
                return True
            h = (h + 1) & mask
        used[h] = True
        keys[h] = x
    return False


@njit(nogil=True, cache=True)
def _tie_rows(S, wa, aV, out):
    """Per row of S with a tie (two equal scores): where no two keys of one score both have weight > 0, sets
    ``out[i]`` to sqrt(sum_g (sum_{j in g} wa_j |V_j|)^2) with the groups g in ascending score order, summed one
    after the other (the arithmetic of the grouped numpy evaluation: a group's sum is its one nonzero term, exact,
    and an axis-0 sum adds the groups' rows in order; groups of weight 0 add exact zeros); returns the rows with a
    real tie (left to the caller). Keys of weight 0 and score 0 (masked keys) are counted, not sorted."""
    m, n = S.shape
    dv = aV.shape[1]
    real = np.zeros(m, np.bool_)
    Sb = S.view(np.int64)
    size = 16
    while size < 2 * n:
        size *= 2
    for i in range(m):
        idx = np.empty(n, np.int64)
        ns = 0
        zeros = 0
        for j in range(n):
            if wa[i, j] == 0 and S[i, j] == 0:
                zeros += 1
            else:
                idx[ns] = j
                ns += 1
        if not _has_tie(S[i], Sb[i], idx[:ns], zeros, size):
            continue
        vals = np.empty(ns)
        for t in range(ns):
            vals[t] = S[i, idx[t]]
        o = np.argsort(vals, kind="mergesort")
        tie = zeros > 1
        t = 0
        while t < ns:
            e = t + 1
            cnt = 1 if wa[i, idx[o[t]]] > 0 else 0
            while e < ns and vals[o[e]] == vals[o[t]]:
                if wa[i, idx[o[e]]] > 0:
                    cnt += 1
                e += 1
            if e - t > 1 or (zeros > 0 and vals[o[t]] == 0):
                tie = True
            if cnt > 1:
                real[i] = True
                break
            t = e
        if not tie or real[i]:
            continue
        acc = np.zeros(dv)
        for t in range(ns):
            j = idx[o[t]]
            g = wa[i, j]
            if g > 0:
                for c in range(dv):
                    x = g * aV[j, c]
                    acc[c] += x * x
        for c in range(dv):
            out[i, c] = math.sqrt(acc[c])
    return real


def _round_dir(x: np.ndarray, up: bool) -> np.ndarray:
    """float64 -> the fp32 value just below (up=False) or above x (directed, exact for finite x)."""
    r = x.astype(np.float32)
    r64 = r.astype(np.float64)
    if up:
        return np.where(r64 < x, np.nextafter(r, np.float32(np.inf)), r)
    return np.where(r64 > x, np.nextafter(r, np.float32(-np.inf)), r)


def _cast_bound(ostar, err, out_dt):
    """max |RN(o) - o*| over o in [o* - err, o* + err]: RN is monotone, so the extremes are the roundings of
    the interval's ends (taken to fp32 outward first, then RN to the output dtype once, as the kernel's cvt)."""
    lo = _round_dir(ostar - err, False).astype(_NP[out_dt]).astype(np.float64)
    hi = _round_dir(ostar + err, True).astype(_NP[out_dt]).astype(np.float64)
    return np.maximum(np.abs(ostar - lo), np.abs(hi - ostar))


def a_priori_bound(*, head_dim, seqlen_k, threshold=0.0, max_offset=0.0, dtype="bfloat16", kernel=DEFAULT_KERNEL,
                   exp2_relative=None, rescale_exp2_relative=None, poly_degree=3, coeffs=None, qk_abs_max=1.0,
                   v_abs_max=1.0, scale_log2=None, tile_n=128, gemm="wgmma") -> dict:
    """Closed-form normwise bound on ``max |out - out_exact|`` from the problem's sizes alone (docs/bounds.md,
    section 7).

    With n = seqlen_k, B = ceil(n / tile_n) blocks, u_p the unit roundoff of P's format, u_o the output's, gamma_m
    the per-chunk tensor-core error (fa4num.hw.mma), e_col the exp2 of P (the largest over the columns: the
    software exp2 on the emulated ones, MUFU elsewhere) and e_resc the MUFU ex2 of the rescale factors, each P
    meets one exp2 of its column and at most B - 1 rescales, so

        theta = 2^(e_x) (1 + e_col) (1 + e_resc)^(B-1) - 1,

    with s = d qk_max, rho = ((1 + gamma_m)^ceil(d/L) - 1) s (S error) and
    e_x = (sl2 rho + 3u/(1-3u) sl2 2s (fp32 scale) + u (4 s sl2 + thr + 3|off|) (exponent and bias roundings)
    + 2u sl2 (2s + 2 rho) (rescale arguments)) (1 + 2^-20), and (Appendix of the paper, "The closed form")::

        A1 = [2 theta + 2 n eta_e 2^-off + (u_p + n eta_p 2^-off)(1 + theta) + gamma_PV (1 + u_p)(1 + theta)]
             v_max / (1 - theta)
        E  = A1 + (v_max + A1) (gamma_D + 2^-22) / (1 - gamma_D)
        |out - out*| <= E + u_o (v_max + E) + eta_o + 2^-150,   gamma_PV = (1 + gamma_m)^ceil(n/L) (1 + u)^B - 1,

    the cross terms included (theta and gamma_D below 1/2, else +inf); eta_o is half the output format's subnormal
    spacing (fp16: 2^-25); eta_e is a flushed exponential's absolute error (2^-126 or the software exp2's
    subnormal bound, times 1 + 2^(thr + off + 1) for a flushed rescale factor), eta_p half P's subnormal spacing.

    Parameters
    ----------
    head_dim : int
    seqlen_k : int
    threshold, max_offset : float
        FA4's SM100 rescale_threshold and max_offset (0 for SM90).
    dtype : {"bfloat16", "float16", "float8_e4m3fn", "float8_e5m2"}
        The inputs' (and P's) format.
    kernel : a name of fa4num.attention.kernels.KERNELS (its tensor-core accumulator, row-sum order, and whether
        some columns run the software exp2)
    exp2_relative : float, optional
        Relative error bound of the exp2 that computes P, the largest over the columns. Default: the MUFU bound of
        the measured sm90 tables, and for a kernel with software-exp2 columns the larger of it and
        ``exp2_error_bound(poly_degree, coeffs=coeffs, domain=(-inf, threshold + max_offset + 1))``.
    rescale_exp2_relative : float, optional
        Relative error bound of the ex2 of the rescale factors (MUFU on both kernels, ``update_row_max``).
        Default: the MUFU bound of the measured sm90 tables.
    poly_degree : int
        Degree of the software exp2 (FA4's POLY_EX2 of that degree when ``coeffs`` is None).
    coeffs : tuple of float, optional
        The software exp2's fp32 coefficients c0..c_d.
    qk_abs_max, v_abs_max : float
        Bounds on ``|q| |k|`` products of entries and on ``|v|`` entries.
    scale_log2 : float, optional
        softmax_scale * log2(e) as the kernel rounds it (default: from 1/sqrt(head_dim)).
    tile_n : int
        Keys per KV block.
    gemm : str
        Tensor-core accumulation model (fa4num.hw.mma), e.g. "wgmma".

    Returns
    -------
    dict
        {"bound": float, "terms": {"weights", "p_cast", "pv_gemm", "row_sum_rcp", "out_cast"}, "theta": float,
        "exp2_relative": float, "rescale_exp2_relative": float, "formula": str}. The bound is the sum of the terms
        (times 1 + 2^-20 for the float64 evaluation).

    Examples
    --------
    >>> r = a_priori_bound(head_dim=128, seqlen_k=4096, kernel="fa4-sm100", threshold=8.0)
    >>> sorted(r["terms"]), r["exp2_relative"] > 100 * r["rescale_exp2_relative"]
    (['out_cast', 'p_cast', 'pv_gemm', 'row_sum_rcp', 'weights'], True)
    """
    kern = get_kernel(kernel)
    arch = kern.accumulator
    sl2 = float(scale_log2_of(1.0 / math.sqrt(head_dim))) if scale_log2 is None else float(scale_log2)
    mufu = mufu_error_bounds("sm90").ex2_relative
    e_resc = mufu if rescale_exp2_relative is None else float(rescale_exp2_relative)
    sw_b = _sw_bound(poly_degree, None if coeffs is None else tuple(float(c) for c in coeffs),
                     float(threshold) + float(max_offset) + 1.0) if kern.software_exp2 else None
    e_col = max(mufu, sw_b.relative if sw_b is not None else 0.0) if exp2_relative is None else float(exp2_relative)
    g = _gemm_model(gemm, arch, dtype, head_dim)
    L = g.chunk
    smax = head_dim * qk_abs_max
    thr, off = float(threshold), float(max_offset)
    # Lemma 2 at its worst under |S| <= s: the score error rho (Lemma 1's chain), the fp32 scale's error
    # |sl2 - lambda| (M - S_j) <= 3u sl2 2s / (1 - 3u), the argument and bias roundings u (|x| + 2|b|) with
    # |x| <= 2 s sl2 + thr + |off|, |b| <= s sl2 + |off|, the rescale arguments' 2u sl2 (M - F + 2 rho_m); 1 + 2^-20
    # covers the second-order parts (u^2 s)
    rho = (math.expm1(-(-head_dim // L) * math.log1p(g.gamma))) * smax
    e_x = (sl2 * rho + 3 * U32 / (1 - 3 * U32) * sl2 * 2 * smax + U32 * (4 * smax * sl2 + thr + 3 * abs(off))
           + 2 * U32 * sl2 * (2 * smax + 2 * rho)) * (1 + 2.0 ** -20)
    B = -(-seqlen_k // tile_n)
    # one exp2 of the column per P, then at most one MUFU ex2 factor per later block (docs/bounds.md, Lemma 2)
    theta = math.expm1(e_x * math.log(2) + math.log1p(e_col) + (B - 1) * math.log1p(e_resc))
    u_p, eta_p, _ = P_FORMATS[dtype]
    out_fmt = DTYPES["bfloat16" if dtype.startswith("float8") else dtype]
    u_o, eta_o = out_fmt.unit_roundoff, out_fmt.subnormal_half_spacing
    D = int(_row_sum_depth(kern.lazy_rescale, B, tile_n)) + B + 1   # (+ blas, + a sink)
    g_D = math.expm1(D * math.log1p(U32))
    g_pv = math.expm1(-(-seqlen_k // L) * math.log1p(g.gamma) + B * math.log1p(U32))
    if not (theta < 0.5 and g_D < 0.5):
        # the assembly needs theta < 1 and gamma_D < 1 (refused from 1/2, as the per-element bound refuses rows
        # with tau >= 1/2): no finite closed form for such sizes and magnitudes
        return {"bound": math.inf, "terms": {}, "theta": theta, "exp2_relative": e_col,
                "rescale_exp2_relative": e_resc,
                "formula": "theta or gamma_D >= 1/2 (huge qk_abs_max or seqlen_k): no finite closed form"}
    # P's cast below its format's normal range (fp16: 2^-14) errs absolutely, by at most eta_p per key relative to
    # the normalisation c >= 2^off (1 - theta); W >= 1 (the arg-max's weight is 1)
    a_cast = seqlen_k * eta_p * 2.0 ** -off
    # a P flushed below 2^-126 (MUFU), the software exp2's subnormal results, a flushed rescale factor: an absolute
    # error eta_exp per key (as the per-element bound's), in the numerator and the row sum alike (|v - o*| <= 2 vmax)
    eta_exp = max(2.0 ** -126, sw_b.absolute_subnormal if sw_b is not None else 0.0) * (1 + 2.0 ** (thr + off + 1))
    a_flush = seqlen_k * eta_exp * 2.0 ** -off
    # |N / Lambda - o*| (weights), the cast and the PV chain over Lambda >= W (1 - theta)
    t = {"weights": (2 * theta + 2 * a_flush) / (1 - theta) * v_abs_max,
         "p_cast": (u_p + a_cast) * (1 + theta) / (1 - theta) * v_abs_max,
         "pv_gemm": g_pv * (1 + u_p) * (1 + theta) / (1 - theta) * v_abs_max}
    a1 = sum(t.values())
    # dividing by the computed row sum, within gamma_D of the exact one, then rcp.approx and the product:
    # |o - o*| <= A1 + (vmax + A1) (gamma_D + 2^-22) / (1 - gamma_D)
    t["row_sum_rcp"] = (v_abs_max + a1) * (g_D + 2.0 ** -22) / (1 - g_D)
    err = a1 + t["row_sum_rcp"]
    # RN to the output format: relative u_o, or absolutely half its subnormal spacing (fp16: 2^-25), and the fp32
    # product below 2^-126 within 2^-150
    t["out_cast"] = u_o * (v_abs_max + err) + eta_o + 2.0 ** -150
    return {"bound": sum(t.values()) * (1 + 2.0 ** -20), "terms": t, "theta": theta, "exp2_relative": e_col,
            "rescale_exp2_relative": e_resc,
            "formula": "E = A1 + (vmax + A1)(γ_D + 2^-22)/(1-γ_D), A1 = [2θ + 2n η_e 2^-off "
                       "+ (u_p + n η_p 2^-off)(1+θ) + γ_PV(1+u_p)(1+θ)]·vmax/(1-θ); "
                       "bound = E + u_o (vmax + E) + η_o + 2^-150; "
                       "θ = 2^e_x (1+ε_col)(1+ε_resc)^(B-1) - 1"}

