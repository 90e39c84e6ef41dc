"""One validation layer for every boundary (CLI options, library entry points, HTTP bodies, files).

What SQLite, FAISS's Python layer and pytrec_eval do: check at the edge, refuse with a precise message, never guess.
Every check raises ``EmbedkitError`` naming the file, line and field (or the flag), so the CLI prints one line and the
server answers a 4xx naming the field.

- Numbers are finite: NaN and ±inf are refused by name (a check written ``x < 0`` lets NaN through).
- Ids are non-empty strings without whitespace or control characters, compared after Unicode NFC normalisation
  (``ID_NORMALISATION``, recorded by the outputs that hold ids), and unique within one collection.
- Texts encode as UTF-8: a lone surrogate (valid in JSON, not in UTF-8) is refused, never replaced.
- A list of texts or ids is a list, never a bare string (which Python would iterate character by character).
"""

from __future__ import annotations

import math
import numbers
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from embedkit.errors import EmbedkitError

ID_NORMALISATION = "NFC"
TEXT_POLICY = "lone surrogates refused"


def check_number(
    value: Any,
    field: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    path: str | Path | None = None,
    line: int | None = None,
) -> Any:
    """``value`` when it is a finite number within ``[minimum, maximum]``; ``None`` passes (an option not given)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise EmbedkitError(f"must be a number, not {type(value).__name__}", path=path, line=line, field=field)
    if isinstance(value, float) and math.isnan(value):
        raise EmbedkitError("must be a number, not NaN", path=path, line=line, field=field)
    if isinstance(value, float) and math.isinf(value):
        raise EmbedkitError(f"must be finite, not {value}", path=path, line=line, field=field)
    if minimum is not None and value < minimum:
        raise EmbedkitError(f"must be at least {minimum}, not {value}", path=path, line=line, field=field)
    if maximum is not None and value > maximum:
        raise EmbedkitError(f"must be at most {maximum}, not {value}", path=path, line=line, field=field)
    return value


def check_whole(
    value: Any,
    field: str,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    path: str | Path | None = None,
    line: int | None = None,
) -> int | None:
    """``value`` as an ``int`` when it is a whole number within bounds (``None`` passes: not given). NaN and ±inf are
    named, ``2.5``, ``True`` and ``"3"`` refused; ``3.0`` and numpy integers are read as the whole number they are."""
    if value is None:
        return None
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        value = int(value)
    elif isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value):
        value = int(value) if float(value).is_integer() else value
    if isinstance(value, bool) or not isinstance(value, int):
        check_number(value, field, path=path, line=line)  # names NaN, infinity and what is not a number
        raise EmbedkitError(f"must be a whole number, not {value!r}", path=path, line=line, field=field)
    return check_number(value, field, minimum=minimum, maximum=maximum, path=path, line=line)


def check_id(value: Any, path: str | Path | None, line: int | None, field: str, *, allow_int: bool = True) -> str:
    """An id as an NFC string; refused when empty or holding whitespace or control characters, which TREC run files,
    qrels and ``docid`` files cannot carry. JSON files may give an integer id (read as its decimal string); the
    library API takes strings only (``allow_int=False``), since an int id would not survive a save and a load."""
    if allow_int and isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise EmbedkitError(f"must be a string, not {type(value).__name__}", path=path, line=line, field=field)
    if not value:
        raise EmbedkitError("must not be empty", path=path, line=line, field=field)
    for char in value:
        if char.isspace() or unicodedata.category(char) in ("Cc", "Cs"):
            raise EmbedkitError(
                f"contains {unicodedata.name(char, repr(char))!s} ({char!r}); ids cannot hold whitespace or "
                "control characters",
                path=path,
                line=line,
                field=field,
            )
    return unicodedata.normalize(ID_NORMALISATION, value)


def check_ids(values: Any, field: str, *, path: str | Path | None = None) -> list[str]:
    """A list of unique ids for the library API (``Index.build``, ``add``): strings only, NFC, no repeats."""
    items = check_sequence(values, field)
    ids = [check_id(value, path, None, f"{field}[{i}]", allow_int=False) for i, value in enumerate(items)]
    check_unique(ids, field, path=path)
    return ids


def check_unique(ids: Iterable[str], field: str, *, path: str | Path | None = None) -> None:
    """Refuse a repeated id (after normalisation), naming its first two positions."""
    seen: dict[str, int] = {}
    for i, doc_id in enumerate(ids):
        if doc_id in seen:
            raise EmbedkitError(f"duplicate id '{doc_id}' at positions {seen[doc_id]} and {i}", path=path, field=field)
        seen[doc_id] = i


def check_text(value: Any, path: str | Path | None, line: int | None, field: str, required: bool = True) -> str | None:
    """A text as a string (``None`` when optional and absent); lone surrogates cannot be encoded, so refused."""
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise EmbedkitError(f"must be a string, not {type(value).__name__}", path=path, line=line, field=field)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        raise EmbedkitError(
            f"holds a lone surrogate ({value[err.start]!r}) at character {err.start + 1}",
            path=path,
            line=line,
            field=field,
        ) from None
    return value


def check_sequence(values: Any, field: str) -> Sequence[Any]:
    """A sized, indexable collection (a list, a tuple, a ``datasets.Dataset``, a 1-d array); a bare string is
    refused (not read as one item per character), and so is a mapping or a set (read as its keys, in an order nobody
    chose) or a one-shot iterator."""
    if isinstance(values, (str, bytes)):
        raise EmbedkitError(f"must be a list, not a single {type(values).__name__} (wrap it: [text])", field=field)
    if isinstance(values, (Mapping, set, frozenset)) or not (
        hasattr(values, "__len__") and hasattr(values, "__getitem__")
    ):
        raise EmbedkitError(f"must be a list, not {type(values).__name__}", field=field)
    return values


def check_texts(values: Any, field: str) -> list[str]:
    """A list of texts for the library API (``encode_queries``, ``encode_corpus``): a list of encodable strings."""
    items = check_sequence(values, field)
    return [check_text(value, None, None, f"{field}[{i}]") for i, value in enumerate(items)]
