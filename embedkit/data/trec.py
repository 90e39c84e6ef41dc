"""TREC run files: ``qid Q0 docid rank score tag``, ranked as trec_eval ranks (score, then doc id, descending).

Part of the data stage, the lowest: searching writes runs, evaluation and reports read them, all import it from here.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from embedkit.data.jsonl import read_lines_of
from embedkit.errors import EmbedkitError
from embedkit.protocols import Run
from embedkit.storage import write_lines
from embedkit.validation import check_id

# The one order of a query's hits everywhere embedkit cuts, writes or scores a run. trec_eval (and so pytrec_eval)
# ignores a run file's rank column and sorts by score, breaking ties by document id compared as bytes, descending;
# ids are NFC strings and UTF-8 byte order is code-point order, so Python's string order is the same.
TIE_BREAK = "score descending, then document id descending (trec_eval)"


def ranked(hits: dict[str, float]) -> list[tuple[str, float]]:
    """A query's hits in ``TIE_BREAK`` order: the order pytrec_eval scores, ``write_run`` ranks and cuts keep."""
    return sorted(hits.items(), key=lambda item: (item[1], item[0]), reverse=True)


def top_hits(scores: Any, doc_ids: list[str], k: int, positive_only: bool = False) -> list[tuple[str, float]]:
    """The ``k`` best of one query's scores over ``doc_ids`` (a numpy array) in ``TIE_BREAK`` order: every document
    tied at the k-th score competes for the last places by id, as trec_eval would rank a deeper run;
    ``positive_only`` drops scores of 0 and below (a sparse product's documents sharing no term)."""
    import numpy as np

    candidates = np.flatnonzero(scores > 0) if positive_only else np.arange(len(scores))
    if len(candidates) > k:
        kth = np.partition(scores[candidates], len(candidates) - k)[len(candidates) - k]
        candidates = candidates[scores[candidates] >= kth]
    return sorted(((doc_ids[j], float(scores[j])) for j in candidates), key=lambda hit: (hit[1], hit[0]),
                  reverse=True)[:k]  # fmt: skip


def sort_run(run: Run) -> Run:
    """Every query's hits in ``TIE_BREAK`` order, so a consumer that takes a dict's first hits agrees with scoring."""
    return {query_id: dict(ranked(hits)) for query_id, hits in run.items()}


def write_run(path: str | Path, run: Run, tag: str = "embedkit") -> None:
    lines = (
        f"{query_id} Q0 {doc_id} {rank} {score!r} {tag}"
        for query_id, hits in run.items()
        for rank, (doc_id, score) in enumerate(ranked(hits), start=1)
    )
    write_lines(path, lines)


def read_run(path: str | Path) -> Run:
    """A TREC run; every line must have 6 columns, an integer rank and a finite score, each (query, doc) once."""
    run: Run = {}
    for number, line in read_lines_of(Path(path)):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 6:
            raise EmbedkitError(f"expected 6 columns, got {len(parts)}", path=path, line=number)
        query_id = check_id(parts[0], path, number, "query id")
        doc_id = check_id(parts[2], path, number, "doc id")
        try:
            int(parts[3])
        except ValueError:
            raise EmbedkitError(f"not an integer: {parts[3]!r}", path=path, line=number, field="rank") from None
        try:
            score = float(parts[4])
        except ValueError:
            raise EmbedkitError(f"not a number: {parts[4]!r}", path=path, line=number, field="score") from None
        if not math.isfinite(score):
            raise EmbedkitError(f"not a finite number: {parts[4]!r}", path=path, line=number, field="score")
        hits = run.setdefault(query_id, {})
        if doc_id in hits:
            raise EmbedkitError(f"'{doc_id}' is listed twice for query '{query_id}'", path=path, line=number)
        hits[doc_id] = score
    if not run:
        raise EmbedkitError("holds no results", path=path)
    return run


def looks_like_run(path: Path) -> bool:
    """Whether an existing file is a TREC run (so ``--overwrite`` may replace it) rather than someone's other file."""
    try:
        read_run(path)
    except (EmbedkitError, OSError):
        return False
    return True
