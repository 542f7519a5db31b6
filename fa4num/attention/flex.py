"""FlexAttention's front door of FA4: ``score_mod``, ``mask_mod``, ``aux_tensors``/``aux_scalars`` and block
sparsity (``block_sparse_tensors``), as Python callables evaluated in fp32 where FA4 4.0.0b36 applies them.

Where FA4 applies them (both kernels, ``flash_fwd_sm90.py`` ``FlashAttentionForwardSm90.mma`` and
``flash_fwd_sm100.py`` ``softmax_step``): per KV block, S = Q K^T; then the score_mod on
``RN(S * softmax_scale)`` (``softmax.apply_score_mod_inner``; the softmax then runs with ``scale_log2 =
LOG2_E``, ``utils.compute_softmax_scale_log2``); then the mask (``mask.py`` ``AttentionMask.apply_mask``):
keys at or beyond seqlen_k only in blocks visited with ``mask_seqlen=True``, and the mask_mod's False entries
-> -inf.

Calling convention (FA4's, ``softmax.call_score_mod`` / ``mask.call_mask_mod``)::

    score_mod(score, b_idx, h_idx, q_idx=, kv_idx=, seqlen_info=, aux_tensors=[, aux_scalars=]) -> float32
    mask_mod(b_idx, h_idx, q_idx, kv_idx, seqlen_info, aux_tensors[, aux_scalars]) -> bool

``score`` is float32 (rows, keys); the indices are int32 arrays that broadcast against it (``b_idx``, ``h_idx``,
``q_idx`` (rows, 1), ``kv_idx`` (1, keys)), logical (a pack-GQA row gives its own head and query);
``seqlen_info`` a :class:`SeqlenInfo`; ``aux_tensors`` the call's list of numpy arrays (an empty tuple for the
score_mod when there are none, None for the mask_mod, as FA4 passes them); ``aux_scalars`` is passed only when
the call has them. With aux tensors, indices are wrapped modulo the sequence lengths where FA4 wraps them
(FastDivmod; every score_mod call, and mask_mod calls in blocks visited with seqlen masking) so that padded
positions read in bounds.

The bits are FA4's when the callable's fp32 arithmetic matches the CuTe code's: the same operations, rounded the
same way (numpy float32 arithmetic is ``add/mul.rn.f32``; :func:`fma` one rounding; :func:`tanh_approx`,
:func:`ex2_approx` the measured MUFU model) -- including the contractions ptxas makes (a ``mul.f32`` followed
by an ``add.f32`` becomes one FFMA; :func:`scaled_add` is the score's own ``RN(S * scale) + bias`` contracted to
``fma(S, scale, bias)``).

Examples
--------
>>> import ml_dtypes, numpy as np
>>> from fa4num.attention import forward
>>> rng = np.random.default_rng(0)
>>> q, k, v = (rng.standard_normal((1, 64, 2, 64)).astype(ml_dtypes.bfloat16) for _ in range(3))
>>> a = forward(q, k, v, mask_mod=sliding_window_mask(8, 0))
>>> b = forward(q, k, v, window_size=(8, 0))
>>> bool((a.out.view(np.uint16) == b.out.view(np.uint16)).all())
True
"""
from __future__ import annotations

import contextvars
from dataclasses import dataclass

import numpy as np

from fa4num.softmax import f32, ffma, mufu
from fa4num.softmax import scoremod as _scoremod


# ---------------------------------------------------------------------------------------------- data
@dataclass(frozen=True)
class SeqlenInfo:
    """``seqlen_info.SeqlenInfoQK`` as a mod sees it: this sequence's lengths and its varlen offsets."""
    seqlen_q: int
    seqlen_k: int
    offset_q: int = 0
    offset_k: int = 0


@dataclass(frozen=True, eq=False)
class BlockSparse:
    """FA4's ``BlockSparseTensorsTorch`` checked: per (batch, head or 1 broadcast, query block) the partially
    masked KV blocks (``mask_block_cnt`` / ``mask_block_idx``, visited with the mask_mod) and the full ones
    (``full_block_cnt`` / ``full_block_idx``, visited without it); ``block_size`` = (query rows, keys) per block."""
    mask_block_cnt: np.ndarray     # int32 (batch, heads | 1, m blocks)
    mask_block_idx: np.ndarray     # int32 (batch, heads | 1, m blocks, n blocks)
    full_block_cnt: np.ndarray     # int32, zeros without full blocks
    full_block_idx: np.ndarray
    block_size: tuple

    @property
    def per_head(self) -> bool:
        return self.mask_block_cnt.shape[1] != 1

    def lists(self, batch: int, head: int, m_block: int) -> tuple[list, list]:
        """(mask block list, full block list) of one query block, in the tensors' order."""
        hh = head if self.per_head else 0
        nm = int(self.mask_block_cnt[batch, hh, m_block])
        nf = int(self.full_block_cnt[batch, hh, m_block])
        return ([int(x) for x in self.mask_block_idx[batch, hh, m_block, :nm]],
                [int(x) for x in self.full_block_idx[batch, hh, m_block, :nf]])


