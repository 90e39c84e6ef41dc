"""The default precision path: ``dtype="bfloat16"`` on a CPU is sentence-transformers' own modules under torch
autocast (no engine imported), and on a CPU without bf16 instructions it warns once and runs float32."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer

from embedkit import load_model
from embedkit.models import device
from embedkit.models.reference import default_model_path

pytestmark = pytest.mark.two_threads  # `make test` runs this file with torch's two threads, as users run it

DOCS = [
    "Alpha-synuclein aggregates in neurons of patients with Parkinson's disease.",
    "A short one.",
    "Vitamin D supplementation and the risk of fractures in older adults: a randomised trial of 2,000 people.",
    "Mutations in BRCA1 raise the lifetime risk of breast cancer.",
] * 3


@pytest.fixture
def no_bf16_cpu(monkeypatch):
    """This process as seen on a CPU whose flags lack every bf16 instruction (an AVX2-only x86, say)."""
    monkeypatch.setattr(device, "cpu_flags", lambda: {"fpu", "sse4_2", "avx", "avx2", "fma", "avx512f"})
    device.cpu_has_bfloat16.cache_clear()
    device._warn_no_bfloat16.cache_clear()
    yield
    device.cpu_has_bfloat16.cache_clear()
    device._warn_no_bfloat16.cache_clear()


def test_bfloat16_on_a_cpu_without_bf16_warns_once_and_runs_float32(no_bf16_cpu, default_model):
    with pytest.warns(UserWarning, match="no bf16 instructions: running float32"):
        first = load_model(dtype="bfloat16", device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second load says nothing more
        second = load_model(dtype="bfloat16", device="cpu")
    for model in (first, second):
        assert model.settings["dtype"] == "float32" and model.settings["backend"] == "torch"
    assert np.array_equal(first.encode(DOCS), default_model.encode(DOCS))  # the float32 path, bit for bit


@pytest.mark.skipif(not device.cpu_has_bfloat16(), reason="this CPU has no bf16 instructions")
def test_bfloat16_on_a_bf16_cpu_is_sentence_transformers_under_autocast():
    model = load_model(dtype="bfloat16", device="cpu")
    assert model.settings["dtype"] == "bfloat16" and model.settings["backend"] == "torch"
    assert "backend_config" not in model.settings
    peer = SentenceTransformer(str(default_model_path()), device="cpu")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        theirs = peer.encode(DOCS, batch_size=4, convert_to_numpy=True)
    ours = model.encode(DOCS)
    cosine = (ours * theirs).sum(axis=1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(theirs, axis=1)
    assert cosine.min() >= 0.9999  # the same modules and products; only the batches' padding differs
    with torch.autocast("cpu", dtype=torch.bfloat16):
        single = peer.encode(DOCS[:1], convert_to_numpy=True)
    assert np.allclose(model.encode(DOCS[:1]), single, atol=1e-6)  # one text, no padding: the same numbers


def test_the_encode_is_the_same_on_one_thread_and_on_two(default_model):
    """What ``make test``'s second pass is for: the user's multi-thread encode, next to the one-thread one."""
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = default_model.encode(DOCS)
        torch.set_num_threads(2)
        two = default_model.encode(DOCS)
    finally:
        torch.set_num_threads(before)
    assert np.allclose(one, two, atol=1e-5)


def test_the_default_paths_import_no_engine():
    script = (
        "import sys\n"
        "from embedkit import load_model\n"
        "for dtype in ('float32', 'bfloat16'):\n"
        "    load_model(dtype=dtype, device='cpu').encode(['one text', 'and another one'])\n"
        "print(sorted(m for m in ('openvino', 'onnx', 'onnxruntime', 'onnxscript') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
