"""MTEB adapters: an embedkit model as MTEB's encoder, an embedkit FAISS ``Index`` as MTEB's search backend, and
MTEB retrieval tasks fed from local BEIR folders (MTEB's own loader would fetch them from the Hub).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from embedkit.data.beir import BeirDataset
from embedkit.errors import EmbedkitError
from embedkit.index.faiss_index import Index
from embedkit.models.embedding_model import EmbeddingModel

# BEIR folder names and the MTEB tasks that hold the same data.
MTEB_TASKS = {
    "arguana": "ArguAna",
    "climate-fever": "ClimateFEVER",
    "dbpedia-entity": "DBPedia",
    "fever": "FEVER",
    "fiqa": "FiQA2018",
    "hotpotqa": "HotpotQA",
    "msmarco": "MSMARCO",
    "nfcorpus": "NFCorpus",
    "nq": "NQ",
    "quora": "QuoraRetrieval",
    "scidocs": "SCIDOCS",
    "scifact": "SciFact",
    "trec-covid": "TRECCOVID",
    "webis-touche2020": "Touche2020",
}


def _require_mteb() -> Any:
    try:
        import mteb
    except ImportError as err:
        raise EmbedkitError(f"mteb is not installed ({err}); pip install 'embedkit[mteb]'") from None
    return mteb


class MtebEncoder:
    """MTEB's ``EncoderProtocol`` over an ``EmbeddingModel``: queries and documents keep embedkit's prompts.

    With ``corpus_cache`` (an embedkit ``EmbeddingsFolder`` of the same model and corpus) documents are looked up by
    id instead of encoded again; ``verify`` of them are re-encoded and must agree, so a stale cache fails loudly.
    """

    def __init__(self, model: EmbeddingModel, corpus_cache: Any = None, verify: int = 8, metric: str = "ip") -> None:
        self.model = model
        self.verify = verify
        self.metric = metric
        self._cached: dict[str, int] | None = None
        self._vectors: np.ndarray | None = None
        if corpus_cache is not None:
            if corpus_cache.settings != model.settings:
                raise EmbedkitError("the corpus cache was encoded with other model settings")
            self._cached = {doc_id: row for row, doc_id in enumerate(corpus_cache.ids())}
            self._vectors = corpus_cache.embeddings()

    @property
    def mteb_model_meta(self) -> Any:
        _require_mteb()
        from mteb.models.model_meta import ModelMeta

        settings = self.model.settings
        return ModelMeta.create_empty(
            {
                "name": settings["model"] if "/" in settings["model"] else f"embedkit/{settings['model']}",
                "revision": settings["revision"] or (settings["weights_sha256"] or "local")[:12],
                "embed_dim": settings["dim"],
                "max_tokens": settings["max_length"],
                "similarity_fn_name": self.similarity_fn_name,
                "framework": ["Sentence Transformers", "PyTorch"],
            }
        )

    def encode(self, inputs: Any, *, task_metadata: Any, hf_split: str, hf_subset: str, prompt_type=None, **_: Any):
        texts, ids = [], []
        for batch in inputs:
            texts.extend(batch["text"])
            ids.extend(batch.get("id", []))
        if prompt_type is not None and prompt_type.value == "document":
            if self._cached is not None and len(ids) == len(texts) and all(i in self._cached for i in ids):
                return self._from_cache(ids, texts)
            return self.model.encode(texts, prompt=self.model.document_prompt)
        return self.model.encode(texts, prompt=self.model.query_prompt)

    def _from_cache(self, ids: list[str], texts: list[str]) -> np.ndarray:
        vectors = self._vectors[[self._cached[i] for i in ids]]
        probe = np.linspace(0, len(ids) - 1, num=min(self.verify, len(ids)), dtype=int)
        fresh = self.model.encode([texts[i] for i in probe], prompt=self.model.document_prompt)
        agreement = np.sum(fresh * vectors[probe], axis=1) / (
            np.linalg.norm(fresh, axis=1) * np.linalg.norm(vectors[probe], axis=1)
        )
        if agreement.min() < 0.999:
            raise EmbedkitError(f"cached embeddings disagree with the model (cosine {agreement.min():.4f})")
        return vectors

    @property
    def similarity_fn_name(self) -> str:
        """What ``similarity`` computes, as MTEB names it: the index's metric (cosine is the dot of unit vectors)."""
        if self.metric == "l2":
            return "euclidean"
        return "cosine" if self.model.normalize else "dot"

    def _function(self) -> Any:
        from sentence_transformers.util import dot_score, euclidean_sim, pairwise_dot_score, pairwise_euclidean_sim

        if self.metric == "l2":
            return euclidean_sim, pairwise_euclidean_sim
        return dot_score, pairwise_dot_score  # equal to cosine on the normalised vectors of a normalising model

    def similarity(self, embeddings1: Any, embeddings2: Any) -> Any:
        return self._function()[0](embeddings1, embeddings2)

    def similarity_pairwise(self, embeddings1: Any, embeddings2: Any) -> Any:
        return self._function()[1](embeddings1, embeddings2)


