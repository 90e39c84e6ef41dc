"""The short README: under 150 lines, its links resolve, and every figure it quotes equals the JSON it cites.

A figure cites its source in an HTML comment right after it: `0.6451 <!-- json: benchmarks/results/X.json a.b -->`
(`a.b` walks nested keys). The figure must equal the JSON value rounded to the decimals the README shows.
"""

from __future__ import annotations

import json
import re

from conftest import REPO

README = REPO / "README.md"
CITED = re.compile(r"(-?[\d,]*\.?\d+)\s*<!-- json: (\S+) (\S+) -->")


def value_at(path: str, key_path: str):
    value = json.loads((REPO / path).read_text())
    for key in key_path.split("."):
        value = value[int(key)] if isinstance(value, list) else value[key]
    return value


def test_readme_is_short():
    assert len(README.read_text().splitlines()) < 150


def test_every_quoted_figure_equals_its_json():
    cited = CITED.findall(README.read_text())
    assert len(cited) >= 8
    for shown, path, key_path in cited:
        decimals = len(shown.split(".")[1]) if "." in shown else 0
        actual = value_at(path, key_path)
        assert float(shown.replace(",", "")) == round(actual, decimals), f"{path} {key_path}: {actual}, README {shown}"


def test_every_row_of_the_headline_table_cites_its_json():
    text = README.read_text()
    table = text[text.index("## Headline numbers") :].split("\n## ")[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith(("| what", "| ---"))]
    assert rows and all("<!-- json: " in row for row in rows), [row for row in rows if "<!-- json: " not in row]


def test_links_into_the_docs_resolve():
    links = re.findall(r"\]\(((?:docs|benchmarks)/[^)#]+)", README.read_text())
    assert len(links) >= 10
    assert [link for link in links if not (REPO / link).is_file()] == []


def test_the_example_is_runnable_and_the_same_as_getting_started():
    """The README's example is the Getting started one, which tests/test_doc_blocks.py runs."""
    from test_doc_blocks import blocks_in

    (example,) = [block.code for block in blocks_in(README) if block.language == "python"]
    started = [block.code for block in blocks_in(REPO / "docs" / "getting-started.md")]
    assert example in started and len(example.splitlines()) <= 15
