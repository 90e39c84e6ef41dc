"""SparseModel: a sentence-transformers ``SparseEncoder`` (SPLADE, inference-free SPLADE, CSR) plus the settings
that decide its vectors, with the same surface as ``EmbeddingModel`` so a sparse model is a model like any other.

Encoding is sentence-transformers' own ``encode_query``/``encode_document`` (so the vectors are the library's, bit
for bit), taken a chunk of texts at a time and kept as ``SparseRows``: never a dense ``[texts, vocabulary]`` array.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from embedkit.models.stack_model import StackModel, stack_identity
from embedkit.sparse import SparseRows
from embedkit.storage import read_json

SPARSE_MODEL_TYPE = "SparseEncoder"


def is_sparse_folder(path: Path) -> bool:
    """A folder sentence-transformers saved from a ``SparseEncoder`` (``config_sentence_transformers.json``)."""
    config = path / "config_sentence_transformers.json"
    found = read_json(config) if config.is_file() else {}
    return isinstance(found, dict) and found.get("model_type") == SPARSE_MODEL_TYPE


def sparse_kind(network: Any) -> str:
    """``splade``, ``splade-inference-free`` (a query route that only looks tokens up) or ``csr`` (a sparse
    auto-encoder over a dense model's vector), from the modules of the stack."""
    names = {type(module).__name__ for module in network.modules()}
    if "Router" in names:
        return "splade-inference-free"
    if "SparseAutoEncoder" in names:
        return "csr"
    return "splade"


class SparseModel(StackModel):
    """Encodes queries and documents to ``SparseRows`` with recorded settings; ``.st`` is the ``SparseEncoder``."""

    kind = "sparse"
    identity = ("weights_sha256", "dim")  # the same weights read from another folder encode the same vectors

    def __init__(self, st: Any, *, max_active_dims: int | None = None, **common: Any) -> None:
        super().__init__(st, **common)
        self.max_active_dims = max_active_dims

    @property
    def max_length(self) -> int | None:
        length = self.st.max_seq_length
        return None if length is None else int(length)

    @cached_property
    def dim(self) -> int:
        """Dimensions of the vectors (a vocabulary, or the auto-encoder's latents), read from the output of one
        text: the stack's own ``get_embedding_dimension`` names the transformer's width until a first forward."""
        return int(self.st.encode_document(["dimension"], convert_to_sparse_tensor=True).shape[1])

    @property
    def settings(self) -> dict[str, Any]:
        """Everything that changes the vectors, as recorded in manifests, indexes and reports."""
        return self.recorded({
            "model": self.name,
            "revision": self.revision,
            "weights_sha256": self.weights_sha256,
            "kind": self.kind,
            "sparse_kind": sparse_kind(self.st),
            "query_prompt": self.query_prompt,
            "document_prompt": self.document_prompt,
            "max_length": self.max_length,
            "max_active_dims": self.max_active_dims,
            "dtype": self.dtype,
            "dim": self.dim,
            "similarity": "dot",
        })

    def _encode_chunk(self, encode: Any, texts: list[str], prompt: str | None) -> SparseRows:
        vectors = encode(texts, prompt=prompt, batch_size=self.batch_size, convert_to_sparse_tensor=True,
                         max_active_dims=self.max_active_dims)  # fmt: skip
        return SparseRows.from_torch(vectors)

    def _stack(self, parts: list[SparseRows]) -> SparseRows:
        return SparseRows.vstack(parts, self.dim)

    def token_names(self, indices: Sequence[int]) -> list[str]:
        """The vocabulary's words for these dimensions (a CSR latent is named ``c<index>``)."""
        if sparse_kind(self.st) == "csr":
            return [f"c{i}" for i in indices]
        return self.st.tokenizer.convert_ids_to_tokens([int(i) for i in indices])


def load_sparse(name: str, path: Path | None, revision: str | None, *, device: str, dtype: str, **options: Any):
    """A ``SparseEncoder`` folder or Hub name as a ``SparseModel`` (prompts and max length the folder's own unless
    given)."""
    from sentence_transformers.sparse_encoder import SparseEncoder

    from embedkit.models.options import check_max_length, longest_input

    network = SparseEncoder(str(path) if path is not None else name, device=device, revision=revision)
    if options.get("max_length") is not None:
        transformers = [m.auto_model for m in network.modules() if hasattr(m, "auto_model")]  # under a Router too
        limit = longest_input(transformers[0].config) if transformers else None
        check_max_length(options["max_length"], limit, path=path)  # the position table, not the saved max length
        network.max_seq_length = options["max_length"]
    return SparseModel(
        network,
        **stack_identity(network, name, path, revision, **options),
        dtype=dtype,
        device=device,
        chunking=options.get("chunking"),
        max_active_dims=options.get("max_active_dims") or network.max_active_dims,  # recorded as in effect (CSR's k)
    )
