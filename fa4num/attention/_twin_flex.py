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
    >>> refusal(plan(q, q, q, score_mod=lambda s, b, h, q_idx, kv_idx, seqlen_info, aux_tensors: s))[:37]
    'score_mod=<lambda>: a Python callable'
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
    args = dict(contract=0, clamp=_OPEN, c_exp2=0.0, mm_a=0, mm_b=0, sab=0, sah=0, sas=0, sp_nmb=0, sp_len=0)
    ids = dict(SCORE_MOD=0, MASK_MOD=0, SPARSE=False)
    if fl is None:
        return float(problem.softcap), False, args, (None, None, None), ids
    sparse = None
    if fl.block_sparse is not None:
        if _spec(fl.mask_mod)[0] == "document_mask":
            # on the H200 the twin's LSE differed from the emulator's (and the real kernel's) in 500-640 of 4096
            # rows of both block-sparse document cases, and on 4 of the 56 flex goldens, all block-sparse
            # document calls, while the interpreter gives the kernel's bits
            # (experiments/results/h200_20261202b/twin_flex_validate.json): refused until that is understood
            raise _Refused("block_sparse_tensors with mask_mod=document_mask: the GPU twin's LSE differed from the "
                           "emulator's on the H200 for this pair; use fa4num.attention.forward")
        sparse = _sparse_table(problem)
        ids["SPARSE"] = True
        args["sp_nmb"], args["sp_len"] = sparse[0].shape[1], sparse[0].shape[2]
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
            # int32 ids where they fit, else int64 (casts that keep equality: the mask compares ids only)
            small = doc.size == 0 or (int(doc.min()) >= -2 ** 31 and int(doc.max()) < 2 ** 31)
            aux_m = np.ascontiguousarray(doc.astype(np.int32 if small else np.int64))
            st = [x // aux_m.itemsize for x in aux_m.strides]
            args["sab"], args["sah"], args["sas"] = st[0], st[1] if doc.ndim == 3 else 0, st[-1]
    return softcap, fl.score_mod is not None, args, (aux_s, aux_m, sparse), ids


def _group(problem) -> int:
    """q heads per packed row, as the twin packs them (fa4num.attention.twin.forward)."""
    rep = problem.heads // problem.heads_kv
    return rep if (problem.opts.pack_gqa and rep > 1) else 1


def _sparse_table(problem):
    """A block-sparse call's visits per (batch * head group, M block), from the emulator's own
    :func:`fa4num.attention.schedule.flex_visits` (mask blocks, then full blocks, each right to left): (visits
    int32 (programs, M blocks, longest list), each ``2 n + (mask_mod applies)``; counts int32 (programs, M
    blocks)). A list whose later block (visited without seqlen masking) reaches past seqlen_k is refused: FA4
    reads memory there that the twin does not model."""
    from .schedule import flex_visits
    group = _group(problem)
    sq, sk, tm, tn = problem.max_seqlen_q, problem.max_seqlen_k, problem.opts.tile_m, problem.opts.tile_n
    ng = problem.heads // group
    nmb = max(1, -(-sq * group // tm))
    lists = {}
    for b in range(problem.batch):
        for g in range(ng):
            for mb in range(-(-sq * group // tm)):
                (visits,) = flex_visits(problem, mb, batch=b, head=g * group, seqlen_q=sq, seqlen_k=sk, group=group)
                for n, _, masked in visits:
                    if not masked and (n + 1) * tn > sk:
                        raise _Refused(f"block_sparse_tensors: KV block {n} of query block (batch {b}, M block "
                                       f"{mb}) reaches past seqlen_k = {sk} and is not its list's first "
                                       f"(FA4 reads unspecified memory there; the twin does not model it)")
                lists[b * ng + g, mb] = [2 * n + int(use_mod) for n, use_mod, _ in visits]
    longest = max([len(x) for x in lists.values()] + [1])
    table = np.zeros((problem.batch * ng, nmb, longest), np.int32)
    counts = np.zeros((problem.batch * ng, nmb), np.int32)
    for (pg, mb), codes in lists.items():
        table[pg, mb, :len(codes)] = codes
        counts[pg, mb] = len(codes)
    return table, counts


def sparse_kv_blocks(problem, counts) -> np.ndarray:
    """``AttentionStats.kv_blocks`` of a block-sparse call, (batch, heads, seqlen_q): each row's M block's visit
    count (``counts`` from :func:`_sparse_table`).

    Parameters
    ----------
    problem : fa4num.attention.Problem
    counts : int32 (batch * head groups, M blocks)

    Returns
    -------
    numpy.ndarray of int32

    Examples
    --------
    >>> import ml_dtypes, numpy as np
    >>> from fa4num.attention import plan, flex
    >>> q = np.ones((1, 64, 1, 64), ml_dtypes.bfloat16)
    >>> t = flex.block_sparse_tensors(flex.causal_mask(), batch=1, heads=1, seqlen_q=64, seqlen_k=64,
    ...                               block_size=(128, 128))
    >>> p = plan(q, q, q, mask_mod=flex.causal_mask(), block_sparse_tensors=t)
    >>> sparse_kv_blocks(p, _sparse_table(p)[1])[0, 0, :3].tolist()
    [1, 1, 1]
    """
    group, tm = _group(problem), problem.opts.tile_m
    b, h, sq = problem.batch, problem.heads, problem.max_seqlen_q
    hh, qi = np.meshgrid(np.arange(h), np.arange(sq), indexing="ij")
    prow = qi * group + hh % group
    per = counts.reshape(b, h // group, -1)[:, hh // group, prow // tm]
    return np.ascontiguousarray(per, np.int32)


def kernel_args(problem, dev):
    """(softcap, score_mod on, keyword arguments of ``twin_fwd`` for the call's FlexAttention built-ins and block
    sparsity, their constexprs, each row's KV block count of a block-sparse call (else None)) with the aux tensors
    and the sparse visit table on ``dev``; ``refusal(problem)`` must be None.

    Parameters
    ----------
    problem : fa4num.attention.Problem
    dev : torch.device or str

    Returns
    -------
    (float, bool, dict, dict, numpy.ndarray or None)

    Examples
    --------
    >>> import ml_dtypes, numpy as np
    >>> from fa4num.attention import plan, flex
    >>> q = np.ones((1, 64, 2, 64), ml_dtypes.bfloat16)
    >>> cap, on, args, ids, kv_blocks = kernel_args(plan(q, q, q, score_mod=flex.softcap_mod(30.0)), "cpu")
    >>> cap, on, ids, kv_blocks
    (30.0, True, {'SCORE_MOD': 0, 'MASK_MOD': 0, 'SPARSE': False}, None)
    """
    import torch
    softcap, on, args, (aux_s, aux_m, sparse), ids = _launch(problem)
    dummy = torch.zeros(1, dtype=torch.float32, device=dev)
    args["AuxS"] = dummy if aux_s is None else torch.from_numpy(aux_s).to(dev)
    args["AuxM"] = torch.zeros(1, dtype=torch.int64, device=dev) if aux_m is None else torch.from_numpy(aux_m).to(dev)
    table, counts = sparse if sparse is not None else (np.zeros(1, np.int32), np.zeros(1, np.int32))
    args["SpVisits"], args["SpCount"] = (torch.from_numpy(np.ascontiguousarray(x)).to(dev) for x in (table, counts))
    kv_blocks = None if sparse is None else sparse_kv_blocks(problem, counts)
    return softcap, on, args, ids, kv_blocks
