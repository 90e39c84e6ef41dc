"""Hard-negative mining: search each training query with a model's FAISS index and keep candidates from a rank
window that are neither judged relevant nor scored too close to the positive (the false-negative guard of
RocketQA, Qu et al., 2021, and NV-Retriever's positive-aware mining, Moreira et al., 2024).

``candidates="hybrid"`` ranks by reciprocal-rank fusion of the dense and a BM25 (bm25s) top ``range_max``, as
RocketQA and Tevatron's BM25 negatives mix lexical and dense candidates; the guard still compares the model's own
scores, so a BM25-only candidate is scored from its stored vector.

sentence-transformers' ``mine_hard_negatives`` matches positives by text and re-encodes the corpus; embedkit's
works on qrels ids, reuses the cached corpus embeddings and the FAISS index, and records its settings.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from embedkit.data.beir import BeirDataset, doc_text
from embedkit.encode.executor import ShardExecutor
from embedkit.errors import EmbedkitError
from embedkit.models.embedding_model import EmbeddingModel
from embedkit.search.bm25 import bm25_searcher
from embedkit.search.dense import DenseRetrieval
from embedkit.search.fusion import reciprocal_rank_fusion
from embedkit.search.retriever import Dense
from embedkit.train.mined import MINED_FORMAT, write_mined_file
from embedkit.validation import check_number

CANDIDATES = ("dense", "hybrid")


@dataclass
class MiningSettings:
    split: str = "train"
    range_min: int = 10
    range_max: int = 100
    num_negatives: int = 8
    margin: float = 0.0
    relative_margin: float = 0.05
    sampling: str = "random"
    seed: int = 0
    factory: str = "Flat"
    candidates: str = "dense"  # dense | hybrid (dense and BM25 fused by reciprocal rank)
    teacher: str | None = None  # a cross-encoder that scores every (query, positive) and (query, negative)
    max_teacher_ratio: float | None = None  # drop a negative the teacher scores above this share of the positive
    teacher_max_length: int | None = None

    def check(self) -> None:
        """Refuses NaN and infinity by name (a NaN margin would keep no negative at all) and empty windows; a window
        or count past the corpus is harmless (the search depth is cut to the corpus size)."""
        check_number(self.range_min, "range_min", minimum=1)
        check_number(self.range_max, "range_max", minimum=1)
        check_number(self.num_negatives, "num_negatives", minimum=1)
        check_number(self.margin, "margin")
        check_number(self.relative_margin, "relative_margin", minimum=0)
        if self.relative_margin >= 1:
            raise EmbedkitError(f"must be in [0, 1), not {self.relative_margin}", field="relative_margin")
        check_number(self.seed, "seed", minimum=0)
        check_number(self.max_teacher_ratio, "max_teacher_ratio")
        check_number(self.teacher_max_length, "teacher_max_length", minimum=1)  # the teacher's own bound on load
        if not 1 <= self.range_min <= self.range_max:
            raise EmbedkitError(f"the rank window {self.range_min}-{self.range_max} is empty", field="range")
        if self.sampling not in ("random", "top"):
            raise EmbedkitError(f"unknown sampling '{self.sampling}' (random | top)", field="sampling")
        if self.candidates not in CANDIDATES:
            raise EmbedkitError(f"unknown candidates '{self.candidates}' (dense | hybrid)", field="candidates")
        if self.max_teacher_ratio is not None and not self.teacher:
            raise EmbedkitError("filtering by the teacher needs a teacher (--teacher)", field="max_teacher_ratio")
        if self.max_teacher_ratio is not None and not 0 < self.max_teacher_ratio <= 1:
            raise EmbedkitError(f"must be in (0, 1], not {self.max_teacher_ratio}", field="max_teacher_ratio")


def mine_hard_negatives(
    model: EmbeddingModel,
    dataset: BeirDataset,
    settings: MiningSettings,
    cache_dir: str | Path | None = None,
    executor: ShardExecutor | None = None,
) -> list[dict[str, Any]]:
    """One record per relevant (query, document) pair with ``num_negatives`` mined negatives.

    A candidate is kept when its rank (1-based) lies in ``[range_min, range_max]``, it is not judged relevant for
    the query, and its score is below both ``positive - margin`` and ``positive * (1 - relative_margin)``.
    """
    settings.check()
    qrels = dataset.qrels(settings.split)
    # the shared cached encode; ``executor`` encodes the corpus elsewhere when it is not cached yet
    index = DenseRetrieval(model, Dense(settings.factory), cache_dir, executor).index(dataset)
    row_of = {doc_id: i for i, doc_id in enumerate(index.ids)}
    query_ids = list(qrels)
    query_vectors = model.encode_queries([dataset.queries[q] for q in query_ids])
    depth = min(settings.range_max, len(index.ids))  # a window past the corpus holds the whole corpus
    scores, hits = index.search(query_vectors, depth)
    dense_scores = {q: dict(zip(ids, map(float, values))) for q, ids, values in zip(query_ids, hits, scores)}
    ranked = dense_scores
    if settings.candidates == "hybrid":
        lexical = bm25_searcher(dataset).search({q: dataset.queries[q] for q in query_ids}, depth)
        ranked = reciprocal_rank_fusion([ranked, lexical], depth=depth, k=depth)
    corpus = dataset.corpus
    rng = np.random.default_rng(settings.seed)
    records = []
    for query_id, query_vector in zip(query_ids, query_vectors):
        relevant = {doc for doc, grade in qrels[query_id].items() if grade > 0}
        candidates = list(ranked.get(query_id, {}))
        candidate_scores = [dense_scores[query_id].get(doc_id) for doc_id in candidates]
        missing = [i for i, value in enumerate(candidate_scores) if value is None]
        if missing:  # BM25-only candidates: the model's score from the stored vectors
            rows = np.array([row_of[candidates[i]] for i in missing])
            for i, value in zip(missing, index.vectors.gather(rows) @ query_vector):
                candidate_scores[i] = float(value)
        for positive_id in sorted(relevant):
            positive_score = float(query_vector @ index.vectors.gather(np.array([row_of[positive_id]]))[0])
            ceiling = min(positive_score - settings.margin, positive_score * (1 - settings.relative_margin))
            window = [
                (rank, doc_id, score)
                for rank, (doc_id, score) in enumerate(zip(candidates, candidate_scores), start=1)
                if settings.range_min <= rank <= settings.range_max and doc_id not in relevant and score < ceiling
            ]
            if settings.sampling == "random" and len(window) > settings.num_negatives:
                picked = sorted(rng.choice(len(window), settings.num_negatives, replace=False))
                window = [window[i] for i in picked]
            window = window[: settings.num_negatives]
            records.append(
                {
                    "query_id": query_id,
                    "query": dataset.queries[query_id],
                    "positive_id": positive_id,
                    "positive": doc_text(corpus[row_of[positive_id]]),
                    "positive_score": positive_score,
                    "negative_ids": [doc_id for _, doc_id, _ in window],
                    "negative_ranks": [rank for rank, _, _ in window],
                    "negative_scores": [score for _, _, score in window],
                    "negatives": [doc_text(corpus[row_of[doc_id]]) for _, doc_id, _ in window],
                }
            )
    return records


def write_mined(
    path: str | Path,
    records: list[dict[str, Any]],
    model: EmbeddingModel,
    dataset: BeirDataset,
    settings: MiningSettings,
    overwrite: bool = False,
    teacher: dict[str, Any] | None = None,
) -> Path:
    """The records as JSONL (a training file as it stands) and ``<path>.meta.json`` with every setting.

    An existing file is replaced only when it is an earlier mined file and ``overwrite`` says so.
    """
    path = Path(path)
    short = sum(len(r["negatives"]) < settings.num_negatives for r in records)
    meta = {
        "format": MINED_FORMAT,
        "model": model.settings,
        "dataset": dataset.describe(),
        "mining": asdict(settings),
        "examples": len(records),
        "examples_short_of_negatives": short,
        "teacher": teacher,
        "teacher_dropped_negatives": sum(r.get("teacher_dropped", 0) for r in records),
    }
    return write_mined_file(path, records, meta, overwrite)
