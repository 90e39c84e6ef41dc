"""Every refusal as ``{"error": {"field": ..., "message": ...}}`` with a 4xx status, so a client can tell which part
of its request to fix; and the request-size limit, enforced before a body is parsed."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from embedkit.errors import EmbedkitError


class RequestError(Exception):
    """A request the server refuses, naming the field at fault."""

    def __init__(self, field: str, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.field, self.message, self.status = field, message, status


def refusal(err: EmbedkitError, status: int = 422) -> RequestError:
    """The validation layer's error as a request error: the field it names, its message without that prefix."""
    field = err.field or "body"
    return RequestError(field, str(err).split(f"field '{field}': ", 1)[-1], status)


def error_response(status: int, field: str | None, message: str, **headers: str) -> JSONResponse:
    """The error body; a lone surrogate a client sent (say as an unknown field's name) is written escaped, since
    UTF-8 cannot carry it and the response itself would otherwise fail."""
    field, message = (None if text is None else _encodable(text) for text in (field, message))
    return JSONResponse({"error": {"field": field, "message": message}}, status_code=status, headers=headers or None)


def _encodable(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def field_name(location: tuple[Any, ...] | list[Any]) -> str:
    """``("body", "queries", 2)`` as ``queries[2]``: the path of the field inside the JSON body."""
    parts = list(location[1:] if location and location[0] in ("body", "query", "path") else location)
    name = ""
    for part in parts:
        name += f"[{part}]" if isinstance(part, int) else (f".{part}" if name else str(part))
    return name or "body"


def install_error_handlers(app: FastAPI) -> None:
    """Replace FastAPI's validation and HTTP error bodies with the one shape above."""

    @app.exception_handler(RequestError)
    async def refused(request: Request, err: RequestError) -> JSONResponse:
        return error_response(err.status, err.field, err.message)

    @app.exception_handler(EmbedkitError)
    async def refused_by_library(request: Request, err: EmbedkitError) -> JSONResponse:
        return await refused(request, refusal(err))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, err: RequestValidationError) -> JSONResponse:
        first = err.errors()[0] if err.errors() else {"loc": ("body",), "msg": "invalid request"}
        if first.get("type") == "json_invalid":
            detail = (first.get("ctx") or {}).get("error", "")
            return error_response(400, "body", f"the body is not valid JSON: {detail}".rstrip(": "))
        location = tuple(first.get("loc", ("body",)))
        if first.get("type") == "string_unicode" and isinstance(first.get("input"), str):  # a key of the body
            return error_response(422, first["input"], "this field's name holds a lone surrogate, not UTF-8 text")
        if location == ("body",):  # no body, or one FastAPI did not parse as JSON (its Content-Type is not JSON)
            return error_response(422, "body", "send a JSON object with 'Content-Type: application/json'")
        return error_response(422, field_name(location), first.get("msg", "invalid value"))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, err: HTTPException) -> JSONResponse:
        field = {404: "path", 405: "method"}.get(err.status_code, "request")
        message = {
            404: f"no such endpoint: {request.url.path}",
            405: f"{request.method} is not allowed on {request.url.path}",
        }.get(err.status_code, str(err.detail))
        return error_response(err.status_code, field, message, **(err.headers or {}))

    @app.exception_handler(Exception)
    async def crashed(request: Request, err: Exception) -> JSONResponse:
        return error_response(500, None, f"internal error: {type(err).__name__}: {err}")


class BodyLimit:
    """ASGI middleware: a body over ``limit`` bytes gets 413 as soon as its size is known, and is never parsed.

    A declared ``Content-Length`` is refused before a byte is read; a chunked body is counted as it arrives.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._refuse(scope, receive, send)
            return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.limit:
                await self._refuse(scope, receive, send)
                return
            if not message.get("more_body"):
                break
        body, replayed = b"".join(chunks), False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        message = f"the request body is over the limit of {self.limit} bytes (--max-request-bytes)"
        await error_response(413, "body", message, connection="close")(scope, receive, send)
