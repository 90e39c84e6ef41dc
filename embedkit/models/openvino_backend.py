"""The openvino backend (``backend="openvino"``, extra ``embedkit[openvino]``): embedkit's own ONNX export of the
network, run by OpenVINO's CPU plugin in float32 or bfloat16.

**Importing OpenVINO reports usage to Intel** unless the user has opted out: ``openvino`` sends an "import" event
through ``openvino_telemetry`` and assumes consent when no consent file exists (it writes ``~/intel/``). To opt out,
run ``opt_in_out --opt_out`` once (it ships with openvino-telemetry). embedkit imports OpenVINO only when this backend
is asked for, never on the default path.

The network is exported with eager attention (plain matmul, softmax, matmul), the pattern OpenVINO fuses. The model is
read from the ONNX file, not converted with ``openvino.convert_model``, which would report each conversion too.
"""

from __future__ import annotations

import functools
import threading
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sentence_transformers import SentenceTransformer

from embedkit.errors import EmbedkitError
from embedkit.models.onnx import (
    cached_export,
    export_onnx,
    export_sample,
    network_key,
    network_source,
    onnx_cache_root,
    text_transformer,
)

OPENVINO_MISSING = "the openvino backend needs its extra: pip install 'embedkit[openvino]'"
PRECISIONS = {"float32": "f32", "bfloat16": "bf16"}


def _import_openvino() -> Any:
    try:
        import onnx  # noqa: F401
        import onnxscript  # noqa: F401
        import openvino
    except ImportError as error:
        raise EmbedkitError(f"{OPENVINO_MISSING} ({error})", field="backend") from None
    return openvino


@functools.cache
def openvino_has_bfloat16() -> bool:
    """True where OpenVINO is installed and its CPU plugin has bf16 kernels on this processor (asked once)."""
    try:
        openvino = _import_openvino()
    except EmbedkitError:
        return False
    return "BF16" in openvino.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")


def _export_eager(network: torch.nn.Module, sample: dict[str, torch.Tensor], names: list[str], out: Path) -> None:
    """``export_onnx`` with the network's attention switched to eager for the export only."""
    attention = getattr(network.config, "_attn_implementation", None)
    if attention not in (None, "eager"):
        network.set_attn_implementation("eager")
    try:
        export_onnx(network, sample, names, out)
    finally:
        if attention not in (None, "eager"):
            network.set_attn_implementation(attention)


class OpenVinoNetwork(torch.nn.Module):
    """Stands in for the transformers model inside sentence-transformers' ``Transformer`` module: tokenizer
    features in, ``last_hidden_state`` (float32) out, so the stack's pooling and normalisation run after it."""

    def __init__(self, path: Path, config: Any, dtype: str, threads: int) -> None:
        super().__init__()
        openvino = _import_openvino()
        core = openvino.Core()
        model = core.read_model(str(path))
        self.input_names = [node.get_any_name() for node in model.inputs]
        self.path, self.config = path, config
        self.compiled = core.compile_model(
            model,
            "CPU",
            {
                "INFERENCE_PRECISION_HINT": PRECISIONS[dtype],
                "PERFORMANCE_HINT": "LATENCY",  # one batch at a time, on all the threads given
                "INFERENCE_NUM_THREADS": threads,
            },
        )
        self.local = threading.local()
        self._first_inference_here()

    def _first_inference_here(self) -> None:
        """Run one tiny batch on the loading thread, before any encode stream exists.

        OpenVINO's Python binding fills a function-local static (pybind11's numpy API) on its first array copy, and
        that initialiser releases the GIL: two threads making their first copies at once (a server's workers) can
        deadlock on it. Once filled, it is never initialised again, so this call removes the race."""
        request = self.local.request = self.compiled.create_infer_request()
        request.infer({name: np.ones((1, 2), dtype="int64") for name in self.input_names})
        request.get_output_tensor(0).data.copy()

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def forward(self, **features: Any) -> dict[str, torch.Tensor]:
        request = getattr(self.local, "request", None)
        if request is None:  # one per thread: a thread waits only for its own batch
            request = self.local.request = self.compiled.create_infer_request()
        feeds = {name: features[name].detach().cpu().numpy().astype("int64") for name in self.input_names}
        request.infer(feeds)
        # the request reuses its output buffer for the next batch: the caller gets its own copy
        return {"last_hidden_state": torch.from_numpy(request.get_output_tensor(0).data.copy())}

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("an OpenVINO network does not pickle; load the model again from its settings")


def use_openvino(st: SentenceTransformer, dtype: str) -> dict[str, Any]:
    """Swap the network of ``st`` for its OpenVINO compile in ``dtype``; returns what ``backend_config`` records."""
    openvino = _import_openvino()
    if dtype == "bfloat16" and not openvino_has_bfloat16():
        raise EmbedkitError("this CPU has no bf16 kernels in OpenVINO; use dtype float32", field="dtype")
    transformer = text_transformer(st, "openvino")
    network = transformer.model
    sample, names = export_sample(st, "openvino")
    folder = onnx_cache_root() / f"{network_key(network, names)}-fp32-eager"
    path = cached_export(folder, lambda tmp: _export_eager(network, sample, names, tmp), network_source(network))
    threads = torch.get_num_threads()
    transformer.model = OpenVinoNetwork(path, network.config, dtype, threads)
    return {
        "openvino": openvino.get_version(),
        "inference_precision": PRECISIONS[dtype],
        "export": "torch.onnx dynamo, eager attention",
        "threads": threads,
    }
