"""Capture FA4's FlexAttention front door on the H200 (flash-attn-4 4.0.0b36, SM90 path): score_mod, mask_mod,
aux tensors and block sparsity, forward and backward, for fa4num's golden test
(tests/attention/test_flex_golden.py).

Each mod is written in CuTe DSL the way upstream's tests write them (tests/cute/score_mod_definitions.py,
mask_mod_definitions.py; FA4's own ``utils.create_softcap_scoremod`` for the soft cap), and called through
``flash_attn.cute.flash_attn_func``. Block-sparse calls get FA4's ``BlockSparseTensorsTorch`` built by
``fa4num.attention.flex.block_sparse_tensors`` (ascending block lists, as FlexAttention's ``create_block_mask``)
and each has a dense twin (the same mask_mod, no sparse tensors) whose bit equality on the GPU is recorded.

Run on the device machine after ``. fa4num/gpu/fa4-env.sh`` (torch, flash_attn.cute, numpy, ml_dtypes, numba and
fa4num from the repo on PYTHONPATH):

    python experiments/gpu/flex_capture.py --out $OUT/fa4_sm90_flex_h200.npz --rev <git rev>

``--only SUBSTR[,SUBSTR]`` keeps the cases whose name contains one of them; ``--sets dev,holdout`` picks the sets
(holdout: other seeds and lengths, ``--holdout-seed``); ``--dry-run`` builds every case and writes the file with
fa4num's emulator standing in for the kernel (CPU, no CuTe: checks the case list and the bookkeeping).
Written: one .npz (< 4 MB) with ``meta`` (JSON: provenance, the cases, per case the input SHA-256, the outputs'
SHA-256, determinism, GPU twin equality, or the exception text) and per case ``NAME.lse`` (float32, full),
``NAME.out_rows`` (uint16 bits of the first and last 8 query rows), the aux tensors and block-sparse tensors it
used (``NAME.aux0``, ``NAME.bs.mask_block_cnt``, ...), and for backward cases ``NAME.{dq,dk,dv}_rows``.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import importlib.metadata
import json
import pathlib
import subprocess
import sys
import time
import traceback

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fa4num.attention import flex  # noqa: E402  (numpy/numba only: runs on the device machine)
from fa4num.attention.inputs import CaseSpec, make_inputs  # noqa: E402

SAMPLE_ROWS = 8
SPARSE_TILE = (128, 128)    # SM90's tile for head dims 64 and 128 with sparse blocks of 128 query rows


# ---------------------------------------------------------------------------------------------- cases
def _case(name, *, sq, sk, h=2, hk=2, d=128, dtype="bfloat16", seed=0, score=None, mask=None, aux=(),
          sparse=None, twin=None, softcap=None, softmax_scale=None, pack_gqa=None, backward=False, q_mult=1.0,
          **params):
    return {"name": name, "batch": 1, "seqlen_q": sq, "seqlen_k": sk, "heads": h, "heads_kv": hk, "head_dim": d,
            "dtype": dtype, "seed": seed, "score_mod": score, "mask_mod": mask, "aux": list(aux), "sparse": sparse,
            "twin": twin, "softcap": softcap, "softmax_scale": softmax_scale, "pack_gqa": pack_gqa,
            "backward": backward, "q_mult": q_mult, "params": params}


def cases(holdout_seed: int | None = None) -> list[dict]:
    """The capture's cases; ``holdout_seed``: the held-out set (other seeds, lengths shifted by 7..23)."""
    s = 0 if holdout_seed is None else holdout_seed
    j = 0 if holdout_seed is None else 7 + holdout_seed % 17
    tag = "dev" if holdout_seed is None else "holdout"
    c = [
        # score_mods (no mask): the scale is applied before the mod and the softmax runs with LOG2_E
        _case("sm_identity_d128", sq=300 + j, sk=300 + j, score="identity", seed=s + 1),
        _case("sm_times_two_d64", sq=257 + j, sk=300, d=64, score="times_two", seed=s + 2),
        _case("sm_rel_bias_d128", sq=200 + j, sk=333, score="rel_bias", seed=s + 3),
        _case("sm_rel_bias_pow2scale_d128", sq=200, sk=333 + j, score="rel_bias", softmax_scale=0.125, seed=s + 4),
        _case("sm_rel_bias_clamped_d64", sq=300, sk=300 + j, d=64, score="rel_bias_clamped", clamp=32, seed=s + 5),
        _case("sm_alibi_aux_d128", sq=256 + j, sk=256 + j, h=4, hk=4, score="alibi_aux", aux=("slopes",),
              seed=s + 6),
        _case("sm_alibi_aux_fp16_d64", sq=300 + j, sk=200, d=64, h=4, hk=4, dtype="float16", score="alibi_aux",
              aux=("slopes",), seed=s + 7),
        _case("sm_alibi_exp2_d128", sq=200 + j, sk=260, h=4, hk=4, score="alibi_exp2", seed=s + 8),
        _case("sm_softcap20_d128", sq=220 + j, sk=310, score="softcap", cap=20.0, q_mult=3.0, seed=s + 9),
        _case("opt_softcap20_d128", sq=220 + j, sk=310, softcap=20.0, q_mult=3.0, seed=s + 9),
        # mask_mods, dense
        _case("mm_causal_d128", sq=300 + j, sk=400, mask="causal", seed=s + 10),
        _case("mm_window64_0_d64", sq=333, sk=333 + j, d=64, mask="window", left=64, right=0, seed=s + 11),
        _case("mm_window32_32_d128", sq=257 + j, sk=300, mask="window", left=32, right=32, seed=s + 12),
        _case("mm_prefix_lm100_d128", sq=300 + j, sk=300 + j, mask="prefix_lm", prefix=100, seed=s + 13),
        _case("mm_document_d64", sq=384 + j, sk=384 + j, d=64, mask="document", aux=("docs",),
              docs=[50, 130 + j, 77, 127], seed=s + 14),
        _case("mm_document_gqa_fp16_d128", sq=300, sk=300, h=4, hk=2, dtype="float16", mask="document",
              aux=("docs",), docs=[100 + j, 64, 136 - j], seed=s + 15),
        _case("mm_causal_packgqa_d128", sq=200 + j, sk=260, h=4, hk=1, mask="causal", pack_gqa=True, seed=s + 16),
        _case("mm_causal_alibi_d128", sq=260, sk=260 + j, h=4, hk=4, mask="causal", score="alibi_aux",
              aux=("slopes",), seed=s + 17),
        # block sparsity and the dense twins (same inputs, same mask_mod, no sparse tensors)
        _case("bs_causal_d128", sq=384 + j, sk=384 + j, mask="causal", sparse={"full": True}, twin="dense",
              seed=s + 20),
        _case("bs_document_d128", sq=512, sk=512, mask="document", aux=("docs",), docs=[100 + j, 200, 90, 122 - j],
              sparse={"full": True}, twin="dense", seed=s + 21),
        _case("bs_document_nofull_d128", sq=512, sk=512, mask="document", aux=("docs",),
              docs=[100 + j, 200, 90, 122 - j], sparse={"full": False}, twin="dense", seed=s + 21),
        _case("bs_prefix_lm_d64", sq=400 + j, sk=400 + j, d=64, mask="prefix_lm", prefix=200, sparse={"full": True},
              twin="dense", seed=s + 22),
        _case("bs_window64_64_d128", sq=500 + j, sk=500, mask="window", left=64, right=64, sparse={"full": True},
              twin="dense", seed=s + 23),
        _case("bs_causal_alibi_d128", sq=300, sk=300 + j, h=4, hk=4, mask="causal", score="alibi_aux",
              aux=("slopes",), sparse={"full": True}, twin="dense", seed=s + 24),
        _case("bs_causal_gqa_bcast_d128", sq=256 + j, sk=256 + j, h=4, hk=2, mask="causal",
              sparse={"full": True, "heads": 1}, twin="dense", seed=s + 25),
        # backward (FA4's SM90 backward with mods; dQ deterministic)
        _case("bwd_mm_causal_d128", sq=256 + j, sk=300, mask="causal", backward=True, seed=s + 30),
        _case("bwd_mm_document_d64", sq=300, sk=300, d=64, mask="document", aux=("docs",), docs=[120 + j, 180 - j],
              backward=True, seed=s + 31),
        _case("bwd_sm_rel_bias_d128", sq=200 + j, sk=260, score="rel_bias", backward=True, seed=s + 32),
        _case("bwd_sm_softcap10_d128", sq=200, sk=260 + j, score="softcap", cap=10.0, q_mult=2.0, backward=True,
              seed=s + 33),
        _case("bwd_sm_alibi_mm_window_d128", sq=240 + j, sk=300, h=4, hk=4, score="alibi_aux", aux=("slopes",),
              mask="window", left=64, right=32, backward=True, seed=s + 34),
        # a long document cut by block edges: KV blocks whose full query blocks follow a partial one
        _case("bwd_bs_document_d128", sq=640, sk=640, mask="document", aux=("docs",), docs=[100 + j, 480, 60 - j],
              sparse={"full": True}, twin="dense", backward=True, seed=s + 35),
        _case("bwd_bs_causal_d64", sq=384 + j, sk=384 + j, d=64, mask="causal", sparse={"full": True},
              twin="dense", backward=True, seed=s + 36),
    ]
    for x in c:
        x["set"] = tag
        x["name"] = f"{tag}.{x['name']}"
    return c