@dataclass(frozen=True, eq=False)
class Flex:
    """The FlexAttention arguments of one call (``Problem.flex``)."""
    score_mod: object = None
    mask_mod: object = None
    aux_tensors: tuple | None = None
    aux_scalars: tuple | None = None
    block_sparse: BlockSparse | None = None
    score_mod_bwd: object = None
    block_sparse_bwd: BlockSparse | None = None   # the backward's (query-direction) tensors


# ---------------------------------------------------------------------------------------------- fp32 helpers
_ARCH = contextvars.ContextVar("fa4num_flex_mufu_arch", default="sm90")
_SCALED = contextvars.ContextVar("fa4num_flex_scaled", default=None)


def tanh_approx(x) -> np.ndarray:
    """``tanh.approx.f32`` (``cute.math.tanh(x, fastmath=True)``) of float32 ``x``, from the MUFU model of the
    call that evaluates the mod (the measured H200 table in the bit-exact mode, libm in the statistical one).

    Parameters
    ----------
    x : float32 array_like

    Returns
    -------
    numpy.ndarray of float32

    Examples
    --------
    >>> float(tanh_approx(np.float32(0.0)))
    0.0
    """
    return mufu("tanh", _ARCH.get())(f32(x))


def ex2_approx(x) -> np.ndarray:
    """``ex2.approx.ftz.f32`` (``cute.math.exp2(x, fastmath=True)``, ``cute.arch.exp2``) of float32 ``x``, from
    the call's MUFU model.

    Parameters
    ----------
    x : float32 array_like

    Returns
    -------
    numpy.ndarray of float32

    Examples
    --------
    >>> float(ex2_approx(np.float32(-1.0)))
    0.5
    """
    return mufu("ex2", _ARCH.get())(f32(x))


def fma(a, b, c) -> np.ndarray:
    """``fma.rn.f32``: a*b + c rounded once (what ptxas makes of a ``mul.f32`` whose only use is an
    ``add.f32``).

    Parameters
    ----------
    a, b, c : float32 array_like

    Returns
    -------
    numpy.ndarray of float32 (the broadcast shape)

    Examples
    --------
    >>> float(fma(np.float32(3.0), np.float32(0.5), np.float32(1.0)))
    2.5
    """
    return ffma(f32(a), f32(b), f32(c))


def scaled_add(score, bias) -> np.ndarray:
    """``score + bias`` where ``score`` is the mod's own argument ``RN(S * softmax_scale)``: ptxas contracts FA4's
    ``mul.f32`` by the scale and the mod's ``add.f32`` into one FFMA, ``fma(S, softmax_scale, bias)``. Any other
    array is added with one rounding (``add.rn.f32``).

    Parameters
    ----------
    score : float32 array
        The mod's score argument (or any array).
    bias : float32 array_like

    Returns
    -------
    numpy.ndarray of float32

    Examples
    --------
    >>> float(scaled_add(np.float32(1.0), np.float32(2.0)))   # not a mod's score: a plain add
    3.0
    """
    cur = _SCALED.get()
    if cur is not None and score is cur[0]:
        _, acc, scale = cur
        return ffma(acc, scale, np.broadcast_to(f32(bias), acc.shape))
    return (f32(score) + f32(bias)).astype(np.float32)


# ---------------------------------------------------------------------------------------------- built-ins
def _name(fn, kind: str, consts: dict | None = None, **params):
    """Name a built-in ``kind(params)`` and record ``fn.builtin = (kind, params and its constants)``: how a
    consumer that cannot call Python (the GPU twin's Triton kernel) recognises the built-in and its parameters;
    the fp32 rule stays here."""
    fn.__name__ = fn.__qualname__ = f"{kind}({', '.join(f'{k}={v!r}' for k, v in params.items())})"
    fn.builtin = (kind, {**params, **(consts or {})})
    return fn


def _check_cap(softcap):
    if not (isinstance(softcap, (int, float)) and softcap > 0):
        raise ValueError(f"softcap must be a float > 0, got {softcap!r}")


def _distance(q_idx, kv_idx) -> np.ndarray:
    """|q_idx - kv_idx| in int32 (``mlir_math.absi`` of the Int32 difference)."""
    return np.abs(np.asarray(q_idx, np.int32) - np.asarray(kv_idx, np.int32))


def _add_bias(score, bias, contract: bool) -> np.ndarray:
    """score + bias: contracted with FA4's scale multiply (:func:`scaled_add`) or one ``add.rn``."""
    return scaled_add(score, bias) if contract else (f32(score) + f32(bias)).astype(np.float32)


def softcap_mod(softcap: float):
    """The soft cap as a score_mod (``utils.create_softcap_scoremod``): ``softcap * tanh.approx(score /
    softcap)``; gives the bits of ``softcap=``.

    Parameters
    ----------
    softcap : float
        > 0.

    Returns
    -------
    callable
        A score_mod.

    Examples
    --------
    >>> m = softcap_mod(30.0)
    >>> float(m(np.float32([[0.0]]), 0, 0, q_idx=0, kv_idx=0, seqlen_info=None, aux_tensors=())[0, 0])
    0.0
    """
    _check_cap(softcap)

    def mod(score, b_idx, h_idx, q_idx, kv_idx, seqlen_info, aux_tensors):
        return _scoremod.softcap_of(score, softcap=softcap, arch=_ARCH.get())
    return _name(mod, "softcap_mod", softcap=softcap)


