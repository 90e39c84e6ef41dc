"""Fine-tuning that keeps what the model knew: transfer scores recorded through a run, and weight-space merging
(WiSE-FT with the base model, uniform soups of checkpoints), on the real default model and real collections."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import SHARED_BEIR, embedkit_here, write_scifact_slice

from embedkit import load_dataset, load_model


@pytest.fixture(scope="module")
def transfer_cuts(tmp_path_factory) -> list:
    """Tiny cuts of two classic collections the slice's model never trains on."""
    root = tmp_path_factory.mktemp("transfer")
    return [
        write_scifact_slice(root / name, load_dataset(SHARED_BEIR / name), {"test": 8}, 100, 200)
        for name in ("medline", "cranfield")
    ]


def tiny_run(output, slice_mined, train_slice, **settings):
    from embedkit.train import TrainConfig

    return TrainConfig(
        output=str(output),
        data=str(slice_mined),
        dataset=str(train_slice),
        num_negatives=2,
        drop_short_examples=True,
        max_length=64,
        batch_size=8,
        learning_rate=2e-4,  # large enough that the weights move visibly in a few steps
        dev_fraction=0.25,
        eval_steps=2,
        seed=7,
        **settings,
    )


@pytest.fixture(scope="module")
def trained(slice_mined, train_slice, transfer_cuts, tmp_path_factory):
    """6 steps, scored on the dev set and on the two cuts every 2 steps, the checkpoints kept."""
    from embedkit.train import train

    config = tiny_run(
        tmp_path_factory.mktemp("tuned") / "model",
        slice_mined,
        train_slice,
        max_steps=6,
        transfer_datasets=[str(cut) for cut in transfer_cuts],
        keep_checkpoints=True,
        save_total_limit=1,  # --keep-checkpoints keeps every one all the same
    )
    return train(config)


def state(folder):
    return {name: tensor.clone() for name, tensor in load_model(folder).st.state_dict().items()}


def test_a_run_records_its_transfer_curve(trained, transfer_cuts):
    """Base, each evaluation step and the saved weights are scored on every transfer collection; the base and final
    scores are what an evaluator gives the base model and the saved model; the card shows them side by side."""
    from embedkit.training.transfer import transfer_evaluators

    record = json.loads((trained / "embedkit_training.json").read_text())
    transfer = record["transfer"]
    names = ["medline", "cranfield"]
    assert [row["step"] for row in transfer["curve"]] == [2, 4, 6]
    for row in [transfer["base"], transfer["final"], *transfer["curve"]]:
        assert set(row) - {"step"} == {*names, "mean"}
        assert row["mean"] == pytest.approx(sum(row[name] for name in names) / 2)
    evaluators = transfer_evaluators([str(cut) for cut in transfer_cuts], "test")
    base, saved = load_model(max_length=64).st, load_model(trained).st
    for evaluator, name in zip(evaluators, names, strict=True):
        assert evaluator.score(base)["ndcg_at_10"] == pytest.approx(transfer["base"][name], abs=1e-6)
        assert evaluator.score(saved)["ndcg_at_10"] == pytest.approx(transfer["final"][name], abs=1e-6)
    assert transfer["curve"][-1] != transfer["base"]  # the weights moved
    card = (trained / "README.md").read_text()
    assert "Transfer: nDCG@10 on collections never trained on" in card
    for name in [*names, "mean"]:
        base_score, final = transfer["base"][name], transfer["final"][name]
        assert f"| {name} | {base_score:.4f} | {final:.4f} | {final - base_score:+.4f} |" in card
    assert record["checkpoints_kept"] == ["checkpoint-2", "checkpoint-4", "checkpoint-6"]


def test_merge_is_the_hand_computed_interpolation(trained, tmp_path):
    """Every tensor of ``embedkit merge --alpha 0.3`` is 0.7·base + 0.3·tuned (within 1e-6); alpha 0 and 1 give
    the base model's and the tuned model's vectors."""
    from embedkit.models.reference import default_model_path

    base_path = default_model_path()
    for alpha in ("0.3", "0", "1"):
        result = embedkit_here(
            "merge", "--base", str(base_path), "--tuned", str(trained), "--alpha", alpha, "-o", str(tmp_path / alpha)
        )
        assert result.returncode == 0, result.stderr
    base, tuned, merged = state(base_path), state(trained), state(tmp_path / "0.3")
    assert set(merged) == set(tuned)
    moved = 0
    for name, tensor in merged.items():
        if tensor.is_floating_point():
            expected = 0.7 * base[name].double() + 0.3 * tuned[name].double()
            assert torch.allclose(tensor.double(), expected, atol=1e-6, rtol=0), name
            moved += not torch.equal(base[name], tuned[name])
    assert moved > 50  # most tensors differ, so the check above is not base against base
    texts = ["hydroxychloroquine and COVID-19 outcomes", "Aspirin lowers the risk of colorectal cancer."]
    vectors = {name: load_model(folder).encode_corpus(texts) for name, folder in
               {"base": base_path, "tuned": trained, "0": tmp_path / "0", "1": tmp_path / "1"}.items()}  # fmt: skip
    assert torch.equal(torch.from_numpy(vectors["0"]), torch.from_numpy(vectors["base"]))
    assert torch.equal(torch.from_numpy(vectors["1"]), torch.from_numpy(vectors["tuned"]))
    assert not torch.allclose(torch.from_numpy(vectors["base"]), torch.from_numpy(vectors["tuned"]), atol=1e-4)
    record = json.loads((tmp_path / "0.3" / "embedkit_merge.json").read_text())
    assert record["alpha"] == 0.3 and record["format"] == "embedkit.merged-model/1"
    assert "(1 - 0.3)·base + 0.3·tuned" in (tmp_path / "0.3" / "README.md").read_text()


