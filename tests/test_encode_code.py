"""The embeddings cache knows embedkit's own code: ``ENCODE_CODE`` (part of every cache key) names the state of the
code that makes vectors, ``embedkit/models/*.py``, by a digest of its syntax (docstrings and comments left out). A
change there without a new ``ENCODE_CODE`` fails here, so vectors cached by the old code are never reused."""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

from embedkit.encode.cache import ENCODE_CODE, embeddings_key

MODELS = Path(__file__).resolve().parents[1] / "embedkit" / "models"
# ENCODE_CODE -> the digest of the code it names; a new state of the code is a new entry (and a new ENCODE_CODE)
DIGESTS = {2: "a5e034ed54292672c4a9711e585b75a76ef085a3125f5d1c785bfd9ada380c26"}


def code_digest() -> str:
    """sha256 over every models/*.py module's syntax tree, docstrings dropped (a comment or docstring edit is no
    change to the vectors)."""
    digest = hashlib.sha256()
    for path in sorted(MODELS.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(
                getattr(body[0], "value", None), ast.Constant) and isinstance(body[0].value.value, str):  # fmt: skip
                node.body = body[1:] or [ast.Pass()]
        digest.update(path.name.encode() + b"\0" + ast.dump(tree).encode() + b"\0")
    return digest.hexdigest()


def test_the_vector_code_has_not_changed_without_a_new_encode_code():
    assert DIGESTS.get(ENCODE_CODE) == code_digest(), (
        "embedkit/models changed: raise embedkit.encode.cache.ENCODE_CODE and record "
        f"{{{ENCODE_CODE + 1}: '{code_digest()}'}} in tests/test_encode_code.py"
    )


def test_the_encode_code_is_part_of_the_cache_key(monkeypatch):
    import embedkit.encode.cache as cache

    before = embeddings_key({"model": "m"}, "c" * 64)
    monkeypatch.setattr(cache, "ENCODE_CODE", ENCODE_CODE + 1)
    assert embeddings_key({"model": "m"}, "c" * 64) != before
