"""Which rows of two FA4 calls get the same bits: :func:`same_bits` compares the logical rows two calls share
(the same query token of the same sequence and head, seeing the same keys with the same values) -- batch
position, decode vs prefill, chunked prefill, varlen packing, pack_gqa, num_splits, batch x heads -- and says
for each whether its output and LSE bits are equal, which of the plans' decisions differ for it
(:func:`fa4num.attention.schedule.plan_of`), and by how many ulps the outputs differ.

A query row is identified by its key-aligned position ``i + seqlen_k - seqlen_q`` (FA4 aligns every mask to the
bottom-right corner): the last row of a prefill of L tokens and the one row of a decode step at L keys are the
same logical row. :class:`CallSpec` and :func:`call_inputs` build calls over one seeded store of logical
sequences, so that the rows two calls share hold the same values.

Examples
--------
>>> a = CallSpec(batch=1, seqlen_q=1, seqlen_k=300, heads=2, head_dim=64)
>>> b = CallSpec(batch=1, seqlen_q=300, seqlen_k=300, heads=2, head_dim=64)
>>> pa, pb = (plan_call(s, store=[a, b]) for s in (a, b))
>>> r = same_bits(pa, pb)
>>> r.rows, r.rows_equal, r.predicted_equal
(2, 2, 2)
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

import ml_dtypes
import numpy as np

from . import flex as _flex
from . import masking as _masking
from .forward import forward
from .problem import NP_DTYPES, Problem, plan
from .schedule import flex_visits, plan_of

# the options fields that only set how rows are tiled: their effect on a row's bits is in its visiting order
_TILING = frozenset({"tile_m", "pack_gqa", "use_2cta_instrs", "num_splits"})


# ---------------------------------------------------------------------------------------------- calls
@dataclass(frozen=True)
class CallSpec:
    """One call over the logical sequences ``first .. first + batch - 1`` of a seeded store: each holds
    ``seqlen_k`` keys and the last ``seqlen_q`` query tokens (key-aligned: a decode step is ``seqlen_q=1``, a
    later chunk of a chunked prefill ``seqlen_q < seqlen_k``). ``varlen`` packs the batch with cu_seqlens (then
    ``seqlens_k`` / ``seqlens_q``, one per sequence, may differ); ``fa4`` holds FA4's other arguments
    (``kernel``, ``causal``, ``pack_gqa``, ``num_splits``, ``window_size``, ``softcap``, ...)."""
    batch: int = 1
    seqlen_q: int = 128
    seqlen_k: int = 128
    heads: int = 2
    heads_kv: int = 0          # 0: = heads
    head_dim: int = 128
    head_dim_v: int = 0        # 0: = head_dim
    dtype: str = "bfloat16"
    first: int = 0             # index of the first logical sequence
    varlen: bool = False
    seqlens_q: tuple = ()      # varlen: per sequence (default seqlen_q each)
    seqlens_k: tuple = ()
    fa4: dict = field(default_factory=dict)

    def __post_init__(self):
        for n in ("batch", "seqlen_q", "seqlen_k", "heads", "head_dim"):
            if not isinstance(getattr(self, n), int) or getattr(self, n) < (0 if n.startswith("seqlen") else 1):
                raise ValueError(f"{n} must be an int >= {0 if n.startswith('seqlen') else 1}, got "
                                 f"{getattr(self, n)!r}")
        if self.dtype not in NP_DTYPES:
            raise ValueError(f"dtype must be one of {tuple(NP_DTYPES)}, got {self.dtype!r}")
        for n in ("seqlens_q", "seqlens_k"):
            if getattr(self, n) and len(getattr(self, n)) != self.batch:
                raise ValueError(f"{n} must have batch = {self.batch} entries, got {list(getattr(self, n))}")
        if not self.varlen and (self.seqlens_q or self.seqlens_k):
            raise ValueError("seqlens_q/seqlens_k need varlen=True (a dense batch has one length)")
        for sq, sk in zip(self.lengths_q, self.lengths_k):
            if sq > sk:
                raise ValueError(f"seqlen_q must be <= seqlen_k (the queries are the last tokens), got {sq} > {sk}")

    @property
    def hk(self) -> int:
        return self.heads_kv or self.heads

    @property
    def dv(self) -> int:
        return self.head_dim_v or self.head_dim

    @property
    def lengths_q(self) -> tuple:
        return tuple(self.seqlens_q) or (self.seqlen_q,) * self.batch

    @property
    def lengths_k(self) -> tuple:
        return tuple(self.seqlens_k) or (self.seqlen_k,) * self.batch

    def as_dict(self) -> dict:
        d = asdict(self)
        d["seqlens_q"], d["seqlens_k"] = list(self.seqlens_q), list(self.seqlens_k)
        return d


def _logical(seed: int, seq: int, n: int, spec: CallSpec, key_len: int):
    """(q, k, v) float32 of logical sequence ``seq``: ``key_len`` positions, the first ``n`` returned."""
    rng = np.random.default_rng([seed, seq])
    q = rng.standard_normal((key_len, spec.heads, spec.head_dim), dtype=np.float32)
    k = rng.standard_normal((key_len, spec.hk, spec.head_dim), dtype=np.float32)
    v = rng.standard_normal((key_len, spec.hk, spec.dv), dtype=np.float32)
    return q[:n], k[:n], v[:n]


def call_inputs(spec: CallSpec, *, store_len: int, seed: int = 0) -> dict:
    """FA4's arguments of ``spec`` (q, k, v in its dtype, cu_seqlens for varlen, then ``spec.fa4``) over the
    seeded logical sequences of ``store_len`` positions (the longest seqlen_k of the calls compared): calls
    built with the same store and seed hold the same values for the rows they share.

    Parameters
    ----------
    spec : CallSpec
        The call: batch, lengths, heads, head dim, dtype, its first logical position and FA4's arguments.
    store_len : int
        Positions of the seeded logical sequences (at least every compared call's seqlen_k).
    seed : int
        Seeds the sequences' values.

    Returns
    -------
    dict
        ``q``, ``k``, ``v`` (numpy, the call's dtype), ``cu_seqlens_q/k`` for varlen calls, and ``spec.fa4``'s
        entries: keyword arguments for :func:`fa4num.attention.plan` / ``forward``.

    Examples
    --------
    >>> a = call_inputs(CallSpec(batch=2, seqlen_q=1, seqlen_k=5, heads=1, head_dim=8), store_len=5)
    >>> b = call_inputs(CallSpec(batch=1, seqlen_q=5, seqlen_k=5, heads=1, head_dim=8, first=1), store_len=5)
    >>> bool((a["q"][1, 0] == b["q"][0, 4]).all()), a["k"].shape
    (True, (2, 5, 1, 8))
    """
    dt = NP_DTYPES[spec.dtype]
    if max(spec.lengths_k, default=0) > store_len:
        raise ValueError(f"store_len must cover seqlen_k = {max(spec.lengths_k)}, got {store_len}")
    parts = []
    for b, (sq, sk) in enumerate(zip(spec.lengths_q, spec.lengths_k)):
        q, k, v = _logical(seed, spec.first + b, sk, spec, store_len)
        parts.append((q[sk - sq:], k, v))

    def cast(x):
        return x.astype(dt) if spec.dtype in ("bfloat16", "float16") else x.astype(ml_dtypes.bfloat16).astype(dt)

    if spec.varlen:
        args = {n: cast(np.concatenate([p[i] for p in parts])) for i, n in enumerate("qkv")}
        args["cu_seqlens_q"] = np.concatenate([[0], np.cumsum(spec.lengths_q)]).astype(np.int32)
        args["cu_seqlens_k"] = np.concatenate([[0], np.cumsum(spec.lengths_k)]).astype(np.int32)
    else:
        args = {n: cast(np.stack([p[i] for p in parts])) for i, n in enumerate("qkv")}
    return {**args, **spec.fa4}


def plan_call(spec: CallSpec, *, store, seed: int = 0, mode: str = "bitexact") -> Problem:
    """:func:`fa4num.attention.plan` of ``spec`` on :func:`call_inputs`.

    Parameters
    ----------
    spec : CallSpec
    store : sequence of CallSpec
        The specs compared; their longest seqlen_k sizes the logical sequences.
    seed : int
    mode : {"bitexact", "statistical"}

    Returns
    -------
    Problem

    Examples
    --------
    >>> s = CallSpec(batch=1, seqlen_q=4, seqlen_k=4, heads=1, head_dim=8)
    >>> plan_call(s, store=[s]).max_seqlen_k
    4
    """
    longest = max(max(s.lengths_k, default=0) for s in store)
    return plan(**call_inputs(spec, store_len=longest, seed=seed), mode=mode)


# ---------------------------------------------------------------------------------------------- comparison
def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a - b| in ulps of their (same) float dtype, as int64: the distance between their bit patterns mapped
    to a monotonic integer scale (+0 and -0 are 0 apart; NaN against anything else: the int64 maximum).

    Parameters
    ----------
    a, b : arrays of one float dtype (8, 16 or 32 bits), same shape

    Returns
    -------
    numpy.ndarray of int64

    Examples
    --------
    >>> ulp_distance(np.float32([1.0, 0.0]), np.float32([np.nextafter(np.float32(1), np.float32(2)), -0.0])).tolist()
    [1, 0]
    """
    a, b = np.asarray(a), np.asarray(b)
    width = a.dtype.itemsize * 8
    ut = {16: np.uint16, 32: np.uint32, 8: np.uint8}[width]
    sign = np.int64(1) << (width - 1)

    def ordered(x):
        u = x.view(ut).astype(np.int64)
        return np.where(u & sign, -(u & (sign - 1)), u)

    d = np.abs(ordered(a) - ordered(b))
    nan_a, nan_b = np.isnan(a.astype(np.float32)), np.isnan(b.astype(np.float32))
    return np.where(nan_a | nan_b, np.where(nan_a & nan_b, 0, np.iinfo(np.int64).max), d)


_BINS = ((0, 0), (1, 1), (2, 2), (3, 4), (5, 8), (9, 16), (17, 64), (65, None))


def ulp_histogram(d: np.ndarray) -> dict:
    """Counts of ulp distances in the bins 0, 1, 2, 3-4, 5-8, 9-16, 17-64, >64.

    Parameters
    ----------
    d : int array
        From :func:`ulp_distance`.

    Returns
    -------
    dict
        bin name -> count.

    Examples
    --------
    >>> ulp_histogram(np.array([0, 0, 1, 70]))["0"], ulp_histogram(np.array([0, 0, 1, 70]))[">64"]
    (2, 1)
    """
    out = {}
    for lo, hi in _BINS:
        name = str(lo) if lo == hi else (f"{lo}-{hi}" if hi is not None else f">{lo - 1}")
        out[name] = int(((d >= lo) & (d <= (hi if hi is not None else np.iinfo(np.int64).max))).sum())
    return out


@dataclass
class RowResult:
    """One logical row: sequence indices in A and B, key-aligned position, head, bits equal, the decisions that
    differ for it (empty: predicted equal), the largest ulp distance of its outputs."""
    seq_a: int
    seq_b: int
    position: int
    head: int
    equal: bool
    differs: dict
    max_ulps: int


@dataclass
class SameBits:
    """What :func:`same_bits` returns: ``rows`` compared, ``rows_equal`` with equal output and LSE bits,
    ``predicted_equal`` rows whose bit-setting decisions are all equal (these must be equal: the emulator
    computes a row from nothing else), the call-wide decisions that differ (``decisions``: name -> (A, B)) and
    the plans' reasons for them, ``ulps`` (histogram of the output elements' ulp distances), ``lse_ulps``,
    ``skipped`` (rows the calls do not share: other keys visible, or other values), ``explanation`` and
    per-row :class:`RowResult` (``row_results``)."""
    rows: int
    rows_equal: int
    predicted_equal: int
    decisions: dict
    reasons: dict
    ulps: dict
    lse_ulps: dict
    out_elements_differ: int
    out_elements: int
    skipped: int
    explanation: str
    row_results: list = field(repr=False)

    @property
    def all_equal(self) -> bool:
        return self.rows_equal == self.rows

    def as_dict(self, *, rows: bool = False) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "row_results"}
        d["decisions"] = {k: [_jsonable(x) for x in v] for k, v in self.decisions.items()}
        if rows:
            d["row_results"] = [asdict(r) for r in self.row_results]
        return d


def _jsonable(x):
    if isinstance(x, tuple):
        return [_jsonable(y) for y in x]
    return x


def _bits_key(problem: Problem, seq: int, head: int) -> dict:
    """What sets a row's bits besides its tile's visiting order: the kernel, dtype, scale, softcap, the
    numeric knobs of the options, the head's sink and the descales of its KV head."""
    kvh = head // problem.qhead_per_kvhead
    opts = {f.name: getattr(problem.opts, f.name) for f in fields(problem.opts) if f.name not in _TILING}
    fl = problem.flex
    mods = {"score_mod": None if fl is None else fl.score_mod, "mask_mod": None if fl is None else fl.mask_mod,
            "aux": None if fl is None or fl.aux_tensors is None else tuple(np.ascontiguousarray(a).tobytes()
                                                                          for a in fl.aux_tensors),
            "aux_scalars": None if fl is None else fl.aux_scalars}
    return {"kernel": problem.kernel.name, "dtype": problem.dtype, "softmax_scale": problem.softmax_scale,
            "softcap": problem.softcap, **opts, **mods,
            "sink": None if problem.sink is None else float(problem.sink[head]),
            "descales": tuple(float(x[seq, kvh]) for x in (problem.q_descale, problem.k_descale, problem.v_descale))}


def _row_key(plan, problem, seq, query, head) -> dict:
    t = plan.tile_of(seq, query, head)
    key = {"visits": t.visits, "combine": plan.combine}
    if problem.flex is not None and (problem.flex.mask_mod is not None or problem.flex.block_sparse is not None):
        key["visits"] = _row_visits(problem, t, seq, query, head)
    key.update(_bits_key(problem, seq, head))
    return key


def _row_visits(problem, tile, seq, query, head) -> tuple:
    """A masked call's visiting order as one row sees it: the blocks where the row keeps a key, in order, each
    with the keys it keeps (blocks it sees none of add nothing to its O and row sum: a sparse call that skips
    them and a dense call that masks them give the row the same bits when the rest agrees)."""
    s = problem.seqs[seq]
    sq, sk = s.q.shape[0], s.k.shape[0]
    fl, tn = problem.flex, problem.opts.tile_n
    info = _flex.SeqlenInfo(sq, sk, 0 if problem.cu_seqlens_q is None else int(problem.cu_seqlens_q[seq]),
                            0 if problem.cu_seqlens_k is None else int(problem.cu_seqlens_k[seq]))
    out = []
    for split in flex_visits(problem, tile.m_block, batch=s.batch, head=head, seqlen_q=sq, seqlen_k=sk,
                             group=len(tile.heads)):
        row = []
        for n, use_mod, seqlen_masked in split:
            keep = _flex.block_keep(fl, window=problem.window, cols=n * tn + np.arange(tn),
                                    seqlen_masked=seqlen_masked, use_mod=use_mod, batch=s.batch,
                                    heads=np.array([head]), q_idx=np.array([query]), seqlen_q=sq, seqlen_k=sk,
                                    seqinfo=info, arch=problem.opts.mufu_arch)[0]
            if keep.any():
                row.append((n, np.packbits(keep).tobytes()))
        out.append(tuple(row))
    return tuple(out)


def same_bits(call_a: Problem, call_b: Problem, *, rows=None, outputs=None) -> SameBits:
    """Compare the bits of the logical rows two calls share, and explain the rows that differ.

    Parameters
    ----------
    call_a, call_b : Problem
        :func:`fa4num.attention.plan` of the two calls, with their inputs (both are run through the bit-exact
        forward; :func:`plan_call` builds calls over one store of sequences).
    rows : list of (int, int), optional
        Pairs (sequence of A, sequence of B) that hold the same logical sequence (batch entry or varlen
        segment); default: sequence i with sequence i for every i both have. Within a pair, the rows at the
        same key-aligned position and head are compared where both see the same keys with the same q, k, v
        values (others are counted in ``skipped``).
    outputs : ((out_a, lse_a), (out_b, lse_b)), optional
        The two calls' outputs computed elsewhere (FA4 on a GPU, as numpy arrays in FA4's layouts), compared
        instead of the bit-exact forward's; the decisions still come from the plans.

    Returns
    -------
    SameBits

    Raises
    ------
    TypeError
        When a call is not a Problem.
    ValueError
        When the calls differ in heads or head dims, a pair names a sequence a call lacks, or no row is shared.

    Examples
    --------
    >>> a = CallSpec(batch=1, seqlen_q=1, seqlen_k=64, heads=16, head_dim=256, fa4={"kernel": "fa4-sm100"})
    >>> b = CallSpec(batch=8, seqlen_q=1, seqlen_k=64, heads=16, head_dim=256, fa4={"kernel": "fa4-sm100"})
    >>> r = same_bits(plan_call(a, store=[a, b]), plan_call(b, store=[a, b]), rows=[(0, 0)])
    >>> r.decisions["ctas"], r.predicted_equal, r.rows_equal < r.rows
    ((2, 1), 0, True)
    """
    for name, c in (("call_a", call_a), ("call_b", call_b)):
        if not isinstance(c, Problem):
            raise TypeError(f"{name} must be a Problem from fa4num.attention.plan, got {type(c).__name__}")
    for n in ("heads", "heads_kv", "head_dim", "head_dim_v"):
        if getattr(call_a, n) != getattr(call_b, n):
            raise ValueError(f"the calls must have the same {n}, got {getattr(call_a, n)} and {getattr(call_b, n)}")
    if rows is None:
        rows = [(i, i) for i in range(min(call_a.batch, call_b.batch))]
    rows = [tuple(int(x) for x in p) for p in rows]
    for sa, sb in rows:
        if not (0 <= sa < call_a.batch and 0 <= sb < call_b.batch):
            raise ValueError(f"rows: pair ({sa}, {sb}) names a sequence outside call_a's {call_a.batch} or "
                             f"call_b's {call_b.batch}")
    plan_a, plan_b = plan_of(call_a), plan_of(call_b)
    if outputs is None:
        outputs = [(r.out, r.lse) for r in (forward(problem=call_a), forward(problem=call_b))]
    (out_a, lse_a), (out_b, lse_b) = ((np.asarray(o), np.asarray(lse)) for o, lse in outputs)
    for name, c, o, lse in (("call_a", call_a, out_a, lse_a), ("call_b", call_b, out_b, lse_b)):
        want_o = (*c.q.shape[:-1], c.head_dim_v)
        want_l = (c.heads, c.q.shape[0]) if c.varlen_q else (c.q.shape[0], c.heads, c.q.shape[1])
        if o.shape != want_o or lse.shape != want_l:
            raise ValueError(f"outputs of {name} must be out {want_o} and lse {want_l}, got {o.shape} and "
                             f"{lse.shape}")
    h = call_a.heads
    results, od, ld, skipped = [], [], [], 0
    for sa, sb in rows:
        qa_seq, qb_seq = call_a.seqs[sa], call_b.seqs[sb]
        sqa, ska, sqb, skb = qa_seq.q.shape[0], qa_seq.k.shape[0], qb_seq.q.shape[0], qb_seq.k.shape[0]
        pos = np.arange(max(ska - sqa, skb - sqb), min(ska, skb))
        if pos.size == 0:
            continue
        ia, ib = pos - (ska - sqa), pos - (skb - sqb)
        m = min(ska, skb)
        keys = np.arange(max(ska, skb))
        vis_a = _masking.visible(ia[:, None], keys[None, :], seqlen_q=sqa, seqlen_k=ska, window=call_a.window)
        vis_b = _masking.visible(ib[:, None], keys[None, :], seqlen_q=sqb, seqlen_k=skb, window=call_b.window)
        kv_same = np.zeros(max(ska, skb), bool)
        kv_same[:m] = [bool((_u(qa_seq.k[j]) == _u(qb_seq.k[j])).all() and (_u(qa_seq.v[j]) == _u(qb_seq.v[j])).all())
                       for j in range(m)]
        for hh in range(h):
            q_same = (_u(qa_seq.q[ia, hh]) == _u(qb_seq.q[ib, hh])).all(axis=1)
            shared = q_same & (vis_a == vis_b).all(axis=1) & ~(vis_a & ~kv_same[None, :]).any(axis=1)
            skipped += int((~shared).sum())
            oa = out_a[qa_seq.out_index + (hh,)][ia]
            ob = out_b[qb_seq.out_index + (hh,)][ib]
            la, lb = lse_a[qa_seq.lse_index(hh)][ia], lse_b[qb_seq.lse_index(hh)][ib]
            du = ulp_distance(oa, ob)
            dl = ulp_distance(la, lb)
            for r in np.flatnonzero(shared):
                od.append(du[r])
                ld.append(dl[r])
                ka = _row_key(plan_a, call_a, sa, int(ia[r]), hh)
                kb = _row_key(plan_b, call_b, sb, int(ib[r]), hh)
                differs = {n: (ka[n], kb[n]) for n in ka if ka[n] != kb[n]}
                results.append(RowResult(sa, sb, int(pos[r]), hh, bool(du[r].max(initial=0) == 0 and dl[r] == 0),
                                         differs, int(du[r].max(initial=0))))
    if not results:
        raise ValueError("the calls share no logical row (no position both hold with the same visible keys and "
                         "values); check rows= and the inputs")
    od = np.concatenate([d.reshape(1, -1) for d in od]) if od else np.zeros((0, 0), np.int64)
    decisions = {n: (va, vb) for n, va, vb in ((n, plan_a.decisions()[n], plan_b.decisions()[n])
                                               for n in plan_a.DECISIONS) if va != vb}
    reasons = {n: (plan_a.reasons.get(n), plan_b.reasons.get(n)) for n in
               ("ctas", "num_splits", "emulated_columns", "pack_gqa", "tile") if plan_a.reasons.get(n) !=
               plan_b.reasons.get(n)}
    n_eq = sum(r.equal for r in results)
    n_pred = sum(not r.differs for r in results)
    return SameBits(rows=len(results), rows_equal=n_eq, predicted_equal=n_pred, decisions=decisions,
                    reasons=reasons, ulps=ulp_histogram(od), lse_ulps=ulp_histogram(np.asarray(ld)),
                    out_elements_differ=int((od != 0).sum()), out_elements=int(od.size), skipped=skipped,
                    explanation=_explain(results, decisions, reasons), row_results=results)


def _u(x):
    """The bits of ``x`` (numpy, any FA4 dtype) as unsigned integers, for exact comparisons (-0 != +0)."""
    x = np.asarray(x)
    return x.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[x.dtype.itemsize])


