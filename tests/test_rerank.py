"""The second stage: a real cross-encoder (trained here by ``embedkit train --objective cross-encoder``) reranking
real first stages on a SciFact slice and scoring mined negatives as a teacher, checked against sentence-transformers'
own ``CrossEncoder.predict``; and every training loss fed straight from a mined file."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
import torch
from conftest import TEST_CACHE, embedkit_here

from embedkit import compute_metrics, load_dataset
from embedkit.data.trec import read_run, write_run


def embedkit(*args) -> subprocess.CompletedProcess:
    """The CLI in this process (``conftest.embedkit_here``): a fresh interpreter costs about 10 s a call here."""
    return embedkit_here(*args)


@pytest.fixture(scope="module")
def slice_data(train_slice):
    return load_dataset(train_slice)


@pytest.fixture(scope="module")
def dense_run(default_model, slice_data, tmp_path_factory):
    """The default model's top 30 for the slice's 20 test queries, as a TREC run file."""
    from embedkit.search import Dense, DenseRetrieval

    run = DenseRetrieval(default_model, Dense(), TEST_CACHE).search(slice_data, slice_data.split_queries("test"), 30)
    path = tmp_path_factory.mktemp("runs") / "dense.trec"
    write_run(path, run, tag="dense")
    return path


@pytest.fixture(scope="module")
def predict(cross_encoder):
    """sentence-transformers' own ``CrossEncoder.predict`` with the trained cross-encoder (float32)."""
    from sentence_transformers.cross_encoder import CrossEncoder

    model = CrossEncoder(str(cross_encoder))

    def scores(pairs, activation=torch.nn.Sigmoid) -> np.ndarray:
        return model.predict(pairs, activation_fn=activation(), batch_size=32)

    return scores


def test_trained_cross_encoder_loads_and_keeps_its_best_dev_checkpoint(cross_encoder, slice_mined_far):
    """``train --objective cross-encoder``: loads with ``CrossEncoder(path)``; the dev queries (seeded) are out of
    the training rows; the weights kept are the best step's by dev nDCG@10; the card shows the curve."""
    from sentence_transformers.cross_encoder import CrossEncoder

    from embedkit.train.data import dev_query_ids

    assert CrossEncoder(str(cross_encoder)).num_labels == 1
    record = json.loads((cross_encoder / "embedkit_training.json").read_text())
    mined = [json.loads(line) for line in slice_mined_far.read_text().splitlines()]
    mined = [r for r in mined if len(r["negatives"]) >= 3]  # drop_short_examples: rows short of 3 are left out
    assert record["dev_queries"] == dev_query_ids([r["query_id"] for r in mined], 0.2, record["config"]["seed"])
    trained = [r for r in mined if r["query_id"] not in set(record["dev_queries"])]
    assert record["examples"] == len(trained) and record["training_rows"] == 4 * len(trained)  # BCE: 1 + 3 pairs
    curve = record["dev_curve"]
    steps = record["steps"]
    every = record["config"]["eval_steps"]
    assert [point["step"] for point in curve] == sorted({*range(every, steps + 1, every), steps})  # and the last step
    best = max(curve, key=lambda point: point["ndcg_at_10"])
    assert record["best_checkpoint"] == {"step": best["step"], "ndcg_at_10": pytest.approx(best["ndcg_at_10"])}
    card = (cross_encoder / "README.md").read_text()
    assert f"the weights saved are step {best['step']}'s" in card and f"| {best['step']} |" in card


def test_rerank_cli_scores_are_cross_encoder_predict(
    cross_encoder, predict, dense_run, slice_data, train_slice, tmp_path
):
    """Acceptance 1: scores equal ``CrossEncoder.predict`` on the same pairs (1e-5); the top ``depth`` is ordered by
    them; the rest keep their first-stage order below; no query or hit is dropped."""
    output = tmp_path / "reranked.trec"
    result = embedkit(
        "rerank", "--run", dense_run, "--dataset", train_slice, "--model", cross_encoder, "-o", output, "--depth", 10
    )
    assert result.returncode == 0, result.stderr
    first, reranked = read_run(dense_run), read_run(output)
    assert set(reranked) == set(first) and len(first) == 20
    queries = slice_data.split_queries("test")
    top = {q: sorted(hits, key=hits.get, reverse=True)[:10] for q, hits in first.items()}
    pairs = [(queries[q], slice_data.documents([d])[d]) for q in sorted(top) for d in top[q]]
    expected = dict(zip([(q, d) for q in sorted(top) for d in top[q]], predict(pairs, torch.nn.Identity).tolist()))
    for query_id, hits in first.items():
        ranked = sorted(reranked[query_id], key=reranked[query_id].get, reverse=True)
        assert set(ranked) == set(hits)
        head = ranked[:10]
        assert set(head) == set(top[query_id])
        for doc_id in head:
            assert reranked[query_id][doc_id] == pytest.approx(expected[query_id, doc_id], abs=1e-5)
        assert [expected[query_id, d] for d in head] == sorted((expected[query_id, d] for d in head), reverse=True)
        tail = [d for d in sorted(hits, key=hits.get, reverse=True) if d not in set(top[query_id])]
        assert ranked[10:] == tail
    meta = json.loads(output.with_name("reranked.trec.meta.json").read_text())
    assert meta["reranker"]["depth"] == 10 and meta["pairs_scored"] == 200 and meta["queries"] == 20


