"""Shared fixtures: the real default model, real SciFact, and its embeddings encoded once and cached on disk."""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest

REPO = Path(__file__).resolve().parents[1]
# SciFact and the six classic collections: $EMBEDKIT_DATA where set (as the library reads it), else ../shared's.
SHARED_BEIR = Path(os.environ.get("EMBEDKIT_DATA") or REPO.parent / "shared" / "data" / "beir").resolve()
SCIFACT = SHARED_BEIR / "scifact"
# Survives between local runs (gitignored); a clean clone encodes SciFact once per session.
TEST_CACHE = REPO / ".cache" / "embeddings"
# EMBEDKIT_CACHE of the backend tests: the default model's ONNX and OpenVINO exports survive between local runs too.
EXPORT_CACHE = REPO / ".cache" / "embedkit-home"


# Under `make test`'s two workers (pytest-xdist, one file at a time, in this order: --no-loadscope-reorder) the order
# decides the wall time. test_metrics goes first, so one worker encodes all of SciFact into TEST_CACHE at once while
# the other runs long files that do not need those embeddings; then the other long files, so short ones end the run.
RUN_FIRST = (
    "test_metrics.py",
    "test_rerank.py",
    "test_encode_ray.py",
    "test_bad_input.py",
    "test_interrupts.py",
    "test_numeric_options.py",
    "test_factory_check.py",
    "test_honest_reports.py",
    "test_train.py",
    "test_train_dev.py",
    "test_cli.py",
    "test_serve.py",
    "test_encode_folder.py",
    "test_pretrain_end_to_end.py",
    "test_pretrain_study.py",
    "test_backends.py",
    "test_reproduce.py",
    "test_kill.py",
    "test_full_disk.py",
    "test_encode_edges.py",
    "test_integrations_mteb.py",
    "test_structure.py",
    "test_examples.py",
)


SEED_VARIABLE = "EMBEDKIT_TEST_SEED"


def pytest_configure(config):
    # One seed per run, inherited by the xdist workers: the sampled sweeps try other points every run, replayably.
    os.environ.setdefault(SEED_VARIABLE, str(random.SystemRandom().randrange(10**6)))


def pytest_report_header(config):
    return f"sampled sweeps: {SEED_VARIABLE}={os.environ[SEED_VARIABLE]} (set it to replay this run's points)"


def sweep_random(name: str) -> random.Random:
    """The generator of one sampled sweep: this run's seed and the sweep's name (a failure names the seed)."""
    return random.Random(f"{os.environ[SEED_VARIABLE]}:{name}")


def sweep_label() -> str:
    return f"{SEED_VARIABLE}={os.environ[SEED_VARIABLE]}"


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(RUN_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(RUN_FIRST)))  # stable: keeps order within a file


@pytest.fixture(scope="session")
def scifact_path() -> Path:
    assert SCIFACT.is_dir(), f"SciFact is expected at {SCIFACT} (set EMBEDKIT_DATA to the folder of BEIR collections)"
    return SCIFACT


@pytest.fixture(scope="session")
def scifact(scifact_path):
    from embedkit import load_dataset

    return load_dataset(scifact_path)


@pytest.fixture(scope="session")
def default_model():
    from embedkit import load_model

    return load_model(device="cpu")


@pytest.fixture(scope="module")
def export_cache():
    """EMBEDKIT_CACHE set to ``EXPORT_CACHE`` for a test module (``pytestmark = pytest.mark.usefixtures(...)``)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EMBEDKIT_CACHE", str(EXPORT_CACHE))
        yield EXPORT_CACHE


@pytest.fixture(scope="module")
def backend_texts(scifact) -> tuple[list[str], list[str]]:
    """60 documents spread over SciFact's corpus and 20 test queries: what each inference backend is checked on."""
    from embedkit.data import doc_text

    docs = [doc_text(scifact.corpus[i]) for i in range(0, 5183, 87)]
    queries = list(scifact.split_queries("test").values())[:20]
    return docs, queries


