"""Learned sparse encoders through sentence-transformers' ``SparseEncoder`` stack, on the same examples as the dense
fine-tune (``anchor, positive, negative_1..n``):

- ``splade``: the start model with a masked-language-model head and SPLADE max pooling, ``SpladeLoss`` (in-batch and
  hard negatives, FLOPS regularisation of queries and documents, its weights warmed up quadratically by
  sentence-transformers' scheduler callback);
- ``splade-inference-free``: documents through that head, queries only looked up (``SparseStaticEmbedding`` under a
  ``Router``, its weights starting at the training documents' idf), so a query costs what BM25's does; only
  documents are regularised;
- ``csr``: a sparse auto-encoder (top-k latents) on the start model's own dense vector, ``CSRLoss`` (its ranking
  term at the dense temperature); ``freeze_encoder`` trains the auto-encoder alone, as the CSR paper does.

A start model without an MLM head (all-MiniLM-L6-v2, the default) gets one initialised by transformers: the decoder
tied to the word embeddings (as BERT's is), the transform and bias new; ``head_record`` says which tensors were new.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from embedkit.errors import EmbedkitError
from embedkit.models.reference import resolve_model

SPARSE_OBJECTIVES = ("splade", "splade-inference-free", "csr")
QUERY_WEIGHTS = r"sub_modules\.query\.0\.weight"  # the inference-free query table's parameter (sentence-transformers 6)


def head_record(path: Path) -> dict[str, Any]:
    """What the start checkpoint lacked of an MLM head (initialised, not loaded)."""
    from safetensors import safe_open

    files = sorted(path.glob("*.safetensors"))
    names: set[str] = set()
    for file in files:
        with safe_open(str(file), "pt") as handle:
            names |= set(handle.keys())
    has_head = any(name.startswith(("cls.", "lm_head.")) for name in names)
    new = "the MLM head: decoder tied to the word embeddings, transform and bias new (from the run's seed)"
    return {"start_has_mlm_head": has_head, "initialised": None if has_head else new}


def require_mlm_head(model: str | None) -> None:
    """Refuse SPLADE from a checkpoint without an MLM head (unless ``new_mlm_head``): a new head is random, and its
    log-saturated logits light up most of the vocabulary in every document, which SPLADE's few steps never undo."""
    from embedkit.models.sparse_model import is_sparse_folder

    reference = resolve_model(model, None)
    path = reference.path
    if not path.is_dir() or is_sparse_folder(path) or head_record(path)["start_has_mlm_head"]:
        return
    raise EmbedkitError(
        f"{reference.name} has no MLM head for SPLADE to start from: train one first with the encoder frozen "
        f"(embedkit pretrain --objective mlm --model {reference.name} --head-warmup-steps N --max-steps N -o DIR) "
        "and train from DIR, or pass --new-mlm-head to start from a random one",
        field="model",
    )


def _splade_document_modules(path: str, max_length: int | None) -> list[Any]:
    from sentence_transformers.sparse_encoder.modules import SpladePooling, Transformer

    limit = {"model_max_length": max_length} if max_length else {}
    return [Transformer(path, transformer_task="fill-mask", processor_kwargs=limit), SpladePooling("max")]


def document_idf(documents: list[str], tokenizer: Any) -> Any:
    """BM25's idf of every vocabulary entry over ``documents`` (a text counts once per entry): where the inference-free
    query table starts (opensearch's recipe), so a query's rare terms outweigh its stopwords from the first step. (All
    ones, as sentence-transformers starts it, barely moves: one step moves a weight by about the learning rate.)"""
    import numpy as np
    import torch

    frequency = np.zeros(len(tokenizer.get_vocab()), dtype=np.float64)
    for start in range(0, len(documents), 1024):
        for ids in tokenizer(documents[start : start + 1024], add_special_tokens=False)["input_ids"]:
            frequency[np.unique(np.asarray(ids, dtype=np.int64))] += 1
    count = len(documents)
    return torch.tensor(np.log1p((count - frequency + 0.5) / (frequency + 0.5)), dtype=torch.float32)


