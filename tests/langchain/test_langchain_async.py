"""The async path is really async: the inner retriever's and chat model's own async APIs run
on the caller's event loop, concurrent sessions overlap and do not mix."""

from __future__ import annotations

import asyncio

from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore
from lc_support import (
    FOLLOW_UP,
    PIG_A,
    PIG_Q,
    WALL_A,
    WALL_Q,
    AsyncOnlyChatModel,
    BarrierRetriever,
    hash_engine,
)

from dhrag_core import DHRAG, HashingEmbedder, LLMRewriter
from langchain_dhrag import DHRAGRetriever, LangChainLLM

SESSIONS = {
    "s-wall": (WALL_Q, WALL_A, "Wall note: the Great Wall of China is made of rammed earth."),
    "s-pig": (PIG_Q, PIG_A, "Pig note: wild guinea pigs sleep in burrows of other animals."),
    "s-berlin": ("When did the Berlin Wall come down?", "On 9 November 1989.",
                 "Berlin note: the Berlin Wall fell on 9 November 1989."),
    "s-moon": ("How far away is the Moon?", "About 384,400 km on average.",
               "Moon note: the lunar distance averages 384,400 km."),
}


async def test_concurrent_ainvokes_overlap_and_keep_sessions_apart(
    store: InMemoryVectorStore,
) -> None:
    inner = BarrierRetriever(store=store, parties=len(SESSIONS))
    retriever = DHRAGRetriever.from_knowledge(inner, embedder=HashingEmbedder(), k=30)
    for sid, (q, a, note) in SESSIONS.items():
        await retriever.arecord(sid, q, a, documents=[Document(note, id=f"note-{sid}")])

    async def ask(sid: str) -> list[Document]:
        return await retriever.ainvoke(FOLLOW_UP, config={"configurable": {"session_id": sid}})

    # the barrier only opens when all four searches are in flight at once: a sync or
    # serialised path would time out (or raise: the inner sync path is disabled)
    results = await asyncio.wait_for(asyncio.gather(*(ask(s) for s in SESSIONS)), timeout=30)

    for sid, docs in zip(SESSIONS, results, strict=True):
        assert {d.metadata["dhrag"]["session_id"] for d in docs} == {sid}
        history_ids = {d.id for d in docs if d.metadata["dhrag"]["source"] == "history"}
        assert history_ids == {f"note-{sid}"}, (sid, history_ids)
        q = SESSIONS[sid][0]
        assert docs[0].metadata["dhrag"]["rewritten_query"] != FOLLOW_UP, q
    assert inner.arrived == len(SESSIONS)


async def test_async_retrieve_then_record_round_trip(engine: DHRAG) -> None:
    retriever = DHRAGRetriever(engine=engine, k=3)
    docs = await retriever.ainvoke(WALL_Q, session_id="alice")
    await retriever.arecord("alice", WALL_Q, WALL_A)
    (turn,) = engine.history.turns("alice")
    assert [p.id for p in turn.passages] == [d.id for d in docs]

    follow = await retriever.ainvoke(FOLLOW_UP, session_id="alice")
    assert all("Great Wall" in d.metadata["title"] for d in follow)


async def test_chat_model_rewriter_uses_ainvoke_under_ainvoke(
    store: InMemoryVectorStore,
) -> None:
    model = AsyncOnlyChatModel(answer="How long is the Great Wall of China?")
    engine = hash_engine(store)
    engine.rewriter = LLMRewriter(LangChainLLM(model))  # the core's rewriter, awaited
    retriever = DHRAGRetriever(engine=engine)
    retriever.record("alice", WALL_Q, WALL_A)

    docs = await retriever.ainvoke(FOLLOW_UP, session_id="alice")

    assert model.async_calls == 1
    assert docs[0].metadata["dhrag"]["rewritten_query"] == "How long is the Great Wall of China?"


async def test_batch_of_sessions_with_abatch(engine: DHRAG) -> None:
    retriever = DHRAGRetriever(engine=engine, k=2)
    retriever.record("a", PIG_Q, PIG_A, documents=["Pig passage only in a's history."])
    configs = [{"configurable": {"session_id": s}} for s in ("a", "b")]
    out = await retriever.abatch(["Where do they sleep?"] * 2, config=configs)  # type: ignore[arg-type]
    assert [docs[0].metadata["dhrag"]["session_id"] for docs in out] == ["a", "b"]


async def test_many_concurrent_calls_do_not_exhaust_the_default_executor(
    engine: DHRAG,
) -> None:
    # the vector store's async search embeds the query in the loop's default executor while
    # each selection waits for it from a worker thread: sharing that executor would deadlock
    retriever = DHRAGRetriever(engine=engine, k=2)
    calls = [retriever.ainvoke(WALL_Q, session_id=f"s{i}") for i in range(48)]
    results = await asyncio.wait_for(asyncio.gather(*calls), timeout=30)
    assert all(len(docs) == 2 for docs in results)
