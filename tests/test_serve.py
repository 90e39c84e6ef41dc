"""``embedkit serve`` as a real process on a loopback port: /search and /v1/embeddings give the library's answers,
bad requests get 4xx JSON errors naming their field, concurrent requests share batches without changing results,
and the search page works in a real headless Chromium."""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

httpx = pytest.importorskip("httpx", reason="embedkit[serve] is not installed")
pytest.importorskip("fastapi", reason="embedkit[serve] is not installed")

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
LIMITS = {"max_queries": 32, "max_k": 100, "max_request_bytes": 64 * 1024}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class Server:
    url: str
    process: subprocess.Popen
    log: Path

    def post(self, path: str, body, **kwargs) -> httpx.Response:
        return httpx.post(self.url + path, json=body, timeout=60, **kwargs)

    def health(self) -> dict:
        response = httpx.get(self.url + "/health", timeout=10)
        assert response.status_code == 200, response.text
        return response.json()


@pytest.fixture(scope="module")
def subset(scifact_subset):
    from embedkit import load_dataset

    return load_dataset(scifact_subset)


@pytest.fixture(scope="module")
def served_index(subset, default_model, tmp_path_factory) -> Path:
    """A Flat index of the 150-document SciFact subset, recording the default model (the server loads it from there)."""
    from embedkit.index.faiss_index import Index

    vectors = default_model.encode_corpus(subset.corpus)
    built = Index.build(
        vectors, list(subset.corpus["_id"]), "Flat", use_gpu=False, model_settings=default_model.settings
    )
    return built.save(tmp_path_factory.mktemp("serve") / "index")


@contextmanager
def running_server(index: Path, log_dir: Path, *flags: str) -> Iterator[Server]:
    """``python -m embedkit serve --index INDEX FLAGS`` on a free port, once /health answers; stopped (SIGTERM, then
    SIGKILL) when the block ends. test_serve_isolation.py starts its own with this."""
    port = free_port()
    log = log_dir / "server.log"
    command = [sys.executable, "-m", "embedkit", "serve", "--index", str(index), "--port", str(port), *flags]
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env={**os.environ})
    served = Server(f"http://127.0.0.1:{port}", process, log)
    try:
        deadline = time.monotonic() + 180
        while True:
            if process.poll() is not None:
                pytest.fail(f"embedkit serve exited with {process.returncode}: {log.read_text()[-3000:]}")
            try:
                if httpx.get(served.url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"embedkit serve never answered /health: {log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield served
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)


@pytest.fixture(scope="module")
def server(served_index, scifact_subset, tmp_path_factory):
    flags = ["--dataset", str(scifact_subset), "--device", "cpu", "--max-wait-ms", "20"]
    flags += [
        "--max-queries",
        str(LIMITS["max_queries"]),
        "--max-k",
        str(LIMITS["max_k"]),
        "--max-request-bytes",
        "64KiB",
    ]
    with running_server(served_index, tmp_path_factory.mktemp("serve-log"), *flags) as served:
        yield served


@pytest.fixture(scope="module")
def queries(subset) -> list[str]:
    texts = list(subset.split_queries("test").values())
    assert len(texts) == 20
    return texts


@pytest.fixture(scope="module")
def expected(served_index, default_model, queries):
    """The library's answers: ``Index.search`` of ``encode_queries`` in this process."""
    from embedkit.index.faiss_index import Index

    index = Index.load(served_index, use_gpu=False)
    scores, hits = index.search(default_model.encode_queries(queries), 10)
    return scores, hits


def assert_same_hits(hits: list[dict], ids: list[str], scores) -> None:
    assert [hit["id"] for hit in hits] == list(ids)
    np.testing.assert_allclose([hit["score"] for hit in hits], np.asarray(scores)[: len(ids)], rtol=0, atol=1e-6)


def test_search_equals_the_library(server, subset, default_model, queries, expected):
    response = server.post("/search", {"queries": queries, "k": 10})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["k"] == 10 and len(body["results"]) == 20
    scores, hits = expected
    for i, result in enumerate(body["results"]):
        assert result["query"] == queries[i]
        assert_same_hits(result["hits"], hits[i], scores[i])
        for hit in result["hits"]:  # titles and snippets are the dataset's
            row = subset.corpus[subset.row_of[hit["id"]]]
            assert hit["title"] == row["title"]
            assert " ".join(row["text"].split()).startswith(hit["snippet"].removesuffix(" …"))
    health = server.health()
    assert health["status"] == "ok"
    assert health["index"] | {"path": None} == {
        "path": None,
        "factory": "Flat",
        "metric": "ip",
        "count": 150,
        "dim": 384,
        "search_params": {},
        "fields": {},  # no store: nothing to filter by
        "aggregation": None,  # rows are whole documents, not chunks
    }
    assert health["model"]["model"] == default_model.name and health["model"]["dim"] == 384
    assert health["dataset"]["name"] == subset.name
    assert health["limits"]["max_k"] == LIMITS["max_k"]