def softcap_mod_bwd(softcap: float):
    """The soft cap's score_mod_bwd (``utils.create_softcap_scoremod_bwd``): ``grad * (1 - t * t)`` with
    ``t = tanh.approx(score / softcap)``, ``1 - t * t`` one FFMA.

    Parameters
    ----------
    softcap : float
        > 0.

    Returns
    -------
    callable
        A score_mod_bwd.

    Examples
    --------
    >>> m = softcap_mod_bwd(30.0)
    >>> float(m(np.float32([[2.0]]), np.float32([[0.0]]), 0, 0, q_idx=0, kv_idx=0, seqlen_info=None,
    ...         aux_tensors=())[0, 0])
    2.0
    """
    _check_cap(softcap)

    def mod_bwd(grad, score, b_idx, h_idx, q_idx, kv_idx, seqlen_info, aux_tensors):
        return _scoremod.softcap_grad_of(grad, score, softcap=softcap, arch=_ARCH.get())
    return _name(mod_bwd, "softcap_mod_bwd", softcap=softcap)


def passthrough_bwd():
    """The score_mod_bwd of an additive mod (score + bias, ALiBi, relative bias): d(score + bias)/d score = 1, the
    gradient passes through unchanged.

    Parameters
    ----------
    None

    Returns
    -------
    callable
        A score_mod_bwd.

    Examples
    --------
    >>> passthrough_bwd()(np.float32([[3.0]]), None, 0, 0, q_idx=0, kv_idx=0, seqlen_info=None,
    ...                   aux_tensors=()).tolist()
    [[3.0]]
    """
    def mod_bwd(grad, score, b_idx, h_idx, q_idx, kv_idx, seqlen_info, aux_tensors):
        return grad
    return _name(mod_bwd, "passthrough_bwd")


def alibi_slopes(heads: int) -> np.ndarray:
    """ALiBi's head slopes ``2 ** (-8 * (h + 1) / heads)`` as float32 (powers of two when 8 % heads == 0).

    Parameters
    ----------
    heads : int

    Returns
    -------
    numpy.ndarray of float32 (heads,)

    Examples
    --------
    >>> alibi_slopes(4).tolist()
    [0.25, 0.0625, 0.015625, 0.00390625]
    """
    return np.exp2(-8.0 * (np.arange(heads) + 1) / heads).astype(np.float32)


def alibi_mod(*, aux_index: int = 0, contract: bool = True):
    """ALiBi: ``score - slope[h] * |q_idx - kv_idx|``, the slopes (float32 (heads,)) read from
    ``aux_tensors[aux_index]``. The product is rounded (``mul.rn``), exact for power-of-two slopes;
    ``contract``: the subtraction contracts with FA4's scale multiply (:func:`scaled_add`).

    Parameters
    ----------
    aux_index : int
        Which aux tensor holds the slopes.
    contract : bool

    Returns
    -------
    callable
        A score_mod.

    Examples
    --------
    >>> m = alibi_mod()
    >>> m(np.float32([[1.0, 1.0]]), 0, np.int32([[0]]), q_idx=np.int32([[1]]), kv_idx=np.int32([[0, 1]]),
    ...   seqlen_info=None, aux_tensors=[np.float32([0.5])]).tolist()
    [[0.5, 1.0]]
    """
    def mod(score, b_idx, h_idx, q_idx, kv_idx, seqlen_info, aux_tensors):
        slope = f32(aux_tensors[aux_index])[h_idx]
        return _add_bias(score, -(slope * _distance(q_idx, kv_idx).astype(np.float32)).astype(np.float32),
                         contract)
    return _name(mod, "alibi_mod", aux_index=aux_index, contract=contract)


def alibi_exp2_mod(*, contract: bool = True):
    """Upstream's ``score_mod_alibi`` (tests/cute/score_mod_definitions.py): the slope computed in the kernel,
    ``exp2(float(-8 (h + 1)) * RN(0.125 ln2 log2e))`` (``cute.math.exp2``: ``ex2.approx``), then
    ``score - slope * |q_idx - kv_idx|``; ``contract`` as in :func:`alibi_mod`.

    Parameters
    ----------
    contract : bool

    Returns
    -------
    callable
        A score_mod.

    Examples
    --------
    >>> alibi_exp2_mod()(np.float32([[1.0]]), 0, np.int32([[0]]), q_idx=np.int32([[2]]), kv_idx=np.int32([[0]]),
    ...                  seqlen_info=None, aux_tensors=()).tolist()
    [[0.0]]
    """
    c = np.float32(0.125 * 0.6931471805599453 * 1.4426950408889634)

    def mod(score, b_idx, h_idx, q_idx, kv_idx, seqlen_info, aux_tensors):
        expo = (np.asarray(h_idx, np.int32) + 1) * -8
        slope = mufu("ex2", _ARCH.get(), ftz=False)((expo.astype(np.float32) * c).astype(np.float32))
        return _add_bias(score, -(slope * _distance(q_idx, kv_idx).astype(np.float32)).astype(np.float32),
                         contract)
    return _name(mod, "alibi_exp2_mod", consts={"c": c}, contract=contract)


