"""FA4's call as a value: ``plan(q, k, v, **FA4 arguments)`` checks every argument once and returns a frozen
:class:`Problem` -- the sequences, dtypes, masks, sink, descales, softmax scale, varlen offsets, page table, the
kernel object (:data:`fa4num.attention.kernels.KERNELS`) and its resolved options. It is the one options parser
and the one set of error messages of the attention wing: ``forward``, ``backward``, ``forward_torch``, the fp64
reference, the bounds and the studies all take a Problem.

Convention: each of them takes either FA4's arguments (``forward(q, k, v, causal=True, ...)``, which plans
them) or a planned problem (``forward(problem=plan(q, k, v, causal=True, ...))``), never both; the two give the
same bits.

Bad input raises a TypeError (a wrong type: ``causal="no"``, ``softmax_scale="0.1"``) or a ValueError (a value
out of range, a shape or dtype FA4 refuses) naming the argument and what it may be; nothing is coerced or
replaced.

Examples
--------
>>> import ml_dtypes, numpy as np
>>> q = np.ones((1, 40, 2, 64), ml_dtypes.bfloat16)
>>> p = plan(q, q, q, causal=True, kernel="fa4-sm100")
>>> p.kernel.name, p.window.causal, p.opts.tile_n, round(p.softmax_scale, 4)
('fa4-sm100', True, 128, 0.125)
>>> plan(q, q, q, causal="no")
Traceback (most recent call last):
...
TypeError: causal must be True or False, got 'no'
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field, replace
from types import MappingProxyType

import ml_dtypes
import numpy as np

from fa4num.fp.dtypes import DTYPES

from . import config, kernels, releases
from . import flex as _flex
from . import masking as _masking

# FA4's input formats, from the one dtype table (fa4num.fp.dtypes): numpy/ml_dtypes dtypes and torch's names
NP_DTYPES = {n: np.dtype(d.dtype) for n, d in DTYPES.items() if d.width < 32}
_TORCH_NAMES = {f"torch.{n}": n for n in NP_DTYPES}
MODES = ("bitexact", "statistical")
DEFAULT_KERNEL = "fa4-sm90"    # FA4 on the H200, the kernel whose bits the goldens hold
NONFINITE = ("propagate", "raise")
MAX_SPLITS = 256   # _flash_attn_fwd_combine asserts num_splits <= 256


# ---------------------------------------------------------------------------------------------- scalar checks
def _is_bool(v) -> bool:
    return isinstance(v, (bool, np.bool_))


def _is_int(v) -> bool:
    return isinstance(v, (numbers.Integral, np.integer)) and not _is_bool(v)


def _is_real(v) -> bool:
    return isinstance(v, (numbers.Real, np.floating, np.integer)) and not _is_bool(v)


def check_bool(value, name: str) -> bool:
    """``value`` as a bool (Python or numpy); TypeError naming ``name`` for anything else (a string such as
    "no" is truthy, and would silently mean True)."""
    if not _is_bool(value):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def check_softmax_scale(softmax_scale):
    """``softmax_scale`` as a float, or None (FA4's default 1/sqrt(head_dim)); TypeError for a non-number (a
    string is not parsed), ValueError for NaN. FA4 accepts any other value, negative, zero or infinite, and so
    does the forward (the kernel's bits for it)."""
    if softmax_scale is None:
        return None
    if not _is_real(softmax_scale):
        raise TypeError(f"softmax_scale must be None or a real number, got {softmax_scale!r}")
    softmax_scale = float(softmax_scale)
    if math.isnan(softmax_scale):
        raise ValueError("softmax_scale must not be NaN")
    return softmax_scale


def check_softcap(softcap) -> float:
    """``softcap`` as a float: finite and >= 0 (0 or None: no soft cap); TypeError for a non-number, ValueError
    naming it otherwise. FA4's score_mod is ``softcap * tanh(s / softcap)``, which a negative cap would flip and
    an infinite one void."""
    if softcap is None:
        return 0.0
    if not _is_real(softcap):
        raise TypeError(f"softcap must be a finite float >= 0 (0 disables it), got {softcap!r}")
    softcap = float(softcap)
    if not (softcap >= 0 and math.isfinite(softcap)):
        raise ValueError(f"softcap must be a finite float >= 0 (0 disables it), got {softcap}")
    return softcap


def _check_choice(value, name: str, allowed) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{name} must be one of {tuple(allowed)}, got {value!r}")
    return value


# ---------------------------------------------------------------------------------------------- array intake
def dtype_name(x, name: str) -> str:
    """FA4's name of the dtype of a numpy array (ml_dtypes) or torch tensor; ValueError if FA4 takes no such
    input."""
    if type(x).__module__.startswith("torch"):
        dt = _TORCH_NAMES.get(str(x.dtype))
        if dt is None:
            raise ValueError(f"{name} dtype must be one of {tuple(_TORCH_NAMES)}, got {x.dtype}")
        return dt
    dt = getattr(x, "dtype", None)
    if dt is None or dt.name not in NP_DTYPES:
        raise ValueError(f"{name} dtype must be one of {tuple(NP_DTYPES)} (ml_dtypes for bf16/fp8), "
                         f"got {dt if dt is not None else type(x).__name__}")
    return dt.name


def to_numpy(x, name: str) -> tuple[np.ndarray, object]:
    """(numpy array in an ml_dtypes/numpy dtype, torch device or None)."""
    dt = dtype_name(x, name)
    if type(x).__module__.startswith("torch"):
        import torch
        t = x.detach().contiguous().cpu()
        raw = t.view(torch.int16 if NP_DTYPES[dt].itemsize == 2 else torch.uint8).numpy()
        return raw.view(NP_DTYPES[dt]), x.device
    return np.asarray(x), None


def plain(x):
    """A small float/int side input (sink, descale, cu_seqlens, page table, lse) as numpy."""
    if x is None:
        return None
    if type(x).__module__.startswith("torch"):
        x = x.detach().cpu()
        if x.is_floating_point():
            x = x.float()
        x = x.numpy()
    return np.asarray(x)


def _is_float_dtype(dt) -> bool:
    """numpy floats and ml_dtypes' (bfloat16, fp8), whose numpy kind is 'V'."""
    try:
        ml_dtypes.finfo(dt)
    except ValueError:
        return False
    return True


def check_learnable_sink(learnable_sink, *, heads: int):
    """``learnable_sink`` as float32 of shape (heads,), or None; ValueError naming it for another shape or a
    non-float dtype (FA4 takes one sink logit per query head, any float dtype, bfloat16 included)."""
    sink = plain(learnable_sink)
    if sink is None:
        return None
    if sink.shape != (heads,) or not _is_float_dtype(sink.dtype):
        raise ValueError(f"learnable_sink must be a float array of shape (heads,) = ({heads},), got shape "
                         f"{sink.shape} dtype {sink.dtype}")
    return sink.astype(np.float32)


def check_lse(lse, shape: tuple, *, name: str = "lse", what: str = "the forward's LSE") -> np.ndarray:
    """The forward's LSE (or its gradient, ``name="dlse"``) for the backward: float32 of ``shape`` exactly (a
    float16 or bfloat16 LSE has lost the bits the backward recomputes P from; it is refused, not widened)."""
    if type(lse).__module__.startswith("torch"):
        import torch
        if lse.dtype != torch.float32:
            raise ValueError(f"{name} must be float32 of shape {shape} ({what}), got dtype {lse.dtype}")
        lse = lse.detach().cpu().numpy()
    a = np.asarray(lse)
    if a.dtype != np.float32 or a.shape != shape:
        raise ValueError(f"{name} must be float32 of shape {shape} ({what}), got dtype {a.dtype} "
                         f"shape {a.shape}")
    return a


def _all_finite(a) -> bool:
    if type(a).__module__.startswith("torch"):
        import torch
        # torch has no isfinite for fp8: widen those (1 byte) first
        return bool(torch.isfinite(a if a.element_size() > 1 else a.float()).all())
    return bool(np.isfinite(a.astype(np.float32)).all())


@dataclass
class Seq:
    """One sequence: q rows (sq, h, d), keys/values (sk, hk, d/dv), where its rows go in out/lse."""
    q: object
    k: object
    v: object
    out_index: object     # index into out's leading axes
    lse_index: object     # callable head -> index into lse
    batch: int


def _check_sequences(qa, ka, va, cu_q, cu_k, page_table):
    """Shapes of FA4's dense, varlen and paged layouts: (batch, cu_q, cu_k, page table) as numpy."""
    if cu_q is None:
        if qa.ndim != 4:
            raise ValueError(f"q must be 4-D (batch, seqlen, heads, head_dim), got shape {tuple(qa.shape)} "
                             "(3-D q needs cu_seqlens_q)")
        batch = qa.shape[0]
    else:
        if qa.ndim != 3:
            raise ValueError(f"q must be 3-D (total_q, heads, head_dim) with cu_seqlens_q, got shape "
                             f"{tuple(qa.shape)}")
        cu_q = _masking.check_cu_seqlens(cu_q, "cu_seqlens_q", total=qa.shape[0])
        batch = cu_q.size - 1
    pt = None
    if page_table is not None:
        if cu_k is not None:
            raise ValueError("page_table and cu_seqlens_k cannot be combined (FA4 asserts this)")
        pt = np.asarray(page_table)
        if pt.ndim != 2 or pt.shape[0] != batch or not np.issubdtype(pt.dtype, np.integer):
            raise ValueError(f"page_table must be an integer array (batch={batch}, max_pages), got shape "
                             f"{pt.shape} dtype {pt.dtype}")
        if ka.ndim != 4 or va.ndim != 4 or ka.shape[:3] != va.shape[:3]:
            raise ValueError(f"paged k/v must be (num_pages, page_size, heads_kv, head_dim), got "
                             f"{tuple(ka.shape)}, {tuple(va.shape)}")
        if pt.size and (pt.min() < 0 or pt.max() >= ka.shape[0]):
            raise ValueError(f"page_table entries must be in [0, {ka.shape[0]}), got [{pt.min()}, {pt.max()}]")
    elif cu_k is None:
        if ka.ndim != 4 or va.ndim != 4 or ka.shape[0] != batch or va.shape[:3] != ka.shape[:3]:
            raise ValueError(f"k and v must be 4-D (batch={batch}, seqlen_k, heads_kv, head_dim) with matching "
                             f"batch, seqlen_k and heads_kv, got {tuple(ka.shape)} and {tuple(va.shape)}"
                             + (" (3-D k/v need cu_seqlens_k)" if ka.ndim == 3 else ""))
    else:
        if ka.ndim != 3 or va.ndim != 3 or va.shape[:2] != ka.shape[:2]:
            raise ValueError(f"k and v must be 3-D (total_k, heads_kv, head_dim) with cu_seqlens_k, got "
                             f"{tuple(ka.shape)} and {tuple(va.shape)}")
        cu_k = _masking.check_cu_seqlens(cu_k, "cu_seqlens_k", total=ka.shape[0])
        if cu_k.size != batch + 1:
            raise ValueError(f"cu_seqlens_k must have batch + 1 = {batch + 1} entries, got {cu_k.size}")
    d = qa.shape[-1]
    h, hk = qa.shape[-2], ka.shape[-2]
    if ka.shape[-1] != d:
        raise ValueError(f"k head_dim {ka.shape[-1]} != q head_dim {d}")
    if hk < 1 or h % hk:
        raise ValueError(f"q heads ({h}) must be a multiple of k/v heads ({hk})")
    return batch, cu_q, cu_k, pt


def sequences(qa, ka, va, *, batch, cu_seqlens_q=None, cu_seqlens_k=None, page_table=None, seqused_q=None,
              seqused_k=None) -> list:
    """The :class:`Seq` of each batch entry or varlen segment: slices of ``qa``, ``ka``, ``va`` (numpy arrays or
    torch tensors of a planned problem's shapes); paged keys gathered page by page (BlockInfo sees seqlen_k =
    pages per sequence * page_size; pages only change where keys are read from). ``seqused_q/k`` (int (batch,),
    checked) cut each sequence to its first ``seqused[b]`` rows (``SeqlenInfoQK``: they replace the lengths)."""
    cu_q, cu_k, pt = cu_seqlens_q, cu_seqlens_k, page_table
    if pt is not None:
        kseq = [ka[pt[b]].reshape(-1, *ka.shape[2:]) for b in range(batch)]
        vseq = [va[pt[b]].reshape(-1, *va.shape[2:]) for b in range(batch)]
    elif cu_k is None:
        kseq, vseq = list(ka), list(va)
    else:
        kseq = [ka[cu_k[b]:cu_k[b + 1]] for b in range(batch)]
        vseq = [va[cu_k[b]:cu_k[b + 1]] for b in range(batch)]
    if seqused_k is not None:
        kseq = [x[:int(n)] for x, n in zip(kseq, seqused_k)]
        vseq = [x[:int(n)] for x, n in zip(vseq, seqused_k)]
    seqs = []
    for b in range(batch):
        start = 0 if cu_q is None else int(cu_q[b])
        end = (qa.shape[1] if cu_q is None else int(cu_q[b + 1])) if seqused_q is None else start + int(seqused_q[b])
        sl = slice(start, end)
        if cu_q is None:
            qs, out_idx = qa[b, sl], (b, sl)
            lse_idx = (lambda hh, b=b, sl=sl: (b, hh, sl))
        else:
            qs, out_idx = qa[sl], (sl,)
            lse_idx = (lambda hh, sl=sl: (hh, sl))
        seqs.append(Seq(qs, kseq[b], vseq[b], out_idx, lse_idx, b))
    return seqs


def _check_seqused(x, name: str, *, batch: int, lengths: list):
    """``seqused_q/k`` as int64 (batch,), each entry in [0, the sequence's length]; None stays None."""
    a = plain(x)
    if a is None:
        return None
    if a.shape != (batch,) or not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"{name} must be an integer array of shape (batch,) = ({batch},), got shape {a.shape} "
                         f"dtype {a.dtype}")
    a = a.astype(np.int64)
    bad = [b for b in range(batch) if not 0 <= a[b] <= lengths[b]]
    if bad:
        b = bad[0]
        raise ValueError(f"{name}[{b}] must be in [0, {lengths[b]}] (the length of sequence {b}), got {int(a[b])}")
    return a


