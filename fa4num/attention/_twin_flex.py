"""The GPU twin's FlexAttention side on the host: which of a call's score_mod / mask_mod the twin runs (the
built-ins of :mod:`fa4num.attention.flex`, recognised by their ``builtin`` spec), and their kernel arguments.

The rules themselves are not here: the numpy rule of each built-in is in :mod:`fa4num.attention.flex` (the
emulator's), its Triton side in :mod:`fa4num.attention._twin_kernel` (``_score_mod``, ``_mask_mod``); this module
only maps a built-in's parameters onto that kernel's arguments. Without Triton (the ids are plain dicts there, but
the kernel imports Triton, this module does not) :func:`refusal` still answers.
"""
from __future__ import annotations

import numpy as np

# the kernel's SCORE_MOD / MASK_MOD ids (0: none); softcap_mod has none: it runs the kernel's soft-cap step
SCORE_MODS = {"alibi_mod": 1, "alibi_exp2_mod": 2, "rel_bias_mod": 3}
MASK_MODS = {"causal_mask": 1, "sliding_window_mask": 2, "prefix_lm_mask": 3, "document_mask": 4}
SCORE_MOD_KINDS = ("softcap_mod", *SCORE_MODS)
MASK_MOD_KINDS = tuple(MASK_MODS)
_OPEN = 1 << 30     # a window side or clamp no sequence reaches (the built-in's None)


def _spec(fn):
    spec = getattr(fn, "builtin", None)
    return spec if isinstance(spec, tuple) and len(spec) == 2 else (None, None)


def _aux(problem, index: int, what: str):
    aux = problem.flex.aux_tensors
    if aux is None or not 0 <= index < len(aux):
        raise _Refused(f"aux_tensors: {what} reads aux_tensors[{index}], which the call does not pass")
    return np.asarray(aux[index])


class _Refused(Exception):
    pass


def refusal(problem) -> str | None:
    """Why the twin cannot run this call's FlexAttention arguments (a sentence naming the argument), or None
    (also without any).

    Parameters
    ----------
    problem : fa4num.attention.Problem

    Returns
    -------
    str or None

    Examples
    --------
    >>> import ml_dtypes, numpy as np
    >>> from fa4num.attention import plan, flex
    >>> q = np.ones((1, 64, 2, 64), ml_dtypes.bfloat16)
    >>> refusal(plan(q, q, q, mask_mod=flex.causal_mask())) is None
    True
    >>> refusal(plan(q, q, q, score_mod=lambda s, b, h, q_idx, kv_idx, seqlen_info, aux_tensors: s))[:30]
    'score_mod=<lambda>: a Python ca'
    """
    try:
        _launch(problem)
    except _Refused as e:
        return str(e)
    return None