def test_embeddings_equal_encode_queries(server, default_model, queries):
    model_name = server.health()["model"]["model"]
    single = server.post("/v1/embeddings", {"input": queries[0], "model": model_name})
    assert single.status_code == 200, single.text
    body = single.json()
    assert body["object"] == "list" and body["model"] == model_name
    assert [item["object"] for item in body["data"]] == ["embedding"] and body["data"][0]["index"] == 0
    alone = default_model.encode_queries([queries[0]])
    np.testing.assert_allclose([body["data"][0]["embedding"]], alone, rtol=0, atol=1e-6)
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > 0

    texts = queries[:5]
    together = default_model.encode_queries(texts)
    listed = server.post("/v1/embeddings", {"input": texts, "model": model_name, "dimensions": 384}).json()
    assert [item["index"] for item in listed["data"]] == list(range(5))
    np.testing.assert_allclose([item["embedding"] for item in listed["data"]], together, rtol=0, atol=1e-6)
    assert listed["usage"]["prompt_tokens"] > body["usage"]["prompt_tokens"]

    packed = server.post("/v1/embeddings", {"input": texts, "model": model_name, "encoding_format": "base64"}).json()
    decoded = [np.frombuffer(base64.b64decode(item["embedding"]), dtype="<f4") for item in packed["data"]]
    np.testing.assert_array_equal(decoded, np.asarray([item["embedding"] for item in listed["data"]], np.float32))


def test_the_openai_client_reads_the_embeddings(server, default_model, queries):
    openai = pytest.importorskip("openai", reason="the openai package is not installed")
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    model_name = server.health()["model"]["model"]
    for encoding in ("float", "base64"):  # the client asks for base64 by default and decodes it itself
        extra = {} if encoding == "base64" else {"encoding_format": "float"}
        answer = client.embeddings.create(input=queries[:3], model=model_name, **extra)
        got = np.asarray([item.embedding for item in answer.data])
        np.testing.assert_allclose(got, default_model.encode_queries(queries[:3]), rtol=0, atol=1e-6)
        assert answer.usage.total_tokens > 0
    with pytest.raises(openai.UnprocessableEntityError):
        client.embeddings.create(input="x", model="text-embedding-3-small")


BAD_REQUESTS = [
    # (name, method, path, request keyword arguments, status, field)
    (
        "bad json",
        "POST",
        "/search",
        {"content": b'{"queries": ["a",', "headers": {"content-type": "application/json"}},
        400,
        "body",
    ),
    ("missing field", "POST", "/search", {"json": {"k": 5}}, 422, "queries"),
    ("not a JSON object", "POST", "/search", {"json": [["a"], 5]}, 422, "body"),
    (
        "not JSON content",
        "POST",
        "/search",
        {"content": b'{"queries": ["a"]}', "headers": {"content-type": "text/plain"}},
        422,
        "body",
    ),
    ("queries not a list", "POST", "/search", {"json": {"queries": "protein folding", "k": 5}}, 422, "queries"),
    ("query not a string", "POST", "/search", {"json": {"queries": ["ok", 3]}}, 422, "queries[1]"),
    ("k not an int", "POST", "/search", {"json": {"queries": ["ok"], "k": "ten"}}, 422, "k"),
    ("k too large", "POST", "/search", {"json": {"queries": ["ok"], "k": LIMITS["max_k"] + 1}}, 422, "k"),
    ("k zero", "POST", "/search", {"json": {"queries": ["ok"], "k": 0}}, 422, "k"),
    ("unknown field", "POST", "/search", {"json": {"queries": ["ok"], "kk": 3}}, 422, "kk"),
    ("empty query list", "POST", "/search", {"json": {"queries": [], "k": 5}}, 422, "queries"),
    ("empty string", "POST", "/search", {"json": {"queries": ["fine", "  "], "k": 5}}, 422, "queries[1]"),
    ("too many queries", "POST", "/search", {"json": {"queries": ["q"] * (LIMITS["max_queries"] + 1)}}, 422, "queries"),
    ("huge payload", "POST", "/search", {"json": {"queries": ["x" * 100_000]}}, 413, "body"),
    (
        "huge chunked payload",
        "POST",
        "/search",
        {"content": iter([b'{"queries": ["' + b"y" * 50_000] * 3)},
        413,
        "body",
    ),
    ("unknown route", "GET", "/nowhere", {}, 404, "path"),
    ("wrong method", "GET", "/search", {}, 405, "method"),
    ("dimensions mismatch", "POST", "/v1/embeddings", {"json": {"input": "x", "dimensions": 128}}, 422, "dimensions"),
    ("token arrays", "POST", "/v1/embeddings", {"json": {"input": [[101, 2023]]}}, 422, "input[0]"),
    ("no input", "POST", "/v1/embeddings", {"json": {"model": "x"}}, 422, "input"),
    (
        "other model",
        "POST",
        "/v1/embeddings",
        {"json": {"input": "x", "model": "text-embedding-3-small"}},
        422,
        "model",
    ),
    (
        "bad format",
        "POST",
        "/v1/embeddings",
        {"json": {"input": "x", "encoding_format": "int8"}},
        422,
        "encoding_format",
    ),
]


