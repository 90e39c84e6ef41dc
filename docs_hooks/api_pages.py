"""One API page per name in `embedkit.__all__`, each a mkdocstrings block, so the reference follows the code."""

from __future__ import annotations

import griffe


def _names() -> list[str]:
    import embedkit

    return [name for name in embedkit.__all__ if not name.startswith("_")]


def _summary(package, name: str) -> str:
    docstring = package[name].docstring
    return docstring.value.strip().split("\n\n")[0].replace("\n", " ") if docstring else ""


def pages() -> dict[str, str]:
    """Every API page by its path under docs/, and the index page listing them with their first lines."""
    package = griffe.load("embedkit", search_paths=["."], resolve_aliases=False)
    out: dict[str, str] = {}
    index = [
        "# Python API",
        "",
        "Everything `import embedkit` exports (`embedkit.__all__`), from the docstrings and signatures in the code.",
        f"The package's version is `embedkit.__version__` ({package['__version__'].value}).",
        "",
        "| name | what it is |",
        "| --- | --- |",
    ]
    for name in _names():
        out[f"reference/api/{name}.md"] = f"# `embedkit.{name}`\n\n::: embedkit.{name}\n"
        summary = _summary(package, name).replace("|", "\\|")
        index.append(f"| [`embedkit.{name}`]({name}.md) | {summary} |")
    out["reference/api/index.md"] = "\n".join(index) + "\n"
    return out


def nav() -> list:
    """The API section of the navigation."""
    return ["reference/api/index.md", *({f"embedkit.{name}": f"reference/api/{name}.md"} for name in _names())]