def case_inputs(case: dict) -> dict:
    """q, k, v (and dout for backward cases), the aux tensors and the block-sparse tensors of a case, as numpy:
    a pure function of the case (the golden test rebuilds them)."""
    spec = CaseSpec(case["name"], "normal", case["batch"], case["seqlen_q"], case["seqlen_k"], case["heads"],
                    case["heads_kv"], case["head_dim"], False, dtype=case["dtype"], q_mult=case["q_mult"],
                    seed=case["seed"])
    q, k, v = make_inputs(spec)
    out = {"q": q, "k": k, "v": v}
    if case["backward"]:
        rng = np.random.default_rng(case["seed"] + 7919)
        out["dout"] = rng.standard_normal(q.shape, dtype=np.float32).astype(q.dtype)
    aux = []
    for a in case["aux"]:
        if a == "slopes":
            aux.append(flex.alibi_slopes(case["heads"]))
        elif a == "docs":
            docs = case["params"]["docs"]
            if sum(docs) != case["seqlen_k"] or case["seqlen_q"] != case["seqlen_k"]:
                raise ValueError(f"{case['name']}: document lengths {docs} must add up to seqlen {case['seqlen_k']}")
            ids = np.repeat(np.arange(len(docs), dtype=np.int32), docs)
            aux.append(np.ascontiguousarray(np.broadcast_to(ids, (case["batch"], case["heads"], ids.size))))
        else:
            raise ValueError(f"unknown aux {a!r}")
    out["aux"] = aux
    if case["sparse"] is not None:
        heads = case["sparse"].get("heads", case["heads"])
        kw = dict(batch=case["batch"], heads=heads, seqlen_q=case["seqlen_q"], seqlen_k=case["seqlen_k"],
                  block_size=SPARSE_TILE, aux_tensors=aux or None, full_blocks=case["sparse"]["full"])
        mm = emulator_mask_mod(case)
        out["bs"] = flex.block_sparse_tensors(mm, **kw)
        if case["backward"]:
            out["bs_bwd"] = flex.block_sparse_tensors(mm, q_direction=True, **kw)
    return out


