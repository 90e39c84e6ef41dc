"""What ``encode.py`` times its encoders on and under: the texts (documents, short documents, queries) and a CPU
load of busy processes."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from embedkit import load_dataset
from embedkit.data import doc_text
from embedkit.models.reference import default_model_path

TEXT_KINDS = ("docs", "train-queries")
BUSY_LOOP = "import sys, time\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end:\n    pass\n"


def benchmark_texts(dataset: str, kind: str, count: str, max_tokens: int | None) -> list[str]:
    """``count`` (a number or 'all') documents or training queries; ``max_tokens`` cuts each text to that many
    word pieces of the default model's tokenizer (specials not counted), decoded back to text."""
    data = load_dataset(dataset)
    if kind == "train-queries":
        texts = list(data.split_queries("train").values())
    else:
        corpus = data.corpus
        texts = [
            doc_text(doc)
            for doc in corpus.select(range(len(corpus) if count == "all" else min(int(count), len(corpus))))
        ]
    if count != "all":
        texts = texts[: int(count)]
    if max_tokens is None:
        return texts
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(default_model_path()))
    pieces = tokenizer(texts, add_special_tokens=False)["input_ids"]
    return [tokenizer.decode(ids[:max_tokens]) for ids in pieces]


@contextmanager
def cpu_load(processes: int, seconds: float) -> Iterator[list[int]]:
    """``processes`` busy-loop Python processes, each ending by itself after ``seconds`` and killed on exit."""
    children = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP, str(seconds)]) for _ in range(processes)]
    try:
        yield [child.pid for child in children]
    finally:
        for child in children:
            child.kill()
            child.wait()
