"""Quickstart: encode a few documents with the packaged model, index them, search them.

python examples/quickstart.py
"""

from __future__ import annotations

import embedkit

DOCUMENTS = {
    "aspirin": {"title": "Aspirin", "text": "Aspirin lowers fever and relieves mild pain."},
    "insulin": {"title": "Insulin", "text": "Insulin regulates blood sugar; people with type 1 diabetes inject it."},
    "statins": {"title": "Statins", "text": "Statins lower LDL cholesterol and the risk of heart attack."},
    "vaccines": {"title": "Vaccines", "text": "Vaccines train the immune system to recognise a pathogen."},
}
QUERIES = ["what brings a temperature down?", "treatment for high cholesterol", "how do immunisations work"]


def main() -> None:
    model = embedkit.load_model()  # all-MiniLM-L6-v2, shipped in a pip package: no download
    ids = list(DOCUMENTS)
    index = embedkit.Index.build(model.encode_corpus([DOCUMENTS[i] for i in ids]), ids, factory="Flat")
    scores, hits = index.search(model.encode_queries(QUERIES), k=2)
    for query, row_scores, row_hits in zip(QUERIES, scores, hits):
        ranked = ", ".join(f"{doc} ({score:.3f})" for doc, score in zip(row_hits, row_scores))
        print(f"{query!r} -> {ranked}")


if __name__ == "__main__":
    main()
