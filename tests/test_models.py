"""Models: embedkit's embeddings equal sentence-transformers'; plain transformers folders pool as asked."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer
from transformers import AutoModel, AutoTokenizer

from embedkit import EmbedkitError, load_model
from embedkit.data import doc_text
from embedkit.models.reference import default_model_path


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return (a * b).sum(axis=1)


def test_embeddings_equal_sentence_transformers(default_model, scifact):
    """Acceptance: cosine >= 0.9999 for every vector, documents and queries."""
    reference = SentenceTransformer(str(default_model_path()), device="cpu")
    docs = [scifact.corpus[i] for i in range(0, 5183, 43)]  # 121 documents spread over the corpus
    texts = [doc_text(d) for d in docs]
    ours = default_model.encode_corpus(docs)
    theirs = reference.encode(texts, batch_size=32, convert_to_numpy=True)
    assert ours.dtype == np.float32 and ours.shape == (len(texts), 384)
    assert _cosines(ours, theirs).min() >= 0.9999
    queries = list(scifact.split_queries("test").values())[:64]
    assert _cosines(default_model.encode_queries(queries), reference.encode(queries)).min() >= 0.9999


def test_settings_are_recorded(default_model):
    settings = default_model.settings
    assert settings["model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert settings["pooling"] == "mean" and settings["normalize"] is True
    assert settings["max_length"] == 256 and settings["dim"] == 384 and settings["dtype"] == "float32"
    assert len(settings["weights_sha256"]) == 64


def test_max_length_truncates(scifact):
    short = load_model(max_length=16, device="cpu")
    assert short.settings["max_length"] == 16
    text = doc_text(scifact.corpus[0])
    clipped = short.st.tokenizer.decode(short.st.tokenizer(text, truncation=True, max_length=16)["input_ids"])
    assert np.allclose(
        short.encode([text]), short.encode([clipped.replace("[CLS]", "").replace("[SEP]", "")]), atol=1e-3
    )


def test_prompt_is_prepended(tiny_bert):
    model = load_model(tiny_bert, pooling="mean", query_prompt="query: ", device="cpu")
    prompted = model.encode_queries(["heart disease"])
    plain = model.encode(["query: heart disease"])
    assert np.allclose(prompted, plain, atol=1e-5)
    assert not np.allclose(prompted, model.encode(["heart disease"]), atol=1e-3)
    assert model.settings["query_prompt"] == "query: "


@pytest.mark.parametrize("pooling", ["cls", "mean", "last"])
def test_plain_transformers_pooling(tiny_bert, pooling):
    model = load_model(tiny_bert, pooling=pooling, device="cpu")
    texts = ["a short text", "a somewhat longer text with more words in it"]
    ours = model.encode(texts)
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    network = AutoModel.from_pretrained(tiny_bert).eval()
    expected = []
    for text in texts:
        features = tokenizer(text, return_tensors="pt", truncation=True, max_length=model.max_length)
        with torch.no_grad():
            hidden = network(**features).last_hidden_state[0]
        expected.append({"cls": hidden[0], "mean": hidden.mean(0), "last": hidden[-1]}[pooling].numpy())
    assert np.allclose(ours, np.stack(expected), atol=1e-4)
    assert model.settings["pooling"] == pooling and model.settings["normalize"] is False


def test_pooling_defaults_to_cls_for_bert(tiny_bert):
    assert load_model(tiny_bert, device="cpu").settings["pooling"] == "cls"


def test_normalize_switch(tiny_bert):
    raw = load_model(tiny_bert, pooling="mean", device="cpu").encode(["some text"])
    unit = load_model(tiny_bert, pooling="mean", normalize=True, device="cpu").encode(["some text"])
    assert abs(np.linalg.norm(raw) - 1) > 1e-2
    assert abs(np.linalg.norm(unit) - 1) < 1e-5
    assert np.allclose(unit, raw / np.linalg.norm(raw), atol=1e-5)


def test_bfloat16_autocast_stays_close(default_model, scifact):
    bf16 = load_model(dtype="bfloat16", device="cpu", backend="torch")
    texts = [doc_text(scifact.corpus[i]) for i in range(16)]
    assert bf16.settings["dtype"] == "bfloat16"
    assert _cosines(bf16.encode(texts), default_model.encode(texts)).min() > 0.999


def test_bad_model_arguments(tmp_path, tiny_bert):
    with pytest.raises(EmbedkitError, match="unknown pooling"):
        load_model(tiny_bert, pooling="median")
    with pytest.raises(EmbedkitError, match="unknown dtype"):
        load_model(dtype="int3")
    (tmp_path / "empty").mkdir()
    with pytest.raises(EmbedkitError, match=r"not a model folder \(no modules.json or config.json\)"):
        load_model(tmp_path / "empty")


def test_a_local_model_is_recorded_by_absolute_path(tiny_bert, tmp_path, monkeypatch):
    """meta.json and reports record what reloads from any working directory (issue 11)."""
    monkeypatch.chdir(tiny_bert.parent)
    model = load_model(tiny_bert.name, pooling="mean")
    assert model.settings["model"] == str(tiny_bert.resolve())
    monkeypatch.chdir(tmp_path)
    assert load_model(model.settings["model"], pooling="mean").settings == model.settings


def test_normalize_false_keeps_the_prompts_and_pooling_is_checked_for_hub_names(tmp_path):
    st = SentenceTransformer(str(default_model_path()), device="cpu")
    st.prompts = {"query": "query: ", "document": "passage: "}
    st.save(str(tmp_path / "prompted"))
    unnormalized = load_model(tmp_path / "prompted", normalize=False)
    assert (unnormalized.query_prompt, unnormalized.document_prompt) == ("query: ", "passage: ")
    assert not unnormalized.normalize and "Normalize" not in [type(m).__name__ for m in unnormalized.st]
    norms = np.linalg.norm(unnormalized.encode_queries(["aspirin"]), axis=1)
    assert abs(norms[0] - 1.0) > 1e-3  # really not normalised
    with pytest.raises(EmbedkitError, match="pools with 'mean'"):
        load_model("sentence-transformers/all-MiniLM-L6-v2", pooling="cls")  # the Hub name of the packaged model
