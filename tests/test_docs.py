"""The documentation site: `mkdocs build --strict` passes offline, and the generated reference matches the code.

The build runs once per module (a few seconds, no model loaded). Network access is cut by pointing every proxy at a
closed port, so a build that needed a font, a CDN or an inventory from the web would fail here.
"""

from __future__ import annotations

import html
import inspect
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Hosts a page must never load from: web fonts and script/style CDNs.
EXTERNAL = re.compile(
    r"fonts\.googleapis|fonts\.gstatic|cdn\.jsdelivr|unpkg\.com|cdnjs|polyfill\.io|use\.fontawesome|code\.jquery"
)
LOADED_FROM_WEB = re.compile(r"<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)=[\"']?(?:https?:)?//", re.IGNORECASE)
OFFLINE = {"HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9", "NO_PROXY": ""}


def text_of(page: Path) -> str:
    """A built page's visible text, tags dropped and whitespace folded."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page.read_text())).split())


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, **OFFLINE, "http_proxy": OFFLINE["HTTP_PROXY"], "https_proxy": OFFLINE["HTTPS_PROXY"]}
    env |= {"NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)]
    built = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    log = built.stdout + built.stderr
    assert built.returncode == 0, log[-4000:]
    assert "WARNING" not in log and "ERROR" not in log, log[-4000:]
    return out


def test_no_page_loads_anything_from_the_web(site):
    pages = list(site.rglob("*.html"))
    assert len(pages) > 40
    for page in pages:
        source = page.read_text()
        assert not EXTERNAL.search(source), f"{page}: {EXTERNAL.search(source).group(0)}"
        assert not LOADED_FROM_WEB.search(source), f"{page}: {LOADED_FROM_WEB.search(source).group(0)}"


def test_every_figure_and_fence_is_rendered(site):
    """No `{{ json ... }}` figure left as written, and no fenced block (```python runnable) fallen into a paragraph."""
    for page in site.rglob("*.html"):
        source = page.read_text()
        assert "{{" not in text_of(page), page
        assert not re.search(r"<p><code>(python|bash)\b", source), page


def test_api_page_shows_the_signature_of_evaluate(site):
    import embedkit

    page = (site / "reference" / "api" / "evaluate.html").read_text()
    (signature,) = re.findall(r'class="doc-signature[^"]*">(.*?)</code>', page, re.DOTALL)
    shown = " ".join(html.unescape(re.sub(r"<[^>]+>", "", signature)).split())
    names = list(inspect.signature(embedkit.evaluate).parameters)
    assert shown.startswith("evaluate(") and "-> dict[str, Any]" in shown
    positions = [shown.index(f"{name}:") for name in names]
    assert positions == sorted(positions), shown  # every parameter, in the order of the code
    assert embedkit.evaluate.__doc__.split("\n")[0].split(";")[0] in text_of(site / "reference/api/evaluate.html")


def test_every_exported_name_has_an_api_page(site):
    import embedkit

    for name in embedkit.__all__:
        if not name.startswith("_"):
            assert f"embedkit.{name}" in text_of(site / "reference" / "api" / f"{name}.html")


def index_command():
    import typer.main

    from embedkit.cli import _register, app

    _register()
    return typer.main.get_command(app).commands["index"]


def test_cli_page_for_index_lists_every_flag_of_its_help(site):
    command = index_command()
    visible = [param for param in command.params if not param.hidden]
    expected = {flag for param in visible for flag in (*param.opts, *param.secondary_opts)} | {"--help"}
    page = text_of(site / "reference" / "cli" / "embedkit-index.html")
    cells = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", page))
    assert expected <= cells, sorted(expected - cells)
    assert {"add", "upsert", "delete", "compact", "check"} <= set(re.findall(r"embedkit index (\w+)", page))
    for param in visible:  # each option's help text is on the page, as --help prints it
        first_words = " ".join((param.help or "").replace("[bold]", "").split()[:4])
        assert html.unescape(first_words) in page, param.name


def test_cli_page_matches_what_index_help_prints(site):
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
    shown = subprocess.run(
        [sys.executable, "-m", "embedkit", "index", "--help"], capture_output=True, text=True, env=env, timeout=120
    )
    assert shown.returncode == 0, shown.stderr
    options = shown.stdout[shown.stdout.index("Options") :].split("Commands")[0]
    listed = {match for line in options.splitlines() for match in re.findall(r"^\W*((?:-\w, )?--[\w-]+)", line)}
    flags = {flag for item in listed for flag in item.split(", ")}
    page_text = text_of(site / "reference" / "cli" / "embedkit-index.html")
    page = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", page_text))
    assert len(flags) > 20 and flags <= page, sorted(flags - page)


def test_results_pages_are_generated_from_the_json(site):
    import json

    living = json.loads((REPO / "benchmarks/results/living_index_scifact.json").read_text())
    page = text_of(site / "results" / "living-index.html")
    assert f"{living['changes']['IVF64,Flat']['recall_at_10']:.3f}" in page
    assert f"{living['filters']['Flat']['none']['queries_per_second']:,.0f}" in page
    assert "python benchmarks/living_index_scifact.py" in page


def dump_dom(page: Path, profile: Path) -> str:
    """The DOM of a built page as headless Chromium renders it from disk."""
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
    command = [CHROMIUM, *flags, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()]
    dumped = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    return dumped.stdout


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="no chromium (make test installs Debian's where it has root)")
def test_reference_pages_in_headless_chromium(site, tmp_path):
    dom = dump_dom(site / "reference" / "api" / "evaluate.html", tmp_path / "api")
    (signature,) = re.findall(r'class="doc-signature[^"]*">(.*?)</code>', dom, re.DOTALL)
    shown = " ".join(html.unescape(re.sub(r"<[^>]+>", "", signature)).split())
    assert shown.startswith("evaluate( model: EmbeddingModel | str | None = None,"), shown
    dom = dump_dom(site / "reference" / "cli" / "embedkit-index.html", tmp_path / "cli")
    article = dom[dom.index("<article") : dom.index("</article>")]
    cells = set(re.findall(r"<code>(--?[A-Za-z][\w-]*)</code>", article))
    visible = [param for param in index_command().params if not param.hidden]
    assert {flag for param in visible for flag in (*param.opts, *param.secondary_opts)} | {"--help"} <= cells
