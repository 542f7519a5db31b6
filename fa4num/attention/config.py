"""Per-kernel configuration tables of FA4 (flash-attn-4 4.0.0b36), as data.

SM90 tiles: ``interface.py`` ``_tile_size_fwd_sm90`` (no local window, no block sparsity).
SM100: default tile 128 x 128 (``interface.py``), knobs from ``flash_fwd_sm100.py``: ``_TUNING_CONFIG`` /
``_FP8_TUNING_CONFIG`` keyed by (use_2cta_instrs, is_causal, head_dim_padded, is_sm103), the fallback
``enable_ex2_emu`` rule, the pack-GQA frequency override, max_offset and rescale_threshold per dtype.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

KERNELS = ("fa4-sm90", "fa4-sm100")
GEMM_MODELS = ("wgmma", "exact", "blas")
DTYPES_SM90 = ("bfloat16", "float16")
DTYPES_SM100 = ("bfloat16", "float16", "float8_e4m3fn", "float8_e5m2")


def head_dim_padded(d: int) -> int:
    """FA4 pads the head dimension to a multiple of 16 (flash_fwd_*: ``int(math.ceil(d / 16) * 16)``)."""
    return int(math.ceil(d / 16) * 16)


def sm90_tile(head_dim: int, causal: bool) -> tuple[int, int]:
    """(tile_m, tile_n) of ``_tile_size_fwd_sm90`` for head_dim == head_dim_v, no local window."""
    if head_dim <= 64:
        return 192, 128
    if head_dim <= 96:
        return (192, 128) if causal else (192, 144)
    if head_dim <= 128:
        return 128, 128
    if head_dim <= 192:
        return 128, 112 if head_dim > 128 else 128
    return 128, 80


# (use_2cta_instrs, is_causal, head_dim_padded, is_sm103) -> (ex2_emu_freq, ex2_emu_start_frg)
SM100_TUNING = {
    (True, False, 128, False): (10, 1), (False, True, 128, False): (16, 1),
    (True, False, 192, False): (16, 0), (False, True, 192, False): (32, 1),
    (True, False, 128, True): (0, 0), (False, True, 128, True): (0, 0),
    (True, False, 192, True): (0, 0), (False, True, 192, True): (0, 0),
    (True, False, 256, False): (14, 0), (True, True, 256, False): (14, 0),
}
SM100_FP8_TUNING = {(True, False, 128, False): (10, 1), (False, True, 128, False): (8, 1)}
LOG2_DTYPE_MAX = {"float8_e4m3fn": math.log2(448.0), "float8_e5m2": math.log2(57344.0),
                  "float16": math.log2(65504.0), "bfloat16": math.log2(3.3895313892515355e38)}


@dataclass(frozen=True)
class Sm90Options:
    """Knobs of the SM90 emulation. Defaults are what the H200 runs."""
    tile_m: int
    tile_n: int
    gemm: str = "wgmma"
    ffma_exponent: bool = True     # x = FFMA(S, scale, -RN(m*scale)) (ptxas contraction) vs FMUL + FADD
    mufu_arch: str = "sm90"


@dataclass(frozen=True)
class Sm100Options:
    """Knobs of the SM100 emulation; every one can be overridden through ``forward(**options)``."""
    tile_m: int = 128                  # rows of one M block (q_stage * 128 * CTAs per cluster)
    tile_n: int = 128
    gemm: str = "wgmma"
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
    is_sm103: bool = False             # SM103 (B300): no software exp2


def sm100_defaults(*, dtype: str, head_dim: int, causal: bool, seqlen_q: int, qhead_per_kvhead: int,
                   batch: int = 1, heads: int = 1, num_sms: int = 148, use_2cta_instrs: bool | None = None,
                   is_sm103: bool = False) -> Sm100Options:
    """The knobs FA4's SM100 forward (flash-attn-4 4.0.0b36: head_dim 256 runs the same kernel) picks for this
    problem. interface.py: q_stage = 2 if seqlen_q*qhead_per_kvhead > tile_m and head_dim != 256; 2-CTA when
    there is more than one q_stage*tile_m M block (or, for head_dim 256, 2*batch*heads <= num_sms), tile_m is a
    multiple of qhead_per_kvhead under pack-GQA, and head_dim is 256, or not causal with hd_pad in {128, 192}.
    ``use_2cta_instrs`` / ``is_sm103`` given explicitly pick another tuning-table entry."""
    hd_pad = head_dim_padded(head_dim)
    pack_gqa = qhead_per_kvhead > 1
    rows = seqlen_q * (qhead_per_kvhead if pack_gqa else 1)
    q_stage = 2 if rows > 128 and head_dim != 256 else 1
    heads_sched = heads // qhead_per_kvhead if pack_gqa else heads
    use_2cta = use_2cta_instrs
    if use_2cta is None:
        use_2cta = ((rows > q_stage * 128 or (head_dim == 256 and 2 * batch * heads_sched <= num_sms))
                    and (128 % qhead_per_kvhead == 0 or not pack_gqa)
                    and (head_dim == 256 or (not causal and hd_pad in (128, 192))))
    key = (use_2cta, causal, hd_pad, is_sm103)
    width8 = dtype.startswith("float8")
    enable = (hd_pad <= 128 or (hd_pad == 192 and use_2cta and not causal)) and not is_sm103
    freq, start = 16, 1
    if key in SM100_TUNING:
        freq, start = SM100_TUNING[key]
        enable = freq > 0
    if width8 and key in SM100_FP8_TUNING:
        freq, start = SM100_FP8_TUNING[key]
        enable = freq > 0
    tuned = key in SM100_TUNING or (width8 and key in SM100_FP8_TUNING)
    if not enable:
        freq = 0
    elif pack_gqa and hd_pad > 64 and not causal and not tuned:
        freq = 10   # pack-GQA override: _tune.get("ex2_emu_freq", 10) (no varlen here)
    # rows that share one KV block range: q_stage tiles of 128, times 2 for a 2-CTA pair (BlockInfo(cta_tiler[0]
    # * cta_group_size)); only the kv_blocks statistic depends on it
    return Sm100Options(tile_m=q_stage * 128 * (2 if use_2cta else 1), rescale_threshold=0.0 if width8 else 8.0,
                        max_offset=8 if width8 else 0, ex2_emu_freq=freq, ex2_emu_start_frg=start,
                        use_2cta_instrs=use_2cta, is_sm103=is_sm103)


def apply_overrides(opts, overrides: dict):
    """Replace fields of an options dataclass; unknown names raise ValueError listing the allowed ones."""
    names = {f.name for f in fields(opts)}
    bad = sorted(set(overrides) - names)
    if bad:
        raise ValueError(f"unknown option(s) {bad} for this kernel; allowed: {sorted(names)}")
    new = replace(opts, **overrides)
    if new.gemm not in GEMM_MODELS:
        raise ValueError(f"gemm must be one of {GEMM_MODELS}, got {new.gemm!r}")
    if new.tile_n < 16 or new.tile_n % 16:
        raise ValueError(f"tile_n must be a positive multiple of 16, got {new.tile_n}")
    if new.tile_m < 1:
        raise ValueError(f"tile_m must be >= 1, got {new.tile_m}")
    return new
