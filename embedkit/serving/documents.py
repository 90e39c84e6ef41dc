"""The document endpoints of ``embedkit serve`` (``POST /documents``, ``GET`` and ``DELETE /documents/{id}``) and
filtered ``/search``: changes to a dense index through ``LiveIndex``.

Writes run one at a time on their own thread, so a slow encode of new documents never holds the batcher's worker:
searches keep being answered, and see the index before a change or after it (``LiveIndex`` applies a committed
change under its lock). The model is shared with the batcher, behind the engine's model lock. A served index without
a store gets one on the first write, with no filterable fields (declare them with ``embedkit index add --fields``).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, WithJsonSchema

from embedkit.errors import EmbedkitError
from embedkit.index.filters import compile_filter
from embedkit.serving import bodies
from embedkit.serving.errors import RequestError, refusal

Objects = Annotated[Any, WithJsonSchema({"type": "array", "items": {"type": ["object", "null"]}})]


class DocumentsRequest(BaseModel):
    """``{"ids": [...], "texts": [...], "metadata": [{...}, ...], "upsert": false}``."""

    model_config = ConfigDict(extra="forbid")
    ids: bodies.Texts
    texts: bodies.Texts
    metadata: Objects = None
    upsert: Annotated[Any, WithJsonSchema({"type": "boolean"})] = False


class Documents:
    """The served index's documents: read, added, replaced and deleted; writes serialised by one lock."""

    def __init__(self, engine: Any, index_path: str | Path | None) -> None:
        self.engine, self.index_path = engine, index_path
        self.write_lock = threading.Lock()

    def live(self, write: bool) -> Any:
        """The engine's index as a ``LiveIndex``; a write makes the folder's store on first use."""
        index = self.engine.index
        if hasattr(index, "store"):
            return index
        if not hasattr(index, "faiss_index") or self.index_path is None:
            raise RequestError("index", "this index takes no changes (a sparse, multi-vector or partitioned one)", 409)
        if not write:
            return None
        from embedkit.index.live import LiveIndex

        self.engine.index = LiveIndex.open(self.index_path)
        return self.engine.index

    def write(self, request: DocumentsRequest, limit: int) -> dict[str, Any]:
        ids, _ = bodies.texts(request.ids, "ids", limit)
        texts, _ = bodies.texts(request.texts, "texts", limit)
        if len(ids) != len(texts):
            raise RequestError("texts", f"{len(ids)} ids need {len(ids)} texts, not {len(texts)}")
        metadata = request.metadata
        if metadata is not None and (not isinstance(metadata, list) or len(metadata) != len(ids)):
            raise RequestError("metadata", f"must be a list of {len(ids)} objects (or null)")
        if not isinstance(request.upsert, bool):
            raise RequestError("upsert", f"must be true or false, not {bodies.json_type(request.upsert)}")
        with self.write_lock:
            live = self.live(write=True)
            with self.engine.model_lock:
                vectors = self.engine.model.encode_documents(texts, show_progress=False)
            write = live.upsert if request.upsert else live.add
            try:
                version = write(ids, vectors, texts=texts, metadata=metadata, model_settings=self.engine.model_settings)
            except EmbedkitError as err:
                raise refusal(err, 409 if "already in the index" in str(err) else 422) from None
        return {"added": len(ids), "count": len(live), "version": version}

    def delete(self, doc_id: str) -> dict[str, Any]:
        with self.write_lock:
            live = self.live(write=True)
            if live.document(doc_id) is None:
                raise RequestError("id", f"no document '{doc_id}' in the index", 404)
            version = live.delete([doc_id])
        return {"deleted": doc_id, "count": len(live), "version": version}

    def get(self, doc_id: str) -> dict[str, Any]:
        live = self.live(write=False)
        found = None if live is None else live.document(doc_id)
        if found is None and live is None and doc_id in set(self.engine.index.ids):
            found = {"id": doc_id, "metadata": {}}
        if found is None:
            raise RequestError("id", f"no document '{doc_id}' in the index", 404)
        return found


def check_filter(engine: Any, expression: Any) -> str | None:
    """A ``/search`` body's ``filter``: compiled against the index's declared fields now, so a bad one is a 422."""
    if expression is None:
        return None
    if not isinstance(expression, str):
        raise RequestError("filter", f"must be a string, not {bodies.json_type(expression)}")
    store = getattr(engine.index, "store", None)
    if store is None:
        raise RequestError("filter", "this index has no store of metadata to filter by")
    try:
        compile_filter(expression, store.fields, "filter")
    except EmbedkitError as err:
        raise refusal(err) from None
    return expression