def emulator_mask_mod(case):
    """fa4num's version of the case's mask_mod (the built-ins of :mod:`fa4num.attention.flex`)."""
    p, m = case["params"], case["mask_mod"]
    if m is None:
        return None
    return {"causal": lambda: flex.causal_mask(), "window": lambda: flex.sliding_window_mask(p["left"], p["right"]),
            "prefix_lm": lambda: flex.prefix_lm_mask(p["prefix"]), "document": lambda: flex.document_mask()}[m]()


def emulator_score_mod(case, *, contract=True):
    """fa4num's version of the case's score_mod; ``contract``: the built-ins' bias add contracted with FA4's
    scale multiply (see :func:`fa4num.attention.flex.scaled_add`)."""
    p, m = case["params"], case["score_mod"]
    if m is None:
        return None
    if m == "identity":
        return lambda score, b, h, q_idx, kv_idx, seqlen_info, aux_tensors: score
    if m == "times_two":
        return lambda score, b, h, q_idx, kv_idx, seqlen_info, aux_tensors: (score * np.float32(2)).astype(
            np.float32)
    if m == "rel_bias":
        return flex.rel_bias_mod(contract=contract)
    if m == "rel_bias_clamped":
        return flex.rel_bias_mod(clamp=p["clamp"], contract=contract)
    if m == "alibi_aux":
        return flex.alibi_mod(contract=contract)
    if m == "alibi_exp2":
        return flex.alibi_exp2_mod(contract=contract)
    if m == "softcap":
        return flex.softcap_mod(p["cap"])
    raise ValueError(f"unknown score_mod {m!r}")


