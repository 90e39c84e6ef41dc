"""Lists every line of ``embedkit/`` that dispatches on a family or engine by hand: a comparison with a ``kind`` or
an ``engine``, a ``.sparse`` / ``.multivector`` flag tested, or ``isinstance`` on a model, rows, index or retriever
spec class. The registries (``embedkit/index/registry.py``, the retriever specs' ``embedkit/search/retriever.py``) and
the encoder factory (``embedkit/models/loading.py``) are where such dispatch belongs and are not listed.
``python tests/kind_branches.py [--all] [PACKAGE]`` prints the count (and the lines); ``tests/test_structure.py``
keeps the count at or under its ceiling.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "embedkit"
# the registries: index engines, the encoder factory, and the retriever specs' registry (KINDS) with their mapping form
ALLOWED = {"index/registry.py", "models/loading.py", "search/retriever.py"}
# where "kind" or "family" means something else: a metadata field's type, a torch device, a cache entry, an output
# folder, a numpy dtype, a Python type, a FAISS index type (flat, IVF, HNSW)
OTHER_KINDS = {
    "index/filters.py",
    "index/store.py",
    "models/device.py",
    "cli/cache.py",
    "cli/options.py",
    "index/budget.py",
}
NOT_A_BRANCH = re.compile(r"""\bfor\b[^:]*\bkind\b[^:]*\bin\b|dtype\.kind|output_kind\(""")
CLASSES = (
    "EmbeddingModel|SparseModel|MultiVectorModel|StackModel|Encoder|"
    "SparseRows|TokenRows|Chunks|"
    "Index|LiveIndex|PartitionedIndex|ShardedIndex|SparseExactIndex|MultiVectorExactIndex|MultiVectorIVFIndex|"
    "LuceneImpact|SeismicSparse|"
    "Dense|BM25|Sparse|LateInteraction|Hybrid"
)
PATTERNS = [
    re.compile(r"""\b(kind|family)\b\s*(==|!=|\bin\b|\bnot in\b)|(==|!=)\s*\w*\.?(kind|family)\b"""),
    re.compile(r"""getattr\([^,]+,\s*["']kind["']"""),
    re.compile(r"""\.get\(\s*["']kind["']\s*\)\s*(==|!=|\bin\b)"""),
    re.compile(r"""\bengine\b\s*(==|!=|\bin\b|\bnot in\b)"""),
    re.compile(r"""\b(if|and|or|not|elif)\b[^#]*\.(sparse|multivector)\b(?!\s*=[^=])(?!\()"""),
    re.compile(rf"""isinstance\([^)]*\b({CLASSES})\b"""),
]


def kind_branches(package: Path = PACKAGE) -> list[str]:
    found = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package).as_posix()
        if relative in ALLOWED or relative in OTHER_KINDS:
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            code = line.split("#", 1)[0]
            if code.strip().startswith(('"', "'")) or not code.strip() or NOT_A_BRANCH.search(code):
                continue
            if any(pattern.search(code) for pattern in PATTERNS):
                found.append(f"embedkit/{relative}:{number}: {line.strip()}")
    return found


if __name__ == "__main__":
    folders = [Path(arg) for arg in sys.argv[1:] if not arg.startswith("--")]
    lines = kind_branches(*folders[:1])
    if "--all" in sys.argv:
        print("\n".join(lines))
    print(f"{len(lines)} lines dispatch on a kind outside the registry and the encoder factory")
