"""Bridges: LangChain embeddings <-> dhrag embedders, chat model -> rewriter, retriever or
vector store -> knowledge base."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import FakeListChatModel, GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.vectorstores import InMemoryVectorStore
from lc_support import (
    FOLLOW_UP,
    PIG_A,
    PIG_Q,
    WALL_A,
    WALL_Q,
    HashEmbeddings,
    ListRetriever,
    RaisingChatModel,
    hash_engine,
)

from dhrag_core import (
    DHRAG,
    LLM,
    Embedder,
    FaissKnowledgeBase,
    HashingEmbedder,
    KnowledgeBase,
    LightRewriter,
    LLMRewriter,
    Passage,
    Rewrite,
    SelectedTurn,
)
from dhrag_core.algorithm.llm_rewriting import clean_rewrite
from langchain_dhrag import (
    DHRAGEmbeddings,
    DHRAGRetriever,
    LangChainEmbedder,
    LangChainLLM,
    RetrieverKnowledgeBase,
    VectorStoreKnowledgeBase,
    document_to_passage,
)

# -- embeddings ----------------------------------------------------------------------------


def test_langchain_embedder_is_a_dhrag_embedder() -> None:
    lc = HashEmbeddings(64)
    emb = LangChainEmbedder(lc)
    assert lc.calls == []  # nothing embedded before first use
    assert emb.dimension == 64
    assert len(lc.calls) == 1  # one probe text
    assert emb.dimension == 64 and len(lc.calls) == 1  # once
    assert isinstance(emb, Embedder)

    m = emb.encode(["the great wall of china", "great wall china length", "guinea pig food"])
    assert m.dtype == np.float32 and m.shape == (3, 64)
    np.testing.assert_allclose(np.linalg.norm(m, axis=1), 1.0, rtol=1e-5)
    assert m[0] @ m[1] > m[0] @ m[2]  # related texts stay related
    np.testing.assert_allclose(m, HashingEmbedder(64).encode(
        ["the great wall of china", "great wall china length", "guinea pig food"]), atol=1e-6)
    assert emb.encode([]).shape == (0, 64)


def test_given_dimension_needs_no_probe(store: InMemoryVectorStore) -> None:
    lc = HashEmbeddings(32)
    emb = LangChainEmbedder(lc, dimension=32)
    DHRAGRetriever.from_knowledge(store, embedder=emb)
    assert emb.dimension == 32
    assert lc.calls == []


def test_round_trip_both_directions() -> None:
    inner = HashingEmbedder(48)
    there_and_back = LangChainEmbedder(DHRAGEmbeddings(inner))
    texts = ["Berlin Wall", "guinea pigs"]
    np.testing.assert_allclose(there_and_back.encode(texts), inner.encode(texts), atol=1e-6)

    lc = DHRAGEmbeddings(LangChainEmbedder(HashEmbeddings(48)))
    assert isinstance(lc, Embeddings)
    vecs = lc.embed_documents(texts)
    assert len(vecs) == 2 and len(vecs[0]) == 48 and isinstance(vecs[0][0], float)
    np.testing.assert_allclose(lc.embed_query("Berlin Wall"), vecs[0], atol=1e-6)
    assert lc.embed_documents([]) == []


def test_passage_id_falls_back_to_the_stores_metadata_id() -> None:
    # langchain-qdrant returns documents without an id, the point id in metadata["_id"]
    qdrant_doc = Document("Made of stone.", metadata={"_id": 17, "_collection_name": "kb"})
    assert document_to_passage(qdrant_doc).id == "17"
    assert document_to_passage(Document("x", id="w1", metadata={"_id": 3})).id == "w1"
    assert document_to_passage(Document("x", metadata={"_id": [1]})).id is None
    assert document_to_passage(Document("x")).id is None


def test_dhrag_embeddings_in_a_vector_store_and_its_cache() -> None:
    counted = LangChainEmbedder(HashEmbeddings(128))
    emb = DHRAGEmbeddings(counted, cache_size=2)
    store = InMemoryVectorStore(emb)
    store.add_texts(["The Great Wall is made of stone.", "Guinea pigs eat hay."])
    calls = len(counted.embeddings.calls)  # type: ignore[attr-defined]

    assert store.similarity_search("What do guinea pigs eat?", k=1)[0].page_content == (
        "Guinea pigs eat hay.")
    emb.encode(["Guinea pigs eat hay."])  # cached: no new call
    assert len(counted.embeddings.calls) == calls + 1  # type: ignore[attr-defined]
    emb.encode(["a", "b", "c"])  # evicts beyond cache_size
    emb.encode(["Guinea pigs eat hay."])
    assert len(counted.embeddings.calls) == calls + 3  # type: ignore[attr-defined]


class _BadShape(Embeddings):
    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[1.0, 0.0]]  # one row whatever the input

    def embed_query(self, text: str) -> list[float]:
        return [1.0, 0.0]


class _NaN(_BadShape):
    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[float("nan"), 0.0] for _ in texts]


def test_embedding_errors() -> None:
    with pytest.raises(TypeError, match="embeddings must be a LangChain Embeddings"):
        LangChainEmbedder(HashingEmbedder())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dimension"):
        LangChainEmbedder(HashEmbeddings(), dimension=0)
    with pytest.raises(ValueError, match="shape"):
        LangChainEmbedder(_BadShape()).encode(["a", "b"])
    with pytest.raises(ValueError, match="non-finite"):
        LangChainEmbedder(_NaN()).encode(["a"])
    with pytest.raises(TypeError, match="not one str"):
        LangChainEmbedder(HashEmbeddings()).encode("a wall")
    with pytest.raises(TypeError, match=r"texts\[1\]"):
        DHRAGEmbeddings(HashingEmbedder()).embed_documents(["a", 2])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="embedder must have"):
        DHRAGEmbeddings(HashEmbeddings())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cache_size"):
        DHRAGEmbeddings(HashingEmbedder(), cache_size=-1)


def test_langchain_embeddings_drive_a_whole_engine(store: InMemoryVectorStore) -> None:
    retriever = DHRAGRetriever.from_knowledge(store, embedder=HashEmbeddings(), k=3)
    assert isinstance(retriever.engine.history.embedder, LangChainEmbedder)
    retriever.invoke(WALL_Q, session_id="alice")
    retriever.record("alice", WALL_Q, WALL_A)
    follow = retriever.invoke(FOLLOW_UP, session_id="alice")
    assert all("Great Wall" in d.metadata["title"] for d in follow)


# -- rewriter ------------------------------------------------------------------------------


def _history(engine: DHRAG, query: str) -> list[SelectedTurn]:
    return list(engine.select("alice", query).history)


@pytest.fixture
def talked(engine: DHRAG) -> DHRAG:
    engine.record("alice", WALL_Q, WALL_A)
    return engine


def _rewriter(model: Any, **options: Any) -> LLMRewriter:
    return LLMRewriter(LangChainLLM(model), **options)


def test_rewriter_prompt_holds_user_and_assistant_turns(talked: DHRAG) -> None:
    model = GenericFakeChatModel(messages=iter([AIMessage("How long is the Great Wall?")]))
    seen: list[Any] = []
    spy = RunnableLambda(lambda msgs: seen.append(msgs) or msgs) | model
    assert isinstance(LangChainLLM(spy), LLM)

    out = _rewriter(spy).rewrite(FOLLOW_UP, _history(talked, FOLLOW_UP))

    assert out.text == "How long is the Great Wall?"
    prompt = "\n".join(m.text for m in seen[0])
    assert f"User: {WALL_Q}" in prompt
    assert f"Assistant: {WALL_A}" in prompt
    assert FOLLOW_UP in prompt


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("Standalone question: How long is the Great Wall?", "How long is the Great Wall?"),
        ('"How long is the Great Wall?"', "How long is the Great Wall?"),
        ("**Rewritten question:** 'How long is the Great Wall?'", "How long is the Great Wall?"),
        ("\n\nQuestion: How long is it, the wall?\nBecause the user asked...",
         "How long is it, the wall?"),
        ("\u201cHow long is the Great Wall?\u201d", "How long is the Great Wall?"),
        ("How long is the Great Wall?", "How long is the Great Wall?"),
    ],
)
def test_rewriter_strips_prefixes_and_quotes(talked: DHRAG, answer: str, expected: str) -> None:
    assert clean_rewrite(answer) == expected
    rw = _rewriter(FakeListChatModel(responses=[answer]))
    assert rw.rewrite(FOLLOW_UP, _history(talked, FOLLOW_UP)).text == expected


def test_rewriter_falls_back_when_the_model_fails(
    talked: DHRAG, caplog: pytest.LogCaptureFixture
) -> None:
    history = _history(talked, FOLLOW_UP)
    expected = LightRewriter().rewrite(FOLLOW_UP, history)
    assert expected.text != FOLLOW_UP

    with caplog.at_level(logging.WARNING, logger="dhrag_core.algorithm.llm_rewriting"):
        assert _rewriter(RaisingChatModel()).rewrite(FOLLOW_UP, history) == expected
    assert "provider down" in caplog.text
    empty = _rewriter(FakeListChatModel(responses=["Standalone question:  "]))
    assert empty.rewrite(FOLLOW_UP, history) == expected
    rambling = _rewriter(FakeListChatModel(responses=["x" * 50]), max_chars=10)
    assert rambling.rewrite(FOLLOW_UP, history) == expected
    not_text = _rewriter(RunnableLambda(lambda _: 42))
    assert not_text.rewrite(FOLLOW_UP, history) == expected


def test_chat_model_becomes_the_cores_llm_rewriter(store: InMemoryVectorStore) -> None:
    model = FakeListChatModel(responses=["How long is the Great Wall of China?"])
    retriever = DHRAGRetriever.from_knowledge(store, embedder=HashingEmbedder(),
                                              rewriter=model, k=3)
    rewriter = retriever.engine.rewriter
    assert isinstance(rewriter, LLMRewriter) and isinstance(rewriter.llm, LangChainLLM)
    retriever.record("alice", WALL_Q, WALL_A)
    docs = retriever.invoke(FOLLOW_UP, session_id="alice")
    assert docs[0].metadata["dhrag"]["rewritten_query"] == "How long is the Great Wall of China?"
    # no history: the engine does not call the rewriter at all
    assert retriever.invoke(FOLLOW_UP, session_id="bob")[0].metadata["dhrag"][
        "rewritten_query"] == FOLLOW_UP


def test_rewriter_errors() -> None:
    with pytest.raises(TypeError, match="model must be"):
        LangChainLLM("gpt")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="rewriter must be"):
        DHRAGRetriever.from_knowledge(InMemoryVectorStore(HashEmbeddings()),
                                      embedder=HashingEmbedder(), rewriter="llm")
    assert Rewrite("q").text == "q"


# -- knowledge base ------------------------------------------------------------------------


def test_vector_store_as_knowledge_base(store: InMemoryVectorStore) -> None:
    kb = RetrieverKnowledgeBase(store)
    assert isinstance(kb, KnowledgeBase)
    hits = kb.search(WALL_Q, k=3)
    assert len(hits) == 3
    assert all(h.id and h.title and h.score is not None for h in hits)
    assert [h.score for h in hits] == sorted((h.score or 0.0 for h in hits), reverse=True)
    assert "Great Wall" in hits[0].title
    assert hits[0].vector is None  # other embeddings than the engine's: the engine encodes


def test_vector_store_filter_and_retrievers(store: InMemoryVectorStore) -> None:
    only_pigs = RetrieverKnowledgeBase(
        store, search_kwargs={"filter": lambda d: d.metadata["title"] == "Guinea pig"})
    assert {h.title for h in only_pigs.search(WALL_Q, k=5)} == {"Guinea pig"}

    vsr = RetrieverKnowledgeBase(store.as_retriever(search_kwargs={"k": 1}))
    assert len(vsr.search(PIG_Q, k=4)) == 4  # k reaches the VectorStoreRetriever

    docs = [Document(str(i), id=str(i)) for i in range(6)]
    assert [p.id for p in RetrieverKnowledgeBase(ListRetriever(docs=docs)).search("q", 2)] == [
        "0", "1"]


async def test_async_knowledge_base_search(store: InMemoryVectorStore) -> None:
    kb = RetrieverKnowledgeBase(store)
    hits = await kb.asearch(PIG_Q, k=2)
    assert [h.id for h in hits] == [h.id for h in kb.search(PIG_Q, k=2)]


def test_knowledge_base_errors(store: InMemoryVectorStore) -> None:
    with pytest.raises(TypeError, match="source must be"):
        RetrieverKnowledgeBase(["text"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="search_kwargs"):
        RetrieverKnowledgeBase(store, search_kwargs=[("k", 1)])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="k must be >= 1"):
        RetrieverKnowledgeBase(store).search("q", 0)
    with pytest.raises(TypeError, match="k must be an int"):
        RetrieverKnowledgeBase(store).search("q", 2.0)  # type: ignore[arg-type]


def test_unserialisable_metadata_is_stored_as_text(tmp_path: Any) -> None:
    emb = HashingEmbedder()
    store = InMemoryVectorStore(DHRAGEmbeddings(emb))
    store.add_documents([Document("The wall is long.", id="w", metadata={"obj": object()})])
    retriever = DHRAGRetriever.from_knowledge(store, store=f"sqlite:///{tmp_path / 'h.db'}",
                                              session_id="default")
    retriever.invoke("wall")
    retriever.record("default", "wall", "It is long.")
    (turn,) = retriever.engine.history.turns("default")
    assert isinstance(turn.passages[0].metadata["obj"], str)


def test_hash_engine_helper_matches_a_user_setup() -> None:
    # guard for the fixtures: a PIG question finds guinea-pig passages in the demo store
    engine = hash_engine()
    assert engine.select("x", PIG_Q).context[0].passage.title == "Guinea pig"
    assert PIG_A


# -- search by vector (issue 17) -------------------------------------------------------------


class SpyStore(InMemoryVectorStore):
    """A real in-memory vector store that notes which search API ran."""

    used: list[str]

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        self.used.append("text")
        return super().similarity_search(query, k, **kwargs)

    def similarity_search_with_score(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        self.used.append("text")
        return super().similarity_search_with_score(query, k, **kwargs)

    def similarity_search_by_vector(
        self, embedding: list[float], k: int = 4, **kwargs: Any
    ) -> list[Document]:
        self.used.append("vector")
        return super().similarity_search_by_vector(embedding, k, **kwargs)

    async def asimilarity_search_by_vector(
        self, embedding: list[float], k: int = 4, **kwargs: Any
    ) -> list[Document]:
        self.used.append("avector")
        return super().similarity_search_by_vector(embedding, k, **kwargs)


@pytest.fixture
def spy_store() -> SpyStore:
    from lc_support import demo_documents

    store = SpyStore(HashEmbeddings())
    store.used = []
    store.add_documents(demo_documents())
    return store


def test_vector_store_is_searched_by_vector_with_its_own_embeddings(spy_store: SpyStore) -> None:
    retriever = DHRAGRetriever.from_knowledge(spy_store, k=3, session_id="alice")
    engine = retriever.engine
    assert isinstance(engine.knowledge, VectorStoreKnowledgeBase)
    emb = engine.history.embedder
    assert isinstance(emb, LangChainEmbedder) and emb.embeddings is spy_store.embeddings
    retriever.invoke(WALL_Q)
    retriever.record("alice", WALL_Q, WALL_A)
    follow = retriever.invoke(FOLLOW_UP)
    assert spy_store.used == ["vector", "vector"]
    assert follow[0].metadata["dhrag"]["history_turns"] == [0]

    # the same ranking as the core searching its own FAISS index by the expanded vector
    from lc_support import demo_documents

    passages = [Passage(d.page_content, id=d.id, title=d.metadata["title"])
                for d in demo_documents()]
    inner = spy_store.embeddings.inner  # type: ignore[attr-defined]
    core = DHRAG(FaissKnowledgeBase(passages, inner), embedder=inner)
    core.select("alice", WALL_Q, 3)
    core.record("alice", WALL_Q, WALL_A)
    expected = core.select("alice", FOLLOW_UP, 3)
    assert [d.id for d in follow] == [c.passage.id for c in expected.context]


async def test_async_vector_search_awaits_the_stores_async_api(spy_store: SpyStore) -> None:
    retriever = DHRAGRetriever.from_knowledge(spy_store, k=3)
    docs = await retriever.ainvoke(WALL_Q, session_id="alice")
    assert spy_store.used == ["avector"] and "Great Wall" in docs[0].metadata["title"]


def test_text_path_for_other_embedders_and_text_only_retrievers(spy_store: SpyStore) -> None:
    other = DHRAGRetriever.from_knowledge(spy_store, embedder=HashingEmbedder(), k=3)
    assert type(other.engine.knowledge) is RetrieverKnowledgeBase
    thresholded = DHRAGRetriever.from_knowledge(spy_store.as_retriever(
        search_type="similarity_score_threshold", search_kwargs={"score_threshold": 0.1}))
    assert type(thresholded.engine.knowledge) is RetrieverKnowledgeBase
    mmr = DHRAGRetriever.from_knowledge(spy_store.as_retriever(search_type="mmr"))
    assert isinstance(mmr.engine.knowledge, VectorStoreKnowledgeBase)
    assert mmr.invoke(PIG_Q, session_id="a")[0].metadata["title"] == "Guinea pig"
    other.invoke(PIG_Q, session_id="a")
    assert spy_store.used[-1] == "text"
    text = DHRAGRetriever.from_knowledge(spy_store, search="text")
    assert type(text.engine.knowledge) is RetrieverKnowledgeBase
    with pytest.raises(ValueError, match='search="vector" needs'):
        DHRAGRetriever.from_knowledge(spy_store, embedder=HashingEmbedder(), search="vector")
    with pytest.raises(ValueError, match="search must be"):
        DHRAGRetriever.from_knowledge(spy_store, search="both")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="search_type"):
        VectorStoreKnowledgeBase(spy_store.as_retriever(
            search_type="similarity_score_threshold", search_kwargs={"score_threshold": 0.1}))


def test_dhrag_embeddings_store_uses_the_wrapped_embedder_not_a_second_model() -> None:
    emb = HashingEmbedder()
    store = InMemoryVectorStore(DHRAGEmbeddings(emb))
    store.add_texts(["The Great Wall is 21,196 km long.", "Guinea pigs eat hay."])
    retriever = DHRAGRetriever.from_knowledge(store, k=1)
    assert retriever.engine.history.embedder is emb
    kb = retriever.engine.knowledge
    assert isinstance(kb, VectorStoreKnowledgeBase)
    (hit,) = kb.search_vectors(emb.encode(["wall length"]), k=1)[0:1][0]
    assert hit.vector is not None  # the store's cached vector: nothing encoded again