@pytest.fixture(scope="session")
def scifact_report(default_model, scifact):
    """The default model evaluated on all of SciFact test (encodes the corpus once, then cached)."""
    from embedkit import evaluate

    return evaluate(default_model, scifact, split="test", cache_dir=TEST_CACHE)


@pytest.fixture(scope="session")
def scifact_reports(tmp_path_factory, default_model, scifact, scifact_report) -> dict[str, Path]:
    """Report folders of the default model, bm25s and their RRF fusion on all of SciFact test (embeddings cached)."""
    from embedkit import evaluate

    output = tmp_path_factory.mktemp("scifact-reports")
    folders = {}
    for retriever in ("dense", "bm25", "hybrid"):
        report = evaluate(default_model, scifact, "test", output=output, cache_dir=TEST_CACHE, retriever=retriever)
        folders[retriever] = Path(report["folder"])
    return folders


@pytest.fixture(scope="session")
def scifact_embeddings(scifact_report):
    from embedkit import EmbeddingsFolder

    return EmbeddingsFolder.open(scifact_report["embeddings_cache"]["path"])


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
    return path


def write_qrels(path: Path, rows: list[tuple[str, str, int]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t{s}" for q, d, s in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_scifact_slice(folder: Path, scifact, queries: dict[str, int], documents: int, pool: int) -> Path:
    """A small real BEIR folder: the first ``queries[split]`` queries of each split with their qrels, their relevant
    documents, and other documents from the first ``pool`` of the corpus up to ``documents`` in all."""
    relevant, texts = set(), {}
    for split, count in queries.items():
        qrels = scifact.qrels(split)
        chosen = list(qrels)[:count]
        texts |= {q: scifact.queries[q] for q in chosen}
        relevant |= {doc for q in chosen for doc in qrels[q]}
        write_qrels(folder / "qrels" / f"{split}.tsv", [(q, d, s) for q in chosen for d, s in qrels[q].items()])
    docs = [row for row in scifact.corpus if row["_id"] in relevant]
    docs += [row for row in scifact.corpus.select(range(pool)) if row["_id"] not in relevant][: documents - len(docs)]
    write_jsonl(folder / "corpus.jsonl", docs)
    write_jsonl(folder / "queries.jsonl", [{"_id": q, "text": text} for q, text in texts.items()])
    return folder


@pytest.fixture(scope="session")
def splade_folder(tmp_path_factory):
    """A SPLADE model started from the default model (its MLM head initialised, untrained), saved as a folder."""
    import torch
    from sentence_transformers.sparse_encoder import SparseEncoder
    from sentence_transformers.sparse_encoder.modules import SpladePooling, Transformer

    from embedkit.models.reference import default_model_path

    path, cut = str(default_model_path()), {"model_max_length": 64}
    with torch.random.fork_rng():  # the new head's weights are the same in every session: no test is left to chance
        torch.manual_seed(0)
        head = Transformer(path, transformer_task="fill-mask", processor_kwargs=cut)
    model = SparseEncoder(modules=[head, SpladePooling(pooling_strategy="max")], similarity_fn_name="dot")
    folder = tmp_path_factory.mktemp("splade") / "model"
    model.save(str(folder))
    return folder


@pytest.fixture(scope="session")
def colbert_folder(tmp_path_factory):
    """A ColBERT model started from the default model by ``embedkit train``'s recipe (its 64-wide token projection
    initialised from seed 0, untrained; documents up to 64 tokens), saved as a folder."""
    from embedkit.train.multivector import build_multivector_model

    model, _ = build_multivector_model(None, 64, 64, seed=0)
    folder = tmp_path_factory.mktemp("colbert") / "model"
    model.save(str(folder))
    return folder


@pytest.fixture(scope="session")
def scifact_subset(tmp_path_factory, scifact) -> Path:
    """A small real BEIR folder: 20 SciFact test queries, their relevant docs, and other documents up to 150 (a
    dozen tests encode it into caches of their own: its size is a share of `make test`'s time)."""
    return write_scifact_slice(tmp_path_factory.mktemp("scifact-subset"), scifact, {"test": 20}, 150, 300)


@pytest.fixture(scope="session")
def train_slice(tmp_path_factory, scifact) -> Path:
    """A real BEIR folder with 80 SciFact train queries, 20 test queries and 400 documents."""
    return write_scifact_slice(tmp_path_factory.mktemp("train-slice"), scifact, {"train": 80, "test": 20}, 400, 400)


def _mine_slice(train_slice, default_model, folder: Path, range_min: int, range_max: int) -> Path:
    from embedkit import load_dataset
    from embedkit.train.mining import MiningSettings, mine_hard_negatives, write_mined

    data = load_dataset(train_slice)
    settings = MiningSettings(split="train", range_min=range_min, range_max=range_max, num_negatives=3)
    records = mine_hard_negatives(default_model, data, settings, cache_dir=TEST_CACHE)
    return write_mined(folder / "mined.jsonl", records, default_model, data, settings)


@pytest.fixture(scope="session")
def slice_mined(train_slice, default_model, tmp_path_factory) -> Path:
    """``embedkit mine``'s file for the slice's train queries: 3 hard negatives each from ranks 3-40."""
    return _mine_slice(train_slice, default_model, tmp_path_factory.mktemp("mined"), 3, 40)


@pytest.fixture(scope="session")
def slice_mined_far(train_slice, default_model, tmp_path_factory) -> Path:
    """The same with 3 easy negatives each from ranks 300-400 of the 400 documents (what a small teacher can learn)."""
    return _mine_slice(train_slice, default_model, tmp_path_factory.mktemp("mined-far"), 300, 400)


@pytest.fixture(scope="session")
def cross_encoder(slice_mined_far, train_slice, tmp_path_factory) -> Path:
    """A cross-encoder trained by ``embedkit train --objective cross-encoder`` from the default model's encoder on
    the far-mined slice (BCE, 2 epochs of about 18 steps, 96 tokens), a fifth of the train queries carved out as its
    dev set: a small reranker that tells a query's positive from unrelated documents (hard negatives need far more
    steps than a test can take: ``benchmarks/rerank_scifact.py`` trains the real one)."""
    from embedkit.models.device import cpu_has_bfloat16
    from embedkit.train import TrainConfig, train

    config = TrainConfig(
        output=str(tmp_path_factory.mktemp("cross-encoder") / "model"),
        objective="cross-encoder",
        data=str(slice_mined_far),
        dataset=str(train_slice),
        num_negatives=3,
        drop_short_examples=True,
        max_length=96,
        batch_size=16,
        epochs=2,
        learning_rate=1e-4,
        dev_fraction=0.2,
        eval_steps=20,  # two dev evaluations: step 20 and the last
        # bf16 halves the dev evaluations where the CPU has bf16 instructions; elsewhere torch's generic bf16 kernel
        # made this fixture take 681 s of a 44-minute CI run (2026-12-03)
        dev_dtype="bfloat16" if cpu_has_bfloat16() else "float32",
        logging_steps=6,
    )
    return train(config)


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory) -> Path:
    """A 2-layer BERT built from a config (seeded random weights) with the default model's tokenizer."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from embedkit.models.reference import default_model_path

    folder = tmp_path_factory.mktemp("tiny-bert")
    config = BertConfig(
        vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128
    )
    torch.manual_seed(0)
    model = BertModel(config)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(default_model_path()).save_pretrained(folder)
    return folder


def embedkit_here(*args) -> subprocess.CompletedProcess:
    """``embedkit ARGS`` run by the CLI's own ``main`` in this process: its exit code, stdout and stderr as a
    subprocess would give them, without a fresh interpreter importing torch and sentence-transformers (about 10 s a
    call on the 2-core AVX2 CPU). An exception the CLI does not turn into an exit code is raised here, not printed.
    Tests of signals, locks between processes and the entry point itself keep real subprocesses."""
    import contextlib
    import io

    from transformers.utils import logging as transformers_logging

    from embedkit.cli import main

    # what main()'s HF_HUB_DISABLE_PROGRESS_BARS does in a fresh process: transformers read it when first imported
    transformers_logging.disable_progress_bar()
    argv = [str(arg) for arg in args]
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            main(argv)
            code = 0
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else int(exit.code is not None)
    return subprocess.CompletedProcess(["embedkit", *argv], code, stdout.getvalue(), stderr.getvalue())


class CliZygote:
    """The client of ``cli_zygote.py``: a warm process that imports torch and sentence-transformers once and forks a
    child per command, so a CLI test pays for a program's run, not a fresh interpreter's imports (about 7 s each)."""

    def __init__(self, env: dict[str, str]) -> None:
        import threading

        from embedkit.cli import QUIET_LIBRARIES

        self.lock = threading.Lock()
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("cli_zygote.py"))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**QUIET_LIBRARIES, **env},  # as the CLI sets them before it imports the libraries
            text=True,
        )

    def ask(self, request: dict) -> dict:
        with self.lock:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
            answer = self.process.stdout.readline()
        if not answer:
            raise RuntimeError(f"the CLI zygote ended (exit {self.process.wait()})")
        return json.loads(answer)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


_ZYGOTE: list[CliZygote] = []  # this worker's, started on first use


def cli_env(cache: Path) -> dict[str, str]:
    """A CLI run's environment: offline, its embedkit and datasets caches under ``cache``."""
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "EMBEDKIT_CACHE": str(cache / "embedkit"),
        "HF_DATASETS_CACHE": str(cache / "datasets"),
    }


