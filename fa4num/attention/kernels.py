"""FA4's kernels as objects: ``KERNELS`` maps a kernel name to what the emulator, the bounds and the CLIs need
to know about it -- the dtypes it takes, the head dims it refuses, its tiles and tuning table
(``defaults(problem)``), its softmax step (fa4num.softmax), its tensor-core accumulator and whether it rescales
lazily. Code asks the kernel object; nothing compares kernel names (a third kernel is one more entry here).

Examples
--------
>>> sorted(KERNELS)
['fa4-sm100', 'fa4-sm90']
>>> KERNELS["fa4-sm100"].lazy_rescale, KERNELS["fa4-sm90"].accumulator
(True, 'sm90')
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, fields, replace
from types import MappingProxyType
from typing import ClassVar

import numpy as np

from fa4num.softmax import ballot as _ballot
from fa4num.softmax import sm90 as _sm90
from fa4num.softmax import sm100 as _sm100

from . import config

# the options fields FA4's column rule reads (softmax.py apply_exp2_convert; softmax.sm100.emulated_columns)
_COLUMN_KNOBS = ("ex2_emu_freq", "ex2_emu_res", "ex2_emu_start_frg")


def step_knob_names(step, options) -> tuple:
    """The fields of the options dataclass ``options`` that the softmax ``step`` takes as keyword arguments of the
    same name, in the options' field order. The kernel object passes each of them to its step by name, so a new
    softmax knob is a field of the options and a parameter of the step, and no call in between changes.

    Parameters
    ----------
    step : callable
        A softmax step (``fa4num.softmax.sm100.softmax_step``, ``fa4num.softmax.sm90.online_softmax``).
    options : type
        The kernel's options dataclass (``config.Sm90Options``, ``config.Sm100Options``).

    Returns
    -------
    tuple of str

    Examples
    --------
    >>> step_knob_names(_sm100.softmax_step, config.Sm100Options)
    ('rescale_threshold', 'max_offset', 'poly_degree', 'coeffs', 'fused_bias')
    """
    params = inspect.signature(step).parameters
    return _in_field_order(options, params)


def _in_field_order(options, names) -> tuple:
    return tuple(f.name for f in fields(options) if f.name in names)


@dataclass(frozen=True)
class BwdTile:
    """Tile configuration of the backward that the numerics depend on (``interface.py``)."""
    tile_m: int            # query rows per m block (k extent of one dK/dV chain segment)
    tile_n: int            # keys per KV block, or per 2-CTA cluster on SM100 (k extent of the dQ GEMM)
    hdim_multiple_of: int  # head-dim rounding of the accumulators: 64 with SM90's dKV_swapAB, else 32
    dQ_single_wg: bool     # SM90 hd 96: one warp group computes dQ (no numeric effect, recorded for reference)
    cta_group: int = 1     # SM100: 2 with 2-CTA instructions (the cluster's two KV blocks act as one)


def sm90_bwd_tile(head_dim: int, *, causal: bool = False, local: bool = False,
                  sparse_block_q: int | None = None) -> BwdTile:
    """The SM90 backward tile of FA4 b36 for ``head_dim`` (== head_dim_v).

    Parameters
    ----------
    head_dim : int
        head_dim (== head_dim_v), 8..256.
    causal, local : bool
        Causal or local (sliding-window) masking: for head_dim 97..128 FA4 then uses tile_m 64 instead of 80.
    sparse_block_q : int, optional
        The query rows of a block-sparse backward's sparse blocks: tile_m 64 where 80 does not divide them,
        tile 64 x 64 for head_dim 256.

    Returns
    -------
    BwdTile
        tile_m, tile_n, hdim_multiple_of (64 where FA4 uses dKV_swapAB: head_dim > 128), dQ_single_wg, cta_group 1.

    Raises
    ------
    ValueError
        When head_dim is outside [8, 256].

    Examples
    --------
    >>> sm90_bwd_tile(128)
    BwdTile(tile_m=80, tile_n=128, hdim_multiple_of=32, dQ_single_wg=False, cta_group=1)
    >>> sm90_bwd_tile(128, causal=True).tile_m
    64
    """
    if not 8 <= head_dim <= 256:
        raise ValueError(f"head_dim must be in [8, 256] for fa4-sm90, got {head_dim}")
    if head_dim <= 64:
        return BwdTile(128, 128, 32, False)
    if head_dim <= 96:
        return BwdTile(64, 128, 32, True)
    if head_dim <= 128:
        tm = 64 if (causal or local) else 80
        return BwdTile(64 if sparse_block_q is not None and sparse_block_q % tm else tm, 128, 32, False)
    if head_dim <= 192:
        return BwdTile(64, 96, 64, False)      # dKV_swapAB
    if sparse_block_q is not None:
        return BwdTile(64, 64, 32, False)      # hd256 block-sparse: no dKV_swapAB
    return BwdTile(64, 48, 64, False)          # hd256: dKV_swapAB, tile_n 48


def sm100_bwd_tile(head_dim: int, *, use_2cta_instrs: bool | None = None) -> BwdTile:
    """The SM100 backward tile of FA4 b36 (``interface.py`` ``_flash_attn_bwd``, arch 10.x): 128 x 128, with
    2-CTA instructions (a cluster of two KV blocks, 256 keys) for head_dim >= 128 unless disabled
    (``FLASH_ATTENTION_DISABLE_2CTA``). Emulated from source, not run on a Blackwell GPU.

    Parameters
    ----------
    head_dim : int
        head_dim (== head_dim_v), 8..192.
    use_2cta_instrs : bool, optional
        Force 2-CTA instructions on or off; None follows FA4 (on for head_dim >= 128).

    Returns
    -------
    BwdTile
        tile_m 128, tile_n 128 or 256 (a 2-CTA cluster), hdim_multiple_of 32, cta_group 1 or 2.

    Raises
    ------
    ValueError
        When head_dim is outside [8, 192] (256 runs FA4's dedicated hd256 kernel, not emulated).

    Examples
    --------
    >>> sm100_bwd_tile(128).tile_n, sm100_bwd_tile(64).tile_n
    (256, 128)
    """
    if not 8 <= head_dim <= 192:
        raise ValueError(f"head_dim must be in [8, 192] for the fa4-sm100 backward (256 runs FA4's dedicated "
                         f"hd256 kernel, not emulated), got {head_dim}")
    two = head_dim >= 128 if use_2cta_instrs is None else bool(use_2cta_instrs)
    return BwdTile(128, 128 * (2 if two else 1), 32, False, 2 if two else 1)


@dataclass(frozen=True)
class Kernel:
    """What is common to FA4's kernels. :class:`Sm90` and :class:`Sm100` add their rules, each the same set of
    methods: ``head_dims_ok``, ``defaults(problem)`` (the tuning table), ``finish`` (rules after the overrides),
    the softmax step (``softmax_state``, ``emulated_columns``, ``softmax_step``, ``finalize``) and
    ``backward_tile``. A new kernel is one more subclass and one entry of :data:`KERNELS`.

    ``options_type``: its options dataclass (config); ``step_knobs``: the options fields its softmax step takes
    by name (:func:`step_knob_names`); ``softmax_knobs``: those and the ones its column rule reads, the knobs
    the studies vary and ``fa4num bounds attention`` offers as flags."""
    name: str             # the ``kernel=`` argument
    arch: str             # the GPU generation, for messages and reports
    dtypes: tuple         # input dtypes the forward takes (FA4's names)
    accumulator: str      # fa4num.hw.mma accumulator table of its tensor cores (the backward's too)
    lazy_rescale: bool    # the softmax keeps a stale row max within rescale_threshold (SoftmaxSm100)
    split_kv: bool        # num_splits != 1 runs (split-KV and the combine kernel)
    head_dim_rule: str    # the forward's head-dim rule in words (interface.py _validate_head_dims)
    dq_postprocess_threads: int   # the backward's dQ postprocess CTA (SM90: 2 x 128, SM100: 128)

    def check_dtype(self, dtype: str) -> None:
        """ValueError naming the dtype and this kernel's allowed ones when the forward refuses ``dtype``."""
        if dtype not in self.dtypes:
            raise ValueError(f"dtype {dtype} is not supported by kernel {self.name!r}; allowed: {self.dtypes}")

    def check_head_dims(self, head_dim: int, head_dim_v: int, dtype: str) -> None:
        """ValueError naming head_dim/head_dim_v when the forward refuses them (the rule of
        :meth:`head_dims_ok`, and 16-byte alignment: a multiple of 8 for 16-bit inputs, 16 for fp8)."""
        align = 16 if dtype.startswith("float8") else 8     # 16 bytes of 1- or 2-byte elements
        if not self.head_dims_ok(head_dim, head_dim_v) or head_dim % align or head_dim_v % align:
            raise ValueError(f"head_dim must be in {self.head_dim_rule} and a multiple of {align} for {self.name} "
                             f"with {dtype}, got head_dim={head_dim}, head_dim_v={head_dim_v}")

    visit_ascending = False   # KV blocks right to left (n_block_max - 1 first); the dedicated hd256 kernel: left to right

    def for_release(self, problem) -> "Kernel":
        """The kernel FA4's release (``problem.release``) runs for this call: this one, unless the release
        dispatched it elsewhere (:class:`Sm100Hd256Dedicated`)."""
        return self

    def knob_refusal(self, problem, implemented, *, who: str) -> str | None:
        """Why ``who``, which implements only the knobs ``implemented``, cannot run ``problem``: a sentence naming
        the caller's first knob (``problem.overrides``) outside ``implemented`` whose resolved value is not FA4's
        own for this problem (:meth:`defaults` with no knob set), or None. The torch and Triton backends, the GPU
        twin and the bound ask it, so a knob they do not know is refused by name instead of silently ignored.

        Examples
        --------
        >>> import numpy as np, ml_dtypes
        >>> from fa4num.attention import plan
        >>> q = np.ones((1, 64, 1, 64), ml_dtypes.bfloat16)
        >>> p = plan(q, q, q, kernel="fa4-sm100", fused_bias=False, rescale_threshold=8.0)
        >>> p.kernel.knob_refusal(p, {"rescale_threshold"}, who="this backend").split(";")[0]
        'fused_bias=False: not implemented by this backend (FA4 runs fused_bias=True here)'
        """
        outside = [n for n in problem.overrides if n not in implemented]
        if not outside:
            return None
        # FA4's choices for this call with no knob set (a tuning-table key such as is_sm103 is a knob too)
        fa4 = self.defaults(replace(problem, overrides=MappingProxyType({})))
        for n in outside:
            if getattr(problem.opts, n) != getattr(fa4, n):
                return (f"{n}={getattr(problem.opts, n)!r}: not implemented by {who} (FA4 runs {n}="
                        f"{getattr(fa4, n)!r} here); fa4num.attention.forward runs every knob")
        return None

    def options(self, problem):
        """(options, num_splits): :meth:`defaults` with the caller's overrides (``problem.overrides``), each
        checked (:func:`fa4num.attention.config.apply_overrides`), then the kernel's own consistency rules."""
        overrides = {n: v for n, v in problem.overrides.items() if n not in self.table_keys}
        # the message names the kernel: an SM100 knob (rescale_threshold, coeffs) passed to the default fa4-sm90
        return self.finish(problem, config.apply_overrides(self.defaults(problem), overrides,
                                                           kernel=f"kernel={self.name!r}"))


@dataclass(frozen=True)
class Sm90(Kernel):
    """The Hopper forward (``flash_fwd_sm90.py``) as the H200 runs it: eager rescaling, wgmma GEMMs."""
    table_keys = frozenset()     # no override picks another tuning-table entry
    options_type = config.Sm90Options
    step_knobs = step_knob_names(_sm90.online_softmax, config.Sm90Options)
    softmax_knobs = step_knobs

    def head_dims_ok(self, head_dim: int, head_dim_v: int) -> bool:
        return 8 <= head_dim <= 256 and 8 <= head_dim_v <= 256

    def default_pack_gqa(self, *, qhead_per_kvhead: int) -> bool:
        """FA4's pack_gqa when the caller passes None: on whenever several q heads share a KV head."""
        return qhead_per_kvhead > 1

    def defaults(self, problem) -> config.Sm90Options:
        """The tile of ``_tile_size_fwd_sm90`` and FA4's pack_gqa default (or the caller's)."""
        tm, tn = config.sm90_tile(problem.head_dim, problem.window.causal, local=problem.window.local,
                                  head_dim_v=problem.head_dim_v)
        if problem.flex is not None and problem.flex.block_sparse is not None:
            tm, tn = config.sm90_fit_block_sparse(tm, tn, head_dim=problem.head_dim,
                                                  block_size=problem.flex.block_sparse.block_size)
        pack = problem.pack_gqa_given
        if pack is None:
            pack = self.default_pack_gqa(qhead_per_kvhead=problem.qhead_per_kvhead)
        return config.Sm90Options(tile_m=tm, tile_n=tn, pack_gqa=bool(pack))

    def finish(self, problem, opts):
        return opts, problem.num_splits_given

    def decisions(self, problem) -> dict:
        """q_stage, CTAs per tile, rescale threshold and the reasons of this kernel's choices for ``problem``
        (:func:`fa4num.attention.schedule.plan_of`): one CTA, one Q stage, eager rescaling, no software exp2."""
        return {"q_stage": 1, "ctas": 1, "rescale_threshold": None,
                "reasons": {"ctas": f"{self.name} runs one CTA per tile",
                            "num_splits": f"{self.name} does not split KV",
                            "emulated_columns": f"{self.name} runs every exp2 on MUFU"}}

    # -- the softmax step (fa4num.softmax.sm90): state, one KV block, the epilogue
    def softmax_state(self, rows: int):
        return _sm90.Sm90State.empty(rows)

    software_exp2: ClassVar[bool] = False   # no column's exp2 ever runs on the FMA units

    def emulated_columns(self, opts):
        """Columns of a KV block whose exp2 runs in software: none on SM90."""
        return None

    def softmax_step(self, s, state, *, scale_log2, is_first, opts, emulate, block_max=None):
        """(P, row scale, lag or None, rows whose O is rescaled) of one KV block (``Softmax.online_softmax``):
        every row rescales at once, so no lag. ``block_max``: the block's ``np.fmax.reduce(s, axis=1)``, if known."""
        p, scale = _sm90.online_softmax(s, state, scale_log2=scale_log2, is_first=is_first, arch=opts.mufu_arch,
                                        block_max=block_max, **{n: getattr(opts, n) for n in self.step_knobs})
        return p, scale, None, np.ones(s.shape[0], bool)

    def finalize(self, state, *, scale_log2, opts, sink, v_descale, softmax_scale=None):
        return _sm90.finalize(state, scale_log2=scale_log2, arch=opts.mufu_arch, sink=sink)

    def backward_tile(self, problem, *, use_2cta_instrs=None):
        """The backward's tile (:func:`sm90_bwd_tile`); ValueError for what FA4's SM90 backward refuses."""
        if use_2cta_instrs is not None:
            raise ValueError(f"use_2cta_instrs applies to kernel='fa4-sm100' only, not {self.name!r}")
        d, dv = problem.head_dim, problem.head_dim_v
        # flash_bwd_sm90.py FlashAttentionBackwardSm90.__init__ asserts same_hdim_kv when qhead_per_kvhead > 1
        if problem.qhead_per_kvhead > 1 and d != dv:
            raise ValueError(f"GQA/MQA (q heads {problem.heads}, k/v heads {problem.heads_kv}) needs head_dim == "
                             f"head_dim_v for the {self.name} backward, as FA4 b36 asserts; got ({d}, {dv})")
        rel = problem.release
        if rel is not None and d > 192 and "sm90_backward_hd_gt_192" in rel.not_emulated:
            raise ValueError(f"fa4_release={rel.name!r}: {rel.not_emulated['sm90_backward_hd_gt_192']}; not "
                             f"emulated (head_dim={d})")
        fl = problem.flex
        sparse = None if fl is None else fl.block_sparse_bwd
        return sm90_bwd_tile(d, causal=problem.window.causal, local=problem.window.local,
                             sparse_block_q=None if sparse is None else sparse.block_size[0])


@dataclass(frozen=True)
class Sm100(Kernel):
    """The Blackwell forward (``flash_fwd_sm100.py``) from FA4's source: lazy rescaling, software exp2 columns,
    split-KV, fp8 (not run on a Blackwell GPU)."""
    table_keys = frozenset({"use_2cta_instrs", "is_sm103"})   # overrides that pick the tuning-table entry
    options_type = config.Sm100Options
    step_knobs = step_knob_names(_sm100.softmax_step, config.Sm100Options)
    softmax_knobs = _in_field_order(config.Sm100Options, step_knobs + _COLUMN_KNOBS)

    def head_dims_ok(self, head_dim: int, head_dim_v: int) -> bool:
        return (8 <= head_dim <= 128 and 8 <= head_dim_v <= 128) or (head_dim, head_dim_v) in ((192, 128),
                                                                                                (256, 256))

    def for_release(self, problem) -> Kernel:
        """The dedicated hd256 kernel where the release had one (4.0.0b22-b33) and head dims are (256, 256),
        not on SM103 (``interface.py`` ``use_dedicated_hd256_kernel``); else this kernel."""
        rel = problem.release
        if (rel is not None and rel.hd256_dedicated and problem.head_dim == problem.head_dim_v == 256
                and not problem.overrides.get("is_sm103", False)):
            for name, v in (("learnable_sink", problem.sink), ("softcap", problem.softcap or None)):
                if v is not None:
                    raise ValueError(f"fa4_release={rel.name!r}: head dim 256 runs the dedicated 2-CTA kernel, "
                                     f"which does not support {name}")
            if problem.descaled:
                raise ValueError(f"fa4_release={rel.name!r}: the dedicated hd256 kernel does not support "
                                 "q/k/v_descale")
            return SM100_HD256_DEDICATED
        return self

    def pack_gqa(self, problem) -> bool:
        """FA4's pack_gqa for this problem: the caller's, else :func:`fa4num.attention.config.sm100_pack_gqa`
        (which reads the caller's num_splits: 0, the heuristic, is not 1)."""
        if problem.pack_gqa_given is not None:
            return problem.pack_gqa_given
        return config.sm100_pack_gqa(
            qhead_per_kvhead=problem.qhead_per_kvhead, head_dim=problem.head_dim, head_dim_v=problem.head_dim_v,
            max_seqlen_q=problem.max_seqlen_q, num_splits=problem.num_splits_given, batch=problem.batch,
            heads=problem.heads, seqused_q=problem.seqused_q is not None)

    def splits(self, problem, *, pack_gqa: bool) -> tuple[int, int, str]:
        """(tile_n, num_splits, why) of ``_get_fwd_config`` (:func:`fa4num.attention.config.sm100_splits`), with
        the caller's ``tile_n`` override as FA4's ``tile_mn``."""
        return config.sm100_splits(
            num_splits=problem.num_splits_given, batch=problem.batch, hk=problem.heads_kv,
            h_per_kv=problem.qhead_per_kvhead, pack_gqa=pack_gqa, sq=problem.max_seqlen_q, sk=problem.max_seqlen_k,
            head_dim=problem.head_dim, head_dim_v=problem.head_dim_v, tile_m=128,
            tile_n=problem.overrides.get("tile_n", 128), window=problem.window)

    def defaults(self, problem) -> config.Sm100Options:
        """FA4's tuning table for this problem (:func:`fa4num.attention.config.sm100_defaults`) after
        ``_get_fwd_config``'s split count and tile_n (:meth:`splits`), in FA4's order: pack_gqa, then splits, then
        the 2-CTA choice (no 2-CTA when split) and the tuning entry it keys; the overrides ``use_2cta_instrs`` and
        ``is_sm103`` pick another entry."""
        ov = problem.overrides
        pack = self.pack_gqa(problem)
        tile_n, num_splits, _ = self.splits(problem, pack_gqa=pack)
        # interface.py _flash_attn_fwd: no 2-CTA kernel with block sparsity
        sparse = problem.flex is not None and problem.flex.block_sparse is not None
        opts = config.sm100_defaults(
            dtype=problem.dtype, head_dim=problem.head_dim, causal=problem.window.causal,
            seqlen_q=problem.max_seqlen_q, qhead_per_kvhead=problem.qhead_per_kvhead, batch=problem.batch,
            heads=problem.heads, local=problem.window.local, head_dim_v=problem.head_dim_v,
            pack_gqa=pack, varlen_q=problem.varlen_q, split_kv=num_splits > 1,
            page_size=problem.page_size, use_2cta_instrs=ov.get("use_2cta_instrs", False if sparse else None),
            is_sm103=ov.get("is_sm103", False), seqused_q=problem.seqused_q is not None, release=problem.release)
        return config.replace(opts, tile_n=tile_n, num_splits=num_splits)

    def finish(self, problem, opts):
        """Coefficients resolved to fp32 (the degree follows from them) and the checks FA4 asserts."""
        if opts.coeffs is not None:
            coeffs = resolve_coeffs(opts.coeffs)
            opts = config.replace(opts, coeffs=coeffs, poly_degree=len(coeffs) - 1)
        if opts.tile_n % _sm100.FRAGMENT:
            raise ValueError(f"tile_n must be a multiple of {_sm100.FRAGMENT} for {self.name}, got {opts.tile_n}")
        dt = problem.dtype
        rel = problem.release
        if (rel is not None and rel.hd256_dedicated and problem.head_dim == problem.head_dim_v == 256
                and not opts.is_sm103 and (opts.pack_gqa or opts.num_splits > 1)):
            raise ValueError(f"fa4_release={rel.name!r}: head dim 256 runs the dedicated 2-CTA kernel, which "
                             f"asserts no pack_gqa and no SplitKV; got pack_gqa={opts.pack_gqa}, "
                             f"num_splits={opts.num_splits}")
        if ((rel is None or rel.offset_headroom_assert)
                and opts.max_offset + opts.rescale_threshold >= config.LOG2_DTYPE_MAX[dt]):
            raise ValueError(f"max_offset + rescale_threshold must stay below log2(max {dt}) = "
                             f"{config.LOG2_DTYPE_MAX[dt]:.3f} (FA4 asserts this), got "
                             f"{opts.max_offset} + {opts.rescale_threshold}")
        per = problem.seqlen_k_per_split
        if per is not None:
            if per % opts.tile_n:
                raise ValueError(f"seqlen_k_per_split must be a multiple of tile_n={opts.tile_n} (FA4 asserts "
                                 f"this), got {per}")
            need = -(-problem.max_seqlen_k // per)
            if opts.num_splits > 1 and opts.num_splits < need:
                raise ValueError(f"seqlen_k_per_split={per} needs num_splits >= {need} (ceil(max_seqlen_k / "
                                 f"seqlen_k_per_split)), got {opts.num_splits}")
        return opts, opts.num_splits

    def decisions(self, problem) -> dict:
        """q_stage, CTAs per tile (2 for a 2-CTA cluster), the lazy-rescale threshold and FA4's reason for each
        choice (:func:`fa4num.attention.schedule.plan_of`), from the rules :meth:`defaults` applies."""
        opts = problem.opts
        g = problem.qhead_per_kvhead
        rows = problem.max_seqlen_q * (g if opts.pack_gqa else 1)
        if "use_2cta_instrs" in problem.overrides:
            why_2cta = "use_2cta_instrs given"
        elif problem.flex is not None and problem.flex.block_sparse is not None:
            why_2cta = "block sparsity: FA4 runs no 2-CTA kernel with block_sparse_tensors"
        else:
            why_2cta = config.sm100_2cta(
                head_dim=problem.head_dim, head_dim_v=problem.head_dim_v, causal=problem.window.causal,
                local=problem.window.local, rows=rows, qhead_per_kvhead=g, pack_gqa=opts.pack_gqa,
                batch=problem.batch, heads=problem.heads, split_kv=problem.num_splits > 1, varlen_q=problem.varlen_q,
                seqused_q=problem.seqused_q is not None, page_size=problem.page_size)[1]
        key = (opts.use_2cta_instrs, problem.window.causal, config.head_dim_padded(problem.head_dim), opts.is_sm103)
        n_emu = int(self.emulated_columns(opts).sum())
        return {"q_stage": config.sm100_q_stage(rows, problem.head_dim_v), "ctas": 2 if opts.use_2cta_instrs else 1,
                "rescale_threshold": opts.rescale_threshold,
                "reasons": {"ctas": why_2cta, "num_splits": self.splits(problem, pack_gqa=opts.pack_gqa)[2],
                            "emulated_columns": f"tuning key (use_2cta, causal, hd_pad, sm103) = {key}: freq "
                                                f"{opts.ex2_emu_freq}, res {opts.ex2_emu_res}, start fragment "
                                                f"{opts.ex2_emu_start_frg} -> {n_emu} of {opts.tile_n} columns"}}

    # -- the softmax step (fa4num.softmax.sm100): state, one KV block, the epilogue
    def softmax_state(self, rows: int):
        return _sm100.Sm100State.empty(rows)

    software_exp2: ClassVar[bool] = True    # columns ex2_emu_freq selects run ex2_emulation_2

    def emulated_columns(self, opts):
        """(tile_n,) bool: the columns whose exp2 runs in software (``apply_exp2_convert``)."""
        return _sm100.emulated_columns(opts.tile_n, freq=opts.ex2_emu_freq, res=opts.ex2_emu_res,
                                       start_frg=opts.ex2_emu_start_frg)

    def softmax_step(self, s, state, *, scale_log2, is_first, opts, emulate, block_max=None):
        """(P, acc_scale, lag, rows whose O is rescaled) of one KV block (``softmax_step``). ``block_max``: the
        block's ``np.fmax.reduce(s, axis=1)``, if known."""
        # the knobs the step takes by their options names go by name (step_knobs); these two are renamed
        step = _sm100.softmax_step(s, state, scale_log2=scale_log2, is_first=is_first, emulate=emulate,
                                   arch=opts.mufu_arch, scale_ex2_ftz=not opts.is_sm103, block_max=block_max,
                                   **{n: getattr(opts, n) for n in self.step_knobs})
        # correction_loop: a warp (32 rows from the tile's first) rescales O only when one of its rows has
        # scale < 1 (vote_ballot_sync); a lane whose scale is 1.0 is then multiplied by 1.0 (unchanged)
        return step.p, step.acc_scale, step.lag, _ballot.group_any(step.acc_scale < 1, _ballot.WARP_ROWS)

    def finalize(self, state, *, scale_log2, opts, sink, v_descale, softmax_scale=None):
        return _sm100.finalize(state, scale_log2=scale_log2, max_offset=opts.max_offset, arch=opts.mufu_arch,
                               sink=sink, v_descale=v_descale)

    def backward_tile(self, problem, *, use_2cta_instrs=None):
        """The backward's tile (:func:`sm100_bwd_tile`); ValueError for what FA4's SM100 backward refuses."""
        d, dv = problem.head_dim, problem.head_dim_v
        # interface.py _validate_head_dims (SM100/SM110): both <= 128, or the DeepSeek shape (192, 128)
        if not (max(d, dv) <= 128 or (d, dv) == (192, 128)):
            raise ValueError(f"(head_dim, head_dim_v) must both be <= 128 or (192, 128) for the {self.name} "
                             f"backward, got ({d}, {dv})")
        return sm100_bwd_tile(d, use_2cta_instrs=use_2cta_instrs)


@dataclass(frozen=True)
class Sm100Hd256Dedicated(Sm100):
    """The dedicated hd256 forward of flash-attn-4 4.0.0b22-b33 (``sm100_hd256_2cta_fmha_forward.py``
    ``BlackwellFusedMultiHeadAttentionForward``), which those releases ran for every SM100 call with head dims
    (256, 256): always a 2-CTA cluster, KV blocks visited left to right, no lazy rescale, its own row-sum order,
    an IEEE division for the final scale and ``log`` for the LSE (:func:`fa4num.softmax.sm100.
    softmax_step_hd256_dedicated`). Selected by ``plan(..., fa4_release=...)``, not by name. (Emulated from
    source, not run on a Blackwell GPU.)"""
    visit_ascending = True

    def for_release(self, problem) -> Kernel:
        return self

    def softmax_step(self, s, state, *, scale_log2, is_first, opts, emulate, block_max=None):
        step = _sm100.softmax_step_hd256_dedicated(s, state, scale_log2=scale_log2, is_first=is_first,
                                                   emulate=emulate, poly_degree=opts.poly_degree,
                                                   coeffs=opts.coeffs, arch=opts.mufu_arch, block_max=block_max)
        # correction_rescale multiplies every row's O by its factor on every block after the first
        return step.p, step.acc_scale, step.lag, step.rescaled

    def finalize(self, state, *, scale_log2, opts, sink, v_descale, softmax_scale=None):
        return _sm100.finalize_hd256_dedicated(state, softmax_scale=softmax_scale, arch=opts.mufu_arch)


def resolve_coeffs(coeffs) -> tuple:
    """A coefficient set as fp32 c0..c_deg: anything :func:`fa4num.polys.resolve` takes (a set name from the
    shipped or a user registry, "c0,c1,...", fp32 numbers, hex bits), checked by :func:`fa4num.ex2.poly_coeffs`.
    The one place the attention wing resolves coefficients; it reads the registry without the fitter."""
    from fa4num.ex2 import poly_coeffs
    return tuple(poly_coeffs(None, coeffs=coeffs))


SM90 = Sm90(name="fa4-sm90", arch="sm90", dtypes=config.DTYPES_SM90, accumulator="sm90", lazy_rescale=False,
            split_kv=False, head_dim_rule="[8, 256] (q/k and v)", dq_postprocess_threads=256)
SM100 = Sm100(name="fa4-sm100", arch="sm100", dtypes=config.DTYPES_SM100, accumulator="sm100", lazy_rescale=True,
              split_kv=True,
              head_dim_rule="[8, 128] (q/k and v), or (head_dim, head_dim_v) = (192, 128) or (256, 256)",
              dq_postprocess_threads=128)
KERNELS = {k.name: k for k in (SM90, SM100)}
# selected by a release profile (Kernel.for_release), not by name: the name stays FA4's kernel="fa4-sm100"
SM100_HD256_DEDICATED = Sm100Hd256Dedicated(**{f.name: getattr(SM100, f.name) for f in fields(SM100)})


def knob_table() -> str:
    """The kernel knobs of every kernel in :data:`KERNELS`, as an aligned text table: name, the kernels that
    have it, the options dataclass's default (FA4's tuning table, ``defaults(problem)``, may pick another for a
    problem), who reads it (the softmax step by name, the column rule, or the kernel's other rules) and what
    it may be. Written from the options dataclasses, the kernel objects and the checks, so a new knob appears
    here with no edit (the docs' table is this output).

    Parameters
    ----------
    None

    Returns
    -------
    str

    Examples
    --------
    >>> print(knob_table().splitlines()[0].split())
    ['knob', 'kernels', 'default', 'read', 'by', 'values']
    >>> "rescale_threshold  fa4-sm100" in knob_table()
    True
    """
    from dataclasses import MISSING
    rows = {}     # knob -> [{kernel: default}, read by]: a knob of several kernels is listed once
    for kern in KERNELS.values():
        for f in fields(kern.options_type):
            default = "tuning table" if f.default is MISSING else repr(f.default)
            if f.name not in rows:
                rows[f.name] = [{}, "softmax step" if f.name in kern.step_knobs else
                                "column rule" if f.name in _COLUMN_KNOBS else "kernel"]
            rows[f.name][0][kern.name] = default
    table = [("knob", "kernels", "default", "read by", "values")]
    for n, (defaults, read) in rows.items():
        shown = (next(iter(defaults.values())) if len(set(defaults.values())) == 1 else
                 ", ".join(f"{d} ({k})" for k, d in defaults.items()))
        table.append((n, ", ".join(defaults), shown, read,
                      config.allowed_values(n) or f"FA4's argument {n} (plan checks it)"))
    width = [max(len(r[i]) for r in table) for i in range(4)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r[:4], width)) + "  " + r[4] for r in table)


def get(kernel) -> Kernel:
    """The kernel object of a name in :data:`KERNELS` (or a kernel object itself).

    Parameters
    ----------
    kernel : str or Kernel
        A key of :data:`KERNELS`.

    Returns
    -------
    Kernel

    Raises
    ------
    ValueError
        Naming ``kernel`` and the allowed names, for anything else.

    Examples
    --------
    >>> get("fa4-sm90").split_kv
    False
    """
    if isinstance(kernel, Kernel):
        return kernel
    if not isinstance(kernel, str) or kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {sorted(KERNELS)}, got {kernel!r}")
    return KERNELS[kernel]


__all__ = ["Kernel", "Sm90", "Sm100", "Sm100Hd256Dedicated", "SM90", "SM100", "SM100_HD256_DEDICATED",
           "KERNELS", "get", "BwdTile", "sm90_bwd_tile", "sm100_bwd_tile", "step_knob_names", "knob_table"]
