"""The onnx and onnx-int8 backends: the network exported by embedkit and run by ONNX Runtime.

sentence-transformers' own ``backend="onnx"`` needs ``optimum-onnx``, whose releases pin ``transformers<4.58`` and
do not run with transformers 5 (which embedkit needs). So embedkit exports the network itself with
``torch.onnx.export`` (the torch.export-based exporter) and quantises it with ONNX Runtime's ``quantize_dynamic``
using the same parameters as sentence-transformers' ``export_dynamic_quantized_onnx_model`` presets (per-channel
symmetric int8 weights, dynamic uint8 activations, ORT's integer-op registry).

Exports are cached under ``$EMBEDKIT_CACHE/onnx``, one folder per network, variant and library versions (an upgrade
of torch, transformers or the exporter exports again instead of reusing a graph the new code might not make). Each
folder holds ``model.onnx``, its weights beside it in ``model.onnx.data`` (ONNX's protobuf stops at 2 GB; ONNX
Runtime and OpenVINO read the data file next to the model) and ``entry.json``, what ``embedkit cache list`` shows.
"""

from __future__ import annotations

import hashlib
import secrets
import shutil
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
from sentence_transformers import SentenceTransformer

from embedkit.data.resolve import cache_home
from embedkit.errors import EmbedkitError
from embedkit.models.int8 import full_range, int8_preset, quiet
from embedkit.outputs import commit_folder, output_lock, recover
from embedkit.storage import NEW_MARK, write_json

# Bump when the exported graph changes, so cached exports made by an older embedkit are not reused.
ONNX_EXPORT_FORMAT = 2
ONNX_OPSET = 18
TEXT_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
ONNX_MISSING = "the onnx backends need onnxruntime, onnx and onnxscript: pip install 'embedkit[onnx]'"
# What each cache folder records; its "format" tells ``embedkit cache`` an export entry from anything else.
ENTRY_FILE, ENTRY_FORMAT = "entry.json", "embedkit.onnx-export/1"
# The libraries whose version can change an export: the network's code, the exporter, the quantiser.
EXPORT_PACKAGES = ("torch", "transformers", "onnx", "onnxscript", "onnxruntime")
VARIANTS = {
    "fp32": "float32 ONNX export",
    "fp32-eager": "float32 ONNX export with eager attention, for the openvino backend",
    "int8": "int8 ONNX, ONNX Runtime dynamic quantisation",
}


def onnx_cache_root() -> Path:
    return cache_home() / "onnx"


def export_versions() -> dict[str, str | None]:
    """The installed versions of ``EXPORT_PACKAGES`` (None for one that is missing), read without importing them."""
    found: dict[str, str | None] = {}
    for name in EXPORT_PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def import_onnx() -> Any:
    try:
        import onnx  # noqa: F401
        import onnxruntime
        import onnxscript  # noqa: F401
    except ImportError as error:
        raise EmbedkitError(f"{ONNX_MISSING} ({error})", field="backend") from None
    return onnxruntime


def text_transformer(st: SentenceTransformer, backends: str = "onnx") -> Any:
    """The stack's first module when it is a text transformer whose forward gives ``last_hidden_state``."""
    transformer = st[0]
    config = getattr(transformer, "modality_config", {}).get("text", {})
    output = config.get("method_output_name")
    output = output[0] if isinstance(output, (list, tuple)) and len(output) == 1 else output
    if config.get("method") != "forward" or output != "last_hidden_state" or not hasattr(transformer, "model"):
        raise EmbedkitError(
            f"the {backends} backends export text transformers whose forward gives last_hidden_state; "
            "use backend torch",
            field="backend",
        )
    return transformer


