"""Reranking: a first-stage run's top hits re-scored by a sentence-transformers ``CrossEncoder``.

The pairs go to ``CrossEncoder.predict`` (which batches them by length); embedkit adds what a pipeline needs around
it: the run in and out (every query and every hit kept, the hits below ``depth`` left in their order beneath the
re-scored ones), each (query, document) pair scored once however many runs share it, bf16/fp16 autocast (float32 on
a CPU without bf16 instructions, with a warning, as ``load_model`` does), and a record of the settings that change a
score.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sentence_transformers import CrossEncoder
from torch import nn

from embedkit.data.beir import BeirDataset, load_dataset
from embedkit.data.trec import ranked
from embedkit.errors import EmbedkitError
from embedkit.models.device import autocast, effective_dtype, pick_device
from embedkit.models.options import check_max_length, stack_limit
from embedkit.models.reference import weights_sha256
from embedkit.protocols import Run
from embedkit.reranking.settings import RerankSettings, resolve_cross_encoder
from embedkit.search.fusion import min_max
from embedkit.validation import check_sequence, check_text


def keep_head_in_float32(model: nn.Module) -> None:
    """Run the scoring head (the last linear layer) in float32 even under bf16/fp16 autocast.

    A bf16 logit has 8 bits of mantissa, so scores near each other round to one value and the ranking ties; the
    head's input is bf16 either way, but its dot product in float32 keeps the scores distinct.
    """
    head = [module for module in model.modules() if isinstance(module, nn.Linear)][-1]

    def float32_forward(hidden: torch.Tensor) -> torch.Tensor:
        bias = None if head.bias is None else head.bias.float()
        with torch.autocast(device_type=hidden.device.type, enabled=False):
            return nn.functional.linear(hidden.float(), head.weight.float(), bias)

    head.forward = float32_forward


class CrossEncoderReranker:
    """A loaded cross-encoder with the settings it scores under, and the pair scores it has computed so far."""

    def __init__(self, settings: RerankSettings, model: CrossEncoder | None = None) -> None:
        """Loads ``settings.model``, or scores with ``model`` as it is (a model being trained, for its dev set)."""
        self.settings = settings.check()
        if model is None:
            reference = resolve_cross_encoder(settings.model)
            self.name = reference.name
            self.weights_sha256 = weights_sha256(reference.path) if reference.path.is_dir() else None
            self.device = pick_device(settings.device)
            model = CrossEncoder(str(reference.path), max_length=settings.max_length, device=self.device)
            check_max_length(settings.max_length, stack_limit(model), path=reference.path)
            keep_head_in_float32(model)
        else:
            self.name, self.weights_sha256, self.device = settings.model, None, str(model.device)
        self.dtype = effective_dtype(self.device, settings.dtype)
        if model.num_labels != 1:
            raise EmbedkitError(f"scores with one label; this model has {model.num_labels}", field="reranker")
        self.model = model
        self.scores: dict[tuple[str, str], float] = {}  # (query id, doc id) -> score, reused across runs
        self.pairs_scored = 0

    def describe(self) -> dict[str, Any]:
        """The settings that change a reranked score, as reports record them."""
        return {
            **asdict(self.settings),
            "model": self.name,
            "weights_sha256": self.weights_sha256,
            "max_length": int(self.model.max_length),
            "scores": "logits",
            "dtype": self.dtype,
        }

    def score(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """Logits of ``(query text, document text)`` pairs, float32, in the order given."""
        pairs = check_pairs(pairs)
        if not pairs:
            return np.zeros(0, dtype=np.float32)
        with autocast(self.device, self.dtype):
            scores = self.model.predict(
                list(pairs),
                batch_size=self.settings.batch_size,
                activation_fn=torch.nn.Identity(),
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        self.pairs_scored += len(pairs)
        return np.asarray(scores, dtype=np.float32)

    def rerank(self, run: Run, queries: Mapping[str, str], documents: Mapping[str, str]) -> Run:
        """``run`` with each query's top ``depth`` hits re-scored and re-ordered, and the rest kept below them.

        A kept hit's score becomes ``lowest re-scored score - its position below the cut``, so the run's order (as
        trec_eval reads it) is the re-scored hits by score, then the others in their first-stage order. With a
        ``first_stage_weight`` the re-scored hits carry the interpolated score instead of the logit.
        """
        if not isinstance(run, Mapping) or not all(isinstance(hits, Mapping) for hits in run.values()):
            raise EmbedkitError("must map each query id to {doc id: score}", field="run")
        heads = {query_id: [doc for doc, _ in ranked(hits)[: self.settings.depth]] for query_id, hits in run.items()}
        missing = sorted(query_id for query_id in run if query_id not in queries)
        if missing:
            raise EmbedkitError(f"query '{missing[0]}' of the run has no text ({len(missing)} such)", field="query id")
        todo = list(dict.fromkeys((q, d) for q, docs in heads.items() for d in docs if (q, d) not in self.scores))
        for query_id, doc_id in todo:  # named by id: a pair's position in the batch means nothing to the caller
            check_text(queries[query_id], None, None, f"queries['{query_id}']")
            check_text(documents[doc_id], None, None, f"documents['{doc_id}']")
        fresh = self.score([(queries[q], documents[d]) for q, d in todo])
        self.scores.update(zip(todo, map(float, fresh)))
        return reordered(run, heads, self.scores, self.settings)


def reordered(run: Run, heads: dict[str, list[str]], scores: dict[tuple[str, str], float], settings: Any) -> Run:
    """Each query's head re-scored (``scores`` by query and document id, interpolated with the first stage's when
    ``settings.first_stage_weight``), the rest of its hits kept below them in their first-stage order."""
    result: Run = {}
    for query_id, hits in run.items():
        head = {doc: scores[(query_id, doc)] for doc in heads[query_id]}
        if settings.first_stage_weight:
            head = interpolated(head, {doc: hits[doc] for doc in head}, settings.first_stage_weight)
        floor = min(head.values(), default=0.0)
        tail = [doc for doc, _ in ranked(hits)[settings.depth :]]
        result[query_id] = {**head, **{doc: floor - position for position, doc in enumerate(tail, start=1)}}
    return result


def check_pairs(pairs: Any) -> list[tuple[str, str]]:
    """A list of ``(query, document)`` text pairs; a bare string or a pair of non-texts is refused by position."""
    checked = []
    for i, pair in enumerate(check_sequence(pairs, "pairs")):
        if isinstance(pair, (str, bytes)) or not isinstance(pair, Sequence) or len(pair) != 2:
            raise EmbedkitError("must be a (query, document) pair of texts", field=f"pairs[{i}]")
        checked.append(tuple(check_text(text, None, None, f"pairs[{i}][{j}]") for j, text in enumerate(pair)))
    return checked


def interpolated(logits: dict[str, float], first_stage: dict[str, float], weight: float) -> dict[str, float]:
    """``(1 - weight) * min-max(logits) + weight * min-max(first-stage scores)`` for one query's re-scored hits."""
    model, first = min_max(list(logits.items())), min_max(list(first_stage.items()))
    return {doc: (1 - weight) * model[doc] + weight * first[doc] for doc in logits}


