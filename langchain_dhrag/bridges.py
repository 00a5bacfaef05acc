"""Bridges between LangChain components and the ``dhrag_core`` protocols.

* ``LangChainKnowledgeBase``: a LangChain retriever or vector store as DH-RAG's static
  knowledge base (``KnowledgeBase`` protocol).
* ``LangChainEmbedder``: any LangChain ``Embeddings`` as DH-RAG's embedder (``Embedder``).
* ``DHRAGEmbeddings``: a DH-RAG embedder (such as ``MiniLMEmbedder``) as LangChain
  ``Embeddings``, for vector stores.
* ``ChatModelRewriter``: any chat model as DH-RAG's query rewriter (``QueryRewriter``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.vectorstores import VectorStore, VectorStoreRetriever

from dhrag_core import (
    Embedder,
    KnowledgeBase,
    LightRewriter,
    Passage,
    QueryRewriter,
    Rewrite,
    SelectedTurn,
    l2_normalise,
)
from dhrag_core.embedding import FunctionEmbedder
from dhrag_core.llm_rewriting import clean_rewrite, format_history
from langchain_dhrag._context import call_on_caller_loop, child_callbacks
from langchain_dhrag.documents import document_to_passage

__all__ = [
    "ChatModelRewriter",
    "DHRAGEmbeddings",
    "LangChainEmbedder",
    "LangChainKnowledgeBase",
    "as_embedder",
    "as_knowledge_base",
    "as_rewriter",
    "clean_rewrite",
    "source_embeddings",
]

log = logging.getLogger(__name__)


def _check_k(k: Any) -> int:
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"k must be an int >= 1, got {type(k).__name__}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    return k


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
        k = _check_k(k)
        return call_on_caller_loop(lambda: self.asearch(query, k),
                                   lambda: self._search_sync(query, k))

    def _search_sync(self, query: str, k: int) -> list[Passage]:
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
        k = _check_k(k)
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


def source_embeddings(source: BaseRetriever | VectorStore) -> Embeddings | None:
    """The embeddings of a vector store or of a ``VectorStoreRetriever``'s store, if known."""
    store = source.vectorstore if isinstance(source, VectorStoreRetriever) else source
    if not isinstance(store, VectorStore):
        return None
    try:
        return store.embeddings
    except Exception:  # some stores raise instead of returning None
        return None


def as_knowledge_base(knowledge: Any, embedder: Embedder | None = None) -> KnowledgeBase:
    """A LangChain retriever/vector store wrapped as ``LangChainKnowledgeBase``; a dhrag
    ``KnowledgeBase`` (``FaissKnowledgeBase``...) as it is."""
    if isinstance(knowledge, (BaseRetriever, VectorStore)):
        return LangChainKnowledgeBase(knowledge, embedder=embedder)
    if isinstance(knowledge, KnowledgeBase):
        return knowledge
    raise TypeError(
        "knowledge must be a LangChain BaseRetriever or VectorStore, or have "
        f"search(query, k) (dhrag KnowledgeBase), got {type(knowledge).__name__}"
    )


# -- embeddings ----------------------------------------------------------------------------


