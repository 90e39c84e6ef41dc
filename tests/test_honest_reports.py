"""Honest reports: judged documents absent from the corpus refused (or scored as misses and recorded), ids compared
after NFC, queries without results listed, one tie rule at retrieval and at scoring, no report inside another
output, and evaluate's numbers finite and bounded. Through the real CLI on tiny BEIR folders, and the library."""

from __future__ import annotations

import json
import math
import re
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli
from test_bad_input import fingerprint

from embedkit.data.beir import load_corpus, load_dataset
from embedkit.data.trec import TIE_BREAK, read_run, write_run
from embedkit.errors import EmbedkitError
from embedkit.evaluation.checks import complete_run
from embedkit.evaluation.metrics import compute_metrics, recall_curve, reciprocal_rank
from embedkit.evaluation.pipeline import EvaluateOptions, evaluate
from embedkit.index.faiss_index import Index
from embedkit.outputs import refuse_inside_other_output
from embedkit.search.bm25 import bm25_searcher
from embedkit.search.fusion import fuse
from embedkit.search.retriever import BM25, Dense, Fusion

NFC = unicodedata.normalize("NFC", "caf\u00e9")
NFD = unicodedata.normalize("NFD", NFC)
assert NFC != NFD


def beir(root: Path, docs: list[tuple[str, str]], queries: list[tuple[str, str]], qrels: list[tuple]) -> Path:
    """A BEIR folder ``root`` with these (id, text) documents and queries and (query, doc, grade) judgements."""
    (root / "qrels").mkdir(parents=True)
    rows = [json.dumps({"_id": i, "title": "", "text": t}, ensure_ascii=False) for i, t in docs]
    (root / "corpus.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    rows = [json.dumps({"_id": i, "text": t}, ensure_ascii=False) for i, t in queries]
    (root / "queries.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    lines = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t{g}" for q, d, g in qrels]
    (root / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


DOCS = [("d1", "alpha beta gamma"), ("d2", "delta epsilon"), ("d3", "zeta eta theta alpha"), ("d4", "omega psi")]
QUERIES = [("q1", "alpha"), ("q2", "delta"), ("q3", "the of and")]  # q3: stop words only, BM25 finds nothing


def one_line_error(result, pattern: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stdout[-2000:], result.stderr[-2000:])
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert pattern in lines[0], lines[0]


def report_of(out: Path) -> tuple[Path, dict]:
    (folder,) = [p for p in out.iterdir() if not p.name.startswith(".")]
    return folder, json.loads((folder / "report.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("honest")


# --- 1. judged documents absent from the corpus ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def cut(work) -> Path:
    """A corpus cut: q2's judged d9 and d10 are not in it."""
    qrels = [("q1", "d1", 1), ("q2", "d2", 1), ("q2", "d9", 1), ("q2", "d10", 2), ("q3", "d3", 1)]
    return beir(work / "cut", DOCS, QUERIES, qrels)


def test_absent_judged_documents_are_refused_by_default(cut, work, tmp_path):
    before = fingerprint(work)
    result = run_cli(["evaluate", "-d", str(cut), "-o", "out", "--retriever", "bm25"], tmp_path, tmp_path / "cache")
    one_line_error(result, "test.tsv: 2 judged documents are not in the corpus (first: d9, d10)")
    assert "--absent-judged miss" in result.stderr
    assert not (tmp_path / "out").exists() and fingerprint(work) == before


def test_absent_judged_as_misses_is_recorded_in_the_report(cut, tmp_path):
    args = ["evaluate", "-d", str(cut), "-o", "out", "--retriever", "bm25", "--absent-judged", "miss"]
    result = run_cli(args, tmp_path, tmp_path / "cache")
    assert result.returncode == 0, result.stderr
    folder, report = report_of(tmp_path / "out")
    absent = report["absent_judged"]
    assert absent == {
        "choice": "miss",
        "documents": 2,
        "judgements": 2,
        "relevant_judgements": 2,
        "first": ["d9", "d10"],
    }
    markdown = (folder / "report.md").read_text(encoding="utf-8")
    assert "--absent-judged miss" in markdown and "`d9`" in markdown
    # scored as misses, exactly as pytrec_eval scores the same run against the same qrels
    data = load_dataset(cut)
    # (a TREC file cannot hold q3, which has no results: the report lists it and scores it 0, as BEIR averages)
    run, without = complete_run(read_run(folder / "run.trec"), data.split_queries("test"))
    assert report["metrics"] == pytest.approx(compute_metrics(data.qrels("test"), run)[0])
    assert without == report["queries_without_results"] == ["q3"]
    per_query = json.loads((folder / "per_query.json").read_text())
    assert per_query["q2"]["recall_at_10"] == pytest.approx(1 / 3)  # d2 found, d9 and d10 missed


def test_absent_judged_in_the_library(cut):
    data = load_dataset(cut)
    with pytest.raises(EmbedkitError, match=r"2 judged documents are not in the corpus.*absent_judged='miss'"):
        evaluate(None, data, "test", "bm25")
    with pytest.raises(EmbedkitError, match="unknown value 'drop'"):
        evaluate(None, data, "test", "bm25", options=EvaluateOptions(absent_judged="drop"))
    report = evaluate(None, data, "test", "bm25", options=EvaluateOptions(absent_judged="miss"))
    assert report["absent_judged"]["documents"] == 2
    complete = beir(cut.parent / "complete", DOCS, QUERIES, [("q1", "d1", 1), ("q2", "d2", 1)])
    report = evaluate(None, load_dataset(complete), "test", "bm25")
    assert report["absent_judged"] == {
        "choice": "refuse",
        "documents": 0,
        "judgements": 0,
        "relevant_judgements": 0,
        "first": [],
    }


def test_a_real_scifact_cut_is_refused_then_scored_as_misses(scifact, tmp_path):
    """The issue's case on real data: relevant documents cut from the corpus lower nDCG silently unless refused."""
    qrels = scifact.qrels("test")
    chosen = list(qrels)[:20]
    judged = {d for q in chosen for d in qrels[q]}
    kept = sorted(judged)[: len(judged) // 2]
    docs = [(row["_id"], row["text"]) for row in scifact.corpus.select(range(200)) if row["_id"] not in kept]
    docs += [(row["_id"], row["text"]) for row in scifact.corpus if row["_id"] in kept]
    absent = judged - {doc for doc, _ in docs}
    queries = [(q, scifact.queries[q]) for q in chosen]
    folder = beir(tmp_path / "scifact-cut", docs, queries, [(q, d, g) for q in chosen for d, g in qrels[q].items()])
    result = run_cli(["evaluate", "-d", str(folder), "-o", "out", "--retriever", "bm25"], tmp_path, tmp_path / "c")
    one_line_error(result, "judged documents are not in the corpus (first: ")
    report = evaluate(None, load_dataset(folder), "test", "bm25", options=EvaluateOptions(absent_judged="miss"))
    assert report["absent_judged"]["documents"] == len(absent) > 0


# --- 2. ids compared after NFC ----------------------------------------------------------------------------------------


def nfc_case(root: Path, corpus_id: str, qrels_id: str, query_id: str = NFC) -> Path:
    """A query judged on one document, its ids spelled in NFC or NFD; the qrels name the query in NFC."""
    docs = [(corpus_id, "alpha beta gamma"), *DOCS[1:]]
    return beir(root, docs, [(query_id, "alpha"), ("q2", "delta")], [(NFC, qrels_id, 1), ("q2", "d2", 1)])


def test_nfd_qrels_against_an_nfc_corpus_score_as_the_all_nfc_run(work, tmp_path):
    same = nfc_case(work / "nfc", NFC, NFC)
    mixed = nfc_case(work / "nfd-qrels", NFC, NFD, query_id=NFD)
    corpus_nfd = nfc_case(work / "nfd-corpus", NFD, NFC)
    scores = []
    for folder in (same, mixed, corpus_nfd):
        out = tmp_path / folder.name
        result = run_cli(["evaluate", "-d", str(folder), "-o", str(out), "--retriever", "bm25"], tmp_path, tmp_path)
        assert result.returncode == 0, result.stderr
        _, report = report_of(out)
        assert report["id_normalisation"] == "NFC"
        assert report["absent_judged"]["documents"] == 0
        scores.append(report["metrics"]["ndcg_at_10"])
    assert scores[0] > 0.9 and scores[1] == scores[0] and scores[2] == scores[0]
    assert load_corpus(corpus_nfd / "corpus.jsonl")["_id"][0] == NFC  # the cached corpus holds the NFC id


@pytest.mark.parametrize(
    ("part", "expected"),
    [
        ("corpus", f"corpus.jsonl:2: field '_id': duplicate document id '{NFC}' (first seen on line 1)"),
        ("queries", f"queries.jsonl:2: field '_id': duplicate query id '{NFC}' (first seen on line 1)"),
        ("qrels", f"test.tsv:3: field 'score': 'q1' / '{NFC}' judged 1 on line 2 and 2 here"),
    ],
)
def test_ids_equal_after_nfc_are_duplicates(part, expected, tmp_path):
    docs, queries = [(NFC, "alpha"), ("d2", "delta")], [("q1", "alpha"), ("q2", "delta")]
    qrels = [("q1", NFC, 1), ("q2", "d2", 1)]
    if part == "corpus":
        docs.insert(1, (NFD, "other"))
    if part == "queries":
        queries = [(NFC, "alpha"), (NFD, "beta")]
        qrels = [(NFC, "d2", 1)]
    if part == "qrels":
        qrels.insert(1, ("q1", NFD, 2))
    folder = beir(tmp_path / "ds", docs, queries, qrels)
    before = fingerprint(folder)
    result = run_cli(["evaluate", "-d", "ds", "-o", "out", "--retriever", "bm25"], tmp_path, tmp_path / "cache")
    one_line_error(result, expected)
    assert fingerprint(folder) == before and not (tmp_path / "out").exists()


def test_run_files_compare_ids_after_nfc(tmp_path):
    path = tmp_path / "run.trec"
    path.write_text(f"q1 Q0 {NFD} 1 2.0 x\nq1 Q0 d2 2 1.0 x\n", encoding="utf-8")
    assert read_run(path) == {"q1": {NFC: 2.0, "d2": 1.0}}
    path.write_text(f"q1 Q0 {NFD} 1 2.0 x\nq1 Q0 {NFC} 2 1.0 x\n", encoding="utf-8")
    with pytest.raises(EmbedkitError, match=rf"run.trec:2: '{NFC}' is listed twice for query 'q1'"):
        read_run(path)


# --- 3. queries without results ---------------------------------------------------------------------------------------


def test_queries_without_results_are_listed_and_scored_zero(work, tmp_path):
    queries = [*QUERIES, ("q4", "")]  # an empty query: nothing to match
    folder = beir(work / "empty", DOCS, queries, [("q1", "d1", 1), ("q2", "d2", 1), ("q3", "d3", 1), ("q4", "d4", 1)])
    result = run_cli(["evaluate", "-d", str(folder), "-o", "out", "--retriever", "bm25"], tmp_path, tmp_path)
    assert result.returncode == 0, result.stderr
    report_folder, report = report_of(tmp_path / "out")
    assert report["queries_without_results"] == ["q3", "q4"]
    assert report["queries_evaluated"] == 4  # averaged over every judged query, the empty ones as 0 (BEIR's way)
    per_query = json.loads((report_folder / "per_query.json").read_text())
    assert per_query["q3"]["ndcg_at_10"] == 0 and per_query["q4"]["ndcg_at_10"] == 0
    assert report["metrics"]["ndcg_at_10"] == pytest.approx(sum(r["ndcg_at_10"] for r in per_query.values()) / 4)
    assert "queries without results (scored 0) | 2: `q3`, `q4`" in (report_folder / "report.md").read_text()


def test_a_run_missing_a_query_counts_it_as_without_results():
    run, without = complete_run({"q1": {"d1": 1.0}, "q3": {}}, {"q1": "a", "q2": "b", "q3": "c"})
    assert run == {"q1": {"d1": 1.0}, "q2": {}, "q3": {}} and without == ["q2", "q3"]


# --- 4. no report inside another command's output ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def index_folder(work) -> Path:
    vectors = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    return Index.build(vectors, [d for d, _ in DOCS]).save(work / "idx")


@pytest.mark.parametrize("inside", ["idx", "idx/sub", "link/sub"])
def test_a_report_inside_an_index_folder_is_refused(inside, index_folder, work, tmp_path):
    (tmp_path / "idx").symlink_to(index_folder)
    (tmp_path / "link").symlink_to(index_folder)
    data = beir(tmp_path / "ds", DOCS, QUERIES, [("q1", "d1", 1)])
    before = fingerprint(work, tmp_path)
    result = run_cli(["evaluate", "-d", str(data), "-o", inside, "--retriever", "bm25"], tmp_path, tmp_path / "c")
    relation = "is" if inside == "idx" else "is inside"
    one_line_error(result, f"{inside}: option '--output': {relation} the embedkit index folder {index_folder}")
    assert fingerprint(work, tmp_path) == before


def test_refuse_inside_other_output_walks_up_the_parents(index_folder, work):
    refuse_inside_other_output(index_folder, "index")  # an index replacing itself is fine
    refuse_inside_other_output(work / "elsewhere" / "deep", "report", holds=True)
    for folder, holds in ((index_folder / "a" / "b", False), (index_folder, True)):
        with pytest.raises(EmbedkitError, match=r"is (inside )?the embedkit index folder"):
            refuse_inside_other_output(folder, "report", holds=holds)
    assert not (index_folder / "a").exists()


# --- 5. one tie rule at retrieval and at scoring ----------------------------------------------------------------------


def test_written_ranks_agree_with_how_pytrec_eval_scores_ties(tmp_path):
    """Three documents tie; trec_eval ranks them by id descending (byte order: 'é' after 'z'), ignoring ranks."""
    run = {"q": {"a": 1.0, "z": 1.0, "\u00e9": 1.0, "b": 0.5}}
    path = tmp_path / "run.trec"
    write_run(path, run)
    lines = [line.split() for line in path.read_text(encoding="utf-8").splitlines()]
    assert [(doc, int(rank)) for _, _, doc, rank, _, _ in lines] == [("\u00e9", 1), ("z", 2), ("a", 3), ("b", 4)]
    for relevant in run["q"]:
        rank = next(int(r) for _, _, doc, r, _, _ in lines if doc == relevant)
        metrics, _ = compute_metrics({"q": {relevant: 1}}, read_run(path))
        assert metrics["ndcg_at_10"] == pytest.approx(1 / math.log2(rank + 1))
        assert metrics["mrr_at_10"] == pytest.approx(1 / rank) == reciprocal_rank({relevant}, run["q"], 10)
        assert metrics["ndcg_at_1"] == (1.0 if rank == 1 else 0.0)


def test_fusion_cuts_ties_as_trec_eval_ranks_them():
    a, b = {"q": {"d1": 2.0, "d2": 1.0}}, {"q": {"d3": 2.0, "d4": 1.0}}
    assert list(fuse([a, b], "rrf", k=3)["q"]) == ["d3", "d1", "d4"]  # d1/d3 and d2/d4 tie: larger id first


def test_a_bm25_report_ranks_tied_documents_by_id_descending(work, tmp_path):
    docs = [("a1", "alpha beta"), ("a2", "alpha beta"), ("a3", "alpha beta"), ("b1", "delta")]
    folder = beir(work / "ties", docs, [("q1", "alpha")], [("q1", "a1", 1)])
    result = run_cli(["evaluate", "-d", str(folder), "-o", "out", "--retriever", "bm25"], tmp_path, tmp_path)
    assert result.returncode == 0, result.stderr
    report_folder, report = report_of(tmp_path / "out")
    assert report["tie_break"] == TIE_BREAK == "score descending, then document id descending (trec_eval)"
    ranks = [line.split()[2] for line in (report_folder / "run.trec").read_text().splitlines()]
    assert ranks == ["a3", "a2", "a1"]
    assert report["metrics"]["ndcg_at_10"] == pytest.approx(0.5) and report["metrics"]["mrr_at_10"] == 1 / 3


# --- 6. numbers finite and bounded ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--bm25-k1", "nan"], "option '--bm25-k1': must be a number, not NaN"),
        (["--bm25-b", "inf"], "option '--bm25-b': must be finite"),
        (["--bm25-k1", "1e300"], "k1"),
        (["--bm25-b", "1.5"], "must be at most 1"),
    ],
)
def test_bm25_settings_out_of_range_exit_2(flags, expected, cut, tmp_path):
    result = run_cli(["evaluate", "-d", str(cut), "-o", "out", "--retriever", "bm25", *flags], tmp_path, tmp_path)
    one_line_error(result, expected)
    assert not (tmp_path / "out").exists()


def test_a_huge_k_returns_the_whole_corpus(cut, tmp_path):
    args = ["evaluate", "-d", str(cut), "-o", "out", "--retriever", "bm25", "--absent-judged", "miss"]
    result = run_cli([*args, "-k", str(10**15)], tmp_path, tmp_path)
    assert result.returncode == 0, result.stderr
    _, report = report_of(tmp_path / "out")
    assert report["retrieval"]["k"] == 10**15 and report["queries_evaluated"] == 3


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: BM25(k1=float("nan")).check(), "k1"),
        (lambda: BM25(b=float("nan")).check(), "b"),
        (lambda: BM25(k1=1e300).check(), "k1"),
        (lambda: Dense(ef_search=10**12).check(), "ef_search"),
        (lambda: Dense(nprobe=2.5).check(), "nprobe"),
        (lambda: Fusion(rrf_k=10**30).check(), "rrf_k"),
        (lambda: Fusion(method="interpolation", weights=[float("nan"), 1.0]).check(), "weights[0]"),
        (lambda: Fusion(method="interpolation", weights=[1e300, 1.0]).check(), "weights[0]"),
        (lambda: recall_curve({"q": {"d": 1}}, {"q": {"d": 1.0}}, cutoffs=(0,)), "cutoffs[0]"),
        (lambda: recall_curve({"q": {"d": 1}}, {"q": {"d": 1.0}}, cutoffs=(10**20,)), "cutoffs[0]"),
        (lambda: reciprocal_rank({"d"}, {"d": 1.0}, float("nan")), "cutoff[0]"),
    ],
)
def test_settings_objects_refuse_non_finite_and_huge_values(make, field):
    with pytest.raises(EmbedkitError, match=re.escape(f"field '{field}'")):
        make()


def test_library_entries_refuse_nan(cut):
    data = load_dataset(cut)
    with pytest.raises(EmbedkitError, match="field 'k1': must be a number, not NaN"):
        bm25_searcher(data, k1=float("nan"))
    options = EvaluateOptions(absent_judged="miss")
    with pytest.raises(EmbedkitError, match="field 'k1': must be a number, not NaN"):
        evaluate(None, data, "test", BM25(k1=float("nan")), options=options)
    with pytest.raises(EmbedkitError, match="field 'k': must be a number, not NaN"):
        evaluate(None, data, "test", "bm25", k=float("nan"), options=options)


def test_compare_bounds_its_numbers(tmp_path):
    from embedkit.evaluation.compare import compare_runs

    for kwargs, field in (({"resamples": 10**12}, "resamples"), ({"seed": -1}, "seed"), ({"top": 1.5}, "top")):
        with pytest.raises(EmbedkitError, match=f"field '{field}'"):
            compare_runs([tmp_path / "a", tmp_path / "b"], **kwargs)
    result = run_cli(["compare", "a", "b", "--resamples", str(10**12)], tmp_path, tmp_path)
    one_line_error(result, "option '--resamples': must be at most")
