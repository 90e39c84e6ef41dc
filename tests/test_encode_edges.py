"""The edges of encoding, mining and training (issue 39): the library trusts no input, numbers are finite and
bounded, encode workers with other settings are refused, and a refused training run leaves nothing behind.

Each case goes through the real library or the real CLI (``python -m embedkit.cli``) with the packaged
all-MiniLM-L6-v2 on a few documents.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from conftest import run_cli
from test_bad_input import dataset, fingerprint, litter

from embedkit import EmbedkitError, load_model
from embedkit.encode.writer import encode_to_folder
from embedkit.pretrain import PretrainConfig
from embedkit.reranking.reranker import check_pairs
from embedkit.reranking.settings import RerankSettings
from embedkit.train import TrainConfig
from embedkit.train.mining import MiningSettings, mine_hard_negatives

NAN, INF = math.nan, math.inf
DOCS = [{"_id": f"d{i}", "title": "", "text": f"document number {i} about topic {i % 3}"} for i in range(6)]


def one_error(result) -> str:
    """The single stderr line of a refused command (exit 2, no traceback)."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and len(lines) == 1, result.stderr[-3000:]
    assert lines[0].startswith("embedkit: error: ")
    return lines[0]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("edges-cache")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("edges-corpus") / "corpus.jsonl"
    path.write_text("".join(json.dumps(doc) + "\n" for doc in DOCS))
    return path


# --- 1. the Python API refuses what it cannot encode ----------------------------------------------------------------


@pytest.mark.parametrize(
    "call, expected",
    [
        (lambda m: m.encode_queries("a string"), r"field 'queries': must be a list, not a single str"),
        (lambda m: m.encode_queries(["fine", "\ud800"]), r"field 'queries\[1\]': holds a lone surrogate"),
        (lambda m: m.encode_queries(["fine", 7]), r"field 'queries\[1\]': must be a string, not int"),
        (lambda m: m.encode_documents("a string"), r"field 'documents': must be a list, not a single str"),
        (lambda m: m.encode_corpus("a string"), r"field 'corpus': must be a list, not a single str"),
        (lambda m: m.encode_corpus([{"text": "x"}, {"text": "\udfff"}]), r"field 'corpus\[1\]\.text': holds a lone"),
        (lambda m: m.encode_corpus([{"title": 3, "text": "x"}]), r"field 'corpus\[0\]\.title': must be a string"),
        (lambda m: m.encode_corpus([None]), r"field 'corpus\[0\]': must be a dict"),
        (lambda m: m.encode(["x"], prompt="\ud800"), r"field 'prompt': holds a lone surrogate"),
    ],
)
def test_encode_entry_points_refuse_bad_texts(default_model, call, expected):
    with pytest.raises(EmbedkitError, match=expected):
        call(default_model)


def test_an_empty_list_is_an_empty_array(default_model):
    for call in (default_model.encode_queries, default_model.encode_documents, default_model.encode_corpus):
        out = call([])
        assert out.shape == (0, 384) and out.dtype == np.float32
    both = default_model.encode_corpus(["plain text", {"title": "plain", "text": "text"}])
    assert np.allclose(both[0], both[1], atol=1e-6)  # a string is the document's text, as title + " " + text


def test_reranker_pairs_and_settings_are_checked():
    assert check_pairs([("q", "d")]) == [("q", "d")]
    with pytest.raises(EmbedkitError, match=r"field 'pairs': must be a list, not a single str"):
        check_pairs("qd")
    with pytest.raises(EmbedkitError, match=r"field 'pairs\[1\]': must be a \(query, document\) pair"):
        check_pairs([("q", "d"), "qd"])
    with pytest.raises(EmbedkitError, match=r"field 'pairs\[0\]\[1\]': holds a lone surrogate"):
        check_pairs([("q", "\ud800")])
    with pytest.raises(EmbedkitError, match=r"field 'first_stage_weight': must be a number, not NaN"):
        RerankSettings("m", first_stage_weight=NAN).check()
    with pytest.raises(EmbedkitError, match=r"option '--batch-size': must be at most"):
        RerankSettings("m", batch_size=10**12).check("--")


# --- 2. --max-length past the model's positions ---------------------------------------------------------------------