def test_bfloat16_on_the_cpu_scores_as_autocast_does(cross_encoder, slice_data):
    """``dtype="bfloat16"`` on the CPU is sentence-transformers' ``CrossEncoder`` under autocast, its head in float32
    as embedkit keeps it (float32 on a CPU without bf16 instructions); the dtype that ran is recorded."""
    from sentence_transformers.cross_encoder import CrossEncoder

    from embedkit.models.device import cpu_has_bfloat16
    from embedkit.reranking.reranker import CrossEncoderReranker, keep_head_in_float32
    from embedkit.reranking.settings import RerankSettings

    queries = list(slice_data.split_queries("test").values())[:3]
    documents = list(slice_data.documents([row["_id"] for row in slice_data.corpus.select(range(5))]).values())
    pairs = [(query, document) for query in queries for document in documents]
    reference = CrossEncoder(str(cross_encoder), device="cpu")
    keep_head_in_float32(reference)
    dtype = "bfloat16" if cpu_has_bfloat16() else "float32"
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bfloat16"):
        expected = reference.predict(pairs, activation_fn=torch.nn.Identity(), batch_size=32)
    reranker = CrossEncoderReranker(RerankSettings(str(cross_encoder), dtype="bfloat16", device="cpu"))
    scores = reranker.score(pairs)
    assert reranker.describe()["dtype"] == dtype
    # the same products; only the batches (hence padding) may differ
    assert np.abs(scores - expected).max() < 1e-3 * float(np.ptp(expected)), (scores, expected)


def test_first_stage_weight_interpolates_min_max_scores(
    cross_encoder, predict, dense_run, slice_data, train_slice, tmp_path
):
    """``--first-stage-weight 0.3``: each re-scored hit carries 0.7 x min-max(logit) + 0.3 x min-max(first-stage
    score) over its query's top ``depth``, computed here from ``CrossEncoder.predict``; the tail keeps its order."""
    output = tmp_path / "fused.trec"
    args = ["--dataset", train_slice, "--model", cross_encoder, "-o", output, "--depth", 10]
    result = embedkit("rerank", "--run", dense_run, *args, "--first-stage-weight", 0.3)
    assert result.returncode == 0, result.stderr
    first, fused = read_run(dense_run), read_run(output)
    queries = slice_data.split_queries("test")
    moved = 0
    for query_id, hits in first.items():
        top = sorted(hits, key=hits.get, reverse=True)[:10]
        logits = predict([(queries[query_id], slice_data.documents([d])[d]) for d in top], torch.nn.Identity)

        def scaled(values):
            values = np.asarray(values, dtype=np.float64)
            return (values - values.min()) / (values.max() - values.min())

        expected = 0.7 * scaled(logits) + 0.3 * scaled([hits[d] for d in top])
        assert [fused[query_id][d] for d in top] == pytest.approx(expected.tolist(), abs=1e-5)
        order = sorted(fused[query_id], key=fused[query_id].get, reverse=True)
        assert order[10:] == sorted(hits, key=hits.get, reverse=True)[10:]
        moved += order[:10] != top and order[:10] != [top[i] for i in np.argsort(-logits, kind="stable")]
    meta = json.loads(output.with_name("fused.trec.meta.json").read_text())
    assert meta["reranker"]["first_stage_weight"] == 0.3
    assert moved > 0, "the interpolated order should differ from both the first stage's and the logits' on some query"


