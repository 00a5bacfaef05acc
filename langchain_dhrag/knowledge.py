"""A LangChain retriever or vector store as DH-RAG's static knowledge base K.

* ``RetrieverKnowledgeBase``: a retriever (or vector store) searched by the rewritten
  query's text (the ``KnowledgeBase`` protocol).
* ``VectorStoreKnowledgeBase``: a vector store (or its similarity/MMR retriever) searched
  by the engine's expanded query vector.
* ``knowledge_and_embedder``: which path a source gets (by vector or by text) and the
  embedder of the engine (the store's own embeddings when it has them).

The LlamaIndex adapter has the same two classes under the same names. The old names
``LangChainKnowledgeBase`` and ``LangChainVectorKnowledgeBase`` still work for one release
(with a ``DeprecationWarning``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import VectorStore, VectorStoreRetriever

from dhrag_core import Embedder, FaissKnowledgeBase, KnowledgeBase, Passage
from dhrag_core.deprecation import renamed_attribute
from dhrag_core.knowledge.base import query_rows
from dhrag_core.knowledge.path import search_path
from dhrag_core.validation import SearchPath, check_k, check_search
from langchain_dhrag._context import child_config
from langchain_dhrag.convert import document_to_passage
from langchain_dhrag.embeddings import DHRAGEmbeddings, LangChainEmbedder, as_embedder

__all__ = [
    "RetrieverKnowledgeBase",
    "VectorStoreKnowledgeBase",
    "as_knowledge_base",
    "knowledge_and_embedder",
    "source_embeddings",
]


class RetrieverKnowledgeBase:
    """A LangChain ``BaseRetriever`` (or ``VectorStore``) as the static knowledge base K,
    searched by text.

    ``search(query, k)`` returns ``Passage`` objects (id, title, metadata and, for vector
    stores, score of the documents). A ``VectorStoreRetriever`` keeps its search type and
    ``search_kwargs`` but is asked for ``k`` documents; other retrievers return what they
    return, cut to ``k``. Under ``DHRAGRetriever.ainvoke`` the source's own async search
    (``ainvoke``/``asimilarity_search*``) runs on the caller's event loop.

    When ``embedder`` is the embedder of the source's ``DHRAGEmbeddings`` (the same object),
    passages come back with their vectors, so the engine does not encode them again.

    Args:
        source: The retriever or vector store.
        search_kwargs: Extra keyword arguments for vector-store searches (``filter=...``).
        embedder: The engine's embedder (``DHRAGRetriever.from_knowledge`` passes it).

    Example:
        >>> from langchain_core.vectorstores import InMemoryVectorStore
        >>> from dhrag_core import HashingEmbedder
        >>> store = InMemoryVectorStore(DHRAGEmbeddings(HashingEmbedder()))
        >>> _ = store.add_texts(["The Great Wall is 21,196 km long."])
        >>> RetrieverKnowledgeBase(store).search("wall length", k=1)[0].text
        'The Great Wall is 21,196 km long.'
    """

    def __init__(
        self,
        source: BaseRetriever | VectorStore,
        *,
        search_kwargs: dict[str, Any] | None = None,
        embedder: Embedder | None = None,
    ) -> None:
        if not isinstance(source, (BaseRetriever, VectorStore)):
            raise TypeError(
                "source must be a LangChain BaseRetriever or VectorStore, got "
                f"{type(source).__name__}"
            )
        if search_kwargs is not None and not isinstance(search_kwargs, dict):
            raise TypeError(f"search_kwargs must be a dict, got {type(search_kwargs).__name__}")
        self.source = source
        self.search_kwargs = dict(search_kwargs or {})
        own = source_embeddings(source)
        self._vectors = (
            own if isinstance(own, DHRAGEmbeddings) and embedder is not None
            and own.embedder is embedder else None
        )

    def search(self, query: str, k: int) -> list[Passage]:
        """The passages for ``query``, best first (at most ``k``)."""
        k = check_k(k)
        src = self.source
        if isinstance(src, VectorStore):
            try:
                scored = src.similarity_search_with_score(query, k=k, **self.search_kwargs)
            except NotImplementedError:
                return self._passages(src.similarity_search(query, k=k, **self.search_kwargs), k)
            return self._scored(scored, k)
        if isinstance(src, VectorStoreRetriever):
            return self._passages(src.invoke(query, child_config(), k=k), k)
        return self._passages(src.invoke(query, child_config()), k)

    async def asearch(self, query: str, k: int) -> list[Passage]:
        """``search`` through the source's async API."""
        k = check_k(k)
        src = self.source
        docs: list[Document]
        scores: list[float | None]
        if isinstance(src, VectorStore):
            try:
                scored = await src.asimilarity_search_with_score(query, k=k, **self.search_kwargs)
                docs, scores = [d for d, _ in scored], [float(s) for _, s in scored]
            except NotImplementedError:
                docs = await src.asimilarity_search(query, k=k, **self.search_kwargs)
                scores = [None] * len(docs)
        else:
            kw: dict[str, Any] = {"k": k} if isinstance(src, VectorStoreRetriever) else {}
            docs = await src.ainvoke(query, child_config(), **kw)
            scores = [None] * len(docs)
        passages = [document_to_passage(d, s) for d, s in zip(docs[:k], scores, strict=False)]
        if self._vectors is None:
            return passages
        return await asyncio.to_thread(self._with_vectors, passages)

    def _passages(self, docs: Sequence[Document], k: int) -> list[Passage]:
        return self._with_vectors([document_to_passage(d) for d in list(docs)[:k]])

    def _scored(self, scored: Sequence[tuple[Document, float]], k: int) -> list[Passage]:
        return self._with_vectors([document_to_passage(d, float(s)) for d, s in list(scored)[:k]])

    def _with_vectors(self, passages: list[Passage]) -> list[Passage]:
        if self._vectors is None or not passages:
            return passages
        vectors = self._vectors.encode([p.text for p in passages])
        return [replace(p, vector=v) for p, v in zip(passages, vectors, strict=True)]


