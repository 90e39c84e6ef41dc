"""``embedkit index``: an embeddings folder to a FAISS index folder (pyserini layout + meta.json)."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Annotated, Optional

import typer

from embedkit.cli import options as opt


def index(
    ctx: typer.Context,
    embeddings: Annotated[
        Optional[Path], typer.Option("--embeddings", "-e", help="Folder written by 'embedkit encode'.")
    ] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Index folder to write.")] = None,
    factory: Annotated[
        Optional[str], typer.Option(help="FAISS index_factory string: Flat, IVF1024,Flat, HNSW32, ... [default: Flat]")
    ] = None,
    metric: Annotated[str, typer.Option(help="ip | l2")] = "ip",
    train_size: Annotated[int, typer.Option(help="Vectors sampled to train IVF/PQ.")] = 1_000_000,
    on_disk: Annotated[
        bool, typer.Option("--on-disk", help="IVF only: lists in one index.ivfdata file, built shard file by file.")
    ] = False,
    num_partitions: Annotated[
        Optional[int],
        typer.Option(help="Write N index partitions (contiguous ranges of vectors), searched as one."),
    ] = None,
    num_shards: Annotated[Optional[int], typer.Option(hidden=True, help="Old name of --num-partitions.")] = None,
    nprobe: opt.Nprobe = None,
    ef_search: opt.EfSearch = None,
    rescore: opt.Rescore = None,
    tune: Annotated[bool, typer.Option("--tune", help="Sweep nprobe/efSearch; keep the fastest at target.")] = False,
    target_recall: Annotated[float, typer.Option(help="Recall@10 against exact search that --tune must reach.")] = 0.95,
    tune_dataset: Annotated[
        Optional[str], typer.Option(help="Tune on this dataset's queries (default: 1,000 corpus vectors).")
    ] = None,
    tune_split: Annotated[Optional[str], typer.Option(help="Only the --tune-dataset queries of this split.")] = None,
    max_memory: opt.MaxMemory = None,
    target_ndcg_drop: Annotated[
        Optional[float],
        typer.Option(help="With --max-memory: nDCG@10 on --tune-dataset's qrels may fall this far below exact search."),
    ] = None,
    sparse_index: opt.SparseIndex = None,
    quantization: opt.Quantization = None,
    late_index: opt.LateIndex = None,
    data_dir: opt.DataDir = None,
    overwrite: opt.Overwrite = False,
) -> None:
    """Build a FAISS index from an embeddings folder (GPU when FAISS sees one); 'B...' factories are binary.

    Example: [bold]embedkit index -e emb/scifact -o idx/scifact-hnsw --factory HNSW32 --ef-search 128[/bold]

    Or let a memory budget choose the index: [bold]embedkit index -e emb/msmarco -o idx/ms --max-memory 2GiB[/bold]

    A sparse model's embeddings make a sparse index: [bold]embedkit index -e emb/splade -o idx/sp --sparse-index
    impact[/bold]; a multi-vector model's a late-interaction one: [bold]--late-index ivf --nprobe 16[/bold]

    An index then takes changes: [bold]embedkit index add|upsert|delete|compact|check -i IDX ...[/bold]
    """
    if ctx.invoked_subcommand is not None:  # 'embedkit index add ...': the options here are the build's
        given = {p.opts[0]: True for p in ctx.command.params if ctx.get_parameter_source(p.name).name != "DEFAULT"}
        opt.refuse_unused(given, f"with 'index {ctx.invoked_subcommand}'")
        return
    options = {name: value for name, value in locals().items() if name not in ("ctx", "given")}
    _build(**options)


def build(**options) -> None:
    """Build an index from an embeddings folder: 'embedkit index build -e EMB -o IDX' is 'embedkit index -e EMB -o
    IDX', with every option of it (the index's family follows the embeddings: FAISS, sparse or multi-vector).

    Example: [bold]embedkit index build -e emb/scifact -o idx/scifact --factory HNSW32[/bold]
    """
    _build(**options)


def _build(
    embeddings, output, factory, metric, train_size, on_disk, num_partitions, num_shards, nprobe, ef_search, rescore,
    tune, target_recall, tune_dataset, tune_split, max_memory, target_ndcg_drop, sparse_index, quantization,
    late_index, data_dir, overwrite,
) -> None:  # fmt: skip
    from embedkit.errors import EmbedkitError

    for flag, value in (("--embeddings", embeddings), ("--output", output)):
        if value is None:
            raise EmbedkitError(
                "missing: give the embeddings folder to index and the index folder to write", field=flag
            )
    from embedkit.outputs import check_output_folder, refuse_inside_other_output

    num_partitions = opt.renamed(num_partitions, num_shards, "--num-partitions", "--num-shards")
    opt.one_of(metric, ("ip", "l2"), "--metric")
    opt.one_of(sparse_index, ("exact", "impact", "seismic"), "--sparse-index")
    opt.one_of(late_index, tuple(LATE_ENGINES), "--late-index")
    opt.at_least(quantization, 1, "--quantization", maximum=1e6)
    from embedkit.index.factory_check import check_factory
    from embedkit.index.faiss_helpers import check_whole

    for flag, value, low in (("--train-size", train_size, 1), ("--num-partitions", num_partitions, 1)):
        check_whole(value, flag, low)
    for flag, value, low in (("--nprobe", nprobe, 1), ("--ef-search", ef_search, 1), ("--rescore", rescore, 0)):
        check_whole(value, flag, low)  # above the index's lists or vectors they are clamped when searching
    if factory is not None:
        check_factory(factory, metric=metric, field="--factory")  # a bad string: one line, before anything is read
    if not 0 < target_recall <= 1:  # NaN fails this test too
        raise EmbedkitError(f"must be in (0, 1], not {target_recall}", field="--target-recall")
    if num_partitions is not None and (rescore is not None or tune):
        raise EmbedkitError("--rescore and --tune work on one index, not with --num-partitions")
    budget = None
    if max_memory is not None:
        from embedkit.index.budget import parse_size

        budget = parse_size(max_memory, "--max-memory")
        given = {"--factory": factory, "--nprobe": nprobe, "--ef-search": ef_search, "--rescore": rescore}
        given |= {"--num-partitions": num_partitions, "--tune": tune or None, "--on-disk": on_disk or None}
        opt.refuse_unused(given, "with --max-memory, which chooses the index and its search parameter itself")
    elif target_ndcg_drop is not None:
        raise EmbedkitError("works with --max-memory only", field="--target-ndcg-drop")
    if target_ndcg_drop is not None and not (0 <= target_ndcg_drop < 1 and tune_dataset and tune_split):
        raise EmbedkitError(
            "needs a drop in [0, 1) and the qrels of --tune-dataset/--tune-split", field="--target-ndcg-drop"
        )
    if not tune and budget is None:
        opt.refuse_unused({"--tune-dataset": tune_dataset, "--tune-split": tune_split}, "without --tune")
    from embedkit.encode.folder import EmbeddingsFolder

    folder = EmbeddingsFolder.open(embeddings)
    family = folder.row_format.kind
    given = {"--factory": factory, "--ef-search": ef_search, "--rescore": rescore, "--max-memory": max_memory,
             "--num-partitions": num_partitions, "--tune": tune or None, "--on-disk": on_disk or None,
             "--nprobe": nprobe, "--sparse-index": sparse_index, "--quantization": quantization,
             "--late-index": late_index}  # fmt: skip
    opt.refuse_unused({flag: value for flag, value in given.items() if flag not in FAMILY_FLAGS[family]},
                      f"with {WHAT[family]}")  # fmt: skip
    builder = ROW_INDEXES.get(family)
    if builder is not None:  # a sparse or multi-vector index: its engine from its flag, the flags it reads checked
        engine = given[ENGINE_FLAG[family]] or "exact"
        for flag, engines in ENGINE_FLAGS[family].items():
            if engine not in engines:
                opt.refuse_unused({flag: given[flag]}, f"with the {engine} {family} index (it is for {engines[0]})")
        builder(folder, output, engine, given, overwrite)
        return
    factory = factory or "Flat"
    from embedkit.index.faiss_helpers import INDEX_KINDS, BuildSettings

    check_output_folder(output, INDEX_KINDS, overwrite)
    refuse_inside_other_output(output, "index")
    from embedkit.index.faiss_index import Index

    if not folder.complete:
        raise EmbedkitError("the embeddings are incomplete; rerun 'embedkit encode' to finish them", path=embeddings)
    dim, count = folder.manifest["dim"], folder.manifest["count"]
    if num_partitions is not None and num_partitions > count:
        raise EmbedkitError(f"must be at most the {count} vectors, not {num_partitions}", field="--num-partitions")
    if budget is None:  # the dimension and training count known: FAISS's own refusal, still before any build
        check_factory(factory, dim, metric=metric, count=min(train_size, count), field="--factory")
    settings = BuildSettings(factory, metric, train_size=train_size, nprobe=nprobe, ef_search=ef_search).check()
    if num_partitions is not None:
        from embedkit.index.partitioned import build_partitioned

        written = build_partitioned(folder, output, num_partitions, settings, on_disk=on_disk, overwrite=overwrite)
        typer.echo(
            f"{folder.manifest['count']} vectors indexed as '{factory}' in {num_partitions} partitions at {written}"
        )
        return
    if budget is not None:
        built = _choose(folder, settings, budget, target_recall, target_ndcg_drop, tune_dataset, tune_split, data_dir)
        factory = built.meta["factory"]
    elif on_disk:  # streamed from the embedding shard files: the corpus never sits in memory
        from embedkit.index.ondisk import build_ondisk

        built = build_ondisk(folder, output, settings, overwrite=overwrite)
    else:
        built = Index.from_vectors(folder, settings)
    built.attach_vectors(folder)  # recorded in meta.json: rescoring and tuning read the float vectors from it
    if rescore is not None:
        built.set_search_params(rescore=rescore)
    if tune:
        from embedkit.index.tune import tune_index

        tuning = tune_index(
            built, target_recall=target_recall, dataset=tune_dataset, split=tune_split, data_dir=data_dir
        )
        typer.echo(f"tuned on {tuning.queries['source']}:")
        typer.echo("\n".join(tuning.table()))
    built.save(output, overwrite=overwrite or on_disk)  # an on-disk build has written its own folder already
    typer.echo(f"{len(built)} vectors indexed as '{factory}' at {output}")


def _sparse(folder, output: Path, engine: str, given: dict, overwrite: bool) -> None:
    """A sparse model's embeddings: the exact index, Seismic's, or a Lucene impact index in pyserini's layout."""
    from embedkit.index.sparse_exact import SPARSE_INDEX_KIND

    _check_output(folder, output, SPARSE_INDEX_KIND, overwrite)
    SPARSE_BUILDS[engine](folder, output, given, overwrite)
    typer.echo(f"{folder.manifest['count']} sparse vectors indexed ({engine}) at {output}")


