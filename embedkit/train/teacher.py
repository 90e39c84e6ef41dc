"""A cross-encoder teacher over mined negatives: its logits become the ``scores`` that ``train --loss distill``
reads, and a negative it scores near or above the positive is dropped as a likely false negative (NV-Retriever's
positive-aware filter, Moreira et al., 2024, with a teacher's probabilities instead of the student's cosines).

``mine --teacher`` applies it while mining; ``rescore_mined`` applies it to a mined file that already exists. A
teacher can also be a run (``run_scored``): a retriever's scores for each query's documents, such as a fusion of BM25
and a dense model, which is what distillation from an ensemble reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from embedkit.data.jsonl import read_records
from embedkit.errors import EmbedkitError
from embedkit.reranking.reranker import CrossEncoderReranker
from embedkit.storage import read_json, sha256_file
from embedkit.train.mined import is_mined_file, meta_path, write_mined_file

NEGATIVE_LISTS = ("negatives", "negative_ids", "negative_ranks", "negative_scores")  # one entry per negative


def teacher_scored(
    records: list[dict[str, Any]], teacher: CrossEncoderReranker, max_ratio: float | None = None
) -> tuple[list[dict[str, Any]], int]:
    """Each record with ``scores``: the teacher's logits for its positive, then for each negative it keeps, and the
    number of negatives dropped in all.

    With ``max_ratio`` a negative is dropped when the teacher's probability for it (the sigmoid of its logit) exceeds
    ``max_ratio`` times the positive's; each record says how many it lost (``teacher_dropped``).
    """
    pairs = [(r["query"], text) for r in records for text in (r["positive"], *r["negatives"])]
    logits = iter(teacher.score(pairs).tolist())
    scored, dropped = [], 0
    for record in records:
        positive, negatives = next(logits), [next(logits) for _ in record["negatives"]]
        ceiling = None if max_ratio is None else max_ratio * _sigmoid(positive)
        keep = [i for i, score in enumerate(negatives) if ceiling is None or _sigmoid(score) <= ceiling]
        lists = {key: [record[key][i] for i in keep] for key in NEGATIVE_LISTS if key in record}
        lost = len(negatives) - len(keep)
        scored.append({**record, **lists, "scores": [positive, *(negatives[i] for i in keep)], "teacher_dropped": lost})
        dropped += lost
    return scored, dropped


def _sigmoid(logit: float) -> float:
    return float(1 / (1 + np.exp(-logit)))


def read_mined(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The records of a file ``embedkit mine`` wrote, and its sidecar; a bad line is refused with its number."""
    if not is_mined_file(path):
        raise EmbedkitError(f"not a file written by embedkit mine (no {meta_path(path).name} beside it)", path=path)
    records = []
    for number, record in read_records(path, ("query", "positive", "negatives")):
        texts = [record["query"], record["positive"], *record["negatives"]]
        if not isinstance(record["negatives"], list) or not all(isinstance(t, str) for t in texts):
            raise EmbedkitError("query, positive and negatives must be text", path=path, line=number, field="negatives")
        records.append(record)
    if not records:
        raise EmbedkitError("holds no examples", path=path)
    return records, read_json(meta_path(path))


def rescore_mined(
    source: str | Path,
    output: str | Path,
    teacher: CrossEncoderReranker,
    max_ratio: float | None = None,
    overwrite: bool = False,
) -> tuple[Path, int]:
    """Write ``source``'s examples scored (and filtered) by ``teacher`` to ``output``, a mined file of its own whose
    sidecar keeps the mining settings and adds the teacher, the ratio, the count dropped and the source's sha256."""
    source, output = Path(source), Path(output)
    records, meta = read_mined(source)
    records, dropped = teacher_scored(records, teacher, max_ratio)
    meta = {key: value for key, value in meta.items() if key != "jsonl_sha256"}
    meta["mining"] = {**meta.get("mining", {}), "teacher": teacher.settings.model, "max_teacher_ratio": max_ratio}
    meta |= {
        "teacher": teacher.describe(),
        "teacher_dropped_negatives": dropped,
        "rescored_from": {"path": str(source), "sha256": sha256_file(source)},
    }
    return write_mined_file(output, records, meta, overwrite), dropped


def run_scored(
    records: list[dict[str, Any]], run: dict[str, dict[str, float]], path: Path, lines: list[int]
) -> tuple[list[dict[str, Any]], int]:
    """Each record (at ``lines`` of ``path``) with ``scores`` read from ``run`` for its positive and negatives, by
    id, and how many were not in the run's list for their query: those score the query's lowest listed score (they
    ranked below all of them)."""
    scored, floored = [], 0
    for number, record in zip(lines, records):
        missing = [key for key in ("query_id", "positive_id", "negative_ids") if key not in record]
        if missing:
            message = "a run teacher scores by id, as 'embedkit mine' writes them"
            raise EmbedkitError(message, path=path, line=number, field=missing[0])
        hits = run.get(record["query_id"])
        if not hits:
            message = f"query '{record['query_id']}' is not in the teacher's run"
            raise EmbedkitError(message, path=path, line=number, field="query_id")
        floor = min(hits.values())
        ids = [record["positive_id"], *record["negative_ids"]]
        floored += sum(doc_id not in hits for doc_id in ids)
        scored.append({**record, "scores": [hits.get(doc_id, floor) for doc_id in ids]})
    return scored, floored


def check_run_ids(path: Path, run: dict[str, dict[str, float]], corpus_ids: set[str]) -> None:
    """Refuse a run naming a document the corpus does not hold, at its first line."""
    from embedkit.data.jsonl import read_lines_of

    if all(doc_id in corpus_ids for hits in run.values() for doc_id in hits):
        return
    for number, line in read_lines_of(path):
        parts = line.split()
        if len(parts) == 6 and parts[2] not in corpus_ids:
            raise EmbedkitError(f"'{parts[2]}' is not in the dataset's corpus", path=path, line=number, field="doc id")


def rescore_mined_from_run(
    source: str | Path, output: str | Path, run_path: str | Path, corpus_ids: set[str], overwrite: bool = False
) -> tuple[Path, int]:
    """Write ``source``'s examples scored by the run at ``run_path`` (see ``run_scored``) to ``output``; the sidecar
    records the run's path and sha256 and how many scores were floored."""
    from embedkit.data.trec import read_run

    source, output, run_path = Path(source), Path(output), Path(run_path)
    records, meta = read_mined(source)
    run = read_run(run_path)
    check_run_ids(run_path, run, corpus_ids)
    lines = [number for number, _ in read_records(source, ("query", "positive", "negatives"))]
    records, floored = run_scored(records, run, source, lines)
    meta = {key: value for key, value in meta.items() if key != "jsonl_sha256"}
    meta |= {
        "teacher": {"run": str(run_path), "sha256": sha256_file(run_path), "floored_scores": floored},
        "rescored_from": {"path": str(source), "sha256": sha256_file(source)},
    }
    return write_mined_file(output, records, meta, overwrite), floored