def test_evaluate_reranks_bm25_and_reports_both_stages(cross_encoder, slice_data, train_slice, tmp_path):
    """``evaluate --reranker`` over BM25: the final metrics are those of the library's ``rerank`` of the same BM25 run
    (pytrec_eval-exact), the first stage's metrics are kept beside them, and the reranker's settings recorded."""
    from embedkit import EvaluateOptions, RerankSettings, evaluate, rerank
    from embedkit.search import bm25_searcher

    settings = RerankSettings(str(cross_encoder), depth=20)
    options = EvaluateOptions(reranker=settings)
    report = evaluate(None, train_slice, "test", "bm25", output=tmp_path, options=options)
    queries, qrels = slice_data.split_queries("test"), slice_data.qrels("test")
    first = bm25_searcher(slice_data).search(queries, report["retrieval"]["k"])
    reranked = rerank(first, slice_data, str(cross_encoder), depth=20)
    assert report["metrics"] == pytest.approx(compute_metrics(qrels, reranked)[0])
    assert report["component_metrics"]["first stage"]["ndcg_at_10"] == pytest.approx(
        compute_metrics(qrels, first)[0]["ndcg_at_10"]
    )
    assert report["reranker"]["depth"] == 20 and report["reranker"]["weights_sha256"]
    assert report["metrics"]["ndcg_at_10"] != report["component_metrics"]["first stage"]["ndcg_at_10"]


def _run_with_unknown_doc(path):
    path.write_text("q1 Q0 not-a-doc 1 3.0 x\n")
    return path


@pytest.mark.parametrize(
    "case",
    [
        "bi-encoder as reranker",
        "unknown document",
        "output not a run",
        "depth without reranker",
        "depth zero",
        "weight above one",
    ],
)
def test_rerank_refusals_are_one_line(case, cross_encoder, dense_run, train_slice, tmp_path):
    """Bad input gets one line naming the flag or the file and line, and exit 2; nothing is written."""
    output = tmp_path / "out.trec"
    common = ["--dataset", train_slice, "-o", output]
    if case == "bi-encoder as reranker":
        from embedkit.models.reference import resolve_model

        bi_encoder = resolve_model(None).path
        args, needle = ["rerank", "--run", dense_run, "--model", bi_encoder, *common], "--model"
    elif case == "unknown document":
        run = _run_with_unknown_doc(tmp_path / "bad.trec")
        args, needle = ["rerank", "--run", run, "--model", cross_encoder, *common], "bad.trec:1"
    elif case == "output not a run":
        output.write_text("my notes\n")
        args, needle = ["rerank", "--run", dense_run, "--model", cross_encoder, *common], "out.trec"
    elif case == "depth without reranker":
        args, needle = ["evaluate", "--dataset", train_slice, "--rerank-depth", 5, "-o", tmp_path], "--rerank-depth"
    elif case == "weight above one":
        args = ["evaluate", "--dataset", train_slice, "--reranker", cross_encoder, "--rerank-first-stage-weight", 1.5]
        args, needle = [*args, "-o", tmp_path], "--rerank-first-stage-weight"
    else:
        args, needle = ["rerank", "--run", dense_run, "--model", cross_encoder, *common, "--depth", 0], "--depth"
    result = embedkit(*args)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and needle in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    if case == "output not a run":
        assert output.read_text() == "my notes\n"
    else:
        assert not output.exists()


# The teacher: ``embedkit rescore`` and ``mine --teacher``.

RATIO = 0.99  # an exact copy ties the positive; a genuine negative the teacher ranks below it is kept


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def with_copies(slice_mined_far, tmp_path_factory):
    """The mined file with the first negative of 5 records replaced by a copy of the positive's text (what a
    duplicate document in a corpus gives); the sidecar is kept, so it is still a mined file."""
    folder = tmp_path_factory.mktemp("copies")
    records = read_jsonl(slice_mined_far)
    for record in [r for r in records if len(r["negatives"]) >= 2][:5]:
        record["negatives"][0] = record["positive"]
        record["negative_ids"][0] = f"copy-of-{record['positive_id']}"
    path = folder / "mined.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    meta = json.loads(slice_mined_far.with_name(slice_mined_far.name + ".meta.json").read_text())
    path.with_name("mined.jsonl.meta.json").write_text(json.dumps(meta))
    return path


