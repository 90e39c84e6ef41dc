"""One contract for every index engine the registry opens (``embedkit.protocols.SearchIndex``).

Each engine, built from small seeded rows of its family: ``search(rows, k) -> Hits`` of the right shape, equal to a
numpy oracle where the engine is exact; ``save`` then ``open_index`` searches the same; a damaged or missing file of
its folder is one line naming the file (exit 2 from ``embedkit search``); a filter on an engine that holds no
metadata is refused by name. Then the folders embedkit 0.1.0 wrote (``tests/data/previous_release``) open and answer
as they did.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import embedkit_here

from embedkit.errors import EmbedkitError
from embedkit.index import Index, LiveIndex, PartitionedIndex, open_index
from embedkit.index.multivector_exact import MultiVectorExactIndex
from embedkit.index.multivector_ivf import MultiVectorIVFIndex
from embedkit.index.multivector_plaid import MultiVectorPlaidIndex
from embedkit.index.registry import engines
from embedkit.index.sparse_exact import SparseExactIndex
from embedkit.multivector import TokenRows, maxsim
from embedkit.protocols import Capabilities, Hits, SearchIndex
from embedkit.sparse import SparseRows

PREVIOUS = Path(__file__).parent / "data" / "previous_release"
DOCS, DIM, VOCAB, K = 60, 8, 40, 5
IDS = [f"d{i:02d}" for i in range(DOCS)]
SETTINGS = {"model": "contract", "weights_sha256": "0" * 64, "dim": DIM, "max_length": 16, "document_prompt": ""}


def _sparse(rng: np.random.Generator, count: int) -> SparseRows:
    rows = [np.sort(rng.choice(VOCAB, size=rng.integers(1, 7), replace=False)) for _ in range(count)]
    indptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    values = rng.uniform(0.1, 3.0, int(indptr[-1])).astype(np.float32)
    return SparseRows(indptr, np.concatenate(rows).astype(np.int32), values, VOCAB)


def _tokens(rng: np.random.Generator, count: int) -> TokenRows:
    lengths = rng.integers(1, 6, count)
    vectors = rng.normal(size=(int(lengths.sum()), DIM)).astype(np.float16)
    return TokenRows(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64), vectors)


def _folder(rows, **kind) -> SimpleNamespace:
    """What the sparse and multi-vector builders read of an embeddings folder."""
    from embedkit.rows import row_format

    family = next(name for name, flag in kind.items() if flag)
    return SimpleNamespace(row_format=row_format(family), embeddings=lambda: rows, ids=lambda: IDS, settings=SETTINGS,
                           path=None)  # fmt: skip


class Names:
    """A sparse model's vocabulary, as the Lucene impact engine asks it of ``bind_model``."""

    @staticmethod
    def token_names(indices):
        return [f"t{int(i)}" for i in indices]


def _oracle(family: str, documents, queries) -> np.ndarray:
    if family == "dense":
        return queries @ documents.T
    if family == "sparse":
        return (queries.to_scipy() @ documents.to_scipy().T).toarray()
    return maxsim(queries, documents)


def _build(engine: str, tmp_path: Path):
    """(index, document rows, query rows, family, ids) for one engine, saved in ``tmp_path / engine``; a ``live-``
    engine is that engine's folder opened for updates after seeded adds, deletes and upserts (with metadata)."""
    if engine.startswith("live-"):
        return _changed(*_build(engine.removeprefix("live-"), tmp_path), tmp_path / engine.removeprefix("live-"))
    index, documents, queries, family = _build_one(engine, tmp_path)
    return index, documents, queries, family, IDS


def _changed(index, documents, queries, family, ids, folder: Path):
    """Ten adds (rows drawn from the documents'), five deletes and five upserts, each with a ``year``."""
    from embedkit.index.registry import open_live
    from embedkit.rows import row_format

    rng, fmt = np.random.default_rng(11), row_format(family)
    live = open_live(folder, fields={"year": "int"})
    years = {doc_id: None for doc_id in ids}
    rows = {doc_id: fmt.take(documents, [i]) for i, doc_id in enumerate(ids)}
    for step in range(4):
        picks = [int(j) for j in rng.choice(DOCS, 5, replace=False)]
        new = [f"n{step}{j}" for j in range(3)]
        live.add(new, fmt.take(documents, picks[:3]), metadata=[{"year": 2000 + j} for j in range(3)])
        years |= {doc_id: 2000 + j for j, doc_id in enumerate(new)}
        rows |= {doc_id: fmt.take(documents, [p]) for doc_id, p in zip(new, picks[:3])}
        gone = [doc_id for doc_id in sorted(years)[step::9] if doc_id not in new][:1]
        live.delete(gone)
        for doc_id in gone:
            del years[doc_id], rows[doc_id]
        kept = sorted(years)[step * 3]
        live.upsert([kept], fmt.take(documents, picks[3:4]), metadata=[{"year": 1990 + step}])
        years[kept], rows[kept] = 1990 + step, fmt.take(documents, picks[3:4])
    final = sorted(rows)
    stacked = fmt.stack([rows[doc_id] for doc_id in final], fmt.shape(documents)[1], SETTINGS)
    live.years = years  # the oracle's metadata, for the filter check
    return live, stacked, queries, family, final


