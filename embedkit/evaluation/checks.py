"""What a report must say about its data to be honest: judged documents the corpus lacks, queries left without
results, and the rules ids and ties follow.

pytrec_eval and BEIR score a judged document the corpus lacks as a miss without a word, so a corpus cut silently
lowers every score (nDCG@10 0.8193 became 0.5044 on one); embedkit refuses such qrels unless the user chooses
``miss``, and the report records the choice and the count.
"""

from __future__ import annotations

from typing import Any

from embedkit.data.beir import BeirDataset
from embedkit.data.trec import TIE_BREAK
from embedkit.errors import EmbedkitError
from embedkit.protocols import Run
from embedkit.validation import ID_NORMALISATION

ABSENT_JUDGED = ("refuse", "miss")


def check_absent_judged(data: BeirDataset, split: str, choice: str = "refuse", flag: str = "--absent-judged") -> dict:
    """Refuse qrels that judge documents the corpus lacks, naming the qrels file, the count and the first ids,
    unless ``choice`` is ``miss``; returns what the report records (the choice, the counts, the first ids)."""
    if choice not in ABSENT_JUDGED:
        raise EmbedkitError(f"unknown value '{choice}' (choose from {', '.join(ABSENT_JUDGED)})", field=flag)
    absent = data.absent_judged(split)
    if absent and choice == "refuse":
        first = ", ".join(absent[:3]) + (", ..." if len(absent) > 3 else "")
        are = "documents are" if len(absent) > 1 else "document is"
        choose = f"{flag} miss" if flag.startswith("-") else f"{flag}='miss'"
        raise EmbedkitError(
            f"{len(absent)} judged {are} not in the corpus (first: {first}); {choose} scores them as misses",
            path=data.qrels_file(split),
        )
    missing = set(absent)
    grades = [grade for judged in data.qrels(split).values() for doc, grade in judged.items() if doc in missing]
    return {
        "choice": choice,
        "documents": len(absent),
        "judgements": len(grades),
        "relevant_judgements": sum(1 for grade in grades if grade > 0),
        "first": absent[:10],
    }


def complete_run(run: Run, queries: dict[str, str]) -> tuple[Run, list[str]]:
    """The run with every judged query (an empty one where retrieval returned nothing, which pytrec_eval scores 0,
    as BEIR averages), and the queries without results, in query order."""
    without = [query_id for query_id in queries if not run.get(query_id)]
    return {query_id: run.get(query_id, {}) for query_id in queries}, without


def data_rules() -> dict[str, Any]:
    """The rules that decide which ids match and which hit ranks first, recorded in every report."""
    return {"id_normalisation": ID_NORMALISATION, "tie_break": TIE_BREAK}