def rel_bias_mod(*, clamp: int | None = None, contract: bool = True):
    """Relative position bias ``score + min(|q_idx - kv_idx|, clamp)`` (upstream's ``score_mod_rel_bias`` and
    ``_clamped``); ``contract`` as in :func:`alibi_mod`.

    Parameters
    ----------
    clamp : int, optional
    contract : bool

    Returns
    -------
    callable
        A score_mod.

    Examples
    --------
    >>> rel_bias_mod(contract=False)(np.float32([[0.0, 0.0]]), 0, 0, q_idx=np.int32([[0]]),
    ...                              kv_idx=np.int32([[0, 3]]), seqlen_info=None, aux_tensors=()).tolist()
    [[0.0, 3.0]]
    """
    def mod(score, b_idx, h_idx, q_idx, kv_idx, seqlen_info, aux_tensors):
        dist = _distance(q_idx, kv_idx)
        return _add_bias(score, (dist if clamp is None else np.minimum(dist, clamp)).astype(np.float32), contract)
    return _name(mod, "rel_bias_mod", clamp=clamp, contract=contract)


def causal_mask():
    """Causal, bottom-right aligned like FA4's ``causal=True``: ``kv_idx <= q_idx + seqlen_k - seqlen_q``.

    Parameters
    ----------
    None

    Returns
    -------
    callable
        A mask_mod.

    Examples
    --------
    >>> causal_mask()(0, 0, np.int32([[0]]), np.int32([[0, 1]]), SeqlenInfo(2, 2), None).tolist()
    [[True, False]]
    """
    def mask(b_idx, h_idx, q_idx, kv_idx, seqlen_info, aux_tensors):
        return kv_idx <= q_idx + (seqlen_info.seqlen_k - seqlen_info.seqlen_q)
    return _name(mask, "causal_mask")


def sliding_window_mask(left: int | None, right: int | None):
    """The sliding window of ``window_size=(left, right)`` as a mask_mod (bottom-right aligned; None = unbounded
    side): ``q + off - left <= kv <= q + off + right``, ``off = seqlen_k - seqlen_q``.

    Parameters
    ----------
    left, right : int or None

    Returns
    -------
    callable
        A mask_mod.

    Examples
    --------
    >>> sliding_window_mask(1, 0)(0, 0, np.int32([[2]]), np.int32([[0, 1, 2]]), SeqlenInfo(3, 3), None).tolist()
    [[False, True, True]]
    """
    def mask(b_idx, h_idx, q_idx, kv_idx, seqlen_info, aux_tensors):
        center = q_idx + (seqlen_info.seqlen_k - seqlen_info.seqlen_q)
        ok = np.ones(np.broadcast_shapes(np.shape(q_idx), np.shape(kv_idx)), bool)
        if left is not None:
            ok &= kv_idx >= center - left
        if right is not None:
            ok &= kv_idx <= center + right
        return ok
    return _name(mask, "sliding_window_mask", left=left, right=right)


def prefix_lm_mask(prefix: int):
    """Prefix-LM: the first ``prefix`` tokens see each other, the rest is causal (top-left: ``q_idx >= kv_idx``),
    upstream's ``cute_prefix_lm_mask``.

    Parameters
    ----------
    prefix : int

    Returns
    -------
    callable
        A mask_mod.

    Examples
    --------
    >>> prefix_lm_mask(2)(0, 0, np.int32([[0]]), np.int32([[0, 1, 2]]), SeqlenInfo(3, 3), None).tolist()
    [[True, True, False]]
    """
    def mask(b_idx, h_idx, q_idx, kv_idx, seqlen_info, aux_tensors):
        return ((q_idx < prefix) & (kv_idx < prefix)) | (q_idx >= kv_idx)
    return _name(mask, "prefix_lm_mask", prefix=prefix)


def document_mask(*, aux_index: int = 0):
    """Document (packed sequences) mask: ``doc[b, q_idx] == doc[b, kv_idx]``, the int document ids (batch,
    seqlen), or (batch, heads, seqlen) as upstream's ``cute_document_mask`` reads them (``doc[b, h, idx]``), from
    ``aux_tensors[aux_index]`` (seqlen_q == seqlen_k).

    Parameters
    ----------
    aux_index : int
        Which aux tensor holds the document ids.

    Returns
    -------
    callable
        A mask_mod.

    Examples
    --------
    >>> doc = np.int32([[0, 0, 1]])
    >>> document_mask()(np.int32([[0]]), 0, np.int32([[1]]), np.int32([[0, 1, 2]]), SeqlenInfo(3, 3), [doc]).tolist()
    [[True, True, False]]
    """
    def mask(b_idx, h_idx, q_idx, kv_idx, seqlen_info, aux_tensors):
        doc = np.asarray(aux_tensors[aux_index])
        if doc.ndim == 3:
            return doc[b_idx, h_idx, q_idx] == doc[b_idx, h_idx, kv_idx]
        return doc[b_idx, q_idx] == doc[b_idx, kv_idx]
    return _name(mask, "document_mask", aux_index=aux_index)


# ---------------------------------------------------------------------------------------------- evaluation
def _call(fn, what, args, kwargs):
    try:
        return fn(*args, **kwargs)
    except IndexError as e:
        raise ValueError(f"{what} indexed out of range ({e}): FA4 wraps q_idx/kv_idx modulo the sequence lengths "
                         "only when aux_tensors are given, and not at all for a mask_mod in a block visited "
                         "without seqlen masking (a sparse block list's later blocks crossing seqlen_k: FA4 "
                         "reads unspecified memory there)") from None


