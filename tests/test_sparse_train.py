"""Training learned sparse encoders through the CLI on a small cut: SPLADE from the default model (its MLM head
initialised, and said so), inference-free SPLADE and CSR; each output loads with ``load_model`` and with
sentence-transformers' ``SparseEncoder``, which agree."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import embedkit_here

from embedkit import load_model
from embedkit.sparse import SparseRows

QUERIES = ["what causes fever?", "Aspirin lowers the risk of colorectal cancer.", "protein folding"]


@pytest.mark.parametrize("objective", ["splade", "splade-inference-free", "csr"])
def test_a_sparse_model_trained_through_the_cli_loads_in_both_libraries(objective, slice_mined, tmp_path):
    from sentence_transformers.sparse_encoder import SparseEncoder

    output = tmp_path / objective
    args = ["--data", str(slice_mined), "--num-negatives", "1", "--drop-short-examples", "--max-steps", "3"]
    done = embedkit_here(
        "train", "--objective", objective, *args, "--batch-size", "4", "--max-length", "32", "-o", str(output)
    )
    assert done.returncode == 0, done.stderr
    record = json.loads((output / "embedkit_training.json").read_text())
    assert record["steps"] == 3 and record["config"]["objective"] == objective
    if objective == "splade":
        assert record["base_model"]["start_has_mlm_head"] is False and "tied" in record["base_model"]["initialised"]
        assert record["loss"] == "SpladeLoss" and "flops_document_weight" in (output / "README.md").read_text()
    model, reference = load_model(output), SparseEncoder(str(output))
    assert model.kind == "sparse" and model.settings["sparse_kind"] == objective
    if objective == "csr":  # the auto-encoder's k is the cap in effect, and recorded as such
        assert model.settings["max_active_dims"] == 96 and model.encode_documents(QUERIES).nnz == 96 * len(QUERIES)
    ours, theirs = model.encode_queries(QUERIES), SparseRows.from_torch(reference.encode_query(QUERIES))
    assert np.array_equal(ours.indptr, theirs.indptr) and np.array_equal(ours.indices, theirs.indices)
    assert np.allclose(ours.values, theirs.values, rtol=0, atol=1e-5) and ours.nnz > 0


def test_a_splade_model_distils_the_mined_files_scores(slice_mined, tmp_path):
    """``--loss distill``: KL to the scores in the mined file (the mining model's here), through SpladeLoss."""
    args = ["--data", str(slice_mined), "--num-negatives", "2", "--drop-short-examples", "--max-steps", "2"]
    done = embedkit_here("train", "--objective", "splade", "--loss", "distill", *args, "--batch-size", "4",
                         "--max-length", "32", "-o", str(tmp_path / "m"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    record = json.loads((tmp_path / "m" / "embedkit_training.json").read_text())
    assert record["steps"] == 2 and record["config"]["loss"] == "distill"
    assert "SparseDistillKLDivLoss" in (tmp_path / "m" / "README.md").read_text()
    assert load_model(tmp_path / "m").encode_documents(QUERIES).nnz > 0


def test_a_seeded_splade_run_repeats_to_the_bit(slice_mined, tmp_path):
    """The MLM head the default model lacks is drawn from the run's seed (not from whatever the host's generator
    held), so the same config trains the same weights; another seed starts another head."""
    import torch
    from safetensors.torch import load_file

    from embedkit.train import TrainConfig, train

    def weights(name: str, seed: int) -> dict[str, torch.Tensor]:
        config = TrainConfig(output=str(tmp_path / name), objective="splade", data=str(slice_mined), num_negatives=1,
                             drop_short_examples=True, batch_size=4, max_length=32, max_steps=1, seed=seed)  # fmt: skip
        torch.rand(int(torch.randint(1, 50, ())))  # the host's generator somewhere else each time
        train(config)
        return {k: v for file in sorted((tmp_path / name).rglob("*.safetensors")) for k, v in load_file(file).items()}

    first, again, other = weights("a", 7), weights("b", 7), weights("c", 8)
    assert first.keys() == again.keys() and all(torch.equal(first[k], again[k]) for k in first)
    assert any(not torch.equal(first[k], other[k]) for k in first)
