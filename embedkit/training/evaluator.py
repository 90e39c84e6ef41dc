"""embedkit's retrieval metrics as a sentence-transformers evaluator, run on a dev set during training.

sentence-transformers' own ``InformationRetrievalEvaluator`` ranks and scores its own way; this one scores exactly as
``embedkit evaluate`` does (pytrec_eval, trec_eval's tie-breaking, BEIR's averaging) over an exact inner-product
search of the whole dev corpus, so a dev nDCG@10 during training is the figure an evaluation would report. The
Trainer logs it and the model card records it; ``pretrain`` runs it through ``EncoderEvaluation``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sentence_transformers.base.evaluation.evaluator import BaseEvaluator
from sentence_transformers.multi_vector_encoder import MultiVectorEncoder
from sentence_transformers.sparse_encoder import SparseEncoder
from transformers import TrainerCallback

from embedkit.data.beir import BeirDataset, doc_text, load_dataset
from embedkit.errors import EmbedkitError
from embedkit.evaluation.metrics import compute_metrics
from embedkit.models.device import autocast, effective_dtype
from embedkit.models.pooling import SENTENCE_POOLINGS, sentence_vector
from embedkit.multivector import TokenRows
from embedkit.protocols import Run
from embedkit.reranking.reranker import CrossEncoderReranker
from embedkit.reranking.settings import RerankSettings
from embedkit.rows import format_of
from embedkit.search.bm25 import bm25_searcher
from embedkit.sparse import SparseRows


class RetrievalEvaluator(BaseEvaluator):
    """nDCG@10 (primary), recall@100, MRR@10 ... of ``split``'s queries over the dataset's corpus."""

    def __init__(
        self,
        dataset: BeirDataset,
        split: str = "dev",
        k: int = 100,
        batch_size: int = 64,
        query_ids: list[str] | None = None,
        dtype: str = "float32",
    ) -> None:
        """``query_ids``: only these of ``split``'s queries (a dev set carved out of the training split);
        ``dtype``: the autocast the model encodes under (bfloat16 runs float32 on a CPU without bf16 instructions)."""
        super().__init__()
        qrels, queries = dataset.qrels(split), dataset.split_queries(split)
        if query_ids is not None:
            qrels = {query_id: qrels[query_id] for query_id in query_ids}
            queries = {query_id: queries[query_id] for query_id in query_ids}
        self.qrels, self.queries = qrels, queries
        self.doc_ids = list(dataset.corpus["_id"])
        self.doc_texts = [doc_text(row) for row in dataset.corpus]
        self.k, self.batch_size, self.dtype = k, batch_size, dtype
        self.name = f"{dataset.name}-{split}" + ("-carved" if query_ids is not None else "")
        self.primary_metric = "ndcg_at_10"
        self.greater_is_better = True

    @classmethod
    def of(cls, dataset: str, split: str, data_dir: str | None = None, **options: Any) -> RetrievalEvaluator:
        return cls(load_dataset(dataset, data_dir=data_dir), split, **options)

    def run(self, encode_queries: Any, encode_documents: Any) -> Run:
        """Exact top-k of every dev query with the given encoders (texts -> any family's rows)."""
        queries, documents = encode_queries(list(self.queries.values())), encode_documents(self.doc_texts)
        scores = format_of(queries).score(queries, documents)  # the family's exact similarity (embedkit.rows)
        depth = min(self.k, len(self.doc_ids))
        top = np.argsort(-scores, axis=1, kind="stable")[:, :depth]
        return {
            query_id: {self.doc_ids[j]: float(scores[row, j]) for j in top[row]}
            for row, query_id in enumerate(self.queries)
        }

    def metrics(self, run: Run) -> dict[str, float]:
        means, _ = compute_metrics(self.qrels, run)
        return {name: means[name] for name in ("ndcg_at_10", "recall_at_100", "mrr_at_10", "map_at_100")}

    def score(self, model: Any) -> dict[str, float]:
        """The metrics of a sentence-transformers model, unprefixed and kept out of its model card (a merge scores
        many candidate weights; only the one kept belongs in the card)."""
        sparse, tokens = isinstance(model, SparseEncoder), isinstance(model, MultiVectorEncoder)
        options = {"convert_to_sparse_tensor": True} if sparse else {"convert_to_numpy": True}

        def encoder(encode: Any) -> Any:
            def run(texts: list[str]) -> Any:
                vectors = encode(texts, batch_size=self.batch_size, **options)
                if tokens:
                    return TokenRows.from_list(vectors, model.get_embedding_dimension())
                return SparseRows.from_torch(vectors) if sparse else vectors

            return run

        with torch.inference_mode(), autocast(str(model.device), effective_dtype(str(model.device), self.dtype)):
            run = self.run(encoder(model.encode_query), encoder(model.encode_document))
        return self.metrics(run)

    def __call__(self, model: Any, output_path: str | None = None, epoch: int = -1, steps: int = -1) -> dict:
        metrics = self.prefix_name_to_metrics(self.score(model), self.name)
        self.store_metrics_in_model_card_data(model, metrics, epoch, steps)
        return metrics


class RerankEvaluator(BaseEvaluator):
    """A cross-encoder's dev nDCG@10 (and more), scored as ``embedkit evaluate`` scores: it reranks the top
    ``depth`` BM25 hits of each dev query (a first stage that does not change while the reranker trains)."""

    def __init__(self, retrieval: RetrievalEvaluator, dataset: BeirDataset, depth: int = 30) -> None:
        super().__init__()
        searcher = bm25_searcher(dataset)
        self.retrieval, self.depth = retrieval, depth
        self.first_stage = searcher.search(retrieval.queries, depth)
        self.documents = dataset.documents({doc for hits in self.first_stage.values() for doc in hits})
        self.name = f"{retrieval.name}-bm25@{depth}"
        self.primary_metric = "ndcg_at_10"
        self.greater_is_better = True

    def __call__(self, model: Any, output_path: str | None = None, epoch: int = -1, steps: int = -1) -> dict:
        reranker = CrossEncoderReranker(RerankSettings("the model being trained", self.depth), model=model)
        with autocast(str(model.device), effective_dtype(str(model.device), self.retrieval.dtype)):
            run = reranker.rerank(self.first_stage, self.retrieval.queries, self.documents)
        metrics = self.prefix_name_to_metrics(self.retrieval.metrics(run), self.name)
        self.store_metrics_in_model_card_data(model, metrics, epoch, steps)
        return metrics


class EncoderEvaluation(TrainerCallback):
    """Runs a ``RetrievalEvaluator`` on a plain encoder during pretraining (CLS or mean pooling, normalised or not, as
    the output will be loaded), logging its metrics with the Trainer's and keeping them for the record and the card."""

    def __init__(
        self,
        evaluator: RetrievalEvaluator,
        encoder: Any,
        tokenizer: Any,
        pooling: str,
        max_length: int,
        every: int,
        normalize: bool = False,
    ) -> None:
        if pooling not in SENTENCE_POOLINGS:
            raise EmbedkitError(f"the dev evaluation pools with cls or mean, not '{pooling}'", field="pooling")
        self.evaluator, self.encoder, self.tokenizer = evaluator, encoder, tokenizer
        self.pooling, self.max_length, self.every, self.normalize = pooling, max_length, every, normalize
        self.history: list[dict[str, float]] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        rows = []
        model = self.encoder.base_model
        for start in range(0, len(texts), self.evaluator.batch_size):
            batch = self.tokenizer(
                texts[start : start + self.evaluator.batch_size],
                padding=True,
                truncation=True,
                max_length=self.max_length,
                return_tensors="pt",
            ).to(model.device)
            hidden = model(**batch).last_hidden_state
            pooled = sentence_vector(hidden, batch["attention_mask"], self.pooling)
            if self.normalize:
                pooled = torch.nn.functional.normalize(pooled.float(), dim=-1)
            rows.append(pooled.float().cpu().numpy())
        return np.concatenate(rows)

    def score(self) -> dict[str, float]:
        """The encoder's metrics as it is now (not added to the history)."""
        was_training = self.encoder.training
        self.encoder.eval()
        with torch.inference_mode():
            run = self.evaluator.run(self.embed, self.embed)
        if was_training:
            self.encoder.train()
        return self.evaluator.metrics(run)

    def evaluate(self, step: int) -> dict[str, float]:
        metrics = {"step": step, **self.score()}
        self.history.append(metrics)
        return metrics

    def on_step_end(self, args, state, control, **kwargs) -> None:
        if state.is_world_process_zero and state.global_step % self.every == 0:
            metrics = self.evaluate(state.global_step)
            logged = {f"eval_{self.evaluator.name}_{key}": value for key, value in metrics.items() if key != "step"}
            state.log_history.append({**logged, "step": state.global_step, "epoch": state.epoch})