def _wrap(idx, n, aux):
    return idx % n if (aux is not None and n > 0) else idx


def _score_call(acc, flex: Flex, *, softmax_scale, batch, heads, q_idx, kv_idx, seqinfo):
    """(RN(acc * softmax_scale), the positional b_idx/h_idx, the keyword arguments) of a score_mod(_bwd) call
    (``softmax.call_score_mod``): indices wrapped modulo the lengths when aux tensors are given."""
    acc = f32(acc)
    with np.errstate(over="ignore", invalid="ignore"):
        score = (acc * np.float32(softmax_scale)).astype(np.float32)
    aux = flex.aux_tensors
    kwargs = {"q_idx": _wrap(np.asarray(q_idx, np.int32)[:, None], seqinfo.seqlen_q, aux),
              "kv_idx": _wrap(np.asarray(kv_idx, np.int32)[None, :], seqinfo.seqlen_k, aux),
              "seqlen_info": seqinfo, "aux_tensors": () if aux is None else list(aux)}
    if flex.aux_scalars is not None:
        kwargs["aux_scalars"] = flex.aux_scalars
    pos = (np.full((acc.shape[0], 1), batch, np.int32), np.asarray(heads, np.int32)[:, None])
    return score, pos, kwargs


def apply_score_mod(acc, flex: Flex, *, softmax_scale, batch: int, heads, q_idx, kv_idx, seqinfo: SeqlenInfo,
                    arch) -> np.ndarray:
    """The score_mod on one block (``softmax.apply_score_mod_inner``): ``mod(RN(acc * softmax_scale), ...)``
    with FA4's indices (wrapped modulo the lengths when aux tensors are given); float32 (rows, keys).

    Parameters
    ----------
    acc : float32 (rows, keys)
        Q K^T of the block.
    flex : Flex
    softmax_scale : float32
    batch : int
    heads, q_idx : int arrays (rows,)
        Each row's logical q head and query index.
    kv_idx : int array (keys,)
    seqinfo : SeqlenInfo
    arch : the MUFU model the mod's helpers use

    Returns
    -------
    float32 array (rows, keys)

    Raises
    ------
    TypeError, ValueError
        The mod returned another dtype or shape (naming ``score_mod``), or indexed out of range.

    Examples
    --------
    >>> fl = Flex(score_mod=rel_bias_mod(contract=False))
    >>> apply_score_mod(np.float32([[2.0, 2.0]]), fl, softmax_scale=np.float32(0.5), batch=0,
    ...                 heads=np.array([0]), q_idx=np.array([0]), kv_idx=np.array([0, 1]),
    ...                 seqinfo=SeqlenInfo(1, 2), arch="sm90").tolist()
    [[1.0, 2.0]]
    """
    acc = f32(acc)
    r, n = acc.shape
    score, pos, kwargs = _score_call(acc, flex, softmax_scale=softmax_scale, batch=batch, heads=heads, q_idx=q_idx,
                                     kv_idx=kv_idx, seqinfo=seqinfo)
    t_arch, t_scaled = _ARCH.set(arch), _SCALED.set((score, acc, np.float32(softmax_scale)))
    try:
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            out = _call(flex.score_mod, "score_mod", (score, *pos), kwargs)
    finally:
        _SCALED.reset(t_scaled)
        _ARCH.reset(t_arch)
    out = np.asarray(out)
    if out.dtype != np.float32:
        raise TypeError(f"score_mod must return float32 scores (FA4's score is Float32), got dtype {out.dtype}")
    if out.shape != (r, n):
        raise ValueError(f"score_mod must return an array of the score's shape {(r, n)}, got {out.shape}")
    return out


def apply_score_mod_bwd(grad, acc, flex: Flex, *, softmax_scale, batch: int, heads, q_idx, kv_idx,
                        seqinfo: SeqlenInfo, arch) -> np.ndarray:
    """The score_mod_bwd on one block of the backward (``softmax.apply_score_mod_bwd_inner``): ``mod_bwd(dS,
    RN(acc * softmax_scale), ...)`` -> the new dS, float32 (rows, keys); indices as :func:`apply_score_mod`.

    Parameters
    ----------
    grad : float32 (rows, keys)
        dS = P (dP - D).
    acc : float32 (rows, keys)
        The block's Q K^T before the score_mod.
    flex, softmax_scale, batch, heads, q_idx, kv_idx, seqinfo, arch
        As :func:`apply_score_mod`.

    Returns
    -------
    float32 array (rows, keys)

    Examples
    --------
    >>> fl = Flex(score_mod_bwd=passthrough_bwd())
    >>> apply_score_mod_bwd(np.float32([[1.5]]), np.float32([[2.0]]), fl, softmax_scale=np.float32(1), batch=0,
    ...                     heads=np.array([0]), q_idx=np.array([0]), kv_idx=np.array([0]),
    ...                     seqinfo=SeqlenInfo(1, 1), arch="sm90").tolist()
    [[1.5]]
    """
    r, n = np.shape(acc)
    score, pos, kwargs = _score_call(acc, flex, softmax_scale=softmax_scale, batch=batch, heads=heads, q_idx=q_idx,
                                     kv_idx=kv_idx, seqinfo=seqinfo)
    token = _ARCH.set(arch)
    try:
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            out = _call(flex.score_mod_bwd, "score_mod_bwd", (f32(grad), score, *pos), kwargs)
    finally:
        _ARCH.reset(token)
    out = np.asarray(out)
    if out.dtype != np.float32 or out.shape != (r, n):
        raise TypeError(f"score_mod_bwd must return float32 gradients of shape {(r, n)}, got dtype {out.dtype} "
                        f"shape {out.shape}")
    return out


