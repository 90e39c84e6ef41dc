"""TREC run files: ``qid Q0 docid rank score tag``, ranked as trec_eval ranks (score, then doc id, descending)."""

from __future__ import annotations

from pathlib import Path

from embedkit.errors import EmbedkitError
from embedkit.protocols import Run
from embedkit.storage import write_lines


def ranked(hits: dict[str, float]) -> list[tuple[str, float]]:
    return sorted(hits.items(), key=lambda item: (item[1], item[0]), reverse=True)


def write_run(path: str | Path, run: Run, tag: str = "embedkit") -> None:
    lines = (
        f"{query_id} Q0 {doc_id} {rank} {score!r} {tag}"
        for query_id, hits in run.items()
        for rank, (doc_id, score) in enumerate(ranked(hits), start=1)
    )
    write_lines(path, lines)


def read_run(path: str | Path) -> Run:
    run: Run = {}
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 6:
                raise EmbedkitError(f"expected 6 columns, got {len(parts)}", path=path, line=number)
            try:
                run.setdefault(parts[0], {})[parts[2]] = float(parts[4])
            except ValueError:
                raise EmbedkitError(f"not a number: {parts[4]!r}", path=path, line=number, field="score") from None
    return run
