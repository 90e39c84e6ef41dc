"""Training examples as a ``datasets.Dataset`` with columns ``anchor, positive, negative_1..n`` (the layout
sentence-transformers' losses read), plus a ``label`` column of teacher scores for distillation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import datasets

from embedkit.data.beir import BeirDataset, doc_text
from embedkit.data.jsonl import read_records
from embedkit.errors import EmbedkitError


def _columns(rows: list[dict[str, Any]], num_negatives: int, with_scores: bool) -> dict[str, list]:
    columns: dict[str, list] = {"anchor": [r["query"] for r in rows], "positive": [r["positive"] for r in rows]}
    for i in range(num_negatives):
        columns[f"negative_{i + 1}"] = [r["negatives"][i] for r in rows]
    if with_scores:
        columns["label"] = [r["scores"][: num_negatives + 1] for r in rows]
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
            scores = record.get("scores")
            if not isinstance(scores, list) or len(scores) < num_negatives + 1:
                raise EmbedkitError(
                    f"needs {num_negatives + 1} teacher scores (positive first)", path=path, line=number, field="scores"
                )
        rows.append(record)
    if not rows:
        raise EmbedkitError("no training examples", path=path)
    info = datasets.DatasetInfo(description=json.dumps({"source": str(path), "dropped_short_rows": dropped}))
    return datasets.Dataset.from_dict(_columns(rows, num_negatives or 0, with_scores), info=info)


def beir_pairs(dataset: BeirDataset, split: str = "train") -> datasets.Dataset:
    """One (query, positive document) example per relevant qrels pair of ``split``."""
    qrels = dataset.qrels(split)
    corpus = dataset.corpus
    row_of = {doc_id: i for i, doc_id in enumerate(corpus["_id"])}
    anchors, positives = [], []
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
    return datasets.Dataset.from_dict({"anchor": anchors, "positive": positives})