def mask_mod_keep(flex: Flex, *, batch: int, heads, q_idx, kv_idx, seqinfo: SeqlenInfo, wrap: bool,
                  arch="sm90") -> np.ndarray:
    """The mask_mod's verdict on one block (``AttentionMask.apply_mask``'s FlexAttention branch): bool (rows,
    keys), True = kept. ``wrap``: the block is visited with seqlen masking, where FA4 wraps indices modulo the
    lengths when aux tensors are given.

    Parameters
    ----------
    flex : Flex
    batch : int
    heads, q_idx : int arrays (rows,)
    kv_idx : int array (keys,)
    seqinfo : SeqlenInfo
    wrap : bool
    arch : the MUFU model the mod's helpers use

    Returns
    -------
    bool array (rows, keys)

    Examples
    --------
    >>> mask_mod_keep(Flex(mask_mod=causal_mask()), batch=0, heads=np.array([0]), q_idx=np.array([0]),
    ...               kv_idx=np.array([0, 1]), seqinfo=SeqlenInfo(2, 2), wrap=True).tolist()
    [[True, False]]
    """
    aux = flex.aux_tensors
    r, n = len(q_idx), len(kv_idx)
    qi = np.asarray(q_idx, np.int32)[:, None]
    ki = np.asarray(kv_idx, np.int32)[None, :]
    if wrap:
        qi, ki = _wrap(qi, seqinfo.seqlen_q, aux), _wrap(ki, seqinfo.seqlen_k, aux)
    args = [np.full((r, 1), batch, np.int32), np.asarray(heads, np.int32)[:, None], qi, ki, seqinfo,
            None if aux is None else list(aux)]
    if flex.aux_scalars is not None:
        args.append(flex.aux_scalars)
    token = _ARCH.set(arch)
    try:
        out = np.asarray(_call(flex.mask_mod, "mask_mod", args, {}))
    finally:
        _ARCH.reset(token)
    if out.dtype != np.bool_:
        raise TypeError(f"mask_mod must return booleans, got dtype {out.dtype}")
    try:
        return np.broadcast_to(out, (r, n))
    except ValueError:
        raise ValueError(f"mask_mod must return booleans broadcastable to (rows, keys) = {(r, n)}, got shape "
                         f"{out.shape}") from None


def block_keep(flex: Flex, *, window, cols, seqlen_masked: bool, use_mod: bool, batch: int, heads, q_idx,
               seqlen_q: int, seqlen_k: int, seqinfo: SeqlenInfo, arch="sm90") -> np.ndarray:
    """Which entries of one visited KV block the kernel keeps (``mask.py`` ``AttentionMask.apply_mask``): without
    a mask_mod or sparse tensors FA4's seqlen / causal / window mask (:func:`fa4num.attention.masking.visible`,
    the same bits on every block); else keys >= seqlen_k only when the block is visited with seqlen masking, and
    the mask_mod on the blocks that take it (the dense path's, a sparse call's mask blocks).

    Parameters
    ----------
    flex : Flex or None
    window : fa4num.attention.masking.Window
    cols : int array (keys,)
        The block's key indices.
    seqlen_masked, use_mod : bool
        The visit's flags (:func:`fa4num.attention.schedule.flex_visits`).
    batch, heads, q_idx, seqinfo, arch
        As :func:`mask_mod_keep`.
    seqlen_q, seqlen_k : int

    Returns
    -------
    bool array (rows, keys)

    Examples
    --------
    >>> from fa4num.attention.masking import resolve_window
    >>> block_keep(Flex(mask_mod=causal_mask()), window=resolve_window(False), cols=np.arange(3), seqlen_masked=True,
    ...            use_mod=True, batch=0, heads=np.array([0]), q_idx=np.array([0]), seqlen_q=2, seqlen_k=2,
    ...            seqinfo=SeqlenInfo(2, 2)).tolist()
    [[True, False, False]]
    """
    from .masking import visible
    cols = np.asarray(cols)
    if flex is None or (flex.mask_mod is None and flex.block_sparse is None):
        return visible(np.asarray(q_idx)[:, None], cols[None, :], seqlen_q=seqlen_q, seqlen_k=seqlen_k,
                       window=window)
    keep = np.broadcast_to((cols < seqlen_k)[None, :] if seqlen_masked else np.ones((1, cols.size), bool),
                           (len(q_idx), cols.size))
    if use_mod and flex.mask_mod is not None:
        keep = keep & mask_mod_keep(flex, batch=batch, heads=heads, q_idx=q_idx, kv_idx=cols, seqinfo=seqinfo,
                                    wrap=seqlen_masked, arch=arch)
    return keep