def test_bad_requests_get_json_errors_naming_the_field(server, queries):
    before = server.health()["batching"]["requests"]
    seen = []
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for name, method, path, kwargs, status, field in BAD_REQUESTS:
            response = client.request(method, path, **kwargs)
            assert response.status_code == status, (name, response.status_code, response.text)
            error = response.json()["error"]
            assert error["field"] == field, (name, error)
            assert error["message"], name
            seen.append(name)
    assert len(seen) >= 10
    health = server.health()  # still answering, and no refused request reached the model
    assert health["batching"]["requests"] == before
    again = server.post("/search", {"queries": queries[:1], "k": 3})
    assert again.status_code == 200 and len(again.json()["results"][0]["hits"]) == 3


def test_concurrent_requests_share_batches_and_match_sequential(server, queries):
    with httpx.Client(base_url=server.url, timeout=60) as client:
        sequential = [client.post("/search", json={"queries": [q], "k": 10}).json()["results"][0] for q in queries]
    before = server.health()["batching"]
    work = queries * 2  # 40 requests over 16 threads, released together
    start = threading.Barrier(16)
    local = threading.local()

    def ask(query: str) -> dict:
        if not hasattr(local, "client"):
            local.client = httpx.Client(base_url=server.url, timeout=60)
            start.wait(timeout=60)
        response = local.client.post("/search", json={"queries": [query], "k": 10})
        assert response.status_code == 200, response.text
        return response.json()["results"][0]

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(ask, work))
    for answer, query in zip(answers, work):
        alone = sequential[queries.index(query)]
        assert_same_hits(answer["hits"], [hit["id"] for hit in alone["hits"]], [hit["score"] for hit in alone["hits"]])
    after = server.health()["batching"]
    assert after["requests"] - before["requests"] == len(work)
    assert after["multi_request_batches"] > before["multi_request_batches"], after
    assert after["batches"] - before["batches"] < len(work)  # fewer encoder calls than requests


