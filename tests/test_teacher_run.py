"""``rescore --teacher-run``: a run teaches (a fusion of BM25 and a dense model, say), its scores read by id for each
mined example's positive and negatives; a document the run did not list for its query takes the query's lowest
listed score."""

from __future__ import annotations

import json

from conftest import run_cli


def test_a_run_teaches_by_id_and_floors_what_it_did_not_list(slice_mined, train_slice, tmp_path):
    records = [json.loads(line) for line in slice_mined.read_text().splitlines()]
    records = [r for r in records if len(r["negative_ids"]) >= 2][:6]
    (tmp_path / "mined.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / "mined.jsonl.meta.json").write_text(slice_mined.with_name(slice_mined.name + ".meta.json").read_text())
    lines, expected = [], []
    for number, record in enumerate(records):
        ids = [record["positive_id"], *record["negative_ids"]]
        scores = [10.0 + number - rank / 4 for rank in range(len(ids))]
        listed = ids[:-1] if number == 0 else ids  # the first query's last negative is below its run
        lines += [f"{record['query_id']} Q0 {d} {rank + 1} {scores[rank]} t" for rank, d in enumerate(listed)]
        expected.append([*scores[:-1], scores[-2]] if number == 0 else scores)
    (tmp_path / "run.trec").write_text("\n".join(lines) + "\n")

    done = run_cli(["rescore", "--mined", "mined.jsonl", "--teacher-run", "run.trec", "-d", train_slice,
                    "-o", "scored.jsonl"], tmp_path, tmp_path / "cache")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "1 scores were below the run's list" in done.stdout
    scored = [json.loads(line) for line in (tmp_path / "scored.jsonl").read_text().splitlines()]
    assert [r["scores"] for r in scored] == expected
    assert [{k: v for k, v in r.items() if k != "scores"} for r in scored] == records
    meta = json.loads((tmp_path / "scored.jsonl.meta.json").read_text())
    assert meta["teacher"]["run"] == "run.trec" and meta["teacher"]["floored_scores"] == 1

    refused = run_cli(["rescore", "--mined", "mined.jsonl", "--teacher-run", "run.trec", "-o", "x.jsonl"], tmp_path)
    assert refused.returncode == 2 and "give --dataset" in refused.stderr and not (tmp_path / "x.jsonl").exists()