@dataclass(frozen=True)
class Layout:
    """FA4's dense, varlen or paged layout of q, k, v, checked (:func:`layout`)."""
    seqs: list
    batch: int
    cu_seqlens_q: object     # int64 (batch + 1,) or None
    cu_seqlens_k: object
    page_table: object
    longest_q: int           # the longest sequences
    longest_k: int
    max_seqlen_q: int        # given, or FA4's default: the longest; the total tokens with cu_seqlens
    max_seqlen_k: int
    seqused_q: object = None     # int64 (batch,) or None
    seqused_k: object = None


def layout(q, k, v, *, cu_seqlens_q=None, cu_seqlens_k=None, page_table=None, max_seqlen_q=None,
           max_seqlen_k=None, seqused_q=None, seqused_k=None) -> Layout:
    """Check the shapes of FA4's layouts and cut q, k, v into sequences (:func:`sequences`); ``max_seqlen_q/k``
    must be ints covering the longest sequence (before ``seqused_q/k``: FA4 sizes the grid from the tensors).
    The kernel-independent part of :func:`plan` (the fp64 references use it alone).

    Parameters
    ----------
    q, k, v : arrays or torch tensors
        Dense (batch, seqlen, heads, head_dim), varlen (total, heads, head_dim) or paged k/v (num_pages,
        page_size, heads_kv, head_dim).
    cu_seqlens_q, cu_seqlens_k, page_table, max_seqlen_q, max_seqlen_k
        FA4's varlen offsets, page table and declared maximum lengths.
    seqused_q, seqused_k : int arrays (batch,), optional
        The rows and keys of each sequence that are used (FA4's ``seqused_q/k``); the rest is ignored.

    Returns
    -------
    Layout

    Examples
    --------
    >>> q = np.ones((10, 2, 16), np.float16)
    >>> lay = layout(q, q, q, cu_seqlens_q=np.array([0, 3, 10]), cu_seqlens_k=np.array([0, 5, 10]))
    >>> lay.batch, lay.longest_q, lay.longest_k, [s.q.shape[0] for s in lay.seqs]
    (2, 7, 5, [3, 7])
    """
    batch, cu_q, cu_k, pt = _check_sequences(q, k, v, plain(cu_seqlens_q), plain(cu_seqlens_k), plain(page_table))
    seqs = sequences(q, k, v, batch=batch, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, page_table=pt)
    longest_q = max((s.q.shape[0] for s in seqs), default=0)
    longest_k = max((s.k.shape[0] for s in seqs), default=0)
    used_q = _check_seqused(seqused_q, "seqused_q", batch=batch, lengths=[s.q.shape[0] for s in seqs])
    used_k = _check_seqused(seqused_k, "seqused_k", batch=batch, lengths=[s.k.shape[0] for s in seqs])
    if used_q is not None or used_k is not None:
        seqs = sequences(q, k, v, batch=batch, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, page_table=pt,
                         seqused_q=used_q, seqused_k=used_k)
    for name, given, need in (("max_seqlen_q", max_seqlen_q, longest_q), ("max_seqlen_k", max_seqlen_k, longest_k)):
        if given is not None and not _is_int(given):
            raise TypeError(f"{name} must be None or an int, got {given!r}")
        if given is not None and int(given) < need:
            raise ValueError(f"{name} must be >= the longest sequence ({need}), got {given}")
    # FA4's defaults (interface.py b36 _flash_attn_fwd): the tensors' lengths -- for varlen the total tokens
    # (total_q; seqlen_k = v.shape[-3]), for paged KV the page-table row
    default_q = longest_q if cu_q is None else int(cu_q[-1])
    default_k = longest_k if cu_k is None else int(cu_k[-1])
    return Layout(seqs, batch, cu_q, cu_k, pt, longest_q, longest_k,
                  default_q if max_seqlen_q is None else int(max_seqlen_q),
                  default_k if max_seqlen_k is None else int(max_seqlen_k), used_q, used_k)


