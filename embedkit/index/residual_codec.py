"""ColBERTv2's residual compression of token vectors: each token is its nearest centroid's id plus ``bits`` bits per
dimension that pick one of ``2**bits`` residual values (cut at quantiles of the residuals seen in training, per
dimension: a dimension whose residuals spread less gets narrower buckets).

A 128-dimensional token at 2 bits is a 2-byte centroid id and 32 bytes, against 256 bytes in float16. The centroids
are FAISS k-means; assignment is FAISS's exact inner-product search over them. Decoding is one table lookup per
stored byte, so decompressing a candidate document costs a gather, not arithmetic per dimension.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import faiss
import numpy as np

from embedkit.errors import EmbedkitError

BITS = (1, 2, 4, 8)
TRAIN_PER_CENTROID = 32  # token vectors k-means sees per centroid: stable centroids, a fraction of a corpus's tokens
NORMALISED = 1e-3  # vectors whose norms are all within this of 1 are decoded back onto the unit sphere


@dataclass(frozen=True)
class ResidualCodec:
    centroids: np.ndarray  # float32 [centroids, dim], unit length for normalised tokens
    cutoffs: np.ndarray  # float32 [dim, 2**bits - 1]: a residual below a dimension's cut goes to the bucket below it
    weights: np.ndarray  # float32 [dim, 2**bits]: the value each bucket decodes to (its residuals' median)
    bits: int
    normalised: bool

    @classmethod
    def train(cls, vectors: np.ndarray, centroids: int, bits: int, seed: int = 0) -> ResidualCodec:
        """Centroids by k-means on a seeded sample; residual buckets at the quantiles of the sample's residuals."""
        if bits not in BITS or vectors.shape[1] * bits % 8:
            raise EmbedkitError(f"bits must be one of {BITS} and fill whole bytes of {vectors.shape[1]} dimensions",
                                field="bits")  # fmt: skip
        picked = np.random.default_rng(seed).permutation(len(vectors))[: TRAIN_PER_CENTROID * centroids]
        sample = vectors[np.sort(picked)]
        sample = np.ascontiguousarray(sample, dtype=np.float32)
        norms = np.linalg.norm(sample, axis=1)
        normalised = bool(len(norms)) and bool(np.all(np.abs(norms - 1) < NORMALISED))
        kmeans = faiss.Kmeans(sample.shape[1], centroids, niter=20, seed=seed, spherical=normalised,
                              min_points_per_centroid=1)  # fmt: skip
        kmeans.train(sample)
        dim, levels = sample.shape[1], 2**bits
        partial = cls(kmeans.centroids.astype(np.float32), np.zeros((dim, 0), np.float32),
                      np.zeros((dim, 1), np.float32), bits, normalised)  # fmt: skip
        residuals = sample - partial.centroids[partial.assign(sample)]
        cutoffs = np.quantile(residuals, np.arange(1, levels) / levels, axis=0).T.astype(np.float32)
        weights = np.quantile(residuals, (np.arange(levels) + 0.5) / levels, axis=0).T.astype(np.float32)
        return cls(partial.centroids, np.ascontiguousarray(cutoffs), np.ascontiguousarray(weights), bits, normalised)

    @property
    def dim(self) -> int:
        return int(self.centroids.shape[1])

    def assign(self, vectors: np.ndarray) -> np.ndarray:
        """Each vector's nearest centroid by inner product (FAISS's exact search over the centroids)."""
        search = faiss.IndexFlatIP(self.dim)
        search.add(self.centroids)
        _, nearest = search.search(np.ascontiguousarray(vectors, dtype=np.float32), 1)
        return nearest[:, 0].astype(self.code_dtype)

    @property
    def code_dtype(self) -> type:
        return np.uint16 if len(self.centroids) <= 1 << 16 else np.int32

    def encode(self, vectors: np.ndarray, block: int = 1 << 16) -> tuple[np.ndarray, np.ndarray]:
        """(centroid ids [tokens], packed residual buckets uint8 [tokens, dim * bits / 8]), a block at a time."""
        codes, packed = [], []
        for start in range(0, len(vectors), block):
            part = np.asarray(vectors[start : start + block], dtype=np.float32)
            code = self.assign(part)
            residual = part - self.centroids[code]
            buckets = (residual[:, :, None] > self.cutoffs[None]).sum(axis=2, dtype=np.uint8)
            codes.append(code)
            packed.append(self._pack(buckets))
        if not codes:
            return np.zeros(0, self.code_dtype), np.zeros((0, self.dim * self.bits // 8), np.uint8)
        return np.concatenate(codes), np.concatenate(packed)

    def _pack(self, buckets: np.ndarray) -> np.ndarray:
        per_byte = 8 // self.bits
        grouped = buckets.reshape(len(buckets), -1, per_byte).astype(np.uint16)
        shifts = (np.arange(per_byte) * self.bits)[::-1]
        return (grouped << shifts).sum(axis=2).astype(np.uint8)

    @cached_property
    def table(self) -> np.ndarray:
        """The residual values each stored byte decodes to, by its position: float32 [positions * 256, 8 / bits]
        (row ``position * 256 + byte``)."""
        per_byte = 8 // self.bits
        shifts = (np.arange(per_byte) * self.bits)[::-1]
        buckets = (np.arange(256)[:, None] >> shifts) & (2**self.bits - 1)  # [256, per_byte]
        dims = np.arange(self.dim).reshape(-1, 1, per_byte)  # [positions, 1, per_byte]
        return self.weights[dims, buckets[None]].reshape(-1, per_byte).astype(np.float32)

    def decode(self, codes: np.ndarray, packed: np.ndarray) -> np.ndarray:
        """float32 [tokens, dim]: centroid plus residual values, back on the unit sphere for normalised tokens."""
        rows = packed + (np.arange(packed.shape[1], dtype=np.int32) * 256)[None, :]
        vectors = self.centroids[codes] + self.table[rows].reshape(len(codes), self.dim)
        if self.normalised:
            vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return vectors

    def arrays(self) -> dict[str, np.ndarray]:
        return {"centroids": self.centroids, "cutoffs": self.cutoffs, "weights": self.weights}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], bits: int, normalised: bool) -> ResidualCodec:
        return cls(arrays["centroids"].astype(np.float32), arrays["cutoffs"].astype(np.float32),
                   arrays["weights"].astype(np.float32), int(bits), bool(normalised))  # fmt: skip
