"""DHRAGRetriever: history-aware retrieval, the trace, sessions, recording, errors."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.language_models import FakeListChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda, RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore
from lc_support import (
    FOLLOW_UP,
    PIG_A,
    PIG_Q,
    WALL_A,
    WALL_Q,
    HashEmbeddings,
    ListRetriever,
    demo_store,
    hash_engine,
)
from pydantic import ValidationError

from dhrag_core import DHRAG, FaissKnowledgeBase, HashingEmbedder, Passage, Retrieval, Settings
from langchain_dhrag import DHRAGEmbeddings, DHRAGRetriever, format_documents


def cfg(session_id: str) -> dict[str, Any]:
    return {"configurable": {"session_id": session_id}}


def titles(docs: list[Document]) -> list[str]:
    return [d.metadata["title"] for d in docs]


def converse(retriever: DHRAGRetriever, session_id: str, turns: list[tuple[str, str]]) -> None:
    for q, a in turns:
        retriever.invoke(q, config=cfg(session_id))
        retriever.record(session_id, q, a)


def test_elliptical_follow_up_is_resolved_by_history(retriever: DHRAGRetriever) -> None:
    converse(retriever, "alice", [(WALL_Q, WALL_A)])

    docs = retriever.invoke(FOLLOW_UP, config=cfg("alice"))
    fresh = retriever.invoke(FOLLOW_UP, config=cfg("bob"))

    # the hashing embedder matches "wall" anywhere: the Berlin Wall may take the last place
    assert "Great Wall" in titles(docs)[0], titles(docs)
    assert sum("Great Wall" in t for t in titles(docs)) >= 3, titles(docs)
    assert not any("Great Wall" in t for t in titles(fresh)), titles(fresh)
    trace = docs[0].metadata["dhrag"]
    assert trace["session_id"] == "alice"
    assert "wall" in trace["rewritten_query"].lower()
    assert fresh[0].metadata["dhrag"]["rewritten_query"] == FOLLOW_UP


WALL_NOTE = "Note on the Great Wall of China: its builders feared raids by northern nomads."
PIG_NOTE = "Note on guinea pigs: wild cavies sleep in burrows that other animals dug."


def test_topic_switch_then_return_uses_the_right_turns() -> None:
    # a history bonus makes the history channel bid for context slots (the default, tuned on
    # MTRAG, is 0: there history passages compete on similarity alone)
    retriever = DHRAGRetriever(engine=hash_engine(history_bonus=0.2), k=4)
    # passages that only the history holds, so a "history" source cannot be a kb tie
    retriever.record("alice", WALL_Q, WALL_A, documents=[WALL_NOTE])
    retriever.record("alice", PIG_Q, PIG_A, documents=[PIG_NOTE])

    docs = retriever.invoke("Who was the Great Wall built to keep out?", config=cfg("alice"),
                            k=8)

    history = [d for d in docs if d.metadata["dhrag"]["source"] == "history"]
    # the wall turn's passage comes back, ahead of the (more recent) guinea-pig turn's
    assert history and history[0].page_content == WALL_NOTE, [d.page_content for d in history]
    trace = history[0].metadata["dhrag"]
    assert trace["turn"] == 0  # the wall turn, not the guinea-pig turn
    assert {"cluster", "cluster_label", "chain", "via", "history_weight"} <= set(trace)
    assert "Great Wall" in docs[0].metadata.get("title", docs[0].page_content)


def test_documents_carry_trace_and_source_metadata(retriever: DHRAGRetriever) -> None:
    docs = retriever.invoke(WALL_Q)

    assert len(docs) == 4
    weights = [d.metadata["dhrag"]["weight"] for d in docs]
    assert weights == sorted(weights, reverse=True)
    assert [d.metadata["dhrag"]["rank"] for d in docs] == [0, 1, 2, 3]
    for d in docs:
        assert d.id is not None
        assert d.metadata["source"].startswith("MTRAG")  # the store's own metadata survives
        assert d.metadata["dhrag"]["source"] == "kb"
        assert d.metadata["dhrag"]["session_id"] == "default"


def test_record_stores_the_passages_that_were_returned(
    retriever: DHRAGRetriever, engine: DHRAG
) -> None:
    docs = retriever.invoke(WALL_Q, config=cfg("alice"))
    result = retriever.record("alice", WALL_Q, WALL_A)

    (turn,) = engine.history.turns("alice")
    assert turn is not None and result.turn.turn_id == turn.turn_id
    assert (turn.query, turn.response) == (WALL_Q, WALL_A)
    assert [p.id for p in turn.passages] == [d.id for d in docs]
    assert "dhrag" not in turn.passages[0].metadata  # the trace is not stored back


def test_record_with_explicit_documents_and_without_retrieval(
    retriever: DHRAGRetriever, engine: DHRAG
) -> None:
    retriever.record("a", PIG_Q, PIG_A, documents=[Document("Cavies live in burrows.", id="x"),
                                                   "plain text passage"])
    retriever.record("b", PIG_Q, PIG_A)  # no retrieval for it: stored without passages

    (a,) = engine.history.turns("a")
    (b,) = engine.history.turns("b")
    assert [p.text for p in a.passages] == ["Cavies live in burrows.", "plain text passage"]
    assert a.passages[0].id == "x"
    assert b.passages == ()


def test_record_of_another_query_does_not_take_the_pending_passages(
    retriever: DHRAGRetriever, engine: DHRAG
) -> None:
    retriever.invoke(WALL_Q, config=cfg("a"))
    retriever.record("a", PIG_Q, PIG_A)
    assert engine.history.turns("a")[0].passages == ()


def test_session_sources_and_isolation(retriever: DHRAGRetriever, engine: DHRAG) -> None:
    converse(retriever, "alice", [(WALL_Q, WALL_A)])

    by_config = retriever.invoke(FOLLOW_UP, config=cfg("alice"))
    by_kwarg = retriever.invoke(FOLLOW_UP, session_id="alice")
    by_thread = retriever.invoke(FOLLOW_UP, config={"configurable": {"thread_id": "alice"}})
    by_field = retriever.model_copy(update={"session_id": "alice"}).invoke(FOLLOW_UP)
    default = retriever.invoke(FOLLOW_UP)  # the fixture's explicit session_id="default"

    for docs in (by_config, by_kwarg, by_thread, by_field):
        assert docs[0].metadata["dhrag"]["session_id"] == "alice"
        assert "Great Wall" in docs[0].metadata["title"]
    assert default[0].metadata["dhrag"]["session_id"] == "default"
    assert engine.history.size("default") == 0
    assert engine.history.size("alice") == 1


def test_session_flows_through_an_lcel_chain(retriever: DHRAGRetriever) -> None:
    converse(retriever, "alice", [(WALL_Q, WALL_A)])
    prompt = ChatPromptTemplate.from_messages(
        [("system", "Answer from the context.\n{context}"), ("human", "{question}")]
    )
    seen: list[str] = []

    def capture(value: Any) -> Any:
        seen.append(value.to_string())
        return value

    chain = (
        {"context": retriever | format_documents, "question": RunnablePassthrough()}
        | prompt | RunnableLambda(capture) | FakeListChatModel(responses=["About 21,196 km."])
        | StrOutputParser()
    )

    answer = chain.invoke(FOLLOW_UP, config=cfg("alice"))
    retriever.record("alice", FOLLOW_UP, answer)

    assert answer == "About 21,196 km."
    assert "[1] " in seen[0] and "Great Wall" in seen[0]
    assert retriever.engine.history.size("alice") == 2
    assert retriever.engine.history.turns("alice")[1].passages  # chain's retrieval recorded


def test_k_field_and_call_argument(retriever: DHRAGRetriever) -> None:
    assert len(retriever.invoke(WALL_Q)) == 4
    assert len(retriever.invoke(WALL_Q, k=2)) == 2
    assert len(DHRAGRetriever(engine=retriever.engine, k=7).invoke(WALL_Q, session_id="a")) == 7


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"k": 0}, ValueError, "k must be >= 1"),
        ({"k": "3"}, TypeError, "k must be an int"),
        ({"k": True}, TypeError, "k must be an int"),
        ({"top_k": 3}, TypeError, "top_k"),
        ({"session_id": ""}, ValueError, "session_id"),
        ({"session_id": 7}, TypeError, "session_id"),
    ],
)
def test_bad_call_arguments(
    retriever: DHRAGRetriever, kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        retriever.invoke(WALL_Q, **kwargs)


def test_bad_queries_and_config(retriever: DHRAGRetriever) -> None:
    with pytest.raises(ValueError, match="query must not be empty"):
        retriever.invoke("   ")
    with pytest.raises(TypeError, match="query must be a str"):
        retriever.invoke(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r'config\["configurable"\]\["session_id"\]'):
        retriever.invoke(WALL_Q, config={"configurable": {"session_id": 42}})
    with pytest.raises(TypeError, match=r"answer|response"):
        retriever.record("a", WALL_Q, None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="documents must be a list"):
        retriever.record("a", WALL_Q, WALL_A, documents=Document("x"))  # type: ignore[arg-type]


def test_bad_constructor_arguments(engine: DHRAG) -> None:
    with pytest.raises(ValidationError, match="k"):
        DHRAGRetriever(engine=engine, k=0)
    with pytest.raises(ValidationError, match="engine"):
        DHRAGRetriever(engine="not an engine")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="session_id"):
        DHRAGRetriever(engine=engine, session_id="")
    with pytest.raises(TypeError, match="knowledge must be"):
        DHRAGRetriever.from_knowledge({"a dict": "is not a knowledge base"})
    with pytest.raises(TypeError, match=r"not one str; wrap it: \[text\]"):
        DHRAGRetriever.from_knowledge("one text", embedder=HashingEmbedder())
    with pytest.raises(TypeError, match=r"knowledge\[1\] must be a str, Passage or Document"):
        DHRAGRetriever.from_knowledge(["text", 42], embedder=HashingEmbedder())


def test_failed_record_keeps_the_pending_selection(
    retriever: DHRAGRetriever, engine: DHRAG
) -> None:
    docs = retriever.invoke(WALL_Q, config=cfg("a"))
    with pytest.raises(TypeError):
        retriever.record("a", WALL_Q, 123)  # type: ignore[arg-type]
    retriever.record("a", WALL_Q, WALL_A)
    assert [p.id for p in engine.history.turns("a")[0].passages] == [d.id for d in docs]


def test_from_knowledge_over_a_vector_store_retriever_reuses_its_vectors() -> None:
    embeddings = DHRAGEmbeddings(HashingEmbedder())
    store = demo_store(embeddings)
    search = store.as_retriever(search_kwargs={"k": 2})
    retriever = DHRAGRetriever.from_knowledge(
        search, settings=Settings(retrieval=Retrieval(kb_k=6)), k=5, session_id="default")

    assert retriever.engine.history.embedder is embeddings.embedder  # shared, not MiniLM
    docs = retriever.invoke(WALL_Q)
    # the VectorStoreRetriever was asked for kb_k documents, not its own k=2
    assert len(docs) == 5
    sel = retriever.engine.select("default", WALL_Q)
    assert all(c.passage.vector is not None for c in sel.context)  # no re-encoding needed


def test_from_knowledge_over_a_retriever_without_k() -> None:
    docs = [Document(f"Passage number {i} about walls.", id=str(i)) for i in range(30)]
    retriever = DHRAGRetriever.from_knowledge(
        ListRetriever(docs=docs), embedder=HashEmbeddings(),
        settings=Settings(retrieval=Retrieval(kb_k=5)), k=10,
        session_id="default",
    )
    got = retriever.invoke("walls")
    assert len(got) == 5  # cut to kb_k by the bridge, then integrated
    assert {d.id for d in got} <= {str(i) for i in range(5)}


def test_from_knowledge_over_a_faiss_knowledge_base() -> None:
    emb = HashingEmbedder()
    kb = FaissKnowledgeBase(["The Great Wall is 21,196 km long.", "Guinea pigs eat hay."], emb)
    retriever = DHRAGRetriever.from_knowledge(kb, embedder=emb, k=1, session_id="default")
    assert retriever.invoke("great wall length")[0].page_content.startswith("The Great Wall")


def test_from_knowledge_over_a_list_of_texts_passages_and_documents() -> None:
    emb = HashingEmbedder()
    retriever = DHRAGRetriever.from_knowledge(
        ["The Great Wall is 21,196 km long.", Passage("Guinea pigs eat hay.", id="pigs"),
         Document("The Nile is 6,650 km long.", id="nile")],
        embedder=emb, k=1, session_id="default",
    )
    assert isinstance(retriever.engine.knowledge, FaissKnowledgeBase)
    assert retriever.engine.history.embedder is emb  # one embedder for passages and history
    assert retriever.invoke("great wall length")[0].page_content.startswith("The Great Wall")
    assert retriever.invoke("what do guinea pigs eat")[0].id == "pigs"


def test_sqlite_history_survives_a_restart(tmp_path: Path, store: InMemoryVectorStore) -> None:
    url = f"sqlite:///{tmp_path / 'history.db'}"
    first = DHRAGRetriever.from_knowledge(store, embedder=HashingEmbedder(), store=url)
    converse(first, "alice", [(WALL_Q, WALL_A)])

    second = DHRAGRetriever.from_knowledge(store, embedder=HashingEmbedder(), store=url)
    docs = second.invoke(FOLLOW_UP, config=cfg("alice"))
    assert "Great Wall" in docs[0].metadata["title"]
    assert second.engine.history.size("alice") == 1


def test_reset_forgets_only_that_session(retriever: DHRAGRetriever, engine: DHRAG) -> None:
    converse(retriever, "a", [(WALL_Q, WALL_A)])
    converse(retriever, "b", [(WALL_Q, WALL_A)])
    retriever.reset("a")
    assert engine.history.size("a") == 0
    assert engine.history.size("b") == 1


class _Runs(BaseCallbackHandler):
    def __init__(self) -> None:
        self.starts: list[tuple[str, UUID, UUID | None]] = []

    def on_retriever_start(self, serialized: Any, query: str, *, run_id: UUID,
                           parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        self.starts.append((query, run_id, parent_run_id))


def test_inner_retriever_runs_are_traced_as_children(store: InMemoryVectorStore) -> None:
    retriever = DHRAGRetriever.from_knowledge(store.as_retriever(), embedder=HashingEmbedder(),
                                              session_id="default")
    runs = _Runs()
    retriever.invoke(WALL_Q, config={"callbacks": [runs]})
    assert len(runs.starts) == 2
    (_, outer, parent), (_, _, inner_parent) = runs.starts
    assert parent is None and inner_parent == outer


def test_history_items_count_towards_k(retriever: DHRAGRetriever) -> None:
    retriever.invoke(WALL_Q, config=cfg("alice"))
    retriever.record("alice", WALL_Q, WALL_A, documents=[WALL_NOTE])
    docs = retriever.invoke(FOLLOW_UP, config=cfg("alice"), k=3)
    assert len(docs) == 3
    assert len({d.page_content for d in docs}) == 3
    assert WALL_NOTE in [d.page_content for d in retriever.invoke(FOLLOW_UP, session_id="alice",
                                                                   k=30)]


def test_empty_knowledge_base_returns_history_only() -> None:
    emb = HashingEmbedder()
    retriever = DHRAGRetriever.from_knowledge(InMemoryVectorStore(DHRAGEmbeddings(emb)),
                                              session_id="default")
    assert retriever.invoke(WALL_Q) == []
    retriever.record("default", WALL_Q, WALL_A, documents=["The wall is stone and brick."])
    docs = retriever.invoke(FOLLOW_UP)
    assert [d.page_content for d in docs] == ["The wall is stone and brick."]
    assert docs[0].metadata["dhrag"]["source"] == "history"


def test_a_missing_session_is_an_error_saying_how_to_pass_one(engine: DHRAG) -> None:
    retriever = DHRAGRetriever(engine=engine)
    for call in (lambda: retriever.invoke(WALL_Q),
                 lambda: asyncio.run(retriever.ainvoke(WALL_Q))):
        with pytest.raises(ValueError,
                           match=r"configurable.*session_id.*DHRAGRetriever\(session_id"):
            call()
    assert engine.history.size("default") == 0
    assert retriever.invoke(WALL_Q, session_id="alice")  # named per call: fine
