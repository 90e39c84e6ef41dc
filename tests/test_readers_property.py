"""Every reader of user data, fed generated files: it loads them exactly, or raises ``EmbedkitError``, nothing else.

The files carry arbitrary Unicode, ids that are valid or not, blank lines, a UTF-8 byte-order mark, CRLF line ends,
gzip, and truncation at any byte. What "exactly" means is computed here from the generated rows, independently of
the readers: an id is valid when it is non-empty and holds no whitespace or control character, and a truncated file
may load only a prefix of its rows.
"""

from __future__ import annotations

import gzip
import json
import unicodedata
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from embedkit.data.beir import _corpus_rows, load_corpus, load_qrels, load_queries
from embedkit.data.trec import read_run
from embedkit.errors import EmbedkitError

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

good_ids = st.text(st.characters(codec="utf-8", exclude_categories=["Zs", "Zl", "Zp", "Cc"]), min_size=1, max_size=6)
bad_ids = st.one_of(
    st.text(st.characters(codec="utf-8"), max_size=4),  # anything: spaces, newlines, controls, empty
    st.sampled_from(["d 1", "d\n1", "", "a\u2028b", "x\x85y", "\t"]),
)
ids = st.one_of(*[good_ids] * 15, bad_ids)  # mostly valid, so that many files load
# Line formats cannot represent some ids at all: no line can hold a newline, a tab-separated one no tab, and a
# whitespace-separated one no whitespace. Such a file is a different, valid file, so those ids are not generated.
tsv_ids = ids.filter(lambda value: "\n" not in value and "\t" not in value)
spaced_ids = ids.filter(lambda value: not any(char.isspace() for char in value))
texts = st.one_of(*[st.text(max_size=30)] * 30, st.sampled_from(["\ud800", "a\udfffb"]))


def _key(row: dict) -> str:
    return row["_id"]


def valid_id(value: str) -> bool:
    return bool(value) and not any(c.isspace() or unicodedata.category(c) in ("Cc", "Cs") for c in value)


def encodable(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@st.composite
def layouts(draw) -> dict:
    """How the lines are put into a file."""
    return {
        "bom": draw(st.booleans()),
        "crlf": draw(st.booleans()),
        "blank_every": draw(st.sampled_from([0, 1, 3])),
        "gzip": draw(st.sampled_from([False, False, True])),
        "cut": draw(st.one_of(*[st.none()] * 4, st.floats(0.0, 1.0))),
        "ascii": draw(st.booleans()),
    }


def write(path: Path, lines: list[str], layout: dict) -> tuple[Path, int]:
    """The file, and how many whole lines survive its truncation (all of them when it is not cut)."""
    end = "\r\n" if layout["crlf"] else "\n"
    out: list[str] = []
    for number, line in enumerate(lines):
        if layout["blank_every"] and number % layout["blank_every"] == 0:
            out.append("")
        out.append(line)
    raw = ("\ufeff" if layout["bom"] else "") + "".join(line + end for line in out)
    data = raw.encode("utf-8", "surrogatepass")
    whole = len(lines)
    if layout["cut"] is not None:
        cut = int(len(data) * layout["cut"])
        data = data[:cut]
        whole = sum(1 for line in data.split(b"\n")[:-1] if line.strip(b"\r\xef\xbb\xbf"))
    if layout["gzip"]:
        packed = gzip.compress(raw.encode("utf-8", "surrogatepass"))
        data = packed if layout["cut"] is None else packed[: int(len(packed) * layout["cut"])]
        path = path.with_name(path.name + ".gz")
        whole = 0 if layout["cut"] is not None else whole
    path.write_bytes(data)
    return path, whole


def check_prefix(loaded: list, expected: list, whole: int) -> None:
    """A truncated file loads a prefix of its rows, at least its whole lines; an untruncated one loads all."""
    assert loaded == expected[: len(loaded)]
    assert len(loaded) >= min(whole, len(expected))


def records_ok(rows: list[dict], id_field: str = "_id") -> bool:
    keys = [row[id_field] for row in rows]
    return (
        all(valid_id(k) for k in keys)
        and len(set(keys)) == len(keys)
        and all(encodable(v) for row in rows for v in row.values())
    )


@SETTINGS
@given(
    rows=st.lists(
        st.fixed_dictionaries({"_id": ids, "title": texts, "text": texts}), min_size=1, max_size=8, unique_by=_key
    ),
    layout=layouts(),
)
def test_corpus_rows(tmp_path, rows, layout):
    lines = [json.dumps(row, ensure_ascii=layout["ascii"]) for row in rows]
    path, whole = write(tmp_path / "corpus.jsonl", lines, layout)
    try:
        loaded = list(_corpus_rows(str(path), "stamp"))
    except EmbedkitError as err:
        event(f"refused: {str(err).split(': ')[-1][:12]}")
        return
    event("loaded")
    assert records_ok(loaded)
    check_prefix(loaded, rows, whole)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(
        st.fixed_dictionaries({"_id": ids, "title": texts, "text": texts}), min_size=1, max_size=5, unique_by=_key
    ),
    layout=layouts(),
)
def test_load_corpus_into_arrow(tmp_path_factory, rows, layout):
    """The same through the memory-mapped Arrow table that stages read (fewer examples: each writes a cache)."""
    path, whole = write(tmp_path_factory.mktemp("corpus") / "corpus.jsonl", [json.dumps(r) for r in rows], layout)
    try:
        corpus = load_corpus(path)
    except EmbedkitError as err:
        event(f"refused: {str(err).split(': ')[-1][:12]}")
        return
    event("loaded")
    check_prefix(list(corpus), rows, whole)


