"""Stage 1: datasets on disk (BEIR layout) into corpus, queries and qrels; TREC run files."""

from typing import TYPE_CHECKING

from embedkit._lazy import lazy_exports

_EXPORTS = {
    "BeirDataset": "embedkit.data.beir",
    "doc_text": "embedkit.data.beir",
    "load_dataset": "embedkit.data.beir",
    "read_run": "embedkit.data.trec",
    "resolve_dataset": "embedkit.data.resolve",
    "write_run": "embedkit.data.trec",
}
__all__ = [
    "BeirDataset",
    "doc_text",
    "load_dataset",
    "read_run",
    "resolve_dataset",
    "write_run",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from embedkit.data.beir import BeirDataset, doc_text, load_dataset
    from embedkit.data.resolve import resolve_dataset
    from embedkit.data.trec import read_run, write_run
