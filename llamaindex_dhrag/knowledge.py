"""A LlamaIndex retriever as DH-RAG's static knowledge base K.

* ``RetrieverKnowledgeBase``: any LlamaIndex ``BaseRetriever``, searched by the rewritten
  query's text.
* ``VectorStoreKnowledgeBase``: a vector index's retriever searched by DH-RAG's expanded
  query vector (a ``QueryBundle`` carrying the embedding).
* ``knowledge_and_embedder``: which path a retriever gets (by vector or by text) and the
  embedder of the engine (the index's own embedding model when it has one).

The LangChain adapter has the same two classes under the same names.
``VectorStoreKnowledgeBase`` was ``VectorIndexKnowledgeBase``, a name that still works for one
release (with a ``DeprecationWarning``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.indices.vector_store.retrievers.retriever import VectorIndexRetriever
from llama_index.core.schema import QueryBundle
from llama_index.core.vector_stores.types import VectorStoreQueryMode

from dhrag_core import Embedder, KnowledgeBase, Passage
from dhrag_core.deprecation import renamed_attribute
from dhrag_core.knowledge.base import query_rows
from dhrag_core.knowledge.path import search_path
from dhrag_core.validation import SearchPath, check_k
from llamaindex_dhrag.convert import node_to_passage
from llamaindex_dhrag.embeddings import DHRAGEmbedding, as_embedder

__all__ = [
    "RetrieverKnowledgeBase",
    "VectorStoreKnowledgeBase",
    "dense",
    "knowledge_and_embedder",
]


class RetrieverKnowledgeBase:
    """DH-RAG's knowledge base K over any LlamaIndex retriever (``index.as_retriever()``).

    ``search(query, k)`` runs the retriever on the (rewritten) query and keeps its first ``k``
    nodes, as passages. How many nodes the retriever returns is its own setting: give it at
    least ``Settings.retrieval.kb_k`` (``index.as_retriever(similarity_top_k=20)``) so the
    integration step has candidates to weigh. Passages carry no vectors; the DH-RAG embedder
    encodes them.

    Args:
        retriever: Any LlamaIndex ``BaseRetriever``.

    Example:
        >>> kb = RetrieverKnowledgeBase(index.as_retriever(similarity_top_k=20))  # doctest: +SKIP
        >>> kb.search("How long is the Great Wall?", k=5)[0].text  # doctest: +SKIP
    """

    def __init__(self, retriever: BaseRetriever) -> None:
        if not isinstance(retriever, BaseRetriever):
            raise TypeError(
                "retriever must be a llama_index BaseRetriever (e.g. index.as_retriever()), "
                f"got {type(retriever).__name__}"
            )
        self.retriever = retriever

    def search(self, query: str, k: int) -> list[Passage]:
        """The retriever's first ``k`` nodes for ``query``, as passages."""
        check_k(k)
        return [node_to_passage(n) for n in self.retriever.retrieve(query)[:k]]

    async def asearch(self, query: str, k: int) -> list[Passage]:
        """``search`` without blocking the event loop.

        A retriever with its own ``_aretrieve`` (e.g. ``VectorIndexRetriever``) is awaited; one
        without it would run its synchronous ``_retrieve`` on the loop (LlamaIndex's default),
        so it is run in a worker thread instead.
        """
        check_k(k)
        if type(self.retriever)._aretrieve is BaseRetriever._aretrieve:
            nodes = await asyncio.to_thread(self.retriever.retrieve, query)
        else:
            nodes = await self.retriever.aretrieve(query)
        return [node_to_passage(n) for n in nodes[:k]]


class VectorStoreKnowledgeBase(RetrieverKnowledgeBase):
    """A vector index's retriever (``index.as_retriever()``) searched by vector.

    ``search_vectors``/``asearch_vectors`` hand the retriever a ``QueryBundle`` carrying the
    engine's expanded query vector, so the index is searched with it and embeds nothing. Only
    valid when the engine embeds with the index's own embedding model (``build_dhrag``
    checks it) and the retriever is in the default (dense) query mode; ``search(query, k)``
    keeps the text path.

    Args:
        retriever: A ``VectorIndexRetriever`` in the default query mode.
    """

    def __init__(self, retriever: BaseRetriever) -> None:
        if not isinstance(retriever, VectorIndexRetriever) or not dense(retriever):
            raise TypeError(
                "retriever must be a VectorIndexRetriever in the default (dense) query mode; "
                "use RetrieverKnowledgeBase (the text path) for others"
            )
        super().__init__(retriever)

    @staticmethod
    def _bundles(vectors: np.ndarray) -> list[QueryBundle]:
        return [QueryBundle(query_str="", embedding=row) for row in query_rows(vectors)]

    def search_vectors(self, vectors: np.ndarray, k: int) -> list[list[Passage]]:
        """The first ``k`` nodes for each row of ``vectors``, as passages."""
        check_k(k)
        return [[node_to_passage(n) for n in self.retriever.retrieve(b)[:k]]
                for b in self._bundles(vectors)]

    async def asearch_vectors(self, vectors: np.ndarray, k: int) -> list[list[Passage]]:
        """``search_vectors`` through the retriever's ``aretrieve``."""
        check_k(k)
        return [[node_to_passage(n) for n in (await self.retriever.aretrieve(b))[:k]]
                for b in self._bundles(vectors)]


def dense(retriever: VectorIndexRetriever) -> bool:
    """Whether a vector index retriever ranks by the query embedding alone."""
    mode = getattr(retriever, "_vector_store_query_mode", VectorStoreQueryMode.DEFAULT)
    return bool(mode == VectorStoreQueryMode.DEFAULT)


def knowledge_and_embedder(
    retriever: BaseRetriever,
    embedder: Embedder | BaseEmbedding | None = None,
    search: SearchPath = "auto",
) -> tuple[KnowledgeBase, Embedder | None]:
    """The knowledge base and the engine's embedder for a LlamaIndex retriever.

    A vector index's retriever in the default query mode is searched by vector
    (``VectorStoreKnowledgeBase``) when the engine embeds with the index's own embedding
    model: with ``embedder`` left None it is used (no second model), or ``embedder`` is it
    (or the dhrag embedder inside its ``DHRAGEmbedding``).
    Other retrievers, or another ``embedder``, get the text path (``RetrieverKnowledgeBase``;
    over a vector index, still embedding history with the index's model unless ``embedder``
    is given). ``search="text"`` asks for the text path; ``"vector"`` raises where it is impossible.
    """
    own = retriever._embed_model if isinstance(retriever, VectorIndexRetriever) else None
    if own is not None and embedder is None:
        embedder = own  # the index's model embeds history too: no second model
    inner = own.embedder if isinstance(own, DHRAGEmbedding) else None
    same = own is not None and (embedder is own or (inner is not None and embedder is inner))
    by_vector = isinstance(retriever, VectorIndexRetriever) and dense(retriever)
    path = search_path(search, by_vector=by_vector, same_embedder=same,
                       needs="a VectorIndexRetriever in the default query mode and the "
                             "index's own embedding model (leave embedder unset)")
    if path == "vector":
        return VectorStoreKnowledgeBase(retriever), as_embedder(own)
    return RetrieverKnowledgeBase(retriever), as_embedder(embedder)


_RENAMED = {"VectorIndexKnowledgeBase": "VectorStoreKnowledgeBase"}


def __getattr__(name: str) -> Any:
    return renamed_attribute(__name__, name, _RENAMED, globals())