def _build_one(engine: str, tmp_path: Path):
    rng = np.random.default_rng(7)
    folder = tmp_path / engine
    if engine.startswith("faiss") or engine == "live":
        documents = rng.normal(size=(DOCS, DIM)).astype(np.float32)
        queries = rng.normal(size=(4, DIM)).astype(np.float32)
        factory = "IVF4,Flat" if engine == "faiss-ivf" else "Flat"
        index = Index.build(documents, IDS, factory, model_settings=SETTINGS, nprobe=4 if "IVF" in factory else None)
        if engine == "faiss-partitioned":
            half = DOCS // 2
            parts = [Index.build(documents[a:b], IDS[a:b], "Flat", model_settings=SETTINGS) for a, b in
                     ((0, half), (half, DOCS))]  # fmt: skip
            index = PartitionedIndex(parts, {"format": "embedkit.partitioned-index/1"})
        index.save(folder)
        if engine == "live":
            index = LiveIndex.open(folder)
        return index, documents, queries, "dense"
    if engine.startswith("sparse"):
        documents, queries = _sparse(rng, DOCS), _sparse(rng, 4)
        if engine == "sparse-exact":
            index = SparseExactIndex.build(_folder(documents, sparse=True))
            index.save(folder)
        elif engine == "sparse-lucene-impact":
            from embedkit.integrations.pyserini_impact import build_impact_index

            documents = documents.quantized(100)  # Lucene sums integer impacts: exact on quantised weights
            queries = queries.quantized(100)
            index = open_index(build_impact_index(folder, IDS, documents, Names.token_names, SETTINGS, quantization=1))
        else:
            from embedkit.integrations.seismic import SeismicSparse, build_seismic_index

            build_seismic_index(folder, IDS, documents, SETTINGS)
            index = SeismicSparse(folder, query_cut=VOCAB, heap_factor=1.0)
        return index, documents, queries, "sparse"
    documents, queries = _tokens(rng, DOCS), _tokens(rng, 4)
    index = MultiVectorExactIndex.build(_folder(documents, multivector=True))
    if engine == "multivector-ivf":
        index = MultiVectorIVFIndex.build(_folder(documents, multivector=True), lists=4)
        index.set_search_params(nprobe=4, candidates=len(documents.vectors))  # every token a candidate: exhaustive
    if engine == "multivector-plaid":  # every centroid probed, every document decompressed: exact on what it stores
        index = MultiVectorPlaidIndex.build(_folder(documents, multivector=True), centroids=8, bits=8)
        index.set_search_params(nprobe=8, candidates=4 * DOCS)
        documents = TokenRows(index.offsets, index.codec.decode(index.codes, index.residuals))
    index.save(folder)
    return index, documents, queries, "multivector"


ENGINES = ["faiss-flat", "faiss-ivf", "faiss-partitioned", "live", "sparse-exact", "sparse-lucene-impact",
           "sparse-seismic", "multivector-exact", "multivector-ivf", "multivector-plaid",
           "live-sparse-exact", "live-multivector-exact", "live-multivector-ivf"]  # fmt: skip


def test_every_registered_engine_is_in_the_contract():
    covered = {"faiss", "exact", "lucene-impact", "seismic", "ivf", "plaid"}
    assert {engine for _, engine in engines()} <= covered


def _check_against_oracle(hits: Hits, scores: np.ndarray, ids: list[str], pruned: bool) -> float:
    """Each query's hits have the oracle's scores and (unless ``pruned``) are its top ``K``; returns the recall."""
    found = []
    for i, row in enumerate(scores):
        order = sorted(np.flatnonzero(row > 0 if pruned is None else np.ones(len(row), bool)),
                       key=lambda j: (row[j], ids[j]), reverse=True)[:K]  # trec_eval's order  # fmt: skip
        got = [ids.index(doc) for doc in hits.ids[i]]
        assert np.allclose(hits.scores[i, : len(got)], row[got], rtol=1e-2 if pruned else 1e-5)
        if not pruned:
            assert np.allclose(sorted(row[got]), sorted(row[order]), rtol=1e-5)
        found.append(len(set(got) & set(order)) / max(1, len(order)))
    return float(np.mean(found))


