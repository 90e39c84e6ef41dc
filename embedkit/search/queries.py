"""``search_queries``: a model's queries against any index (``embedkit.protocols``), as a ``Run``.

One path for every family: the model checks the index (``Encoder.check``), encodes the queries to its rows, and the
index answers ``search(rows, k) -> Hits``. BEIR's rule for ArguAna and Quora (a hit whose id is the query's own is
dropped, one deeper searched so ``k`` remain) is applied here and only here.
"""

from __future__ import annotations

from typing import Any

from embedkit.data.trec import ranked
from embedkit.errors import EmbedkitError
from embedkit.index.engine import refuse_filter
from embedkit.protocols import Hits, Run
from embedkit.search.chunks import Aggregation, chunking_of, search_chunked

RETRIEVER_OF = {"dense": "dense", "sparse": "splade", "multivector": "colbert"}  # --retriever of each family
NOUN = {"dense": "dense", "sparse": "sparse", "multivector": "multi-vector"}
FOLDER = {"dense": "a SentenceTransformer folder", "sparse": "a SparseEncoder folder",
          "multivector": "a MultiVectorEncoder folder"}  # fmt: skip


def require_family(model: Any, family: str) -> None:
    """Refuse a model of another family for a retrieval of this one, naming the retriever that would search it."""
    if model.kind != family:
        raise EmbedkitError(
            f"'{model.name}' is a {NOUN[model.kind]} model; --retriever {RETRIEVER_OF[family]} needs a "
            f"{NOUN[family]} one ({FOLDER[family]}); search this one with --retriever {RETRIEVER_OF[model.kind]}",
            field="model",
        )


def search_queries(
    model: Any, index: Any, queries: dict[str, str], k: int, *, ignore_identical_ids: bool = False, **options: Any
) -> tuple[Run, Any]:
    """Top-``k`` documents per query, and the query rows (for their statistics); ``options`` go to the index's
    ``search`` (``filter``, an engine's own parameters)."""
    model.check(index)
    query_ids = list(queries)
    rows = model.encode_queries([queries[q] for q in query_ids])
    hits = search_documents(index, rows, k + 1 if ignore_identical_ids else k, **options)
    return hits_to_run(hits, query_ids, k, ignore_identical_ids), rows


def search_documents(index: Any, rows: Any, k: int, aggregation: Aggregation | None = None, **options: Any) -> Hits:
    """The top ``k`` documents per query row: the index's hits, or for an index of chunk rows its chunks' scores
    combined per document by ``aggregation`` (MaxP unless told) before the top-k (``embedkit.search.chunks``)."""
    if not index.capabilities.filterable:
        refuse_filter(options.get("filter"), index.engine)
    if chunking_of(index) is None:
        return index.search(rows, k, **options)
    found = search_chunked(index, rows, k, aggregation, **options)
    return Hits.from_ranked([[(hit.document, hit.score) for hit in row] for row in found], k)


def hits_to_run(hits: Hits, query_ids: list[str], k: int, ignore_identical_ids: bool = False) -> Run:
    """Each query's hits as a ``Run`` cut to ``k`` in ``TIE_BREAK`` order (trec_eval's), its own id dropped with
    ``ignore_identical_ids``."""
    run: Run = {}
    for i, query_id in enumerate(query_ids):
        pairs = [(d, s) for d, s in hits.ranked(i) if not (ignore_identical_ids and d == query_id)]
        run[query_id] = dict(ranked(dict(pairs))[:k])
    return run
