"""LlamaIndex adapter for dhrag: DH-RAG's dynamic history database in LlamaIndex apps.

* ``DHRAGChatEngine``: a ``BaseChatEngine`` (chat, stream, async) over your retriever and LLM.
* ``DHRAGRetriever``: DH-RAG's weighted history + knowledge-base context as a retriever.
* ``DHRAGMemoryBlock``: DH-RAG history selection inside ``llama_index.core.memory.Memory``.
* Bridges: ``RetrieverKnowledgeBase`` (text path), ``VectorStoreKnowledgeBase`` (a vector
  index searched by vector), ``LlamaIndexEmbedder``, ``DHRAGEmbedding``, ``LlamaIndexLLM``
  (your LLM for the core's ``LLMRewriter``), ``build_dhrag``; translations
  (``llamaindex_dhrag.convert``): ``node_to_passage``, ``selection_to_nodes``,
  ``selection_trace``.

The names match the LangChain adapter's: the engine at ``.engine``, the knowledge-base classes,
the ``convert`` module and ``record(session_id, query, answer, *, nodes=...)``. The old names
(``.rag``, ``rag=``, ``VectorIndexKnowledgeBase``, ``passage_from_node``, ``record(query,
answer)``) still work for one release, with a ``DeprecationWarning``.

Importing this package loads no model (MiniLM loads on first use).

Example:
    >>> from llama_index.core import VectorStoreIndex  # doctest: +SKIP
    >>> from llamaindex_dhrag import DHRAGChatEngine, DHRAGEmbedding  # doctest: +SKIP
    >>> embed = DHRAGEmbedding()  # offline all-MiniLM-L6-v2  # doctest: +SKIP
    >>> index = VectorStoreIndex.from_documents(docs, embed_model=embed)  # doctest: +SKIP
    >>> engine = DHRAGChatEngine.from_defaults(  # doctest: +SKIP
    ...     index.as_retriever(similarity_top_k=20), llm=my_llm, session_id="alice")
    >>> engine.chat("How long is it?").sources[0].raw_output["rewritten_query"]  # doctest: +SKIP
"""

from typing import Any

from dhrag_core.deprecation import renamed_attribute
from llamaindex_dhrag.build import build_dhrag
from llamaindex_dhrag.chat_engine import DHRAGChatEngine
from llamaindex_dhrag.convert import node_to_passage, selection_to_nodes, selection_trace
from llamaindex_dhrag.embeddings import DHRAGEmbedding, LlamaIndexEmbedder
from llamaindex_dhrag.knowledge import RetrieverKnowledgeBase, VectorStoreKnowledgeBase
from llamaindex_dhrag.llm import LlamaIndexLLM
from llamaindex_dhrag.memory import DHRAGMemoryBlock
from llamaindex_dhrag.retriever import DHRAGRetriever

__all__ = [
    "DHRAGChatEngine",
    "DHRAGEmbedding",
    "DHRAGMemoryBlock",
    "DHRAGRetriever",
    "LlamaIndexEmbedder",
    "LlamaIndexLLM",
    "RetrieverKnowledgeBase",
    "VectorStoreKnowledgeBase",
    "build_dhrag",
    "node_to_passage",
    "selection_to_nodes",
    "selection_trace",
]

#: Old names, kept for one release (deprecated).
_RENAMED = {
    "VectorIndexKnowledgeBase": "VectorStoreKnowledgeBase",
    "passage_from_node": "node_to_passage",
}


def __getattr__(name: str) -> Any:
    return renamed_attribute(__name__, name, _RENAMED, globals())