@pytest.mark.parametrize("engine", ENGINES)
def test_search_equals_the_oracle_and_survives_save_and_open(engine, tmp_path):
    index, documents, queries, family, ids = _build(engine, tmp_path)
    assert isinstance(index, SearchIndex) and isinstance(index.capabilities, Capabilities)
    assert len(index) == len(ids) and index.model_settings["model"] == "contract"
    hits = index.search(queries, K)
    assert isinstance(hits, Hits) and hits.scores.dtype == np.float32 and hits.scores.shape[0] == len(queries)
    assert len(hits.ids) == len(queries) and all(len(row) <= K for row in hits.ids)
    pruned = engine == "sparse-seismic"  # reads only the blocks its summaries choose, even with every query term
    scores = _oracle(family, documents, queries)
    recall = _check_against_oracle(hits, scores, ids, None if family == "sparse" and not pruned else pruned)
    assert recall >= (0.8 if pruned else 1.0), recall
    saved = index.save(tmp_path / f"{engine}-copy")
    reopened = open_index(saved)
    assert type(reopened) is type(index) and reopened.capabilities == index.capabilities
    if "lucene" in engine:
        reopened.bind_model(Names)
    again = reopened.search(queries, K)
    assert again.ids == hits.ids and np.allclose(again.scores, hits.scores)
    if not index.capabilities.filterable:
        with pytest.raises(EmbedkitError, match="filter"):
            index.search(queries, K, filter="year > 1")
    elif engine.startswith("live-"):  # a filter before the top-k: the oracle over the matching documents only
        matching = [i for i, doc_id in enumerate(ids) if (index.years.get(doc_id) or 0) >= 2001]
        filtered = index.search(queries, K, filter="year >= 2001")
        kept = [ids[i] for i in matching]
        _check_against_oracle(filtered, scores[:, matching], kept, None if family == "sparse" else False)


def _victim(folder: Path) -> Path:
    """The largest file of an index folder other than meta.json: the one a damaged disk most likely hits."""
    files = [p for p in folder.rglob("*") if p.is_file() and p.name != "meta.json" and not p.name.endswith(".sqlite")]
    return max(files, key=lambda p: (p.stat().st_size, p.name))


@pytest.mark.parametrize("engine", ENGINES)
def test_a_damaged_or_missing_file_is_one_line_naming_it(engine, tmp_path):
    index, *_ = _build(engine, tmp_path)
    folder = index.save(tmp_path / "saved")
    victim = _victim(folder)
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.raises(EmbedkitError) as damaged:
        open_index(folder)
    assert victim.name in str(damaged.value) and "\n" not in str(damaged.value)
    queries = tmp_path / "queries.jsonl"
    queries.write_text(json.dumps({"_id": "q", "text": "a query"}) + "\n")
    done = embedkit_here("search", "-i", folder, "--queries", queries, "-o", tmp_path / "run.trec")
    assert done.returncode == 2 and victim.name in done.stderr and len(done.stderr.strip().splitlines()) == 1
    victim.unlink()
    with pytest.raises(EmbedkitError) as missing:
        open_index(folder)
    assert victim.name in str(missing.value) and "\n" not in str(missing.value)


def test_the_folders_of_the_previous_release_open_and_search_the_same(tmp_path):
    """Written by embedkit 0.1.0 (``tests/data/make_previous_release.py`` at c8ae77e): no ``files`` in the
    sparse and multi-vector meta.json, no ``terms`` in the Lucene folder; copied, since Lucene writes a lock file."""
    answers = json.loads((PREVIOUS / "answers.json").read_text())
    for name, answer in answers.items():
        shutil.copytree(PREVIOUS / name, tmp_path / name)
        index = open_index(tmp_path / name)
        if name.startswith("faiss"):
            scores, ids = index.search(np.array(answer["queries"], np.float32), 5)
            assert ids == answer["ids"] and np.allclose(scores, answer["scores"]), name
            continue
        raw = answer["queries"]
        if name.startswith("sparse"):
            queries = SparseRows(*(np.array(raw[key]) for key in ("indptr", "indices", "values")), raw["dim"])
            queries = SparseRows(queries.indptr, queries.indices.astype(np.int32),
                                 queries.values.astype(np.float32), queries.dim)  # fmt: skip
        else:
            queries = TokenRows(np.array(raw["offsets"]), np.array(raw["vectors"], np.float16))
        if name == "sparse-lucene-impact":
            index.bind_model(Names)
        hits = index.search(queries, 5)
        expected = answer["hits"]
        assert hits.ids == [[doc for doc, _ in row] for row in expected], name
        for i, row in enumerate(expected):
            assert np.allclose(hits.scores[i, : len(row)], [score for _, score in row]), name
