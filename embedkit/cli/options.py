"""Options shared by several verbs, the model they describe, and the checks every verb runs before heavy imports."""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from embedkit.errors import EmbedkitError
from embedkit.validation import check_number

if TYPE_CHECKING:
    from embedkit.encode.ray_executor import RayExecutor
    from embedkit.models.chunking import Chunking
    from embedkit.models.embedding_model import EmbeddingModel

Model = Annotated[
    Optional[str], typer.Option("--model", "-m", help="Model folder or Hub name (default: all-MiniLM-L6-v2, packaged).")
]
Pooling = Annotated[Optional[str], typer.Option(help="cls | mean | last | max, for a plain transformers folder.")]
QueryPrompt = Annotated[Optional[str], typer.Option(help="Text put before every query.")]
DocumentPrompt = Annotated[Optional[str], typer.Option(help="Text put before every document.")]
MaxLength = Annotated[Optional[int], typer.Option(help="Truncate texts to this many tokens.")]
Dtype = Annotated[Optional[str], typer.Option(help="float32 | bfloat16 | float16 (autocast). [default: float32]")]
Device = Annotated[Optional[str], typer.Option(help="cuda | cuda:N | mps | cpu (default: the best present).")]
Backend = Annotated[
    Optional[str],
    typer.Option(
        help="torch | torch-int8 | onnx | onnx-int8 | openvino (all but torch run on the CPU; int8 and ONNX in "
        "float32, openvino in float32 or bfloat16; onnx needs embedkit[onnx], openvino embedkit[openvino], which "
        "reports usage to Intel on import unless opted out). [default: torch]"
    ),
]
MaxActiveDims = Annotated[
    Optional[int], typer.Option(help="A sparse model's vectors keep their largest this many weights.")
]
PoolFactor = Annotated[
    Optional[float],
    typer.Option(help="A multi-vector model keeps about 1/N of each document's token vectors (hierarchical pooling)."),
]
TokenDtype = Annotated[
    Optional[str],
    typer.Option(help="A multi-vector model's token vectors as stored: float16 | float32. [default: float16]"),
]
ChunkingMethod = Annotated[
    Optional[str],
    typer.Option(
        "--chunking",
        help="Cut documents into chunk rows: none | window | sentence | late (pooled from one encode of the whole "
        "document). [default: none]",
    ),
]
ChunkSize = Annotated[
    Optional[int], typer.Option(help="Tokens per chunk, special tokens and prompt included. [default: 256]")
]
ChunkOverlap = Annotated[Optional[int], typer.Option(help="Tokens each chunk shares with the one before. [default: 0]")]
Aggregation = Annotated[
    Optional[str],
    typer.Option(
        help="How a chunked index's chunk scores make a document's: maxp (its best chunk) | firstp (its first) | "
        "sump (the sum of its --sum-top best). [default: maxp]"
    ),
]
SumTop = Annotated[Optional[int], typer.Option(help="Chunks a document's sump score adds up. [default: 3]")]
SparseIndex = Annotated[
    Optional[str],
    typer.Option(help="exact (sparse products) | impact (Lucene, pyserini) | seismic (approximate). [default: exact]"),
]
LateIndex = Annotated[
    Optional[str],
    typer.Option(
        help="A multi-vector model's index: exact (MaxSim over all) | ivf (candidates by token) | plaid (compressed "
        "tokens, candidates by centroid). [default: exact]"
    ),
]
Quantization = Annotated[Optional[float], typer.Option(help="Impact index weights: round(w * this). [default: 100]")]
BatchTokens = Annotated[Optional[int], typer.Option(help="Padded tokens per batch (default 4096 CPU, 65536 GPU).")]
Dataset = Annotated[str, typer.Option("--dataset", "-d", help="BEIR dataset folder or name (e.g. scifact).")]
DataDir = Annotated[Optional[Path], typer.Option(help="Folder holding BEIR datasets by name.")]
Nprobe = Annotated[Optional[int], typer.Option(help="IVF lists to visit per query.")]
EfSearch = Annotated[Optional[int], typer.Option("--ef-search", help="HNSW search depth.")]
Rescore = Annotated[
    Optional[int],
    typer.Option(help="Re-rank the top k*N hits by exact float scores from the embeddings (SQ8, binary); 0 = off."),
]
Executor = Annotated[
    str, typer.Option(help="local (this process) | ray (Ray Data: tokenize in CPU tasks, encode in actors).")
]
RayAddress = Annotated[
    Optional[str],
    typer.Option(help="With --executor ray: a running cluster ('auto', 'ray://HEAD:10001'); default: this host."),
]
GpusPerWorker = Annotated[float, typer.Option(help="With --executor ray: GPUs each actor reserves.")]
CpusPerWorker = Annotated[
    Optional[float], typer.Option(help="With --executor ray: CPUs each actor reserves (and its torch threads).")
]
MaxMemory = Annotated[
    Optional[str],
    typer.Option(help="Choose the fastest index that fits this memory (512MiB, 2GiB, 2GB) and meets the target."),
]
Overwrite = Annotated[
    bool,
    typer.Option("--overwrite", help="Replace an earlier output of this kind (never a folder embedkit did not write)."),
]


