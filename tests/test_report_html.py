"""report.html opened in a real headless Chromium: title, tables and embedded plots render, nothing is fetched."""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


def chromium(page: Path, profile: Path, *args: str) -> subprocess.CompletedProcess:
    command = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args, page.resolve().as_uri()]
    return subprocess.run(command, capture_output=True, text=True, timeout=180)


class Dom(HTMLParser):
    """The parts of a dumped DOM the tests look at: title, tables (by id) and image sources."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.title, self.tables, self.images = "", {}, []
        self._in_title, self._table, self._row, self._cell = False, None, None, None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "title":
            self._in_title = True
        elif tag == "table":
            self._table = self.tables.setdefault(attrs.get("id"), [])
        elif tag == "tr" and self._table is not None:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = ""
        elif tag == "img":
            self.images.append(attrs.get("src", ""))

    def handle_endtag(self, tag):
        if tag == "title":
            self._in_title = False
        elif tag in ("td", "th") and self._cell is not None:
            self._row.append(self._cell.strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self._table.append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._in_title:
            self.title += data
        if self._cell is not None:
            self._cell += data


def render(page: Path, tmp_path: Path, height: int) -> tuple[Dom, np.ndarray]:
    dumped = chromium(page, tmp_path / "profile-dom", "--dump-dom")
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    shot = tmp_path / "shot.png"
    taken = chromium(page, tmp_path / "profile-shot", f"--screenshot={shot}", f"--window-size=1200,{height}")
    assert taken.returncode == 0 and shot.is_file(), taken.stderr[-2000:]
    pixels = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    assert pixels.shape == (height, 1200, 3)
    return Dom(dumped.stdout), pixels


def has_color(pixels: np.ndarray, rgb: tuple[int, int, int], count: int = 200) -> bool:
    """At least ``count`` pixels within a small distance of ``rgb`` (a plot's bars drawn on the page)."""
    return int((np.abs(pixels - np.array(rgb)).sum(axis=2) < 24).sum()) >= count


def decoded_images(dom: Dom) -> list[Image.Image]:
    images = []
    for src in dom.images:
        assert src.startswith("data:image/png;base64,"), src[:60]
        images.append(Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1]))))
    return images


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="no chromium (make test installs Debian's where it has root)")
def test_evaluation_report_renders_in_chromium(scifact_reports, tmp_path):
    folder = scifact_reports["hybrid"]
    report = json.loads((folder / "report.json").read_text())
    dom, pixels = render(folder / "report.html", tmp_path, height=1800)
    assert dom.title == "scifact (test): sentence-transformers/all-MiniLM-L6-v2, hybrid"
    metrics = {row[0]: row[1] for row in dom.tables["metrics"][1:]}
    assert metrics["ndcg_at_10"] == f"{report['metrics']['ndcg_at_10']:.4f}"
    assert set(metrics) == set(report["metrics"])
    assert dom.tables["metrics"][0] == ["metric", "hybrid", "dense", "bm25"]
    dense_alone = report["component_metrics"]["dense"]["ndcg_at_10"]
    assert {row[0]: row[2] for row in dom.tables["metrics"][1:]}["ndcg_at_10"] == f"{dense_alone:.4f}"
    assert {"settings", "timings", "versions"} <= set(dom.tables)
    settings = {row[0]: row[1] for row in dom.tables["settings"][1:]}
    assert "'method': 'rrf'" in settings["retriever.fusion"]
    images = decoded_images(dom)
    assert len(images) == 2 and all(image.width > 300 and image.height > 200 for image in images)
    assert has_color(pixels, (0x4A, 0x78, 0xB5))  # the per-query nDCG@10 histogram's bars, drawn on screen
    assert not re.search(r"""(src|href)=["']?https?:""", (folder / "report.html").read_text())


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="no chromium (make test installs Debian's where it has root)")
def test_comparison_report_renders_in_chromium(scifact_reports, tmp_path):
    from embedkit.evaluation.compare import compare_runs
    from embedkit.report.writer import write_comparison

    result = compare_runs([scifact_reports["dense"], scifact_reports["hybrid"]], ["ndcg_at_10", "recall_at_100"])
    folder = write_comparison(tmp_path / "cmp", result)
    dom, pixels = render(folder / "report.html", tmp_path, height=2400)
    assert dom.title == "Comparison on scifact (test), 300 queries"
    significance = dom.tables["significance"]
    assert significance[0][:4] == ["run B", "metric", "delta", "t-test p"]
    test = result["comparisons"][0]["tests"]["ndcg_at_10"]
    assert significance[1][1:4] == ["ndcg_at_10", f"{test['delta']:+.4f}", f"{test['t_p_value']:.3e}"]
    assert len(significance) == 3 and len(dom.tables["gains-0"]) > 1 and len(dom.tables["losses-0"]) > 1
    assert len(decoded_images(dom)) == 1
    assert has_color(pixels, (0x2D, 0x8A, 0x34)) and has_color(pixels, (0xB0, 0x3A, 0x2E))  # wins and losses bars
