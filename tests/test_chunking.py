"""Long documents: chunk spans, late chunking against a hand computation, and chunk scores aggregated into documents."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from embedkit import load_model
from embedkit.data.beir import doc_text
from embedkit.errors import EmbedkitError
from embedkit.index.faiss_helpers import BuildSettings
from embedkit.index.faiss_index import Index
from embedkit.models.chunking import Chunking, DocumentTokens, sentence_spans, tokenize_document, window_spans
from embedkit.search.chunks import Aggregation, ChunkMap, aggregate, search_chunked

TEXT = (
    "Late chunking encodes the whole document once. Each chunk is then pooled from the token vectors of its span. "
    "So a chunk's vector sees the words around it! Does it help retrieval? The study measures it on SciFact. "
) * 3


@pytest.fixture(scope="module")
def tiny(tiny_bert):
    """The tiny random BERT with mean pooling, normalised, reading at most 40 tokens at once."""
    return load_model(tiny_bert, pooling="mean", normalize=True, max_length=40, device="cpu")


def _hand_token_vectors(model, text: str) -> torch.Tensor:
    """The whole document's token vectors from one plain forward pass (it must fit the model's positions)."""
    tokenizer = model.st[0].tokenizer
    features = tokenizer(text, return_tensors="pt")
    with torch.inference_mode():
        return model.st[0].auto_model(**features).last_hidden_state[0]


def test_late_chunks_equal_the_token_vectors_of_the_whole_document_pooled_over_each_span(tiny):
    """The document is longer than the 40-token max length, so it is read in windows that each re-read 8 tokens of
    context: the hand computation runs those windows through the network itself, stitches their token vectors and
    mean-pools each 14-token span (16 less [CLS] and [SEP]); the first chunk also holds [CLS], the last [SEP]."""
    chunking = Chunking("late", size=16, overlap=0, context=8)
    tiny.chunking = chunking
    chunks = tiny.encode_chunks([TEXT])
    tokenizer = tiny.st[0].tokenizer
    tokens = tokenize_document(tokenizer, TEXT, "")
    ids = tokens.ids
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    window = 40 - 2
    # by hand: window 1 reads ids[0:38], each next one re-reads 8 tokens of context before its own 30
    vectors, keep, first = [], 0, True
    while keep < len(ids):
        start = 0 if first else keep - 8
        stop = min(len(ids), start + window)
        with torch.inference_mode():
            hidden = tiny.st[0].auto_model(input_ids=torch.tensor([[cls, *ids[start:stop], sep]])).last_hidden_state[0]
        own = hidden[: 1 + (stop - start)] if first else hidden[1 + (keep - start) : 1 + (stop - start)]
        if stop == len(ids):
            own = torch.cat([own, hidden[-1:]])
        vectors.append(own)
        keep, first = stop, False
    stitched = torch.cat(vectors)
    assert len(stitched) == len(ids) + 2
    spans = window_spans(len(ids), 16 - 2, 0)
    expected = []
    for n, (a, b) in enumerate(spans):
        lo, hi = (0 if n == 0 else 1 + a), (len(stitched) if n == len(spans) - 1 else 1 + b)
        expected.append(torch.nn.functional.normalize(stitched[lo:hi].mean(0), dim=0).numpy())
    assert chunks.vectors.shape == (len(spans), tiny.dim)
    np.testing.assert_allclose(chunks.vectors, np.stack(expected), atol=1e-5)
    assert chunks.counts.tolist() == [len(spans)]
    # each chunk's characters are its tokens' span of the text
    for (a, b), (start, end) in zip(spans, chunks.spans.tolist()):
        assert start == tokens.offsets[a][0] and end == tokens.offsets[b - 1][1]


def test_one_late_chunk_over_a_whole_short_document_is_the_ordinary_document_vector(tiny):
    short = "Late chunking keeps context. One chunk is the whole text."
    tiny.chunking = Chunking("late", size=40)
    chunks = tiny.encode_chunks([short, "", TEXT[:90]])
    assert chunks.counts.tolist() == [1, 1, 1]
    ordinary = tiny.encode_documents([short, "", TEXT[:90]])
    np.testing.assert_allclose(chunks.vectors, ordinary, atol=1e-5)
    by_hand = torch.nn.functional.normalize(_hand_token_vectors(tiny, short).mean(0), dim=0).numpy()
    np.testing.assert_allclose(chunks.vectors[0], by_hand, atol=1e-5)


def test_window_and_sentence_chunks_encode_their_spans_text(tiny):
    tiny.chunking = Chunking("window", size=20, overlap=6)
    chunks = tiny.encode_chunks([TEXT])
    pieces = [TEXT[a:b] for a, b in chunks.spans.tolist()]
    assert len(pieces) > 3 and all(pieces)
    np.testing.assert_allclose(chunks.vectors, tiny.encode_documents(pieces), atol=1e-5)
    tokens = tokenize_document(tiny.st[0].tokenizer, TEXT, "")
    assert [len(tokens.ids[a:b]) for a, b in window_spans(len(tokens.ids), 18, 6)][:-1] == [18] * (len(pieces) - 1)
    tiny.chunking = Chunking("sentence", size=40)
    sentences = tiny.encode_chunks([TEXT])
    for a, b in sentences.spans.tolist():  # whole sentences: each chunk ends at a sentence end
        assert TEXT[a:b].rstrip()[-1] in ".!?"


@pytest.mark.parametrize(
    ("chunking", "flag"),
    [
        (Chunking("window", size=64, overlap=64), "--chunk-overlap"),
        (Chunking("late", size=41), "--chunk-size"),
        (Chunking("window", size=41), "--chunk-size"),
        (Chunking("tokens"), "--chunking"),
        (Chunking("late", size=16, context=38), "context"),
    ],
)
def test_bad_chunkings_are_refused_by_name(tiny_bert, chunking, flag):
    with pytest.raises(EmbedkitError) as caught:
        model = load_model(tiny_bert, pooling="mean", max_length=40, device="cpu", chunking=chunking)
        model.encode_chunks([TEXT])
    assert caught.value.field == flag


def test_late_chunking_refuses_a_pooling_that_reads_one_token(tiny_bert):
    with pytest.raises(EmbedkitError, match="mean or max pooling"):
        load_model(tiny_bert, pooling="cls", max_length=40, device="cpu", chunking={"method": "late", "size": 16})


# --- aggregation ------------------------------------------------------------------------------------------------


def _chunk_index(rows: int = 60, dim: int = 8, seed: int = 0) -> tuple[Index, np.ndarray, list[str]]:
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, 6, size=rows)
    ids = [f"d{doc}#{n}" for doc, count in enumerate(counts) for n in range(count)]
    vectors = rng.standard_normal((len(ids), dim)).astype(np.float32)
    index = Index.build(vectors, ids, "Flat")
    index.meta["model"] = {"chunking": {"method": "window", "size": 16, "overlap": 0}}
    return index, vectors, ids


def _brute_force(vectors, ids, query, method: str) -> list[tuple[str, float]]:
    scores = vectors @ query
    best: dict[str, float] = {}
    for row_id, score in zip(ids, scores.tolist()):
        document, number = row_id.rsplit("#", 1)
        if method == "firstp" and number != "0":
            continue
        best[document] = max(best.get(document, -np.inf), score)
    return sorted(best.items(), key=lambda item: -item[1])


@pytest.mark.parametrize("method", ["maxp", "firstp"])
def test_chunked_flat_search_equals_brute_force_over_the_chunks_then_the_aggregation(method):
    index, vectors, ids = _chunk_index()
    queries = np.random.default_rng(1).standard_normal((25, vectors.shape[1])).astype(np.float32)
    for k in (1, 10, 60, 1000):
        found = search_chunked(index, queries, k, Aggregation(method))
        for query, hits in zip(queries, found):
            expected = _brute_force(vectors, ids, query, method)[:k]
            assert len(hits) == min(k, 60)  # k distinct documents come back (all 60 when k is larger)
            assert len({hit.document for hit in hits}) == len(hits)
            assert [hit.document for hit in hits] == [doc for doc, _ in expected]
            np.testing.assert_allclose([hit.score for hit in hits], [s for _, s in expected], rtol=1e-5, atol=1e-5)


def test_maxp_keeps_each_documents_best_chunk_and_sump_adds_its_top_chunks():
    chunks = ChunkMap.of(["a#0", "a#1", "b#0", "a#2", "b#1", "c#1", "c#0"])
    rows = np.array([3, 4, 0, 2, 5, 1, 6, -1])
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.1, 0.0])
    maxp = aggregate(rows, scores, chunks, Aggregation("maxp"))
    assert [(h.document, h.score, h.chunk) for h in maxp] == [("a", 0.9, 3), ("b", 0.8, 4), ("c", 0.5, 5)]
    firstp = aggregate(rows, scores, chunks, Aggregation("firstp"))
    assert [(h.document, h.score) for h in firstp] == [("a", 0.7), ("b", 0.6), ("c", 0.1)]
    sump = aggregate(rows, scores, chunks, Aggregation("sump", sum_top=2))
    assert [(h.document, round(h.score, 6)) for h in sump] == [("a", 1.6), ("b", 1.4), ("c", 0.6)]


def test_chunk_ids_keep_document_ids_that_hold_the_separator():
    chunks = ChunkMap.of(["x#1#0", "x#1#1", "x#0"])
    assert chunks.documents == ["x#1", "x"] and chunks.number.tolist() == [0, 1, 0]


def test_an_aggregation_for_an_index_of_whole_documents_is_refused():
    from embedkit.search.chunks import check_aggregation

    index = Index.build(np.eye(4, dtype=np.float32), ["a", "b", "c", "d"])
    with pytest.raises(EmbedkitError, match="holds whole documents"):
        check_aggregation(index, Aggregation("maxp"))


def test_doc_text_spans_are_what_the_snippet_shows(tiny):
    tiny.chunking = Chunking("window", size=20)
    from embedkit.models.chunked_encode import document_spans

    document = {"title": "Late chunking", "text": TEXT}
    text = doc_text(document)
    assert document_spans(tiny, text).tolist() == tiny.encode_chunks([text]).spans.tolist()


# --- spans of generated documents ---------------------------------------------------------------------------------

WORDS = st.lists(st.sampled_from(["alpha", "beta", "gamma.", "delta!", "eps?", "zeta", "eta.\n"]), max_size=120)


def _word_tokens(words: list[str]) -> tuple[DocumentTokens, str]:
    """A document whose tokens are its words (offsets as a tokenizer gives them)."""
    text = " ".join(words)
    offsets, position = [], 0
    for word in words:
        start = text.index(word, position)
        offsets.append((start, start + len(word)))
        position = start + len(word)
    return DocumentTokens([], list(range(len(words))), offsets), text


@settings(max_examples=150, deadline=None)
@given(count=st.integers(0, 400), size=st.integers(1, 50), data=st.data())
def test_window_spans_cover_every_token_in_steps_of_size_less_overlap(count, size, data):
    overlap = data.draw(st.integers(0, size - 1))
    spans = window_spans(count, size, overlap)
    assert spans[0][0] == 0 and spans[-1][1] == count
    assert all(0 < b - a <= size for a, b in spans) or count == 0
    assert all(b[0] - a[0] == size - overlap for a, b in itertools.pairwise(spans))
    assert all(b[0] < a[1] + 1 for a, b in itertools.pairwise(spans))  # no gap


@settings(max_examples=150, deadline=None)
@given(words=WORDS, size=st.integers(1, 30), data=st.data())
def test_sentence_spans_cover_every_token_and_cut_only_at_sentence_ends_or_in_long_sentences(words, size, data):
    overlap = data.draw(st.integers(0, size - 1))
    tokens, text = _word_tokens(words)
    spans = sentence_spans(tokens, text, size, overlap)
    count = len(words)
    if count == 0:
        assert spans == [(0, 0)]
        return
    covered = set()
    for a, b in spans:
        assert 0 < b - a <= size
        covered |= set(range(a, b))
    assert covered == set(range(count)) and spans[0][0] == 0 and spans[-1][1] == count
    for previous, current in itertools.pairwise(spans):
        assert previous[0] < current[0] and current[1] > previous[1]  # every span moves on
        assert previous[1] - current[0] <= overlap  # what it re-reads fits the overlap
    ends = {i + 1 for i, word in enumerate(words) if word.rstrip()[-1] in ".!?"}
    bounds = sorted({0, count} | ends)
    longest = max(j - i for i, j in itertools.pairwise(bounds))
    for _, b in spans[:-1]:
        assert b in ends or longest > size  # a cut inside a sentence only where a sentence is longer than a chunk


def test_chunked_encodes_split_across_workers_merge_into_the_single_process_folder(tiny, tmp_path):
    from embedkit.encode.writer import encode_to_folder

    tiny.chunking = Chunking("sentence", size=24, overlap=8)
    corpus = [{"_id": f"d{i}", "title": f"Doc {i}", "text": TEXT[: 40 + 37 * i]} for i in range(9)]
    single = encode_to_folder(tiny, corpus, tmp_path / "single", shard_size=2)
    for worker in (0, 1):
        merged = encode_to_folder(tiny, corpus, tmp_path / "workers", shard_size=2, worker_id=worker, num_workers=2)
    assert merged.complete and merged.manifest["shards"] == single.manifest["shards"]
    assert single.manifest["documents"] == 9 and single.manifest["count"] == len(single.spans()) > 9
    chunks = ChunkMap.of(single.ids())
    assert chunks.documents == [f"d{i}" for i in range(9)]  # in corpus order, each numbered from 0
    assert all(
        chunks.number[row]
        == (0 if row == 0 or chunks.parent[row] != chunks.parent[row - 1] else chunks.number[row - 1] + 1)
        for row in range(len(chunks.number))
    )


def test_a_living_index_of_chunk_rows_changes_by_document_and_ray_refuses_chunks(tiny, tmp_path):
    """An index of chunk rows takes changes by document: an added text becomes its chunk rows, a delete takes all of
    them, and a search answers documents. The Ray executor encodes documents whole and refuses chunks."""
    from embedkit.encode.ray_executor import RayExecutor, RaySettings
    from embedkit.encode.writer import encode_to_folder
    from embedkit.index import LiveIndex
    from embedkit.search.queries import search_documents

    tiny.chunking = Chunking("window", size=24)
    corpus = [{"_id": f"d{i}", "text": TEXT[: 60 + 20 * i]} for i in range(4)]
    folder = encode_to_folder(tiny, corpus, tmp_path / "emb")
    Index.from_vectors(folder, BuildSettings()).save(tmp_path / "idx")
    live = LiveIndex.open(tmp_path / "idx")
    before = len(live)
    live.add(["new"], texts=[TEXT[:140]], model=tiny)
    added = len(tiny.encode_chunks([TEXT[:140]]).vectors)
    assert len(live) == before + added and added > 1
    live.delete(["d3"])
    assert not any(doc_id and doc_id.startswith("d3#") for doc_id in live.ids)
    hits = search_documents(live, tiny.encode_queries([TEXT[:40]]), 10)
    assert "d3" not in hits.ids[0] and len(set(hits.ids[0])) == len(hits.ids[0]) == 4  # documents, once each
    with pytest.raises(EmbedkitError, match="does not chunk documents") as caught:
        next(RayExecutor(RaySettings()).encode_shards(tiny, corpus, tmp_path / "ray", [0], 10, None))
    assert caught.value.field == "--chunking"