def emulator_score_mod_bwd(case):
    """fa4num's version of the case's score_mod_bwd (the soft cap's derivative, else the additive mods' 1)."""
    if case["score_mod"] is None:
        return None
    if case["score_mod"] == "softcap":
        return flex.softcap_mod_bwd(case["params"]["cap"])
    return flex.passthrough_bwd()


def emulate(case, arrs, *, sparse: bool = True, contract: bool = True) -> dict:
    """fa4num's bits for a case: out and LSE, and dq/dk/dv for a backward case (block-sparse: with the
    query-direction tensors, ``block_sparse_tensors_bwd``)."""
    from fa4num.attention import backward, forward
    kw = dict(softmax_scale=case["softmax_scale"], softcap=case["softcap"] or 0.0, kernel="fa4-sm90",
              score_mod=emulator_score_mod(case, contract=contract), mask_mod=emulator_mask_mod(case),
              aux_tensors=arrs["aux"] or None, pack_gqa=case["pack_gqa"])
    if sparse and "bs" in arrs:
        kw["block_sparse_tensors"] = arrs["bs"]
    r = forward(arrs["q"], arrs["k"], arrs["v"], **kw)
    res = {"out": r.out.view(np.uint16), "lse": r.lse}
    if case["backward"]:
        if sparse and "bs_bwd" in arrs:
            kw["block_sparse_tensors_bwd"] = arrs["bs_bwd"]
        g = backward(arrs["q"], arrs["k"], arrs["v"], r.out, arrs["dout"], r.lse, deterministic=True,
                     score_mod_bwd=emulator_score_mod_bwd(case), **kw)
        res.update(dq=g.dq.view(np.uint16), dk=g.dk.view(np.uint16), dv=g.dv.view(np.uint16))
    return res


