"""The package's shape, checked: no import cycle, light modules stay light, one retriever spec everywhere, one
encode of a corpus however many stages need its vectors."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path

import grimp
import pytest
import yaml
from conftest import TEST_CACHE

import embedkit
from embedkit.reproduce import load_conditions
from embedkit.search.retriever import BM25, Dense, Fusion, Hybrid, from_dict, to_dict


def _cycles(graph: grimp.ImportGraph) -> list[set[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def test_no_import_cycle_between_modules():
    graph = grimp.build_graph("embedkit", exclude_type_checking_imports=True)
    assert len(graph.modules) > 80
    assert _cycles(graph) == []


def _imported_by(code: str) -> set[str]:
    """The modules loaded after running ``code`` in a fresh interpreter."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    return set(json.loads(result.stdout.splitlines()[-1]))


def test_comparing_reports_loads_no_torch():
    imported = _imported_by("import embedkit.evaluation.compare")
    assert "embedkit.evaluation.compare" in imported
    assert not {"torch", "faiss", "sentence_transformers", "transformers"} & imported


def test_a_missing_model_is_refused_before_torch_loads(tmp_path):
    """A mistyped --model is one line at once: the CLI resolves it before anything heavy is imported."""
    imported = _imported_by(
        "from embedkit import EmbedkitError\n"
        "from embedkit.cli.options import ModelOptions\n"
        "try:\n"
        f"    ModelOptions(model={str(tmp_path / 'models' / 'ft')!r}).check()\n"
        "except EmbedkitError as err:\n"
        "    assert 'no such model folder' in str(err), err\n"
        "else:\n"
        "    raise SystemExit('accepted a missing model')"
    )
    assert "embedkit.models.reference" in imported
    assert not {"torch", "sentence_transformers", "transformers"} & imported


def test_a_bm25_evaluation_loads_no_torch(scifact_subset, tmp_path):
    """BM25 needs no neural network: evaluating it must not pay seconds for torch and sentence-transformers."""
    imported = _imported_by(
        "import embedkit\n"
        f"r = embedkit.evaluate(None, {str(scifact_subset)!r}, 'test', 'bm25', cache_dir={str(tmp_path / 'c')!r})\n"
        "assert r['metrics']['ndcg_at_10'] > 0.5, r['metrics']"
    )
    assert "embedkit.evaluation.pipeline" in imported
    assert not {"torch", "sentence_transformers", "transformers"} & imported


def test_evaluate_takes_a_handful_of_parameters():
    assert len(inspect.signature(embedkit.evaluate).parameters) <= 8


def _flags(spec) -> list[str]:
    """The evaluate flags that spell ``spec`` (written out here, apart from the CLI's own mapping)."""

    def dense(part: Dense) -> list[str]:
        flags = ["--factory", part.factory, "--metric", part.metric]
        return flags + (["--nprobe", str(part.nprobe)] if part.nprobe else [])

    def bm25(part: BM25) -> list[str]:
        return ["--bm25-backend", part.backend, "--bm25-k1", str(part.k1), "--bm25-b", str(part.b)]

    if isinstance(spec, Dense):
        return ["--retriever", "dense", *dense(spec)]
    if isinstance(spec, BM25):
        return ["--retriever", "bm25", *bm25(spec)]
    fusion = ["--fusion", spec.fusion.method, "--fusion-depth", str(spec.fusion.depth)]
    fusion += ["--fusion-weights", ",".join(map(str, spec.fusion.weights))] if spec.fusion.weights else []
    return ["--retriever", "hybrid", *dense(spec.dense), *bm25(spec.bm25), *fusion]


SPECS = [
    Dense("IVF4,Flat", nprobe=2),
    BM25(k1=1.2, b=0.6),
    Hybrid(Dense(), BM25(k1=0.8), Fusion("interpolation", [0.7, 0.3], depth=200)),
]


@pytest.mark.parametrize("spec", SPECS, ids=[s.type for s in SPECS])
def test_one_retriever_spec_through_the_cli_the_report_and_the_yaml(spec, scifact_subset, tmp_path):
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "embedkit.cli",
            "evaluate",
            "-d",
            str(scifact_subset),
            "-o",
            str(tmp_path / "r"),
            "--cache-dir",
            str(TEST_CACHE),
            *_flags(spec),
        ],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    (folder,) = (tmp_path / "r").iterdir()
    recorded = json.loads((folder / "report.json").read_text())["retriever"]
    assert from_dict(recorded) == spec and recorded == to_dict(spec)
    condition = {
        "id": "x",
        "dataset": str(scifact_subset),
        "retriever": recorded,
        "expected": {"ndcg_at_10": 0.5},
        "source": "s",
    }
    path = tmp_path / "conditions.yaml"
    path.write_text(yaml.safe_dump({"sources": {"s": {"title": "t", "url": "u"}}, "conditions": [condition]}))
    (loaded,), _ = load_conditions(path)
    assert loaded.retriever == spec


