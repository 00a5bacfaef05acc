"""DH-RAG through the real adapters, for the retrieval harness (issue 17, item 3).

What LangChain and LlamaIndex users run: the benchmark's passages in LangChain's
``QdrantVectorStore`` (``langchain-qdrant``, Qdrant's local in-process mode, dot product;
``lc-*``) or in a LlamaIndex ``VectorStoreIndex`` over a ``FaissVectorStore`` (``li-*``),
holding the knowledge base's own vectors (no re-embedding), retrieved through
``DHRAGRetriever`` and recorded through its ``record``. ``*-vector`` systems search the store by
the expanded query vector (the adapters' default for vector stores: they should rank as
``dhrag`` does); ``*-text`` systems send the rewritten query as text (the path of retrievers
that only take text). Qdrant's local mode scans every vector exactly, in numpy; langchain-core's
``InMemoryVectorStore`` does too but converts its stored lists on every search, about ten times
slower over 36.6k passages (``LangChainSystem`` still takes ``store="memory"``).

    python -m benchmarks run --import benchmarks.harness.adapter_systems --systems dhrag,lc-*,li-*
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

from benchmarks.harness.dhrag_systems import MemoEmbedder
from benchmarks.harness.systems import BenchContext, SystemFactory, register_system
from dhrag_core import Passage, Settings

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings
    from langchain_core.vectorstores import VectorStore

__all__ = ["LangChainSystem", "LlamaIndexSystem"]

Search = Literal["vector", "text"]
Store = Literal["qdrant", "memory"]


def _inner(ctx: BenchContext) -> MemoEmbedder:
    inner = ctx.kb.embedder
    if isinstance(inner, MemoEmbedder):
        inner = inner.inner
    return MemoEmbedder(inner)  # each system pays for its own query encodings, as dhrag does


class LangChainSystem:
    """``langchain_dhrag.DHRAGRetriever`` over a ``QdrantVectorStore`` (or, with
    ``store="memory"``, an ``InMemoryVectorStore``) of the passages.

    Qdrant point ids are integers or UUIDs, so the store holds passage ``i`` as point ``i``
    (the adapter reads it back from ``metadata["_id"]``) and ``retrieve`` returns the
    knowledge base's own ids.
    """

    def __init__(self, name: str, ctx: BenchContext, search: Search,
                 settings: Settings | None = None, store: Store = "qdrant") -> None:
        from langchain_core.vectorstores import InMemoryVectorStore

        from langchain_dhrag import DHRAGEmbeddings, DHRAGRetriever

        self.name, self.reference = name, False
        kb = ctx.kb
        texts = [p.text for p in kb.passages]
        metadatas = [{**p.metadata, "title": p.title} for p in kb.passages]
        ids = [p.id or str(i) for i, p in enumerate(kb.passages)]
        embeddings = DHRAGEmbeddings(_inner(ctx), cache_size=len(texts) + 10_000)
        embeddings.preload(texts, kb.vectors)  # the KB's own vectors: nothing re-embedded
        vector_store: VectorStore
        if store == "qdrant":
            vector_store = _qdrant(embeddings, texts, metadatas, kb.vectors.shape[1])
        else:
            vector_store = InMemoryVectorStore(embeddings)
            vector_store.add_texts(texts, metadatas=metadatas, ids=ids)
        self.retriever = DHRAGRetriever.from_knowledge(
            vector_store, settings=settings or Settings(), search=search)
        self.session = ""
        self.ids = ids if store == "qdrant" else None

    def start(self, conversation_id: str) -> None:
        self.session = f"conv-{conversation_id}"
        self.retriever.reset(self.session)

    def retrieve(self, question: str, k: int) -> list[Passage]:
        from langchain_dhrag import document_to_passage

        docs = self.retriever.invoke(question, {"configurable": {"session_id": self.session}},
                                     k=k)
        passages = [document_to_passage(d) for d in docs]
        ids = self.ids
        return passages if ids is None else [replace(p, id=ids[int(str(p.id))]) for p in passages]

    def observe(self, question: str, passages: list[Passage], answer: str) -> None:
        self.retriever.record(self.session, question, answer or "")  # the pending passages


def _qdrant(embeddings: Embeddings, texts: list[str], metadatas: list[dict[str, Any]],
            dim: int) -> VectorStore:
    """An in-process Qdrant collection (exact dot-product scan) holding passage ``i`` as
    point ``i``."""
    from langchain_qdrant import QdrantVectorStore
    from qdrant_client import QdrantClient
    from qdrant_client.models import Distance, VectorParams

    client = QdrantClient(location=":memory:")
    client.create_collection("kb", vectors_config=VectorParams(size=dim, distance=Distance.DOT))
    store = QdrantVectorStore(client, "kb", embeddings, distance=Distance.DOT)
    with warnings.catch_warnings():  # local mode's advice to use a server past 20,000 points
        warnings.filterwarnings("ignore", "Local mode is not recommended", UserWarning)
        store.add_texts(texts, metadatas=metadatas, ids=list(range(len(texts))),
                        batch_size=1024)
    return store


class LlamaIndexSystem:
    """``llamaindex_dhrag.DHRAGRetriever`` over a ``VectorStoreIndex`` of the passages, stored
    in a ``FaissVectorStore`` (inner product)."""

    def __init__(self, name: str, ctx: BenchContext, search: Search,
                 settings: Settings | None = None) -> None:
        import faiss
        from llama_index.core import StorageContext, VectorStoreIndex
        from llama_index.core.schema import TextNode
        from llama_index.vector_stores.faiss import FaissVectorStore

        from llamaindex_dhrag import DHRAGEmbedding, build_dhrag

        self.name, self.reference = name, False
        kb = ctx.kb
        settings = settings or Settings()
        embedder = _inner(ctx)
        embedder.preload([p.text for p in kb.passages], kb.vectors)  # passages come back
        # from the docstore without vectors: the engine gets the KB's own, not re-embedded
        nodes = [TextNode(id_=p.id or str(i), text=p.text, metadata={"title": p.title},
                          embedding=v.astype(float).tolist())  # preset: not re-embedded
                 for i, (p, v) in enumerate(zip(kb.passages, kb.vectors, strict=True))]
        faiss_store = FaissVectorStore(faiss_index=faiss.IndexFlatIP(kb.vectors.shape[1]))
        index = VectorStoreIndex(
            nodes, storage_context=StorageContext.from_defaults(vector_store=faiss_store),
            embed_model=DHRAGEmbedding(embedder))
        self.rag = build_dhrag(index.as_retriever(similarity_top_k=settings.retrieval.kb_k),
                               settings=settings, search=search)
        self.session = ""

    def start(self, conversation_id: str) -> None:
        self.session = f"conv-{conversation_id}"
        self.rag.reset(self.session)

    def retrieve(self, question: str, k: int) -> list[Passage]:
        from llamaindex_dhrag import DHRAGRetriever, node_to_passage

        retriever = DHRAGRetriever(self.rag, session_id=self.session, k=k)
        return [node_to_passage(n) for n in retriever.retrieve(question)]

    def observe(self, question: str, passages: list[Passage], answer: str) -> None:
        from llamaindex_dhrag import DHRAGRetriever

        DHRAGRetriever(self.rag, session_id=self.session).record(self.session, question,
                                                                 answer or "")


def _langchain(search: Search) -> SystemFactory:
    return lambda ctx: LangChainSystem(f"lc-{search}", ctx, search)


def _llamaindex(search: Search) -> SystemFactory:
    return lambda ctx: LlamaIndexSystem(f"li-{search}", ctx, search)


def _register() -> None:
    searches: tuple[Search, ...] = ("vector", "text")
    for search in searches:
        register_system(f"lc-{search}", _langchain(search), description=(
            f"DH-RAG via the LangChain adapter, Qdrant vector store (local), {search} path"))
        register_system(f"li-{search}", _llamaindex(search), description=(
            f"DH-RAG via the LlamaIndex adapter, VectorStoreIndex (FAISS), {search} path"))


_register()