# ---------------------------------------------------------------------------------------------- CuTe DSL mods
def cute_mods():
    """The CuTe DSL mods, written as upstream's tests write them; built only on the device machine."""
    import operator

    import cutlass
    import cutlass.cute as cute
    from cutlass._mlir.dialects import math as mlir_math
    from flash_attn.cute import utils as fa_utils

    @cute.jit
    def sm_identity(tSrS_ssa, b_idx, h_idx, q_idx, kv_idx, seqlen_info, aux_tensors):
        return tSrS_ssa

    @cute.jit
    def sm_times_two(tSrS_ssa, b_idx, h_idx, q_idx, kv_idx, seqlen_info, aux_tensors):
        return tSrS_ssa * cute.full_like(tSrS_ssa, 2)

    @cute.jit
    def sm_rel_bias(tSrS_ssa, b_idx, h_idx, q_idx, kv_idx, seqlen_info, aux_tensors):
        diff = q_idx - kv_idx
        abs_diff = cute.TensorSSA(mlir_math.absi(diff), diff.shape, diff.dtype)
        return tSrS_ssa + abs_diff.to(cutlass.Float32)

    def make_rel_bias_clamped(clamp):
        @cute.jit
        def sm_rel_bias_clamped(tSrS_ssa, b_idx, h_idx, q_idx, kv_idx, seqlen_info, aux_tensors):
            diff = q_idx - kv_idx
            abs_diff = cute.TensorSSA(mlir_math.absi(diff), diff.shape, diff.dtype)
            capped = cute.where(operator.le(abs_diff, cute.full_like(abs_diff, clamp)), abs_diff,
                                cute.full_like(abs_diff, clamp))
            return tSrS_ssa + capped.to(cutlass.Float32)
        return sm_rel_bias_clamped

    @cute.jit
    def sm_alibi_aux(tSrS_ssa, b_idx, h_idx, q_idx, kv_idx, seqlen_info, aux_tensors):
        # the slopes from aux_tensors[0] (float32 (heads,)), read as upstream's score_mod_dual_buffer reads them
        slopes = aux_tensors[0]
        h_frag = cute.make_rmem_tensor(1, cutlass.Int32)
        h_frag.store(h_idx)
        s_frag = cute.make_rmem_tensor(1, slopes.element_type)
        s_frag[0] = slopes[h_frag[0]]
        slope = s_frag.load().to(cutlass.Float32)
        diff = q_idx - kv_idx
        abs_diff = cute.TensorSSA(mlir_math.absi(diff), diff.shape, diff.dtype).to(cutlass.Float32)
        return tSrS_ssa - slope * abs_diff

    @cute.jit
    def sm_alibi_exp2(tSrS_ssa, b_idx, h_idx, q_idx, kv_idx, seqlen_info, aux_tensors):
        # upstream's score_mod_alibi verbatim
        score = tSrS_ssa.to(cutlass.Float32)
        slope_exp = (h_idx + cute.full_like(h_idx, 1)) * cute.full_like(h_idx, -8)
        slope = cute.math.exp2(slope_exp.to(cutlass.Float32)
                               * cute.full_like(score, 0.125 * 0.6931471805599453 * 1.4426950408889634))
        diff = q_idx - kv_idx
        abs_diff = cute.TensorSSA(mlir_math.absi(diff), diff.shape, diff.dtype).to(cutlass.Float32)
        return score - slope * abs_diff

    @cute.jit
    def sm_bwd_identity(grad, score, b_idx, h_idx, q_idx, kv_idx, seqlen_info, aux_tensors):
        return grad

    @cute.jit
    def mm_causal(batch, head, m_idx, n_idx, seqlen_info, aux_tensors):
        offset = seqlen_info.seqlen_k - seqlen_info.seqlen_q
        offset_ssa = fa_utils.scalar_to_ssa(offset, cutlass.Int32)
        return n_idx <= (m_idx + offset_ssa)

    def make_window(window_left, window_right):
        @cute.jit
        def mm_window(batch, head, m_idx, n_idx, seqlen_info, aux_tensors):
            offset = seqlen_info.seqlen_k - seqlen_info.seqlen_q
            offset_ssa = fa_utils.scalar_to_ssa(offset, cutlass.Int32)
            left_ssa = fa_utils.scalar_to_ssa(window_left, cutlass.Int32)
            right_ssa = fa_utils.scalar_to_ssa(window_right, cutlass.Int32)
            center = m_idx + offset_ssa
            return (n_idx >= center - left_ssa) & (n_idx <= center + right_ssa)
        return mm_window

    def make_prefix_lm(prefix):
        @cute.jit
        def mm_prefix_lm(batch, head, m_idx, n_idx, seqlen_info, aux_tensors):
            prefix_ssa = fa_utils.scalar_to_ssa(prefix, cutlass.Int32)
            both_in_prefix = (m_idx < prefix_ssa) & (n_idx < prefix_ssa)
            return both_in_prefix | (m_idx >= n_idx)
        return mm_prefix_lm

    @cute.jit
    def mm_document(batch, head, m_idx, n_idx, seqlen_info, aux_tensors):
        doc_id = aux_tensors[0]
        m_doc = fa_utils.scalar_to_ssa(doc_id[batch[0], head[0], m_idx[0]], cutlass.Int32)
        n_doc = fa_utils.scalar_to_ssa(doc_id[batch[0], head[0], n_idx[0]], cutlass.Int32)
        return m_doc == n_doc

    def score(case):
        p, m = case["params"], case["score_mod"]
        if m is None:
            return None, None
        if m == "softcap":
            return fa_utils.create_softcap_scoremod(p["cap"]), fa_utils.create_softcap_scoremod_bwd(p["cap"])
        fwd = {"identity": sm_identity, "times_two": sm_times_two, "rel_bias": sm_rel_bias,
               "alibi_aux": sm_alibi_aux, "alibi_exp2": sm_alibi_exp2}.get(m)
        if m == "rel_bias_clamped":
            fwd = make_rel_bias_clamped(p["clamp"])
        # d(score + bias)/d score = 1: the gradient passes through (times_two is forward-only here)
        return fwd, sm_bwd_identity

    def mask(case):
        p, m = case["params"], case["mask_mod"]
        if m is None:
            return None
        return {"causal": lambda: mm_causal, "window": lambda: make_window(p["left"], p["right"]),
                "prefix_lm": lambda: make_prefix_lm(p["prefix"]), "document": lambda: mm_document}[m]()

    return score, mask


