"""Inference backends: every one stays close to the float32 torch embeddings and records itself in the settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from embedkit import EmbedkitError, load_model
from embedkit.data import doc_text
from embedkit.models import int8, onnx
from embedkit.models.device import cpu_has_bfloat16
from embedkit.models.openvino_backend import openvino_has_bfloat16

CLI = [sys.executable, "-c", "from embedkit.cli import main; main()"]

# The lowest cosine to the float32 torch embeddings allowed, per backend, over 60 documents and 20 queries.
# Measured on an AVX-512 VNNI CPU: bf16 >= 0.99997, both int8 >= 0.9908 (mean 0.993-0.995), onnx >= 0.999999. On a
# CPU without VNNI (AVX2 only) the int8 backends quantise activations to 7 bits: torch-int8's min cosine there was
# 0.9755 and 0.9698 in two runs (mean about 0.978), onnx-int8 still >= 0.98.
FULL_RANGE_INT8 = int8.full_range()
CASES = {
    "torch-bfloat16": ("torch", "bfloat16", 0.999),
    "torch-int8": ("torch-int8", "float32", 0.98 if FULL_RANGE_INT8 else 0.96),
    "onnx": ("onnx", "float32", 0.99999),
    "onnx-int8": ("onnx-int8", "float32", 0.98),
    "openvino": ("openvino", "float32", 0.99999),
    "openvino-bfloat16": ("openvino", "bfloat16", 0.999),
}


pytestmark = pytest.mark.usefixtures("export_cache")


@pytest.fixture(scope="module")
def texts(backend_texts) -> tuple[list[str], list[str]]:
    return backend_texts


@pytest.fixture(scope="module")
def reference(default_model, texts) -> tuple[np.ndarray, np.ndarray]:
    docs, queries = texts
    return default_model.encode(docs), default_model.encode_queries(queries)


@pytest.mark.parametrize("case", list(CASES))
def test_backend_stays_close_to_float32(case, texts, reference):
    backend, dtype, bound = CASES[case]
    if backend == "openvino" and dtype == "bfloat16" and not openvino_has_bfloat16():
        pytest.skip("OpenVINO has no bf16 kernels on this CPU")
    model = load_model(backend=backend, dtype=dtype, device="cpu" if backend == "torch" else None)
    docs, queries = texts
    embedded = model.encode(docs), model.encode_queries(queries)
    for ours, theirs in zip(embedded, reference):
        assert ours.dtype == np.float32 and ours.shape == theirs.shape
        assert np.allclose(np.linalg.norm(ours, axis=1), 1, atol=1e-4)  # normalised as the torch path is
        assert (ours * theirs).sum(axis=1).min() >= bound
    settings = model.settings
    ran = "float32" if backend == "torch" and dtype == "bfloat16" and not cpu_has_bfloat16() else dtype
    assert settings["backend"] == backend and settings["dtype"] == ran and model.device == "cpu"
    if backend.endswith("int8"):
        config = settings["backend_config"]
        assert config["preset"] == int8.int8_preset() and config["per_channel"] is True
        assert config["reduce_range"] is not int8.full_range()
    if backend.startswith("onnx"):
        assert settings["backend_config"]["onnxruntime"]


def test_default_backend_is_recorded(default_model):
    assert default_model.settings["backend"] == "torch" and "backend_config" not in default_model.settings


def test_onnx_batching_is_shape_free(texts):
    """Token-budget batches of any size and padding give the same vectors (the export's shapes are dynamic)."""
    docs, _ = texts
    model = load_model(backend="onnx")
    whole = model.encode(docs[:12])
    model.batch_tokens = 300  # batches of one or two documents
    assert np.allclose(model.encode(docs[:12]), whole, atol=1e-5)
    assert np.allclose(model.encode(docs[3:4]), whole[3:4], atol=1e-5)


def test_onnx_export_is_cached_and_keyed_by_weights(tiny_bert, tmp_path, monkeypatch):
    """A plain transformers folder (no Normalize) exports once; changed weights get another export."""
    monkeypatch.setenv("EMBEDKIT_CACHE", str(tmp_path))  # tiny_bert's weights are new every session
    texts = ["a short text", "a somewhat longer text with more words in it"]
    exported = load_model(tiny_bert, pooling="mean", backend="onnx")
    network = exported.st[0].model
    again = load_model(tiny_bert, pooling="mean", backend="onnx")
    assert again.st[0].model.path == network.path and network.path.parent.parent == tmp_path / "onnx"
    assert [p.name for p in (tmp_path / "onnx").iterdir()] == [network.path.parent.name]  # no temporary left
    torch_model = load_model(tiny_bert, pooling="mean", device="cpu")
    assert np.allclose(exported.encode(texts), torch_model.encode(texts), atol=1e-4)
    assert exported.settings["normalize"] is False
    names = ["input_ids", "attention_mask", "token_type_ids"]
    key = onnx.network_key(torch_model.st[0].model, names)
    torch_model.st[0].model.embeddings.word_embeddings.weight.data[0, 0] += 1
    assert onnx.network_key(torch_model.st[0].model, names) != key


def test_bad_backend_arguments():
    with pytest.raises(EmbedkitError, match="unknown backend 'tensorrt'") as error:
        load_model(backend="tensorrt")
    assert error.value.field == "backend"
    with pytest.raises(EmbedkitError, match="runs in float32, not bfloat16") as error:
        load_model(backend="onnx", dtype="bfloat16")
    assert error.value.field == "dtype"
    with pytest.raises(EmbedkitError, match="runs in float32 or bfloat16, not float16") as error:
        load_model(backend="openvino", dtype="float16")
    assert error.value.field == "dtype"
    with pytest.raises(EmbedkitError, match="CPU only") as error:
        load_model(backend="torch-int8", device="cuda")
    assert error.value.field == "backend"


@pytest.mark.parametrize(
    ("flags", "backend"), [(["--backend", "onnx-int8"], "onnx-int8"), (["--dtype", "bfloat16"], "torch")]
)
def test_cli_backend_option(tmp_path, scifact, export_cache, flags, backend):
    """``embedkit encode --backend`` reaches load_model and lands in the manifest; without it, bf16 is the torch
    backend (autocast)."""
    corpus = tmp_path / "corpus.jsonl"
    rows = [{"_id": str(scifact.corpus[i]["_id"]), "text": doc_text(scifact.corpus[i])} for i in range(8)]
    corpus.write_text("".join(json.dumps(row) + "\n" for row in rows))
    env = {**os.environ, "EMBEDKIT_CACHE": str(export_cache)}
    args = ["encode", "--corpus", corpus, "--output", tmp_path / "emb", *flags]
    done = subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "emb" / "manifest.json").read_text())
    assert manifest["settings"]["backend"] == backend and manifest["count"] == 8