def _descale(x, name, batch, hk):
    a = plain(x)
    if a is None:
        return np.ones((batch, hk), np.float32)
    if a.shape != (batch, hk):
        raise ValueError(f"{name} must have shape (batch, heads_kv) = {(batch, hk)}, got {a.shape}")
    return a.astype(np.float32)


# ---------------------------------------------------------------------------------------------- the problem
@dataclass(frozen=True, eq=False)
class Problem:
    """One FA4 attention call, checked and resolved (:func:`plan`).

    The inputs (``q``, ``k``, ``v`` as given, numpy or torch) and their sequences; the shapes; the masks
    (``window``: causal / local, bottom-right aligned); ``softcap``, the learnable ``sink`` (float32 (heads,)),
    the fp8 descales (float32 (batch, heads_kv), ones without); ``softmax_scale`` (the value FA4 is called with;
    the kernel uses :attr:`softmax_scale_f32`); varlen offsets and the page table; the kernel object and its
    resolved options (``opts``: FA4's tuning table for this problem with the caller's overrides, coefficients
    resolved to fp32); ``mode`` ("bitexact" or "statistical", which picks the GEMM and MUFU models).
    """
    kernel: kernels.Kernel
    mode: str
    q: object = field(repr=False)
    k: object = field(repr=False)
    v: object = field(repr=False)
    dtype: str               # FA4's input dtype name ("bfloat16", ...)
    batch: int
    heads: int
    heads_kv: int
    head_dim: int
    head_dim_v: int
    max_seqlen_q: int        # the kernel's configuration length (given, or FA4's default: the longest sequence,
                             # the total tokens with cu_seqlens_q; the same for k)
    max_seqlen_k: int
    window: _masking.Window
    softcap: float
    sink: object = field(repr=False)        # float32 (heads,) or None
    sink_dtype: object = field(repr=False)  # the caller's sink dtype (the backward's dsink is returned in it)
    q_descale: np.ndarray = field(repr=False)
    k_descale: np.ndarray = field(repr=False)
    v_descale: np.ndarray = field(repr=False)
    softmax_scale: float
    cu_seqlens_q: object = field(repr=False)    # int64 (batch + 1,) or None
    cu_seqlens_k: object = field(repr=False)
    page_table: object = field(repr=False)      # int (batch, pages per sequence) or None
    page_size: object                           # int with a page table, else None
    nonfinite: str
    descaled: bool           # fp8 descales were given (else q/k/v_descale are ones)
    pack_gqa_given: object   # the caller's pack_gqa (None: FA4's default, resolved into opts.pack_gqa)
    num_splits_given: int    # the caller's num_splits (< 1: FA4's heuristic)
    overrides: MappingProxyType = field(repr=False)   # the kernel knobs the caller set (checked)
    opts: object = None      # the kernel's resolved options (config.Sm90Options / Sm100Options)
    num_splits: int = 1      # resolved (split-KV on SM100)
    seqs: list = field(default=None, repr=False, compare=False)   # Seq per batch entry / varlen segment
    seqused_q: object = field(default=None, repr=False)   # int64 (batch,) or None: rows used per sequence
    seqused_k: object = field(default=None, repr=False)   # keys used per sequence
    seqlen_k_per_split: object = None    # split-KV: keys per split fixed (a multiple of tile_n), or None
    flex: object = field(default=None, repr=False)   # fa4num.attention.flex.Flex (score_mod, mask_mod, aux,
                                                     # block sparsity), None without any
    release: object = field(default=None, repr=False)   # the FA4 release profile (fa4num.attention.releases)

    @property
    def mufu(self):
        """The MUFU model the problem's steps run (``fa4num.hw.mufu_model(opts.mufu_arch)``): measured tables
        (bit-exact), or libm within the PTX bounds in the statistical mode."""
        from fa4num.hw import mufu_model
        return mufu_model(self.opts.mufu_arch)

    @property
    def fp8(self) -> bool:
        return self.dtype.startswith("float8")

    @property
    def varlen_q(self) -> bool:
        return self.cu_seqlens_q is not None

    @property
    def varlen(self) -> bool:
        return self.cu_seqlens_q is not None or self.cu_seqlens_k is not None

    @property
    def qhead_per_kvhead(self) -> int:
        return self.heads // self.heads_kv

    @property
    def softmax_scale_f32(self) -> np.float32:
        """The scale as the kernel's Float32 argument."""
        return np.float32(self.softmax_scale)

    def flex_args(self) -> list:
        """The FlexAttention arguments this call sets (``score_mod``, ``mask_mod``, ``block_sparse_tensors``,
        ...), empty without any."""
        fl = self.flex
        if fl is None:
            return []
        return [n for n, x in (("score_mod", fl.score_mod), ("mask_mod", fl.mask_mod),
                               ("block_sparse_tensors", fl.block_sparse), ("aux_tensors", fl.aux_tensors),
                               ("aux_scalars", fl.aux_scalars), ("score_mod_bwd", fl.score_mod_bwd),
                               ("block_sparse_tensors_bwd", fl.block_sparse_bwd)) if x is not None]

    def refuse_flex(self, who: str) -> None:
        """ValueError naming the FlexAttention arguments that ``who`` does not model (a consumer that would
        otherwise compute the call without them); nothing without any."""
        names = self.flex_args()
        if names:
            raise ValueError(f"{'/'.join(names)}: {who} does not model FlexAttention's score_mod / mask_mod / "
                             "block sparsity; use fa4num.attention.forward (and backward)")

    def sequences(self, q, k, v) -> list:
        """:func:`sequences` of other arrays of this problem's shapes (e.g. the numpy copy of torch inputs)."""
        return sequences(q, k, v, batch=self.batch, cu_seqlens_q=self.cu_seqlens_q,
                         cu_seqlens_k=self.cu_seqlens_k, page_table=self.page_table, seqused_q=self.seqused_q,
                         seqused_k=self.seqused_k)


