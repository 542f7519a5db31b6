"""Seeded attention inputs that are a pure function of a small spec, so golden files need not store them.

Only numpy and ml_dtypes are used here: the GPU capture script loads this file by path on the device
machine, and CI regenerates exactly the same bits from the spec stored in each golden file.

Kinds (docs/notes/h200-measurements.md, section 3):
- ``"normal"``: q, k, v ~ N(0, 1) (times ``q_mult`` for q), drawn in float32 and rounded once to the dtype.
- ``"exact"``: q and k on the grid k/8 with |entries| <= 1 and head_dim <= 256, so every partial sum of
  QK^T is a multiple of 1/64 below 2^8 and therefore exact in fp32 whatever the tensor-core order;
  v ~ N(0, 1).
- ``"exact_onehot"``: as ``"exact"`` but V[b, key, h, key mod d] = 1, so that with seqlen_k <= head_dim each
  output column holds one bf16 P value divided by the row sum (PV is exact as well).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import ml_dtypes
import numpy as np

KINDS = ("normal", "exact", "exact_onehot")
DTYPES = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}


@dataclass(frozen=True)
class CaseSpec:
    """One attention problem: shapes in FA4's layout (batch, seqlen, heads, head_dim)."""
    name: str
    kind: str
    batch: int
    seqlen_q: int
    seqlen_k: int
    heads: int
    heads_kv: int
    head_dim: int
    causal: bool
    dtype: str = "bfloat16"
    softmax_scale: float | None = None
    q_mult: float = 1.0
    seed: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


