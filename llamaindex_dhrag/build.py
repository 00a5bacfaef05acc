"""``build_dhrag``: a ``DHRAG`` over a LlamaIndex retriever in one call (knowledge base,
embedder, history store and rewriter chosen from LlamaIndex arguments)."""

from __future__ import annotations

from typing import Any, Literal

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms.llm import LLM

from dhrag_core import DHRAG, Embedder, LightRewriter, LLMRewriter, QueryRewriter, Settings
from dhrag_core.store import HistoryStore
from dhrag_core.validation import SearchPath
from llamaindex_dhrag.knowledge import knowledge_and_embedder
from llamaindex_dhrag.llm import LlamaIndexLLM

__all__ = ["build_dhrag", "check_retriever"]


def build_dhrag(
    retriever: BaseRetriever,
    *,
    embedder: Embedder | BaseEmbedding | None = None,
    store: HistoryStore | str | None = None,
    settings: Settings | None = None,
    rewriter: QueryRewriter | Literal["light", "llm"] = "light",
    llm: LLM | None = None,
    search: SearchPath = "auto",
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
    check_retriever(retriever)
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


def check_retriever(retriever: Any) -> BaseRetriever:
    """``retriever`` if it is a LlamaIndex ``BaseRetriever``, else ``TypeError``."""
    if not isinstance(retriever, BaseRetriever):
        raise TypeError(
            "retriever must be a llama_index BaseRetriever (e.g. index.as_retriever()), "
            f"got {type(retriever).__name__}"
        )
    return retriever
