"""Bridges between LlamaIndex components and the dhrag_core protocols.

* ``RetrieverKnowledgeBase``: any LlamaIndex ``BaseRetriever`` as DH-RAG's knowledge base K,
  searched by the rewritten query's text.
* ``VectorIndexKnowledgeBase``: a vector index's retriever searched by DH-RAG's expanded query
  vector (a ``QueryBundle`` carrying the embedding).
* ``LlamaIndexEmbedder``: any LlamaIndex ``BaseEmbedding`` as DH-RAG's embedder.
* ``DHRAGEmbedding``: the other way round, a dhrag embedder (offline MiniLM by default) as a
  LlamaIndex ``BaseEmbedding``, e.g. for ``VectorStoreIndex``.
* ``LlamaIndexLLM``: any LlamaIndex LLM as dhrag_core's ``LLM`` (for the core's
  ``LLMRewriter``: its prompt, gate and fallback).
* ``build_dhrag``: a ``DHRAG`` over a LlamaIndex retriever in one call.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Literal

import numpy as np
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.indices.vector_store.retrievers.retriever import VectorIndexRetriever
from llama_index.core.llms.llm import LLM
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle
from llama_index.core.vector_stores.types import VectorStoreQueryMode

from dhrag_core import (
    DHRAG,
    Embedder,
    KnowledgeBase,
    LightRewriter,
    LLMRewriter,
    MiniLMEmbedder,
    Passage,
    QueryRewriter,
    Settings,
)
from dhrag_core.embedding import FunctionEmbedder
from dhrag_core.llm import LLMError, Message
from dhrag_core.store import HistoryStore
from dhrag_core.validation import check_k

__all__ = [
    "DHRAGEmbedding",
    "LlamaIndexEmbedder",
    "LlamaIndexLLM",
    "RetrieverKnowledgeBase",
    "VectorIndexKnowledgeBase",
    "build_dhrag",
    "knowledge_and_embedder",
    "passage_from_node",
]

log = logging.getLogger(__name__)

#: Node metadata key under which the adapter puts its trace (kept out of LLM/embedding text).
TRACE_KEY = "dhrag"

_SCALAR = (str, int, float, bool, type(None))


def passage_from_node(node: NodeWithScore) -> Passage:
    """A LlamaIndex ``NodeWithScore`` as a dhrag ``Passage``.

    The text is the node's content without metadata; the id is the node id (so the same node
    met again, in the knowledge base or the history, is de-duplicated); the title is the
    ``title`` or ``file_name`` metadata. Only flat JSON values of the metadata are kept (what
    a history store can persist), and the adapter's own trace key is dropped.

    Example:
        >>> from llama_index.core.schema import TextNode
        >>> p = passage_from_node(NodeWithScore(node=TextNode(text="Hi", id_="n1"), score=0.5))
        >>> (p.id, p.text, p.score)
        ('n1', 'Hi', 0.5)
    """
    if not isinstance(node, NodeWithScore):
        raise TypeError(f"node must be a llama_index NodeWithScore, got {type(node).__name__}")
    inner = node.node
    meta = {
        str(key): value for key, value in (inner.metadata or {}).items()
        if key != TRACE_KEY and isinstance(value, _SCALAR)
    }
    title = meta.get("title") or meta.get("file_name") or ""
    return Passage(
        text=inner.get_content(metadata_mode=MetadataMode.NONE),
        id=inner.node_id,
        title=str(title),
        score=None if node.score is None else float(node.score),
        metadata=meta,
    )


class RetrieverKnowledgeBase:
    """DH-RAG's knowledge base K over any LlamaIndex retriever (``index.as_retriever()``).

    ``search(query, k)`` runs the retriever on the (rewritten) query and keeps its first ``k``
    nodes, as passages. How many nodes the retriever returns is its own setting: give it at
    least ``Settings.kb_k`` (``index.as_retriever(similarity_top_k=20)``) so the integration
    step has candidates to weigh. Passages carry no vectors; the DH-RAG embedder encodes them.

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
        return [passage_from_node(n) for n in self.retriever.retrieve(query)[:k]]

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
        return [passage_from_node(n) for n in nodes[:k]]


