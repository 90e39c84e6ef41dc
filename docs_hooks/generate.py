"""MkDocs hook: writes the generated pages (CLI verbs, API names, benchmark results) into the build.

Nothing generated is committed: each build reads the Typer app, `embedkit.__all__` and `benchmarks/results/`.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from mkdocs.structure.files import File

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import api_pages  # noqa: E402
import cli_pages  # noqa: E402
import results_pages  # noqa: E402

RESULTS = HERE.parent / "benchmarks" / "results"
# `{{ json FILE KEY.PATH FORMAT }}` in a page: that figure of benchmarks/results/FILE, formatted, at build time.
FIGURE = re.compile(r"\{\{\s*json\s+(\S+)\s+(\S+)(?:\s+(\S+))?\s*\}\}")
GENERATORS = {"API": api_pages, "CLI": cli_pages, "Results": results_pages}
_pages: dict[str, str] = {}


def _expand(nav: list) -> list:
    """Replace each generated section's index entry in the nav by the section with all its pages."""
    out = []
    for entry in nav:
        if isinstance(entry, dict):
            ((title, value),) = entry.items()
            if title in GENERATORS:
                entry = {title: GENERATORS[title].nav()}
            elif isinstance(value, list):
                entry = {title: _expand(value)}
        out.append(entry)
    return out


def on_config(config):
    _pages.clear()
    for generator in GENERATORS.values():
        _pages.update(generator.pages())
    config["nav"] = _expand(config["nav"])
    return config


def on_files(files, config):
    for path, content in _pages.items():
        files.append(File.generated(config, path, content=content))
    return files


def figure(file: str, key_path: str, spec: str = "") -> str:
    """One figure of a committed benchmark JSON (`key.path` walks nested keys and list indexes), formatted."""
    value = json.loads((RESULTS / file).read_text())
    for key in key_path.split("."):
        value = value[int(key)] if isinstance(value, list) else value[key]
    return format(value, spec)


def layers() -> str:
    """The import-linter `layers` contract of pyproject.toml as a numbered list, top layer first."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    config = tomllib.loads((HERE.parent / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["type"] == "layers"]
    rows = [" · ".join(f"`{name.strip()}`" for name in layer.split("|")) for layer in contract["layers"]]
    return "\n".join(f"{i}. {row}" for i, row in enumerate(rows, 1))


def on_page_markdown(markdown, page, config, files):
    markdown = markdown.replace("{{ import_layers }}", layers())
    return FIGURE.sub(lambda match: figure(*(group for group in match.groups() if group)), markdown)