def dense_mask(mask_mod, *, batch: int, heads: int, seqlen_q: int, seqlen_k: int, aux_tensors=None,
               aux_scalars=None) -> np.ndarray:
    """The mask_mod on the whole (batch, heads, seqlen_q, seqlen_k) grid: bool, True = kept.

    Parameters
    ----------
    mask_mod : callable
    batch, heads, seqlen_q, seqlen_k : int
    aux_tensors, aux_scalars : optional

    Returns
    -------
    bool numpy.ndarray (batch, heads, seqlen_q, seqlen_k)

    Examples
    --------
    >>> dense_mask(causal_mask(), batch=1, heads=1, seqlen_q=2, seqlen_k=2)[0, 0].tolist()
    [[True, False], [True, True]]
    """
    fl = Flex(mask_mod=mask_mod, aux_tensors=None if aux_tensors is None else tuple(aux_tensors),
              aux_scalars=None if aux_scalars is None else tuple(aux_scalars))
    out = np.zeros((batch, heads, seqlen_q, seqlen_k), bool)
    for b in range(batch):
        for h in range(heads):
            out[b, h] = mask_mod_keep(fl, batch=b, heads=np.full(seqlen_q, h), q_idx=np.arange(seqlen_q),
                                      kv_idx=np.arange(seqlen_k), seqinfo=SeqlenInfo(seqlen_q, seqlen_k),
                                      wrap=False)
    return out


