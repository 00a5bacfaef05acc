"""Streaming yields tokens as the LLM produces them and records the turn when it ends."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llama_index.core.chat_engine.types import StreamingAgentChatResponse

from llamaindex_dhrag import DHRAGChatEngine

WALL = "What is the Great Wall of China built out of?"

Make = Callable[..., DHRAGChatEngine]


def test_stream_chat_streams_then_records(make_engine: Make, llm: Any) -> None:
    engine = make_engine()
    engine.chat(WALL)
    llm.events.clear()

    reply = engine.stream_chat("How long is it?")
    assert isinstance(reply, StreamingAgentChatResponse)
    assert reply.source_nodes[0].node.node_id == "wall-length"  # sources known up front
    assert reply.sources[0].raw_output["rewritten_query"] != "How long is it?"
    assert engine.rag.history.size("default") == 1

    tokens = []
    for token in reply.response_gen:
        tokens.append(token)
        # each token reaches us right after the LLM produced it, not after the whole answer
        assert len(llm.events) == len(tokens)
        if len(tokens) == 1:
            assert engine.rag.history.size("default") == 1  # not recorded mid-stream

    assert len(tokens) > 5
    answer = "".join(tokens)
    assert "21,196 km" in answer
    assert reply.response == answer.strip()
    assert engine.rag.history.size("default") == 2
    last = engine.rag.history.turns("default")[-1]
    assert (last.query, last.response) == ("How long is it?", answer.strip())
    assert {p.id for p in last.passages} == {n.node.node_id for n in reply.source_nodes}


def test_abandoned_stream_records_nothing(make_engine: Make) -> None:
    engine = make_engine()
    reply = engine.stream_chat(WALL)
    gen = reply.response_gen
    next(gen)
    gen.close()
    assert engine.rag.history.size("default") == 0


def test_print_response_stream(make_engine: Make, capsys: Any) -> None:
    engine = make_engine()
    engine.stream_chat(WALL).print_response_stream()
    assert "stone, brick" in capsys.readouterr().out
    assert engine.rag.history.size("default") == 1


async def test_astream_chat_streams_then_records(make_engine: Make, llm: Any) -> None:
    engine = make_engine()
    await engine.achat(WALL)
    llm.events.clear()

    reply = await engine.astream_chat("How long is it?")
    assert engine.rag.history.size("default") == 1
    tokens = []
    async for token in reply.async_response_gen():
        tokens.append(token)
        assert len(llm.events) == len(tokens)
        if len(tokens) == 1:
            assert engine.rag.history.size("default") == 1

    assert len(tokens) > 5
    assert "21,196 km" in "".join(tokens)
    assert engine.rag.history.size("default") == 2
    assert engine.chat_history[-1].content == "".join(tokens).strip()
