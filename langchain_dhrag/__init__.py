"""LangChain adapter for dhrag: DH-RAG conversational memory for retrievers, chains and agents.

Example:
    ```python
    from langchain_core.vectorstores import InMemoryVectorStore
    from dhrag_core import MiniLMEmbedder
    from langchain_dhrag import DHRAGEmbeddings, DHRAGRetriever, with_dhrag_memory

    store = InMemoryVectorStore(DHRAGEmbeddings(MiniLMEmbedder()))
    store.add_texts(passages)
    retriever = DHRAGRetriever.from_knowledge(store, k=4)  # searched by vector
    chat = with_dhrag_memory(rag_chain_using(retriever), retriever)
    chat.invoke("How long is it?", {"configurable": {"session_id": "alice"}})  # recorded
    ```

``DHRAGMiddleware`` (agents) needs the ``langchain`` package and is imported on first use.

The names match the LlamaIndex adapter's: ``RetrieverKnowledgeBase`` and
``VectorStoreKnowledgeBase``, the type translations in ``langchain_dhrag.convert``, the engine at
``.engine`` and ``record(session_id, query, answer, *, documents=...)``. The old names
(``LangChainKnowledgeBase``, ``LangChainVectorKnowledgeBase``, ``ChatModelLLM``,
``langchain_dhrag.documents``) still work for one release, with a ``DeprecationWarning``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dhrag_core.deprecation import renamed_attribute
from langchain_dhrag.convert import (
    TRACE_KEY,
    document_to_passage,
    format_documents,
    selection_to_documents,
)
from langchain_dhrag.embeddings import DHRAGEmbeddings, LangChainEmbedder
from langchain_dhrag.knowledge import RetrieverKnowledgeBase, VectorStoreKnowledgeBase
from langchain_dhrag.llm import LangChainLLM
from langchain_dhrag.memory import DHRAGChatMessageHistory, DHRAGMemory
from langchain_dhrag.retrievers import DHRAGRetriever
from langchain_dhrag.runnables import DHRAGMemoryRunnable, with_dhrag_memory

if TYPE_CHECKING:
    from langchain_dhrag.middleware import DHRAGMiddleware

__all__ = [
    "TRACE_KEY",
    "DHRAGChatMessageHistory",
    "DHRAGEmbeddings",
    "DHRAGMemory",
    "DHRAGMemoryRunnable",
    "DHRAGMiddleware",
    "DHRAGRetriever",
    "LangChainEmbedder",
    "LangChainLLM",
    "RetrieverKnowledgeBase",
    "VectorStoreKnowledgeBase",
    "document_to_passage",
    "format_documents",
    "selection_to_documents",
    "with_dhrag_memory",
]

#: Old names, kept for one release (deprecated).
_RENAMED = {
    "ChatModelLLM": "LangChainLLM",
    "LangChainKnowledgeBase": "RetrieverKnowledgeBase",
    "LangChainVectorKnowledgeBase": "VectorStoreKnowledgeBase",
}


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
    return renamed_attribute(__name__, name, _RENAMED, globals())
