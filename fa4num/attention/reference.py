"""References and accuracy metrics for attention outputs.

- ``attention_fp64``: softmax(scale * Q K^T) V in float64 from the exact input values (GQA, causal with FA's
  bottom-right alignment), plus its LSE; ``round_once`` rounds it to bf16/fp16 correctly (one rounding:
  float64 -> fp32 with round-to-odd, then RNE, which cannot double-round because 24 >= 8 + 2 and 11 + 2).
- ``attention_fa_reference``: FA's own test references (``flash_attn/cute/testing.py`` ``attention_ref``):
  ``out_ref`` = fp32 math rounded to the input dtype, ``out_pt`` = the same math in the input dtype with
  ``reorder_ops`` (q @ (k * scale)^T), used by the "no worse than 2x a naive same-precision implementation" rule.
- ``metrics`` (max/mean abs, relative L2, cosine) and ``fa_rule`` (FA's pass criterion, tests/cute/
  test_flash_attn.py: max|out - out_ref| <= 2 max|out_pt - out_ref| + 2 max|out_ref + 0.3 - 0.3 - out_ref|).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import ml_dtypes
import numpy as np

from .config import Sm90Options, Sm100Options
from .problem import Problem, check_bool, check_learnable_sink, check_softcap, check_softmax_scale, layout, plain
from .problem import to_numpy as _to_numpy
from . import flex as _flex
from .masking import check_window_range, resolve_window, visible

# Names the forward and backward take that steer the kernel or the emulator (tiling, GEMM model, exp2 knobs,
# determinism) but not the exact math: the references accept them so that one dict of options can drive an
# emulator and its reference, and refuse anything else (a misspelt window_size must not pass silently).
KERNEL_ONLY_OPTIONS = frozenset(
    {f.name for f in fields(Sm90Options)} | {f.name for f in fields(Sm100Options)}
    | {"kernel", "mode", "nonfinite", "num_splits", "deterministic", "dq_order"})


def _check_kernel_options(options: dict, pack_gqa) -> None:
    bad = sorted(set(options) - KERNEL_ONLY_OPTIONS)
    if bad:
        raise ValueError(f"unknown option(s) {bad}; the fp64 reference takes FA4's feature options and the "
                         f"kernel-only knobs {sorted(KERNEL_ONLY_OPTIONS)}")
    if pack_gqa is not None and not isinstance(pack_gqa, (bool, np.bool_)):
        raise ValueError(f"pack_gqa must be None, True or False, got {pack_gqa!r}")


def _scale(softmax_scale, head_dim: int) -> float:
    scale = check_softmax_scale(softmax_scale)
    return 1.0 / math.sqrt(head_dim) if scale is None else scale


def _causal_mask(sq: int, sk: int) -> np.ndarray:
    """True where key j is hidden from query i (j > i + sk - sq)."""
    return np.arange(sk)[None, :] > (np.arange(sq) + sk - sq)[:, None]


def _expand_kv(x: np.ndarray, heads: int) -> np.ndarray:
    return np.repeat(x, heads // x.shape[2], axis=2)


def _fp64_softmax(qf, kf, *, scale, softcap, window, sink, mods=None):
    """Softmax of one sequence's scores in float64, (heads, sq, sk), for the forward and backward references:
    (P, P of the sink column or None, row normaliser z, row max m (0 where no logit is finite), tanh(S / softcap)
    or None). Rows with no visible key and no sink have z = 0 and P = 0. ``mods``: FlexAttention's
    (:func:`_flex_mods`), (scores, visible (1 or heads, sq, sk)) -> (scores, visible)."""
    sq, sk = qf.shape[0], kf.shape[0]
    s = np.einsum("ihd,jhd->hij", qf, kf) * scale
    t = None
    if softcap:
        t = np.tanh(s / softcap)
        s = softcap * t
    vis = visible(np.arange(sq)[:, None], np.arange(sk)[None, :], seqlen_q=sq, seqlen_k=sk, window=window)[None]
    if mods is not None:
        s, vis = mods(s, vis)
    s = np.where(vis, s, -np.inf)
    m = s.max(axis=-1, keepdims=True, initial=-np.inf)   # seqlen_k = 0 or a fully masked row: -inf
    if sink is not None:
        m = np.maximum(m, sink[:, None, None])
    m_safe = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(s - m_safe)
    z = e.sum(axis=-1, keepdims=True)
    e_sink = None
    if sink is not None:
        e_sink = np.exp(sink[:, None, None] - m_safe)      # the sink column: in the normaliser, no value row
        z = z + e_sink
    zs = np.where(z > 0, z, 1.0)
    p = np.where(z > 0, e / zs, 0.0)
    p_sink = None if sink is None else np.where(z > 0, e_sink / zs, 0.0)
    return p, p_sink, z, m_safe, t


def _flex_mods(flex, *, batch: int, seqinfo):
    """FlexAttention's mods for the fp64 reference of one sequence: the score_mod called (FA4's convention,
    :func:`fa4num.attention.flex.apply_score_mod`) on the float32 rounding of each exact score with libm's
    tanh/exp2 for its MUFU helpers (so a built-in's result is within a few float32 ulps of the exact mod: far
    below a 16-bit output's rounding), and the mask_mod's verdict, exact (booleans)."""
    def mods(s, vis):
        h, sq, sk = s.shape
        rows, cols = np.arange(sq), np.arange(sk)
        if flex.score_mod is not None:
            s = np.stack([_flex.apply_score_mod(s[hh].astype(np.float32), flex, softmax_scale=np.float32(1),
                                                batch=batch, heads=np.full(sq, hh), q_idx=rows, kv_idx=cols,
                                                seqinfo=seqinfo, arch="libm") for hh in range(h)]).astype(np.float64)
        if flex.mask_mod is not None:
            vis = vis & np.stack([_flex.mask_mod_keep(flex, batch=batch, heads=np.full(sq, hh), q_idx=rows,
                                                      kv_idx=cols, seqinfo=seqinfo, wrap=False)
                                  for hh in range(h)])
        return s, vis
    return mods


def _fp64_core(qf, kf, vf, *, scale, softcap, window, sink, mods=None):
    """One sequence in float64: qf (sq, h, d), kf/vf (sk, h, d|dv) with KV heads already expanded."""
    p, _, z, m_safe, _ = _fp64_softmax(qf, kf, scale=scale, softcap=softcap, window=window, sink=sink, mods=mods)
    with np.errstate(divide="ignore"):
        lse = np.where(z[..., 0] > 0, m_safe[..., 0] + np.log(z[..., 0]), -np.inf)
    return np.einsum("hij,jhd->ihd", p, vf), lse


def _problem_only(who: str, problem, given: list, kernel_options: dict) -> None:
    """TypeError when ``problem=`` comes with FA4's arguments (``given``: the names passed) or is no Problem."""
    if given or kernel_options:
        raise TypeError(f"{who}: pass either q, k, v and FA4's arguments or problem=, not both (got "
                        f"{given + sorted(kernel_options)} with problem=)")
    if not isinstance(problem, Problem):
        raise TypeError(f"problem must be a Problem from fa4num.attention.plan, got {type(problem).__name__}")


def _arrays(q, k, v) -> tuple:
    """q, k, v as numpy arrays in their dtypes (torch inputs copied to the host)."""
    return tuple(_to_numpy(x, n)[0] for x, n in ((q, "q"), (k, "k"), (v, "v")))


def attention_fp64(q=None, k=None, v=None, *, problem: Problem | None = None, softmax_scale=None, causal=False,
                   softcap=0.0, window_size=(None, None), learnable_sink=None, cu_seqlens_q=None, cu_seqlens_k=None,
                   max_seqlen_q=None, max_seqlen_k=None, pack_gqa=None, page_table=None, q_descale=None,
                   k_descale=None, v_descale=None, **kernel_options) -> tuple[np.ndarray, np.ndarray]:
    """softmax(scale Q K^T) V in float64 from the exact input values, with FA4's options and layouts.

    Either q, k, v and FA4's arguments, checked without a kernel (any FA4 dtype and head dim: the exact result
    does not depend on the kernel), or ``problem`` (:func:`fa4num.attention.problem.plan`), whose sequences,
    masks, scale, sink and descales it takes.

    Returns (out float64 in q's layout with head_dim_v, lse float64 (batch, heads, seqlen_q) or (heads,
    total_q) with ``cu_seqlens_q``). Options as :func:`fa4num.attention.forward`, checked as it checks them
    (a ValueError names the bad one): ``softcap`` > 0 with the exact tanh, bottom-right aligned causal and
    ``window_size`` masks (a side wider than the sequence is refused, as in ``forward``), ``learnable_sink`` as an
    extra logit per head with no value row, varlen (``cu_seqlens_q/k``, ``max_seqlen_q/k`` at least the
    longest sequence), paged KV, fp8 descales (S scaled by q_descale * k_descale, O by v_descale, per (batch,
    kv head)). ``pack_gqa`` (None, True or False) only changes how the kernel tiles the heads, not the exact
    result; ``kernel_options`` may hold the forward's kernel and emulator knobs (``kernel``, ``num_splits``,
    ``mode``, ``tile_n``, ...), which change nothing exact; other names raise. A problem's FlexAttention
    score_mod / mask_mod (not block sparsity) are applied to the exact scores as :func:`_flex_mods` says.
    Rows with no visible key give out 0 and lse -inf (the sink's logit with a sink), as FA4 does.

    Examples
    --------
    >>> import ml_dtypes
    >>> x = np.ones((1, 3, 1, 8), ml_dtypes.bfloat16)
    >>> out, lse = attention_fp64(x, x, x, learnable_sink=np.zeros(1, np.float32), softmax_scale=0.0)
    >>> float(out[0, 0, 0, 0]), round(float(lse[0, 0, 0]), 6)
    (0.75, 1.386294)
    """
    if problem is not None:
        given = [n for n, x in (("q", q), ("k", k), ("v", v), ("softmax_scale", softmax_scale),
                                ("learnable_sink", learnable_sink), ("cu_seqlens_q", cu_seqlens_q),
                                ("cu_seqlens_k", cu_seqlens_k), ("max_seqlen_q", max_seqlen_q),
                                ("max_seqlen_k", max_seqlen_k), ("pack_gqa", pack_gqa), ("page_table", page_table),
                                ("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale))
                 if x is not None] + [n for n, x, d0 in (("causal", causal, False), ("softcap", softcap, 0.0),
                                                         ("window_size", window_size, (None, None))) if x != d0]
        _problem_only("attention_fp64", problem, given, kernel_options)
        if problem.flex is not None and problem.flex.block_sparse is not None:
            raise ValueError("block_sparse_tensors: attention_fp64 does not model block sparsity; pass the dense "
                             "mask_mod (the logical attention of a consistent sparse call)")
        qa, ka, va = _arrays(problem.q, problem.k, problem.v)
        seqs = problem.seqs if qa is problem.q else problem.sequences(qa, ka, va)
        batch, window, scale, softcap = problem.batch, problem.window, problem.softmax_scale, problem.softcap
        sink = problem.sink
        descales = [x.astype(np.float64) for x in (problem.q_descale, problem.k_descale, problem.v_descale)]
        varlen = problem.varlen_q
    else:
        _check_kernel_options(kernel_options, pack_gqa)
        softcap = check_softcap(softcap)
        qa, ka, va = _arrays(q, k, v)
        lay = layout(qa, ka, va, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, page_table=page_table,
                     max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k)
        seqs, batch = lay.seqs, lay.batch
        window = resolve_window(check_bool(causal, "causal"), window_size)
        check_window_range(window, seqlen_q=lay.longest_q, seqlen_k=lay.longest_k)
        scale = _scale(softmax_scale, qa.shape[-1])
        sink = check_learnable_sink(learnable_sink, heads=qa.shape[-2])
        descales = [np.ones((batch, va.shape[-2])) if x is None else
                    plain(x).astype(np.float64).reshape(batch, va.shape[-2]) for x in (q_descale, k_descale, v_descale)]
        varlen = cu_seqlens_q is not None
    h, hk, dv = qa.shape[-2], va.shape[-2], va.shape[-1]
    sink = None if sink is None else sink.astype(np.float64)
    out = np.zeros((*qa.shape[:-2], h, dv))
    lse = np.full((h, qa.shape[0]) if varlen else (qa.shape[0], h, qa.shape[1]), -np.inf)
    for seq in seqs:
        rep = h // hk
        qk = np.repeat(descales[0][seq.batch] * descales[1][seq.batch], rep)       # per q head
        vsc = np.repeat(descales[2][seq.batch], rep)
        qf = seq.q.astype(np.float64) * qk[None, :, None]
        kf = np.repeat(seq.k.astype(np.float64), rep, axis=1)
        vf = np.repeat(seq.v.astype(np.float64), rep, axis=1) * vsc[None, :, None]
        mods = None
        if problem is not None and problem.flex is not None:
            sq, sk = seq.q.shape[0], seq.k.shape[0]
            cu_q, cu_k = problem.cu_seqlens_q, problem.cu_seqlens_k
            mods = _flex_mods(problem.flex, batch=seq.batch, seqinfo=_flex.SeqlenInfo(
                sq, sk, 0 if cu_q is None else int(cu_q[seq.batch]), 0 if cu_k is None else int(cu_k[seq.batch])))
        o, l = _fp64_core(qf, kf, vf, scale=scale, softcap=softcap, window=window, sink=sink, mods=mods)
        out[seq.out_index] = o
        for hh in range(h):
            lse[seq.lse_index(hh)] = l[hh]
    return out, lse


def round_once(x: np.ndarray, dtype) -> np.ndarray:
    """float64 -> ``dtype`` (bfloat16 or float16) with a single round-to-nearest-even."""
    x = np.asarray(x, np.float64)
    t = x.astype(np.float32)
    inexact = (t.astype(np.float64) != x) & np.isfinite(x)
    bits = t.view(np.uint32)
    even = (bits & 1) == 0
    toward = np.where(x > t.astype(np.float64), np.float32(np.inf), np.float32(-np.inf))
    t = np.where(inexact & even, np.nextafter(t, toward), t)   # round to odd at 24 bits
    return t.astype(np.dtype(dtype))


def attention_fa_reference(q, k, v, *, softmax_scale=None, causal=False):
    """(out_ref, out_pt) as FA's tests build them (testing.attention_ref): out_ref = fp32 math cast to the
    input dtype; out_pt = math in the input dtype with q @ (k * scale)^T. numpy arrays of the input dtype."""
    import torch
    qa, _ = _to_numpy(q, "q")
    ka, _ = _to_numpy(k, "k")
    va, _ = _to_numpy(v, "v")
    tdt = torch.bfloat16 if qa.dtype == np.dtype(ml_dtypes.bfloat16) else torch.float16
    h, d = qa.shape[2], qa.shape[3]
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else float(softmax_scale)

    def t(a):
        return torch.from_numpy(_expand_kv(a, h).astype(np.float32))

    def run(qt, kt, vt, reorder):
        if reorder:
            s = torch.einsum("bthd,bshd->bhts", qt, kt * scale)
        else:
            s = torch.einsum("bthd,bshd->bhts", qt * scale, kt)
        if causal:
            s = s.masked_fill(torch.from_numpy(_causal_mask(qa.shape[1], ka.shape[1])), float("-inf"))
        p = torch.softmax(s, dim=-1)
        p = torch.nan_to_num(p, nan=0.0).to(vt.dtype)
        return torch.einsum("bhts,bshd->bthd", p, vt)

    qf, kf, vf = t(qa), t(ka), t(va)
    out_ref = run(qf, kf, vf, False).to(tdt)
    out_pt = run(qf.to(tdt), kf.to(tdt), vf.to(tdt), True).to(tdt)
    to_np = (lambda x: x.view(torch.int16).numpy().view(qa.dtype))
    return to_np(out_ref), to_np(out_pt)


def _as_f64(x) -> np.ndarray:
    if type(x).__module__.startswith("torch"):
        return x.detach().double().cpu().numpy().ravel()
    return np.asarray(x).astype(np.float64).ravel()


@dataclass
class Metrics:
    """Error of one output against a reference: max and mean absolute error, relative L2 error, cosine."""

    max_abs: float
    mean_abs: float
    rel_l2: float
    cosine: float

    def as_dict(self) -> dict:
        return asdict(self)


def metrics(out, ref) -> Metrics:
    """Errors of ``out`` against ``ref`` (both converted to float64)."""
    o, r = _as_f64(out), _as_f64(ref)
    if o.shape != r.shape:
        raise ValueError(f"out and ref must have the same number of elements, got {o.size} and {r.size}")
    d = o - r
    nr = np.linalg.norm(r)
    no = np.linalg.norm(o)
    return Metrics(max_abs=float(np.abs(d).max(initial=0)), mean_abs=float(np.abs(d).mean()) if d.size else 0.0,
                   rel_l2=float(np.linalg.norm(d) / nr) if nr else float(np.linalg.norm(d)),
                   cosine=float(o @ r / (no * nr)) if no and nr else float(no == nr))


@dataclass
class FaRule:
    """FA's forward test: passed iff max_err <= rtol * max_err_pt + atol."""
    max_err: float
    max_err_pt: float
    atol: float
    rtol: float
    passed: bool


def fa_rule(out, out_ref, out_pt, *, rtol: float = 2.0) -> FaRule:
    """FA's criterion (tests/cute/test_flash_attn.py): atol = 2 max|out_ref + 0.3 - 0.3 - out_ref| computed in
    the reference's dtype (the rounding-noise floor), errors against out_ref."""
    ref = np.asarray(out_ref)
    dt = ref.dtype
    out = _as_f64(out).reshape(ref.shape)
    out_pt = _as_f64(out_pt).reshape(ref.shape)
    r64 = ref.astype(np.float64)
    noise = ((ref.astype(np.float32) + np.float32(0.3)).astype(dt).astype(np.float32) - np.float32(0.3)).astype(dt)
    atol = 2 * float(np.abs(noise.astype(np.float64) - r64).max(initial=0))
    err = float(np.abs(np.asarray(out).astype(np.float64) - r64).max(initial=0))
    err_pt = float(np.abs(np.asarray(out_pt).astype(np.float64) - r64).max(initial=0))
    return FaRule(err, err_pt, atol, rtol, err <= rtol * err_pt + atol)


@dataclass
class Gradients:
    """fp64 reference gradients, each with its input's shape (``dsink``: (heads,), None without a sink)."""
    dq: np.ndarray
    dk: np.ndarray
    dv: np.ndarray
    dsink: np.ndarray | None = None


def _fp64_grad_core(qf, kf, vf, dof, *, scale, softcap, window, sink, dlse=None):
    """One sequence's gradients in float64: qf/dof (sq, h, d|dv), kf/vf (sk, h, d|dv) with KV heads expanded,
    dlse (h, sq) or None. Returns dq (sq, h, d), dk and dv per query head (sk, h, d|dv), dsink (h,)."""
    p, p_sink, _, _, t = _fp64_softmax(qf, kf, scale=scale, softcap=softcap, window=window, sink=sink)
    dp = np.einsum("ihd,jhd->hij", dof, vf)
    dsum = (p * dp).sum(axis=-1, keepdims=True)               # D = rowsum(P * dP) = rowsum(dO * O)
    if dlse is not None:
        dsum = dsum - dlse[..., None]                          # dLSE_i / dS_ij = P_ij: dS = P (dP - (D - dLSE))
    ds = p * (dp - dsum)
    dsink = np.zeros(qf.shape[1])
    if sink is not None:
        dsink = -(p_sink * dsum)[..., 0].sum(axis=-1)         # the sink logit has dP = 0: dS = P_sink (0 - D)
    if softcap:
        ds = ds * (1 - t * t)
    dq = np.einsum("hij,jhd->ihd", ds, kf) * scale
    dk = np.einsum("hij,ihd->jhd", ds, qf) * scale
    dv = np.einsum("hij,ihd->jhd", p, dof)
    return dq, dk, dv, dsink


def backward_fp64(q=None, k=None, v=None, dout=None, *, problem: Problem | None = None, softmax_scale=None,
                  causal=False, window_size=(None, None), softcap=0.0, learnable_sink=None, cu_seqlens_q=None,
                  cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None, pack_gqa=None, dlse=None,
                  **kernel_options) -> Gradients:
    """Exact-input gradients of softmax(scale * Q K^T) V in float64, with the forward's options.

    GQA: dK, dV summed over each group; causal and sliding windows bottom-right aligned, as FA4; ``softcap`` > 0:
    scores softcap * tanh(scale * Q K^T / softcap); ``learnable_sink`` (heads,): an extra logit per head in the
    softmax's normaliser with no value row, whose gradient is returned as ``dsink`` (float64, (heads,));
    varlen: q, k, v, dout 3-D with ``cu_seqlens_q/k`` (``max_seqlen_q/k``, when given, at least the longest
    sequence). Options are checked as :func:`attention_fp64` checks them; ``pack_gqa`` and the kernel-only
    knobs (:data:`KERNEL_ONLY_OPTIONS`: ``deterministic``, ``mode``, ...) change nothing exact. Rows with no
    visible key contribute nothing. Or ``problem`` (:func:`fa4num.attention.problem.plan`) and ``dout``, as
    :func:`attention_fp64` takes it: its inputs, sequences, masks, scale and sink.

    dP = dO V^T, D = rowsum(dO * O) (= rowsum(P * dP)), dS = P * (dP - D), dQ = scale dS K, dK = scale dS^T Q,
    dV = P^T dO, dsink = -sum_i P_sink,i D_i, all from the float64 values of the 16-bit inputs. With ``dlse``
    (the gradient reaching the LSE) D becomes D - dLSE in dS and dsink.

    Parameters
    ----------
    q, k, v, dout : arrays or torch tensors, FA4's layout (batch, seqlen, heads, head_dim[_v]); varlen 3-D
        16-bit (or any float) values, used exactly in float64. With ``problem``: ``dout`` only.
    problem : Problem, optional
        ``plan(q, k, v, **FA4 arguments)`` instead of q, k, v and the arguments below (a page table or fp8
        descales are refused: FA4's backward takes neither).
    softmax_scale : float, optional
        Default 1/sqrt(head_dim).
    causal : bool
    window_size : (left, right)
        Sliding window, None for an open side.
    softcap : float
        > 0: scores softcap * tanh(scale * Q K^T / softcap).
    learnable_sink : array (heads,), optional
    cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k : optional
        Varlen, as :func:`fa4num.attention.forward` takes them.
    pack_gqa, **kernel_options
        Accepted and checked (KERNEL_ONLY_OPTIONS); they change nothing exact.
    dlse : float array shaped like the forward's LSE ((batch, heads, seqlen_q); varlen (heads, total_q)), optional

    Returns
    -------
    Gradients
        .dq, .dk, .dv float64 in q's / k's / v's shapes; .dsink float64 (heads,) with a learnable sink, else None.

    Raises
    ------
    ValueError
        For an option or shape that :func:`attention_fp64` rejects.
    TypeError
        For ``problem`` with q, k, v or FA4's arguments, or without ``dout``.

    Examples
    --------
    >>> import ml_dtypes
    >>> x = np.ones((1, 4, 1, 8), ml_dtypes.bfloat16)
    >>> g = backward_fp64(x, x, x, x)
    >>> float(abs(g.dq).max()), float(g.dv.sum())
    (0.0, 32.0)
    >>> g = backward_fp64(x, x, x, x, learnable_sink=np.zeros(1, np.float32), softmax_scale=0.0)
    >>> round(float(g.dsink[0]), 12)      # 4 rows, each P_sink = 1/5 and D = rowsum(dO * O) = 8 * 4/5
    -5.12
    >>> from fa4num.attention import plan
    >>> bool((backward_fp64(dout=x, problem=plan(x, x, x)).dv == backward_fp64(x, x, x, x).dv).all())
    True
    """
    if dout is None:
        raise TypeError("backward_fp64: dout is required")
    if problem is not None:
        given = [n for n, x in (("q", q), ("k", k), ("v", v), ("softmax_scale", softmax_scale),
                                ("learnable_sink", learnable_sink), ("cu_seqlens_q", cu_seqlens_q),
                                ("cu_seqlens_k", cu_seqlens_k), ("max_seqlen_q", max_seqlen_q),
                                ("max_seqlen_k", max_seqlen_k), ("pack_gqa", pack_gqa)) if x is not None] + \
                [n for n, x, d0 in (("causal", causal, False), ("softcap", softcap, 0.0),
                                    ("window_size", window_size, (None, None))) if x != d0]
        _problem_only("backward_fp64", problem, given, kernel_options)
        problem.refuse_flex("backward_fp64")
        for name, has in (("page_table", problem.page_table is not None),
                          ("q_descale/k_descale/v_descale", problem.descaled)):
            if has:
                raise ValueError(f"{name} is not supported by FA4's backward")
        qa, ka, va = _arrays(problem.q, problem.k, problem.v)
        cq, ck = problem.cu_seqlens_q, problem.cu_seqlens_k
        window, scale, softcap, sink = problem.window, problem.softmax_scale, problem.softcap, problem.sink
        if (cq is None) != (ck is None):
            raise ValueError("cu_seqlens_q and cu_seqlens_k must be given together")
    else:
        _check_kernel_options(kernel_options, pack_gqa)
        softcap = check_softcap(softcap)
        qa, ka, va = _arrays(q, k, v)
        if (cu_seqlens_q is None) != (cu_seqlens_k is None):
            raise ValueError("cu_seqlens_q and cu_seqlens_k must be given together")
        lay = layout(qa, ka, va, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q,
                     max_seqlen_k=max_seqlen_k)
        cq, ck = lay.cu_seqlens_q, lay.cu_seqlens_k
        window = resolve_window(check_bool(causal, "causal"), window_size)
        check_window_range(window, seqlen_q=lay.longest_q, seqlen_k=lay.longest_k)
        scale = _scale(softmax_scale, qa.shape[-1])
        sink = check_learnable_sink(learnable_sink, heads=qa.shape[-2])
    da, _ = _to_numpy(dout, "dout")
    if da.shape != qa.shape[:-1] + va.shape[-1:]:
        raise ValueError(f"dout must have shape {qa.shape[:-1] + va.shape[-1:]}, got {da.shape}")
    h, d = qa.shape[-2:]
    hk = ka.shape[-2]
    if cq is not None:
        seqs = [((slice(cq[i], cq[i + 1]),), (slice(ck[i], ck[i + 1]),)) for i in range(cq.size - 1)]
    else:
        seqs = [((b,), (b,)) for b in range(qa.shape[0])]
    sink = None if sink is None else sink.astype(np.float64)
    lse_shape = (h, qa.shape[0]) if cq is not None else (qa.shape[0], h, qa.shape[1])
    if dlse is not None:
        dlse = np.asarray(plain(dlse), np.float64)
        if dlse.shape != lse_shape:
            raise ValueError(f"dlse must have the LSE's shape {lse_shape}, got {dlse.shape}")
    g = h // hk
    dq = np.zeros(qa.shape)
    dk = np.zeros(ka.shape)
    dv = np.zeros(va.shape)
    dsink = np.zeros(h)
    for iq, ik in seqs:
        kf = np.repeat(ka[ik].astype(np.float64), g, axis=1)
        vf = np.repeat(va[ik].astype(np.float64), g, axis=1)
        dl = None if dlse is None else (dlse[:, iq[0]] if cq is not None else dlse[iq[0]])
        gq, gk, gv, gs = _fp64_grad_core(qa[iq].astype(np.float64), kf, vf, da[iq].astype(np.float64),
                                         scale=scale, softcap=softcap, window=window, sink=sink, dlse=dl)
        sk = kf.shape[0]
        dq[iq] = gq
        dk[ik] = gk.reshape(sk, hk, g, d).sum(axis=2)
        dv[ik] = gv.reshape(sk, hk, g, va.shape[-1]).sum(axis=2)
        dsink += gs
    return Gradients(dq, dk, dv, dsink if sink is not None else None)


def backward_metrics(result, ref: Gradients) -> dict:
    """{"dq": Metrics, "dk": Metrics, "dv": Metrics} of a backward result (``.dq/.dk/.dv``) against
    :func:`backward_fp64`'s gradients, the forward's metrics applied per gradient; "dsink" too when both
    have one."""
    names = ["dq", "dk", "dv"]
    if getattr(result, "dsink", None) is not None and ref.dsink is not None:
        names.append("dsink")
    return {n: metrics(getattr(result, n), getattr(ref, n)) for n in names}