def rerank_run(reranker: CrossEncoderReranker, run: Run, dataset: BeirDataset, source: str | Path | None = None) -> Run:
    """Rerank a run of ``dataset``'s queries over its corpus (the texts looked up by id); an id the dataset lacks is
    refused naming ``source``'s line where it first appears (the run file), or the run when there is no file."""
    needed = {doc for hits in run.values() for doc, _ in ranked(hits)[: reranker.settings.depth]}
    for column, (kind, known, wanted) in enumerate(
        [("query", dataset.queries, run), ("document", dataset.row_of, needed)]
    ):
        unknown = sorted(item for item in wanted if item not in known)
        if unknown:
            raise EmbedkitError(
                f"{kind} '{unknown[0]}' is not in {dataset.name} ({len(unknown)} such ids)",
                path=source,
                line=_first_line(source, 2 * column, unknown[0]),
                field=f"{kind} id",
            )
    return reranker.rerank(run, dataset.queries, dataset.documents(needed, source))


def _first_line(source: str | Path | None, column: int, value: str) -> int | None:
    """The 1-based line of a TREC run file whose ``column`` (0: query id, 2: doc id) is ``value``."""
    if source is None:
        return None
    with open(source, encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            fields = line.split()
            if len(fields) > column and fields[column] == value:
                return number
    return None


def rerank(run: Run, dataset: BeirDataset | str | Path, model: str, depth: int = 100, **settings: Any) -> Run:
    """One-call reranking: ``embedkit.rerank(run, "scifact", "path/to/cross-encoder", depth=100)``; ``settings``
    are ``RerankSettings``' other fields (batch_size, max_length, dtype, device, first_stage_weight)."""
    data = dataset if isinstance(dataset, BeirDataset) else load_dataset(dataset)
    return rerank_run(CrossEncoderReranker(RerankSettings(str(model), depth, **settings)), run, data)
