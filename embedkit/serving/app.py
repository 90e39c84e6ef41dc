"""The FastAPI app of ``embedkit serve``: /search, an OpenAI-compatible /v1/embeddings, /health, /documents and a
search page.

Requests are checked here (``bodies``: sizes, counts, texts, ``k``) and answered by the ``Engine`` through the
``MicroBatcher``, so concurrent clients share encoder calls. ``serve`` runs it under uvicorn in this process.
"""

from __future__ import annotations

import asyncio
import sys
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from importlib import resources
from typing import Any

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, JSONResponse

from embedkit.errors import EmbedkitError
from embedkit.rows import format_of
from embedkit.serving import bodies
from embedkit.serving.batcher import MicroBatcher, WorkFailed
from embedkit.serving.bodies import EmbeddingsRequest, SearchRequest
from embedkit.serving.documents import Documents, DocumentsRequest, check_filter
from embedkit.serving.engine import Engine
from embedkit.serving.errors import BodyLimit, RequestError, install_error_handlers
from embedkit.serving.settings import ServeSettings, is_loopback


def create_app(engine: Engine, settings: ServeSettings) -> FastAPI:
    """The app over one engine; the batcher's worker lives as long as the app (its lifespan)."""
    batcher = MicroBatcher(engine.process, settings.max_batch, settings.max_wait_ms)
    page = resources.files("embedkit.serving").joinpath("page.html").read_text(encoding="utf-8")
    model_name = engine.model.name
    documents = Documents(engine, engine.index_path)
    writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embedkit-writes")  # writes one at a time

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await batcher.start()
        yield
        await batcher.stop()
        writer.shutdown(wait=True)

    async def on_writer(function, *args) -> Any:
        return await asyncio.get_running_loop().run_in_executor(writer, function, *args)

    # no /docs or /redoc: their pages load scripts from a CDN; the schema stays at /openapi.json
    app = FastAPI(title="embedkit", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.add_middleware(BodyLimit, limit=settings.max_request_bytes)
    install_error_handlers(app)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def search_page() -> HTMLResponse:
        return HTMLResponse(page)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", **engine.describe(), "limits": settings.limits, "batching": batcher.stats.as_dict()}

    async def answer(texts: list[str], k: int | None, names: list[str], field: str) -> Any:
        """The batcher's answer for one request; a failure of this request alone names the text at fault."""
        try:
            return await batcher.submit(texts, k)
        except WorkFailed as failed:
            raise bodies.failure(failed, names, field) from None

    @app.post("/search")
    async def search(request: SearchRequest) -> JSONResponse:
        queries, names = bodies.texts(request.queries, "queries", settings.max_queries)
        k = bodies.whole_number(request.k, "k", settings.max_k, "--max-k")
        expression = check_filter(engine, request.filter)
        if expression is None:
            hits = await answer(queries, k, names, "queries")
        else:  # hits that depend on the filter: this request's texts alone, beside the batcher
            hits = await asyncio.to_thread(engine.search_filtered, queries, k, expression)
        results = [{"query": query, "hits": found} for query, found in zip(queries, hits)]
        return JSONResponse({"model": model_name, "k": k, "results": results})

    @app.post("/documents")
    async def add_documents(request: DocumentsRequest) -> JSONResponse:
        return JSONResponse(await on_writer(documents.write, request, settings.max_queries))

    @app.delete("/documents/{doc_id}")
    async def delete_document(doc_id: str) -> JSONResponse:
        return JSONResponse(await on_writer(documents.delete, doc_id))

    @app.get("/documents/{doc_id}")
    async def get_document(doc_id: str) -> JSONResponse:
        return JSONResponse(await asyncio.to_thread(documents.get, doc_id))

    @app.post("/v1/embeddings")
    async def embeddings(request: EmbeddingsRequest) -> JSONResponse:
        texts, names = bodies.texts(request.input, "input", settings.max_queries, single=True)
        model = bodies.optional_text(request.model, "model")
        bodies.optional_text(request.user, "user")
        if model is not None and model not in engine.model_names:
            raise RequestError("model", f"this server embeds with '{model_name}', not '{model}'")
        if request.encoding_format not in ("float", "base64"):
            raise RequestError("encoding_format", f"must be 'float' or 'base64', not {request.encoding_format!r}")
        if request.dimensions is not None:
            dimensions = bodies.whole_number(request.dimensions, "dimensions", 1 << 20, "the model's size")
            if dimensions != engine.model.dim:
                raise RequestError("dimensions", f"the model gives {engine.model.dim} dimensions, not {dimensions}")
        vectors, tokens = await answer(texts, None, names, "input")
        try:  # each family's rows as JSON (embedkit.rows): sparse non-zeros, token vectors, or dense floats
            encoded = format_of(vectors).to_json(vectors, request.encoding_format)
        except EmbedkitError as err:
            raise RequestError("encoding_format", str(err).split(": ", 1)[-1]) from None
        data = [{"object": "embedding", "index": i, "embedding": row} for i, row in enumerate(encoded)]
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return JSONResponse({"object": "list", "data": data, "model": model_name, "usage": usage})

    return app


def serve(engine: Engine, settings: ServeSettings, access_log: bool = False) -> None:
    """Run the app under uvicorn until SIGINT/SIGTERM."""
    import uvicorn

    if not is_loopback(settings.host):
        print(
            f"embedkit: warning: serving on {settings.host}, reachable from other machines; "
            "the API has no authentication",
            file=sys.stderr,
        )
    uvicorn.run(
        create_app(engine, settings),
        host=settings.host,
        port=settings.port,
        log_level="info",
        access_log=access_log,
        lifespan="on",
    )
