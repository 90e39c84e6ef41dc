"""One bad request fails alone in ``embedkit serve`` (issue 39): 16 concurrent requests, 4 malformed in different
ways, share micro-batches on a real server; the 12 good ones get the library's answers, the 4 bad ones a 4xx naming
the field. A batch that still raises is retried request by request (the real engine and batcher, in process), and
serve's numeric settings are finite and bounded, so a NaN or a huge --max-wait-ms is refused at start."""

from __future__ import annotations

import asyncio
import json
import math
import random
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

httpx = pytest.importorskip("httpx", reason="embedkit[serve] is not installed")
pytest.importorskip("fastapi", reason="embedkit[serve] is not installed")

from test_serve import assert_same_hits, running_server  # noqa: E402

from embedkit.errors import EmbedkitError  # noqa: E402

DOCUMENTS = 40  # a tiny index: k=100 asks for more than it holds, and gets all of it
MAX_K = 100
ROUNDS = 3


@pytest.fixture(scope="module")
def subset(scifact_subset):
    from embedkit import load_dataset

    return load_dataset(scifact_subset)


@pytest.fixture(scope="module")
def tiny_index(subset, default_model, tmp_path_factory) -> Path:
    """A Flat index of the subset's first 40 documents, recording the default model (the server loads it)."""
    from embedkit.index.faiss_index import Index

    corpus = subset.corpus.select(range(DOCUMENTS))
    vectors = default_model.encode_corpus(corpus)
    built = Index.build(vectors, list(corpus["_id"]), "Flat", use_gpu=False, model_settings=default_model.settings)
    return built.save(tmp_path_factory.mktemp("isolation") / "index")


@pytest.fixture(scope="module")
def queries(subset) -> list[str]:
    return list(subset.split_queries("test").values())[:12]


@pytest.fixture(scope="module")
def library(tiny_index, default_model):
    """The library's answer to one query at ``k``: ``Index.search`` of ``encode_queries``, in this process."""
    from embedkit.index.faiss_index import Index

    index = Index.load(tiny_index, use_gpu=False)

    def search(query: str, k: int) -> tuple[list[str], np.ndarray]:
        scores, hits = index.search(default_model.encode_queries([query]), k)
        ids = [doc_id for doc_id in hits[0] if doc_id is not None]
        return ids, scores[0][: len(ids)]

    return search


@pytest.fixture(scope="module")
def server(tiny_index, tmp_path_factory):
    """A 200 ms batching window, so requests sent together really are encoded together."""
    flags = ("--device", "cpu", "--max-wait-ms", "200", "--max-k", str(MAX_K), "--max-queries", "8")
    with running_server(tiny_index, tmp_path_factory.mktemp("isolation-log"), *flags) as served:
        yield served


def good_requests(queries: list[str]) -> list[dict]:
    """12 requests at k = 1, 3, 10 and 100 (more than the index holds); every fourth asks two queries."""
    requests = []
    for i, query in enumerate(queries):
        asked = [query, queries[(i + 5) % len(queries)]] if i % 4 == 3 else [query]
        requests.append({"queries": asked, "k": (1, 3, 10, MAX_K)[i % 4]})
    return requests


def bad_requests(queries: list[str], round_: int) -> list[tuple[dict, str]]:
    """4 malformed requests, each way varied by round: (body, the field the refusal must name)."""
    q = queries[0]
    surrogate = [([q, "\ud800"], "queries[1]"), (["\udfff tail", q], "queries[0]"), ([q, q, "a\ud83d"], "queries[2]")]
    not_a_list = ["protein folding", {"protein": "folding"}, None]
    bad_k = [math.nan, -1, 10**12]
    empty_or_typed = [
        ({"queries": [q, ""]}, "queries[1]"),
        ({"queries": [["nested"]]}, "queries[0]"),
        ({"k": 5}, "queries"),
    ]
    texts, texts_field = surrogate[round_]
    return [
        ({"queries": texts, "k": 5}, texts_field),
        ({"queries": not_a_list[round_], "k": 5}, "queries"),
        ({"queries": [q], "k": bad_k[round_]}, "k"),
        empty_or_typed[round_],
    ]


def post_raw(client, body) -> httpx.Response:
    """The body as Python's json writes it: lone surrogates as \\ud800 escapes, NaN as NaN (both valid input to the
    server's JSON reader), which httpx's own ``json=`` cannot send."""
    content = json.dumps(body).encode("ascii")
    return client.post("/search", content=content, headers={"content-type": "application/json"})


