"""Options shared by several verbs, and the model they describe."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

if TYPE_CHECKING:
    from embedkit.models.embedding_model import EmbeddingModel

Model = Annotated[
    Optional[str], typer.Option("--model", "-m", help="Model folder or Hub name (default: all-MiniLM-L6-v2, packaged).")
]
Pooling = Annotated[Optional[str], typer.Option(help="cls | mean | last, for a plain transformers folder.")]
QueryPrompt = Annotated[Optional[str], typer.Option(help="Text put before every query.")]
DocumentPrompt = Annotated[Optional[str], typer.Option(help="Text put before every document.")]
MaxLength = Annotated[Optional[int], typer.Option(help="Truncate texts to this many tokens.")]
Dtype = Annotated[str, typer.Option(help="float32 | bfloat16 | float16 (autocast).")]
Device = Annotated[Optional[str], typer.Option(help="cuda | mps | cpu (default: the best present).")]
Backend = Annotated[
    str,
    typer.Option(help="torch | torch-int8 | onnx | onnx-int8 (the int8 and ONNX ones run on the CPU, in float32)."),
]
BatchTokens = Annotated[Optional[int], typer.Option(help="Padded tokens per batch (default 4096 CPU, 65536 GPU).")]
Dataset = Annotated[str, typer.Option("--dataset", "-d", help="BEIR dataset folder or name (e.g. scifact).")]
DataDir = Annotated[Optional[Path], typer.Option(help="Folder holding BEIR datasets by name.")]
Nprobe = Annotated[Optional[int], typer.Option(help="IVF lists to visit per query.")]
EfSearch = Annotated[Optional[int], typer.Option("--ef-search", help="HNSW search depth.")]
Rescore = Annotated[
    Optional[int],
    typer.Option(help="Re-rank the top k*N hits by exact float scores from the embeddings (SQ8, binary); 0 = off."),
]


def model_from_options(
    model: str | None,
    pooling: str | None,
    query_prompt: str | None,
    document_prompt: str | None,
    max_length: int | None,
    dtype: str,
    device: str | None,
    batch_tokens: int | None,
    backend: str = "torch",
) -> EmbeddingModel:
    from embedkit.models.loading import load_model

    return load_model(
        model,
        pooling=pooling,
        query_prompt=query_prompt,
        document_prompt=document_prompt,
        max_length=max_length,
        dtype=dtype,
        device=device,
        batch_tokens=batch_tokens,
        backend=backend,
    )