# ---------------------------------------------------------------------------------------------- running
def _sha(*arrays) -> str:
    return hashlib.sha256(b"".join(np.ascontiguousarray(a).tobytes() for a in arrays)).hexdigest()


def _rows(a: np.ndarray) -> np.ndarray:
    """The first and last SAMPLE_ROWS query rows of a (batch, seqlen, heads, dim) array."""
    n = a.shape[1]
    idx = np.unique(np.r_[np.arange(min(SAMPLE_ROWS, n)), np.arange(max(0, n - SAMPLE_ROWS), n)])
    return np.ascontiguousarray(a[:, idx])


def sample_index(n: int) -> np.ndarray:
    """The query rows :func:`_rows` keeps of a sequence of n rows (the golden test reads them back)."""
    return np.unique(np.r_[np.arange(min(SAMPLE_ROWS, n)), np.arange(max(0, n - SAMPLE_ROWS), n)])


class GpuRunner:
    """Runs a case on FA4 (flash_attn.cute.flash_attn_func) and returns numpy bits."""

    def __init__(self):
        import torch
        from flash_attn.cute import flash_attn_func
        from flash_attn.cute.block_sparsity import BlockSparseTensorsTorch, compute_dq_write_order
        self.torch, self.fn, self.BS = torch, flash_attn_func, BlockSparseTensorsTorch
        self.dq_write_order = compute_dq_write_order
        self.score, self.mask = cute_mods()

    def _t(self, a):
        torch = self.torch
        if a.dtype == np.float16 or a.dtype == np.float32 or a.dtype == np.int32:
            return torch.from_numpy(np.ascontiguousarray(a)).cuda()
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16).cuda()

    def _bits(self, t):
        return t.detach().contiguous().view(self.torch.int16).cpu().numpy().view(np.uint16)

    def _bs(self, d, fwd=None):
        """FA4's BlockSparseTensorsTorch of a dict; ``fwd``: the forward's dict, for the backward's tensors,
        which the deterministic backward needs with their dQ write order (``compute_dq_write_order``, spt off:
        the mask_mod call is neither causal nor local)."""
        if d is None:
            return None
        t = {n: self._t(d[n]) for n in ("mask_block_cnt", "mask_block_idx", "full_block_cnt", "full_block_idx")}
        extra = {}
        if fwd is not None:
            f = {n: self._t(fwd[n]) for n in t}
            order, order_full = self.dq_write_order(
                f["mask_block_cnt"], f["mask_block_idx"], f["full_block_cnt"], f["full_block_idx"],
                t["mask_block_cnt"], t["mask_block_idx"], t["full_block_cnt"], t["full_block_idx"], spt=False)
            extra = dict(dq_write_order=order, dq_write_order_full=order_full, spt=False)
        return self.BS(**t, block_size=tuple(d["block_size"]), **extra)

    def run(self, case, arrs, *, sparse: bool = True) -> dict:
        torch = self.torch
        q, k, v = (self._t(arrs[n]) for n in ("q", "k", "v"))
        grad = case["backward"]
        if grad:
            for t in (q, k, v):
                t.requires_grad_(True)
        score_mod, score_mod_bwd = self.score(case)
        kw = dict(softmax_scale=case["softmax_scale"], causal=False, return_lse=True,
                  softcap=case["softcap"] or 0.0, deterministic=True, score_mod=score_mod,
                  score_mod_bwd=score_mod_bwd if grad else None, mask_mod=self.mask(case),
                  aux_tensors=[self._t(a) for a in arrs["aux"]] or None)
        if case["pack_gqa"] is not None:
            kw["pack_gqa"] = case["pack_gqa"]
        if sparse and "bs" in arrs:
            kw["block_sparse_tensors"] = self._bs(arrs["bs"])
            kw["block_sparse_tensors_bwd"] = self._bs(arrs.get("bs_bwd"), fwd=arrs["bs"])
        o, lse = self.fn(q, k, v, **kw)
        res = {"out": self._bits(o), "lse": lse.detach().float().cpu().numpy()}
        if grad:
            dq, dk, dv = torch.autograd.grad(o, (q, k, v), self._t(arrs["dout"]))
            res.update(dq=self._bits(dq), dk=self._bits(dk), dv=self._bits(dv))
        torch.cuda.synchronize()
        return res