def test_evaluate_mine_tune_and_the_mteb_harness_encode_the_corpus_once(default_model, scifact_subset, tmp_path):
    """Four stages that need the corpus's vectors share one cached encode (the MTEB harness re-encodes 8 documents
    only, to check the cache)."""
    from embedkit import EvaluateOptions, evaluate, load_dataset
    from embedkit.data import doc_text
    from embedkit.train.mining import MiningSettings, mine_hard_negatives

    data = load_dataset(scifact_subset)
    documents = {doc_text(row) for row in data.corpus}
    encoded: list[int] = []
    original = type(default_model)._encode  # every encode of an EmbeddingModel goes through it

    def counting(self, texts, *args, **kwargs):
        encoded.append(sum(text in documents for text in texts))
        return original(self, texts, *args, **kwargs)

    cache = tmp_path / "cache"
    type(default_model)._encode = counting
    try:
        first = evaluate(default_model, data, "test", cache_dir=cache)
        mine_hard_negatives(default_model, data, MiningSettings(split="test", range_max=20), cache_dir=cache)
        mteb = evaluate(
            default_model, data, "test", cache_dir=cache, options=EvaluateOptions(harness="mteb", mteb_task="SciFact")
        )
    finally:
        type(default_model)._encode = original
    (folder,) = (cache / "embeddings" if (cache / "embeddings").is_dir() else cache).glob("corpus-*")
    tuned = subprocess.run(
        [
            sys.executable,
            "-m",
            "embedkit.cli",
            "index",
            "-e",
            str(folder),
            "-o",
            str(tmp_path / "idx"),
            "--factory",
            "IVF4,Flat",
            "--tune",
            "--tune-dataset",
            str(scifact_subset),
            "--target-recall",
            "0.5",
        ],
        capture_output=True,
        text=True,
    )
    assert tuned.returncode == 0, tuned.stderr
    assert sum(encoded) == len(documents) + 8
    assert first["embeddings_cache"]["encoded_shards"] == 1 and mteb["embeddings_cache"]["encoded_shards"] == 0
    assert Path(first["embeddings_cache"]["path"]) == folder


def test_every_public_name_resolves():
    """``embedkit.__all__`` and each stage's ``__all__`` name things that import (the old ShardedIndex included)."""
    import importlib

    for package in (
        "embedkit",
        "embedkit.data",
        "embedkit.encode",
        "embedkit.models",
        "embedkit.index",
        "embedkit.search",
        "embedkit.evaluation",
        "embedkit.reranking",
        "embedkit.report",
        "embedkit.train",
        "embedkit.pretrain",
    ):
        module = importlib.import_module(package)
        for name in module.__all__:
            assert getattr(module, name) is not None, f"{package}.{name}"
    assert embedkit.ShardedIndex is embedkit.PartitionedIndex
    assert callable(embedkit.rerank) and callable(embedkit.evaluate)  # no subpackage shadows a function's name


KIND_BRANCH_CEILING = 15  # this script counts 56 at c8ae77e, 10 now


def test_kind_branches_do_not_grow():
    """Dispatch on a family belongs in the registries (``embedkit.index.registry``, ``embedkit.rows``) and the encoder
    factory; every other line that branches on a kind is counted by ``tests/kind_branches.py``."""
    from kind_branches import kind_branches

    found = kind_branches()
    assert len(found) <= KIND_BRANCH_CEILING, "\n".join(found)


def test_the_new_family_checklist_names_every_protocol_method():
    """``docs/concepts/new-family.md`` is what a fourth representation implements: it must name each member of the
    three protocols and each method of a row format, so a protocol cannot grow without the page saying so."""
    from embedkit.protocols import Encoder, Rows, SearchIndex
    from embedkit.rows import RowFormat

    page = (Path(__file__).parents[1] / "docs" / "concepts" / "new-family.md").read_text()
    members = set()
    for protocol in (Encoder, Rows, SearchIndex):
        members |= {name for name in vars(protocol) if not name.startswith("_")} - {"register"}
        members |= set(getattr(protocol, "__annotations__", {}))
    members |= {name for name in vars(RowFormat) if not name.startswith("_")}
    missing = sorted(name for name in members if f"`{name}" not in page)
    assert not missing, f"docs/concepts/new-family.md does not name {missing}"
