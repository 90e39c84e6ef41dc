"""``embedkit cache list | clean`` through the real CLI, on an export made by a real ``load_model(backend="onnx")``."""

from __future__ import annotations

import json
import threading
import time

import pytest
from conftest import embedkit_here

from embedkit.cli import cache


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBEDKIT_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _rows(listing: str) -> dict[str, str]:
    return {line.split()[0]: line for line in listing.splitlines()[1:-1]}


def test_the_cli_reads_the_folders_the_libraries_write(home):
    """``embedkit cache`` names the cache folders and the entry record without importing torch: the same names."""
    from embedkit.data.resolve import cache_home
    from embedkit.encode.cache import default_cache_root
    from embedkit.models import onnx

    assert onnx.onnx_cache_root() == cache_home() / cache.EXPORTS == home / "onnx"
    assert default_cache_root() == cache_home() / cache.EMBEDDINGS
    assert (onnx.ENTRY_FILE, onnx.ENTRY_FORMAT) == (cache.ENTRY_FILE, cache.ENTRY_FORMAT)


def test_list_shows_an_export_and_clean_frees_it(home, tiny_bert, scifact):
    from embedkit import encode_to_folder, load_model
    from embedkit.encode.cache import default_cache_root

    model = load_model(tiny_bert, pooling="mean", backend="onnx")
    folder = model.st[0].model.path.parent
    assert sorted(p.name for p in folder.iterdir()) == ["entry.json", "model.onnx", "model.onnx.data"]
    entry = json.loads((folder / "entry.json").read_text())
    assert entry["key"] == folder.name and entry["model"] == str(tiny_bert) and entry["network"] == "BertModel"
    assert {"torch", "transformers", "onnx", "onnxscript"} <= {k for k, v in entry["versions"].items() if v}
    network = load_model(tiny_bert, pooling="mean", device="cpu").st[0].model
    weights = sum(t.numel() * t.element_size() for t in network.state_dict().values()) / 1e6
    encode_to_folder(model, scifact.corpus.select(range(10)), default_cache_root() / "corpus-test")

    listed = embedkit_here("cache", "list")
    assert listed.returncode == 0, listed.stderr
    rows = _rows(listed.stdout)
    assert sorted(rows) == sorted([folder.name, "corpus-test"])  # the export key is a hash: either may sort first
    export = rows[folder.name].split()
    assert export[1] == "export" and export[3] == "MB" and "float32 ONNX export" in rows[folder.name]
    assert weights <= float(export[2]) <= 1.2 * weights + 0.1  # the weights, in model.onnx.data, and a small graph
    assert "10 documents encoded by" in rows["corpus-test"] and rows["corpus-test"].split()[1] == "embeddings"
    total = listed.stdout.splitlines()[-1].split()
    assert total[:2] == ["2", "entries,"] and float(total[2]) >= float(export[2]) and total[-1] == str(home)

    bad = embedkit_here("cache", "clean", "no-such-key")
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.count("\n") == 1 and "no cache entry no-such-key" in bad.stderr

    freed = embedkit_here("cache", "clean", folder.name)
    assert freed.returncode == 0, freed.stderr
    assert f"freed {folder.name} (export, {export[2]} MB)" in freed.stdout
    assert not folder.exists() and [p.name for p in (home / "onnx").iterdir()] == []  # no lock file left
    assert sorted(_rows(embedkit_here("cache", "list").stdout)) == ["corpus-test"]

    everything = embedkit_here("cache", "clean", "--all")
    assert everything.returncode == 0 and "freed 1 entries" in everything.stdout
    assert not (default_cache_root() / "corpus-test").exists()
    assert embedkit_here("cache", "list").stdout.startswith("0 entries, 0.0 MB")


def test_clean_waits_for_an_export_being_written(home):
    """An export in progress is listed as unfinished; cleaning it waits for its writer, then frees the whole export."""
    from embedkit.models.onnx import cached_export

    folder = home / "onnx" / "0123abcd-fp32"
    started, errors = threading.Event(), []

    def build(tmp):
        started.set()
        time.sleep(1.0)
        (tmp / "model.onnx").write_bytes(b"\0" * 2_000_000)

    def write():
        try:
            cached_export(folder, build, {"model": "a test", "network": "none"})
        except BaseException as error:
            errors.append(error)

    writer = threading.Thread(target=write)
    writer.start()
    assert started.wait(timeout=60)
    assert "unfinished export" in _rows(embedkit_here("cache", "list").stdout)[folder.name]
    freed = embedkit_here("cache", "clean", folder.name)
    writer.join(timeout=60)
    assert errors == [] and freed.returncode == 0, freed.stderr
    assert "(export, 2.0 MB)" in freed.stdout  # the finished export, not the half-written one
    assert not (home / "onnx").exists() or list((home / "onnx").iterdir()) == []


def test_listing_loads_no_torch(home, tmp_path):
    """``cache list`` reads JSON files only: it answers without importing torch or the models."""
    import subprocess
    import sys

    listed = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "embedkit.cli", "cache", "list"], capture_output=True, text=True
    )
    assert listed.returncode == 0 and listed.stdout == f"0 entries, 0.0 MB in {home}\n"
    imported = {line.split("|")[-1].strip() for line in listed.stderr.splitlines() if line.startswith("import time:")}
    assert not {"torch", "sentence_transformers", "transformers", "onnx"} & imported