class Devtools:
    """The few Chrome DevTools protocol calls a test needs, over one page's websocket."""

    def __init__(self, socket) -> None:
        self.socket, self.next_id = socket, 0

    def __call__(self, method: str, **params):
        self.next_id += 1
        self.socket.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv(timeout=60))
            if message.get("id") == self.next_id:
                assert "error" not in message, message
                return message["result"]

    def evaluate(self, expression: str):
        return self(("Runtime.evaluate"), expression=expression, returnByValue=True)["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 60):
        deadline = time.monotonic() + timeout
        while not (value := self.evaluate(expression)):
            assert time.monotonic() < deadline, f"never true in the page: {expression}"
            time.sleep(0.1)
        return value

    def type(self, text: str) -> None:
        for char in text:
            self("Input.dispatchKeyEvent", type="keyDown", text=char, key=char, unmodifiedText=char)
            self("Input.dispatchKeyEvent", type="keyUp", key=char)

    def press_enter(self) -> None:
        keys = {"key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13, "nativeVirtualKeyCode": 13}
        self("Input.dispatchKeyEvent", type="keyDown", text="\r", **keys)
        self("Input.dispatchKeyEvent", type="keyUp", **keys)


READ_HITS = """JSON.stringify([...document.querySelectorAll('#results li.hit')].map(li => ({
  id: li.dataset.id, title: li.querySelector('.title').textContent,
  snippet: (li.querySelector('.snippet') || {}).textContent || ''})))"""


@contextmanager
def chromium_page(url: str, tmp_path: Path) -> Iterator[Devtools]:
    """A headless Chromium showing ``url``, driven over the DevTools protocol; closed when the block ends."""
    from websockets.sync.client import connect

    profile = tmp_path / "profile"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
    flags += ["--disable-component-update", "--disable-sync", "--remote-debugging-port=0", "--window-size=1000,1100"]
    with open(tmp_path / "chromium.log", "wb") as log:
        browser = subprocess.Popen([CHROMIUM, *flags, f"--user-data-dir={profile}", url], stdout=log, stderr=log)
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.is_file() and port_file.read_text().strip()):
            log_tail = (tmp_path / "chromium.log").read_text()[-2000:]
            assert browser.poll() is None and time.monotonic() < deadline, log_tail
            time.sleep(0.1)
        port = port_file.read_text().split()[0]
        pages = [t for t in httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json() if t["type"] == "page"]
        with connect(pages[0]["webSocketDebuggerUrl"], max_size=None, open_timeout=30) as socket:
            page = Devtools(socket)
            page.wait_for("document.readyState === 'complete' && !document.getElementById('about').textContent"
                          ".includes('loading')")  # fmt: skip
            yield page
    finally:
        browser.terminate()
        browser.wait(timeout=30)


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="no /usr/bin/chromium (make test installs Debian's)")
def test_search_page_in_headless_chromium(server, queries, tmp_path):
    with chromium_page(server.url + "/", tmp_path) as page:
        about = "document.getElementById('about').textContent"
        assert "150 documents" in page.evaluate(about)
        page.evaluate("document.getElementById('q').focus()")
        page.type(queries[3])
        assert page.evaluate("document.getElementById('q').value") == queries[3]
        page.press_enter()
        page.wait_for(f"document.getElementById('status').dataset.query === {json.dumps(queries[3])}")
        shown = json.loads(page.evaluate(READ_HITS))
        shot = tmp_path / "serve-page.png"
        shot.write_bytes(base64.b64decode(page("Page.captureScreenshot", format="png")["data"]))
        print(f"search page screenshot: {shot}")
    api = server.post("/search", {"queries": [queries[3]], "k": 10}).json()["results"][0]["hits"]
    assert [hit["id"] for hit in shown] == [hit["id"] for hit in api]
    assert [hit["title"] for hit in shown] == [hit["title"] or hit["id"] for hit in api]
    assert shown[0]["snippet"] == api[0]["snippet"] and shown[0]["snippet"]
    assert shot.stat().st_size > 10_000


def test_bad_flags_and_missing_fastapi_are_one_line(tmp_path, monkeypatch, capsys):
    """Checked before any file is opened: the index folder need not exist for these."""
    from embedkit.cli import main

    for flags, named in (
        (["--port", "70000"], "--port"),
        (["--max-request-bytes", "1XB"], "--max-request-bytes"),
        (["--max-k", "0"], "--max-k"),
    ):
        with pytest.raises(SystemExit) as exit_:
            main(["serve", "--index", str(tmp_path / "idx"), *flags])
        assert exit_.value.code == 2
        error = capsys.readouterr().err.strip()
        assert error.startswith("embedkit: error:") and named in error and "\n" not in error
    from embedkit.serving.settings import is_loopback, parse_bytes

    assert [is_loopback(host) for host in ("127.0.0.1", "::1", "localhost", "0.0.0.0", "10.1.2.3")] == [1, 1, 1, 0, 0]
    assert parse_bytes("1MiB") == 1 << 20 and parse_bytes("64KiB") == 65536 and parse_bytes("1000") == 1000
    monkeypatch.setitem(sys.modules, "fastapi", None)  # 'import fastapi' now raises ImportError
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--index", str(tmp_path / "idx")])
    assert exit_.value.code == 2
    assert "embedkit[serve]" in capsys.readouterr().err


def test_a_bad_flag_is_refused_before_torch_or_fastapi_load(tmp_path):
    probe = (
        "import json, sys\n"
        "from embedkit.cli import main\n"
        "try:\n"
        f"    main(['serve', '--index', {str(tmp_path)!r}, '--max-batch', '0'])\n"
        "except SystemExit as exit_:\n"
        "    assert exit_.code == 2, exit_.code\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "--max-batch" in result.stderr
    imported = set(json.loads(result.stdout.splitlines()[-1]))
    assert "embedkit.serving.settings" in imported
    assert not {"torch", "faiss", "fastapi", "uvicorn", "sentence_transformers"} & imported