class VectorStoreKnowledgeBase(RetrieverKnowledgeBase):
    """A LangChain ``VectorStore`` (or ``VectorStoreRetriever``) searched by vector.

    The engine passes its expanded query vector (the query moved toward the selected history
    turns) to ``search_vectors``/``asearch_vectors``, which call the store's
    ``similarity_search_by_vector``/``asimilarity_search_by_vector`` (a retriever with
    ``search_type="mmr"``: ``max_marginal_relevance_search_by_vector``). Only valid when the
    engine embeds with the store's own embeddings (``knowledge_and_embedder`` checks it);
    ``search(query, k)`` keeps the text path.

    Example:
        >>> from langchain_core.vectorstores import InMemoryVectorStore
        >>> from dhrag_core import HashingEmbedder
        >>> emb = HashingEmbedder()
        >>> store = InMemoryVectorStore(DHRAGEmbeddings(emb))
        >>> _ = store.add_texts(["The Great Wall is 21,196 km long."])
        >>> kb = VectorStoreKnowledgeBase(store, embedder=emb)
        >>> kb.search_vectors(emb.encode(["wall length"]), k=1)[0][0].text
        'The Great Wall is 21,196 km long.'
    """

    def __init__(
        self,
        source: BaseRetriever | VectorStore,
        *,
        search_kwargs: dict[str, Any] | None = None,
        embedder: Embedder | None = None,
    ) -> None:
        super().__init__(source, search_kwargs=search_kwargs, embedder=embedder)
        if isinstance(source, VectorStoreRetriever):
            if source.search_type not in ("similarity", "mmr"):
                raise ValueError(
                    f"a retriever with search_type={source.search_type!r} cannot be searched "
                    "by vector; use RetrieverKnowledgeBase (the text path)"
                )
            kwargs = {key: v for key, v in source.search_kwargs.items() if key != "k"}
            self._store: VectorStore = source.vectorstore
            self._kwargs = {**kwargs, **self.search_kwargs}
            self._mmr = source.search_type == "mmr"
        elif isinstance(source, VectorStore):
            self._store, self._kwargs, self._mmr = source, self.search_kwargs, False
        else:
            raise TypeError("source must be a LangChain VectorStore or VectorStoreRetriever")

    def search_vectors(self, vectors: np.ndarray, k: int) -> list[list[Passage]]:
        """The passages nearest each row of ``vectors``, best first (at most ``k`` each)."""
        k = check_k(k)
        out = []
        for row in query_rows(vectors):
            if self._mmr:
                docs = self._store.max_marginal_relevance_search_by_vector(row, k=k,
                                                                           **self._kwargs)
            else:
                docs = self._store.similarity_search_by_vector(row, k=k, **self._kwargs)
            out.append(self._passages(docs, k))
        return out

    async def asearch_vectors(self, vectors: np.ndarray, k: int) -> list[list[Passage]]:
        """``search_vectors`` through the store's async API."""
        k = check_k(k)
        out = []
        for row in query_rows(vectors):
            if self._mmr:
                docs = await self._store.amax_marginal_relevance_search_by_vector(
                    row, k=k, **self._kwargs)
            else:
                docs = await self._store.asimilarity_search_by_vector(row, k=k, **self._kwargs)
            passages = [document_to_passage(d) for d in docs[:k]]
            if self._vectors is not None:
                passages = await asyncio.to_thread(self._with_vectors, passages)
            out.append(passages)
        return out