class IndexBackend:
    """MTEB's ``IndexEncoderSearchProtocol`` over an embedkit ``Index`` built from any FAISS factory string."""

    def __init__(self, factory: str = "Flat", metric: str = "ip", **search_params: int) -> None:
        self.factory, self.metric, self.search_params = factory, metric, search_params
        self.index: Any = None

    def add_documents(self, embeddings: Any, idxs: list[str]) -> None:
        vectors = embeddings.detach().cpu().numpy() if hasattr(embeddings, "detach") else np.asarray(embeddings)
        self.index = Index.build(vectors, list(idxs), factory=self.factory, metric=self.metric, **self.search_params)

    def search(self, embeddings: Any, top_k: int, similarity_fn: Any, top_ranked=None, query_idx_to_id=None):
        if top_ranked is not None:
            raise EmbedkitError("the embedkit index backend serves full-corpus retrieval, not reranking tasks")
        if self.index is None:
            raise EmbedkitError("no documents were added to the index")
        vectors = embeddings.detach().cpu().numpy() if hasattr(embeddings, "detach") else np.asarray(embeddings)
        scores, hits = self.index.search(vectors, top_k)
        position = {doc_id: row for row, doc_id in enumerate(self.index.ids)}
        return scores.tolist(), [[position[d] for d in row] for row in hits]

    def clear(self) -> None:
        self.index = None


def beir_task(data: BeirDataset, split: str = "test", task_name: str | None = None) -> Any:
    """The MTEB retrieval task of ``data`` (by its BEIR name, or ``task_name``), loaded from the local folder."""
    import datasets

    mteb = _require_mteb()
    from mteb.abstasks.retrieval_dataset_loaders import RetrievalSplitData

    name = task_name or MTEB_TASKS.get(data.name.lower())
    if name is None:
        known = ", ".join(sorted(MTEB_TASKS))
        raise EmbedkitError(f"no MTEB task known for dataset '{data.name}' (known: {known})", field="task_name")
    task = mteb.get_task(name)
    queries = data.split_queries(split)
    corpus = data.corpus.rename_column("_id", "id")
    split_data = RetrievalSplitData(
        corpus=corpus,
        queries=datasets.Dataset.from_dict({"id": list(queries), "text": list(queries.values())}),
        relevant_docs=data.qrels(split),
        top_ranked=None,
    )
    task.dataset = {"default": {split: split_data}}
    task.data_loaded = True
    return task


# A local folder MTEB's own loader reads (``datasets.load_dataset`` on a folder with a dataset card): the configs of
# the Hub repos mteb/<task> over a BEIR folder's files; qrels as JSONL, since ``datasets`` picks one reader per folder.
HUB_CARD = """---
configs:
- config_name: default
  data_files:
  - split: {split}
    path: qrels/{split}.jsonl
- config_name: corpus
  data_files:
  - split: corpus
    path: {corpus}
- config_name: queries
  data_files:
  - split: queries
    path: {queries}
---
"""