def plan(q, k, v, *, softmax_scale=None, causal=False, kernel=DEFAULT_KERNEL, softcap=0.0, window_size=(None, None),
         learnable_sink=None, pack_gqa=None, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None,
         max_seqlen_k=None, num_splits=1, q_descale=None, k_descale=None, v_descale=None, page_table=None,
         seqused_q=None, seqused_k=None, seqlen_k_per_split=None, nonfinite="propagate", mode="bitexact",
         score_mod=None, mask_mod=None, aux_tensors=None, aux_scalars=None, block_sparse_tensors=None,
         score_mod_bwd=None, block_sparse_tensors_bwd=None, fa4_release=None, **options) -> Problem:
    """Check FA4's arguments and resolve the kernel's options: the :class:`Problem` every consumer takes.

    Parameters
    ----------
    q, k, v : arrays or torch tensors
        FA4's layouts (see :func:`fa4num.attention.forward`); only shapes and dtypes are read (and the values for
        ``nonfinite="raise"``).
    softmax_scale, causal, kernel, softcap, window_size, learnable_sink, pack_gqa, cu_seqlens_q, cu_seqlens_k, \
max_seqlen_q, max_seqlen_k, num_splits, q_descale, k_descale, v_descale, page_table, nonfinite
        FA4's arguments, as :func:`fa4num.attention.forward` documents them. ``kernel``: a name of
        :data:`fa4num.attention.kernels.KERNELS`.
    seqused_q, seqused_k, seqlen_k_per_split
        FA4's ``seqused_q/k`` (int (batch,): the rows / keys of each sequence used) and ``seqlen_k_per_split``
        (split-KV kernels: the keys of every split fixed, a multiple of tile_n).
    score_mod, mask_mod, aux_tensors, aux_scalars, block_sparse_tensors, score_mod_bwd, block_sparse_tensors_bwd
        FlexAttention's arguments (:mod:`fa4num.attention.flex`, docs/flex.md): Python callables with FA4's
        calling convention, their side inputs, FA4's block-sparse tensors, the score_mod's derivative and the
        query-direction block-sparse tensors for the backward.
    fa4_release : str, optional
        The flash-attn-4 release whose numerics to emulate: a profile of
        :func:`fa4num.attention.releases.known` or a release it covers (default "4.0.0b36"); ValueError for
        what that release computed differently and fa4num does not emulate.
    mode : {"bitexact", "statistical"}
        "statistical": fp32 BLAS GEMMs and numpy's libm for the MUFU functions (fast, not bit-exact); the
        defaults of the ``gemm`` and ``mufu_arch`` knobs.
    **options
        The kernel's knobs (fields of :class:`fa4num.attention.config.Sm90Options` / ``Sm100Options``), each
        checked (:func:`fa4num.attention.config.apply_overrides`).

    Returns
    -------
    Problem

    Raises
    ------
    TypeError
        An argument of the wrong type (``causal="no"``, ``softmax_scale="0.1"``), naming it.
    ValueError
        A value FA4 refuses or cannot mean, naming the argument and the allowed values.

    Examples
    --------
    >>> import ml_dtypes, numpy as np
    >>> q = np.ones((1, 64, 6, 128), ml_dtypes.bfloat16)
    >>> k = np.ones((1, 64, 1, 128), ml_dtypes.bfloat16)
    >>> p = plan(q, k, k, kernel="fa4-sm100", pack_gqa=False)
    >>> p.opts.pack_gqa, p.opts.ex2_emu_freq, p.qhead_per_kvhead
    (False, 16, 6)
    """
    kern = kernels.get(kernel)
    release = releases.get(None if fa4_release is None else releases.resolve_release(fa4_release))
    mode = _check_choice(mode, "mode", MODES)
    nonfinite = _check_choice(nonfinite, "nonfinite", NONFINITE)
    causal = check_bool(causal, "causal")
    dt_q, dt_k, dt_v = (dtype_name(x, n) for x, n in ((q, "q"), (k, "k"), (v, "v")))
    if len({dt_q, dt_k, dt_v}) != 1:
        raise ValueError(f"q, k, v must share one dtype, got {dt_q}, {dt_k}, {dt_v}")
    kern.check_dtype(dt_q)
    dt = dt_q
    softmax_scale = check_softmax_scale(softmax_scale)
    softcap = check_softcap(softcap)
    window = _masking.resolve_window(causal, window_size)
    lay = layout(q, k, v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, page_table=page_table,
                 max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, seqused_q=seqused_q, seqused_k=seqused_k)
    seqs, batch, cu_q, cu_k, pt = lay.seqs, lay.batch, lay.cu_seqlens_q, lay.cu_seqlens_k, lay.page_table
    longest_q, longest_k, msq, msk = lay.longest_q, lay.longest_k, lay.max_seqlen_q, lay.max_seqlen_k
    h, d = q.shape[-2:]
    hk, dv = v.shape[-2], v.shape[-1]
    kern.check_head_dims(d, dv, dt)
    if nonfinite == "raise":
        for name, a in (("q", q), ("k", k), ("v", v)):
            if not _all_finite(a):
                raise ValueError(f"{name} contains NaN or inf (nonfinite='raise'; the default 'propagate' gives "
                                 "the kernel's NaN/inf bits)")
    sink = check_learnable_sink(learnable_sink, heads=h)
    if not dt.startswith("float8") and any(x is not None for x in (q_descale, k_descale, v_descale)):
        raise ValueError("q_descale/k_descale/v_descale are only supported for fp8 inputs (FA4 asserts this)")
    qd, kd, vd = (_descale(x, n, batch, hk) for x, n in ((q_descale, "q_descale"), (k_descale, "k_descale"),
                                                         (v_descale, "v_descale")))
    if not _is_int(num_splits):
        raise TypeError(f"num_splits must be an int, got {num_splits!r}")
    num_splits = int(num_splits)
    if not kern.split_kv and num_splits != 1:
        raise ValueError(f"num_splits must be 1 for {kern.name} (FA4: 'SplitKV not supported on SM 9.0'), "
                         f"got {num_splits}")
    if num_splits > MAX_SPLITS:
        raise ValueError(f"num_splits must be <= {MAX_SPLITS} (the combine kernel's limit), got {num_splits}")
    if seqlen_k_per_split is not None:
        if not kern.split_kv:
            raise ValueError(f"seqlen_k_per_split applies to split-KV kernels only, not {kern.name!r}")
        if not _is_int(seqlen_k_per_split) or seqlen_k_per_split < 1:
            raise ValueError(f"seqlen_k_per_split must be None or an int >= 1, got {seqlen_k_per_split!r}")
        seqlen_k_per_split = int(seqlen_k_per_split)
    # the longest sequences themselves (max_seqlen_q/k may be declared larger): a window side wider than these
    # masks nothing and is refused
    _masking.check_window_range(window, seqlen_q=longest_q, seqlen_k=longest_k)
    if pack_gqa is not None and not _is_bool(pack_gqa):
        raise TypeError(f"pack_gqa must be None, True or False, got {pack_gqa!r}")
    flex = _check_flex(score_mod, mask_mod, aux_tensors, aux_scalars, block_sparse_tensors, score_mod_bwd,
                       block_sparse_tensors_bwd, softcap=softcap,
                       window=window, batch=batch, heads=h, seqlen_q=longest_q, seqlen_k=longest_k,
                       varlen=cu_q is not None or cu_k is not None or lay.seqused_q is not None
                       or lay.seqused_k is not None, sink=sink, num_splits=num_splits)
    if flex is not None and flex.block_sparse is not None and flex.block_sparse.per_head:
        # interface.py _flash_attn_fwd: pack_gqa needs block-sparse tensors broadcast over heads, else it is off
        pack_gqa = False
    overrides = dict(options)
    if mode == "statistical":
        # GEMMs through fp32 BLAS, MUFU through numpy's libm: vectorised and fast, not bit-exact
        overrides = {"gemm": "blas", "mufu_arch": "libm", **overrides}
    for name, value in overrides.items():
        config.check_option(name, value)
    problem = Problem(
        kernel=kern, mode=mode, q=q, k=k, v=v, dtype=dt, batch=batch, heads=h, heads_kv=hk, head_dim=d,
        head_dim_v=dv, max_seqlen_q=msq, max_seqlen_k=msk, window=window, softcap=softcap, sink=sink,
        sink_dtype=None if learnable_sink is None else plain(learnable_sink).dtype,
        q_descale=qd, k_descale=kd, v_descale=vd,
        softmax_scale=1.0 / math.sqrt(d) if softmax_scale is None else softmax_scale,
        cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, page_table=pt, page_size=k.shape[1] if pt is not None else None,
        nonfinite=nonfinite, descaled=any(x is not None for x in (q_descale, k_descale, v_descale)),
        pack_gqa_given=None if pack_gqa is None else bool(pack_gqa),
        num_splits_given=num_splits if num_splits >= 1 else 0, overrides=MappingProxyType(overrides), seqs=seqs,
        seqused_q=lay.seqused_q, seqused_k=lay.seqused_k, seqlen_k_per_split=seqlen_k_per_split, flex=flex,
        release=release)
    releases.check_problem(release, problem_fields={
        "descales_given": sum(x is not None for x in (q_descale, k_descale, v_descale)),
        "empty_kv": any(s.k.shape[0] == 0 for s in seqs),
        "sm100_hd256": kern.arch == "sm100" and d == dv == 256,
        "heuristic_splits": kern.split_kv and num_splits < 1 and (h > hk or window.local)})
    kern = kern.for_release(problem)
    problem = replace(problem, kernel=kern)
    opts, splits = kern.options(problem)
    if flex is not None and flex.block_sparse is not None:
        _check_sparse_tiles(flex.block_sparse, opts, kern)
    return replace(problem, opts=opts, num_splits=splits)


