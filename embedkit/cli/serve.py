"""``embedkit serve``: an index (and its model) behind an HTTP API and a search page."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from embedkit.cli import options as opt


def serve(
    index: Annotated[Path, typer.Option("--index", "-i", help="Index folder written by 'embedkit index'.")],
    dataset: Annotated[
        Optional[str], typer.Option("--dataset", "-d", help="BEIR dataset the index holds, for titles and snippets.")
    ] = None,
    data_dir: opt.DataDir = None,
    host: Annotated[str, typer.Option(help="Address to listen on (others than loopback get a warning).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    max_batch: Annotated[int, typer.Option(help="Queries encoded together across concurrent requests.")] = 64,
    max_wait_ms: Annotated[float, typer.Option(help="How long a request waits for others to batch with.")] = 5.0,
    max_queries: Annotated[int, typer.Option(help="Queries (or embedding inputs) per request.")] = 64,
    max_k: Annotated[int, typer.Option(help="Largest k a request may ask for.")] = 1000,
    max_request_bytes: Annotated[str, typer.Option(help="Largest request body (e.g. 1MiB, 512KiB).")] = "1MiB",
    access_log: Annotated[bool, typer.Option("--access-log", help="Log every request on stderr.")] = False,
    nprobe: opt.Nprobe = None,
    ef_search: opt.EfSearch = None,
    aggregation: opt.Aggregation = None,
    sum_top: opt.SumTop = None,
    model: Annotated[
        Optional[str],
        typer.Option("--model", "-m", help="Model folder or Hub name (default: the one recorded in the index)."),
    ] = None,
    dtype: opt.Dtype = None,
    device: opt.Device = None,
    backend: opt.Backend = None,
) -> None:
    """Serve POST /search, POST /v1/embeddings (OpenAI's format), GET /health and a search page at /.

    The model defaults to the one recorded in the index's meta.json.
    Example: [bold]embedkit serve -i idx/scifact -d scifact[/bold], then open http://127.0.0.1:8000/
    """
    from embedkit.errors import EmbedkitError
    from embedkit.serving.settings import ServeSettings, parse_bytes
    from embedkit.validation import check_number

    settings = ServeSettings(
        host=host,
        port=port,
        max_batch=max_batch,
        max_wait_ms=max_wait_ms,
        max_queries=max_queries,
        max_k=max_k,
        max_request_bytes=parse_bytes(max_request_bytes),
    ).check()
    check_number(nprobe, "--nprobe", minimum=1, maximum=1 << 20)  # FAISS clamps nprobe to the index's lists
    check_number(ef_search, "--ef-search", minimum=1, maximum=1 << 20)  # a queue this deep is already exhaustive
    from embedkit.search.chunks import Aggregation

    chunk_scores = None
    if aggregation is not None or sum_top is not None:
        chunk_scores = Aggregation(aggregation or "maxp", sum_top).check()
    runtime = opt.ModelOptions(model=model, dtype=dtype, device=device, backend=backend).check()
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise EmbedkitError("serving needs FastAPI and uvicorn: pip install 'embedkit[serve]'") from None
    from embedkit.serving.loading import load_engine

    given = {name: value for name, value in vars(runtime).items() if value is not None}
    engine = load_engine(
        index, dataset=dataset, data_dir=data_dir, nprobe=nprobe, ef_search=ef_search, aggregation=chunk_scores, **given
    )
    from embedkit.serving.app import serve as run_server

    run_server(engine, settings, access_log=access_log)


def register(app: typer.Typer) -> None:
    app.command()(serve)
