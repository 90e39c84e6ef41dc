"""Late interaction (ColBERT) through sentence-transformers' ``MultiVectorEncoder`` stack, on the same examples as
the dense fine-tune (``anchor, positive, negative_1..n``, and the teacher's scores for ``--loss distill``).

A start model that is not a ``MultiVectorEncoder`` gets ColBERT's recipe on its transformer: a projection of every
token vector to ``projection_dim`` (new, initialised from ``seed`` and recorded as such), the library's scoring mask,
L2-normalised token vectors; queries expanded with the tokenizer's mask token to 32 tokens (classic ColBERT's
query augmentation), documents up to ``max_length`` tokens. ``--scoring xtr`` trains with XTR's in-batch top-k token
retrieval instead of full MaxSim; the model is searched by MaxSim either way.
"""

from __future__ import annotations

from typing import Any

from embedkit.errors import EmbedkitError
from embedkit.models.reference import resolve_model
from embedkit.train.seeded import seeded

QUERY_TOKENS = 32  # ColBERT's query length: queries are padded with mask tokens up to it (and cut at it)
DOCUMENT_TOKENS = 256  # documents' default length when --max-length is not given


def build_multivector_model(model: str | None, max_length: int | None, dim: int, seed: int) -> tuple[Any, dict]:
    """The network to train and what it started from (a MultiVectorEncoder folder is trained further as it is)."""
    import torch
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.base.modules.dense import Dense
    from sentence_transformers.multi_vector_encoder import MultiVectorEncoder
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask

    from embedkit.models.multivector_model import is_multivector_folder

    reference = resolve_model(model, None)
    path = str(reference.path)
    started: dict[str, Any] = {"model": reference.name, "objective": "colbert"}
    if reference.path.is_dir() and is_multivector_folder(reference.path):
        network = MultiVectorEncoder(path)
        if max_length:
            network[0].document_length = max_length
        return network, started | {"continued": True}
    expansion = {"strategy": "fixed", "length": QUERY_TOKENS}
    transformer = Transformer(
        path, query_length=QUERY_TOKENS, document_length=max_length or DOCUMENT_TOKENS, query_expansion=expansion
    )
    width = transformer.get_embedding_dimension()
    with seeded(seed):  # the projection's start is the seed's, whatever loading the transformer drew
        projection = Dense(width, dim, bias=False, activation_function=torch.nn.Identity(),
                           module_input_name="token_embeddings")  # fmt: skip
    modules = [transformer, projection, MultiVectorMask(), Normalize(module_input_name="token_embeddings")]
    initialised = f"the token projection ({width} -> {dim}, no bias), from seed {seed}"
    return MultiVectorEncoder(modules=modules), started | {"initialised": initialised, "query_expansion": expansion}


def multivector_loss(config: Any, network: Any) -> Any:
    """The loss of ``config.loss`` (in-batch and hard negatives, or KL to the teacher's scores) under the scoring of
    ``config.scoring``."""
    from sentence_transformers.multi_vector_encoder import losses
    from sentence_transformers.multi_vector_encoder.scoring import XTRScores

    if config.loss not in ("infonce", "distill"):
        raise EmbedkitError(f"the colbert objective trains with infonce or distill, not {config.loss}", field="loss")
    scoring = {"similarity_fct": XTRScores()} if config.scoring == "xtr" else {}
    if config.loss == "distill":
        return losses.MultiVectorDistillKLDivLoss(network, teacher_temperature=config.teacher_temperature, **scoring)
    return losses.MultiVectorMultipleNegativesRankingLoss(network, **scoring)  # scale 1: MaxSim sums many cosines