def at_least(value: int | float | None, minimum: int | float, flag: str, maximum: int | float | None = None) -> None:
    """Refuse a numeric flag below ``minimum`` (or above ``maximum``), NaN or infinite; ``None`` means not given."""
    check_number(value, flag, minimum=minimum, maximum=maximum)


def one_of(value: str | None, choices: tuple[str, ...] | list[str], flag: str) -> None:
    if value is not None and value not in choices:
        raise EmbedkitError(f"unknown value '{value}' (choose from {', '.join(choices)})", field=flag)


def renamed(value: Any, old_value: Any, flag: str, old_flag: str) -> Any:
    """A flag's value given by its name or by its old name (a hidden alias kept for one release), not both."""
    if value is not None and old_value is not None:
        raise EmbedkitError(f"{old_flag} is the old name of {flag}; give one of them", field=old_flag)
    return value if value is not None else old_value


def refuse_unused(flags: dict[str, Any], why: str) -> None:
    """Refuse flags that were given but would be ignored (``why`` says by what)."""
    given = [flag for flag, value in flags.items() if value is not None]
    if given:
        raise EmbedkitError(f"{', '.join(given)} {'does' if len(given) == 1 else 'do'} nothing {why}", field=given[0])


@dataclass
class ModelOptions:
    """The model flags of a verb: checked without torch (``check``), loaded later (``load``)."""

    model: str | None = None
    pooling: str | None = None
    query_prompt: str | None = None
    document_prompt: str | None = None
    max_length: int | None = None
    dtype: str | None = None
    device: str | None = None
    batch_tokens: int | None = None
    backend: str | None = None
    max_active_dims: int | None = None
    pool_factor: float | None = None
    token_dtype: str | None = None
    chunking: str | None = None
    chunk_size: int | None = None
    chunk_overlap: int | None = None

    @classmethod
    def of(cls, flags: dict[str, Any]) -> ModelOptions:
        """The model flags among a verb's parameters (``locals()``), by name."""
        return cls(**{name: flags.get(name) for name in cls.__dataclass_fields__})

    def check(self) -> ModelOptions:
        from embedkit.models.options import POOLINGS, check_run_options
        from embedkit.models.reference import resolve_model

        check_run_options(self.dtype or "float32", self.backend or "torch", self.device)
        one_of(self.pooling, POOLINGS, "--pooling")
        at_least(self.max_length, 1, "--max-length")
        at_least(self.batch_tokens, 1, "--batch-tokens")
        at_least(self.max_active_dims, 1, "--max-active-dims")
        at_least(self.pool_factor, 1, "--pool-factor")
        one_of(self.token_dtype, ("float16", "float32"), "--token-dtype")
        self.chunking_setting()
        if self.model is not None:
            resolve_model(self.model)  # a missing folder or an uncached Hub name: one line now, not after torch loads
        if self.device not in (None, "cpu"):
            from embedkit.models.device import pick_device

            pick_device(self.device)  # loads torch (to ask it for the device), not sentence-transformers
        return self

    def given(self) -> dict[str, Any]:
        """The flags given on the command line, by their flag names (to refuse them where they would be ignored)."""
        return {f"--{name.replace('_', '-')}": value for name, value in asdict(self).items()}

    def chunking_setting(self) -> Chunking | None:
        """``--chunking`` with its size and overlap, checked (a size or overlap without a method is refused)."""
        from embedkit.models.chunking import Chunking

        if self.chunking is None:
            for flag, value in (("--chunk-size", self.chunk_size), ("--chunk-overlap", self.chunk_overlap)):
                if value is not None:
                    raise EmbedkitError("sizes chunks; give --chunking window, sentence or late with it", field=flag)
            return None
        given = {"size": self.chunk_size, "overlap": self.chunk_overlap}
        chunking = Chunking(self.chunking, **{key: value for key, value in given.items() if value is not None})
        return chunking.check()

    def load(self) -> EmbeddingModel:
        from embedkit.models.loading import load_model

        options = asdict(self)
        for name in ("chunking", "chunk_size", "chunk_overlap"):
            del options[name]
        options["chunking"] = self.chunking_setting()
        name = options.pop("model")
        options["dtype"] = options["dtype"] or "float32"
        return load_model(name, **options)