@SETTINGS
@given(
    rows=st.lists(st.fixed_dictionaries({"_id": ids, "text": texts}), min_size=1, max_size=8, unique_by=_key),
    layout=layouts(),
)
def test_queries(tmp_path, rows, layout):
    path, whole = write(tmp_path / "queries.jsonl", [json.dumps(r, ensure_ascii=layout["ascii"]) for r in rows], layout)
    try:
        loaded = load_queries(path)
    except EmbedkitError as err:
        event(f"refused: {str(err).split(': ')[-1][:12]}")
        return
    event("loaded")
    as_rows = [{"_id": k, "text": v} for k, v in loaded.items()]
    assert records_ok(as_rows)
    check_prefix(as_rows, rows, whole)


grades = st.one_of(st.integers(-2, 3).map(str), st.integers(-2, 3).map(str), st.sampled_from(["1.5", "x", "", " 2"]))


@SETTINGS
@given(
    tsv=st.lists(st.tuples(tsv_ids, tsv_ids, grades), min_size=1, max_size=8, unique_by=lambda row: row[:2]),
    spaced=st.lists(st.tuples(spaced_ids, spaced_ids, grades), min_size=1, max_size=8, unique_by=lambda row: row[:2]),
    header=st.booleans(),
    trec=st.booleans(),
    layout=layouts(),
)
def test_qrels(tmp_path, tsv, spaced, header, trec, layout):
    rows = spaced if trec else tsv
    lines = [f"{q} 0 {d} {g}" if trec else f"{q}\t{d}\t{g}" for q, d, g in rows]
    lines = (["query-id\tcorpus-id\tscore"] if header else []) + lines
    path, _ = write(tmp_path / "test.tsv", lines, layout)
    try:
        qrels = load_qrels(path)
    except EmbedkitError as err:
        event(f"refused: {str(err).split(': ')[-1][:12]}")
        return
    event("loaded")
    loaded = [(q, d, grade) for q, judged in qrels.items() for d, grade in judged.items()]
    assert all(valid_id(q) and valid_id(d) for q, d, _ in loaded)
    expected: dict[tuple[str, str], int] = {}
    for q, d, g in rows:  # what each line judges, up to the first that cannot (it must have been cut away)
        try:
            expected.setdefault((q, d), int(g))
        except ValueError:
            # ...unless the cut ends inside its grade, leaving a valid one: "1.5" cut after "1" reads as 1
            prefixes = {int(g[:end]) for end in range(1, len(g)) if g[:end].strip().lstrip("-").isdigit()}
            read = {(lq, ld): lg for lq, ld, lg in loaded}.get((q, d))
            if layout["cut"] is not None and (q, d) not in expected and read in prefixes:
                expected[(q, d)] = read
            break
    assert {(q, d): g for q, d, g in loaded}.items() <= expected.items()
    if layout["cut"] is None and not layout["gzip"]:
        assert len(loaded) == len(expected)


@SETTINGS
@given(
    hits=st.lists(
        st.tuples(spaced_ids, spaced_ids, st.floats(allow_nan=True, allow_infinity=True, width=32)),
        min_size=1,
        max_size=8,
    ),
    layout=layouts(),
)
def test_trec_runs(tmp_path, hits, layout):
    lines = [f"{q} Q0 {d} {rank} {score!r} tag" for rank, (q, d, score) in enumerate(hits, start=1)]
    path, _ = write(tmp_path / "run.trec", lines, layout)
    try:
        run = read_run(path)
    except EmbedkitError as err:
        event(f"refused: {str(err).split(': ')[-1][:12]}")
        return
    event("loaded")
    loaded = [(q, d, s) for q, docs in run.items() for d, s in docs.items()]
    assert all(valid_id(q) and valid_id(d) for q, d, _ in loaded)
    assert {(q, d): s for q, d, s in loaded}.items() <= {(q, d): float(repr(s)) for q, d, s in hits}.items()
    if layout["cut"] is None and not layout["gzip"]:
        assert len(loaded) == len(hits)


@pytest.mark.parametrize("value", ["d1", "é", "x" * 200, "東京"])
def test_valid_ids_round_trip_through_a_run(tmp_path, value):
    from embedkit.data.trec import write_run

    write_run(tmp_path / "run.trec", {value: {value: 0.5}})
    assert read_run(tmp_path / "run.trec") == {value: {value: 0.5}}
