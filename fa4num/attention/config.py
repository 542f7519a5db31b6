"""Per-kernel configuration tables of FA4 (flash-attn-4 4.0.0b36), as data.

SM90 tiles: ``interface.py`` ``_tile_size_fwd_sm90`` (no local window, no block sparsity).
SM100: default tile 128 x 128 (``interface.py``), knobs from ``flash_fwd_sm100.py``: ``_TUNING_CONFIG`` /
``_FP8_TUNING_CONFIG`` keyed by (use_2cta_instrs, is_causal, head_dim_padded, is_sm103), the fallback
``enable_ex2_emu`` rule, the pack-GQA frequency override, max_offset and rescale_threshold per dtype.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, fields, replace

from fa4num.fp.dtypes import DTYPES
from fa4num.hw import available_archs
from fa4num.hw.model import LIBM

GEMM_MODELS = ("wgmma", "tcgen05", "exact", "blas")
# gemm option -> (fa4num.hw.mma model, accumulator table): "wgmma" is Hopper's fused sum, "tcgen05" Blackwell's
GEMM_IMPL = {"wgmma": ("wgmma", "sm90"), "tcgen05": ("wgmma", "sm100"), "exact": ("exact", "sm90"),
             "blas": ("blas", "sm90")}
NUM_SMS_SM100 = 148   # B200: get_num_sms_for_selection feeds the 2-CTA and pack-GQA rules
DTYPES_SM90 = ("bfloat16", "float16")
DTYPES_SM100 = ("bfloat16", "float16", "float8_e4m3fn", "float8_e5m2")


def head_dim_padded(d: int) -> int:
    """FA4 pads the head dimension to a multiple of 16 (flash_fwd_*: ``int(math.ceil(d / 16) * 16)``)."""
    return int(math.ceil(d / 16) * 16)


def sm90_tile(head_dim: int, causal: bool, *, local: bool = False, head_dim_v: int | None = None) -> tuple[int, int]:
    """(tile_m, tile_n) of ``interface.py`` ``_tile_size_fwd_sm90`` (no block sparsity)."""
    dv = head_dim if head_dim_v is None else head_dim_v
    if head_dim <= 64:
        return 192, 128
    if head_dim <= 96:
        return (192, 128) if (causal or local) else (192, 144)
    if head_dim <= 128:
        return 128, 128
    if head_dim <= 192:
        return 128, 96 if local else (128 if dv <= 128 else 112)
    return 128, 64 if local else 80


def sm90_fit_block_sparse(tile_m: int, tile_n: int, *, head_dim: int, block_size: tuple) -> tuple[int, int]:
    """The SM90 tile with block-sparse tensors of ``block_size`` (``interface.py`` ``_tile_size_fwd_sm90`` with
    ``sparse_block_size_q``, then ``_fit_sm90_fwd_tile_to_block_sparsity``): head dims <= 96 fall back to 128
    rows unless the sparse query block is a multiple of 192; then 64 rows if the query block is not a multiple of
    the tile but of 64, and tile_n shrinks to a smaller KV block that is a multiple of 16.

    Parameters
    ----------
    tile_m, tile_n : int
        ``_tile_size_fwd_sm90``'s tile without sparsity.
    head_dim : int
    block_size : (int, int)
        The sparse blocks' (query rows, keys).

    Returns
    -------
    (int, int)

    Examples
    --------
    >>> sm90_fit_block_sparse(192, 128, head_dim=64, block_size=(128, 128)), sm90_fit_block_sparse(128, 128, head_dim=128, block_size=(64, 64))
    ((128, 128), (64, 64))
    """
    bq, bk = block_size
    if head_dim <= 96 and bq % 192:
        tile_m, tile_n = 128, 128
    if bq % tile_m and bq % 64 == 0:
        tile_m = 64
    if bk < tile_n and bk % 16 == 0:
        tile_n = bk
    return tile_m, tile_n


def sm100_pack_gqa(*, qhead_per_kvhead: int, head_dim: int, head_dim_v: int, max_seqlen_q: int, num_splits: int,
                   batch: int, heads: int, num_sms: int = NUM_SMS_SM100, seqused_q: bool = False) -> bool:
    """FA4's SM100 pack_gqa when the caller passes None (``interface.py`` ``_flash_attn_fwd``, b36 ~lines
    1000-1011): on whenever several q heads share a KV head, except with head dim 256 and a GQA ratio that does
    not divide 128 when there are several M blocks or the 2-CTA grid fits one wave: then 2-CTA wins over
    cp.async-Q PackGQA. (SM90's rule is the first half alone, ``kernels.Sm90.default_pack_gqa``.)

    Examples
    --------
    >>> sm100_pack_gqa(qhead_per_kvhead=6, head_dim=256, head_dim_v=256, max_seqlen_q=256, num_splits=1, batch=1,
    ...                heads=12)
    False
    >>> sm100_pack_gqa(qhead_per_kvhead=6, head_dim=128, head_dim_v=128, max_seqlen_q=256, num_splits=1, batch=1,
    ...                heads=12)
    True
    """
    pack = qhead_per_kvhead > 1
    if (head_dim == 256 and head_dim_v == 256 and 128 % qhead_per_kvhead and not seqused_q
            and (max_seqlen_q > 128 or (num_splits == 1 and 2 * batch * heads <= num_sms))):
        pack = False
    return pack


def sm100_q_stage(rows: int, head_dim_v: int) -> int:
    """Q tiles of 128 rows per CTA (``_get_fwd_config``): 2 when the (packed) rows exceed one tile, except with
    head_dim_v 256 (two Q tiles exceed TMEM)."""
    return 2 if rows > 128 and head_dim_v != 256 else 1


def splits_heuristic(total_mblocks: int, n_blocks: int, *, num_sms: int = NUM_SMS_SM100) -> int:
    """``num_splits_heuristic`` (at most 128 splits): one split for at most 4 KV blocks or no M block, else as
    many as fill the SMs, at most one per KV block."""
    if n_blocks <= 4 or total_mblocks == 0:
        return 1
    return max(1, min(num_sms // total_mblocks, 128, n_blocks))


def sm100_splits(*, num_splits, batch, hk, h_per_kv, pack_gqa, sq, sk, head_dim, head_dim_v, tile_m, tile_n,
                 window) -> tuple[int, int, str]:
    """(tile_n, num_splits, why) of ``_get_fwd_config`` (b36): ``num_splits < 1`` runs the heuristic on the M
    blocks of the grid and the KV blocks a row loads (a local window bounds them); with head_dim != head_dim_v a
    split call needs >= 64 KV blocks of ``tile_n`` and then runs with tile_n 64 and the heuristic's count (even
    for an explicit ``num_splits``), else it is not split.

    Examples
    --------
    >>> from fa4num.attention.masking import resolve_window
    >>> w = resolve_window(False)
    >>> sm100_splits(num_splits=4, batch=1, hk=1, h_per_kv=1, pack_gqa=False, sq=1, sk=8192, head_dim=192,
    ...              head_dim_v=128, tile_m=128, tile_n=128, window=w)[:2]
    (64, 128)
    >>> sm100_splits(num_splits=4, batch=1, hk=1, h_per_kv=1, pack_gqa=False, sq=1, sk=4096, head_dim=192,
    ...              head_dim_v=128, tile_m=128, tile_n=128, window=w)[:2]
    (128, 1)
    """
    rows = sq * (h_per_kv if pack_gqa else 1)
    m_eff = sm100_q_stage(rows, head_dim_v) * tile_m
    total = batch * hk * (1 if pack_gqa else h_per_kv) * (-(-rows // m_eff))
    loaded = sk
    if window.local:
        wr = sk if window.right is None else window.right
        wl = sk if window.left is None else window.left
        loaded = max(0, min(sk, wr + wl + 1 + tile_m))
    n_blocks = -(-loaded // tile_n)
    why = f"num_splits={num_splits} given"
    if num_splits < 1:
        num_splits = splits_heuristic(total, n_blocks)
        why = (f"num_splits heuristic: {total} M blocks on {NUM_SMS_SM100} SMs, {n_blocks} KV blocks of {tile_n} "
               f"-> {num_splits}")
    if head_dim != head_dim_v and num_splits > 1:
        if n_blocks >= 64:
            tile_n = 64
            n_blocks = -(-loaded // tile_n)
            num_splits = splits_heuristic(total, n_blocks)
            why = (f"head_dim != head_dim_v with splits and {n_blocks} >= 64 KV blocks: tile_n 64, num_splits "
                   f"re-chosen by the heuristic ({total} M blocks, {n_blocks} KV blocks of 64) -> {num_splits}")
        else:
            num_splits = 1
            why = f"head_dim != head_dim_v with splits but {n_blocks} < 64 KV blocks: not split"
    return tile_n, num_splits, why


def sm100_2cta(*, head_dim, head_dim_v, causal, local, rows, qhead_per_kvhead, pack_gqa, batch, heads, split_kv,
               varlen_q=False, seqused_q=False, page_size=None, num_sms=NUM_SMS_SM100) -> tuple[bool, str]:
    """(use_2cta_instrs, why) of ``interface.py`` ``_flash_attn_fwd`` (b36 ~lines 1064-1099): a cluster of two
    CTAs shares each KV block when the call is not split, has no ``seqused_q``, varlen q only with head dim 256,
    page size None or 128, 128 a multiple of the GQA ratio under pack-GQA, head dim 256 or (not causal, not
    local, padded head dims (128 | 192, 128)), and either more than one ``q_stage * 128``-row M block or -- head
    dim 256 only -- a doubled grid that fits one wave: ``2 * batch * scheduled heads <= num_sms``. That last
    clause makes an hd256 decode row's bits depend on batch x heads (the 2-CTA tuning entry turns the software
    exp2 on, the 1-CTA one has none).

    ``why`` names the deciding condition (the first failing one, or the clause that held).

    Examples
    --------
    >>> sm100_2cta(head_dim=256, head_dim_v=256, causal=False, local=False, rows=1, qhead_per_kvhead=1,
    ...            pack_gqa=False, batch=8, heads=16, split_kv=False)
    (False, 'one M block of 1 rows and hd256 decode grid 2 * 8 * 16 = 256 > 148 SMs')
    """
    g = qhead_per_kvhead
    is_hd256 = head_dim == 256 and head_dim_v == 256
    hd_pad, hdv_pad = head_dim_padded(head_dim), head_dim_padded(head_dim_v)
    q_stage = sm100_q_stage(rows, head_dim_v)
    sched = heads // g if pack_gqa else heads
    grid = 2 * batch * sched
    if split_kv:
        return False, "split-KV"
    if varlen_q and not is_hd256:
        return False, "varlen q (cu_seqlens_q) without head dim 256"
    if seqused_q:
        return False, "seqused_q given"
    if page_size not in (None, 128):
        return False, f"page size {page_size} (2-CTA needs None or 128)"
    if pack_gqa and 128 % g:
        return False, f"pack-GQA with ratio {g}, which does not divide 128"
    if not (is_hd256 or (not causal and not local and hd_pad in (128, 192) and hdv_pad == 128)):
        return False, (f"head dims ({head_dim}, {head_dim_v})" + (" with causal/local masking" if causal or local
                                                                   else "") + " outside the 2-CTA shapes")
    if rows > q_stage * 128:
        return True, f"{rows} rows > one M block of {q_stage} x 128"
    if is_hd256 and grid <= num_sms:
        return True, f"one M block of {rows} rows but hd256 decode grid 2 * {batch} * {sched} = {grid} <= {num_sms} SMs"
    return False, (f"one M block of {rows} rows" + (f" and hd256 decode grid 2 * {batch} * {sched} = {grid} > "
                                                     f"{num_sms} SMs" if is_hd256 else ""))


# (use_2cta_instrs, is_causal, head_dim_padded, is_sm103) -> (ex2_emu_freq, ex2_emu_start_frg)
SM100_TUNING = {
    (True, False, 128, False): (10, 1), (False, True, 128, False): (16, 1),
    (True, False, 192, False): (16, 0), (False, True, 192, False): (32, 1),
    (True, False, 128, True): (0, 0), (False, True, 128, True): (0, 0),
    (True, False, 192, True): (0, 0), (False, True, 192, True): (0, 0),
    (True, False, 256, False): (14, 0), (True, True, 256, False): (14, 0),
}
SM100_FP8_TUNING = {(True, False, 128, False): (10, 1), (False, True, 128, False): (8, 1)}
LOG2_DTYPE_MAX = {n: math.log2(d.max_finite) for n, d in DTYPES.items() if d.width < 32}   # fa4num.fp.dtypes


@dataclass(frozen=True)
class Sm90Options:
    """Knobs of the SM90 emulation. Defaults are what the H200 runs."""
    tile_m: int
    tile_n: int
    gemm: str = "wgmma"
    ffma_exponent: bool = True     # x = FFMA(S, scale, -RN(m*scale)) (ptxas contraction) vs FMUL + FADD
    mufu_arch: str = "sm90"
    pack_gqa: bool = False         # the M tile interleaves the q heads of one KV head


@dataclass(frozen=True)
class Sm100Options:
    """Knobs of the SM100 emulation; every one can be overridden through ``forward(**options)``."""
    tile_m: int = 128                  # rows of one M block (q_stage * 128 * CTAs per cluster)
    tile_n: int = 128
    gemm: str = "tcgen05"              # Blackwell's tensor-core accumulation model (fa4num.hw.mma, arch sm100)
    rescale_threshold: float = 8.0
    max_offset: int = 0
    ex2_emu_freq: int = 0
    ex2_emu_res: int = 4
    ex2_emu_start_frg: int = 1
    poly_degree: int = 3
    coeffs: tuple | str | None = None   # fp32 c0..c_deg, or a polys/ registry entry name
    use_2cta_instrs: bool = False      # FA4's 2-CTA choice; it selects the tuning-table entry (see sm100_defaults)
    fused_bias: bool = True
    mufu_arch: str = "sm90"            # MUFU tables measured on the H200; no B200 tables exist
    is_sm103: bool = False             # SM103 (B300): no software exp2, non-fast-math exp2 for the rescale factor
    pack_gqa: bool = False             # the M tile interleaves the q heads of one KV head
    num_splits: int = 1                # split-KV: KV blocks cut into this many splits, merged by the combine kernel


def sm100_defaults(*, dtype: str, head_dim: int, causal: bool, seqlen_q: int, qhead_per_kvhead: int,
                   batch: int = 1, heads: int = 1, num_sms: int = NUM_SMS_SM100, use_2cta_instrs: bool | None = None,
                   is_sm103: bool = False, local: bool = False, head_dim_v: int | None = None,
                   pack_gqa: bool | None = None, varlen_q: bool = False, split_kv: bool = False,
                   page_size: int | None = None, seqused_q: bool = False, release=None) -> Sm100Options:
    """The knobs FA4's SM100 forward (flash-attn-4 4.0.0b36) picks for this problem (``interface.py``
    ``_flash_attn_fwd`` / ``_get_fwd_config``, ``flash_fwd_sm100.py`` ``__init__``):

    - pack_gqa: :func:`sm100_pack_gqa` unless given;
    - q_stage = 2 if seqlen_q (x qhead_per_kvhead under pack-GQA) > 128 and head_dim_v != 256;
    - 2-CTA: not split-KV, varlen q only for head dim 256, page size None or 128, more than one q_stage*128
      M block (or, for head dim 256, 2 * batch * scheduled heads <= num_sms), 128 a multiple of the GQA ratio
      under pack-GQA, and head dim 256, or neither causal nor local with padded head dims (128|192, 128);
    - software exp2: the ``_TUNING_CONFIG`` / ``_FP8_TUNING_CONFIG`` entry of (use_2cta, causal, hd_pad,
      is_sm103), else on for hd_pad <= 128 (or 192 with 2-CTA, not causal/local) with freq 16, never on SM103;
      pack-GQA (hd_pad > 64, not causal/local) takes the tuned freq or 10, and 32 with varlen q.
    ``use_2cta_instrs`` / ``is_sm103`` given explicitly pick another tuning-table entry. ``release`` (a name or
    :class:`fa4num.attention.releases.Release`; default 4.0.0b36) takes that release's tuning tables, its
    ``ex2_emu_res``, fp8 rescale threshold and max_offset, and, where it had one, the dedicated hd256 kernel
    (always 2-CTA, no pack-GQA, no lazy rescale).
    (Emulated from source, not run on a Blackwell GPU.)

    Examples
    --------
    >>> o = sm100_defaults(dtype="bfloat16", head_dim=256, causal=False, seqlen_q=256, qhead_per_kvhead=6,
    ...                    batch=1, heads=12)
    >>> o.use_2cta_instrs, o.ex2_emu_freq, o.pack_gqa
    (True, 14, False)
    """
    from . import releases
    rel = releases.get(release)
    dv = head_dim if head_dim_v is None else head_dim_v
    hd_pad = head_dim_padded(head_dim)
    g = qhead_per_kvhead
    # the dedicated hd256 kernel of b22-b33 (sm100_hd256_2cta_fmha_forward.py): every call 2-CTA, no pack-GQA
    dedicated = rel.hd256_dedicated and head_dim == 256 and dv == 256 and not is_sm103
    if dedicated and pack_gqa is None:
        pack_gqa = False
    if dedicated and use_2cta_instrs is None:
        use_2cta_instrs = True
    if pack_gqa is None:
        pack_gqa = sm100_pack_gqa(qhead_per_kvhead=g, head_dim=head_dim, head_dim_v=dv, max_seqlen_q=seqlen_q,
                                  num_splits=2 if split_kv else 1, batch=batch, heads=heads, num_sms=num_sms,
                                  seqused_q=seqused_q)
    rows = seqlen_q * (g if pack_gqa else 1)
    q_stage = sm100_q_stage(rows, dv)
    use_2cta = use_2cta_instrs
    if use_2cta is None:
        use_2cta = sm100_2cta(head_dim=head_dim, head_dim_v=dv, causal=causal, local=local, rows=rows,
                              qhead_per_kvhead=g, pack_gqa=pack_gqa, batch=batch, heads=heads, split_kv=split_kv,
                              varlen_q=varlen_q, seqused_q=seqused_q, page_size=page_size, num_sms=num_sms)[0]
    key = (use_2cta, causal, hd_pad, is_sm103)
    width8 = dtype.startswith("float8")
    table, fp8_table = tuning_tables(rel)
    enable = ((hd_pad <= 128 or (hd_pad == 192 and use_2cta and not causal and not local)) and not is_sm103)
    tune = dict(zip(("freq", "res", "start"), table[key])) if key in table else {}
    if tune:
        enable = tune["freq"] > 0
    if width8 and key in fp8_table:
        tune = dict(zip(("freq", "res", "start"), fp8_table[key]))
        enable = tune["freq"] > 0
    start = tune.get("start", 1)
    res = tune.get("res") or rel.ex2_emu_res
    freq = 0
    if enable:
        freq = tune.get("freq", 16)
        if pack_gqa and hd_pad > 64 and not causal and not local:
            freq = 32 if varlen_q or seqused_q else tune.get("freq", 10)
    # rows that share one KV block range: q_stage tiles of 128, times 2 for a 2-CTA pair (BlockInfo(cta_tiler[0]
    # * cta_group_size))
    threshold, offset = rel.softmax_constants(dtype)
    if dedicated:
        # the dedicated kernel rescales at every new row max (softmax_step: no threshold) and starts the
        # fragments at 0 unless tuned (its own defaults: freq 4, res 3, start 0)
        threshold = 0.0
        if not tune:
            freq, res, start = 4, 3, 0
    return Sm100Options(tile_m=q_stage * 128 * (2 if use_2cta else 1), rescale_threshold=threshold,
                        max_offset=offset, ex2_emu_freq=freq, ex2_emu_res=res, ex2_emu_start_frg=start,
                        use_2cta_instrs=use_2cta, is_sm103=is_sm103, pack_gqa=pack_gqa)


def tuning_tables(rel) -> tuple[dict, dict]:
    """(16-bit, fp8) tuning tables of a release profile (:class:`fa4num.attention.releases.Release`), key ->
    (ex2_emu_freq, ex2_emu_res or None, ex2_emu_start_frg): fa4num's copies (:data:`SM100_TUNING`,
    :data:`SM100_FP8_TUNING`) for the default release, the profile's recorded tables for another."""
    from . import releases
    if rel.name == releases.DEFAULT_RELEASE:
        return ({k: (f, None, st) for k, (f, st) in SM100_TUNING.items()},
                {k: (f, None, st) for k, (f, st) in SM100_FP8_TUNING.items()})
    return rel.tuning(fp8=False), rel.tuning(fp8=True)


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_real(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


# What each knob may be, checked where options enter (forward(**options), `fa4num attention run --opt`).
# Refused: what FA4 itself refuses or cannot mean -- a NaN, infinite or negative rescale_threshold (FA4 tests
# `rescale_threshold > 0.0` at compile time, so such values would silently act as 0), a non-integer max_offset
# (``cutlass.Constexpr[int]``) or ex2 frequency/residue/start fragment (Python ints in softmax.py
# ``apply_exp2_convert``). Not refused here: any softmax_scale and non-finite inputs, which FA4 accepts (the
# forward gives the kernel's bits for them).
_CHECKS = {
    "tile_m": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "tile_n": (lambda v: _is_int(v) and v >= 16 and v % 16 == 0, "a positive multiple of 16"),
    "gemm": (lambda v: v in GEMM_MODELS, f"one of {', '.join(GEMM_MODELS)}"),
    "ffma_exponent": (lambda v: isinstance(v, bool), "true or false"),
    "mufu_arch": (lambda v: isinstance(v, str) and (v == LIBM or v in available_archs()),
                  "'libm' or a MUFU table set of fa4num.hw.available_archs()"),
    "rescale_threshold": (lambda v: _is_real(v) and math.isfinite(v) and v >= 0,
                          "a finite number >= 0 (0 rescales at every new row max)"),
    "max_offset": (lambda v: _is_int(v), "an integer (FA4: 0, or 8 for fp8)"),
    "ex2_emu_freq": (lambda v: _is_int(v) and v >= 0, "an integer >= 0 (0: no software exp2)"),
    "ex2_emu_res": (lambda v: _is_int(v) and v >= 0, "an integer >= 0"),
    "ex2_emu_start_frg": (lambda v: _is_int(v) and v >= 0, "an integer >= 0"),
    "poly_degree": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "coeffs": (lambda v: v is None or isinstance(v, str) or (
        isinstance(v, (tuple, list)) and len(v) >= 2 and all(_is_real(c) and math.isfinite(c) for c in v)),
        "a polys entry name or a list of at least 2 finite fp32 coefficients"),
    "use_2cta_instrs": (lambda v: isinstance(v, bool), "true or false"),
    "fused_bias": (lambda v: isinstance(v, bool), "true or false"),
    "is_sm103": (lambda v: isinstance(v, bool), "true or false"),
}


def allowed_values(name: str) -> str:
    """What the knob ``name`` may be, in words (the text of its check's error message); "" for an unchecked name.

    Parameters
    ----------
    name : str
        A kernel knob (a field of the options dataclasses).

    Returns
    -------
    str

    Examples
    --------
    >>> allowed_values("tile_n")
    'a positive multiple of 16'
    """
    check = _CHECKS.get(name)
    return "" if check is None else check[1]


def check_option(name: str, value) -> None:
    """ValueError naming ``name`` when ``value`` is not a valid value of that knob (see _CHECKS)."""
    check = _CHECKS.get(name)
    if check is not None and not check[0](value):
        raise ValueError(f"{name}: expected {check[1]}, got {value!r}")


def apply_overrides(opts, overrides: dict, *, kernel: str = "this kernel"):
    """Replace fields of an options dataclass, each checked for type and range.

    Unknown names raise ValueError listing the allowed ones; a bad value raises ValueError naming the option and
    what it may be (``rescale_threshold: expected a finite number >= 0 ..., got nan``).

    Examples
    --------
    >>> apply_overrides(Sm100Options(), {"rescale_threshold": 4.0}).rescale_threshold
    4.0
    >>> apply_overrides(Sm100Options(), {"ex2_emu_freq": 1.5})
    Traceback (most recent call last):
    ...
    ValueError: ex2_emu_freq: expected an integer >= 0 (0: no software exp2), got 1.5
    """
    names = {f.name for f in fields(opts)}
    bad = sorted(set(overrides) - names)
    if bad:
        raise ValueError(f"unknown option(s) {bad} for {kernel}; allowed: {sorted(names)}")
    for name, value in overrides.items():
        check_option(name, value)
    return replace(opts, **overrides)