class EmulatorRunner:
    """``--dry-run``: fa4num's emulator stands in for the kernel (:func:`emulate`)."""

    def run(self, case, arrs, *, sparse: bool = True) -> dict:
        return emulate(case, arrs, sparse=sparse)


def _same(a: dict, b: dict) -> bool:
    return all(np.array_equal(np.asarray(a[n]).view(np.uint8), np.asarray(b[n]).view(np.uint8)) for n in a)


def capture(case_list, runner, prov, *, save=None, budget_s: float | None = None) -> tuple[dict, dict]:
    """Run every case (one failing case records its exception and the rest go on): (arrays, meta). ``save``
    (arrays, meta) is called after every case, so a run cut short keeps what it did; past ``budget_s`` seconds
    no new case starts (those left are recorded as skipped)."""
    arrays, recs = {}, []
    start = time.time()
    for case in case_list:
        name, t0 = case["name"], time.time()
        if budget_s is not None and t0 - start > budget_s:
            recs.append({"case": case, "error": f"skipped: the run's budget of {budget_s} s was spent"})
            print(f"{name}: skipped (budget)", flush=True)
            continue
        rec = {"case": case}
        try:
            arrs = case_inputs(case)
            rec["input_sha256"] = _sha(*(arrs[n] for n in ("q", "k", "v", "dout") if n in arrs))
            for i, a in enumerate(arrs["aux"]):
                arrays[f"{name}.aux{i}"] = a
            for key in ("bs", "bs_bwd"):
                for f in ("mask_block_cnt", "mask_block_idx", "full_block_cnt", "full_block_idx"):
                    if key in arrs:
                        arrays[f"{name}.{key}.{f}"] = arrs[key][f]
            res = runner.run(case, arrs)
            again = runner.run(case, arrs)
            rec["deterministic"] = bool(_same(res, again))
            rec["sha256"] = {n: _sha(a) for n, a in res.items()}
            arrays[f"{name}.lse"] = np.asarray(res["lse"], np.float32)
            for n in ("out", "dq", "dk", "dv"):
                if n in res:
                    arrays[f"{name}.{n}_rows"] = _rows(np.asarray(res[n]))
            if case["twin"] == "dense":
                dense = runner.run(case, arrs, sparse=False)
                rec["twin_sha256"] = {n: _sha(a) for n, a in dense.items()}
                rec["equal_to_dense"] = bool(_same(res, dense))
                arrays[f"{name}.twin_lse"] = np.asarray(dense["lse"], np.float32)
            status = f"det={rec['deterministic']}" + (f" equal_to_dense={rec['equal_to_dense']}"
                                                     if "equal_to_dense" in rec else "")
        except Exception as e:  # noqa: BLE001  a failing case is data: record the message, go on
            rec["error"] = f"{type(e).__name__}: {e}"[:1500]
            rec["traceback"] = traceback.format_exc()[-3000:]
            status = "ERROR " + rec["error"][:300]
        rec["seconds"] = round(time.time() - t0, 2)
        recs.append(rec)
        print(f"{name}: {rec['seconds']}s {status}", flush=True)
        if save is not None:
            save(arrays, {"provenance": prov, "cases": recs})
    meta = {"provenance": prov, "cases": recs}
    if save is not None:
        save(arrays, meta)
    return arrays, meta


def write(path, arrays: dict, meta: dict) -> None:
    """The capture file: ``meta`` as JSON plus the arrays (written to a temporary name, then renamed, so a
    killed run leaves the last complete file)."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez_compressed(tmp, meta=np.array(json.dumps(meta)), **arrays)
    tmp.replace(path)


def read(path) -> tuple[dict, dict]:
    """(arrays, meta) of a capture file."""
    with np.load(path, allow_pickle=False) as z:
        arrays = {n: z[n] for n in z.files if n != "meta"}
        meta = json.loads(str(z["meta"]))
    return arrays, meta


def merge(paths, out) -> dict:
    """One capture file from several (e.g. the dev and holdout sets run in two device calls): the cases in
    order, a later file's case replacing an earlier one of the same name; the provenances kept per part."""
    arrays, cases_by_name, provs = {}, {}, []
    for p in paths:
        a, m = read(p)
        provs.append(m["provenance"])
        for rec in m["cases"]:
            name = rec["case"]["name"]
            for n in [n for n in arrays if n.startswith(name + ".")]:
                del arrays[n]
            cases_by_name.pop(name, None)
            cases_by_name[name] = rec
        arrays.update(a)
    meta = {"provenance": provs[0] if len(provs) == 1 else {**provs[-1], "parts": provs},
            "cases": list(cases_by_name.values())}
    write(out, arrays, meta)
    return meta