def _launch(problem):
    """(softcap, score_mod on, runtime kernel arguments without the pointers, aux arrays (score, mask), constexpr
    ids); _Refused naming the argument for what the twin does not run."""
    fl = problem.flex
    args = dict(contract=0, clamp=_OPEN, c_exp2=0.0, mm_a=0, mm_b=0, sab=0, sah=0, sas=0)
    ids = dict(SCORE_MOD=0, MASK_MOD=0)
    if fl is None:
        return float(problem.softcap), False, args, (None, None), ids
    if fl.block_sparse is not None:
        raise _Refused("block_sparse_tensors: block sparsity (partial-then-full visiting) is not in the GPU twin "
                       "yet (use fa4num.attention.forward)")
    if fl.aux_scalars is not None:
        raise _Refused("aux_scalars: the twin runs only fa4num.attention.flex's built-in mods, which take none")
    softcap, aux_s, aux_m = float(problem.softcap), None, None
    for name, fn, kinds in (("score_mod", fl.score_mod, SCORE_MOD_KINDS), ("mask_mod", fl.mask_mod, MASK_MOD_KINDS)):
        kind, _ = _spec(fn)
        if fn is not None and kind not in kinds:
            raise _Refused(f"{name}={getattr(fn, '__name__', type(fn).__name__)}: a Python callable cannot run "
                           f"inside the twin's Triton kernel; the twin runs the built-ins "
                           f"{', '.join(f'flex.{k}' for k in kinds)} (fa4num.attention.flex), else use "
                           f"fa4num.attention.forward")
    kind, par = _spec(fl.score_mod)
    if kind == "softcap_mod":
        softcap = float(par["softcap"])     # flex.softcap_mod is softcap='s rule: the kernel's soft-cap step
    elif kind is not None:
        ids["SCORE_MOD"] = SCORE_MODS[kind]
        args["contract"] = int(bool(par["contract"]))
        if kind == "alibi_mod":
            aux_s = _aux(problem, par["aux_index"], "flex.alibi_mod")
            if aux_s.ndim != 1 or aux_s.shape[0] < problem.heads or not np.issubdtype(aux_s.dtype, np.number):
                raise _Refused(f"aux_tensors[{par['aux_index']}]: ALiBi's slopes must be a numeric (heads,) = "
                               f"({problem.heads},) array, got {aux_s.dtype} {aux_s.shape}")
            aux_s = np.asarray(aux_s, np.float32)       # flex.alibi_mod reads f32(slopes)
        elif kind == "alibi_exp2_mod":
            args["c_exp2"] = float(np.float32(par["c"]))
        else:
            args["clamp"] = _OPEN if par["clamp"] is None else int(par["clamp"])
    kind, par = _spec(fl.mask_mod)
    if kind is not None:
        ids["MASK_MOD"] = MASK_MODS[kind]
        if kind == "sliding_window_mask":
            args["mm_a"] = _OPEN if par["left"] is None else int(par["left"])
            args["mm_b"] = _OPEN if par["right"] is None else int(par["right"])
        elif kind == "prefix_lm_mask":
            args["mm_a"] = int(par["prefix"])
        elif kind == "document_mask":
            doc = _aux(problem, par["aux_index"], "flex.document_mask")
            need = (problem.batch, *((problem.heads,) if doc.ndim == 3 else ()),
                    max(problem.max_seqlen_q, problem.max_seqlen_k))
            if doc.ndim not in (2, 3) or any(a < b for a, b in zip(doc.shape, need)) \
                    or not (np.issubdtype(doc.dtype, np.integer) or doc.dtype == np.bool_):
                raise _Refused(f"aux_tensors[{par['aux_index']}]: document ids must be integers of at least "
                               f"(batch, [heads,] seqlen) = {need}, got {doc.dtype} {doc.shape}")
            # int64 ids (a cast that keeps equality: the mask compares ids for equality only)
            aux_m = np.ascontiguousarray(doc.astype(np.int64))
            st = [x // 8 for x in aux_m.strides]
            args["sab"], args["sah"], args["sas"] = st[0], st[1] if doc.ndim == 3 else 0, st[-1]
    return softcap, fl.score_mod is not None, args, (aux_s, aux_m), ids


def kernel_args(problem, dev):
    """(softcap, score_mod on, keyword arguments of ``twin_fwd`` for the call's FlexAttention built-ins, their
    constexprs) with the aux tensors on ``dev``; ``refusal(problem)`` must be None.

    Parameters
    ----------
    problem : fa4num.attention.Problem
    dev : torch.device or str

    Returns
    -------
    (float, bool, dict, dict)

    Examples
    --------
    >>> import ml_dtypes, numpy as np
    >>> from fa4num.attention import plan, flex
    >>> q = np.ones((1, 64, 2, 64), ml_dtypes.bfloat16)
    >>> cap, on, args, ids = kernel_args(plan(q, q, q, score_mod=flex.softcap_mod(30.0)), "cpu")
    >>> cap, on, ids
    (30.0, True, {'SCORE_MOD': 0, 'MASK_MOD': 0})
    """
    import torch
    softcap, on, args, (aux_s, aux_m), ids = _launch(problem)
    dummy = torch.zeros(1, dtype=torch.float32, device=dev)
    args["AuxS"] = dummy if aux_s is None else torch.from_numpy(aux_s).to(dev)
    args["AuxM"] = torch.zeros(1, dtype=torch.int64, device=dev) if aux_m is None else torch.from_numpy(aux_m).to(dev)
    return softcap, on, args, ids
