"""Async chat inside a running event loop: concurrent sessions stay apart, the loop stays free."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from llama_index.core import VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle

from llamaindex_dhrag import DHRAGChatEngine

Make = Callable[..., DHRAGChatEngine]

FIRST = {
    "alice": "What is the Great Wall of China built out of?",
    "bob": "Where do guinea pigs sleep in the wild?",
    "carol": "When did the Berlin Wall come down?",
}
FOLLOW = {
    "alice": "How long is it?",
    "bob": "How many years do they live?",
    "carol": "How long is it?",
}
EXPECT = {"alice": "21,196 km", "bob": "guinea pigs", "carol": "155 km"}


class SlowRetriever(BaseRetriever):
    """A retriever whose synchronous search blocks its thread (like a remote vector store)."""

    def __init__(self, inner: BaseRetriever, delay: float) -> None:
        super().__init__()
        self.inner, self.delay = inner, delay

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        time.sleep(self.delay)
        return self.inner.retrieve(query_bundle)


class AsyncOnlyRetriever(BaseRetriever):
    """A retriever with real async retrieval; its sync path must not be used under async."""

    def __init__(self, inner: BaseRetriever) -> None:
        super().__init__()
        self.inner = inner
        self.async_calls = 0

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        raise AssertionError("sync retrieval used from async code")

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        self.async_calls += 1
        await asyncio.sleep(0.01)
        return await self.inner.aretrieve(query_bundle)


async def test_achat_awaits_an_async_retriever(make_engine: Make,
                                               index: VectorStoreIndex) -> None:
    retriever = AsyncOnlyRetriever(index.as_retriever(similarity_top_k=5))
    engine = make_engine(retriever=retriever)
    await engine.achat(FIRST["alice"])
    reply = await engine.achat("How long is it?")
    assert "21,196 km" in reply.response
    assert retriever.async_calls == 2


async def test_achat_inside_a_running_loop(make_engine: Make) -> None:
    engine = make_engine()
    first = await engine.achat(FIRST["alice"])
    reply = await engine.achat("How long is it?")
    assert "stone, brick" in first.response
    assert "21,196 km" in reply.response
    assert reply.source_nodes[0].node.node_id == "wall-length"
    assert [m.content for m in engine.chat_history][::2] == [FIRST["alice"], "How long is it?"]


async def test_concurrent_sessions_do_not_mix(make_engine: Make) -> None:
    engine = make_engine()
    names = list(FIRST)
    await asyncio.gather(*(engine.achat(FIRST[n], session_id=n) for n in names))
    replies = await asyncio.gather(*(engine.achat(FOLLOW[n], session_id=n) for n in names))

    for name, reply in zip(names, replies, strict=True):
        assert EXPECT[name] in reply.response.lower(), name
        trace = reply.sources[0].raw_output
        assert trace["session_id"] == name
        assert [h["query"] for h in trace["history"]] == [FIRST[name]]
        assert [m.content for m in engine.get_chat_history(name)][::2] == [
            FIRST[name], FOLLOW[name]
        ]


async def test_slow_retrieval_does_not_block_the_event_loop(
    make_engine: Make, index: VectorStoreIndex
) -> None:
    engine = make_engine(retriever=SlowRetriever(index.as_retriever(similarity_top_k=5), 0.3))
    ticks = 0
    done = asyncio.Event()

    async def heartbeat() -> None:
        nonlocal ticks
        while not done.is_set():
            await asyncio.sleep(0.01)
            ticks += 1

    beat = asyncio.create_task(heartbeat())
    start = time.perf_counter()
    replies = await asyncio.gather(*(engine.achat(FIRST[n], session_id=n) for n in FIRST))
    elapsed = time.perf_counter() - start
    done.set()
    await beat

    assert all(r.response for r in replies)
    assert ticks >= 10  # the loop kept running while the retriever slept
    assert elapsed < 0.3 * len(FIRST)  # the three retrievals overlapped


async def test_astream_chat_sessions_in_parallel(make_engine: Make) -> None:
    engine = make_engine()

    async def converse(name: str) -> str:
        await engine.achat(FIRST[name], session_id=name)
        reply = await engine.astream_chat(FOLLOW[name], session_id=name)
        return "".join([t async for t in reply.async_response_gen()])

    answers: list[Any] = await asyncio.gather(*(converse(n) for n in FIRST))
    for name, answer in zip(FIRST, answers, strict=True):
        assert EXPECT[name] in answer.lower(), name
        assert engine.engine.history.size(name) == 2