def _check_texts(texts: Any) -> list[str]:
    if isinstance(texts, str):
        raise TypeError("texts must be a sequence of str, not one str; wrap it: [text]")
    items = list(texts)
    for i, t in enumerate(items):
        if not isinstance(t, str):
            raise TypeError(f"texts[{i}] must be str, got {type(t).__name__}")
    return items


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
        items = _check_texts(texts)
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
            kb = dhrag_core.demo.load_demo_kb(embedder)  # shipped MiniLM vectors
            embeddings.preload([p.text for p in kb.passages], kb.vectors)
            ```
        """
        items = _check_texts(texts)
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
        items = _check_texts(texts)
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


# -- query rewriting -----------------------------------------------------------------------

DEFAULT_REWRITE_INSTRUCTIONS = (
    "Given the earlier conversation and a follow-up question, rewrite the follow-up as a "
    "standalone question that can be understood without the conversation: resolve pronouns "
    "and ellipsis using the conversation, keep the user's intent and wording otherwise. "
    "If it is already standalone, return it unchanged. Answer with the question only."
)

class ChatModelRewriter:
    """Any chat model as DH-RAG's query rewriter (``QueryRewriter`` protocol).

    The prompt holds the *selected* history turns (user questions and assistant answers,
    oldest first), then the follow-up; the answer is cleaned (``clean_rewrite``). On any
    exception, an empty or overlong answer, the ``fallback`` rewriter is used (default:
    ``LightRewriter``, no model call). Under an async retriever call the model's
    ``ainvoke`` runs on the caller's event loop.

    Args:
        model: A chat model, or any runnable taking messages and returning a message or str.
        fallback: Rewriter used when the model fails.
        instructions: The system prompt.
        max_answer_chars: Assistant answers are cut to this many characters in the prompt.
        max_output_chars: A longer model answer is treated as a failure.

    Example:
        >>> from langchain_core.language_models import FakeListChatModel
        >>> rw = ChatModelRewriter(FakeListChatModel(responses=["How long is the Great Wall?"]))
        >>> rw.rewrite("How long is it?", []).text
        'How long is the Great Wall?'
    """

    def __init__(
        self,
        model: BaseChatModel | Runnable[Any, Any],
        *,
        fallback: QueryRewriter | None = None,
        instructions: str = DEFAULT_REWRITE_INSTRUCTIONS,
        max_answer_chars: int = 600,
        max_output_chars: int = 1_000,
    ) -> None:
        if not isinstance(model, Runnable):
            raise TypeError(
                f"model must be a LangChain chat model or Runnable, got {type(model).__name__}"
            )
        if fallback is not None and not isinstance(fallback, QueryRewriter):
            raise TypeError("fallback must have rewrite(query, history) (dhrag QueryRewriter)")
        if not isinstance(instructions, str) or not instructions.strip():
            raise ValueError("instructions must be a non-empty str")
        for name, value in (("max_answer_chars", max_answer_chars),
                            ("max_output_chars", max_output_chars)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        self.model = model
        self.fallback: QueryRewriter = fallback or LightRewriter()
        self.instructions = instructions
        self.max_answer_chars = max_answer_chars
        self.max_output_chars = max_output_chars

    def messages(self, query: str, history: Sequence[SelectedTurn]) -> list[BaseMessage]:
        """The prompt sent to the model."""
        conversation = format_history(history, self.max_answer_chars) or "(none)"
        return [
            SystemMessage(self.instructions),
            HumanMessage(
                f"Conversation:\n{conversation}\n\nFollow-up question: {query}\n\n"
                "Standalone question:"
            ),
        ]

    def rewrite(self, query: str, history: Sequence[SelectedTurn]) -> Rewrite:
        """A standalone version of ``query`` (the fallback's on failure)."""
        try:
            msgs = self.messages(query, history)
            out = call_on_caller_loop(lambda: self.model.ainvoke(msgs, _config()),
                                      lambda: self.model.invoke(msgs, _config()))
            text = clean_rewrite(self._text(out), self.max_output_chars)
            if text is None:
                raise ValueError("the model returned no usable question")
        except Exception as exc:
            log.warning("chat-model rewrite failed (%s: %s); using %s", type(exc).__name__,
                        exc, type(self.fallback).__name__)
            return self.fallback.rewrite(query, history)
        return Rewrite(text)

    @staticmethod
    def _text(out: Any) -> str:
        if isinstance(out, BaseMessage):
            return out.text
        if isinstance(out, str):
            return out
        raise TypeError(f"the model returned {type(out).__name__}, not a message or str")


def as_rewriter(rewriter: Any) -> QueryRewriter | None:
    """A chat model (or runnable) as ``ChatModelRewriter``; a dhrag rewriter or None as is."""
    if rewriter is None or isinstance(rewriter, QueryRewriter):
        return rewriter
    if isinstance(rewriter, Runnable):
        return ChatModelRewriter(rewriter)
    raise TypeError(
        "rewriter must be a dhrag QueryRewriter or a LangChain chat model, got "
        f"{type(rewriter).__name__}"
    )
