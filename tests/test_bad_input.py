"""Bad input through the real CLI: exit 2, one line on stderr naming the file, line and field (or the flag), no
traceback, nothing changed on disk and no temporary file left.

Every case runs ``python -m embedkit.cli`` as a subprocess in a fresh folder built for it; the folder and the shared
read-only assets (a small SciFact cut, its embeddings, its index, two reports) are fingerprinted before and after.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import cli_env, run_cli

from embedkit.storage import is_litter

DOCS = [
    {"_id": "d1", "title": "Alpha", "text": "alpha beta gamma"},
    {"_id": "d2", "title": "Delta", "text": "delta epsilon"},
    {"_id": "d3", "title": "", "text": "zeta eta theta alpha"},
]
QUERIES = [{"_id": "q1", "text": "alpha"}, {"_id": "q2", "text": "delta"}]
QRELS = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\n"


def fingerprint(*roots: Path) -> dict[str, tuple]:
    """Every path under ``roots`` with its type, mode and content hash."""
    found = {}
    for root in roots:
        for path in [root, *sorted(root.rglob("*"))]:
            info = path.lstat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
            found[str(path)] = (info.st_mode, digest)
    return found


def litter(root: Path) -> list[str]:
    return [str(p) for p in root.rglob("*") if is_litter(p.name) or p.name.endswith(".tmp")]


def dataset(
    work: Path,
    corpus: bytes | list[str] | None = None,
    queries: bytes | list[str] | None = None,
    qrels: str | bytes | None = None,
    corpus_name: str = "corpus.jsonl",
) -> Path:
    """A small BEIR folder ``work/ds``; each part is the valid default unless given (as lines or raw bytes)."""
    folder = work / "ds"
    (folder / "qrels").mkdir(parents=True)

    def raw(value: bytes | list[str] | None, rows: list[dict]) -> bytes:
        if isinstance(value, bytes):
            return value
        lines = value if value is not None else [json.dumps(row) for row in rows]
        return ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")

    (folder / corpus_name).write_bytes(raw(corpus, DOCS))
    (folder / "queries.jsonl").write_bytes(raw(queries, QUERIES))
    text = QRELS if qrels is None else qrels
    (folder / "qrels" / "test.tsv").write_bytes(text if isinstance(text, bytes) else text.encode())
    return folder


def unwritable_folder(work: Path) -> Path | None:
    """A folder this process may not write in: a mode 555 one, or (as root, who ignores modes) a read-only one."""
    if os.geteuid() != 0:
        folder = work / "read-only"
        folder.mkdir()
        folder.chmod(0o555)
        return folder
    for candidate in (Path("/proc/sys"), Path("/sys")):
        if candidate.is_dir() and not os.access(candidate, os.W_OK):
            return candidate
    return None


def thesis(work: Path) -> Path:
    (work / "thesis").mkdir()
    (work / "thesis" / "ch1.tex").write_text("\\chapter{One}")
    return work / "thesis"


def copy(source: Path, work: Path) -> Path:
    target = work / source.name
    shutil.copytree(source, target)
    return target


def corrupt(path: Path, truncate: bool) -> None:
    data = bytearray(path.read_bytes())
    if truncate:
        path.write_bytes(bytes(data[: len(data) // 2]))
    else:  # one float of the first vector, same size: only the checksum can tell
        data[-384 * 4 * 3] ^= 0x40
        path.write_bytes(bytes(data))


def _without_checksums(index: Path) -> None:
    meta = json.loads((index / "meta.json").read_text())
    meta.pop("files", None)
    (index / "meta.json").write_text(json.dumps(meta))


def _truncated_index(work: Path, a: dict, checksums: bool) -> list[str]:
    index = copy(a["idx"], work)
    if not checksums:
        _without_checksums(index)
    corrupt(index / "index", truncate=True)
    return ["search", "-i", "idx", "-d", str(a["data"]), "-o", "run.trec"]


def _bad_docid(work: Path, a: dict) -> list[str]:
    index = copy(a["idx"], work)
    _without_checksums(index)
    with open(index / "docid", "a") as handle:
        handle.write("extra-id\n")
    return ["search", "-i", "idx", "-d", str(a["data"]), "-o", "run.trec"]


def _broken_meta(work: Path, a: dict) -> list[str]:
    index = copy(a["idx"], work)
    (index / "meta.json").write_text('{"format": "embedkit.index/1",')
    return ["search", "-i", "idx", "-d", str(a["data"]), "-o", "run.trec"]


def _shard(work: Path, a: dict, truncate: bool) -> list[str]:
    emb = copy(a["emb"], work)
    corrupt(emb / "shard-00000.npy", truncate)
    return ["index", "-e", "emb", "-o", "idx"]


def _broken_model(work: Path, a: dict) -> list[str]:
    folder = work / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "bert", "hidden_size": ')
    return ["evaluate", "-d", str(a["data"]), "-o", "out", "--model", "model"]


def _bm25(ds: Path, *extra: str) -> list[str]:
    return ["evaluate", "-d", str(ds), "-o", "out", "--retriever", "bm25", *extra]


def _mined(work: Path, sidecar: bool = False) -> Path:
    """Two training rows (query, positive, one negative, with their ids), as ``embedkit mine`` writes them."""
    negative = {"negative_ids": [DOCS[2]["_id"]], "negatives": [DOCS[2]["text"]]}
    rows = [{"query_id": q["_id"], "query": q["text"], "positive_id": d["_id"], "positive": d["text"], **negative}
            for q, d in zip(QUERIES, DOCS)]  # fmt: skip
    (work / "mined.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    if sidecar:
        from embedkit.train.mined import MINED_FORMAT

        (work / "mined.jsonl.meta.json").write_text(json.dumps({"format": MINED_FORMAT}))
    return work / "mined.jsonl"


def _run(work: Path, stranger: str) -> Path:
    """A TREC run over the mined queries whose second line names ``stranger`` as a document."""
    lines = ["q1 Q0 d1 1 2.0 t", f"q1 Q0 {stranger} 2 1.5 t", "q2 Q0 d2 1 3.0 t"]
    (work / "run.trec").write_text("\n".join(lines) + "\n")
    return work / "run.trec"


def _gzip(work: Path, name: str, lines: list[str], truncate: bool = False) -> Path:
    data = gzip.compress(("\n".join(lines) + "\n").encode())
    return dataset(work, corpus=data[: len(data) // 2] if truncate else data, corpus_name=name)


def _doc(**fields) -> str:
    return json.dumps({"_id": "d9", "title": "", "text": "x", **fields})


Setup = Callable[[Path, dict], list[str] | None]
CASES: list[tuple[str, Setup, str]] = [
    # outputs that would lose or mix data
    (
        "index-into-user-folder",
        lambda w, a: (thesis(w), ["index", "-e", str(a["emb"]), "-o", "thesis"])[1],
        r"thesis: option '--output': holds files embedkit did not write",
    ),
    (
        "index-into-embeddings",
        lambda w, a: (copy(a["emb"], w), ["index", "-e", "emb", "-o", "emb"])[1],
        r"emb: option '--output': holds embedkit embeddings, not an index",
    ),
    (
        "index-into-cwd",
        lambda w, a: ((w / "notes.txt").write_text("x"), ["index", "-e", str(a["emb"]), "-o", "."])[1],
        r"\.: option '--output': holds files embedkit did not write",
    ),
    (
        "index-over-index",
        lambda w, a: (copy(a["idx"], w), ["index", "-e", str(a["emb"]), "-o", "idx"])[1],
        r"idx: option '--output': .*pass --overwrite",
    ),
    (
        "index-onto-file",
        lambda w, a: ((w / "out").write_text("x"), ["index", "-e", str(a["emb"]), "-o", "out"])[1],
        r"out: option '--output': exists and is a file",
    ),
    (
        "index-unwritable",
        lambda w, a: ["index", "-e", str(a["emb"]), "-o", str(a["ro"] / "idx")],
        r"option '--output': no permission",
    ),
    (
        "encode-into-user-folder",
        lambda w, a: (thesis(w), ["encode", "-d", str(a["data"]), "-o", "thesis"])[1],
        r"thesis: option '--output': holds files that are not embedkit embeddings",
    ),
    (
        "encode-onto-file",
        lambda w, a: ((w / "out").write_text("x"), ["encode", "-d", str(a["data"]), "-o", "out"])[1],
        r"out: option '--output': exists and is not a folder",
    ),
    (
        "encode-unwritable",
        lambda w, a: ["encode", "-d", str(a["data"]), "-o", str(a["ro"] / "emb")],
        r"option '--output': no permission",
    ),
    (
        "evaluate-onto-file",
        lambda w, a: ((w / "out").write_text("x"), _bm25(a["data"]))[1],
        r"out: option '--output': is a file",
    ),
    (
        "evaluate-unwritable",
        lambda w, a: ["evaluate", "-d", str(a["data"]), "-o", str(a["ro"] / "runs")],
        r"option '--output': no permission",
    ),
    (
        "search-over-user-file",
        lambda w, a: (
            (w / "notes.txt").write_text("x"),
            ["search", "-i", str(a["idx"]), "-d", str(a["data"]), "-o", "notes.txt", "--overwrite"],
        )[1],
        r"notes\.txt: option '--output': exists and is not an embedkit TREC run",
    ),
    (
        "search-over-run",
        lambda w, a: (
            (w / "run.trec").write_text("q1 Q0 d1 1 1.0 x\n"),
            ["search", "-i", str(a["idx"]), "-d", str(a["data"]), "-o", "run.trec"],
        )[1],
        r"run\.trec: option '--output': holds an earlier TREC run; pass --overwrite",
    ),
    (
        "search-unwritable",
        lambda w, a: ["search", "-i", str(a["idx"]), "-d", str(a["data"]), "-o", str(a["ro"] / "run.trec")],
        r"option '--output': no permission",
    ),
    (
        "compare-into-user-folder",
        lambda w, a: (thesis(w), ["compare", *map(str, a["reports"]), "-o", "thesis"])[1],
        r"thesis: option '--output': holds files embedkit did not write",
    ),
    (
        "mine-over-user-file",
        lambda w, a: ((w / "notes.txt").write_text("x"), ["mine", "-d", str(a["data"]), "-o", "notes.txt"])[1],
        r"notes\.txt: option '--output': exists and is not an embedkit mined-negatives file",
    ),
    (
        "mine-unknown-candidates",
        lambda w, a: ["mine", "-d", str(a["data"]), "-o", "mined.jsonl", "--candidates", "bm25"],
        r"option '--candidates': unknown value 'bm25' \(choose from dense, hybrid\)",
    ),
    (
        "train-into-user-folder",
        lambda w, a: (thesis(w), ["train", "-d", str(a["data"]), "-o", "thesis", "--max-steps", "1"])[1],
        r"thesis: option '--output': holds files embedkit did not write",
    ),
    (
        "csr-k-above-the-latents",
        lambda w, a: ["train", "--data", str(_mined(w)), "-o", "m", "--objective", "csr", "--csr-k", "1537"],
        r"field 'csr_k': must be at most the auto-encoder's 1536 latents \(4 x the model's 384 dimensions\), not 1537",
    ),
    (
        "splade-from-a-model-without-an-mlm-head",
        lambda w, a: ["train", "--data", str(_mined(w)), "-o", "m", "--objective", "splade"],
        r"field 'model': .* has no MLM head for SPLADE to start from: train one first with the encoder frozen",
    ),
    (
        "teacher-run-with-ids-not-in-the-corpus",
        lambda w, a: ["rescore", "--mined", str(_mined(w, True)), "--teacher-run", str(_run(w, "nope")), "-d",
                      str(dataset(w)), "-o", "scored.jsonl"],
        r"run\.trec:2: field 'doc id': 'nope' is not in the dataset's corpus",
    ),
    (
        "pretrain-into-user-folder",
        lambda w, a: (thesis(w), ["pretrain", "-d", str(a["data"]), "-o", "thesis", "--max-steps", "1"])[1],
        r"thesis: option '--output': holds files embedkit did not write",
    ),
    # data files
    (
        "corpus-not-utf8",
        lambda w, a: _bm25(dataset(w, corpus=json.dumps(DOCS[0]).encode() + b'\n{"_id": "d2", "text": "caf\xe9"}\n')),
        r"ds/corpus\.jsonl:2: not UTF-8",
    ),
    (
        "corpus-gzip-named-jsonl",
        lambda w, a: _bm25(_gzip(w, "corpus.jsonl", [json.dumps(d) for d in DOCS])),
        r"ds/corpus\.jsonl: gzip-compressed data in a file not named \.gz",
    ),
    (
        "corpus-gz-not-gzip",
        lambda w, a: _bm25(dataset(w, corpus_name="corpus.jsonl.gz")),
        r"ds/corpus\.jsonl\.gz: named \.gz but not gzip",
    ),
    (
        "corpus-gzip-truncated",
        lambda w, a: _bm25(_gzip(w, "corpus.jsonl.gz", [json.dumps(d) for d in DOCS] * 50, truncate=True)),
        r"ds/corpus\.jsonl\.gz:\d+: truncated or corrupt gzip",
    ),
    (
        "corpus-malformed-json",
        lambda w, a: _bm25(dataset(w, corpus=[json.dumps(DOCS[0]), '{"_id": "d2", "text": '])),
        r"ds/corpus\.jsonl:2: malformed JSON",
    ),
    (
        "corpus-not-an-object",
        lambda w, a: _bm25(dataset(w, corpus=[json.dumps(DOCS[0]), '["d2", "text"]'])),
        r"ds/corpus\.jsonl:2: expected a JSON object",
    ),
    (
        "corpus-missing-id",
        lambda w, a: _bm25(dataset(w, corpus=[json.dumps(DOCS[0]), '{"text": "x"}'])),
        r"ds/corpus\.jsonl:2: field '_id': missing",
    ),
    (
        "corpus-id-with-space",
        lambda w, a: _bm25(dataset(w, corpus=[json.dumps(DOCS[0]), _doc(_id="d 2")])),
        r"ds/corpus\.jsonl:2: field '_id': contains SPACE",
    ),
    (
        "corpus-id-with-newline",
        lambda w, a: _bm25(dataset(w, corpus=[json.dumps(DOCS[0]), _doc(_id="d\n2")])),
        r"ds/corpus\.jsonl:2: field '_id': contains",
    ),
    (
        "corpus-empty-id",
        lambda w, a: _bm25(dataset(w, corpus=[json.dumps(DOCS[0]), _doc(_id="")])),
        r"ds/corpus\.jsonl:2: field '_id': must not be empty",
    ),
    (
        "corpus-duplicate-id",
        lambda w, a: _bm25(dataset(w, corpus=[json.dumps(DOCS[0]), json.dumps(DOCS[0])])),
        r"ds/corpus\.jsonl:2: field '_id': duplicate document id 'd1' \(first seen on line 1\)",
    ),
    ("corpus-empty", lambda w, a: _bm25(dataset(w, corpus=b"\n\n")), r"ds/corpus\.jsonl: the corpus is empty"),
    (
        "corpus-text-not-string",
        lambda w, a: _bm25(dataset(w, corpus=[json.dumps(DOCS[0]), _doc(text=5)])),
        r"ds/corpus\.jsonl:2: field 'text': must be a string",
    ),
    (
        "corpus-lone-surrogate",
        lambda w, a: _bm25(dataset(w, corpus=[json.dumps(DOCS[0]), _doc(text="a\ud800b")])),
        r"ds/corpus\.jsonl:2: field 'text': holds a lone surrogate",
    ),
    (
        "query-text-null",
        lambda w, a: _bm25(dataset(w, queries=['{"_id": "q1", "text": null}'])),
        r"ds/queries\.jsonl:1: field 'text': must be a string",
    ),
    (
        "query-duplicate-id",
        lambda w, a: _bm25(dataset(w, queries=[json.dumps(QUERIES[0])] * 2)),
        r"ds/queries\.jsonl:2: field '_id': duplicate query id",
    ),
    (
        "queries-file-empty",
        lambda w, a: (
            (w / "q.jsonl").write_text("\n"),
            ["search", "-i", str(a["idx"]), "--queries", "q.jsonl", "-o", "r.trec"],
        )[1],
        r"q\.jsonl: holds no queries",
    ),
    (
        "qrels-grade-not-integer",
        lambda w, a: _bm25(dataset(w, qrels=QRELS + "q2\td3\thigh\n")),
        r"ds/qrels/test\.tsv:4: field 'score': not an integer: 'high'",
    ),
    (
        "qrels-wrong-columns",
        lambda w, a: _bm25(dataset(w, qrels=QRELS + "q2\td3\n")),
        r"ds/qrels/test\.tsv:4: expected 3 tab-separated columns",
    ),
    (
        "qrels-unknown-query",
        lambda w, a: _bm25(dataset(w, qrels=QRELS + "q7\td3\t1\n")),
        r"ds/qrels/test\.tsv:4: field 'query-id': query 'q7' is judged but absent",
    ),
    (
        "qrels-conflicting-grades",
        lambda w, a: _bm25(dataset(w, qrels=QRELS + "q1\td1\t2\n")),
        r"ds/qrels/test\.tsv:4: field 'score': 'q1' / 'd1' judged 1 on line 2 and 2 here",
    ),
    (
        "qrels-header-only",
        lambda w, a: _bm25(dataset(w, qrels="query-id\tcorpus-id\tscore\n")),
        r"ds/qrels/test\.tsv: the qrels file holds no judgements",
    ),
    (
        "qrels-missing-split",
        lambda w, a: _bm25(dataset(w), "--split", "dev"),
        r"ds/qrels/dev\.tsv: no qrels for split 'dev' \(available: test\)",
    ),
    # flags
    ("k-zero", lambda w, a: _bm25(dataset(w), "-k", "0"), r"option '-k': must be at least 1, not 0"),
    (
        "k-negative",
        lambda w, a: ["search", "-i", str(a["idx"]), "-d", str(a["data"]), "-o", "r.trec", "-k", "-5"],
        r"option '-k': must be at least 1, not -5",
    ),
    ("k-not-a-number", lambda w, a: _bm25(dataset(w), "-k", "ten"), r"Invalid value for '-k'"),
    ("unknown-option", lambda w, a: _bm25(dataset(w), "--fast"), r"No such option: --fast"),
    (
        "split-with-queries-file",
        lambda w, a: [
            "search",
            "-i",
            str(a["idx"]),
            "--queries",
            str(a["data"] / "queries.jsonl"),
            "--split",
            "test",
            "-o",
            "r.trec",
        ],
        r"option '--split': --split does nothing with --queries",
    ),
    (
        "fusion-weights-with-bm25",
        lambda w, a: _bm25(dataset(w), "--fusion-weights", "0.5,0.5"),
        r"option '--fusion-weights': --fusion-weights does nothing with --retriever bm25",
    ),
    (
        "model-with-bm25",
        lambda w, a: _bm25(dataset(w), "--model", "x"),
        r"option '--model': --model does nothing with --retriever bm25",
    ),
    # learned sparse retrieval: the other kind of model or index, and its flags
    (
        "dense-model-for-splade",
        lambda w, a: ["evaluate", "-d", str(a["data"]), "-o", "out", "--retriever", "splade"],
        r"'model': '.*' is a dense model; --retriever splade needs a sparse one",
    ),
    (
        "sparse-model-for-a-dense-index",
        lambda w, a: ["search", "-i", str(a["idx"]), "-d", str(a["data"]), "-o", "r.trec", "-m", str(a["splade"])],
        r"is a sparse model",
    ),
    (
        "dense-model-for-a-sparse-index",
        lambda w, a: [
            "search",
            "-i",
            str(a["sparse_idx"]),
            "-d",
            str(a["data"]),
            "-o",
            "r.trec",
            "-m",
            str(a["dense"]),
        ],
        r"(is a dense model|this is a dense model)",
    ),
    (
        "sparse-index-flag-for-dense-embeddings",
        lambda w, a: ["index", "-e", str(a["emb"]), "-o", "idx", "--sparse-index", "impact"],
        r"option '--sparse-index'",
    ),
    (
        "faiss-flag-for-sparse-embeddings",
        lambda w, a: ["index", "-e", str(a["sparse_emb"]), "-o", "idx", "--factory", "HNSW32"],
        r"option '--factory'",
    ),
    (
        "unknown-sparse-index",
        lambda w, a: ["evaluate", "-d", str(a["data"]), "-o", "out", "--retriever", "splade", "--sparse-index", "x"],
        r"option '--sparse-index': unknown value 'x'",
    ),
    (
        "unknown-hybrid-part",
        lambda w, a: [
            "evaluate",
            "-d",
            str(a["data"]),
            "-o",
            "out",
            "--retriever",
            "hybrid",
            "--hybrid-parts",
            "dense,colbert",
        ],
        r"option '--hybrid-parts': give two or three of dense,bm25,splade",
    ),
    # late interaction: the other kind of model or index, another model's index, and its flags
    (
        "dense-model-for-colbert",
        lambda w, a: ["evaluate", "-d", str(a["data"]), "-o", "out", "--retriever", "colbert"],
        r"'model': '.*' is a dense model; --retriever colbert needs a multi-vector one",
    ),
    (
        "colbert-model-for-a-dense-index",
        lambda w, a: ["search", "-i", str(a["idx"]), "-d", str(a["data"]), "-o", "r.trec", "-m", str(a["colbert"])],
        r"is a multi-vector model",
    ),
    (
        "other-colbert-model-for-a-multivector-index",  # another model, with token vectors of another width
        lambda w, a: [
            "search",
            "-i",
            str(a["colbert_idx"]),
            "-d",
            str(a["data"]),
            "-o",
            "r",
            "-m",
            str(a["other_colbert"]),
        ],
        r"the index was built with another model \(model: .*weights_sha256: .*dim: index 64, model 32",
    ),
    (
        "faiss-flag-for-multivector-embeddings",
        lambda w, a: ["index", "-e", str(a["colbert_emb"]), "-o", "idx", "--factory", "HNSW32"],
        r"option '--factory': --factory does nothing with a multi-vector model's token vectors",
    ),
    (
        "pool-factor-for-a-dense-model",
        lambda w, a: ["encode", "--corpus", str(a["data"] / "corpus.jsonl"), "-o", "e", "--pool-factor", "2"],
        r"'pool_factor': is a dense model: it has no pool factor to choose",
    ),
    (
        "pool-factor-below-one",
        lambda w, a: ["encode", "--corpus", str(a["data"] / "corpus.jsonl"), "-o", "e", "--pool-factor", "0.5"],
        r"option '--pool-factor'",
    ),
    (
        "chunk-overlap-not-below-the-chunk-size",
        lambda w, a: [
            "encode",
            "--corpus",
            str(a["data"] / "corpus.jsonl"),
            "-o",
            "e",
            "--chunking",
            "window",
            "--chunk-size",
            "64",
            "--chunk-overlap",
            "64",
        ],
        r"option '--chunk-overlap': must be less than --chunk-size 64",
    ),
    (
        "late-chunks-longer-than-the-models-positions",
        lambda w, a: [
            "encode",
            "--corpus",
            str(a["data"] / "corpus.jsonl"),
            "-o",
            "e",
            "--chunking",
            "late",
            "--chunk-size",
            "600",
            "--max-length",
            "512",
        ],
        r"option '--chunk-size': must be at most the model's max length 512",
    ),
    (
        "late-chunking-past-the-position-table",
        lambda w, a: [
            "encode",
            "--corpus",
            str(a["data"] / "corpus.jsonl"),
            "-o",
            "e",
            "--chunking",
            "late",
            "--max-length",
            "1024",
        ],
        r"'max_length': must be at most 512, the longest input this model reads",
    ),
    (
        "chunking-a-query",
        lambda w, a: ["search", "-i", str(a["idx"]), "-d", str(a["data"]), "-o", "r.trec", "--chunking", "window"],
        r"option '--chunking': queries are encoded whole",
    ),
    (
        "aggregation-for-an-index-of-whole-documents",
        lambda w, a: ["search", "-i", str(a["idx"]), "-d", str(a["data"]), "-o", "r.trec", "--aggregation", "firstp"],
        r"option '--aggregation': combines the scores of a document's chunks; this index holds whole documents",
    ),
    (
        "aggregation-without-chunking",
        lambda w, a: ["evaluate", "-d", str(a["data"]), "-o", "out", "--aggregation", "maxp"],
        r"option '--aggregation': --aggregation does nothing without --chunking",
    ),
    (
        "chunk-size-without-chunking",
        lambda w, a: ["encode", "--corpus", str(a["data"] / "corpus.jsonl"), "-o", "e", "--chunk-size", "64"],
        r"option '--chunk-size': sizes chunks; give --chunking",
    ),
    (
        "late-chunking-a-sparse-model",
        lambda w, a: [
            "encode",
            "--corpus",
            str(a["data"] / "corpus.jsonl"),
            "-o",
            "e",
            "-m",
            str(a["splade"]),
            "--chunking",
            "late",
        ],
        r"option '--chunking': late chunking pools a dense model's token vectors; chunk a sparse model with window",
    ),
    (
        "zero-max-active-dims",
        lambda w, a: ["encode", "--corpus", str(a["data"] / "corpus.jsonl"), "-o", "e", "--max-active-dims", "0"],
        r"option '--max-active-dims'",
    ),
    (
        "unknown-factory",
        lambda w, a: ["index", "-e", str(a["emb"]), "-o", "idx", "--factory", "IVFx,Flat"],
        r"option '--factory': factory string 'IVFx,Flat' refused",
    ),
    (
        "train-config-wrong-type",
        lambda w, a: ((w / "c.yaml").write_text("output: out\nbatch_size: many\n"), ["train", "-c", "c.yaml"])[1],
        r"c\.yaml: field 'batch_size': expected int, got 'many'",
    ),
    (
        "merge-without-parts",
        lambda w, a: ((w / "emb").mkdir(), ["encode", "--merge", "-o", "emb"])[1],
        r"emb: no part manifests",
    ),
    (
        "compare-not-a-report",
        lambda w, a: (thesis(w), ["compare", str(a["reports"][0]), "thesis"])[1],
        r"thesis/report\.json: not found",
    ),
    # models
    (
        "device-without-cuda",
        lambda w, a: ["evaluate", "-d", str(a["data"]), "-o", "out", "--device", "cuda"],
        r"field 'device': 'cuda' was asked for, but torch sees no CUDA device",
    ),
    ("model-config-broken", _broken_model, r"model: cannot load this model"),
    (
        "model-hub-name-offline",
        lambda w, a: ["evaluate", "-d", str(a["data"]), "-o", "out", "--model", "nobody-here/no-such-model"],
        r"field 'model': model 'nobody-here/no-such-model' is neither a local folder nor in the Hub cache",
    ),
    (
        "model-path-missing",
        lambda w, a: ((w / "models").mkdir(), ["evaluate", "-d", str(a["data"]), "-o", "out", "--model", "models/ft"])[
            1
        ],
        r"models/ft: no such model folder",
    ),
    # embeddings and indexes on disk
    (
        "shard-truncated",
        lambda w, a: _shard(w, a, truncate=True),
        r"emb/shard-00000\.npy: changed since it was encoded",
    ),
    (
        "shard-float-flipped",
        lambda w, a: _shard(w, a, truncate=False),
        r"emb/shard-00000\.npy: changed since it was encoded",
    ),
    (
        "index-file-truncated",
        lambda w, a: _truncated_index(w, a, checksums=True),
        r"idx/index: changed since it was written",
    ),
    (
        "index-file-truncated-no-checksum",
        lambda w, a: _truncated_index(w, a, checksums=False),
        r"idx/index: not a readable FAISS index",
    ),
    ("index-docid-mismatch", _bad_docid, r"idx: 'index' holds 150 vectors but 'docid' lists 151 ids"),
    ("index-meta-malformed", _broken_meta, r"idx/meta\.json:1: malformed JSON"),
    ("embeddings-missing", lambda w, a: ["index", "-e", "nowhere", "-o", "idx"], r"nowhere: not an embeddings folder"),
]


@pytest.fixture(scope="module")
def assets(tmp_path_factory, scifact_subset, default_model, splade_folder, colbert_folder):
    """Read-only inputs shared by the cases: a SciFact cut, its embeddings and index, two BM25 reports."""
    from embedkit import BM25, Index, evaluate, load_dataset
    from embedkit.encode.writer import encode_to_folder

    root = tmp_path_factory.mktemp("bad-input-assets")
    data = copy(scifact_subset, root)
    emb = encode_to_folder(default_model, load_dataset(data).corpus, root / "emb")
    Index.build(emb.embeddings(), emb.ids(), model_settings=emb.settings).save(root / "idx")
    reports = [Path(evaluate(None, data, "test", BM25(k1=k1), output=root / "reports")["folder"]) for k1 in (0.9, 1.2)]
    from embedkit import load_model
    from embedkit.index.sparse_exact import SparseExactIndex

    sparse_model = load_model(splade_folder, max_length=32, max_active_dims=32)
    sparse_emb = encode_to_folder(sparse_model, load_dataset(data).corpus, root / "sparse-emb")
    SparseExactIndex.build(sparse_emb).save(root / "sparse-idx")
    from embedkit.index.multivector_exact import MultiVectorExactIndex
    from embedkit.train.multivector import build_multivector_model

    colbert_emb = encode_to_folder(load_model(colbert_folder), load_dataset(data).corpus, root / "colbert-emb")
    MultiVectorExactIndex.build(colbert_emb).save(root / "colbert-idx")
    build_multivector_model(None, 64, 32, seed=1)[0].save(str(root / "other-colbert"))
    cache = tmp_path_factory.mktemp("bad-input-cache")
    work = tmp_path_factory.mktemp("bad-input-ro")
    return {
        "data": data,
        "emb": root / "emb",
        "idx": root / "idx",
        "splade": splade_folder,
        "dense": default_model.settings["model"],
        "sparse_emb": root / "sparse-emb",
        "sparse_idx": root / "sparse-idx",
        "colbert": colbert_folder,
        "colbert_emb": root / "colbert-emb",
        "colbert_idx": root / "colbert-idx",
        "other_colbert": root / "other-colbert",
        "reports": reports,
        "root": root,
        "cache": cache,
        "ro": unwritable_folder(work),
    }


@pytest.mark.parametrize("name, setup, expected", CASES, ids=[case[0] for case in CASES])
def test_bad_input_is_one_line_and_exit_2(name, setup, expected, assets, tmp_path):
    if assets["ro"] is None and "unwritable" in name:
        pytest.skip("no folder here is unwritable to this user")
    work = tmp_path / "work"
    work.mkdir()
    args = setup(work, assets)
    before = fingerprint(work, assets["root"])
    result = run_cli(args, work, assets["cache"])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("embedkit: error: ") and re.search(expected, lines[0]), lines[0]
    assert fingerprint(work, assets["root"]) == before  # nothing written, moved or deleted
    assert litter(work) == [] and litter(assets["root"]) == []


def test_at_least_forty_cases():
    assert len(CASES) >= 40


def test_a_byte_order_mark_and_crlf_are_accepted(tmp_path):
    """A Windows export (UTF-8 BOM, CRLF line ends) reads exactly like the plain file, and scores the same."""
    from embedkit import evaluate, load_dataset

    plain = dataset(tmp_path / "plain")
    windows = tmp_path / "windows" / "ds"
    (windows / "qrels").mkdir(parents=True)
    for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
        text = (plain / name).read_text()
        (windows / name).write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode())
    ours, theirs = load_dataset(plain), load_dataset(windows)
    assert list(ours.corpus) == list(theirs.corpus) and ours.queries == theirs.queries
    assert ours.qrels("test") == theirs.qrels("test")
    scores = [evaluate(None, data, "test", "bm25")["metrics"] for data in (ours, theirs)]
    assert scores[0] == scores[1]


def test_ctrl_c_during_encode_says_what_was_kept_and_a_rerun_resumes(assets, tmp_path):
    corpus = tmp_path / "corpus.jsonl"  # 100 documents in 20 shards: enough to stop part-way, even on a busy machine
    corpus.write_text("".join((assets["data"] / "corpus.jsonl").read_text().splitlines(keepends=True)[:100]))
    output = tmp_path / "emb"
    command = [sys.executable, "-m", "embedkit.cli", "encode", "--corpus", str(corpus), "-o", str(output)]
    command += ["--shard-size", "5"]
    # SIGINT back to its default in the child: a shell's background job (CI run with '&') ignores it, and Python
    # started with SIGINT ignored never raises KeyboardInterrupt, so the encode would simply finish
    process = subprocess.Popen(
        command,
        env=cli_env(assets["cache"]),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        manifest = output / "manifest.json"
        if manifest.is_file() and json.loads(manifest.read_text())["shards"]:
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and len(lines) == 1, stderr
    kept = int(re.search(r"interrupted; (\d+) complete shards? kept in .*emb: rerun the same command", lines[0])[1])
    assert 1 <= kept < 20
    assert litter(output) == []
    again = run_cli(command[3:], tmp_path, assets["cache"])
    assert again.returncode == 0, again.stderr
    assert f"({20 - kept} shards encoded now)" in again.stdout


@pytest.mark.parametrize("embeddings", ["emb", "sparse_emb", "colbert_emb"])
def test_index_build_is_the_index_command_and_every_family_then_takes_changes(embeddings, assets, tmp_path):
    """``embedkit index build`` beside the update verbs writes what ``embedkit index`` writes, for every family; the
    index then takes ``index add`` and passes ``index check`` (a sparse or multi-vector one beside its snapshot)."""
    import json

    from conftest import embedkit_here

    from embedkit.index import open_index

    folders = {}
    for form in (["index"], ["index", "build"]):
        folders[len(form)] = tmp_path / f"idx-{len(form)}"
        done = embedkit_here(*form, "-e", assets[embeddings], "-o", folders[len(form)])
        assert done.returncode == 0, done.stderr
    one, two = (open_index(folders[n]) for n in (1, 2))
    assert type(one) is type(two) and len(one) == len(two) and one.model_settings == two.model_settings
    corpus = tmp_path / "new.jsonl"
    corpus.write_text(json.dumps({"_id": "new-1", "title": "", "text": "a new document", "metadata": {"y": 1}}) + "\n")
    added = embedkit_here("index", "add", "-i", folders[2], "--corpus", corpus, "--fields", "y:int")
    assert added.returncode == 0, added.stderr
    checked = embedkit_here("index", "check", "-i", folders[2])
    assert checked.returncode == 0 and json.loads(checked.stdout)["documents"] == len(one) + 1
    assert open_index(folders[2]).capabilities.updatable