def _host_sparse(tensors) -> dict:
    """FA4's block-sparse tensors (``BlockSparseTensorsTorch`` or a dict of its fields) with the arrays on the
    host (numpy)."""
    get = tensors.get if isinstance(tensors, dict) else (lambda n, d=None: getattr(tensors, n, d))
    host = {n: get(n, None) for n in ("block_size", *_flex.UNMODELLED_FIELDS)}
    host.update({n: plain(get(n, None)) for n in _flex.ARRAY_FIELDS})
    return host


def _check_flex(score_mod, mask_mod, aux_tensors, aux_scalars, block_sparse_tensors, score_mod_bwd,
                block_sparse_tensors_bwd, *, softcap, window, batch, heads, seqlen_q, seqlen_k, varlen, sink,
                num_splits):
    """The FlexAttention arguments as a :class:`fa4num.attention.flex.Flex` (None without any); ValueError
    naming the argument for what FA4 refuses or fa4num does not model."""
    if all(x is None for x in (score_mod, mask_mod, aux_tensors, aux_scalars, block_sparse_tensors, score_mod_bwd,
                               block_sparse_tensors_bwd)):
        return None
    score_mod = _flex.check_mod(score_mod, "score_mod")
    score_mod_bwd = _flex.check_mod(score_mod_bwd, "score_mod_bwd")
    if score_mod_bwd is not None and score_mod is None:
        raise ValueError("score_mod_bwd needs a score_mod (it is the score_mod's derivative)")
    mask_mod = _flex.check_mod(mask_mod, "mask_mod")
    if score_mod is not None and softcap:
        raise ValueError("softcap and score_mod cannot be used together (FA4 asserts this); express the cap in "
                         "the score_mod (fa4num.attention.flex.softcap_mod)")
    if mask_mod is not None and window.masked:
        # interface.py _resolve_causal_local_window drops causal and window_size when a mask_mod is given
        raise ValueError("mask_mod cannot be combined with causal or window_size (FA4 silently drops them when a "
                         "mask_mod is given); express them in the mask_mod (flex.causal_mask, "
                         "flex.sliding_window_mask)")
    if aux_tensors is not None:
        if not isinstance(aux_tensors, (list, tuple)):
            raise TypeError(f"aux_tensors must be a list of arrays, got {type(aux_tensors).__name__}")
        aux_tensors = tuple(np.asarray(plain(a)) for a in aux_tensors)
    if aux_scalars is not None:
        if not isinstance(aux_scalars, (list, tuple)) or not all(_is_real(x) for x in aux_scalars):
            raise TypeError(f"aux_scalars must be a tuple of numbers, got {aux_scalars!r}")
        aux_scalars = tuple(aux_scalars) or None   # FA4: an empty tuple is None
    sparse = sparse_bwd = None
    for name, given in (("block_sparse_tensors", block_sparse_tensors),
                        ("block_sparse_tensors_bwd", block_sparse_tensors_bwd)):
        if given is None:
            continue
        for bad, why in ((window.masked, "causal or window_size"), (varlen, "varlen (cu_seqlens / seqused)"),
                         (sink is not None, "learnable_sink"), (num_splits != 1, "num_splits != 1")):
            if bad:
                raise ValueError(f"{name} with {why} is not modelled by fa4num")
    if block_sparse_tensors is not None:
        sparse = _flex.check_block_sparse(_host_sparse(block_sparse_tensors), batch=batch, heads=heads,
                                          seqlen_q=seqlen_q, seqlen_k=seqlen_k)
    if block_sparse_tensors_bwd is not None:
        # the query direction: per KV block its query blocks, so the roles of the lengths swap
        host = _host_sparse(block_sparse_tensors_bwd)
        bs = host["block_size"]
        host["block_size"] = None if bs is None or len(bs) != 2 else (bs[1], bs[0])
        try:
            t = _flex.check_block_sparse(host, batch=batch, heads=heads, seqlen_q=seqlen_k, seqlen_k=seqlen_q)
        except ValueError as e:
            raise ValueError(str(e).replace("block_sparse_tensors", "block_sparse_tensors_bwd")) from None
        sparse_bwd = _flex.BlockSparse(t.mask_block_cnt, t.mask_block_idx, t.full_block_cnt, t.full_block_idx,
                                       (t.block_size[1], t.block_size[0]))
    return _flex.Flex(score_mod, mask_mod, aux_tensors, aux_scalars, sparse, score_mod_bwd, sparse_bwd)


