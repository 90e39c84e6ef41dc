"""Find a BEIR dataset by name: --data-dir, $EMBEDKIT_DATA, ../shared/data/beir, the user cache, then download."""

from __future__ import annotations

import os
import shutil
import tempfile
import urllib.request
import zipfile
from pathlib import Path

from embedkit.errors import EmbedkitError

BEIR_URL = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/{name}.zip"


def cache_home() -> Path:
    """embedkit's user cache (``$EMBEDKIT_CACHE`` or ``~/.cache/embedkit``)."""
    return Path(os.environ.get("EMBEDKIT_CACHE", Path.home() / ".cache" / "embedkit"))


def _search_roots(data_dir: str | Path | None) -> list[Path]:
    roots: list[Path] = []
    if data_dir is not None:
        roots.append(Path(data_dir))
    if os.environ.get("EMBEDKIT_DATA"):
        roots.append(Path(os.environ["EMBEDKIT_DATA"]))
    checkout = Path(__file__).resolve().parents[2]
    for base in (checkout, Path.cwd()):
        shared = (base.parent / "shared" / "data" / "beir").resolve()
        if shared not in roots:
            roots.append(shared)
    roots.append(cache_home() / "beir")
    return roots


def _download(name: str, target: Path) -> None:
    url = BEIR_URL.format(name=name)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        archive = Path(tmp) / f"{name}.zip"
        with urllib.request.urlopen(url, timeout=60) as response, open(archive, "wb") as out:
            shutil.copyfileobj(response, out)
        with zipfile.ZipFile(archive) as zipped:
            zipped.extractall(tmp)
        os.replace(Path(tmp) / name, target)


def resolve_dataset(name_or_path: str | Path, data_dir: str | Path | None = None, download: bool = True) -> Path:
    """The folder of a dataset given by path or by BEIR name; one clear error if it is nowhere."""
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise EmbedkitError("a dataset must be a folder in BEIR's layout", path=path)
    if len(path.parts) > 1:
        raise EmbedkitError("no such dataset folder", path=path)
    name = str(name_or_path)
    roots = _search_roots(data_dir)
    for root in roots:
        if (root / name).is_dir():
            return root / name
    looked = ", ".join(str(root / name) for root in roots)
    if not download:
        raise EmbedkitError(f"dataset '{name}' not found; looked in: {looked}")
    target = cache_home() / "beir" / name
    try:
        _download(name, target)
    except Exception as err:  # any network or archive failure ends in the same one-line message
        raise EmbedkitError(
            f"dataset '{name}' not found (looked in: {looked}) and download from "
            f"{BEIR_URL.format(name=name)} failed: {err}"
        ) from None
    return target
