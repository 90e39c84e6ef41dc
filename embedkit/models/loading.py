"""``load_model``: a sentence-transformers folder, a plain transformers folder, a Hub name, or the default."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sentence_transformers import SentenceTransformer
from sentence_transformers.base.modules import Normalize, Transformer
from sentence_transformers.sentence_transformer.modules import Pooling, StaticEmbedding
from transformers import AutoConfig

from embedkit.errors import EmbedkitError
from embedkit.models.backends import apply_backend
from embedkit.models.chunked_encode import check_chunkable
from embedkit.models.chunking import Chunking
from embedkit.models.device import effective_dtype, pick_device
from embedkit.models.dupmae_pooling import DupMAEPooling
from embedkit.models.embedding_model import EmbeddingModel
from embedkit.models.multivector_model import is_multivector_folder, load_multivector
from embedkit.models.options import check_max_length, check_run_options, stack_limit
from embedkit.models.reference import folder_hint, hub_offline, resolve_model
from embedkit.models.sparse_model import is_sparse_folder, load_sparse
from embedkit.storage import read_json
from embedkit.validation import check_number

POOLING_MODES = {"cls": "cls", "mean": "mean", "last": "lasttoken", "max": "max"}


def _default_pooling(path: str) -> str:
    """Pooling for a plain transformers folder without a hint: last-token for decoders, else CLS."""
    config = AutoConfig.from_pretrained(path)
    architectures = getattr(config, "architectures", None) or []
    if getattr(config, "is_decoder", False) or any(a.endswith("ForCausalLM") for a in architectures):
        return "last"
    return "cls"


def _plain_transformers(path: str, pooling: str | None, normalize: bool | None) -> tuple[SentenceTransformer, str]:
    hint = folder_hint(path)
    pooling = pooling or hint.get("pooling") or _default_pooling(path)
    normalize = bool(hint.get("normalize")) if normalize is None else normalize
    if pooling not in POOLING_MODES and pooling != "dupmae":
        choices = ", ".join([*POOLING_MODES, "dupmae"])
        raise EmbedkitError(f"unknown pooling '{pooling}' (choose from {choices})", field="pooling")
    transformer = Transformer(path)
    if pooling == "dupmae":  # DupMAE's sentence vector + reduced token vector, from the folder's MLM head
        modules = [transformer, DupMAEPooling.from_folder(path, dense_pooling=hint.get("sentence_pooling") or "cls")]
    else:
        modules = [transformer, Pooling(transformer.get_embedding_dimension(), pooling_mode=POOLING_MODES[pooling])]
    if normalize:
        modules.append(Normalize())
    return SentenceTransformer(modules=modules), pooling


def _own_modules(path: Path) -> bool:
    """True when the stack's only non-sentence-transformers modules are embedkit's (e.g. the dupmae pooling)."""
    types = [m.get("type", "") for m in read_json(path / "modules.json") if isinstance(m, dict)]
    custom = [t for t in types if not t.startswith("sentence_transformers.")]
    return bool(custom) and all(t.startswith("embedkit.") for t in custom)


def _stack_pooling(model: SentenceTransformer) -> str:
    for module in model:
        if isinstance(module, StaticEmbedding):  # a bag of token vectors, averaged (``distill-static``)
            return "mean"
        if getattr(module, "embedkit_pooling", None):
            return module.embedkit_pooling
        if isinstance(module, Pooling):
            mode = module.pooling_mode
            mode = mode if isinstance(mode, str) else "+".join(mode)
            return {v: k for k, v in POOLING_MODES.items()}.get(mode, mode)
    return "none"


def _load_stack(name: str, path: Path, device: str, revision: str | None, pooling: str | None, normalize):
    """The sentence-transformers stack of a folder or Hub name, and the pooling a plain folder was given."""
    if (path / "modules.json").is_file():
        return SentenceTransformer(str(path), device=device, trust_remote_code=_own_modules(path)), pooling
    if (path / "config.json").is_file():
        model, pooling = _plain_transformers(str(path), pooling, normalize)
        return model.to(device), pooling
    try:
        return SentenceTransformer(name, device=device, revision=revision), pooling
    except (OSError, ValueError) as err:
        offline = " (offline: HF_HUB_OFFLINE is set)" if hub_offline() else ""
        raise EmbedkitError(
            f"model '{name}' is neither a local folder nor in the Hub cache{offline}: {str(err).splitlines()[0]}",
            field="model",
        ) from None


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
    backend: str | None = None,
    max_active_dims: int | None = None,
    pool_factor: float | None = None,
    token_dtype: str | None = None,
    chunking: Chunking | dict | str | None = None,
) -> EmbeddingModel:
    """Load an embedding model; ``None`` is the packaged all-MiniLM-L6-v2.

    Every argument left as ``None`` takes the model's own value (its prompts, max length, pooling and whether it
    normalises); what is used is recorded in ``model.settings``. ``backend`` is ``torch`` (the default: ``dtype``
    float32, or bfloat16/float16 under torch autocast) or a CPU engine asked for by name: ``torch-int8``, ``onnx``,
    ``onnx-int8``, ``openvino`` (see ``embedkit.models.backends``). bfloat16 on a CPU without bf16 instructions warns
    once and runs float32, and is recorded as such. A sentence-transformers ``SparseEncoder`` folder loads as a
    ``SparseModel`` (``max_active_dims`` caps its vectors) and a ``MultiVectorEncoder`` folder as a
    ``MultiVectorModel`` (``pool_factor``: hierarchical token pooling of documents; ``token_dtype``: float16 or
    float32 token vectors). ``chunking`` (a ``Chunking``, its mapping or a method name) cuts documents into chunk
    rows (``encode_chunks``): window and sentence chunks for every family, late chunking for a dense model.
    A local folder is recorded by its absolute path, so what is recorded reloads from any working directory.
    """
    check_number(max_length, "max_length", minimum=1)
    check_number(batch_tokens, "batch_tokens", minimum=1)
    chunking = chunking if isinstance(chunking, Chunking) or chunking is None else Chunking.from_dict(chunking)
    if chunking is not None:
        chunking.check()
        if not chunking.active:
            chunking = None
    backend = backend or "torch"
    device = check_run_options(dtype, backend, device)
    reference = resolve_model(name_or_path, revision)
    name, path = reference.name, reference.path
    device = pick_device(device)
    if backend == "torch":
        dtype = effective_dtype(device, dtype)
    prompts = {"query_prompt": query_prompt, "document_prompt": document_prompt, "max_length": max_length}
    sparse, multivector = path.is_dir() and is_sparse_folder(path), path.is_dir() and is_multivector_folder(path)
    if sparse or multivector:
        what = "a sparse model (SparseEncoder)" if sparse else "a multi-vector model (MultiVectorEncoder)"
        _refuse_dense_options(what, path, pooling=pooling, normalize=normalize, backend=backend != "torch")
        if sparse:
            _refuse_dense_options(what, path, pool_factor=pool_factor, token_dtype=token_dtype)
            check_number(max_active_dims, "max_active_dims", minimum=1)
            loaded = load_sparse(name, path, revision, device=device, dtype=dtype, max_active_dims=max_active_dims,
                                 chunking=chunking, **prompts)  # fmt: skip
        else:
            _refuse_dense_options(what, path, max_active_dims=max_active_dims)
            pooled = {"pool_factor": pool_factor, "token_dtype": token_dtype}
            loaded = load_multivector(name, path, revision, device=device, dtype=dtype, chunking=chunking, **pooled,
                                      **prompts)  # fmt: skip
        if chunking is not None:
            check_chunkable(loaded, chunking)
        return loaded
    if max_active_dims is not None:
        raise EmbedkitError("caps a sparse model's vectors; this is a dense model", field="max_active_dims")
    _refuse_dense_options("a dense model", None, pool_factor=pool_factor, token_dtype=token_dtype)
    try:
        model, pooling = _load_stack(name, path, device, revision, pooling, normalize)
    except EmbedkitError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as err:  # a broken config.json, weights or tokenizer files
        raise EmbedkitError(f"cannot load this model: {str(err).splitlines()[0]}", path=path) from None
    if pooling and pooling != _stack_pooling(model):
        raise EmbedkitError(
            f"this sentence-transformers model pools with '{_stack_pooling(model)}'; "
            "load the plain transformers folder to choose another pooling",
            path=path if path.is_dir() else None,
            field="pooling",
        )
    normalizing = [i for i, m in enumerate(model) if isinstance(m, Normalize)]
    if normalize is False:
        for position in reversed(normalizing):
            del model[position]  # in place: the model keeps its prompts and settings
    if max_length is not None:
        check_max_length(max_length, stack_limit(model), path=path if path.is_dir() else None)
        model.max_seq_length = max_length
    backend_config = apply_backend(model, backend, dtype)
    prompts = getattr(model, "prompts", {}) or {}
    embedder = EmbeddingModel(
        model,
        name=name,
        local_path=path if path.is_dir() else None,
        revision=revision,
        pooling=_stack_pooling(model),
        query_prompt=query_prompt if query_prompt is not None else prompts.get("query", ""),
        document_prompt=document_prompt if document_prompt is not None else prompts.get("document", ""),
        normalize=bool(normalizing) if normalize is None else normalize,
        dtype=dtype,
        device=device,
        batch_tokens=batch_tokens,
        backend=backend,
        backend_config=backend_config,
        chunking=chunking,
    )
    if chunking is not None:
        check_chunkable(embedder, chunking)
    return embedder


def _refuse_dense_options(what: str, path: Path | None, **given: Any) -> None:
    """One line for an option the model's kind does not have (given: not None, and not False)."""
    for field, value in given.items():
        if value is not None and value is not False:
            raise EmbedkitError(f"is {what}: it has no {field.replace('_', ' ')} to choose", path=path, field=field)


def load_model_from_settings(settings: dict[str, Any], **runtime: Any) -> EmbeddingModel:
    """The model recorded in a manifest, an index's meta.json or a report, with every setting that changes its
    vectors (pooling, prompts, max length, normalisation); ``runtime`` adds how to run it (dtype, device, backend,
    batch_tokens) or overrides a recorded setting."""
    recorded = {
        "pooling": settings.get("pooling"),
        "query_prompt": settings.get("query_prompt"),
        "document_prompt": settings.get("document_prompt"),
        "max_length": settings.get("max_length"),
        "normalize": settings.get("normalize"),
    }
    for key in ("max_active_dims", "pool_factor", "token_dtype", "chunking"):  # a sparse or multi-vector model's own
        if settings.get(key) is not None:
            recorded[key] = settings[key]
    recorded.update({key: value for key, value in runtime.items() if key != "model"})
    return load_model(runtime.get("model") or settings.get("model"), **recorded)