def make_inputs(spec: CaseSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (q, k, v) as numpy arrays of ``spec.dtype`` (ml_dtypes.bfloat16 or float16)."""
    if spec.kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {spec.kind!r}")
    if spec.dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {tuple(DTYPES)}, got {spec.dtype!r}")
    dt = DTYPES[spec.dtype]
    rng = np.random.default_rng(spec.seed)
    qs = (spec.batch, spec.seqlen_q, spec.heads, spec.head_dim)
    ks = (spec.batch, spec.seqlen_k, spec.heads_kv, spec.head_dim)
    if spec.kind == "normal":
        q = rng.standard_normal(qs, dtype=np.float32) * np.float32(spec.q_mult)
        k = rng.standard_normal(ks, dtype=np.float32)
        v = rng.standard_normal(ks, dtype=np.float32)
    else:
        # multiples of 1/8 in [-1, 1]: 4 significant bits, exact in bf16 and fp16
        q = (rng.integers(-8, 9, size=qs).astype(np.float32) / 8) * np.float32(spec.q_mult)
        k = rng.integers(-8, 9, size=ks).astype(np.float32) / 8
        if spec.kind == "exact":
            v = rng.standard_normal(ks, dtype=np.float32)
        else:
            v = np.zeros(ks, dtype=np.float32)
            key = np.arange(spec.seqlen_k)
            v[:, key, :, key % spec.head_dim] = 1.0
    return q.astype(dt), k.astype(dt), v.astype(dt)


SCORE_DISTS = ("gaussian", "outliers", "sink", "jumps", "masked")


def softmax_scores(dist: str, rows: int, blocks: int, *, scale_log2: float, seed: int = 0,
                   block: int = 128) -> np.ndarray:
    """S rows (float32, (rows, blocks * block)) for the softmax-stage checks, blocks in the order the kernel
    visits them (first = the rightmost KV block). Drawn as z = S * scale_log2 (log2 units), then S = RN(z / scale).

    gaussian: z ~ N(0, 4^2). outliers: N(0, 2^2) plus U(10, 40) on 0.1% of the entries. sink: N(0, 2^2) plus
    U(5, 40) on key 0 (the last block visited). jumps: N(0, 2^2) plus a per-block offset growing by U(0, 16)
    from block to block (lazy rescale both skipped and taken). masked: gaussian with a random suffix of the first
    block at -inf, 1/16 of rows with the whole first block masked and 1/64 with every block masked.
    """
    if dist not in SCORE_DISTS:
        raise ValueError(f"dist must be one of {SCORE_DISTS}, got {dist!r}")
    rng = np.random.default_rng([seed, SCORE_DISTS.index(dist)])
    n = blocks * block
    z = rng.standard_normal((rows, n), dtype=np.float32) * np.float32(4 if dist in ("gaussian", "masked") else 2)
    if dist == "outliers":
        hit = rng.random((rows, n), dtype=np.float32) < 1e-3
        z = np.where(hit, z + rng.uniform(10, 40, (rows, n)).astype(np.float32), z)
    elif dist == "sink":
        z[:, (blocks - 1) * block] += rng.uniform(5, 40, rows).astype(np.float32)
    elif dist == "jumps":
        steps = rng.uniform(0, 16, (rows, blocks)).astype(np.float32)
        steps[:, 0] = 0
        z += np.repeat(np.cumsum(steps, axis=1), block, axis=1)
    s = (z / np.float32(scale_log2)).astype(np.float32)
    if dist == "masked":
        cut = rng.integers(0, block + 1, rows)
        s[:, :block][np.arange(block)[None, :] >= cut[:, None]] = -np.inf
        s[rng.random(rows) < 1 / 16, :block] = -np.inf
        s[rng.random(rows) < 1 / 64, :] = -np.inf
    return s


# --- feature cases (softcap, windows, learnable sinks, varlen, pack-GQA, non-finite values, backward) ---------
# A feature case is a plain JSON-able dict, so that golden files store it as they store CaseSpec:
#   name, kind ("normal" | "exact"), batch, seqlen_q, seqlen_k, heads, heads_kv, head_dim, dtype, causal,
#   softmax_scale, q_mult, seed, and optionally
#   softcap (float), window_size ([left, right], None for unbounded), sink_mult (learnable_sink ~ N(0,1)*mult,
#   float32 per head), varlen ({"seqlens_q": [...], "seqlens_k": [...]}: q is (total_q, heads, dim) and
#   cu_seqlens_* are the int32 prefix sums), pack_gqa (None | bool), nonfinite ([[tensor, flat_index, value]],
#   value one of "nan", "inf", "-inf"), backward (bool: also draw dout ~ N(0,1) in the dtype).
FEATURE_KEYS = ("softcap", "window_size", "sink_mult", "varlen", "pack_gqa", "nonfinite", "backward")


def make_feature_inputs(case: dict) -> dict:
    """Arrays of a feature case: ``q, k, v`` (dtype of the case; varlen cases packed along tokens), and when
    the case asks for them ``dout``, ``learnable_sink`` (float32, (heads,)), ``cu_seqlens_q``/``cu_seqlens_k``
    (int32). A pure function of the dict: the same bits on every machine (numpy's Generator streams)."""
    spec = CaseSpec(**{k: case[k] for k in CaseSpec.__dataclass_fields__ if k in case})
    vl = case.get("varlen")
    if vl:
        # one batch-1 draw per sequence, concatenated along the token axis
        qs, ks, vs = [], [], []
        for i, (lq, lk) in enumerate(zip(vl["seqlens_q"], vl["seqlens_k"])):
            sub = CaseSpec(**{**spec.as_dict(), "batch": 1, "seqlen_q": lq, "seqlen_k": lk,
                              "seed": spec.seed * 1000 + i})
            a, b, c = make_inputs(sub)
            qs.append(a[0]), ks.append(b[0]), vs.append(c[0])
        q, k, v = (np.concatenate(t, axis=0) for t in (qs, ks, vs))
        arrays = {"q": q, "k": k, "v": v,
                  "cu_seqlens_q": np.concatenate([[0], np.cumsum(vl["seqlens_q"])]).astype(np.int32),
                  "cu_seqlens_k": np.concatenate([[0], np.cumsum(vl["seqlens_k"])]).astype(np.int32)}
    else:
        q, k, v = make_inputs(spec)
        arrays = {"q": q, "k": k, "v": v}
    rng = np.random.default_rng([spec.seed, 7])
    if case.get("sink_mult") is not None:
        arrays["learnable_sink"] = (rng.standard_normal(spec.heads, dtype=np.float32)
                                    * np.float32(case["sink_mult"]))
    if case.get("backward"):
        arrays["dout"] = rng.standard_normal(arrays["q"].shape, dtype=np.float32).astype(DTYPES[spec.dtype])
    for name, index, value in case.get("nonfinite") or ():
        a = arrays[name].reshape(-1).copy()
        a[index] = {"nan": np.nan, "inf": np.inf, "-inf": -np.inf}[value]
        arrays[name] = a.reshape(arrays[name].shape)
    return arrays
