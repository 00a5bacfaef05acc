"""Embeddings both ways between LangChain and ``dhrag_core``.

* ``LangChainEmbedder``: any LangChain ``Embeddings`` as DH-RAG's embedder (``Embedder``).
* ``DHRAGEmbeddings``: a DH-RAG embedder (such as ``MiniLMEmbedder``) as LangChain
  ``Embeddings``, for vector stores; it remembers recent vectors so passages found in such a
  store are not encoded again.
* ``as_embedder``: whichever of the two an argument is, as the engine's embedder.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

from dhrag_core import Embedder, l2_normalise
from dhrag_core.embedding import FunctionEmbedder
from dhrag_core.validation import check_texts

__all__ = ["DHRAGEmbeddings", "LangChainEmbedder", "as_embedder"]


class LangChainEmbedder(FunctionEmbedder):
    """Any LangChain ``Embeddings`` as a DH-RAG embedder (``Embedder`` protocol).

    ``encode`` calls ``embed_documents`` (for queries too: DH-RAG compares queries with
    queries, responses and passages in one space) and returns L2-normalised float32 rows.

    Args:
        embeddings: The LangChain embeddings.
        dimension: The vector size; when not given it is found on first use by embedding a
            short probe text (on Python < 3.12 the engine's ``isinstance`` check of the
            embedder is a first use; pass ``dimension`` to avoid that call).

    Example:
        >>> from dhrag_core import HashingEmbedder
        >>> emb = LangChainEmbedder(DHRAGEmbeddings(HashingEmbedder(64)))
        >>> emb.encode(["a wall", "a pig"]).shape
        (2, 64)
    """

    def __init__(self, embeddings: Embeddings, dimension: int | None = None) -> None:
        if not isinstance(embeddings, Embeddings):
            raise TypeError(
                f"embeddings must be a LangChain Embeddings, got {type(embeddings).__name__}"
            )
        super().__init__(embeddings.embed_documents, dimension, name="embeddings")
        self.embeddings = embeddings


class DHRAGEmbeddings(Embeddings):
    """A DH-RAG embedder as LangChain ``Embeddings`` (for vector stores).

    It remembers the vectors of the last ``cache_size`` texts it embedded, so that a
    ``DHRAGRetriever`` over a vector store built with it gets the passages' vectors back
    without encoding them again.

    Args:
        embedder: Any dhrag ``Embedder``: ``MiniLMEmbedder()`` (offline all-MiniLM-L6-v2,
            loaded on first use), ``HashingEmbedder()``, ...
        cache_size: Texts whose vectors are kept (0: none).

    Example:
        ```python
        from langchain_core.vectorstores import InMemoryVectorStore
        from dhrag_core import MiniLMEmbedder

        store = InMemoryVectorStore(DHRAGEmbeddings(MiniLMEmbedder()))
        store.add_texts(["The Great Wall is 21,196 km long."])
        ```
    """

    def __init__(self, embedder: Embedder, *, cache_size: int = 10_000) -> None:
        if not isinstance(embedder, Embedder):
            raise TypeError(
                "embedder must have .dimension and .encode(texts) (dhrag Embedder), got "
                f"{type(embedder).__name__}"
            )
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 0:
            raise ValueError(f"cache_size must be an int >= 0, got {cache_size!r}")
        self.embedder = embedder
        self.cache_size = cache_size
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """The embedder's ``(n, dimension)`` float32 matrix, cached vectors reused."""
        items = check_texts(texts)
        if not self.cache_size:
            return self.embedder.encode(items)
        out = np.zeros((len(items), self.embedder.dimension), dtype=np.float32)
        with self._lock:
            missing = []
            for i, t in enumerate(items):
                v = self._cache.get(t)
                if v is None:
                    missing.append(i)
                else:
                    out[i] = v
                    self._cache.move_to_end(t)
        if missing:
            out[missing] = self.embedder.encode([items[i] for i in missing])
            with self._lock:
                for i in missing:
                    self._cache[items[i]] = out[i].copy()
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
        return out

    def preload(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Put vectors computed elsewhere by the same model into the cache (for example the
        MiniLM vectors shipped with a corpus), so that indexing ``texts`` encodes nothing.

        Example:
            ```python
            kb = dhrag_core.app.demo.load_demo_kb(embedder)  # shipped MiniLM vectors
            embeddings.preload([p.text for p in kb.passages], kb.vectors)
            ```
        """
        items = check_texts(texts)
        m = np.asarray(vectors, dtype=np.float32)
        if m.shape != (len(items), self.embedder.dimension):
            raise ValueError(
                f"vectors must have shape ({len(items)}, {self.embedder.dimension}), got "
                f"{m.shape}"
            )
        if not np.isfinite(m).all():
            raise ValueError("vectors must be finite")
        if len(items) > self.cache_size:
            raise ValueError(
                f"cannot preload {len(items)} texts into a cache of {self.cache_size}; "
                "raise cache_size"
            )
        m = l2_normalise(m)
        with self._lock:
            for t, v in zip(items, m, strict=True):
                self._cache[t] = v
                self._cache.move_to_end(t)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        items = check_texts(texts)
        if not items:
            return []
        out: list[list[float]] = self.encode(items).astype(float).tolist()
        return out

    def embed_query(self, text: str) -> list[float]:
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return self.embed_documents([text])[0]


def as_embedder(embedder: Any) -> Embedder | None:
    """A LangChain ``Embeddings`` as a dhrag embedder (the embedder inside a
    ``DHRAGEmbeddings`` is used directly); a dhrag ``Embedder`` or None as it is."""
    if embedder is None or isinstance(embedder, Embedder):
        return embedder
    if isinstance(embedder, DHRAGEmbeddings):
        return embedder.embedder
    if isinstance(embedder, Embeddings):
        return LangChainEmbedder(embedder)
    raise TypeError(
        "embedder must be a dhrag Embedder or a LangChain Embeddings, got "
        f"{type(embedder).__name__}"
    )