def send_together(url: str, work: list[tuple]) -> list[tuple[tuple, httpx.Response]]:
    """Each request from its own thread and connection, all released at once by a barrier."""
    start = threading.Barrier(len(work))

    def send(item):
        with httpx.Client(base_url=url, timeout=120) as client:
            start.wait(timeout=60)
            return item, post_raw(client, item[2])

    with ThreadPoolExecutor(len(work)) as pool:
        return list(pool.map(send, work))


def test_sixteen_concurrent_requests_four_malformed(server, queries, library):
    good = good_requests(queries)
    expected = [[library(query, request["k"]) for query in request["queries"]] for request in good]
    for round_ in range(ROUNDS):
        bad = bad_requests(queries, round_)
        work = [("good", i, body) for i, body in enumerate(good)] + [
            ("bad", i, body) for i, (body, _) in enumerate(bad)
        ]
        random.Random(round_).shuffle(work)  # the bad ones land between good ones
        before = server.health()["batching"]
        answers = send_together(server.url, work)
        for (kind, i, body), response in answers:
            if kind == "bad":
                field = bad[i][1]
                assert response.status_code in (400, 422), (round_, body, response.status_code, response.text)
                error = response.json()["error"]
                assert error["field"] == field, (round_, body, error)
                assert error["message"] and "internal error" not in error["message"], error
                continue
            assert response.status_code == 200, (round_, body, response.text)
            answer = response.json()
            assert answer["k"] == body["k"] and [r["query"] for r in answer["results"]] == body["queries"]
            for result, (ids, scores) in zip(answer["results"], expected[i], strict=True):
                assert_same_hits(result["hits"], ids, scores)
            if body["k"] == MAX_K:  # above the index's size: the whole index, in the library's order
                assert len(answer["results"][0]["hits"]) == DOCUMENTS
        after = server.health()["batching"]
        # only the 12 good requests reached the model, and they shared batches
        assert after["requests"] - before["requests"] == len(good), (before, after)
        assert after["batches"] - before["batches"] < len(good), (before, after)
        assert after["multi_request_batches"] > before["multi_request_batches"], (before, after)
        assert after["failed_requests"] == before["failed_requests"]


MORE_BAD = [
    # (name, path, body, field)
    ("k true", "/search", {"queries": ["a"], "k": True}, "k"),
    ("k infinite", "/search", {"queries": ["a"], "k": math.inf}, "k"),
    ("k fractional", "/search", {"queries": ["a"], "k": 2.5}, "k"),
    ("k a string", "/search", {"queries": ["a"], "k": "10"}, "k"),
    ("k zero", "/search", {"queries": ["a"], "k": 0}, "k"),
    ("k huge digits", "/search", {"queries": ["a"], "k": 10**400}, "k"),
    ("too many", "/search", {"queries": ["a"] * 9}, "queries"),
    ("blank", "/search", {"queries": ["a", " \t\n"]}, "queries[1]"),
    ("query a number", "/search", {"queries": ["a", 1.5]}, "queries[1]"),
    ("query null", "/search", {"queries": [None]}, "queries[0]"),
    ("unknown field", "/search", {"queries": ["a"], "top_k": 3}, "top_k"),
    ("unknown field with a surrogate", "/search", {"queries": ["a"], "\ud800": 3}, "\\ud800"),
    ("embed a surrogate", "/v1/embeddings", {"input": "x\ud800"}, "input"),
    ("embed a surrogate in a list", "/v1/embeddings", {"input": ["ok", "\udc00"]}, "input[1]"),
    ("embed an object", "/v1/embeddings", {"input": {"a": 1}}, "input"),
    ("embed a surrogate model", "/v1/embeddings", {"input": "x", "model": "\ud800"}, "model"),
    ("embed NaN dimensions", "/v1/embeddings", {"input": "x", "dimensions": math.nan}, "dimensions"),
    ("embed bool dimensions", "/v1/embeddings", {"input": "x", "dimensions": False}, "dimensions"),
    ("embed a surrogate format", "/v1/embeddings", {"input": "x", "encoding_format": "\ud800"}, "encoding_format"),
]


@pytest.mark.parametrize("name, path, body, field", MORE_BAD, ids=[case[0] for case in MORE_BAD])
def test_more_malformed_bodies_name_their_field(server, name, path, body, field):
    content = json.dumps(body).encode("ascii")
    response = httpx.post(server.url + path, content=content, headers={"content-type": "application/json"}, timeout=60)
    assert response.status_code in (400, 422), (name, response.status_code, response.text)
    error = response.json()["error"]
    assert error["field"] == field, (name, error)
    assert error["message"] and "internal error" not in error["message"], (name, error)