def ray_executor(
    executor: str,
    address: str | None,
    num_workers: int | None,
    gpus_per_worker: float,
    cpus_per_worker: float | None,
) -> RayExecutor | None:
    """The Ray executor the flags ask for (checked; Ray imported only to see that it is there), or None."""
    one_of(executor, ("local", "ray"), "--executor")
    if executor == "local":
        given = {"--ray-address": address, "--cpus-per-worker": cpus_per_worker}
        refuse_unused({**given, "--gpus-per-worker": gpus_per_worker or None}, "without --executor ray")
        return None
    from embedkit.encode.ray_executor import RayExecutor, RaySettings, import_ray

    workers = 1 if num_workers is None else num_workers  # --num-workers 0 is refused, not read as 1
    executor = RayExecutor(RaySettings(address, workers, gpus_per_worker, cpus_per_worker))  # checks them
    import_ray()
    return executor


# The largest integer any option takes: past it numpy and FAISS overflow (a traceback or a native crash), not refuse.
INT_MAX = 2**63 - 1


def _flag_of(parameter: inspect.Parameter) -> str:
    """The option's name on the command line: its ``--flag`` (else its short ``-f``), else typer's ``--name``."""
    for meta in getattr(parameter.annotation, "__metadata__", ()):
        decls = [d.split("/")[0] for d in (getattr(meta, "param_decls", None) or ()) if d.startswith("-")]
        default = getattr(meta, "default", None)
        if isinstance(default, str) and default.startswith("-"):
            decls.insert(0, default)
        if decls:
            return next((d for d in decls if d.startswith("--")), decls[0])
    return "--" + parameter.name.replace("_", "-")


def _numeric(annotation: Any) -> type | None:
    """``int`` or ``float`` when an option takes one (``Optional[...]`` and ``Annotated[...]`` looked through)."""
    base = typing.get_args(annotation)[0] if typing.get_origin(annotation) is Annotated else annotation
    candidates = [a for a in typing.get_args(base) if a is not type(None)] or [base]
    for kind in (float, int):
        if kind in candidates:
            return kind
    return None


def finite_numbers(command: Callable[..., Any]) -> Callable[..., Any]:
    """``command`` with every numeric option checked first: NaN and ±inf refused by name, integers within int64.

    Typer hands a verb ``float("nan")`` for ``--flag nan`` and a check written ``x < 0`` lets it through, so the one
    check lives here, around every verb, and each verb's own bounds come after it.
    """
    signature = inspect.signature(command, eval_str=True)
    numeric = {}
    for name, parameter in signature.parameters.items():
        kind = _numeric(parameter.annotation)
        if kind is not None:
            numeric[name] = (_flag_of(parameter), kind)

    @functools.wraps(command)
    def checked(*args: Any, **kwargs: Any) -> Any:
        for name, (flag, kind) in numeric.items():
            value = kwargs.get(name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                check_number(
                    value, flag, minimum=-INT_MAX if kind is int else None, maximum=INT_MAX if kind is int else None
                )
        return command(*args, **kwargs)

    return checked