def build_sparse_model(
    objective: str,
    model: str | None,
    max_length: int | None,
    csr_k: int,
    freeze_encoder: bool = False,
    documents: list[str] | None = None,
) -> tuple[Any, dict]:
    """The network to train and what it started from (a SparseEncoder folder is trained further as it is)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sparse_encoder import SparseEncoder
    from sentence_transformers.sparse_encoder.modules import Router, SparseAutoEncoder, SparseStaticEmbedding

    from embedkit.models.sparse_model import is_sparse_folder

    reference = resolve_model(model, None)
    path = str(reference.path)
    started: dict[str, Any] = {"model": reference.name, "objective": objective}
    if reference.path.is_dir() and is_sparse_folder(reference.path):
        network = SparseEncoder(path)
        if max_length:
            network.max_seq_length = max_length
        return network, started | {"continued": True}
    if objective == "csr":
        dense = SentenceTransformer(path)
        if max_length:
            dense.max_seq_length = max_length
        dim = dense.get_embedding_dimension()
        if csr_k > 4 * dim:
            raise EmbedkitError(
                f"must be at most the auto-encoder's {4 * dim} latents (4 x the model's {dim} dimensions), not {csr_k}",
                field="csr_k",
            )
        if freeze_encoder:  # CSR as published: only the auto-encoder learns, so the dense model stays as it was
            dense.requires_grad_(False)
        latent = SparseAutoEncoder(dim, hidden_dim=4 * dim, k=csr_k, k_aux=min(2 * csr_k, 4 * dim))
        started |= {"hidden_dim": 4 * dim, "k": csr_k, "encoder_frozen": freeze_encoder}
        return SparseEncoder(modules=[*dense, latent]), started
    modules = _splade_document_modules(path, max_length)
    started |= head_record(reference.path) if reference.path.is_dir() else {}
    if objective == "splade":
        return SparseEncoder(modules=modules, similarity_fn_name="dot"), started
    tokenizer = modules[0].tokenizer
    if documents:
        queries = SparseStaticEmbedding(tokenizer, document_idf(documents, tokenizer), frozen=False)
        started |= {"query_weights_start": f"BM25 idf over the {len(documents)} training documents"}
    else:
        queries, started["query_weights_start"] = SparseStaticEmbedding(tokenizer, frozen=False), 1.0
    router = Router.for_query_document(query_modules=[queries], document_modules=modules)
    return SparseEncoder(modules=[router], similarity_fn_name="dot"), started


def sparse_loss(config: Any, network: Any) -> Any:
    """The loss of ``config.objective``."""
    from sentence_transformers.sparse_encoder import losses

    if config.loss not in ("infonce", "distill"):
        raise EmbedkitError(f"the sparse objectives train with infonce or distill, not {config.loss}", field="loss")
    if config.loss == "distill":  # the teacher's scores over positive and negatives; the student's dot products at
        # sentence-transformers' sparse temperature (2), not the dense cosine's 0.05
        ranking = losses.SparseDistillKLDivLoss(network, teacher_temperature=config.teacher_temperature)
    elif config.objective == "csr":  # codes that rebuild a unit vector have dot products near 1 or below: at
        # scale 1 their softmax is flat and the ranking loss stays at chance; the dense temperature's scale is not
        ranking = losses.SparseMultipleNegativesRankingLoss(network, scale=1 / config.temperature)
    else:
        ranking = losses.SparseMultipleNegativesRankingLoss(network)  # scale 1: SPLADE's dot products are large
    if config.objective == "csr":
        return losses.CSRLoss(network, loss=ranking, beta=config.csr_beta, gamma=config.csr_gamma)
    inference_free = config.objective == "splade-inference-free"
    return losses.SpladeLoss(
        network,
        ranking,
        document_regularizer_weight=config.flops_document_weight,
        query_regularizer_weight=0.0 if inference_free else config.flops_query_weight,
        use_document_regularizer_only=inference_free,
    )


def loss_callbacks(loss: Any) -> list[Any] | None:
    """SpladeLoss's regulariser warm-up, given explicitly (sentence-transformers would add it with a warning)."""
    from sentence_transformers.sparse_encoder.callbacks import SpladeRegularizerWeightSchedulerCallback
    from sentence_transformers.sparse_encoder.losses import SpladeLoss

    return [SpladeRegularizerWeightSchedulerCallback(loss)] if isinstance(loss, SpladeLoss) else None


def sparse_arguments(config: Any) -> dict[str, Any]:
    """Trainer arguments only the inference-free model needs: the query column takes the query route (the others
    the router's default, documents), and the query table has its own learning rate."""
    if config.objective != "splade-inference-free":
        return {}
    return {"router_mapping": {"anchor": "query"}, "learning_rate_mapping": {QUERY_WEIGHTS: config.query_learning_rate}}
