"""``embedkit index add|upsert|delete|compact|check`` and ``search --filter`` on a SciFact index: the commands change
the folder as the library does, and bad input is one line and exit 2."""

from __future__ import annotations

import json

import pytest
from conftest import embedkit_here as embedkit
from conftest import write_jsonl

from embedkit.data.trec import read_run
from embedkit.index.live import LiveIndex


@pytest.fixture(scope="module")
def index_folder(scifact_embeddings, tmp_path_factory):
    folder = tmp_path_factory.mktemp("live-cli") / "idx"
    result = embedkit("index", "-e", scifact_embeddings.path, "-o", folder)
    assert result.returncode == 0, result.stderr
    return folder


def test_the_commands_change_search_and_check_an_index(index_folder, scifact, scifact_subset, tmp_path):
    rows = [dict(scifact.corpus[i]) for i in range(3)]
    new = [{"_id": f"new-{i}", "title": row["title"], "text": row["text"], "metadata": {"year": 2020 + i}}
           for i, row in enumerate(rows)]  # fmt: skip
    corpus = write_jsonl(tmp_path / "new.jsonl", new)
    added = embedkit("index", "add", "-i", index_folder, "--corpus", corpus, "--fields", "year:int,source:text")
    assert added.returncode == 0, added.stderr
    again = embedkit("index", "add", "-i", index_folder, "--corpus", corpus)
    assert again.returncode == 2 and "'new-0' is already in the index; use upsert" in again.stderr
    (tmp_path / "gone.txt").write_text("new-2\n" + rows[0]["_id"] + "\n")
    assert embedkit("index", "delete", "-i", index_folder, "--ids", tmp_path / "gone.txt").returncode == 0
    queries = write_jsonl(tmp_path / "q.jsonl", [{"_id": "q", "text": rows[1]["text"]}])
    run_file = tmp_path / "run.trec"
    found = embedkit("search", "-i", index_folder, "--queries", queries, "-o", run_file, "-k", "5",
                     "--filter", "year >= 2020")  # fmt: skip
    assert found.returncode == 0, found.stderr
    assert list(read_run(run_file)["q"]) == ["new-1", "new-0"]  # only the documents with a year, best first
    live = LiveIndex.load_live(index_folder)
    assert len(live) == 5183 + 3 - 2 and live.document("new-1")["metadata"] == {"year": 2021}
    same = embedkit("index", "upsert", "-i", index_folder, "--dataset", scifact_subset)  # SciFact's texts again
    cut = {json.loads(line)["_id"] for line in (scifact_subset / "corpus.jsonl").read_text().splitlines()}
    back = rows[0]["_id"] in cut  # the deleted document comes back if the cut holds it
    assert same.returncode == 0 and f"{len(live) + back} in" in same.stdout, same.stderr
    assert embedkit("index", "compact", "-i", index_folder).returncode == 0
    checked = embedkit("index", "check", "-i", index_folder)
    report = json.loads(checked.stdout)
    assert checked.returncode == 0 and report["ok"] and report["compaction"]["removed"] > 2  # 2 deletes + upserts


@pytest.mark.parametrize(
    "line,message",
    [
        ('{"_id": "a", "text": "x", "metadata": [1]}', "new.jsonl:2: field 'metadata': expected a JSON object"),
        ('{"_id": "a", "text": "x", "metadata": {"year": "2020"}}', "field 'year': '2020' is not an int"),
        ('{"_id": "b", "text": "x"}', "duplicate document id 'b' (first seen on line 1)"),
        ('{"_id": "a", "text": 5}', "new.jsonl:2: field 'text'"),
    ],
)
def test_bad_documents_are_one_line_and_exit_2(index_folder, tmp_path, line, message):
    path = tmp_path / "new.jsonl"
    path.write_text('{"_id": "b", "text": "fine"}\n' + line + "\n")
    result = embedkit("index", "upsert", "-i", index_folder, "--corpus", path)
    assert result.returncode == 2 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_bad_flags_are_one_line_and_exit_2(index_folder, tmp_path):
    cases = [
        (["index", "add", "-i", index_folder], "--corpus FILE, --dataset NAME or --embeddings FOLDER (one of them)"),
        (["index", "-e", index_folder, "check", "-i", index_folder], "--embeddings does nothing"),
        (["index", "--factory", "HNSW32", "add", "-i", index_folder], "--factory does nothing with 'index add'"),
        (["search", "-i", index_folder, "--queries", tmp_path / "q.jsonl", "-o", tmp_path / "r", "--filter", "year >"],
         "option '--filter': not a filter expression"),
        (["index", "add", "-i", tmp_path / "nothing", "--ids", tmp_path / "x"], "No such option"),
    ]  # fmt: skip
    (tmp_path / "q.jsonl").write_text('{"_id": "q", "text": "x"}\n')
    for args, message in cases:
        result = embedkit(*args)
        assert result.returncode == 2 and message in result.stderr, (args, result.stderr)
