"""Dataclass settings from a YAML file plus command-line overrides, shared by ``train`` and ``pretrain``."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any, TypeVar

import yaml

from embedkit.errors import EmbedkitError

T = TypeVar("T")


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
    return cls(**values)


def from_command_line(cls: type[T], config: Path | None, options: dict[str, Any]) -> T:
    """``cls`` from ``--config`` (options override it) or from the options alone, which must then name ``output``."""
    given = {k: v for k, v in options.items() if k in {f.name for f in fields(cls)} and v is not None}
    if config is not None:
        return from_yaml(cls, config, **given)
    if "output" not in given:
        raise EmbedkitError("give --output (or a --config that sets output)", field="output")
    return cls(**given)
