"""MultiVectorModel: a sentence-transformers ``MultiVectorEncoder`` (ColBERT-style late interaction) plus the settings
that decide its vectors, with the same surface as ``EmbeddingModel`` so a multi-vector model is a model like any other.

Encoding is sentence-transformers' own ``encode_query``/``encode_document`` (its prefixes, query and document lengths,
skiplist and token pooling), taken a chunk of texts at a time and kept as ``TokenRows`` in the recorded
``token_dtype``: never a padded ``[texts, tokens, dim]`` block.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any

from embedkit.errors import EmbedkitError
from embedkit.models.stack_model import StackModel, stack_identity
from embedkit.multivector import TOKEN_DTYPES, TokenRows
from embedkit.storage import read_json
from embedkit.validation import check_number

MULTIVECTOR_MODEL_TYPE = "MultiVectorEncoder"


def is_multivector_folder(path: Path) -> bool:
    """A folder sentence-transformers saved from a ``MultiVectorEncoder`` (``config_sentence_transformers.json``)."""
    config = path / "config_sentence_transformers.json"
    found = read_json(config) if config.is_file() else {}
    return isinstance(found, dict) and found.get("model_type") == MULTIVECTOR_MODEL_TYPE


class MultiVectorModel(StackModel):
    """Encodes queries and documents to ``TokenRows`` with recorded settings; ``.st`` is the ``MultiVectorEncoder``."""

    kind = "multivector"
    identity = ("model", "weights_sha256", "dim", "max_length", "document_prompt")  # what made the documents' vectors

    def __init__(self, st: Any, *, pool_factor: float = 1.0, token_dtype: str = "float16", **common: Any) -> None:
        super().__init__(st, **common)
        self.pool_factor, self.token_dtype = pool_factor, token_dtype

    @property
    def max_length(self) -> int | None:
        """The document length (sentence-transformers' ``document_length``, else its max sequence length)."""
        length = getattr(self.st[0], "document_length", None) or self.st.max_seq_length
        return None if length is None else int(length)

    @property
    def query_length(self) -> int | None:
        length = getattr(self.st[0], "query_length", None)
        return None if length is None else int(length)

    @cached_property
    def dim(self) -> int:
        return int(self.st.get_embedding_dimension())

    @property
    def settings(self) -> dict[str, Any]:
        """Everything that changes the vectors, as recorded in manifests, indexes and reports."""
        return self.recorded({
            "model": self.name,
            "revision": self.revision,
            "weights_sha256": self.weights_sha256,
            "kind": self.kind,
            "query_prompt": self.query_prompt,
            "document_prompt": self.document_prompt,
            "max_length": self.max_length,
            "query_length": self.query_length,
            "pool_factor": self.pool_factor,
            "token_dtype": self.token_dtype,
            "dtype": self.dtype,
            "dim": self.dim,
            "similarity": "maxsim",
        })

    def _encode_chunk(self, encode: Any, texts: list[str], prompt: str | None) -> TokenRows:
        pooling = None
        if self.pool_factor != 1:  # the library's hierarchical pooling, of documents only (its default)
            from sentence_transformers.multi_vector_encoder.modules import HierarchicalTokenPooling

            pooling = HierarchicalTokenPooling(pool_factor=self.pool_factor)
        rows = encode(texts, prompt=prompt, batch_size=self.batch_size, convert_to_numpy=True, token_pooling=pooling)
        return TokenRows.from_list(rows, self.dim, self.token_dtype)

    def _stack(self, parts: list[TokenRows]) -> TokenRows:
        return TokenRows.vstack(parts, self.dim, self.token_dtype)


def load_multivector(name: str, path: Path | None, revision: str | None, *, device: str, dtype: str, **options: Any):
    """A ``MultiVectorEncoder`` folder or Hub name as a ``MultiVectorModel`` (prompts and lengths the folder's own
    unless given; ``max_length`` sets the document length)."""
    from sentence_transformers.multi_vector_encoder import MultiVectorEncoder

    from embedkit.models.options import check_max_length, longest_input

    pool_factor = 1.0 if options.get("pool_factor") is None else options["pool_factor"]
    check_number(pool_factor, "pool_factor", minimum=1)
    token_dtype = options.get("token_dtype") or "float16"
    if token_dtype not in TOKEN_DTYPES:
        raise EmbedkitError(f"unknown token dtype '{token_dtype}' (choose from {', '.join(TOKEN_DTYPES)})",
                            field="token_dtype")  # fmt: skip
    network = MultiVectorEncoder(str(path) if path is not None else name, device=device, revision=revision)
    if options.get("max_length") is not None:
        check_max_length(options["max_length"], longest_input(network[0].auto_model.config), path=path)
        network[0].document_length = options["max_length"]
    return MultiVectorModel(
        network,
        **stack_identity(network, name, path, revision, **options),
        dtype=dtype,
        device=device,
        chunking=options.get("chunking"),
        pool_factor=float(pool_factor),
        token_dtype=token_dtype,
    )