class VectorIndexKnowledgeBase(RetrieverKnowledgeBase):
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
        m = np.asarray(vectors, dtype=np.float64)
        if m.ndim != 2:
            raise ValueError(f"vectors must be a 2-D array (one row per query), got {m.shape}")
        return [QueryBundle(query_str="", embedding=row) for row in m.tolist()]

    def search_vectors(self, vectors: np.ndarray, k: int) -> list[list[Passage]]:
        """The first ``k`` nodes for each row of ``vectors``, as passages."""
        check_k(k)
        return [[passage_from_node(n) for n in self.retriever.retrieve(b)[:k]]
                for b in self._bundles(vectors)]

    async def asearch_vectors(self, vectors: np.ndarray, k: int) -> list[list[Passage]]:
        """``search_vectors`` through the retriever's ``aretrieve``."""
        check_k(k)
        return [[passage_from_node(n) for n in (await self.retriever.aretrieve(b))[:k]]
                for b in self._bundles(vectors)]


def dense(retriever: VectorIndexRetriever) -> bool:
    """Whether a vector index retriever ranks by the query embedding alone."""
    mode = getattr(retriever, "_vector_store_query_mode", VectorStoreQueryMode.DEFAULT)
    return bool(mode == VectorStoreQueryMode.DEFAULT)


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


class DHRAGEmbedding(BaseEmbedding):
    """A dhrag ``Embedder`` as a LlamaIndex ``BaseEmbedding`` (for ``VectorStoreIndex`` etc.).

    Queries and texts are embedded alike. Async calls run the embedder in a worker thread, so
    they do not block the event loop. Nothing is loaded until the first embedding.

    Args:
        embedder: A dhrag embedder; default: the offline ``MiniLMEmbedder``.
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
            embedder = MiniLMEmbedder()
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


_ROLES = {"system": MessageRole.SYSTEM, "user": MessageRole.USER,
          "assistant": MessageRole.ASSISTANT}


class LlamaIndexLLM:
    """A LlamaIndex LLM as dhrag_core's ``LLM`` protocol (``complete``/``acomplete`` call its
    ``chat``/``achat``), for the core's ``LLMRewriter`` (its prompt, gate and fallback).

    ``max_tokens``, ``temperature`` and ``timeout`` are the LLM's own settings; failures are
    raised as ``LLMError``, which makes the rewriter fall back.

    Example:
        >>> from llama_index.core.llms import MockLLM
        >>> from dhrag_core import LLMRewriter
        >>> rewriter = LLMRewriter(LlamaIndexLLM(MockLLM()))
    """

    def __init__(self, llm: LLM) -> None:
        if not isinstance(llm, LLM):
            raise TypeError(f"llm must be a llama_index LLM, got {type(llm).__name__}")
        self.llm = llm

    @staticmethod
    def _messages(messages: list[Message]) -> list[ChatMessage]:
        out = []
        for m in messages:
            role = _ROLES.get(m.get("role", ""))
            if role is None:
                raise LLMError(f"unknown message role {m.get('role')!r}")
            out.append(ChatMessage(role=role, content=m.get("content", "")))
        return out

    @staticmethod
    def _text(content: Any) -> str:
        if not isinstance(content, str) or not content.strip():
            raise LLMError("the LLM returned an empty reply")
        return content

    def complete(
        self, messages: list[Message], *, max_tokens: int = 256, temperature: float = 0.0,
        timeout: float | None = None,
    ) -> str:
        """The LLM's reply text (``chat``)."""
        try:
            reply = self.llm.chat(self._messages(messages))
        except LLMError:
            raise
        except Exception as exc:
            raise LLMError(f"LLM failed: {type(exc).__name__}: {exc}") from exc
        return self._text(reply.message.content)

    async def acomplete(
        self, messages: list[Message], *, max_tokens: int = 256, temperature: float = 0.0,
        timeout: float | None = None,
    ) -> str:
        """The LLM's reply text (``achat``, on the running loop)."""
        try:
            reply = await self.llm.achat(self._messages(messages))
        except LLMError:
            raise
        except Exception as exc:
            raise LLMError(f"LLM failed: {type(exc).__name__}: {exc}") from exc
        return self._text(reply.message.content)


def _embedder(embedder: Embedder | BaseEmbedding | None) -> Embedder | None:
    if isinstance(embedder, DHRAGEmbedding):
        return embedder.embedder  # no round trip through LlamaIndex lists
    if isinstance(embedder, BaseEmbedding):
        return LlamaIndexEmbedder(embedder)
    return embedder