def test_max_length_past_the_positions_is_refused_in_the_library():
    with pytest.raises(EmbedkitError, match=r"field 'max_length': must be at most 512, .* not 513"):
        load_model(max_length=513, device="cpu")
    with pytest.raises(EmbedkitError, match=r"field 'max_length': must be a number, not NaN"):
        load_model(max_length=NAN, device="cpu")
    assert load_model(max_length=512, device="cpu").max_length == 512


def test_max_length_past_the_positions_is_one_line_in_the_cli(corpus, cache, tmp_path):
    result = run_cli(["encode", "--corpus", str(corpus), "-o", "emb", "--max-length", "100000"], tmp_path, cache)
    assert re.search(r"field 'max_length': must be at most 512", one_error(result))
    assert not (tmp_path / "emb").exists()


# --- 3. encode workers share one folder's settings ------------------------------------------------------------------


def test_a_worker_with_another_shard_size_is_refused_and_the_first_survives(corpus, cache, tmp_path):
    base = ["encode", "--corpus", str(corpus), "-o", "emb", "--num-workers", "2"]
    first = run_cli([*base, "--worker-id", "0", "--shard-size", "2"], tmp_path, cache)
    assert first.returncode == 0, first.stderr[-2000:]
    before = fingerprint(tmp_path / "emb")
    other = run_cli([*base, "--worker-id", "1", "--shard-size", "3"], tmp_path, cache)
    line = one_error(other)
    assert "differs in: shard_size" in line and "shard_size 2 there, 3 here" in line
    assert fingerprint(tmp_path / "emb") == before and litter(tmp_path) == []
    prompt = run_cli([*base, "--worker-id", "1", "--shard-size", "2", "--query-prompt", "q: "], tmp_path, cache)
    assert "differs in: settings.query_prompt" in one_error(prompt)
    same = run_cli([*base, "--worker-id", "1", "--shard-size", "2"], tmp_path, cache)
    assert same.returncode == 0 and "6 documents in 3 shard files" in same.stdout, same.stderr[-2000:]


def test_a_start_that_fails_before_any_shard_leaves_nothing(default_model, tmp_path):
    bad = [{"_id": "a b", "text": "x"}, *DOCS]
    with pytest.raises(EmbedkitError, match=r"_id of document 0"):
        encode_to_folder(default_model, bad, tmp_path / "emb", shard_size=2)
    assert not (tmp_path / "emb").exists()
    done = encode_to_folder(default_model, DOCS, tmp_path / "emb", shard_size=2)  # the corrected call is not refused
    assert done.complete and done.encoded_shards == 3


# --- 4. mining: finite, bounded, and a truthful summary -------------------------------------------------------------


@pytest.mark.parametrize(
    "settings, field",
    [
        ({"margin": NAN}, "margin"),
        ({"margin": INF}, "margin"),
        ({"relative_margin": NAN}, "relative_margin"),
        ({"range_min": 0}, "range_min"),
        ({"num_negatives": 0}, "num_negatives"),
        ({"seed": -1}, "seed"),
        ({"max_teacher_ratio": NAN, "teacher": "t"}, "max_teacher_ratio"),
    ],
)
def test_mining_settings_refuse_non_finite_and_nonsense(settings, field):
    with pytest.raises(EmbedkitError, match=rf"field '{field}'"):
        MiningSettings(**settings).check()


def test_mine_nan_margin_is_refused_and_huge_windows_are_harmless(default_model, cache, tmp_path):
    from embedkit import load_dataset

    data = dataset(tmp_path)
    records = mine_hard_negatives(
        default_model,
        load_dataset(data),
        MiningSettings(split="test", range_min=1, range_max=10**12, num_negatives=10**9, sampling="random"),
        cache_dir=tmp_path / "cache",
    )
    assert len(records) == 2 and all(len(r["negatives"]) <= 2 for r in records)  # 3 documents, less the positive
    base = ["mine", "-d", str(data), "-o", "mined.jsonl", "--split", "test", "--range-min", "1"]
    nan = run_cli([*base, "--margin", "nan"], tmp_path, cache)
    assert re.search(r"'-?-?margin'", one_error(nan)) and not (tmp_path / "mined.jsonl").exists()
    mined = run_cli([*base, "--range-max", str(10**12)], tmp_path, cache)
    assert mined.returncode == 0, mined.stderr[-2000:]
    written = [json.loads(line) for line in (tmp_path / "mined.jsonl").read_text().splitlines()]
    total = sum(len(row["negatives"]) for row in written)
    assert f"2 examples written to mined.jsonl: 0 with 8 negatives, 2 with fewer ({total} negatives in all)" in (
        mined.stdout
    )
    assert json.loads((tmp_path / "mined.jsonl.meta.json").read_text())["examples_short_of_negatives"] == 2


