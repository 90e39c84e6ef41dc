"""The FastAPI app of ``embedkit serve``: /search, an OpenAI-compatible /v1/embeddings, /health and a search page.

Requests are checked here (sizes, counts, ``k``) and answered by the ``Engine`` through the ``MicroBatcher``, so
concurrent clients share encoder calls. ``serve`` runs it under uvicorn in this process.
"""

from __future__ import annotations

import base64
import sys
from contextlib import asynccontextmanager
from importlib import resources
from typing import Any, Literal, Optional

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import BaseModel, ConfigDict, StrictInt, StrictStr

from embedkit.serving.batcher import MicroBatcher
from embedkit.serving.engine import Engine
from embedkit.serving.errors import BodyLimit, RequestError, install_error_handlers
from embedkit.serving.settings import ServeSettings, is_loopback


class SearchRequest(BaseModel):
    """``{"queries": [...], "k": 10}``; unknown fields are refused, so a misspelt one is not silently ignored."""

    model_config = ConfigDict(extra="forbid")
    queries: list[StrictStr]
    k: StrictInt = 10


class EmbeddingsRequest(BaseModel):
    """OpenAI's embeddings request; ``input`` is checked by hand so its errors name ``input`` or ``input[i]``."""

    input: Any
    model: Optional[StrictStr] = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Optional[StrictInt] = None
    user: Optional[StrictStr] = None


def check_texts(texts: list[str], field: str, limit: int) -> list[str]:
    """Refuse no texts, too many texts or a blank one (which would be encoded as noise)."""
    if not texts:
        raise RequestError(field, "must hold at least one text")
    if len(texts) > limit:
        raise RequestError(field, f"holds {len(texts)} texts; at most {limit} per request (--max-queries)")
    for i, text in enumerate(texts):
        if not text.strip():
            raise RequestError(f"{field}[{i}]", "must not be empty")
    return texts


def embeddings_input(value: Any, limit: int) -> list[str]:
    if isinstance(value, str):
        return check_texts([value], "input", limit)
    if not isinstance(value, list):
        raise RequestError("input", "must be a string or a list of strings")
    for i, text in enumerate(value):
        if not isinstance(text, str):
            raise RequestError(f"input[{i}]", "must be a string (token arrays are not accepted)")
    return check_texts(value, "input", limit)


def create_app(engine: Engine, settings: ServeSettings) -> FastAPI:
    """The app over one engine; the batcher's worker lives as long as the app (its lifespan)."""
    batcher = MicroBatcher(engine.process, settings.max_batch, settings.max_wait_ms)
    page = resources.files("embedkit.serving").joinpath("page.html").read_text(encoding="utf-8")
    model_name = engine.model.name

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await batcher.start()
        yield
        await batcher.stop()

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

    @app.post("/search")
    async def search(request: SearchRequest) -> JSONResponse:
        queries = check_texts(request.queries, "queries", settings.max_queries)
        if not 1 <= request.k <= settings.max_k:
            raise RequestError("k", f"must be in 1..{settings.max_k} (--max-k), not {request.k}")
        hits = await batcher.submit(queries, request.k)
        results = [{"query": query, "hits": found} for query, found in zip(queries, hits)]
        return JSONResponse({"model": model_name, "k": request.k, "results": results})

    @app.post("/v1/embeddings")
    async def embeddings(request: EmbeddingsRequest) -> JSONResponse:
        texts = embeddings_input(request.input, settings.max_queries)
        if request.model is not None and request.model not in engine.model_names:
            raise RequestError("model", f"this server embeds with '{model_name}', not '{request.model}'")
        if request.dimensions is not None and request.dimensions != engine.model.dim:
            raise RequestError("dimensions", f"the model gives {engine.model.dim} dimensions, not {request.dimensions}")
        vectors, tokens = await batcher.submit(texts, None)
        if request.encoding_format == "base64":  # OpenAI's: little-endian float32 bytes
            encoded = [base64.b64encode(row.astype("<f4").tobytes()).decode("ascii") for row in vectors]
        else:
            encoded = [row.tolist() for row in vectors]
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
