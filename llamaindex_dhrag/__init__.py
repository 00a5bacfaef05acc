"""LlamaIndex adapter for dhrag: DH-RAG's dynamic history database in LlamaIndex apps.

* ``DHRAGChatEngine``: a ``BaseChatEngine`` (chat, stream, async) over your retriever and LLM.
* ``DHRAGRetriever``: DH-RAG's weighted history + knowledge-base context as a retriever.
* ``DHRAGMemoryBlock``: DH-RAG history selection inside ``llama_index.core.memory.Memory``.
* Bridges: ``RetrieverKnowledgeBase`` (text path), ``VectorIndexKnowledgeBase`` (a vector
  index searched by vector), ``LlamaIndexEmbedder``, ``DHRAGEmbedding``, ``LlamaIndexLLM``
  (your LLM for the core's ``LLMRewriter``), ``build_dhrag``; translations:
  ``selection_to_nodes``, ``selection_trace``.

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

from llamaindex_dhrag.build import build_dhrag
from llamaindex_dhrag.chat_engine import DHRAGChatEngine
from llamaindex_dhrag.convert import passage_from_node, selection_to_nodes, selection_trace
from llamaindex_dhrag.embeddings import DHRAGEmbedding, LlamaIndexEmbedder
from llamaindex_dhrag.knowledge import RetrieverKnowledgeBase, VectorIndexKnowledgeBase
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
    "VectorIndexKnowledgeBase",
    "build_dhrag",
    "passage_from_node",
    "selection_to_nodes",
    "selection_trace",
]
