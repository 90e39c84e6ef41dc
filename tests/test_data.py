"""Loading BEIR folders: real SciFact, name resolution, and one-line errors for bad input."""

from __future__ import annotations

import gzip
import json

import pytest
from conftest import write_jsonl, write_qrels

from embedkit import EmbedkitError, load_dataset
from embedkit.data import doc_text, resolve_dataset
from embedkit.data import resolve as resolve_module


def test_scifact_loads_whole(scifact):
    assert len(scifact.corpus) == 5183
    assert len(scifact.qrels("test")) == 300
    assert len(scifact.qrels("train")) == 809
    assert len(scifact.split_queries("test")) == 300
    with gzip.open(scifact.corpus_file, "rt") as handle:
        first = json.loads(handle.readline())
    assert scifact.corpus[0]["_id"] == first["_id"]
    assert doc_text(scifact.corpus[0]) == (first["title"] + " " + first["text"]).strip()


def test_doc_text_joins_like_beir():
    assert doc_text({"title": "T", "text": "body"}) == "T body"
    assert doc_text({"title": "", "text": "body"}) == "body"
    assert doc_text({"text": "body"}) == "body"


def test_name_resolves_through_data_dir_then_env(tmp_path, monkeypatch, scifact_subset):
    monkeypatch.setenv("EMBEDKIT_DATA", str(scifact_subset.parent))
    assert resolve_dataset(scifact_subset.name) == scifact_subset
    other = tmp_path / "mine" / scifact_subset.name
    other.mkdir(parents=True)
    assert resolve_dataset(scifact_subset.name, data_dir=tmp_path / "mine") == other


def test_scifact_resolves_by_name_from_shared(scifact_path):
    assert resolve_dataset("scifact").resolve() == scifact_path


def test_missing_dataset_offline_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBEDKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(resolve_module, "BEIR_URL", "file:///nonexistent/{name}.zip")
    with pytest.raises(EmbedkitError) as err:
        resolve_dataset("no-such-dataset", data_dir=tmp_path)
    message = str(err.value)
    assert "\n" not in message
    assert str(tmp_path / "no-such-dataset") in message and "download" in message


def _folder(tmp_path, corpus_lines: list[str], queries=None, qrels=None):
    folder = tmp_path / "ds"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(line + "\n" for line in corpus_lines))
    write_jsonl(folder / "queries.jsonl", queries or [{"_id": "q1", "text": "query"}])
    write_qrels(folder / "qrels" / "test.tsv", qrels or [("q1", "d1", 1)])
    return load_dataset(folder)


def test_malformed_json_line_names_file_and_line(tmp_path):
    data = _folder(tmp_path, ['{"_id": "d1", "text": "a"}', '{"_id": "d2", "text": '])
    with pytest.raises(EmbedkitError) as err:
        data.corpus  # noqa: B018
    assert err.value.line == 2 and err.value.path.endswith("corpus.jsonl")
    assert str(err.value).startswith(f"{data.corpus_file}:2: malformed JSON")


def test_missing_field_is_named(tmp_path):
    data = _folder(tmp_path, ['{"_id": "d1", "text": "a"}', '{"_id": "d2", "title": "no text"}'])
    with pytest.raises(EmbedkitError, match=r"corpus.jsonl:2: field 'text': missing"):
        data.corpus  # noqa: B018


def test_duplicate_doc_id(tmp_path):
    data = _folder(tmp_path, ['{"_id": "d1", "text": "a"}', '{"_id": "d1", "text": "b"}'])
    with pytest.raises(EmbedkitError, match=r"corpus.jsonl:2: field '_id': duplicate document id 'd1'"):
        data.corpus  # noqa: B018


def test_empty_corpus(tmp_path):
    data = _folder(tmp_path, [])
    with pytest.raises(EmbedkitError, match="corpus is empty"):
        data.corpus  # noqa: B018


def test_missing_qrels_split_lists_available(tmp_path):
    data = _folder(tmp_path, ['{"_id": "d1", "text": "a"}'])
    with pytest.raises(EmbedkitError, match=r"dev.tsv: no qrels for split 'dev' \(available: test\)"):
        data.qrels("dev")


def test_qrels_query_absent_from_queries(tmp_path):
    data = _folder(tmp_path, ['{"_id": "d1", "text": "a"}'], qrels=[("q1", "d1", 1), ("q9", "d1", 1)])
    with pytest.raises(EmbedkitError, match=r"test.tsv:3: field 'query-id': query 'q9' is judged but absent"):
        data.qrels("test")


def test_bad_qrels_grade(tmp_path):
    data = _folder(tmp_path, ['{"_id": "d1", "text": "a"}'])
    (data.path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\thigh\n")
    with pytest.raises(EmbedkitError, match=r"test.tsv:2: field 'score': not an integer"):
        data.qrels("test")


def _bm25(folder):
    from embedkit import evaluate

    return evaluate(None, folder, retriever="bm25")


@pytest.mark.parametrize("layout", ["beir-with-header", "beir-without-header", "trec"])
def test_every_qrels_line_is_a_judgement_whatever_the_layout(scifact_subset, tmp_path, layout):
    """A qrels file without its header keeps its first judgement (it used to be dropped as the header)."""
    import shutil

    folder = tmp_path / "ds"
    shutil.copytree(scifact_subset, folder)
    rows = [line.split("\t") for line in (folder / "qrels" / "test.tsv").read_text().splitlines()[1:]]
    lines = {
        "beir-with-header": ["query-id\tcorpus-id\tscore", *("\t".join(row) for row in rows)],
        "beir-without-header": ["\t".join(row) for row in rows],
        "trec": [f"{q} 0 {d} {s}" for q, d, s in rows],
    }[layout]
    (folder / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n")
    data = load_dataset(folder)
    assert sum(len(judged) for judged in data.qrels("test").values()) == len(rows)
    report = _bm25(data)
    assert report["dataset"]["queries"] == 20
    assert report["metrics"]["ndcg_at_10"] == pytest.approx(
        _bm25(load_dataset(scifact_subset))["metrics"]["ndcg_at_10"]
    )


def test_report_folder_names_keep_unicode_and_differ_by_settings():
    from embedkit.evaluation.pipeline import report_folder_name

    name = report_folder_name("données-santé", "/models/modèle", "Flat", "test", "ab" * 32)
    assert name == "données-santé__modèle__Flat__test__abababab"
    assert report_folder_name("a/b c", "m", "Flat", "test", "0" * 64) == "a-b-c__m__Flat__test__00000000"
    assert report_folder_name("x", "m", "Flat", "test", "1" * 64) != report_folder_name(
        "x", "m", "Flat", "test", "2" * 64
    )
