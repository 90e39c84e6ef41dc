"""The losses: GradCache and cross-device InfoNCE give the plain loss and gradients (with hard negatives)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from embedkit import EmbedkitError, load_model
from embedkit.train.losses import LearnedTemperatureInfoNCE, build_loss, gradcache_infonce, infonce


@pytest.fixture(scope="module")
def batch(scifact) -> list[list[str]]:
    """8 real SciFact train queries, their positive, and two other documents as hard negatives."""
    qrels = scifact.qrels("train")
    corpus = scifact.corpus
    row_of = {doc_id: i for i, doc_id in enumerate(corpus["_id"])}
    query_ids = list(qrels)[:8]

    def text(doc_id: str) -> str:
        row = corpus[row_of[doc_id]]
        return (row["title"] + " " + row["text"])[:400]

    positives = [text(next(iter(qrels[q]))) for q in query_ids]
    negatives = [[text(corpus[(17 * i + k * 101) % len(corpus)]["_id"]) for i in range(8)] for k in (1, 2)]
    return [[scifact.queries[q] for q in query_ids], positives, *negatives]


def _loss_and_grads(model, loss_fn, columns) -> tuple[float, dict[str, torch.Tensor]]:
    model.zero_grad()
    loss = loss_fn([model.preprocess(c) for c in columns], torch.zeros(len(columns[0])))
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return float(loss.detach()), grads


def _assert_grads_equal(expected: dict, actual: dict) -> None:
    """Every gradient entry agrees to rtol 1e-4, with an absolute floor of 1e-6 of the largest gradient entry
    (parameters whose true gradient is zero, such as attention key biases, hold only rounding noise)."""
    assert expected.keys() == actual.keys() and len(expected) > 10
    scale = max(float(g.abs().max()) for g in expected.values())
    for name, grad in expected.items():
        torch.testing.assert_close(actual[name], grad, rtol=1e-4, atol=1e-6 * scale, msg=lambda m, n=name: f"{n}: {m}")
    flat_expected = torch.cat([g.flatten() for g in expected.values()])
    flat_actual = torch.cat([actual[n].flatten() for n in expected])
    relative = float((flat_actual - flat_expected).norm() / flat_expected.norm())
    print(f"gradient relative error (L2 over all parameters): {relative:.2e}")
    assert relative <= 1e-4


def test_gradcache_equals_plain_infonce(tiny_bert, batch):
    """Acceptance: loss and every parameter's gradient equal (rtol 1e-4), with hard negatives."""
    model = load_model(tiny_bert, pooling="mean", device="cpu").st
    model.eval().double()  # float64, so the comparison measures the algorithm and not float32 summation order
    plain_loss, plain_grads = _loss_and_grads(model, infonce(model, temperature=0.05), batch)
    cached_loss, cached_grads = _loss_and_grads(model, gradcache_infonce(model, mini_batch_size=3), batch)
    assert cached_loss == pytest.approx(plain_loss, rel=1e-4)
    _assert_grads_equal(plain_grads, cached_grads)
    assert plain_loss > 0.1  # a real, non-degenerate loss over 8 queries x 24 candidates


def test_cross_device_equals_single_process_global_batch(tiny_bert, batch, tmp_path):
    """Acceptance: 2 gloo processes under a real torchrun; loss and grads equal the single-process global batch."""
    (tmp_path / "batch.json").write_text(json.dumps(batch))
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or "torchrun"
    worker = Path(__file__).parent / "workers" / "cross_device.py"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [
            torchrun,
            "--standalone",
            "--nproc_per_node=2",
            str(worker),
            str(tiny_bert),
            str(tmp_path / "batch.json"),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    model = load_model(tiny_bert, pooling="mean", device="cpu").st
    model.eval().double()
    loss, grads = _loss_and_grads(model, infonce(model, temperature=0.05), batch)
    assert float(np.load(tmp_path / "loss.npy")) == pytest.approx(loss, rel=1e-4)
    gathered = {name: torch.from_numpy(np.load(tmp_path / f"grad.{name}.npy")) for name in grads}
    _assert_grads_equal(grads, gathered)


def test_learned_temperature_gets_a_gradient(tiny_bert, batch):
    model = load_model(tiny_bert, pooling="mean", device="cpu").st
    loss_fn = infonce(model, temperature=0.05, learn_temperature=True)
    assert isinstance(loss_fn, LearnedTemperatureInfoNCE) and loss_fn.temperature == pytest.approx(0.05)
    loss = loss_fn([model.preprocess(c) for c in batch], torch.zeros(8))
    loss.backward()
    assert loss_fn.log_scale.grad is not None and loss_fn.log_scale.grad.abs() > 0


def test_symmetric_term_changes_the_loss(tiny_bert, batch):
    model = load_model(tiny_bert, pooling="mean", device="cpu").st
    model.eval()
    features = [model.preprocess(c) for c in batch]
    with torch.no_grad():
        one_way = float(infonce(model)(features, torch.zeros(8)))
        both_ways = float(infonce(model, symmetric=True)(features, torch.zeros(8)))
    assert one_way != pytest.approx(both_ways, rel=1e-3)


def test_matryoshka_sums_over_prefixes(tiny_bert, batch):
    model = load_model(tiny_bert, pooling="mean", device="cpu").st
    model.eval()
    features = [model.preprocess(c) for c in batch]
    with torch.no_grad():
        nested = float(build_loss(model, matryoshka_dims=[64, 32, 16])(features, torch.zeros(8)))
        embeddings = [model(f)["sentence_embedding"] for f in features]
        plain = infonce(model)
        parts = [
            float(plain.compute_loss_from_embeddings([e[:, :dim] for e in embeddings], None)) for dim in (64, 32, 16)
        ]
    assert len(set(parts)) == 3
    assert nested == pytest.approx(sum(parts), rel=1e-4)
    with pytest.raises(EmbedkitError, match="Matryoshka dimensions"):
        build_loss(model, matryoshka_dims=[128])


def test_listwise_distillation_is_zero_when_student_matches_teacher(tiny_bert, batch):
    model = load_model(tiny_bert, pooling="mean", device="cpu").st
    model.eval()
    loss_fn = build_loss(model, "distill")
    features = [model.preprocess(c) for c in batch]
    with torch.no_grad():
        embeddings = [model(f)["sentence_embedding"] for f in features]
        teacher = torch.stack([(embeddings[0] * e).sum(-1) for e in embeddings[1:]], dim=1)
        assert float(loss_fn(features, teacher)) == pytest.approx(0.0, abs=1e-5)
        assert float(loss_fn(features, teacher.flip(1))) > 1e-3