def _sparse_exact(folder, output: Path, given: dict, overwrite: bool) -> None:
    from embedkit.index.sparse_exact import SparseExactIndex

    SparseExactIndex.build(folder).save(output, overwrite=overwrite)


def _seismic(folder, output: Path, given: dict, overwrite: bool) -> None:
    from embedkit.integrations.seismic import build_seismic_index

    build_seismic_index(output, folder.ids(), folder.embeddings(), folder.settings, overwrite=overwrite)


def _impact(folder, output: Path, given: dict, overwrite: bool) -> None:
    from embedkit.integrations.pyserini_impact import build_impact_index
    from embedkit.models.loading import load_model_from_settings

    names = load_model_from_settings(folder.settings).token_names  # the terms are the tokenizer's words
    build_impact_index(output, folder.ids(), folder.embeddings(), names, folder.settings,
                       quantization=given["--quantization"] or 100.0, overwrite=overwrite)  # fmt: skip


def _multivector(folder, output: Path, engine: str, given: dict, overwrite: bool) -> None:
    """A multi-vector model's token vectors in the engine ``--late-index`` names (the registry's class builds it)."""
    from embedkit.index.multivector_exact import MULTIVECTOR_INDEX_KIND
    from embedkit.index.registry import MULTIVECTOR_FORMAT, engine_class

    _check_output(folder, output, MULTIVECTOR_INDEX_KIND, overwrite)
    built = engine_class(MULTIVECTOR_FORMAT, engine).build(folder)
    if given["--nprobe"] is not None:
        built.set_search_params(nprobe=given["--nprobe"])
    built.save(output, overwrite=overwrite)
    typer.echo(f"{folder.manifest['count']} documents' token vectors indexed ({LATE_ENGINES[engine]}) at {output}")


