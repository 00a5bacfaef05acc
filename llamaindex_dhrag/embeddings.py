"""Embeddings both ways between LlamaIndex and ``dhrag_core``.

* ``LlamaIndexEmbedder``: any LlamaIndex ``BaseEmbedding`` as DH-RAG's embedder.
* ``DHRAGEmbedding``: the other way round, a dhrag embedder (offline MiniLM by default) as a
  LlamaIndex ``BaseEmbedding``, e.g. for ``VectorStoreIndex``.
* ``as_embedder``: whichever of the two an argument is, as the engine's embedder.
"""

from __future__ import annotations

import asyncio
import threading
import warnings
from collections.abc import Sequence
from typing import Any, Self

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from llama_index.core.bridge.pydantic import PrivateAttr

from dhrag_core import Embedder
from dhrag_core.embedding import FunctionEmbedder, default_embedder
from dhrag_core.records import Vector
from llamaindex_dhrag._stack import caller_level

__all__ = ["DHRAGEmbedding", "LlamaIndexEmbedder", "as_embedder"]


class LlamaIndexEmbedder(FunctionEmbedder):
    """Any LlamaIndex ``BaseEmbedding`` as a dhrag ``Embedder``.

    Texts are embedded with the model's text embedding (dhrag uses one space for queries,
    responses and passages) and returned as L2-normalised float32 rows.

    Args:
        embed_model: The LlamaIndex embedding model.
        dimension: Its output size; when omitted it is found by embedding a probe text on
            first use of ``dimension`` (not at construction).

    Example:
        >>> from llama_index.core.embeddings import MockEmbedding
        >>> emb = LlamaIndexEmbedder(MockEmbedding(embed_dim=8))
        >>> emb.dimension, emb.encode(["a", "b"]).shape
        (8, (2, 8))
    """

    def __init__(self, embed_model: BaseEmbedding, dimension: int | None = None) -> None:
        if not isinstance(embed_model, BaseEmbedding):
            raise TypeError(
                "embed_model must be a llama_index BaseEmbedding, "
                f"got {type(embed_model).__name__}"
            )
        super().__init__(embed_model.get_text_embedding_batch, dimension, name="embed_model")
        self.embed_model = embed_model
        self._first: list[tuple[str, Vector]] = []  # distinct texts seen, until it is known
        self._known = False  # whether the model tells texts apart is known (and said)
        self._check_lock = threading.Lock()

    def encode(self, texts: Sequence[str]) -> Vector:
        rows = super().encode(texts)
        if not self._known:
            self._check_distinct(texts, rows)
        return rows

    def _check_distinct(self, texts: Sequence[str], rows: Vector) -> None:
        """Warn once if the first three different texts get one vector (``MockEmbedding``):
        DH-RAG would take every turn for a near-duplicate of the one before."""
        with self._check_lock:
            for text, row in zip(texts, rows, strict=True):
                if self._known or any(text == t for t, _ in self._first):
                    continue
                if self._first and not np.allclose(row, self._first[0][1], atol=1e-6):
                    self._known, self._first = True, []
                    return
                self._first.append((text, row))
                if len(self._first) == 3:
                    self._known, self._first = True, []
                    warnings.warn(
                        f"{type(self.embed_model).__name__} gives the same vector to different "
                        "texts (as llama_index's MockEmbedding does): DH-RAG cannot tell turns "
                        "apart, so each new turn is merged into the one before as a "
                        "near-duplicate (only the latest is kept). For tests, give DH-RAG an "
                        "embedder that tells texts apart: embedder=HashingEmbedder() (dhrag_core; "
                        "offline, deterministic) or DHRAGEmbedding(HashingEmbedder()) for the "
                        "index too; in use, a real embedding model.",
                        UserWarning, stacklevel=caller_level())


class DHRAGEmbedding(BaseEmbedding):
    """A dhrag ``Embedder`` as a LlamaIndex ``BaseEmbedding`` (for ``VectorStoreIndex`` etc.).

    Queries and texts are embedded alike. Async calls run the embedder in a worker thread, so
    they do not block the event loop. Nothing is loaded until the first embedding.

    Args:
        embedder: A dhrag embedder; default: the offline all-MiniLM-L6-v2 in NumPy
            (``NumpyMiniLMEmbedder``).
        model_name: Reported model name; default ``"dhrag:<EmbedderClass>"``.
        embed_batch_size: Texts per batch.
        **kwargs: Other ``BaseEmbedding`` fields (``callback_manager``...).

    Example:
        >>> from dhrag_core import HashingEmbedder
        >>> emb = DHRAGEmbedding(HashingEmbedder(dimension=64))
        >>> len(emb.get_query_embedding("How long is the Great Wall?"))
        64
    """

    _embedder: Embedder = PrivateAttr()

    def __init__(
        self,
        embedder: Embedder | None = None,
        *,
        model_name: str | None = None,
        embed_batch_size: int = 64,
        **kwargs: Any,
    ) -> None:
        if embedder is None:
            embedder = default_embedder()
        if not isinstance(embedder, Embedder):
            raise TypeError(
                "embedder must have .dimension and .encode(texts) (dhrag Embedder protocol), "
                f"got {type(embedder).__name__}"
            )
        super().__init__(
            model_name=model_name or f"dhrag:{type(embedder).__name__}",
            embed_batch_size=embed_batch_size,
            **kwargs,
        )
        self._embedder = embedder

    @classmethod
    def class_name(cls) -> str:
        return "DHRAGEmbedding"

    @classmethod
    def from_dict(cls, data: dict[str, Any], **kwargs: Any) -> Self:
        """Rebuild from ``to_dict()``. The dict does not hold the embedder: pass ``embedder=``
        unless it names the default one (a ``ValueError`` rather than another model)."""
        if kwargs.get("embedder") is None:
            default = f"dhrag:{type(default_embedder()).__name__}"
            if data.get("model_name") != default:
                raise ValueError(
                    f"DHRAGEmbedding.from_dict: the dict names {data.get('model_name')!r}, "
                    f"not the default {default!r}; pass the embedder itself: "
                    "DHRAGEmbedding.from_dict(data, embedder=...)")
        return super().from_dict(data, **kwargs)

    @property
    def embedder(self) -> Embedder:
        """The wrapped dhrag embedder."""
        return self._embedder

    def _encode(self, texts: list[str]) -> list[Embedding]:
        rows: list[Embedding] = self._embedder.encode(texts).astype(float).tolist()
        return rows

    def _get_query_embedding(self, query: str) -> Embedding:
        return self._encode([query])[0]

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return (await asyncio.to_thread(self._encode, [query]))[0]

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._encode([text])[0]

    async def _aget_text_embedding(self, text: str) -> Embedding:
        return (await asyncio.to_thread(self._encode, [text]))[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return self._encode(texts)

    async def _aget_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return await asyncio.to_thread(self._encode, texts)


def as_embedder(embedder: Embedder | BaseEmbedding | None) -> Embedder | None:
    """A LlamaIndex ``BaseEmbedding`` as the engine's embedder (the dhrag embedder inside a
    ``DHRAGEmbedding`` directly); a dhrag ``Embedder`` or None as it is."""
    if isinstance(embedder, DHRAGEmbedding):
        return embedder.embedder  # no round trip through LlamaIndex lists
    if isinstance(embedder, BaseEmbedding):
        return LlamaIndexEmbedder(embedder)
    return embedder
