"""Training examples as a ``datasets.Dataset`` with columns ``anchor, positive, negative_1..n`` (the layout
sentence-transformers' losses read), plus a ``label`` column of teacher scores for distillation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import datasets
import numpy as np

from embedkit.data.beir import BeirDataset, doc_text
from embedkit.data.jsonl import read_records
from embedkit.errors import EmbedkitError

QUERY_ID = "query_id"  # kept beside the inputs to carve a dev set by query; dropped before training


def teacher_scores(record: dict[str, Any]) -> list[float] | None:
    """A row's teacher scores, positive first: ``scores`` (``embedkit mine --teacher``), else the mining model's own
    ``positive_score`` and ``negative_scores`` (``embedkit mine`` without a teacher)."""
    if "scores" in record:
        return record["scores"]
    if "positive_score" in record and isinstance(record.get("negative_scores"), list):
        return [record["positive_score"], *record["negative_scores"]]
    return None


def _columns(rows: list[dict[str, Any]], num_negatives: int, with_scores: bool) -> dict[str, list]:
    columns: dict[str, list] = {"anchor": [r["query"] for r in rows], "positive": [r["positive"] for r in rows]}
    for i in range(num_negatives):
        columns[f"negative_{i + 1}"] = [r["negatives"][i] for r in rows]
    if with_scores:
        columns["label"] = [[float(x) for x in teacher_scores(r)[: num_negatives + 1]] for r in rows]
    if all(isinstance(r.get(QUERY_ID), str) for r in rows):
        columns[QUERY_ID] = [r[QUERY_ID] for r in rows]
    return columns


def load_jsonl_examples(
    path: str | Path, num_negatives: int | None = None, with_scores: bool = False, drop_short: bool = False
) -> datasets.Dataset:
    """Rows ``{"query", "positive", "negatives": [...], "scores": [pos, neg...]}``; every row must carry at least
    ``num_negatives`` negatives (default: as many as the first row), and scores when distilling. With
    ``drop_short`` a row with too few negatives is dropped instead, and counted in ``dataset.info.description``."""
    path = Path(path)
    rows: list[dict[str, Any]] = []
    dropped = 0
    for number, record in read_records(path, required=("query", "positive")):
        for field in ("query", "positive"):
            if not isinstance(record[field], str) or not record[field].strip():
                raise EmbedkitError("must be a non-empty string", path=path, line=number, field=field)
        negatives = record.get("negatives", [])
        if not isinstance(negatives, list) or not all(isinstance(n, str) for n in negatives):
            raise EmbedkitError("must be a list of strings", path=path, line=number, field="negatives")
        if num_negatives is None:
            num_negatives = len(negatives)
        if len(negatives) < num_negatives and drop_short:
            dropped += 1
            continue
        if len(negatives) < num_negatives:
            raise EmbedkitError(
                f"has {len(negatives)} negatives, {num_negatives} needed", path=path, line=number, field="negatives"
            )
        if with_scores:
            scores = teacher_scores(record)
            if not isinstance(scores, list) or len(scores) < num_negatives + 1:
                raise EmbedkitError(
                    f"needs {num_negatives + 1} teacher scores, positive first (scores, or positive_score and "
                    "negative_scores as 'embedkit mine' writes them)",
                    path=path,
                    line=number,
                    field="scores",
                )
            if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in scores):
                raise EmbedkitError("must be numbers", path=path, line=number, field="scores")
        rows.append(record)
    if not rows:
        raise EmbedkitError("no training examples", path=path)
    teacher = None
    if with_scores:
        teacher = "scores" if "scores" in rows[0] else "the mining model's scores (positive_score, negative_scores)"
    description = {"source": str(path), "dropped_short_rows": dropped, "teacher": teacher}
    info = datasets.DatasetInfo(description=json.dumps(description))
    return datasets.Dataset.from_dict(_columns(rows, num_negatives or 0, with_scores), info=info)


def beir_pairs(dataset: BeirDataset, split: str = "train") -> datasets.Dataset:
    """One (query, positive document) example per relevant qrels pair of ``split``."""
    qrels = dataset.qrels(split)
    corpus = dataset.corpus
    row_of = {doc_id: i for i, doc_id in enumerate(corpus["_id"])}
    anchors, positives, query_ids = [], [], []
    for query_id, judged in qrels.items():
        for doc_id, grade in judged.items():
            if grade <= 0:
                continue
            if doc_id not in row_of:
                raise EmbedkitError(
                    f"judged document '{doc_id}' is not in the corpus", path=dataset.path / "qrels", field="corpus-id"
                )
            anchors.append(dataset.queries[query_id])
            positives.append(doc_text(corpus[row_of[doc_id]]))
            query_ids.append(query_id)
    return datasets.Dataset.from_dict({"anchor": anchors, "positive": positives, QUERY_ID: query_ids})


def document_texts(examples: datasets.Dataset) -> list[str]:
    """The distinct documents of training examples (their positive and negative columns), in first-seen order."""
    columns = [name for name in examples.column_names if name == "positive" or name.startswith("negative_")]
    return list(dict.fromkeys(text for name in columns for text in examples[name]))


def dev_query_ids(query_ids: list[str], fraction: float, seed: int) -> list[str]:
    """A seeded ``fraction`` of the distinct query ids (at least one, never all), sorted."""
    distinct = sorted(set(query_ids))
    count = min(max(1, round(len(distinct) * fraction)), len(distinct) - 1)
    if count < 1:
        raise EmbedkitError(f"{len(distinct)} training query is too few to carve a dev set from", field="dev_fraction")
    picked = np.random.default_rng(seed).choice(len(distinct), count, replace=False)
    return sorted(distinct[i] for i in picked)


def carve_dev(examples: datasets.Dataset, fraction: float, seed: int) -> tuple[datasets.Dataset, list[str]]:
    """The examples without the dev queries' rows, and the dev query ids."""
    if QUERY_ID not in examples.column_names:
        raise EmbedkitError("a dev set is carved by query: every training row needs a query_id", field="query_id")
    dev = set(dev_query_ids(examples[QUERY_ID], fraction, seed))
    kept = [i for i, query_id in enumerate(examples[QUERY_ID]) if query_id not in dev]
    return examples.select(kept), sorted(dev)