LATE_ENGINES = {"exact": "exact MaxSim", "ivf": "an IVF over token vectors, MaxSim over its candidates",
                "plaid": "compressed tokens, PLAID's centroid pruning, MaxSim over the decompressed best"}  # fmt: skip


def _check_output(folder, output: Path, kind: str, overwrite: bool) -> None:
    from embedkit.errors import EmbedkitError
    from embedkit.outputs import check_output_folder, refuse_inside_other_output

    check_output_folder(output, kind, overwrite)
    refuse_inside_other_output(output, "index")
    if not folder.complete:
        raise EmbedkitError("the embeddings are incomplete; rerun 'embedkit encode' to finish them", path=folder.path)


# What each family's embeddings are indexed by, and the flags it reads: any other build flag is refused by name.
WHAT = {"dense": "dense embeddings (FAISS indexes them)", "sparse": "a sparse model's embeddings",
        "multivector": "a multi-vector model's token vectors"}  # fmt: skip
FAMILY_FLAGS = {
    "dense": ("--factory", "--ef-search", "--rescore", "--max-memory", "--num-partitions", "--tune", "--on-disk",
              "--nprobe"),
    "sparse": ("--sparse-index", "--quantization"),
    "multivector": ("--late-index", "--nprobe"),
}  # fmt: skip
ENGINE_FLAG = {"sparse": "--sparse-index", "multivector": "--late-index"}
ENGINE_FLAGS = {"sparse": {"--quantization": ("impact",)}, "multivector": {"--nprobe": ("ivf", "plaid")}}
ROW_INDEXES = {"sparse": _sparse, "multivector": _multivector}
SPARSE_BUILDS = {"exact": _sparse_exact, "seismic": _seismic, "impact": _impact}