def source_embeddings(source: BaseRetriever | VectorStore) -> Embeddings | None:
    """The embeddings of a vector store or of a ``VectorStoreRetriever``'s store, if known."""
    store = source.vectorstore if isinstance(source, VectorStoreRetriever) else source
    if not isinstance(store, VectorStore):
        return None
    try:
        return store.embeddings
    except Exception:  # some stores raise instead of returning None
        return None


def _by_vector(source: BaseRetriever | VectorStore) -> bool:
    if isinstance(source, VectorStoreRetriever):
        return source.search_type in ("similarity", "mmr")
    return isinstance(source, VectorStore)


def knowledge_and_embedder(
    knowledge: Any, embedder: Any = None, search: SearchPath = "auto"
) -> tuple[KnowledgeBase, Embedder | None]:
    """The knowledge base and the engine's embedder for a source.

    A vector store (or its similarity/MMR retriever) with embeddings is searched by vector
    (``VectorStoreKnowledgeBase``) when the engine embeds with those same embeddings:
    with ``embedder`` left None they are used (no second model), or ``embedder`` is them.
    Any other source, or another ``embedder``, gets the text path
    (``RetrieverKnowledgeBase``: the rewritten query as text). ``search="text"`` asks for
    the text path, ``"vector"`` raises where it is impossible. A dhrag ``KnowledgeBase`` is
    used as it is; a list of texts, ``Passage``s or ``Document``s becomes a
    ``FaissKnowledgeBase`` embedded by ``embedder`` (default: offline MiniLM).
    """
    check_search(search)
    emb = as_embedder(embedder)
    passages = _passage_list(knowledge)
    if passages is not None:
        kb = FaissKnowledgeBase(passages, emb)
        return kb, kb.embedder
    if not isinstance(knowledge, (BaseRetriever, VectorStore)):
        return as_knowledge_base(knowledge, emb), emb
    own = source_embeddings(knowledge)
    own_embedder = own.embedder if isinstance(own, DHRAGEmbeddings) else (
        LangChainEmbedder(own) if own is not None else None)
    if own_embedder is not None and embedder is None:
        emb = own_embedder
    same = own is not None and (emb is own_embedder or embedder is own)
    path = search_path(search, by_vector=_by_vector(knowledge), same_embedder=same,
                       needs="a VectorStore (or its similarity/MMR retriever) and its own "
                             "embeddings (leave embedder unset)")
    if path == "vector":
        return VectorStoreKnowledgeBase(knowledge, embedder=emb), emb
    return RetrieverKnowledgeBase(knowledge, embedder=emb), emb


def _passage_list(knowledge: Any) -> list[Passage | str] | None:
    """A list/tuple of texts, ``Passage``s or ``Document``s as passages; None otherwise."""
    if isinstance(knowledge, str):
        raise TypeError("knowledge must be a list of texts, not one str; wrap it: [text]")
    if not isinstance(knowledge, (list, tuple)):
        return None
    out: list[Passage | str] = []
    for i, item in enumerate(knowledge):
        if isinstance(item, Document):
            out.append(document_to_passage(item))
        elif isinstance(item, (str, Passage)):
            out.append(item)
        else:
            raise TypeError(
                f"knowledge[{i}] must be a str, Passage or Document, got {type(item).__name__}"
            )
    return out


def as_knowledge_base(knowledge: Any, embedder: Embedder | None = None) -> KnowledgeBase:
    """A LangChain retriever/vector store wrapped as ``RetrieverKnowledgeBase`` (the text
    path); a dhrag ``KnowledgeBase`` (``FaissKnowledgeBase``...) as it is."""
    if isinstance(knowledge, (BaseRetriever, VectorStore)):
        return RetrieverKnowledgeBase(knowledge, embedder=embedder)
    if isinstance(knowledge, KnowledgeBase):
        return knowledge
    raise TypeError(
        "knowledge must be a LangChain BaseRetriever or VectorStore, or have "
        f"search(query, k) (dhrag KnowledgeBase), got {type(knowledge).__name__}"
    )


_RENAMED = {
    "LangChainKnowledgeBase": "RetrieverKnowledgeBase",
    "LangChainVectorKnowledgeBase": "VectorStoreKnowledgeBase",
}


def __getattr__(name: str) -> Any:
    return renamed_attribute(__name__, name, _RENAMED, globals())