def network_key(network: torch.nn.Module, input_names: list[str]) -> str:
    """The name of the network's exports in the cache: a hash of its config, its weights and ``export_versions``.

    The weights are hashed because a network changed in memory (fine-tuned, edited) keeps its config and name; it
    reads every weight once per load, a pass far cheaper than the export it saves.
    """
    digest = hashlib.sha256()
    digest.update(f"embedkit-onnx/{ONNX_EXPORT_FORMAT}/opset{ONNX_OPSET}".encode())
    digest.update(repr(sorted(export_versions().items())).encode())
    digest.update(repr(input_names).encode())
    digest.update(network.config.to_json_string(use_diff=False).encode())
    for name, tensor in sorted(network.state_dict().items()):
        digest.update(name.encode())
        digest.update(str(tensor.dtype).encode() + repr(tuple(tensor.shape)).encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
    return digest.hexdigest()[:32]


def network_source(network: torch.nn.Module) -> dict[str, str]:
    """The model name or path and class an export was made from, as its ``entry.json`` records them."""
    return {"model": str(getattr(network.config, "name_or_path", "") or ""), "network": type(network).__name__}


def describe(name: str) -> str:
    """What a cache folder named ``KEY-VARIANT`` holds, from its variant (``fp32``, ``int8-avx512_vnni`` ...)."""
    variant = name.partition("-")[2]
    base, _, preset = variant.partition("-") if variant.startswith("int8") else (variant, "", "")
    holds = VARIANTS.get(base, f"ONNX export ({variant or 'unknown variant'})")
    return f"{holds}, preset {preset}" if preset else holds


def cached_export(folder: Path, build: Any, source: dict[str, str], holds: str | None = None) -> Path:
    """``folder/model.onnx``, built once by ``build(tmp_folder)`` beside it and renamed into place under a lock.

    The folder gets ``entry.json``: what it holds (``holds``, else read from the folder's name), the model it was
    exported from (``source``: ``network_source``), the library versions and when it was made.
    """
    model = folder / "model.onnx"
    if model.is_file():
        return model
    with output_lock(folder):
        recover(folder)
        if not model.is_file():  # not built by a writer we waited for
            tmp = folder.parent / f".{folder.name}{NEW_MARK}{secrets.token_hex(4)}"
            tmp.mkdir(parents=True)  # 0o777 & ~umask: a shared cache stays readable by other users
            try:
                build(tmp)
                entry = {
                    "format": ENTRY_FORMAT,
                    "key": folder.name,
                    "holds": holds or describe(folder.name),
                    **source,
                    "versions": export_versions(),
                    "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                }
                write_json(tmp / ENTRY_FILE, entry)
                commit_folder(tmp, folder)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return model


class _TextNetwork(torch.nn.Module):
    """The transformers model with named text inputs and a tensor output, as the exporter wants it."""

    def __init__(self, network: torch.nn.Module) -> None:
        super().__init__()
        self.network = network

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        extra = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
        return self.network(input_ids=input_ids, attention_mask=attention_mask, **extra, return_dict=True)[0]


def export_onnx(network: torch.nn.Module, sample: dict[str, torch.Tensor], input_names: list[str], out: Path) -> None:
    """Export ``network`` (batch and sequence length dynamic) to ``out/model.onnx``."""
    batch, length = torch.export.Dim("batch"), torch.export.Dim("length")
    wrapped = _TextNetwork(network).eval()
    try:
        with quiet(), torch.no_grad():
            program = torch.onnx.export(
                wrapped,
                (),
                kwargs={name: sample[name] for name in input_names},
                dynamo=True,
                input_names=input_names,
                output_names=["last_hidden_state"],
                dynamic_shapes={name: {0: batch, 1: length} for name in input_names},
                opset_version=ONNX_OPSET,
                verbose=False,
            )
            program.save(str(out / "model.onnx"), external_data=True)  # weights in model.onnx.data
    except EmbedkitError:
        raise
    except Exception as error:  # the exporter's failures are many and deep; name the model's class instead
        reason = next((line for line in str(error).splitlines() if line.strip()), "")[:300]
        raise EmbedkitError(
            f"could not export {type(network).__name__} to ONNX ({type(error).__name__}: {reason}); use backend torch",
            field="backend",
        ) from error


def quantize_onnx(source: Path, out: Path, reduce_range: bool) -> None:
    """Dynamic int8 quantisation of ``source`` into ``out/model.onnx``, as sentence-transformers' presets do it.

    ORT writes a shape-inferred copy beside the model it reads, so it reads a copy of ``source``'s files made in
    ``out`` (onnx refuses weights behind symbolic or hard links): the finished float32 entry, which other processes
    may be reading or quantising too, is never written to. The copy costs far less than the quantisation.
    """
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.registry import IntegerOpsRegistry

    staged = out / "source"
    staged.mkdir()
    for file in source.parent.glob(f"{source.name}*"):  # model.onnx and model.onnx.data
        shutil.copyfile(file, staged / file.name)

    with quiet():
        quantize_dynamic(
            staged / source.name,
            out / "model.onnx",
            use_external_data_format=True,  # weights in model.onnx.data, as in the float32 export
            op_types_to_quantize=list(IntegerOpsRegistry),
            per_channel=True,
            reduce_range=reduce_range,
            weight_type=QuantType.QInt8,
            extra_options={"WeightSymmetric": True, "ActivationSymmetric": False},
        )
    shutil.rmtree(staged)


class OnnxNetwork(torch.nn.Module):
    """Stands in for the transformers model inside sentence-transformers' ``Transformer`` module.

    It takes the same tokenizer features and returns ``last_hidden_state``, so the stack's own pooling and
    normalisation run after it unchanged.
    """

    def __init__(self, path: Path, config: Any, threads: int) -> None:
        super().__init__()
        ort = import_onnx()
        self.path = path
        self.config = config
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.input_names = [node.name for node in self.session.get_inputs()]

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def forward(self, **features: Any) -> dict[str, torch.Tensor]:
        feeds = {name: features[name].detach().cpu().numpy().astype("int64") for name in self.input_names}
        (hidden,) = self.session.run(["last_hidden_state"], feeds)
        return {"last_hidden_state": torch.from_numpy(hidden)}


def export_sample(st: SentenceTransformer, backends: str = "onnx") -> tuple[dict[str, torch.Tensor], list[str]]:
    """Two tokenized texts to trace the export with, and the network's input names among ``TEXT_INPUTS``."""
    sample = st.preprocess(["embedkit exports this network to ONNX", "with a padded second text"])
    input_names = [name for name in TEXT_INPUTS if name in sample]
    if input_names[:2] != ["input_ids", "attention_mask"]:
        raise EmbedkitError(
            f"the {backends} backends need a tokenizer that gives input_ids and attention_mask", field="backend"
        )
    return sample, input_names


def use_onnx(st: SentenceTransformer, quantized: bool) -> dict[str, Any]:
    ort = import_onnx()
    transformer = text_transformer(st)
    network = transformer.model
    sample, input_names = export_sample(st)
    key = network_key(network, input_names)
    root = onnx_cache_root()
    fp32 = cached_export(
        root / f"{key}-fp32", lambda tmp: export_onnx(network, sample, input_names, tmp), network_source(network)
    )
    path, config = fp32, {"onnxruntime": ort.__version__, "opset": ONNX_OPSET, "export": "torch.onnx dynamo"}
    if quantized:
        preset, reduce_range = int8_preset(), not full_range()
        path = cached_export(
            root / f"{key}-int8-{preset}", lambda tmp: quantize_onnx(fp32, tmp, reduce_range), network_source(network)
        )
        config |= {
            "quantization": "onnxruntime dynamic int8",
            "preset": preset,
            "per_channel": True,
            "reduce_range": reduce_range,
        }
    transformer.model = OnnxNetwork(path, network.config, threads=torch.get_num_threads())
    return config