def _explain(results, decisions, reasons) -> str:
    n = len(results)
    eq = sum(r.equal for r in results)
    pred = sum(not r.differs for r in results)
    unsound = sum(r.equal is False and not r.differs for r in results)
    lines = [f"{eq} of {n} shared rows have equal bits; {pred} have all bit-setting decisions equal"]
    if unsound:
        lines.append(f"WARNING: {unsound} rows differ although every decision is equal (a rule the plan misses)")
    for name, (a, b) in decisions.items():
        why = reasons.get(name) or reasons.get("tile" if name in ("tile_m", "tile_n") else name)
        lines.append(f"{name}: {_short(a)} vs {_short(b)}" + (f" ({why[0]} / {why[1]})" if why else ""))
    per = {}
    for r in results:
        for k in r.differs:
            if k not in decisions:
                per.setdefault(k, [0, 0])
                per[k][0] += 1
                per[k][1] += not r.equal
    for k, (cnt, neq) in per.items():
        lines.append(f"{k} differs for {cnt} rows ({neq} of them with different bits)")
    return "; ".join(lines)


def _short(x):
    if isinstance(x, tuple) and len(x) > 8:
        return f"{len(x)} values {x[:4]}..."
    return repr(x)


__all__ = ["CallSpec", "call_inputs", "plan_call", "same_bits", "SameBits", "RowResult", "ulp_distance",
           "ulp_histogram"]
