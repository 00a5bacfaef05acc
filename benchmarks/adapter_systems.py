"""DH-RAG through the real adapters, for the retrieval harness (issue 17, item 3).

What LangChain and LlamaIndex users run: the benchmark's passages in LangChain's ``FAISS``
vector store (``langchain_community``, inner product; ``lc-*``) or in a LlamaIndex
``VectorStoreIndex`` over a ``FaissVectorStore`` (``li-*``), holding the knowledge base's own
vectors (no re-embedding), retrieved through ``DHRAGRetriever`` and recorded through its
``record``. ``*-vector`` systems search the store by the expanded query vector (the adapters'
default for vector stores: they should rank as ``dhrag`` does); ``*-text`` systems send the
rewritten query as text (the path of retrievers that only take text). FAISS-backed stores,
because the frameworks' pure-Python in-memory stores take seconds per search over 36.6k
passages (``InMemoryVectorStore``: ~3.7 s on these machines); ``LangChainSystem`` still takes
``store="memory"``.

    python -m benchmarks run --import benchmarks.adapter_systems --systems dhrag,lc-*,li-*
"""

from __future__ import annotations

from typing import Literal

from benchmarks.dhrag_systems import MemoEmbedder
from benchmarks.systems import BenchContext, SystemFactory, register_system
from dhrag_core import Passage, Settings

__all__ = ["LangChainSystem", "LlamaIndexSystem"]

Search = Literal["vector", "text"]
Store = Literal["faiss", "memory"]


def _inner(ctx: BenchContext) -> MemoEmbedder:
    inner = ctx.kb.embedder
    if isinstance(inner, MemoEmbedder):
        inner = inner.inner
    return MemoEmbedder(inner)  # each system pays for its own query encodings, as dhrag does


class LangChainSystem:
    """``langchain_dhrag.DHRAGRetriever`` over LangChain's ``FAISS`` (or, with
    ``store="memory"``, ``InMemoryVectorStore``) of the passages."""

    def __init__(self, name: str, ctx: BenchContext, search: Search,
                 settings: Settings | None = None, store: Store = "faiss") -> None:
        from langchain_core.vectorstores import InMemoryVectorStore, VectorStore

        from langchain_dhrag import DHRAGEmbeddings, DHRAGRetriever

        self.name, self.reference = name, False
        kb = ctx.kb
        texts = [p.text for p in kb.passages]
        metadatas = [{**p.metadata, "title": p.title} for p in kb.passages]
        ids = [p.id or str(i) for i, p in enumerate(kb.passages)]
        embeddings = DHRAGEmbeddings(_inner(ctx), cache_size=len(texts) + 10_000)
        embeddings.preload(texts, kb.vectors)  # the KB's own vectors: nothing re-embedded
        vector_store: VectorStore
        if store == "faiss":
            from langchain_community.vectorstores import FAISS
            from langchain_community.vectorstores.utils import DistanceStrategy

            pairs = list(zip(texts, embeddings.encode(texts).tolist(), strict=True))
            vector_store = FAISS.from_embeddings(
                pairs, embeddings, metadatas=metadatas, ids=ids,
                distance_strategy=DistanceStrategy.MAX_INNER_PRODUCT)
        else:
            vector_store = InMemoryVectorStore(embeddings)
            vector_store.add_texts(texts, metadatas=metadatas, ids=ids)
        self.retriever = DHRAGRetriever.from_knowledge(
            vector_store, settings=settings or Settings(), search=search)
        self.session = ""

    def start(self, conversation_id: str) -> None:
        self.session = f"conv-{conversation_id}"
        self.retriever.reset(self.session)

    def retrieve(self, question: str, k: int) -> list[Passage]:
        from langchain_dhrag import document_to_passage

        docs = self.retriever.invoke(question, {"configurable": {"session_id": self.session}},
                                     k=k)
        return [document_to_passage(d) for d in docs]

    def observe(self, question: str, passages: list[Passage], answer: str) -> None:
        self.retriever.record(self.session, question, answer or "")  # the pending passages


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
        self.rag = build_dhrag(index.as_retriever(similarity_top_k=settings.kb_k),
                               settings=settings, search=search)
        self.session = ""

    def start(self, conversation_id: str) -> None:
        self.session = f"conv-{conversation_id}"
        self.rag.reset(self.session)

    def retrieve(self, question: str, k: int) -> list[Passage]:
        from llamaindex_dhrag import DHRAGRetriever, passage_from_node

        retriever = DHRAGRetriever(self.rag, session_id=self.session, k=k)
        return [passage_from_node(n) for n in retriever.retrieve(question)]

    def observe(self, question: str, passages: list[Passage], answer: str) -> None:
        from llamaindex_dhrag import DHRAGRetriever

        DHRAGRetriever(self.rag, session_id=self.session).record(question, answer or "")


def _langchain(search: Search) -> SystemFactory:
    return lambda ctx: LangChainSystem(f"lc-{search}", ctx, search)


def _llamaindex(search: Search) -> SystemFactory:
    return lambda ctx: LlamaIndexSystem(f"li-{search}", ctx, search)


def _register() -> None:
    searches: tuple[Search, ...] = ("vector", "text")
    for search in searches:
        register_system(f"lc-{search}", _langchain(search), description=(
            f"DH-RAG via the LangChain adapter, FAISS vector store, {search} path"))
        register_system(f"li-{search}", _llamaindex(search), description=(
            f"DH-RAG via the LlamaIndex adapter, VectorStoreIndex (FAISS), {search} path"))


_register()