def hub_layout(data: BeirDataset, split: str, folder: str | Path) -> Path:
    """``folder`` laid out like MTEB's Hub repo of ``data`` (corpus and queries linked, qrels as JSONL)."""
    folder = Path(folder)
    (folder / "qrels").mkdir(parents=True)
    for source in (Path(data.corpus_file), Path(data.queries_file)):
        (folder / source.name).symlink_to(source.resolve())
    rows = [
        {"query-id": query_id, "corpus-id": doc_id, "score": grade}
        for query_id, judged in data.qrels(split).items()
        for doc_id, grade in judged.items()
    ]
    (folder / "qrels" / f"{split}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    card = HUB_CARD.format(split=split, corpus=Path(data.corpus_file).name, queries=Path(data.queries_file).name)
    (folder / "README.md").write_text(card)
    return folder


def task_loaded_by_mteb(data: BeirDataset, split: str, task_name: str, scratch: str | Path) -> Any:
    """MTEB's task with its data read by MTEB's own loader, offline, from a Hub-layout copy in ``scratch``.

    What ``load_data`` does, with one change: each ``datasets`` call gets a ``cache_dir`` in ``scratch``, so MTEB's
    conversions (and their lock files) stay there. MTEB's retrieval loader forwards no dataset options, and the only
    other way in is ``datasets.config.HF_DATASETS_CACHE``, a process-wide global.
    """
    mteb = _require_mteb()
    from datasets import get_dataset_split_names, load_dataset
    from mteb.abstasks.retrieval_dataset_loaders import RetrievalDatasetLoader

    cache_dir = str(Path(scratch) / "datasets-cache")

    class ScratchLoader(RetrievalDatasetLoader):
        def _get_split(self, config: str) -> str:
            splits = get_dataset_split_names(self.hf_repo, config, revision=self.revision, cache_dir=cache_dir)
            return self.split if self.split in splits else str(splits[0])  # hub_layout's configs: one split each

        def _load_dataset_split(self, config: str, num_proc: int | None) -> Any:
            split_name = self._get_split(config)
            return load_dataset(
                self.hf_repo, config, split=split_name, revision=self.revision, num_proc=num_proc, cache_dir=cache_dir
            )

    task = mteb.get_task(task_name, eval_splits=[split])
    folder = hub_layout(data, split, Path(scratch) / "hub")
    task.metadata = task.metadata.model_copy(update={"dataset": {**task.metadata.dataset, "path": str(folder)}})
    loader = ScratchLoader(hf_repo=str(folder), revision=task.metadata.dataset["revision"], split=split)
    task.dataset = {"default": {split: loader.load()}}
    task.dataset_transform()
    task.data_loaded = True
    return task


def evaluate_mteb(
    model: EmbeddingModel,
    data: BeirDataset,
    split: str = "test",
    *,
    factory: str = "Flat",
    metric: str = "ip",
    search_params: dict[str, int | None] | None = None,
    corpus_cache: Any = None,
    task_name: str | None = None,
) -> tuple[dict[str, Any], Callable[[Path], None]]:
    """Run ``mteb.evaluate`` with the embedkit encoder and the same index (factory, metric, search parameters).

    Returns MTEB's scores and a function that writes MTEB's result JSON into a folder (the report's ``mteb/``).
    """
    mteb = _require_mteb()
    from mteb.models.search_wrappers import SearchEncoderWrapper

    task = beir_task(data, split, task_name)
    params = {name: value for name, value in (search_params or {}).items() if value is not None}
    encoder = MtebEncoder(model, corpus_cache, metric=metric)
    searcher = SearchEncoderWrapper(encoder, index_backend=IndexBackend(factory, metric, **params))
    result = mteb.evaluate(searcher, tasks=[task], cache=None, show_progress_bar=False)
    (task_result,) = result.task_results
    scores = task_result.scores[split][0]
    name = f"{task_result.task_name}.json"

    def write(folder: Path) -> None:
        (folder / "mteb").mkdir(exist_ok=True)
        task_result.to_disk(folder / "mteb" / name)

    summary = {
        "task": task_result.task_name,
        "split": split,
        "main_score": float(scores["main_score"]),
        "ndcg_at_10": float(scores["ndcg_at_10"]),
        "recall_at_100": float(scores["recall_at_100"]),
        "index": {"factory": factory, "metric": metric, "search_params": params},
        "similarity": encoder.similarity_fn_name,
        "result_file": f"mteb/{name}",
        "mteb": metadata.version("mteb"),
    }
    return summary, write
