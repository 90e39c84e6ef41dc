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
from transformers import TrainerCallback

from embedkit.data.beir import BeirDataset, doc_text, load_dataset
from embedkit.errors import EmbedkitError
from embedkit.evaluation.metrics import compute_metrics
from embedkit.models.pooling import SENTENCE_POOLINGS, sentence_vector
from embedkit.protocols import Run


class RetrievalEvaluator(BaseEvaluator):
    """nDCG@10 (primary), recall@100, MRR@10 ... of ``split``'s queries over the dataset's corpus."""

    def __init__(self, dataset: BeirDataset, split: str = "dev", k: int = 100, batch_size: int = 64) -> None:
        super().__init__()
        self.qrels = dataset.qrels(split)
        self.queries = dataset.split_queries(split)
        self.doc_ids = list(dataset.corpus["_id"])
        self.doc_texts = [doc_text(row) for row in dataset.corpus]
        self.k, self.batch_size = k, batch_size
        self.name = f"{dataset.name}-{split}"
        self.primary_metric = "ndcg_at_10"
        self.greater_is_better = True

    @classmethod
    def of(cls, dataset: str, split: str, data_dir: str | None = None) -> RetrievalEvaluator:
        return cls(load_dataset(dataset, data_dir=data_dir), split)

    def run(self, encode_queries: Any, encode_documents: Any) -> Run:
        """Exact inner-product top-k of every dev query with the given encoders (texts -> float32 rows)."""
        queries = np.asarray(encode_queries(list(self.queries.values())), dtype=np.float32)
        documents = np.asarray(encode_documents(self.doc_texts), dtype=np.float32)
        scores = queries @ documents.T
        depth = min(self.k, len(self.doc_ids))
        top = np.argsort(-scores, axis=1, kind="stable")[:, :depth]
        return {
            query_id: {self.doc_ids[j]: float(scores[row, j]) for j in top[row]}
            for row, query_id in enumerate(self.queries)
        }

    def metrics(self, run: Run) -> dict[str, float]:
        means, _ = compute_metrics(self.qrels, run)
        return {name: means[name] for name in ("ndcg_at_10", "recall_at_100", "mrr_at_10", "map_at_100")}

    def __call__(self, model: Any, output_path: str | None = None, epoch: int = -1, steps: int = -1) -> dict:
        with torch.inference_mode():
            run = self.run(
                lambda texts: model.encode_query(texts, batch_size=self.batch_size, convert_to_numpy=True),
                lambda texts: model.encode_document(texts, batch_size=self.batch_size, convert_to_numpy=True),
            )
        metrics = self.prefix_name_to_metrics(self.metrics(run), self.name)
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

    def evaluate(self, step: int) -> dict[str, float]:
        was_training = self.encoder.training
        self.encoder.eval()
        with torch.inference_mode():
            run = self.evaluator.run(self.embed, self.embed)
        if was_training:
            self.encoder.train()
        metrics = {"step": step, **self.evaluator.metrics(run)}
        self.history.append(metrics)
        return metrics

    def on_step_end(self, args, state, control, **kwargs) -> None:
        if state.is_world_process_zero and state.global_step % self.every == 0:
            metrics = self.evaluate(state.global_step)
            logged = {f"eval_{self.evaluator.name}_{key}": value for key, value in metrics.items() if key != "step"}
            state.log_history.append({**logged, "step": state.global_step, "epoch": state.epoch})
