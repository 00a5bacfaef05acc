"""Batches and streams (found by the outside attack of issue 55), as a user meets them. Each
test failed before its fix.

Items 2 and 3: ``with_dhrag_memory`` stores every turn of a large ``abatch`` of one session
with its passages (the pending-selection limit never drops passages silently), and the answer
of a stream is all of its chunks, whatever LangChain type they are."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, AIMessageChunk
from langchain_core.runnables import (
    Runnable,
    RunnableGenerator,
    RunnableLambda,
    RunnablePassthrough,
)

from dhrag_core import DHRAG, FaissKnowledgeBase, HashingEmbedder, Limits, Passage, Settings
from langchain_dhrag import DHRAGRetriever, format_documents, with_dhrag_memory

WALLS = [Passage(f"The wall number {i} is {i * 10} km long and built of stone.", id=f"w{i}")
         for i in range(80)]
QUESTIONS = [f"How long is wall number {i}?" for i in range(64)]


def cfg(sid: str) -> Any:
    return {"configurable": {"session_id": sid}}


def _engine(**limits: Any) -> DHRAG:
    emb = HashingEmbedder()
    return DHRAG(FaissKnowledgeBase(WALLS, emb), embedder=emb,
                 settings=Settings(limits=Limits(**limits)))


# -- item 2: a large batch of one session keeps every turn's passages -----------------------

@pytest.mark.parametrize("size", [17, 64])
def test_abatch_of_many_questions_of_one_session_stores_each_with_its_passages(
    size: int,
) -> None:
    engine = _engine()  # default config
    retriever = DHRAGRetriever(engine=engine, k=3)
    chain = ({"context": retriever | format_documents, "question": RunnablePassthrough()}
             | RunnableLambda(lambda x: f"Answer to: {x['question']}"))
    chat = with_dhrag_memory(chain, retriever)
    questions = QUESTIONS[:size]
    answers = asyncio.run(chat.abatch(questions, cfg("alice")))
    assert answers == [f"Answer to: {q}" for q in questions]
    turns = engine.history.turns("alice")
    assert sorted(t.query for t in turns) == sorted(questions)
    assert [t.query for t in turns if not t.passages] == []  # before: the 48 past the 16th
    assert engine.pending("alice") is None  # nothing left behind


def test_a_selection_dropped_by_the_pending_limit_warns_naming_the_setting(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = _engine(max_pending=1)  # room for 16 selections in all
    for q in QUESTIONS[:40]:
        engine.select("s", q)
    with caplog.at_level(logging.WARNING, logger="dhrag_core"):
        engine.record("s", QUESTIONS[-1], "an answer")  # never selected: no warning
        assert not caplog.records
        engine.record("s", QUESTIONS[39], "an answer")  # still pending: its passages
        assert not caplog.records
        engine.record("s", QUESTIONS[0], "an answer")  # dropped: stored without, says so
    (message,) = [r.getMessage() for r in caplog.records]
    assert "max_pending" in message and "without passages" in message
    passages = {t.query: len(t.passages) for t in engine.history.turns("s")}
    assert passages[QUESTIONS[39]] > 0 and passages[QUESTIONS[0]] == 0


def test_pending_selections_stay_bounded_engine_wide() -> None:
    engine = _engine(max_pending=2)  # 2 sessions, 32 selections in all
    for q in QUESTIONS[:20]:
        engine.select("a", q)
    for q in QUESTIONS[:20]:
        engine.select("b", q)
    kept = {sid: [q for q in QUESTIONS[:20] if engine.pending(sid, q) is not None]
            for sid in "ab"}
    assert kept == {"a": QUESTIONS[8:20], "b": QUESTIONS[:20]}  # oldest dropped first
    assert engine._pending.count == 32  # the count the bound is kept by
    engine.select("c", "wall")
    assert engine.pending("a") is None and engine.pending("c") is not None
    engine.reset("b")
    assert engine._pending.count == 1


# -- item 3: a stream's answer is all of its chunks -----------------------------------------

def _streaming(chunks: list[Any]) -> Runnable[Any, Any]:
    def transform(inputs: Iterator[Any]) -> Iterator[Any]:
        for _ in inputs:
            pass
        yield from chunks

    async def atransform(inputs: AsyncIterator[Any]) -> AsyncIterator[Any]:
        async for _ in inputs:
            pass
        for chunk in chunks:
            yield chunk

    return RunnableGenerator(transform, atransform)


WALL = "The wall is 30 km long."
STREAMS: dict[str, tuple[list[Any], str | None]] = {
    "dicts": ([{"answer": "The wall "}, {"answer": "is 30 km long."}], None),
    "dicts with other keys": ([{"context": ["w1"]}, {"answer": "The wall "},
                               {"answer": None}, {"answer": "is 30 km long."}], "answer"),
    "dicts of message chunks": ([{"answer": AIMessageChunk(content="The wall ")},
                                 {"answer": AIMessageChunk(content="is 30 km long.")}], None),
    "str": (["The wall ", "is 30 ", "km long."], None),
    "message chunks": ([AIMessageChunk(content="The wall "),
                        AIMessageChunk(content="is 30 km long.")], None),
    "whole messages": ([AIMessage(content="The wall "), AIMessage(content="is 30 km long.")],
                       None),
}


@pytest.mark.parametrize("name", list(STREAMS))
def test_stream_and_astream_store_the_whole_answer(name: str) -> None:
    chunks, output_key = STREAMS[name]
    engine = _engine()
    chat = with_dhrag_memory(_streaming(chunks), engine, output_key=output_key)
    assert list(chat.stream("How long is the wall?", cfg("s"))) == chunks

    async def consume() -> list[Any]:
        return [c async for c in chat.astream("How long is the wall?", cfg("a"))]

    assert asyncio.run(consume()) == chunks
    for sid in ("s", "a"):
        assert [t.response for t in engine.history.turns(sid)] == [WALL], (name, sid)