def test_a_batch_that_raises_is_retried_request_by_request(tiny_index, default_model, queries, library):
    """Past the HTTP checks (a library caller, or a check we lack): the real engine refuses a lone surrogate inside
    a shared batch, and the batcher retries each request alone, so only that one fails, naming its text."""
    from embedkit.index.faiss_index import Index
    from embedkit.serving.batcher import MicroBatcher, WorkFailed
    from embedkit.serving.bodies import failure
    from embedkit.serving.engine import Engine

    engine = Engine(default_model, Index.load(tiny_index, use_gpu=False))
    poisoned = [queries[0], "\ud800", queries[1]]
    work = [([query], 5) for query in queries[:5]] + [(poisoned, 5)] + [([query], 10) for query in queries[5:8]]

    async def run():
        batcher = MicroBatcher(engine.process, max_batch=64, max_wait_ms=200)
        await batcher.start()
        try:
            answers = await asyncio.gather(*(batcher.submit(texts, k) for texts, k in work), return_exceptions=True)
        finally:
            await batcher.stop()
        return answers, batcher.stats

    answers, stats = asyncio.run(run())
    assert stats.batches == 1 and stats.multi_request_batches == 1  # all nine requests shared one batch
    assert stats.isolated_batches == 1 and stats.failed_requests == 1
    for (texts, k), answer in zip(work, answers):
        if texts is poisoned:
            assert isinstance(answer, WorkFailed) and answer.position == 1, answer
            assert isinstance(answer.error, EmbedkitError)
            refused = failure(answer, [f"queries[{i}]" for i in range(3)], "queries")
            assert (refused.status, refused.field) == (422, "queries[1]") and "surrogate" in refused.message
            continue
        (hits,) = answer
        assert_same_hits(hits, *library(texts[0], k))


SETTINGS = [
    ("max_wait_ms", math.nan, "--max-wait-ms"),
    ("max_wait_ms", math.inf, "--max-wait-ms"),
    ("max_wait_ms", 60_001, "--max-wait-ms"),
    ("max_wait_ms", -1.0, "--max-wait-ms"),
    ("max_batch", 10**9, "--max-batch"),
    ("max_batch", 0, "--max-batch"),
    ("max_batch", 2.5, "--max-batch"),
    ("max_queries", True, "--max-queries"),
    ("max_k", 10**12, "--max-k"),
    ("port", 65536, "--port"),
    ("port", math.nan, "--port"),
    ("max_request_bytes", 1 << 40, "--max-request-bytes"),
    ("snippet_chars", -1, "--snippet-chars"),
]


def test_serve_settings_and_the_batcher_are_finite_and_bounded():
    from embedkit.serving.settings import ServeSettings, parse_bytes

    assert ServeSettings(max_wait_ms=60_000, max_batch=4096, port=0).check()
    for name, value, flag in SETTINGS:
        with pytest.raises(EmbedkitError) as refused:
            ServeSettings(**{name: value}).check()
        assert refused.value.field == flag, (name, value, refused.value)
    with pytest.raises(EmbedkitError, match="at most"):  # float('9'*400) is inf, and int(inf) would raise
        parse_bytes("9" * 400 + "GiB")
    from embedkit.serving.batcher import MicroBatcher

    for max_batch, max_wait_ms, field in ((64, math.nan, "max_wait_ms"), (64, 1e9, "max_wait_ms"), (0, 5, "max_batch")):
        with pytest.raises(EmbedkitError) as refused:  # the library's batcher, used without ServeSettings
            MicroBatcher(list, max_batch, max_wait_ms)
        assert refused.value.field == field


def test_serve_refuses_nan_and_huge_flags_in_one_line(tmp_path):
    """Through the real CLI, before the index is opened (it need not exist): exit 2, one line naming the flag."""
    for flags, named in (
        (["--max-wait-ms", "nan"], "--max-wait-ms"),
        (["--max-wait-ms", "1e9"], "--max-wait-ms"),
        (["--max-batch", "1000000000"], "--max-batch"),
        (["--ef-search", "1000000000000"], "--ef-search"),
    ):
        result = subprocess.run(
            [sys.executable, "-m", "embedkit.cli", "serve", "--index", str(tmp_path / "idx"), *flags],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 2, (flags, result.stderr[-2000:])
        error = result.stderr.strip()
        assert "\n" not in error and named in error and "Traceback" not in error, (flags, error)