def test_merge_averages_kept_checkpoints_into_a_soup(trained, tmp_path):
    folders = [trained / "checkpoints" / f"checkpoint-{step}" for step in (4, 6)]
    args = [part for folder in folders for part in ("--tuned", str(folder))]
    result = embedkit_here("merge", *args, "-o", str(tmp_path / "soup"))
    assert result.returncode == 0, result.stderr
    first, second, soup = state(folders[0]), state(folders[1]), state(tmp_path / "soup")
    for name, tensor in soup.items():
        if tensor.is_floating_point():
            expected = (first[name].double() + second[name].double()) / 2
            assert torch.allclose(tensor.double(), expected, atol=1e-6, rtol=0), name


@pytest.mark.slow  # four training steps, two checkpoints and eleven dev scorings: minutes of `make test`
def test_training_can_save_a_soup_merged_with_the_base(slice_mined, train_slice, tmp_path):
    """--soup-last 2 --merge-with-base auto: the soup of the last two checkpoints, then the alpha the documented
    rule picks from the dev scores it recorded; alpha 1 is the soup itself, and the saved model scores its alpha's."""
    from embedkit.train import train
    from embedkit.training.evaluator import RetrievalEvaluator

    config = tiny_run(tmp_path / "model", slice_mined, train_slice, max_steps=4, soup_last=2, merge_with_base="auto")
    record = json.loads((train(config) / "embedkit_training.json").read_text())
    weights = record["weights"]
    assert weights["soup_steps"] == [2, 4]
    scores = {float(alpha): score for alpha, score in weights["dev_scores"].items()}
    assert sorted(scores) == [i / 10 for i in range(11)]
    assert scores[1.0] == pytest.approx(weights["soup_dev_ndcg_at_10"], abs=1e-6)
    best = max(scores.values())
    assert weights["alpha"] == min(alpha for alpha, score in scores.items() if score >= best - 0.005)
    evaluator = RetrievalEvaluator(load_dataset(train_slice), "train", query_ids=record["dev_queries"])
    saved = evaluator.score(load_model(tmp_path / "model").st)["ndcg_at_10"]
    assert saved == pytest.approx(scores[weights["alpha"]], abs=1e-6)
    assert "interpolated with the base model (WiSE-FT)" in (tmp_path / "model" / "README.md").read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--alpha", "0.5"], "'alpha': an alpha interpolates with the base model"),
        (["--base", "B", "--alpha", "1.5"], "alpha"),
        (["--base", "B", "--alpha", "nan"], "alpha"),
        (["--base", "B", "--alpha", "half"], "expected a number in [0, 1] or auto"),
        (["--base", "B", "--alpha", "auto"], "--dev-dataset"),
        (["--base", "B"], "needs --alpha"),
    ],
)
def test_merge_refuses_bad_settings_in_one_line(args, message, tmp_path):
    result = embedkit_here("merge", "--tuned", "T", *args, "-o", str(tmp_path / "out"))
    assert result.returncode == 2 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_merge_refuses_models_of_other_architectures(tiny_bert, tmp_path):
    from embedkit.models.reference import default_model_path

    base = str(default_model_path())
    result = embedkit_here("merge", "--base", base, "--tuned", str(tiny_bert), "--alpha", "0.5", "-o", str(tmp_path))
    assert result.returncode == 2 and "is not the same architecture" in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--transfer-dataset", "a/cacm", "--transfer-dataset", "b/cacm"], "both named 'cacm'"),
        (["--merge-with-base", "auto"], "auto chooses alpha on a dev set"),
        (["--merge-with-base", "1.5"], "merge_with_base"),
        (["--merge-with-base", "most"], "expected alpha in [0, 1] or auto"),
        (["--soup-last", "1"], "soup_last"),
        (["--objective", "cross-encoder", "--transfer-dataset", "cacm"], "a bi-encoder setting"),
    ],
)
def test_train_refuses_bad_transfer_and_merge_settings_in_one_line(args, message, tmp_path):
    data = tmp_path / "mined.jsonl"
    data.write_text('{"query": "q", "positive": "p", "negatives": ["n"]}\n')
    result = embedkit_here("train", "--data", str(data), *args, "-o", str(tmp_path / "out"))
    assert result.returncode == 2 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
