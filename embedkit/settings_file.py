"""Dataclass settings from a YAML file plus command-line overrides, shared by ``train`` and ``pretrain``."""

from __future__ import annotations

import types
import typing
from dataclasses import fields
from pathlib import Path
from typing import Any, TypeVar

import yaml

from embedkit.errors import EmbedkitError

T = TypeVar("T")


def _matches(value: Any, hint: Any) -> bool:
    """Whether a YAML or command-line value fits a dataclass field's type (int, float, bool, str, lists, optionals)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin is list:
        (item,) = typing.get_args(hint) or (Any,)
        return isinstance(value, list) and all(_matches(v, item) for v in value)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint in (str, bool):
        return isinstance(value, hint)
    return True


def build(cls: type[T], values: dict[str, Any], path: str | Path | None = None) -> T:
    """``cls(**values)`` after checking each value's type, so a wrong one is named here, not deep in training."""
    hints = typing.get_type_hints(cls)
    for name, value in values.items():
        if not _matches(value, hints[name]):
            hint = hints[name]
            expected = hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")
            raise EmbedkitError(f"expected {expected}, got {value!r}", path=path, field=name)
    return cls(**values)


def from_yaml(cls: type[T], path: str | Path, **overrides: Any) -> T:
    """``cls`` from a YAML mapping; unknown keys and a missing ``output`` are errors naming the file and field."""
    path = Path(path)
    if not path.is_file():
        raise EmbedkitError("no such file", path=path)
    try:
        values = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        line = getattr(getattr(err, "problem_mark", None), "line", None)
        raise EmbedkitError(
            f"malformed YAML: {err}".splitlines()[0], path=path, line=None if line is None else line + 1
        ) from None
    if not isinstance(values, dict):
        raise EmbedkitError("expected a mapping of settings", path=path)
    known = {f.name for f in fields(cls)}
    for key in values:
        if key not in known:
            raise EmbedkitError("unknown setting", path=path, field=key)
    values.update({k: v for k, v in overrides.items() if v is not None})
    if "output" not in values:
        raise EmbedkitError("missing", path=path, field="output")
    return build(cls, values, path)


def from_command_line(cls: type[T], config: Path | None, options: dict[str, Any]) -> T:
    """``cls`` from ``--config`` (options override it) or from the options alone, which must then name ``output``."""
    given = {k: v for k, v in options.items() if k in {f.name for f in fields(cls)} and v is not None}
    if config is not None:
        return from_yaml(cls, config, **given)
    if "output" not in given:
        raise EmbedkitError("give --output (or a --config that sets output)", field="output")
    return build(cls, given)
