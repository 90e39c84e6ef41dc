"""sentence-transformers with ``backend="onnx"`` or ``backend="openvino"``, timed in its own process and virtualenv.

Their extras (``optimum-onnx``, ``optimum-intel``) pin a transformers older than embedkit's, so ``encode.py`` builds a
side virtualenv per backend (``peer_venv``) and runs this script there, alternating its rounds with embedkit's. It
imports nothing from embedkit. Protocol, one JSON object per line: it prints ``{"ready": ...}`` once loaded, then
answers each request ``{"count": N, "batch_size": B, "out": PATH|null}`` read from stdin with ``{"seconds": S}``,
the wall time of ``encode`` on the first N texts (saved to PATH as ``.npy`` when given).

    python encode_peer.py --backend onnx --model FOLDER --texts texts.json

A peer is as its users run it: the export sentence-transformers makes itself on load, its runtime's default precision
(OpenVINO picks bf16 by itself on a CPU with bf16 instructions), and its best batch size from ``encode.py``'s sweep.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from importlib import metadata

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["onnx", "openvino"], required=True)
    parser.add_argument("--model", required=True, help="the model folder (the same files embedkit loads)")
    parser.add_argument("--texts", required=True, help="a JSON list of the texts to time")
    parser.add_argument("--threads", type=int, help="the runtime's threads (default: its own)")
    args = parser.parse_args()

    import numpy as np
    from sentence_transformers import SentenceTransformer

    with open(args.texts, encoding="utf-8") as handle:
        texts = json.load(handle)
    model_kwargs = {}
    if args.threads and args.backend == "openvino":
        model_kwargs["ov_config"] = {"INFERENCE_NUM_THREADS": str(args.threads)}
    if args.threads and args.backend == "onnx":
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = args.threads
        model_kwargs["session_options"] = options
    start = time.perf_counter()
    model = SentenceTransformer(args.model, device="cpu", backend=args.backend, model_kwargs=model_kwargs or None)
    load_s = time.perf_counter() - start
    model.encode(texts[:8])  # warm-up
    versions = {}
    for name in (
        "sentence-transformers",
        "transformers",
        "torch",
        "optimum-onnx",
        "optimum-intel",
        "onnxruntime",
        "openvino",
    ):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    precision = None
    if args.backend == "openvino":  # optimum-intel keeps the compiled model as ``request``
        compiled = getattr(model[0].auto_model, "request", None)
        if hasattr(compiled, "get_property"):
            precision = str(compiled.get_property("INFERENCE_PRECISION_HINT"))
    print(json.dumps({"ready": True, "load_s": round(load_s, 2), "versions": versions, "precision": precision}))
    sys.stdout.flush()
    for line in sys.stdin:
        request = json.loads(line)
        chosen = texts[: request["count"]]
        start = time.perf_counter()
        embeddings = model.encode(chosen, batch_size=request["batch_size"], convert_to_numpy=True)
        seconds = time.perf_counter() - start
        if request.get("out"):
            np.save(request["out"], np.asarray(embeddings, dtype=np.float32))
        print(json.dumps({"seconds": seconds}))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
