"""``embedkit serve``'s document endpoints on a real server: POST /documents adds (the served model encodes), GET and
DELETE /documents/{id}, /search with a filter; the answers equal the library's on the same folder, searches keep
being answered while documents are written, and bad requests are 4xx naming their field."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from test_serve import CHROMIUM, READ_HITS, chromium_page, running_server

httpx = pytest.importorskip("httpx", reason="embedkit[serve] is not installed")


@pytest.fixture(scope="module")
def live_server(scifact_subset, default_model, tmp_path_factory):
    from embedkit import load_dataset
    from embedkit.index import Index, LiveIndex

    subset = load_dataset(scifact_subset)
    vectors = default_model.encode_corpus(subset.corpus)
    folder = tmp_path_factory.mktemp("serve-docs") / "index"
    Index.build(vectors, list(subset.corpus["_id"]), "Flat", use_gpu=False,
                model_settings=default_model.settings).save(folder)  # fmt: skip
    LiveIndex.open(folder, fields={"year": "int"}).store.close()
    with running_server(folder, tmp_path_factory.mktemp("serve-docs-log"), "--device", "cpu") as served:
        yield served, folder, subset


def test_documents_are_added_read_searched_and_deleted(live_server, default_model):
    from embedkit.index import LiveIndex

    server, folder, subset = live_server
    rows = [dict(subset.corpus[i]) for i in range(40)]
    body = {"ids": [f"new-{i}" for i in range(40)], "texts": [row["text"] for row in rows],
            "metadata": [{"year": 2000 + i} for i in range(40)]}  # fmt: skip
    query = {"queries": [rows[3]["text"][:200]], "k": 5}
    with ThreadPoolExecutor(4) as pool:  # searches go on while the 40 documents are encoded and written
        searches = [pool.submit(server.post, "/search", query) for _ in range(12)]
        added = server.post("/documents", body)
        assert all(search.result().status_code == 200 for search in searches)
    assert added.status_code == 200 and added.json()["added"] == 40, added.text
    again = server.post("/documents", {"ids": ["new-0"], "texts": ["x"]})
    assert again.status_code == 409 and again.json()["error"]["field"] == "ids"
    found = httpx.get(server.url + "/documents/new-7", timeout=10)
    assert found.status_code == 200 and found.json()["metadata"] == {"year": 2007}
    assert httpx.get(server.url + "/documents/nothing", timeout=10).status_code == 404
    assert httpx.delete(server.url + "/documents/new-3", timeout=30).status_code == 200
    assert httpx.delete(server.url + "/documents/new-3", timeout=30).status_code == 404
    filtered = server.post("/search", {**query, "filter": "year >= 2030"})
    assert filtered.status_code == 200, filtered.text
    hits = filtered.json()["results"][0]["hits"]
    live = LiveIndex.load_live(folder)  # the library, on the folder the server changed
    scores, ids = live.search(default_model.encode_queries(query["queries"]), 5, filter="year >= 2030")
    assert [hit["id"] for hit in hits] == ids[0] and set(ids[0]) <= {f"new-{i}" for i in range(30, 40)}
    np.testing.assert_allclose([hit["score"] for hit in hits], scores[0], atol=1e-6)
    assert live.check()["ok"] and len(live) == len(subset.corpus) + 39


@pytest.mark.parametrize(
    "path,body,field,status",
    [
        ("/search", {"queries": ["x"], "filter": "month > 3"}, "filter", 422),
        ("/search", {"queries": ["x"], "filter": 3}, "filter", 422),
        ("/documents", {"ids": ["a", "b"], "texts": ["x"]}, "texts", 422),
        ("/documents", {"ids": ["a"], "texts": ["x"], "metadata": [{"year": "1999"}]}, "metadata", 422),
        ("/documents", {"ids": ["a"], "texts": ["x"], "upsert": "yes"}, "upsert", 422),
    ],
)
def test_bad_document_requests_name_their_field(live_server, path, body, field, status):
    response = live_server[0].post(path, body)
    assert response.status_code == status and response.json()["error"]["field"] == field, response.text


@pytest.mark.slow  # a browser start: the API's filter is checked by the tests above in make test
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="no /usr/bin/chromium (make test installs Debian's)")
def test_the_search_page_filters_by_a_declared_field(live_server, tmp_path):
    server, _, subset = live_server
    text = dict(subset.corpus[5])["text"][:100].strip()
    server.post("/documents", {"ids": ["page-1"], "texts": [text], "metadata": [{"year": 1990}], "upsert": True})
    with chromium_page(server.url + "/", tmp_path) as page:
        assert "year (int)" in page.evaluate("document.getElementById('filter').placeholder")
        page.evaluate("document.getElementById('filter').value = 'year < 1995'")
        page.evaluate(f"document.getElementById('q').value = {json.dumps(text)}")
        page.evaluate("document.getElementById('q').focus()")
        page.press_enter()
        page.wait_for(f"document.getElementById('status').dataset.query === {json.dumps(text)}")
        shown = json.loads(page.evaluate(READ_HITS))
    assert [hit["id"] for hit in shown] == ["page-1"]  # the one document the filter keeps, not its twin in the corpus
