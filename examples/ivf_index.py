"""Build and query an IVF index, and measure what approximate search costs against exact search.

python examples/ivf_index.py --dataset scifact --nlist 64 --nprobe 8
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import embedkit
from embedkit.storage import sha256_json


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="scifact", help="BEIR folder or name")
    parser.add_argument("--nlist", type=int, default=64, help="IVF lists (k-means centroids)")
    parser.add_argument("--nprobe", type=int, default=8, help="lists visited per query")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "embedkit" / "examples")
    parser.add_argument("--output", type=Path, default=Path("idx") / "ivf-example")
    args = parser.parse_args()

    data = embedkit.load_dataset(args.dataset)
    model = embedkit.load_model()
    # Encoded once into a folder of shards named by model and corpus; a second run reuses them.
    key = sha256_json([model.settings, data.describe()["corpus_sha256"]])[:16]
    embeddings = embedkit.encode_to_folder(model, data.corpus, args.cache / f"{data.name}-{key}")
    vectors, ids = embeddings.embeddings(), embeddings.ids()

    ivf = embedkit.Index.build(vectors, ids, factory=f"IVF{args.nlist},Flat", nprobe=args.nprobe)
    ivf.save(args.output)  # index + docid + meta.json: pyserini's layout
    reopened = embedkit.Index.load(args.output)

    queries = data.split_queries("test")
    query_vectors = model.encode_queries(list(queries.values()))
    _, approximate = reopened.search(query_vectors, k=10)
    _, exact = embedkit.Index.build(vectors, ids, factory="Flat").search(query_vectors, k=10)
    overlap = np.mean([len(set(a) & set(e)) / len(e) for a, e in zip(approximate, exact)])
    print(f"IVF{args.nlist},Flat over {len(ids)} documents, nprobe {reopened.search_params['nprobe']}")
    print(f"top-10 overlap with exact search: {overlap:.3f} over {len(queries)} queries")


if __name__ == "__main__":
    main()
