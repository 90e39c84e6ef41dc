"""How each family of bi-encoder trains, as one record per family: the model and loss it starts from, its
sentence-transformers Trainer and arguments, and the retriever that evaluates the result. ``train`` looks a config's
family up here (``TrainConfig.family``) instead of branching on it; a new family adds a ``Recipe``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sentence_transformers.base.sampler import BatchSamplers

from embedkit.train.data import document_texts
from embedkit.train.multivector import build_multivector_model, multivector_loss
from embedkit.train.sparse import build_sparse_model, sparse_arguments, sparse_loss


@dataclass(frozen=True)
class Recipe:
    retriever: str  # evaluate's --retriever for the trained model
    # (config, the training examples) -> (network, loss, what it started from)
    model_and_loss: Callable[[Any, Any], tuple[Any, Any, dict]]
    trainer: Callable[[], type]
    arguments: Callable[[dict, Any], Any]  # (the shared arguments, config) -> the Trainer's arguments


def _sparse_model(config: Any, examples: Any) -> tuple[Any, Any, dict]:
    documents = document_texts(examples) if config.objective == "splade-inference-free" else None
    network, started = build_sparse_model(
        config.objective, config.model, config.max_length, config.csr_k, config.freeze_encoder, documents
    )
    return network, sparse_loss(config, network), started


def _sparse_trainer() -> type:
    from sentence_transformers.sparse_encoder import SparseEncoderTrainer

    return SparseEncoderTrainer


def _sparse_arguments(arguments: dict, config: Any) -> Any:
    from sentence_transformers.sparse_encoder import SparseEncoderTrainingArguments

    extra = {"batch_sampler": BatchSamplers.NO_DUPLICATES, "disable_tqdm": False, **sparse_arguments(config)}
    return SparseEncoderTrainingArguments(**arguments, **extra)


def _multivector_model(config: Any, examples: Any) -> tuple[Any, Any, dict]:
    network, started = build_multivector_model(config.model, config.max_length, config.projection_dim, config.seed)
    return network, multivector_loss(config, network), started


def _multivector_trainer() -> type:
    from sentence_transformers.multi_vector_encoder import MultiVectorEncoderTrainer

    return MultiVectorEncoderTrainer


def _multivector_arguments(arguments: dict, config: Any) -> Any:
    from sentence_transformers.multi_vector_encoder import MultiVectorEncoderTrainingArguments

    return MultiVectorEncoderTrainingArguments(**arguments, batch_sampler=BatchSamplers.NO_DUPLICATES,
                                               disable_tqdm=False)  # fmt: skip


RECIPES = {
    "sparse": Recipe("splade", _sparse_model, _sparse_trainer, _sparse_arguments),
    "multivector": Recipe("colbert", _multivector_model, _multivector_trainer, _multivector_arguments),
}
