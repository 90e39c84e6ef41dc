"""What ``encode.py`` times its encoders on and under: the texts (documents, short documents, queries), a CPU load
of busy processes, and the speed-vs-nDCG@10 picture drawn from its results."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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


def plot_speed_vs_ndcg(results: dict[str, dict[str, Any]], title: str, path: Path) -> None:
    """One point per encoder that has an nDCG@10: median docs/s (log scale) against nDCG@10."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = {name: row for name, row in results.items() if "ndcg_at_10" in row}
    figure, axes = plt.subplots(figsize=(7.5, 4.5))
    for name, row in points.items():
        marker = "s" if name.startswith("sentence-transformers") else "o"
        label = f"{name}: {row['median_docs_per_s']:.1f} docs/s, nDCG@10 {row['ndcg_at_10']:.4f}"
        axes.scatter(row["median_docs_per_s"], row["ndcg_at_10"], marker=marker, s=45, label=label)
    axes.legend(fontsize=7, loc="center left")
    axes.set_xscale("log")
    axes.set_xlabel("documents per second (median of the timed rounds, log scale)")
    axes.set_ylabel("nDCG@10, SciFact test")
    axes.set_title(title, fontsize=9)
    axes.grid(True, which="both", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