def _choose(folder, settings, budget, target_recall, ndcg_drop, dataset, split, data_dir):
    """``--max-memory``: the fastest index under the budget that meets the target; prints the candidates."""
    from embedkit.index.choose import BudgetSettings, budget_table, choose_index, dataset_tune_queries

    queries = score = None
    if dataset is not None:
        queries = dataset_tune_queries(folder.settings, dataset, split, data_dir)
    if ndcg_drop is not None:
        from embedkit.evaluation.metrics import compute_metrics

        def score(run: dict) -> float:
            return compute_metrics(queries.qrels, run)[0]["ndcg_at_10"]

    chosen = choose_index(
        folder, settings, BudgetSettings(budget, target_recall, ndcg_drop), queries=queries, score=score
    )
    typer.echo("\n".join(budget_table(chosen.meta["memory_budget"])))
    return chosen


def register(app: typer.Typer) -> None:
    from embedkit.cli import index_updates
    from embedkit.cli.options import finite_numbers

    group = typer.Typer(name="index", rich_markup_mode="rich")
    group.callback(invoke_without_command=True)(finite_numbers(index))
    parameters = [p for p in inspect.signature(index, eval_str=True).parameters.values() if p.name != "ctx"]
    build.__signature__ = inspect.Signature(parameters)  # index's options, as typer reads them
    build.__annotations__ = {name: hint for name, hint in index.__annotations__.items() if name != "ctx"}
    group.command("build")(finite_numbers(build))
    index_updates.register(group)
    app.add_typer(group)