def block_sparse_tensors(mask_mod, *, batch: int, heads: int, seqlen_q: int, seqlen_k: int, block_size: tuple,
                         aux_tensors=None, aux_scalars=None, full_blocks: bool = True,
                         q_direction: bool = False) -> dict:
    """FA4's block-sparse tensors for ``mask_mod`` (what ``torch.nn.attention.flex_attention.create_block_mask``
    builds, block indices in ascending order): per query block, the KV blocks with some kept entry that are
    not full (mask blocks), and the full ones (every entry kept and inside both sequences); ``full_blocks=False``
    lists every nonempty block as a mask block. ``q_direction``: the backward's tensors (per KV block, its query
    blocks: ``block_sparse_tensors_bwd``).

    Parameters
    ----------
    mask_mod : callable
    batch, heads, seqlen_q, seqlen_k : int
    block_size : (int, int)
        Query rows and keys per sparse block.
    aux_tensors, aux_scalars : optional
    full_blocks : bool
    q_direction : bool

    Returns
    -------
    dict
        ``mask_block_cnt``, ``mask_block_idx``, ``full_block_cnt``, ``full_block_idx`` (int32 numpy arrays) and
        ``block_size``: the fields of FA4's ``BlockSparseTensorsTorch`` (torch tensors of these go to FA4; this
        dict, or a ``BlockSparseTensorsTorch``, to fa4num).

    Examples
    --------
    >>> t = block_sparse_tensors(causal_mask(), batch=1, heads=1, seqlen_q=256, seqlen_k=256, block_size=(128, 128))
    >>> t["mask_block_cnt"][0, 0].tolist(), t["full_block_cnt"][0, 0].tolist(), t["full_block_idx"][0, 0, 1, :1].tolist()
    ([1, 1], [0, 1], [0])
    """
    bq, bk = block_size
    dense = dense_mask(mask_mod, batch=batch, heads=heads, seqlen_q=seqlen_q, seqlen_k=seqlen_k,
                       aux_tensors=aux_tensors, aux_scalars=aux_scalars)
    nm, nn = -(-seqlen_q // bq), -(-seqlen_k // bk)
    pad = np.zeros((batch, heads, nm * bq, nn * bk), bool)
    pad[:, :, :seqlen_q, :seqlen_k] = dense
    blocks = pad.reshape(batch, heads, nm, bq, nn, bk)
    anyk = blocks.any(axis=(3, 5))
    allk = blocks.all(axis=(3, 5))
    if not full_blocks:
        allk = np.zeros_like(allk)
    partial = anyk & ~allk
    if q_direction:
        partial, allk = partial.swapaxes(2, 3), allk.swapaxes(2, 3)
    out = {}
    for name, sel in (("mask", partial), ("full", allk)):
        cnt = sel.sum(axis=-1).astype(np.int32)
        nn_ = sel.shape[-1]
        idx = np.zeros(sel.shape, np.int32)
        order = np.argsort(~sel, axis=-1, kind="stable")   # selected blocks first, ascending
        idx[...] = np.where(np.arange(nn_) < cnt[..., None], order, 0)
        out[f"{name}_block_cnt"], out[f"{name}_block_idx"] = cnt, idx
    out["block_size"] = (int(bq), int(bk))
    return out


ARRAY_FIELDS = ("mask_block_cnt", "mask_block_idx", "full_block_cnt", "full_block_idx")
UNMODELLED_FIELDS = ("cu_total_m_blocks", "cu_block_idx_offsets", "dq_write_order", "dq_write_order_full")


def check_block_sparse(tensors, *, batch: int, heads: int, seqlen_q: int, seqlen_k: int) -> BlockSparse:
    """``block_sparse_tensors`` (FA4's ``BlockSparseTensorsTorch`` or a dict with its fields, the
    :data:`ARRAY_FIELDS` as numpy arrays: :func:`fa4num.attention.plan` copies torch tensors to the host first)
    as a :class:`BlockSparse`; ValueError naming ``block_sparse_tensors`` for a missing block size, wrong shapes
    or indices out of range.

    Parameters
    ----------
    tensors : BlockSparseTensorsTorch-like or dict
    batch, heads, seqlen_q, seqlen_k : int

    Returns
    -------
    BlockSparse

    Examples
    --------
    >>> t = block_sparse_tensors(causal_mask(), batch=1, heads=1, seqlen_q=128, seqlen_k=128, block_size=(128, 128))
    >>> check_block_sparse(t, batch=1, heads=1, seqlen_q=128, seqlen_k=128).block_size
    (128, 128)
    """
    get = tensors.get if isinstance(tensors, dict) else (lambda n, d=None: getattr(tensors, n, d))
    for extra in UNMODELLED_FIELDS:
        if get(extra, None) is not None:
            raise ValueError(f"block_sparse_tensors.{extra} is not modelled by fa4num (varlen / backward block "
                             "sparsity); pass the fixed-length fields only")
    bs = get("block_size", None)
    if bs is None or len(bs) != 2 or not all(isinstance(x, (int, np.integer)) and x > 0 for x in bs):
        raise ValueError(f"block_sparse_tensors.block_size must be given as (rows, keys) > 0, got {bs!r} (FA4 "
                         "infers it from the shapes; fa4num wants it explicit)")
    bq, bk = int(bs[0]), int(bs[1])
    nm, nn = -(-seqlen_q // bq), -(-seqlen_k // bk)
    arrs = {}
    for name in ("mask_block_cnt", "mask_block_idx", "full_block_cnt", "full_block_idx"):
        a = get(name, None)
        arrs[name] = None if a is None else np.asarray(a)
    if arrs["mask_block_cnt"] is None or arrs["mask_block_idx"] is None:
        raise ValueError("block_sparse_tensors needs mask_block_cnt and mask_block_idx")
    if (arrs["full_block_cnt"] is None) != (arrs["full_block_idx"] is None):
        raise ValueError("block_sparse_tensors: full_block_cnt and full_block_idx go together")
    hb = arrs["mask_block_cnt"].shape[1] if arrs["mask_block_cnt"].ndim == 3 else -1
    if hb not in (1, heads):
        raise ValueError(f"block_sparse_tensors.mask_block_cnt must be (batch, heads or 1, m blocks) = ({batch}, "
                         f"{heads} or 1, {nm}), got {arrs['mask_block_cnt'].shape}")
    if arrs["full_block_cnt"] is None:
        arrs["full_block_cnt"] = np.zeros((batch, hb, nm), np.int32)
        arrs["full_block_idx"] = np.zeros((batch, hb, nm, nn), np.int32)
    for kind in ("mask", "full"):
        cnt, idx = arrs[f"{kind}_block_cnt"], arrs[f"{kind}_block_idx"]
        if cnt.shape != (batch, hb, nm) or idx.ndim != 4 or idx.shape[:3] != (batch, hb, nm):
            raise ValueError(f"block_sparse_tensors.{kind}_block_cnt/_idx must be (batch, heads, m blocks) = "
                             f"{(batch, hb, nm)} and (..., n blocks), got {cnt.shape} and {idx.shape}")
        if not (np.issubdtype(cnt.dtype, np.integer) and np.issubdtype(idx.dtype, np.integer)):
            raise ValueError(f"block_sparse_tensors.{kind}_block_cnt/_idx must be integer arrays")
        if cnt.size and (cnt.min() < 0 or cnt.max() > idx.shape[3]):
            raise ValueError(f"block_sparse_tensors.{kind}_block_cnt must be in [0, {idx.shape[3]}]")
        used = np.arange(idx.shape[3]) < cnt[..., None]
        if used.any() and (idx[used].min() < 0 or idx[used].max() >= nn):
            raise ValueError(f"block_sparse_tensors.{kind}_block_idx entries must be KV blocks in [0, {nn})")
    return BlockSparse(*(arrs[n].astype(np.int32) for n in ("mask_block_cnt", "mask_block_idx", "full_block_cnt",
                                                            "full_block_idx")), (bq, bk))


def check_mod(fn, name: str):
    """``fn`` if it is None or a callable; TypeError naming ``name`` otherwise.

    Parameters
    ----------
    fn : callable or None
    name : str
        The argument's name, for the message.

    Returns
    -------
    callable or None

    Examples
    --------
    >>> check_mod(None, "score_mod") is None
    True
    """
    if fn is None:
        return None
    if not callable(fn):
        raise TypeError(f"{name} must be None or a callable, got {type(fn).__name__}")
    return fn


__all__ = ["SeqlenInfo", "BlockSparse", "Flex", "tanh_approx", "ex2_approx", "fma", "scaled_add", "softcap_mod",
           "softcap_mod_bwd", "passthrough_bwd", "apply_score_mod_bwd",
           "alibi_slopes", "alibi_mod", "alibi_exp2_mod", "rel_bias_mod", "causal_mask", "sliding_window_mask", "prefix_lm_mask",
           "document_mask", "apply_score_mod", "mask_mod_keep", "block_keep", "dense_mask", "block_sparse_tensors",
           "check_block_sparse", "check_mod", "ARRAY_FIELDS", "UNMODELLED_FIELDS"]
