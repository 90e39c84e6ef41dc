"""Honest model selection: ``--dev-fraction`` carves seeded dev queries out of the training split, the trainer
scores them during training, and the weights saved are the best step's by dev nDCG@10."""

from __future__ import annotations

import json

import pytest

from embedkit import load_dataset, load_model


@pytest.fixture(scope="module")
def trained(slice_mined, train_slice, tmp_path_factory):
    from embedkit.train import TrainConfig, train

    config = TrainConfig(
        output=str(tmp_path_factory.mktemp("dev") / "model"),
        data=str(slice_mined),
        dataset=str(train_slice),
        num_negatives=2,
        drop_short_examples=True,
        max_length=64,
        batch_size=8,
        max_steps=6,
        learning_rate=2e-4,  # large enough that the dev score moves between evaluations
        dev_fraction=0.25,
        eval_steps=2,
        seed=7,
    )
    return train(config)


def test_dev_queries_are_seeded_and_never_trained_on(trained, slice_mined):
    from embedkit.train.data import dev_query_ids

    record = json.loads((trained / "embedkit_training.json").read_text())
    mined = [json.loads(line) for line in slice_mined.read_text().splitlines()]
    mined = [r for r in mined if len(r["negatives"]) >= 2]  # drop_short_examples leaves out rows short of 2
    dev = dev_query_ids([r["query_id"] for r in mined], 0.25, 7)
    assert record["dev_queries"] == dev and len(dev) == round(0.25 * len({r["query_id"] for r in mined}))
    assert record["examples"] == sum(r["query_id"] not in set(dev) for r in mined)
    assert dev != dev_query_ids([r["query_id"] for r in mined], 0.25, 8)  # the seed decides


def test_the_saved_weights_are_the_best_dev_step(trained, train_slice):
    """The curve has a point every 2 steps; the step kept is its argmax; the saved model scores that on the dev set."""
    from embedkit.training.evaluator import RetrievalEvaluator

    record = json.loads((trained / "embedkit_training.json").read_text())
    curve = record["dev_curve"]
    assert [point["step"] for point in curve] == [2, 4, 6]
    best = max(curve, key=lambda point: point["ndcg_at_10"])
    assert record["best_checkpoint"]["step"] == best["step"]
    evaluator = RetrievalEvaluator(load_dataset(train_slice), "train", query_ids=record["dev_queries"])
    saved = evaluator(load_model(trained).st)
    assert saved[f"{evaluator.name}_ndcg_at_10"] == pytest.approx(best["ndcg_at_10"], abs=1e-6)
    card = (trained / "README.md").read_text()
    assert "Dev curve" in card and all(f"| {point['step']} | {point['ndcg_at_10']:.4f} |" in card for point in curve)
