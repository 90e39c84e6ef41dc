"""The openvino backend (``models/openvino_backend.py``), asked for by name: it must agree with
sentence-transformers under the same autocast, give each thread its own infer request, and export once per network."""

from __future__ import annotations

import pickle
import subprocess
import sys
import threading

import numpy as np
import pytest
from sentence_transformers import SentenceTransformer

from embedkit import EmbedkitError, load_model
from embedkit.models import openvino_backend
from embedkit.models.device import autocast
from embedkit.models.openvino_backend import OpenVinoNetwork, openvino_has_bfloat16
from embedkit.models.reference import default_model_path

bf16_kernels = pytest.mark.skipif(not openvino_has_bfloat16(), reason="OpenVINO has no bf16 kernels on this CPU")
pytestmark = pytest.mark.usefixtures("export_cache")


@pytest.fixture(scope="module")
def texts(backend_texts) -> tuple[list[str], list[str]]:
    return backend_texts


@pytest.fixture(scope="module")
def openvino_bf16():
    return load_model(dtype="bfloat16", backend="openvino")


@bf16_kernels
def test_openvino_bf16_agrees_with_sentence_transformers_autocast(openvino_bf16, texts):
    settings = openvino_bf16.settings
    assert settings["backend"] == "openvino" and settings["dtype"] == "bfloat16"
    config = settings["backend_config"]
    assert config["inference_precision"] == "bf16" and config["export"] == "torch.onnx dynamo, eager attention"
    assert isinstance(openvino_bf16.st[0].model, OpenVinoNetwork)
    peer = SentenceTransformer(str(default_model_path()), device="cpu")
    for encoded in texts:  # documents, then queries (the default model has no prompts)
        ours = openvino_bf16.encode(encoded)
        with autocast("cpu", "bfloat16"):
            theirs = peer.encode(encoded, batch_size=16, convert_to_numpy=True)
        cosine = (ours * theirs).sum(axis=1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(theirs, axis=1)
        print(f"openvino bf16 vs sentence-transformers autocast: min cosine {cosine.min():.6f}")
        assert cosine.min() >= 0.9999
        assert not np.array_equal(ours, theirs)  # really another runtime's arithmetic


def test_each_thread_has_its_own_request_and_the_same_vectors(tiny_bert, tmp_path, monkeypatch):
    """A server may encode from several threads: each gets its own infer request, and the vectors do not depend on
    which thread ran them."""
    monkeypatch.setenv("EMBEDKIT_CACHE", str(tmp_path))
    model = load_model(tiny_bert, pooling="mean", backend="openvino")
    texts = [f"text number {i} with some words" for i in range(12)]
    alone = model.encode(texts)
    seen: list[tuple[threading.Thread, object]] = []  # the objects themselves: an id or thread ident of one that is
    forward = OpenVinoNetwork.forward  # gone can be reused by the next (a thread that ran alone under load)

    def recording(self, **features):
        out = forward(self, **features)
        seen.append((threading.current_thread(), self.local.request))
        return out

    monkeypatch.setattr(OpenVinoNetwork, "forward", recording)
    results: dict[int, np.ndarray] = {}
    workers = [threading.Thread(target=lambda i=i: results.__setitem__(i, model.encode(texts))) for i in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert len({thread for thread, _ in seen}) == 2 and len({id(request) for _, request in seen}) == 2
    for encoded in results.values():
        assert np.allclose(encoded, alone, atol=1e-6)


def test_the_export_is_cached_per_weights_apart_from_the_onnx_backends(tiny_bert, tmp_path, monkeypatch):
    monkeypatch.setenv("EMBEDKIT_CACHE", str(tmp_path))  # tiny_bert's weights are new every session
    sample = ["a short text", "a somewhat longer text with more words in it", "three"]
    exported = load_model(tiny_bert, pooling="mean", backend="openvino")
    path = exported.st[0].model.path
    assert [p.name for p in (tmp_path / "onnx").iterdir()] == [path.parent.name]  # no temporary left
    assert path.parent.name.endswith("-fp32-eager")
    again = load_model(tiny_bert, pooling="mean", backend="openvino")
    assert again.st[0].model.path == path and len(list((tmp_path / "onnx").iterdir())) == 1  # from the cache
    assert again.backend_config["inference_precision"] == "f32"
    torch_model = load_model(tiny_bert, pooling="mean", device="cpu")
    assert np.allclose(exported.encode(sample), torch_model.encode(sample), atol=1e-4)
    load_model(tiny_bert, pooling="mean", backend="onnx")
    assert len(list((tmp_path / "onnx").iterdir())) == 2  # the onnx backends' export (SDPA) is another file


def test_a_network_that_does_not_export_fails_loudly(tiny_bert, tmp_path, monkeypatch):
    monkeypatch.setenv("EMBEDKIT_CACHE", str(tmp_path))

    def refuse(*args, **kwargs):
        raise EmbedkitError("could not export BertModel to ONNX (a test)", field="backend")

    monkeypatch.setattr(openvino_backend, "export_onnx", refuse)
    with pytest.raises(EmbedkitError, match="could not export BertModel"):
        load_model(tiny_bert, pooling="mean", backend="openvino")
    assert not (tmp_path / "onnx").exists() or not any((tmp_path / "onnx").iterdir())  # nothing half-built left


def test_bad_openvino_arguments_and_pickling(tiny_bert, tmp_path, monkeypatch):
    with pytest.raises(EmbedkitError, match="CPU only") as error:
        load_model(backend="openvino", device="cuda")
    assert error.value.field == "backend"
    monkeypatch.setenv("EMBEDKIT_CACHE", str(tmp_path))
    model = load_model(tiny_bert, pooling="mean", backend="openvino")
    with pytest.raises(TypeError, match="does not pickle; load the model again"):
        pickle.dumps(model.st)


FIRST_INFERS_AT_ONCE = """
import sys, threading
import numpy as np
from embedkit.models.openvino_backend import OpenVinoNetwork
network = OpenVinoNetwork(sys.argv[1], None, "float32", 2)
feeds = {name: np.ones((4, 12), dtype=np.int64) for name in network.input_names}
barrier = threading.Barrier(2)
def infer():  # what a thread's first forward does, with no Python work between the threads' first copies
    request = network.compiled.create_infer_request()
    barrier.wait()
    request.infer(feeds)
    request.get_output_tensor(0).data.copy()
threads = [threading.Thread(target=infer) for _ in range(2)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print("both infers returned")
"""


def test_two_threads_first_infers_at_once_on_a_fresh_network_do_not_deadlock(tiny_bert, tmp_path, monkeypatch):
    """OpenVINO's binding initialises a static on its first array copy while releasing the GIL: two threads making
    that first copy at once deadlocked in fresh processes before the network ran one batch on load. The static lives
    per process, so each try is a fresh interpreter; a hang holds the GIL, so it is caught by the timeout from
    outside."""
    monkeypatch.setenv("EMBEDKIT_CACHE", str(tmp_path))
    path = load_model(tiny_bert, pooling="mean", backend="openvino").st[0].model.path
    command = [sys.executable, "-c", FIRST_INFERS_AT_ONCE, str(path)]
    for _ in range(2):  # two fresh processes at a time on the 2-core machine
        tries = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        for process in tries:
            try:
                out, err = process.communicate(timeout=90)
            except subprocess.TimeoutExpired:
                for other in tries:
                    other.kill()
                pytest.fail("two first infers on a fresh OpenVINO network deadlocked")
            assert process.returncode == 0 and out.strip() == "both infers returned", err