# --- 5. a refused training run leaves nothing behind ----------------------------------------------------------------


def test_a_refused_train_leaves_nothing_and_the_corrected_command_runs(cache, tmp_path):
    good = [{"query": f"query {i}", "positive": f"document {i}", "negatives": [f"other {i}"]} for i in range(4)]
    (tmp_path / "good.jsonl").write_text("".join(json.dumps(row) + "\n" for row in good))
    (tmp_path / "bad.jsonl").write_text(json.dumps(good[0]) + '\n{"query": "q", "positive": 3}\n')
    args = ["train", "-o", "out/model", "--max-steps", "1", "--batch-size", "2", "--save-steps", "1"]
    bad_data = run_cli([*args, "--data", "bad.jsonl"], tmp_path, cache)
    assert re.search(r"bad\.jsonl:2: field 'positive'", one_error(bad_data))
    too_long = run_cli([*args, "--data", "good.jsonl", "--max-length", "4096"], tmp_path, cache)
    assert re.search(r"field 'max_length': must be at most 512", one_error(too_long))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl", "good.jsonl"]  # no out/, no .partial
    fixed = run_cli([*args, "--data", "good.jsonl", "--max-length", "32"], tmp_path, cache)
    assert fixed.returncode == 0, fixed.stderr[-3000:]
    assert (tmp_path / "out" / "model" / "embedkit_training.json").is_file()
    assert not (tmp_path / "out" / "model.partial").exists() and litter(tmp_path) == []


def test_a_refused_pretrain_leaves_nothing(cache, tmp_path):
    (tmp_path / "texts.txt").write_text("one text\nanother text\n")
    args = ["pretrain", "--data", "texts.txt", "-o", "enc", "--max-steps", "1", "--max-length", "4096"]
    assert re.search(r"field 'max_length': must be at most 512", one_error(run_cli(args, tmp_path, cache)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["texts.txt"]


# --- 6. settings objects refuse NaN, infinity and nonsense ----------------------------------------------------------


@pytest.mark.parametrize(
    "settings, field",
    [
        ({"learning_rate": NAN}, "learning_rate"),
        ({"learning_rate": 1e6}, "learning_rate"),
        ({"epochs": INF}, "epochs"),
        ({"epochs": 0}, "epochs"),
        ({"batch_size": 0}, "batch_size"),
        ({"batch_size": 10**12}, "batch_size"),
        ({"warmup_ratio": NAN}, "warmup_ratio"),
        ({"weight_decay": -INF}, "weight_decay"),
        ({"seed": 2**40}, "seed"),
        ({"max_steps": 10**15}, "max_steps"),
        ({"temperature": NAN}, "temperature"),
        ({"temperature": 1e-30}, "temperature"),
        ({"teacher_temperature": INF}, "teacher_temperature"),
        ({"num_negatives": 10**9}, "num_negatives"),
        ({"dev_fraction": NAN, "dataset": "d"}, "dev_fraction"),
        ({"matryoshka_dims": [64, 0]}, r"matryoshka_dims\[1\]"),
    ],
)
def test_train_config_refuses(settings, field):
    config = TrainConfig(output="out", data="x.jsonl", **settings)
    with pytest.raises(EmbedkitError, match=rf"field '{field}'"):
        config.check()


@pytest.mark.parametrize(
    "settings, field",
    [
        ({"encoder_mask_ratio": NAN}, "encoder_mask_ratio"),
        ({"decoder_mask_ratio": INF}, "decoder_mask_ratio"),
        ({"head_learning_rate": NAN}, "head_learning_rate"),
        ({"bow_weight": INF}, "bow_weight"),
        ({"learning_rate": NAN}, "learning_rate"),
        ({"warmup_ratio": 1.0}, "warmup_ratio"),
    ],
)
def test_pretrain_config_refuses(settings, field):
    config = PretrainConfig(output="out", data="x.txt", **settings)
    with pytest.raises(EmbedkitError, match=rf"field '{field}'"):
        config.check()