def knowledge_and_embedder(
    retriever: BaseRetriever,
    embedder: Embedder | BaseEmbedding | None = None,
    search: Literal["auto", "vector", "text"] = "auto",
) -> tuple[KnowledgeBase, Embedder | None]:
    """The knowledge base and the engine's embedder for a LlamaIndex retriever.

    A vector index's retriever in the default query mode is searched by vector
    (``VectorIndexKnowledgeBase``) when the engine embeds with the index's own embedding
    model: with ``embedder`` left None it is used (no second model), or ``embedder`` is it
    (or the dhrag embedder inside its ``DHRAGEmbedding``).
    Other retrievers, or another ``embedder``, get the text path (``RetrieverKnowledgeBase``;
    over a vector index, still embedding history with the index's model unless ``embedder``
    is given). ``search="text"`` asks for the text path; ``"vector"`` raises where it is impossible.
    """
    if search not in ("auto", "vector", "text"):
        raise ValueError(f'search must be "auto", "vector" or "text", got {search!r}')
    own = retriever._embed_model if isinstance(retriever, VectorIndexRetriever) else None
    if own is not None and embedder is None:
        embedder = own  # the index's model embeds history too: no second model
    inner = own.embedder if isinstance(own, DHRAGEmbedding) else None
    same = own is not None and (embedder is own or (inner is not None and embedder is inner))
    by_vector = isinstance(retriever, VectorIndexRetriever) and dense(retriever)
    if search != "text" and same and by_vector:
        return VectorIndexKnowledgeBase(retriever), _embedder(own)
    if search == "vector":
        raise ValueError(
            'search="vector" needs a VectorIndexRetriever in the default query mode and the '
            "index's own embedding model (leave embedder unset)"
        )
    return RetrieverKnowledgeBase(retriever), _embedder(embedder)


def build_dhrag(
    retriever: BaseRetriever,
    *,
    embedder: Embedder | BaseEmbedding | None = None,
    store: HistoryStore | str | None = None,
    settings: Settings | None = None,
    rewriter: QueryRewriter | Literal["light", "llm"] = "light",
    llm: LLM | None = None,
    search: Literal["auto", "vector", "text"] = "auto",
) -> DHRAG:
    """A ``DHRAG`` whose knowledge base is a LlamaIndex retriever.

    Args:
        retriever: The static knowledge base (``index.as_retriever(similarity_top_k=20)``).
        embedder: A dhrag embedder or a LlamaIndex ``BaseEmbedding`` (bridged); default: the
            vector index's own embedding model, else the offline MiniLM, loaded on first use.
        store: History store or URL (``"memory"``, ``"sqlite:///path.db"``,
            ``"postgresql://user:password@host/db"``).
        settings: dhrag ``Settings``.
        rewriter: ``"light"`` (no LLM), ``"llm"`` (the core's ``LLMRewriter`` over
            ``LlamaIndexLLM(llm)``) or a ``QueryRewriter``.
        llm: The LLM for ``rewriter="llm"``.
        search: ``"auto"`` (by vector where possible), ``"vector"`` or ``"text"``.

    A vector index's retriever is searched by vector with the index's own embedding model
    (the default ``embedder``); other retrievers by text (see ``knowledge_and_embedder``).

    Example:
        >>> rag = build_dhrag(index.as_retriever(similarity_top_k=20),  # doctest: +SKIP
        ...                   embedder=DHRAGEmbedding(), store="sqlite:///history.db")
    """
    if not isinstance(retriever, BaseRetriever):
        raise TypeError(
            "retriever must be a llama_index BaseRetriever (e.g. index.as_retriever()), "
            f"got {type(retriever).__name__}"
        )
    kb, emb = knowledge_and_embedder(retriever, embedder, search)
    if rewriter == "light":
        chosen: QueryRewriter = LightRewriter()
    elif rewriter == "llm":
        if llm is None:
            raise ValueError('rewriter="llm" needs llm=<a llama_index LLM>')
        chosen = LLMRewriter(LlamaIndexLLM(llm))
    elif isinstance(rewriter, QueryRewriter):
        chosen = rewriter
    else:
        raise TypeError(
            f'rewriter must be "light", "llm" or a QueryRewriter, got {rewriter!r}'
        )
    return DHRAG(kb, embedder=emb, store=store, settings=settings, rewriter=chosen)
