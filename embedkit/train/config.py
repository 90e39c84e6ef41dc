"""``TrainConfig``: every knob of ``embedkit train``, loadable from YAML and recorded in the model card."""

from __future__ import annotations

from dataclasses import dataclass, field

from embedkit.errors import EmbedkitError
from embedkit.models.options import DTYPE_NAMES
from embedkit.training.config import MAX_BATCH_SIZE, MAX_STEPS, RunConfig
from embedkit.validation import check_number

SPARSE_OBJECTIVES = ("splade", "splade-inference-free", "csr")
OBJECTIVES = ("supervised", "simcse", "cropping", "cross-encoder", *SPARSE_OBJECTIVES, "colbert")
SCORINGS = ("colbert", "xtr")  # late interaction: MaxSim over all document tokens, or XTR's top-k token retrieval
BI_ENCODER_LOSSES = ("infonce", "distill")
CROSS_ENCODER_LOSSES = ("bce", "listnet", "lambdaloss")
MIN_TEMPERATURE, MAX_TEMPERATURE = 1e-4, 100.0
MAX_NEGATIVES = 10_000
MAX_DIM = 1_000_000


@dataclass
class TrainConfig(RunConfig):
    """``dataset``: pairs from its qrels, or its corpus when unsupervised; ``data``: a JSONL of ``{"query",
    "positive", "negatives", "scores"}`` (e.g. from ``embedkit mine``)."""

    objective: str = "supervised"
    train_split: str = "train"
    num_negatives: int | None = None
    drop_short_examples: bool = False  # drop (and count) rows with fewer negatives instead of failing
    loss: str | None = None  # infonce | distill for a bi-encoder, bce | listnet | lambdaloss for a cross-encoder
    temperature: float = 0.05
    teacher_temperature: float = 1.0  # softmax temperature of the teacher's scores (distill)
    dev_fraction: float | None = None  # carve this share of the training queries out as a dev set (seeded by seed)
    dev_dtype: str = "float32"  # autocast of the dev evaluation (bfloat16 halves its time on a CPU with bf16 units)
    symmetric: bool = False
    learn_temperature: bool = False
    mini_batch_size: int | None = None  # GradCache when set
    matryoshka_dims: list[int] = field(default_factory=list)
    pooling: str | None = None
    eval_dataset: str | None = None  # evaluated once after training
    eval_split: str = "test"
    soup_last: int | None = None  # save the uniform average of the last N checkpoints
    keep_checkpoints: bool = False  # keep every checkpoint's weights in OUTPUT/checkpoints (for soups and merges)
    merge_with_base: float | str | None = None  # interpolate with the starting model: alpha in [0, 1], or "auto"
    flops_query_weight: float = 5e-5  # SPLADE's FLOPS regularisation of query vectors (sentence-transformers' default)
    flops_document_weight: float = 3e-5  # ... and of document vectors
    query_learning_rate: float = 1e-3  # the inference-free query table's learning rate
    csr_k: int = 96  # latents kept per vector by the sparse auto-encoder (csr)
    csr_beta: float = 0.1  # weight of CSR's auxiliary reconstruction loss
    csr_gamma: float = 1.0  # weight of CSR's ranking loss
    freeze_encoder: bool = False  # csr: train the sparse auto-encoder only, the dense model frozen
    new_mlm_head: bool = False  # splade: start from a model without an MLM head by drawing a new one (not advised)
    scoring: str = "colbert"  # how a late-interaction model scores while it trains (colbert | xtr)
    projection_dim: int = 128  # the token vectors' width, projected from the start model's (ColBERT's 128)

    def __post_init__(self) -> None:
        if self.loss is None:
            self.loss = "bce" if self.objective == "cross-encoder" else "infonce"
        if isinstance(self.merge_with_base, str) and self.merge_with_base != "auto":
            try:
                self.merge_with_base = float(self.merge_with_base)
            except ValueError:
                raise EmbedkitError(
                    f"expected alpha in [0, 1] or auto, not {self.merge_with_base!r}", field="merge_with_base"
                ) from None

    @property
    def has_dev_set(self) -> bool:
        return bool(self.dev_dataset or self.dev_fraction)

    @property
    def cross_encoder(self) -> bool:
        return self.objective == "cross-encoder"

    @property
    def family(self) -> str | None:
        """The family a sparse or late-interaction objective trains (``embedkit.train.recipes``); None for a dense
        bi-encoder or a cross-encoder, which train through sentence-transformers' own classes."""
        return {**dict.fromkeys(SPARSE_OBJECTIVES, "sparse"), "colbert": "multivector"}.get(self.objective)

    def check(self) -> None:
        if self.objective not in OBJECTIVES:
            raise EmbedkitError(f"unknown objective '{self.objective}' ({' | '.join(OBJECTIVES)})", field="objective")
        if self.objective == "supervised" and not (self.data or self.dataset):
            raise EmbedkitError("supervised training needs --data (JSONL) or --dataset (BEIR qrels)", field="data")
        if self.family is not None and not self.data:
            raise EmbedkitError(f"{self.objective} learns from query, positive, negatives: --data", field="data")
        if self.cross_encoder and not self.data:
            raise EmbedkitError("a cross-encoder learns from negatives: --data (from 'embedkit mine')", field="data")
        if self.objective in ("simcse", "cropping") and not self.dataset:
            raise EmbedkitError(f"{self.objective} needs a corpus: --dataset", field="dataset")
        losses = CROSS_ENCODER_LOSSES if self.cross_encoder else BI_ENCODER_LOSSES
        if self.loss not in losses:
            kind = "a cross-encoder" if self.cross_encoder else "a bi-encoder"
            raise EmbedkitError(f"unknown loss '{self.loss}' for {kind} ({' | '.join(losses)})", field="loss")
        if self.cross_encoder and (self.matryoshka_dims or self.mini_batch_size):
            raise EmbedkitError("Matryoshka and GradCache are bi-encoder settings", field="objective")
        if self.dev_dtype not in DTYPE_NAMES:
            raise EmbedkitError(f"unknown dtype '{self.dev_dtype}' ({' | '.join(DTYPE_NAMES)})", field="dev_dtype")
        check_number(self.dev_fraction, "dev_fraction", minimum=0, maximum=1)
        if self.dev_fraction is not None and not 0 < self.dev_fraction < 1:
            raise EmbedkitError(f"must be in (0, 1), not {self.dev_fraction}", field="dev_fraction")
        if self.dev_fraction is not None and self.objective in ("simcse", "cropping"):
            raise EmbedkitError(f"{self.objective} has no queries to carve a dev set from", field="dev_fraction")
        if self.dev_fraction is not None and not self.dataset:
            raise EmbedkitError("a dev set searches a corpus: give --dataset with --dev-fraction", field="dataset")
        if self.dev_fraction is not None and self.dev_dataset:
            raise EmbedkitError("give --dev-fraction or --dev-dataset, not both", field="dev_fraction")
        super().check()
        for name in ("temperature", "teacher_temperature"):
            # below 1e-4 the logits' scale (1 / T) overflows in half precision and the loss is NaN
            check_number(getattr(self, name), name, minimum=MIN_TEMPERATURE, maximum=MAX_TEMPERATURE)
        check_number(self.num_negatives, "num_negatives", minimum=0, maximum=MAX_NEGATIVES)
        check_number(self.mini_batch_size, "mini_batch_size", minimum=1, maximum=MAX_BATCH_SIZE)
        for i, dim in enumerate(self.matryoshka_dims):
            check_number(dim, f"matryoshka_dims[{i}]", minimum=1, maximum=MAX_DIM)
        self._check_weights()
        self._check_sparse()

    def _check_sparse(self) -> None:
        """The sparse and late-interaction objectives' settings; the dense-only ones refused."""
        for name in ("flops_query_weight", "flops_document_weight", "csr_beta", "csr_gamma"):
            check_number(getattr(self, name), name, minimum=0, maximum=MAX_TEMPERATURE)
        check_number(self.query_learning_rate, "query_learning_rate", minimum=0, maximum=1)
        check_number(self.csr_k, "csr_k", minimum=1, maximum=MAX_DIM)
        if self.freeze_encoder and self.objective != "csr":
            message = f"freezes CSR's dense model; objective {self.objective} has none"
            raise EmbedkitError(message, field="freeze_encoder")
        check_number(self.projection_dim, "projection_dim", minimum=1, maximum=MAX_DIM)
        if self.scoring not in SCORINGS:
            raise EmbedkitError(f"unknown scoring '{self.scoring}' ({' | '.join(SCORINGS)})", field="scoring")
        if self.family is None:
            return
        for name in ("matryoshka_dims", "mini_batch_size", "soup_last", "merge_with_base", "transfer_datasets"):
            if getattr(self, name) not in (None, [], False):
                raise EmbedkitError(f"a dense bi-encoder setting; not for {self.objective} (yet)", field=name)
        if self.objective in ("splade", "splade-inference-free") and not self.new_mlm_head:  # last: reads the model
            from embedkit.train.sparse import require_mlm_head

            require_mlm_head(self.model)

    def _check_weights(self) -> None:
        """Transfer, soups and merges: bi-encoder settings; an automatic alpha is chosen on the dev set."""
        for name in ("transfer_datasets", "soup_last", "merge_with_base"):
            if self.cross_encoder and getattr(self, name):
                raise EmbedkitError("a bi-encoder setting; not for the cross-encoder objective", field=name)
        check_number(self.soup_last, "soup_last", minimum=2, maximum=MAX_STEPS)
        if self.merge_with_base == "auto" and not self.has_dev_set:
            raise EmbedkitError("auto chooses alpha on a dev set: give --dev-dataset or --dev-fraction",
                                field="merge_with_base")  # fmt: skip
        if self.merge_with_base != "auto":
            check_number(self.merge_with_base, "merge_with_base", minimum=0, maximum=1)
