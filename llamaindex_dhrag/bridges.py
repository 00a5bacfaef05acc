"""Bridges between LlamaIndex components and the dhrag_core protocols.

* ``RetrieverKnowledgeBase``: any LlamaIndex ``BaseRetriever`` as DH-RAG's knowledge base K.
* ``LlamaIndexEmbedder``: any LlamaIndex ``BaseEmbedding`` as DH-RAG's embedder.
* ``DHRAGEmbedding``: the other way round, a dhrag embedder (offline MiniLM by default) as a
  LlamaIndex ``BaseEmbedding``, e.g. for ``VectorStoreIndex``.
* ``LLMRewriter``: any LlamaIndex LLM as DH-RAG's query rewriter, with a no-LLM fallback.
* ``build_dhrag``: a ``DHRAG`` over a LlamaIndex retriever in one call.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, Literal

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.llms.llm import LLM
from llama_index.core.prompts import PromptTemplate
from llama_index.core.schema import MetadataMode, NodeWithScore

from dhrag_core import (
    DHRAG,
    Embedder,
    LightRewriter,
    MiniLMEmbedder,
    Passage,
    QueryRewriter,
    Rewrite,
    SelectedTurn,
    Settings,
)
from dhrag_core.embedding import FunctionEmbedder
from dhrag_core.llm_rewriting import clean_rewrite, format_history
from dhrag_core.store import HistoryStore

__all__ = [
    "DEFAULT_REWRITE_PROMPT",
    "DHRAGEmbedding",
    "LLMRewriter",
    "LlamaIndexEmbedder",
    "RetrieverKnowledgeBase",
    "build_dhrag",
    "passage_from_node",
]

log = logging.getLogger(__name__)

#: Node metadata key under which the adapter puts its trace (kept out of LLM/embedding text).
TRACE_KEY = "dhrag"

_SCALAR = (str, int, float, bool, type(None))


def check_k(k: Any) -> int:
    """``k`` if it is an int >= 1, else ``TypeError``/``ValueError`` naming ``k``."""
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"k must be an int >= 1, got {type(k).__name__}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    return k


def _check_texts(texts: Any) -> list[str]:
    if isinstance(texts, str):
        raise TypeError("texts must be a sequence of str, not one str; wrap it: [text]")
    items = list(texts)
    for i, t in enumerate(items):
        if not isinstance(t, str):
            raise TypeError(f"texts[{i}] must be str, got {type(t).__name__}")
    return items


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


DEFAULT_REWRITE_PROMPT = PromptTemplate(
    "Given the earlier turns of a conversation between a user and an assistant and a "
    "follow-up message from the user, rewrite the follow-up as a standalone question that "
    "can be understood without the conversation: resolve pronouns and ellipsis with the "
    "earlier turns, keep it short, and do not answer it.\n\n"
    "Earlier turns (oldest first):\n{history_str}\n\n"
    "Follow-up message: {question}\n"
    "Standalone question:"
)

class LLMRewriter:
    """Query reconstruction with a LlamaIndex LLM (dhrag ``QueryRewriter`` protocol).

    The prompt shows the user *and* assistant side of the history turns DH-RAG selected
    (oldest first) and asks for a standalone question; the answer is cleaned (first line,
    no ``Standalone question:`` label, no quotes). On any error, or an empty or overlong
    answer, the ``fallback`` rewriter (default: dhrag's ``LightRewriter``) is used instead,
    so retrieval never fails because of the rewriting LLM.

    Args:
        llm: Any LlamaIndex LLM (``complete`` is called, from a worker thread under async).
        prompt: Template with ``{history_str}`` and ``{question}``.
        fallback: Rewriter used when the LLM fails; default ``LightRewriter()``.
        max_chars: Longest accepted rewrite.
        max_response_chars: Each history answer is cut to this many characters in the prompt.

    Example:
        >>> from llama_index.core.llms import MockLLM
        >>> rewriter = LLMRewriter(MockLLM())
        >>> rag = DHRAG(knowledge, embedder=embedder, rewriter=rewriter)  # doctest: +SKIP
    """

    def __init__(
        self,
        llm: LLM,
        *,
        prompt: str | PromptTemplate | None = None,
        fallback: QueryRewriter | None = None,
        max_chars: int = 1_000,
        max_response_chars: int = 600,
    ) -> None:
        if not isinstance(llm, LLM):
            raise TypeError(f"llm must be a llama_index LLM, got {type(llm).__name__}")
        if isinstance(prompt, str):
            prompt = PromptTemplate(prompt)
        if prompt is not None and not isinstance(prompt, PromptTemplate):
            raise TypeError(
                f"prompt must be a str or PromptTemplate, got {type(prompt).__name__}"
            )
        template = prompt or DEFAULT_REWRITE_PROMPT
        missing = {"history_str", "question"} - set(template.template_vars)
        if missing:
            raise ValueError(f"prompt must contain {{history_str}} and {{question}}; "
                             f"missing {sorted(missing)}")
        if fallback is not None and not isinstance(fallback, QueryRewriter):
            raise TypeError("fallback must have rewrite(query, history) (QueryRewriter)")
        for name, value in (("max_chars", max_chars), ("max_response_chars", max_response_chars)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        self.llm = llm
        self.prompt = template
        self.fallback: QueryRewriter = fallback or LightRewriter()
        self.max_chars = max_chars
        self.max_response_chars = max_response_chars

    def format_history(self, history: Sequence[SelectedTurn]) -> str:
        """The selected turns, oldest first, as ``User: ...`` / ``Assistant: ...`` lines."""
        return format_history(history, self.max_response_chars)

    def rewrite(self, query: str, history: Sequence[SelectedTurn]) -> Rewrite:
        """A standalone version of ``query`` (the fallback's when the LLM fails)."""
        try:
            prompt = self.prompt.format(history_str=self.format_history(history), question=query)
            reply = self.llm.complete(prompt).text or ""
            text = clean_rewrite(reply, self.max_chars)
            if text is None:
                raise ValueError(f"unusable rewrite ({len(reply)} characters)")
            return Rewrite(text)
        except Exception as exc:  # any LLM failure falls back; retrieval must go on
            log.warning("LLM query rewrite failed (%s: %s); using %s", type(exc).__name__,
                        exc, type(self.fallback).__name__)
            return self.fallback.rewrite(query, history)


def build_dhrag(
    retriever: BaseRetriever,
    *,
    embedder: Embedder | BaseEmbedding | None = None,
    store: HistoryStore | str | None = None,
    settings: Settings | None = None,
    rewriter: QueryRewriter | Literal["light", "llm"] = "light",
    llm: LLM | None = None,
) -> DHRAG:
    """A ``DHRAG`` whose knowledge base is a LlamaIndex retriever.

    Args:
        retriever: The static knowledge base (``index.as_retriever(similarity_top_k=20)``).
        embedder: A dhrag embedder or a LlamaIndex ``BaseEmbedding`` (bridged); default: the
            offline MiniLM, loaded on first use.
        store: History store or URL (``"memory"``, ``"sqlite:///path.db"``,
            ``"postgresql://user:password@host/db"``).
        settings: dhrag ``Settings``.
        rewriter: ``"light"`` (no LLM), ``"llm"`` (``LLMRewriter(llm)``) or a ``QueryRewriter``.
        llm: The LLM for ``rewriter="llm"``.

    Example:
        >>> rag = build_dhrag(index.as_retriever(similarity_top_k=20),  # doctest: +SKIP
        ...                   embedder=DHRAGEmbedding(), store="sqlite:///history.db")
    """
    kb = RetrieverKnowledgeBase(retriever)
    if isinstance(embedder, DHRAGEmbedding):
        embedder = embedder.embedder  # no round trip through LlamaIndex lists
    elif isinstance(embedder, BaseEmbedding):
        embedder = LlamaIndexEmbedder(embedder)
    if rewriter == "light":
        chosen: QueryRewriter = LightRewriter()
    elif rewriter == "llm":
        if llm is None:
            raise ValueError('rewriter="llm" needs llm=<a llama_index LLM>')
        chosen = LLMRewriter(llm)
    elif isinstance(rewriter, QueryRewriter):
        chosen = rewriter
    else:
        raise TypeError(
            f'rewriter must be "light", "llm" or a QueryRewriter, got {rewriter!r}'
        )
    return DHRAG(kb, embedder=embedder, store=store, settings=settings, rewriter=chosen)