def test_teacher_filter_drops_a_copy_of_the_positive_and_keeps_genuine_negatives(
    with_copies, cross_encoder, predict, tmp_path
):
    """Acceptance 5: ``--max-teacher-ratio`` drops each copy of the positive, keeps the genuine negatives (by the
    teacher's own probabilities, from ``CrossEncoder.predict``), writes the teacher's logits as ``scores``, and
    records how many it dropped."""
    output = tmp_path / "scored.jsonl"
    result = embedkit(
        "rescore", "--mined", with_copies, "--teacher", cross_encoder, "--max-teacher-ratio", RATIO, "-o", output
    )
    assert result.returncode == 0, result.stderr
    source, scored = read_jsonl(with_copies), read_jsonl(output)
    assert [r["query_id"] for r in scored] == [r["query_id"] for r in source]
    copies = 0
    for before, after in zip(source, scored):
        texts = [before["positive"], *before["negatives"]]
        probability = predict([(before["query"], text) for text in texts])
        expected = [
            i for i, p in enumerate(probability[1:]) if p <= RATIO * probability[0] and texts[i + 1] != texts[0]
        ]
        copies += len(texts) > 1 and texts[1] == texts[0]
        assert after["negative_ids"] == [before["negative_ids"][i] for i in expected]
        assert after["teacher_dropped"] == len(before["negatives"]) - len(expected)
        assert len(after["scores"]) == 1 + len(expected)
        assert 1 / (1 + np.exp(-after["scores"][0])) == pytest.approx(probability[0], abs=1e-5)
    meta = json.loads(output.with_name("scored.jsonl.meta.json").read_text())
    dropped = sum(r["teacher_dropped"] for r in scored)
    assert copies == 5 and meta["teacher_dropped_negatives"] == dropped
    genuine = sum(len(r["negatives"]) for r in source) - copies
    print(f"genuine negatives {genuine}, dropped {dropped - copies}")
    assert dropped - copies <= 0.15 * genuine  # the rule, not a blanket cut: genuine negatives stay
    assert meta["teacher"]["weights_sha256"] and meta["mining"]["max_teacher_ratio"] == RATIO
    assert f"dropped {dropped} negatives" in result.stdout


def test_rescore_refuses_a_file_mine_did_not_write(cross_encoder, tmp_path):
    plain = tmp_path / "plain.jsonl"
    plain.write_text('{"query": "q", "positive": "p", "negatives": ["n"]}\n')
    result = embedkit("rescore", "--mined", plain, "--teacher", cross_encoder, "-o", tmp_path / "out.jsonl")
    assert result.returncode == 2 and "plain.jsonl" in result.stderr and "embedkit mine" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.fixture(scope="module")
def teacher_mined(cross_encoder, train_slice, tmp_path_factory):
    """``embedkit mine --teacher``: negatives mined and scored by the cross-encoder in one command."""
    output = tmp_path_factory.mktemp("teacher-mined") / "mined.jsonl"
    result = embedkit(
        "mine", "--dataset", train_slice, "--range-min", 3, "--range-max", 40, "--num-negatives", 3,
        "--teacher", cross_encoder, "--cache-dir", TEST_CACHE, "-o", output,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return output


def test_mine_with_a_teacher_writes_its_logits(teacher_mined, predict):
    records = read_jsonl(teacher_mined)
    first = records[0]
    pairs = [(first["query"], text) for text in (first["positive"], *first["negatives"])]
    assert first["scores"] == pytest.approx(predict(pairs, torch.nn.Identity).tolist(), abs=1e-5)
    meta = json.loads(teacher_mined.with_name("mined.jsonl.meta.json").read_text())
    assert meta["teacher"]["model"] and meta["teacher_dropped_negatives"] == 0  # no ratio: nothing dropped


@pytest.mark.parametrize(
    ("objective", "loss", "file"),
    [
        ("supervised", "infonce", "mined"),
        ("supervised", "distill", "mined"),  # the mining model's positive_score / negative_scores as the teacher
        ("supervised", "distill", "teacher"),  # the cross-encoder's scores
        ("cross-encoder", "bce", "mined"),
        ("cross-encoder", "listnet", "mined"),
        ("cross-encoder", "lambdaloss", "teacher"),
    ],
)
def test_a_mined_file_trains_every_loss(objective, loss, file, slice_mined, teacher_mined, tmp_path):
    """A file ``embedkit mine`` wrote goes straight into ``embedkit train`` for every loss: two real steps, and the
    output loads with the library that reads it."""
    data = slice_mined if file == "mined" else teacher_mined
    output = tmp_path / "model"
    temperature = ["--teacher-temperature", 2.0] if loss == "distill" else []
    result = embedkit(
        "train", "--objective", objective, "--loss", loss, "--data", data, "--num-negatives", 2,
        "--max-steps", 2, "--batch-size", 4, "--max-length", 48, "--drop-short-examples", *temperature, "-o", output,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    record = json.loads((output / "embedkit_training.json").read_text())
    assert record["steps"] == 2 and all(np.isfinite(record["loss_history"] or [record["train_loss"]]))
    if loss == "distill":
        assert record["config"]["teacher_temperature"] == 2.0
        assert (record["teacher"] == "scores") == (file == "teacher") and record["teacher"]
    if objective == "cross-encoder":
        from sentence_transformers.cross_encoder import CrossEncoder

        assert CrossEncoder(str(output)).predict([("a query", "a document")]).shape == (1,)
    else:
        from embedkit import load_model

        assert load_model(output).encode_queries(["a query"]).shape == (1, 384)