def _zygote() -> CliZygote:
    if not _ZYGOTE or _ZYGOTE[0].process.poll() is not None:
        _ZYGOTE[:] = [CliZygote(cli_env(REPO / ".cache" / "zygote"))]
    return _ZYGOTE[0]


class ForkedCli:
    """``embedkit ARGS`` started as its own process, as ``subprocess.Popen`` would start it (in ``cwd``, with this
    process's environment, the caches under ``cache`` where given), but forked from this worker's warm zygote:
    ``pid``, ``poll``, ``wait``, ``communicate`` and ``returncode`` as ``Popen`` has them."""

    def __init__(self, args, cwd: Path | None = None, cache: Path | None = None) -> None:
        self.args = ["embedkit", *(str(arg) for arg in args)]
        env = dict(os.environ) if cache is None else cli_env(cache)
        request = {"op": "start", "argv": self.args[1:], "cwd": str(cwd or Path.cwd()), "env": env}
        self.started = _zygote().ask(request)
        self.pid, self.returncode, self.answer = self.started["pid"], None, None

    def _end(self, answer: dict, timeout: float) -> None:
        if answer["timed_out"]:
            raise subprocess.TimeoutExpired(self.args, timeout, answer["stdout"], answer["stderr"])
        self.answer, self.returncode = answer, answer["code"]

    def poll(self) -> int | None:
        if self.answer is None and not (answer := _zygote().ask({**self.started, "op": "poll"})).get("running"):
            self._end(answer, 0)
        return self.returncode

    def wait(self, timeout: float = 600) -> int:
        """The exit code (the child is killed after ``timeout``, and ``TimeoutExpired`` raised)."""
        if self.answer is None:
            self._end(_zygote().ask({**self.started, "op": "wait", "timeout": timeout}), timeout)
        return self.returncode

    def communicate(self, timeout: float = 600) -> tuple[str, str]:
        self.wait(timeout)
        return self.answer["stdout"], self.answer["stderr"]


def run_cli(args, cwd: Path | None = None, cache: Path | None = None, timeout: float = 600):
    """``embedkit ARGS`` run to its end as ``subprocess.run`` would (a ``ForkedCli``): a ``CompletedProcess``."""
    process = ForkedCli(args, cwd, cache)
    stdout, stderr = process.communicate(timeout)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def pytest_sessionfinish(session, exitstatus):
    for zygote in _ZYGOTE:
        zygote.close()


def kill_when(command: list[str], ready, timeout: float = 300.0) -> None:
    """Run ``command`` and SIGKILL it as soon as ``ready()`` is true (a real kill, mid-run)."""
    import signal
    import time

    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    while not ready():
        if process.poll() is not None:
            raise AssertionError(f"finished before it could be killed: {process.stderr.read()[-2000:]}")
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError("never became ready to be killed")
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
