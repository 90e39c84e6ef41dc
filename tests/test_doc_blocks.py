"""Every code block marked runnable in docs/ and README.md runs, as a reader would run it, on a small cut of SciFact.

A block is runnable when its fence says so after the language: ```` ```python runnable ```` or ```` ```bash runnable
````. Each runs in a fresh process in an empty folder, with `scifact` resolved to a 150-document slice
(`$EMBEDKIT_DATA`) and embedkit's caches in that folder (`$EMBEDKIT_CACHE`), so no block reads or writes outside
it. Identical blocks (the README's example is also the Getting started one) run once.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import REPO, write_scifact_slice

FENCE = re.compile(r"^```(?P<info>[^\n`]*)\n(?P<code>.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
RUNNERS = {"python": [sys.executable], "bash": ["bash", "-euo", "pipefail"]}
TIMEOUT = 300


@dataclass(frozen=True)
class Block:
    """A runnable code block: its language, its code and where it is (file:line, for the test id)."""

    language: str
    code: str
    where: str


def blocks_in(path: Path) -> list[Block]:
    """The runnable blocks of one Markdown file; a runnable mark on a language with no runner is an error."""
    text = path.read_text()
    found = []
    for match in FENCE.finditer(text):
        words = match.group("info").split()
        if "runnable" not in words[1:]:
            continue
        name = path.relative_to(REPO) if path.is_relative_to(REPO) else path
        where = f"{name}:{text.count(chr(10), 0, match.start()) + 1}"
        assert words[0] in RUNNERS, f"{where}: runnable blocks are python or bash, not {words[0]!r}"
        found.append(Block(words[0], match.group("code"), where))
    return found


def collect() -> list[Block]:
    """Runnable blocks of README.md and docs/**/*.md, one per distinct code (the first place it appears)."""
    unique: dict[tuple[str, str], Block] = {}
    for path in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        for block in blocks_in(path):
            unique.setdefault((block.language, block.code), block)
    return list(unique.values())


def run_block(block: Block, folder: Path, data: Path | None = None) -> subprocess.CompletedProcess:
    """Run ``block`` in ``folder`` as a reader would: a script file, the venv's `embedkit` on PATH."""
    script = folder / ("block.py" if block.language == "python" else "block.sh")
    script.write_text(block.code)
    env = {**os.environ, "EMBEDKIT_CACHE": str(folder / ".embedkit-cache"), "PYTHONPATH": str(REPO)}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env |= {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    if data is not None:
        env["EMBEDKIT_DATA"] = str(data)
    command = [*RUNNERS[block.language], script.name]
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=TIMEOUT)


BLOCKS = collect()


@pytest.fixture(scope="module")
def small_data(tmp_path_factory, scifact) -> Path:
    """A data folder where `scifact` is 20 test queries and 150 documents of the real one."""
    root = tmp_path_factory.mktemp("doc-data")
    write_scifact_slice(root / "scifact", scifact, {"test": 20}, 150, 300)
    return root


def test_the_docs_have_runnable_blocks():
    places = {block.where.split(":")[0] for block in BLOCKS}
    assert "docs/getting-started.md" in places and len(BLOCKS) >= 3, [block.where for block in BLOCKS]


@pytest.mark.parametrize("block", BLOCKS, ids=[block.where for block in BLOCKS])
def test_runnable_block(block, small_data, tmp_path):
    done = run_block(block, tmp_path, small_data)
    assert done.returncode == 0, f"{block.where} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"


def test_a_broken_block_fails(tmp_path):
    """The executor reports a failing block: a Python error, a failing command in the middle of a bash block."""
    broken = Block("python", "import embedkit\nembedkit.load_dataset('no-such-dataset', data_dir='.')\n", "broken.md:1")
    done = run_block(broken, tmp_path)
    assert done.returncode != 0 and "no-such-dataset" in done.stderr
    (tmp_path / "sh").mkdir()
    middle = Block("bash", "echo one\nembedkit index --embeddings missing --output idx\necho never\n", "broken.md:5")
    done = run_block(middle, tmp_path / "sh")
    assert done.returncode == 2 and "never" not in done.stdout and done.stderr.startswith("embedkit: error:")


def test_a_runnable_mark_on_another_language_is_refused(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("text\n\n```text runnable\nhello\n```\n")
    with pytest.raises(AssertionError, match="python or bash"):
        blocks_in(page)
