"""The request bodies of ``embedkit serve``, checked at the boundary before any of them enters the batcher.

Every field goes through ``embedkit.validation`` (the checks the CLI and the library use), so a lone surrogate, a
string where a list is expected, a NaN, boolean or huge ``k`` is a 422 naming the field (``queries[2]``, ``k``) for
that request alone, never an error inside a batch that other requests share. Fields are typed ``Any`` for pydantic
and described for ``/openapi.json`` by hand, so the messages are the validation layer's, not pydantic's.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, WithJsonSchema

from embedkit.errors import EmbedkitError
from embedkit.serving.batcher import WorkFailed
from embedkit.serving.errors import RequestError, refusal
from embedkit.validation import check_number, check_sequence, check_text

Texts = Annotated[Any, WithJsonSchema({"type": "array", "items": {"type": "string"}})]
TextOrTexts = Annotated[
    Any, WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]})
]
Integer = Annotated[Any, WithJsonSchema({"type": "integer", "minimum": 1})]
OptionalText = Annotated[Any, WithJsonSchema({"type": "string"})]


class SearchRequest(BaseModel):
    """``{"queries": [...], "k": 10, "filter": "year >= 2020"}``; unknown fields are refused, so a misspelt one is
    not silently ignored."""

    model_config = ConfigDict(extra="forbid")
    queries: Texts
    k: Integer = 10
    filter: OptionalText = None


class EmbeddingsRequest(BaseModel):
    """OpenAI's embeddings request (extra fields ignored, as OpenAI's API does)."""

    input: TextOrTexts
    model: OptionalText = None
    encoding_format: Annotated[Any, WithJsonSchema({"enum": ["float", "base64"]})] = "float"
    dimensions: Integer = None
    user: OptionalText = None


def texts(value: Any, field: str, limit: int, *, single: bool = False) -> tuple[list[str], list[str]]:
    """The texts of one request and the field name of each (``queries[2]``); a bare string only where ``single``."""
    try:
        if single and isinstance(value, str):
            items, names = [value], [field]
        else:
            if not isinstance(value, (list, str, bytes)):  # a JSON object would be read as its keys
                raise EmbedkitError(f"must be a list of strings, not {json_type(value)}", field=field)
            items = list(check_sequence(value, field))
            names = [f"{field}[{i}]" for i in range(len(items))]
        if not items:
            raise EmbedkitError("must hold at least one text", field=field)
        if len(items) > limit:
            raise EmbedkitError(f"holds {len(items)} texts; at most {limit} per request (--max-queries)", field=field)
        for name, item in zip(names, items):
            if isinstance(item, list):
                raise EmbedkitError("must be a string, not an array (token arrays are not accepted)", field=name)
            if not check_text(item, None, None, name).strip():
                raise EmbedkitError("must not be empty", field=name)
    except EmbedkitError as err:
        raise refusal(err) from None
    return items, names


def whole_number(value: Any, field: str, maximum: int, flag: str) -> int:
    """A positive integer up to ``maximum``: NaN, ±inf, booleans, 2.5 and strings refused by name."""
    try:
        check_number(value, field)
    except EmbedkitError as err:
        raise refusal(err) from None
    if not isinstance(value, int):
        raise RequestError(field, f"must be a whole number, not {value!r}")
    if not 1 <= value <= maximum:
        shown = value if abs(value) < 10**15 else f"a {len(str(abs(value)))}-digit number"
        raise RequestError(field, f"must be in 1..{maximum} ({flag}), not {shown}")
    return value


def optional_text(value: Any, field: str) -> str | None:
    try:
        return check_text(value, None, None, field, required=False)
    except EmbedkitError as err:
        raise refusal(err) from None


def failure(failed: WorkFailed, names: list[str], field: str) -> RequestError:
    """A request that failed alone in the batcher: 422 naming the text at fault when the library refused it as the
    user's error, 500 (still naming the text) for anything else, which is a bug of ours."""
    name = names[failed.position] if failed.position is not None else field
    if isinstance(failed.error, EmbedkitError):
        return RequestError(name, refusal(failed.error).message)
    return RequestError(name, f"internal error: {failed}", status=500)


def json_type(value: Any) -> str:
    """``value``'s type as JSON names it (object, array, number...), as a client wrote it."""
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__)
