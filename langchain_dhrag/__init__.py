"""LangChain adapter for dhrag: DH-RAG conversational memory for retrievers, chains and agents.

Example:
    ```python
    from langchain_core.vectorstores import InMemoryVectorStore
    from dhrag_core import MiniLMEmbedder
    from langchain_dhrag import DHRAGEmbeddings, DHRAGRetriever

    store = InMemoryVectorStore(DHRAGEmbeddings(MiniLMEmbedder()))
    store.add_texts(passages)
    retriever = DHRAGRetriever.from_knowledge(store, k=4)
    cfg = {"configurable": {"session_id": "alice"}}
    docs = retriever.invoke("How long is it?", config=cfg)
    retriever.record("alice", "How long is it?", answer)
    ```

``DHRAGMiddleware`` (agents) needs the ``langchain`` package and is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from langchain_dhrag.bridges import (
    ChatModelRewriter,
    DHRAGEmbeddings,
    LangChainEmbedder,
    LangChainKnowledgeBase,
)
from langchain_dhrag.documents import (
    TRACE_KEY,
    document_to_passage,
    format_documents,
    selection_to_documents,
)
from langchain_dhrag.memory import DHRAGChatMessageHistory, DHRAGMemory
from langchain_dhrag.retrievers import DHRAGRetriever

if TYPE_CHECKING:
    from langchain_dhrag.middleware import DHRAGMiddleware

__all__ = [
    "TRACE_KEY",
    "ChatModelRewriter",
    "DHRAGChatMessageHistory",
    "DHRAGEmbeddings",
    "DHRAGMemory",
    "DHRAGMiddleware",
    "DHRAGRetriever",
    "LangChainEmbedder",
    "LangChainKnowledgeBase",
    "document_to_passage",
    "format_documents",
    "selection_to_documents",
]


def __getattr__(name: str) -> Any:
    if name == "DHRAGMiddleware":
        try:
            from langchain_dhrag.middleware import DHRAGMiddleware
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError(
                "DHRAGMiddleware needs the 'langchain' package (v1, with "
                "langchain.agents.middleware): pip install 'dhrag[langchain]'"
            ) from exc
        return DHRAGMiddleware
    raise AttributeError(f"module 'langchain_dhrag' has no attribute {name!r}")
