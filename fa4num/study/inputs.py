"""Seeded q, k inputs for the skip-rate study, as torch tensors in FA4's layout (seqlen, heads, head_dim).

Only q and k matter for the lazy-rescale statistic (it depends on S = q k^T alone). Every array is drawn with a
``torch.Generator`` seeded from (seed, distribution) on the device that runs the study, in float32, then rounded
once to bf16, the kernel's input dtype. The CPU and CUDA generators give different streams: a result row records
its ``device``, and rows from different devices are different samples of the same distribution. Distributions (``DISTRIBUTIONS``):

- ``gaussian``: q, k ~ N(0, 1), not causal.
- ``outliers``: outlier channels, as LLM activations have them: q, k ~ N(0, 1) with ``OUTLIER_CHANNELS`` fixed
  channels (the same for every token) scaled by ``OUTLIER_MULT``. Not causal.
- ``sink``: an attention sink on key 0 (the key FA4 visits last, ``flash_fwd_sm100.py`` walks KV blocks from
  ``n_block_max - 1`` down): channel 0 of every q is 1 and of every k 0, except k[0, :, 0] = ``SINK_NATS`` *
  sqrt(d), so every row's logit on key 0 gains ``SINK_NATS`` nats. Not causal.
- ``rising``: logits that rise in the order the kernel visits the keys (key index decreasing): channel 0 of q is
  1 and channel 0 of key j is ``RISE_NATS`` * sqrt(d) * (1 - j / seqlen), a ramp of ``RISE_NATS`` nats over the
  sequence on top of N(0, 1) content. The worst case for a rescale-on-every-growth kernel. Not causal.
- ``llm``: LLM-like causal GQA (``LLM_HEADS`` query heads sharing ``LLM_KV_HEADS`` key heads) with RoPE
  (base 10000, rotate-half pairing as in Llama) applied to q and k after adding per-head mean directions of norm
  ``LLM_MEAN_NORM`` * d^(1/4) (shared by all tokens of a head, so the mean-mean term is worth up to
  ``LLM_MEAN_NORM``^2 nats): the means make RoPE produce the recency bias and the
  position-dependent logits of real models; a sink on key 0 as in ``sink`` with ``LLM_SINK_NATS``.
- ``minilm``: the per-layer q, k of all-MiniLM-L6-v2 (``fa4num.attention.real_inputs``) on a fixed passage
  repeated up to the sequence length, at most 512 tokens (the model's position table); ``seed`` picks the layer
  (0..5). 12 heads of head_dim 32, not causal.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

DISTRIBUTIONS = ("gaussian", "outliers", "sink", "rising", "llm", "minilm")
OUTLIER_CHANNELS = (3, 17, 42, 101)
OUTLIER_MULT = 4.0
SINK_NATS = 8.0
RISE_NATS = 16.0
LLM_HEADS, LLM_KV_HEADS = 8, 2
LLM_MEAN_NORM = 1.5
LLM_SINK_NATS = 6.0
ROPE_BASE = 10000.0
MINILM_MAX_LEN = 512
MINILM_LAYERS = 6


@dataclass(frozen=True)
class StudyInputs:
    """q (seqlen, heads, d) and k (seqlen, heads_kv, d), bf16 torch tensors; causal flag."""
    q: object
    k: object
    causal: bool
    dist: str


def _gen(seed: int, dist: str, device):
    import torch
    g = torch.Generator(device=device)
    g.manual_seed(int(seed) * 1000 + DISTRIBUTIONS.index(dist))
    return g


def _rope(x, positions):
    """Llama's rotate-half RoPE on (seqlen, heads, d) float32: pairs (i, i + d/2) rotated by pos * base^(-2i/d)."""
    import torch
    d = x.shape[-1]
    inv = ROPE_BASE ** (-torch.arange(0, d // 2, dtype=torch.float64, device=x.device) * 2 / d)
    ang = positions.double()[:, None] * inv[None, :]
    cos, sin = ang.cos().float()[:, None, :], ang.sin().float()[:, None, :]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def make_study_inputs(dist: str, seqlen: int, *, heads: int = 4, head_dim: int = 128, seed: int = 0,
                      device="cpu") -> StudyInputs:
    """q, k for one skip-rate configuration (see the module docstring), on ``device``. ``heads`` is ignored by
    ``llm`` (8 query heads over 2 key heads) and ``minilm`` (12 heads of 32, computed on the CPU).

    Examples
    --------
    >>> inp = make_study_inputs("sink", 256, heads=2, head_dim=64, seed=1)
    >>> tuple(inp.q.shape), tuple(inp.k.shape), inp.causal
    ((256, 2, 64), (256, 2, 64), False)
    """
    import torch
    if dist not in DISTRIBUTIONS:
        raise ValueError(f"dist must be one of {DISTRIBUTIONS}, got {dist!r}")
    if seqlen < 1:
        raise ValueError(f"seqlen must be >= 1, got {seqlen}")
    if heads < 1 or head_dim < 8 or head_dim % 2:
        raise ValueError(f"heads must be >= 1 and head_dim an even number >= 8, got {heads}, {head_dim}")
    if dist == "minilm":
        inp = _minilm(seqlen, seed)
        return StudyInputs(inp.q.to(device), inp.k.to(device), inp.causal, inp.dist)
    g = _gen(seed, dist, device)
    dev = dict(generator=g, device=device)
    d = head_dim
    if dist == "llm":
        hq, hk = LLM_HEADS, LLM_KV_HEADS
        q = torch.randn(seqlen, hq, d, **dev)
        k = torch.randn(seqlen, hk, d, **dev)
        mq = torch.randn(1, hq, d, **dev)
        mk = torch.randn(1, hk, d, **dev)
        q += mq / mq.norm(dim=-1, keepdim=True) * LLM_MEAN_NORM * d ** 0.25
        k += mk / mk.norm(dim=-1, keepdim=True) * LLM_MEAN_NORM * d ** 0.25
        pos = torch.arange(seqlen, device=device)
        q, k = _rope(q, pos), _rope(k, pos)
        # the sink direction is not rotated (as a model's massive-activation channel pair at the lowest
        # frequency, which barely rotates): channel 0 after RoPE
        q[..., 0] = 1.0
        k[..., 0] = 0.0
        k[0, :, 0] = LLM_SINK_NATS * math.sqrt(d)
        return StudyInputs(q.bfloat16(), k.bfloat16(), True, dist)
    q = torch.randn(seqlen, heads, d, **dev)
    k = torch.randn(seqlen, heads, d, **dev)
    if dist == "outliers":
        ch = [c % d for c in OUTLIER_CHANNELS]
        q[..., ch] *= OUTLIER_MULT
        k[..., ch] *= OUTLIER_MULT
    elif dist == "sink":
        q[..., 0] = 1.0
        k[..., 0] = 0.0
        k[0, :, 0] = SINK_NATS * math.sqrt(d)
    elif dist == "rising":
        q[..., 0] = 1.0
        k[..., 0] = (RISE_NATS * math.sqrt(d) * (1.0 - torch.arange(seqlen, dtype=torch.float64, device=device) / seqlen)).float()[:, None]
    return StudyInputs(q.bfloat16(), k.bfloat16(), False, dist)


def _minilm(seqlen: int, layer: int) -> StudyInputs:
    import numpy as np
    import torch

    from fa4num.attention.real_inputs import PASSAGE
    if seqlen > MINILM_MAX_LEN:
        raise ValueError(f"seqlen must be <= {MINILM_MAX_LEN} for dist 'minilm' (the model's position table), "
                         f"got {seqlen}")
    if not 0 <= layer < MINILM_LAYERS:
        raise ValueError(f"seed picks the MiniLM layer for dist 'minilm': 0..{MINILM_LAYERS - 1}, got {layer}")
    text = " ".join([PASSAGE] * 3)   # ~840 word pieces, cut at seqlen
    qkv = _minilm_cached(text, seqlen)
    q, k, _ = qkv[layer]
    as_t = lambda a: torch.from_numpy(np.ascontiguousarray(a[0]).view(np.int16)).view(torch.bfloat16)  # noqa: E731
    return StudyInputs(as_t(q), as_t(k), False, "minilm")


@lru_cache(maxsize=1)
def _minilm_cached(text: str, seqlen: int):
    # the six layers come out of one forward pass: keep them for the other five tasks of this worker
    from fa4num.attention.real_inputs import minilm_qkv
    return minilm_qkv(text=text, dtype="bfloat16", max_len=seqlen)["layers"]