def _check_sparse_tiles(sparse, opts, kern):
    """FA4's block-size rules (``block_sparsity.normalize_block_sparse_config``): KV blocks of tile_n keys
    (fa4num models no KV sub-tiles), query blocks a multiple of the rows that share a KV range (``opts.tile_m``:
    q_stage * 128 * CTAs on SM100)."""
    bq, bk = sparse.block_size
    rows = opts.tile_m
    if bk != opts.tile_n:
        raise ValueError(f"block_sparse_tensors.block_size[1] must equal the kernel's tile_n = {opts.tile_n} "
                         f"({kern.name}; KV sub-tiles are not modelled), got {bk}")
    if bq % rows:
        raise ValueError(f"block_sparse_tensors.block_size[0] must be a multiple of the M block's rows = {rows} "
                         f"({kern.name}), got {bq}")


def given_or_plan(problem, q, k, v, fa4_args: dict, *, who: str) -> Problem:
    """The convention of every consumer: ``problem`` if given (then no q, k, v or FA4 arguments), else
    ``plan(q, k, v, **fa4_args)``; TypeError naming ``who`` when both or neither are passed."""
    if problem is None:
        if q is None or k is None or v is None:
            raise TypeError(f"{who} takes q, k, v (and FA4's arguments) or problem=plan(q, k, v, ...)")
        return plan(q, k, v, **fa4_args)
    if not isinstance(problem, Problem):
        raise TypeError(f"problem must be a Problem from fa4num.attention.plan, got {type(problem).__name__}")
    if q is not None or k is not None or v is not None or fa4_args:
        extra = sorted(fa4_args) + [n for n, x in (("q", q), ("k", k), ("v", v)) if x is not None]
        raise TypeError(f"{who}: pass either q, k, v and FA4's arguments or problem=, not both (got {extra} "
                        f"with problem=)")
    return problem


__all__ = ["Problem", "plan", "Layout", "layout", "DEFAULT_KERNEL", "MODES", "NONFINITE", "MAX_SPLITS"]