def provenance(rev, *, dry_run: bool) -> dict:
    def ver(p):
        try:
            return importlib.metadata.version(p)
        except importlib.metadata.PackageNotFoundError:
            return None
    prov = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "code_revision": rev, "dry_run": dry_run, "python": sys.version.split()[0],
            "packages": {p: ver(p) for p in ("torch", "flash-attn-4", "nvidia-cutlass-dsl", "numpy", "ml_dtypes")}}
    if not dry_run:
        import torch
        prov["gpu"] = torch.cuda.get_device_name()
        prov["torch_cuda"] = torch.version.cuda
        try:
            prov["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                            capture_output=True, text=True).stdout.strip()
        except OSError:
            prov["driver"] = None
    return prov


def select(case_list, only: str) -> list:
    keys = [x for x in only.split(",") if x]
    return [c for c in case_list if not keys or any(k in c["name"] for k in keys)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="the .npz to write")
    ap.add_argument("--rev", default=None, help="the repository revision, for the provenance")
    ap.add_argument("--only", default="", help="comma-separated substrings of case names to keep")
    ap.add_argument("--sets", default="dev,holdout", help="dev, holdout or both")
    ap.add_argument("--holdout-seed", type=int, default=1000)
    ap.add_argument("--dry-run", action="store_true", help="no GPU: fa4num's emulator stands in for FA4")
    ap.add_argument("--budget-s", type=float, default=540.0, help="start no case after this many seconds")
    ap.add_argument("--merge", nargs="+", default=None, metavar="NPZ",
                    help="merge these capture files into --out and exit (no kernel runs)")
    args = ap.parse_args(argv)
    if args.merge:
        meta = merge(args.merge, args.out)
        print(f"-> {args.out}: {len(meta['cases'])} cases from {len(args.merge)} files")
        return 0
    sets = args.sets.split(",")
    bad = [x for x in sets if x not in ("dev", "holdout")]
    if bad or not sets:
        ap.error(f"--sets must name dev and/or holdout, got {args.sets!r}")
    per_set = [cases() if x == "dev" else cases(args.holdout_seed) for x in ("dev", "holdout") if x in sets]
    # interleaved (dev case i, holdout case i, ...): the two share one compiled kernel, and a run cut short by
    # the budget keeps both sets' first cases
    case_list = select([c for group in zip(*per_set) for c in group], args.only)
    if not case_list:
        ap.error(f"--only {args.only!r} keeps no case")
    runner = EmulatorRunner() if args.dry_run else GpuRunner()
    out = pathlib.Path(args.out)
    arrays, meta = capture(case_list, runner, provenance(args.rev, dry_run=args.dry_run),
                           save=lambda a, m: write(out, a, m), budget_s=args.budget_s)
    ok = [r for r in meta["cases"] if "error" not in r]
    print(f"-> {out} ({out.stat().st_size / 1e6:.2f} MB): {len(ok)}/{len(meta['cases'])} cases ran", flush=True)
    for r in meta["cases"]:
        if "error" in r and not r["error"].startswith("skipped"):
            print(f"   FAILED {r['case']['name']}: {r['error'][:200]}", flush=True)
    skipped = [r["case"]["name"].split(".", 1)[1] for r in meta["cases"] if r.get("error", "").startswith("skipped")]
    if skipped:
        print(f"   budget spent: rerun the rest with --only {','.join(dict.fromkeys(skipped))} (then --merge)")
    twins = [r for r in ok if "equal_to_dense" in r]
    if twins:
        print("   sparse == dense: " + ", ".join(f"{r['case']['name']}={r['equal_to_dense']}" for r in twins))
    return 0


if __name__ == "__main__":
    sys.exit(main())
