"""Bridges between LangChain components and the ``dhrag_core`` protocols.

* ``LangChainKnowledgeBase``: a LangChain retriever or vector store as DH-RAG's static
  knowledge base (``KnowledgeBase`` protocol).
* ``LangChainEmbedder``: any LangChain ``Embeddings`` as DH-RAG's embedder (``Embedder``).
* ``DHRAGEmbeddings``: a DH-RAG embedder (such as ``MiniLMEmbedder``) as LangChain
  ``Embeddings``, for vector stores.
* ``ChatModelLLM``: any chat model as dhrag_core's ``LLM`` (for the core's ``LLMRewriter``).
* ``knowledge_and_embedder``: which path a source gets (by vector or by text) and the
  embedder of the engine (the store's own embeddings when it has them).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Literal

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.vectorstores import VectorStore, VectorStoreRetriever

from dhrag_core import (
    Embedder,
    FaissKnowledgeBase,
    KnowledgeBase,
    LLMRewriter,
    Passage,
    QueryRewriter,
    l2_normalise,
)
from dhrag_core.embedding import FunctionEmbedder
from dhrag_core.llm import LLMError, Message
from dhrag_core.validation import check_k, check_texts
from langchain_dhrag._context import child_callbacks
from langchain_dhrag.documents import document_to_passage

__all__ = [
    "ChatModelLLM",
    "DHRAGEmbeddings",
    "LangChainEmbedder",
    "LangChainKnowledgeBase",
    "LangChainVectorKnowledgeBase",
    "as_embedder",
    "as_knowledge_base",
    "as_rewriter",
    "knowledge_and_embedder",
    "source_embeddings",
]

log = logging.getLogger(__name__)


def _config() -> RunnableConfig:
    return {"callbacks": child_callbacks()}


# -- knowledge base ------------------------------------------------------------------------


class LangChainKnowledgeBase:
    """A LangChain ``BaseRetriever`` or ``VectorStore`` as the static knowledge base K.

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
        >>> LangChainKnowledgeBase(store).search("wall length", k=1)[0].text
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
            return self._passages(src.invoke(query, _config(), k=k), k)
        return self._passages(src.invoke(query, _config()), k)

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
            docs = await src.ainvoke(query, _config(), **kw)
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


class LangChainVectorKnowledgeBase(LangChainKnowledgeBase):
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
        >>> kb = LangChainVectorKnowledgeBase(store, embedder=emb)
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
                    "by vector; use LangChainKnowledgeBase (the text path)"
                )
            kwargs = {key: v for key, v in source.search_kwargs.items() if key != "k"}
            self._store: VectorStore = source.vectorstore
            self._kwargs = {**kwargs, **self.search_kwargs}
            self._mmr = source.search_type == "mmr"
        elif isinstance(source, VectorStore):
            self._store, self._kwargs, self._mmr = source, self.search_kwargs, False
        else:
            raise TypeError("source must be a LangChain VectorStore or VectorStoreRetriever")

    @staticmethod
    def _rows(vectors: np.ndarray) -> list[list[float]]:
        m = np.asarray(vectors, dtype=np.float64)
        if m.ndim != 2:
            raise ValueError(f"vectors must be a 2-D array (one row per query), got {m.shape}")
        rows: list[list[float]] = m.tolist()
        return rows

    def search_vectors(self, vectors: np.ndarray, k: int) -> list[list[Passage]]:
        """The passages nearest each row of ``vectors``, best first (at most ``k`` each)."""
        k = check_k(k)
        out = []
        for row in self._rows(vectors):
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
        for row in self._rows(vectors):
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
    knowledge: Any, embedder: Any = None, search: Literal["auto", "vector", "text"] = "auto"
) -> tuple[KnowledgeBase, Embedder | None]:
    """The knowledge base and the engine's embedder for a source.

    A vector store (or its similarity/MMR retriever) with embeddings is searched by vector
    (``LangChainVectorKnowledgeBase``) when the engine embeds with those same embeddings:
    with ``embedder`` left None they are used (no second model), or ``embedder`` is them.
    Any other source, or another ``embedder``, gets the text path
    (``LangChainKnowledgeBase``: the rewritten query as text). ``search="text"`` asks for
    the text path, ``"vector"`` raises where it is impossible. A dhrag ``KnowledgeBase`` is
    used as it is; a list of texts, ``Passage``s or ``Document``s becomes a
    ``FaissKnowledgeBase`` embedded by ``embedder`` (default: offline MiniLM).
    """
    if search not in ("auto", "vector", "text"):
        raise ValueError(f'search must be "auto", "vector" or "text", got {search!r}')
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
    if search != "text" and same and _by_vector(knowledge):
        return LangChainVectorKnowledgeBase(knowledge, embedder=emb), emb
    if search == "vector":
        raise ValueError(
            'search="vector" needs a VectorStore (or its similarity/MMR retriever) and its own '
            "embeddings (leave embedder unset)"
        )
    return LangChainKnowledgeBase(knowledge, embedder=emb), emb


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
    """A LangChain retriever/vector store wrapped as ``LangChainKnowledgeBase`` (the text
    path); a dhrag ``KnowledgeBase`` (``FaissKnowledgeBase``...) as it is."""
    if isinstance(knowledge, (BaseRetriever, VectorStore)):
        return LangChainKnowledgeBase(knowledge, embedder=embedder)
    if isinstance(knowledge, KnowledgeBase):
        return knowledge
    raise TypeError(
        "knowledge must be a LangChain BaseRetriever or VectorStore, or have "
        f"search(query, k) (dhrag KnowledgeBase), got {type(knowledge).__name__}"
    )


# -- embeddings ----------------------------------------------------------------------------


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


# -- the chat model as the core's LLM ------------------------------------------------------

_ROLES: dict[str, type[BaseMessage]] = {
    "system": SystemMessage, "user": HumanMessage, "assistant": AIMessage,
}


class ChatModelLLM:
    """A LangChain chat model as dhrag_core's ``LLM`` protocol (``complete``/``acomplete``),
    for the core's ``LLMRewriter`` (its prompt, gate and fallback).

    ``max_tokens``, ``temperature`` and ``timeout`` are the model's own settings (configure
    the model); failures are raised as ``LLMError``, which makes the rewriter fall back.

    Args:
        model: A chat model, or any runnable taking messages and returning a message or str.

    Example:
        >>> from langchain_core.language_models import FakeListChatModel
        >>> from dhrag_core import LLMRewriter
        >>> llm = ChatModelLLM(FakeListChatModel(responses=["How long is the Great Wall?"]))
        >>> llm.complete([{"role": "user", "content": "How long is it?"}])
        'How long is the Great Wall?'
        >>> rewriter = LLMRewriter(llm)
    """

    def __init__(self, model: BaseChatModel | Runnable[Any, Any]) -> None:
        if not isinstance(model, Runnable):
            raise TypeError(
                f"model must be a LangChain chat model or Runnable, got {type(model).__name__}"
            )
        self.model = model

    @staticmethod
    def _messages(messages: list[Message]) -> list[BaseMessage]:
        out = []
        for m in messages:
            role = _ROLES.get(m.get("role", ""))
            if role is None:
                raise LLMError(f"unknown message role {m.get('role')!r}")
            out.append(role(m.get("content", "")))
        return out

    @staticmethod
    def _text(out: Any) -> str:
        text = out.text if isinstance(out, BaseMessage) else out
        if not isinstance(text, str):
            raise LLMError(f"the model returned {type(out).__name__}, not a message or str")
        if not text.strip():
            raise LLMError("the model returned an empty reply")
        return text

    def complete(
        self, messages: list[Message], *, max_tokens: int = 256, temperature: float = 0.0,
        timeout: float | None = None,
    ) -> str:
        """The model's reply text (``invoke``)."""
        try:
            out = self.model.invoke(self._messages(messages), _config())
        except LLMError:
            raise
        except Exception as exc:
            raise LLMError(f"chat model failed: {type(exc).__name__}: {exc}") from exc
        return self._text(out)

    async def acomplete(
        self, messages: list[Message], *, max_tokens: int = 256, temperature: float = 0.0,
        timeout: float | None = None,
    ) -> str:
        """The model's reply text (``ainvoke``, on the running loop)."""
        try:
            out = await self.model.ainvoke(self._messages(messages), _config())
        except LLMError:
            raise
        except Exception as exc:
            raise LLMError(f"chat model failed: {type(exc).__name__}: {exc}") from exc
        return self._text(out)


def as_rewriter(rewriter: Any) -> QueryRewriter | None:
    """A chat model (or runnable) as the core's ``LLMRewriter(ChatModelLLM(model))``; a
    dhrag rewriter or None as it is."""
    if rewriter is None or isinstance(rewriter, QueryRewriter):
        return rewriter
    if isinstance(rewriter, Runnable):
        return LLMRewriter(ChatModelLLM(rewriter))
    raise TypeError(
        "rewriter must be a dhrag QueryRewriter or a LangChain chat model, got "
        f"{type(rewriter).__name__}"
    )
