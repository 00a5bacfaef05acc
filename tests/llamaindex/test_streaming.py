"""Streaming as LlamaIndex's own engines do it: the question is in ``chat_history`` at once,
tokens reach the reader as the LLM produces them, and the turn is recorded when the LLM's
stream ends, whether or not the reader reads it all."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from llama_index.core.base.llms.types import MessageRole
from llama_index.core.chat_engine.types import StreamingAgentChatResponse

from llamaindex_dhrag import DHRAGChatEngine

from .li_support import wait_done

WALL = "What is the Great Wall of China built out of?"
FOLLOW = "How long is it?"

Make = Callable[..., DHRAGChatEngine]



def test_stream_chat_shows_the_question_streams_then_records(make_engine: Make,
                                                             make_llm: Any) -> None:
    gate = threading.Event()
    llm = make_llm(gate=gate)
    engine = make_engine(llm=llm)
    engine.chat(WALL)
    llm.events.clear()

    reply = engine.stream_chat(FOLLOW)
    assert isinstance(reply, StreamingAgentChatResponse)
    assert reply.source_nodes[0].node.node_id == "wall-length"  # sources known up front
    assert reply.sources[0].raw_output["rewritten_query"] != FOLLOW
    # the question is in the history at once, as LlamaIndex's engines put it in memory
    assert [(m.role, m.content) for m in engine.chat_history][-1] == (MessageRole.USER, FOLLOW)
    assert len(engine.chat_history) == 3
    assert engine.engine.history.size("default") == 1

    tokens = iter(reply.response_gen)
    first = next(tokens)
    # the first token arrived while the LLM was still held after producing it
    assert llm.events == [("produced", 0)] and first
    assert engine.engine.history.size("default") == 1  # not recorded mid-stream
    gate.set()
    answer = first + "".join(tokens)

    assert "21,196 km" in answer
    assert reply.response == answer.strip()
    assert engine.engine.history.size("default") == 2
    last = engine.engine.history.turns("default")[-1]
    assert (last.query, last.response) == (FOLLOW, answer.strip())
    assert {p.id for p in last.passages} == {n.node.node_id for n in reply.source_nodes}
    assert [m.content for m in engine.chat_history][-2:] == [FOLLOW, answer.strip()]


def test_a_stream_read_half_way_keeps_the_whole_turn(make_engine: Make) -> None:
    engine = make_engine()
    reply = engine.stream_chat(WALL)
    for _ in reply.response_gen:
        break  # the reader stops after one token; the LLM's answer is still recorded
    wait_done(reply)
    assert reply.is_done
    turns = engine.engine.history.turns("default")
    assert [(t.query, t.response) for t in turns] == [(WALL, str(reply))]
    assert "stone, brick" in str(reply)
    assert turns[0].passages  # with the passages it showed
    assert [m.role for m in engine.chat_history] == [MessageRole.USER, MessageRole.ASSISTANT]


def test_a_stream_never_read_is_recorded_and_its_text_kept(make_engine: Make) -> None:
    engine = make_engine()
    reply = engine.stream_chat(WALL)
    wait_done(reply)
    assert "stone, brick" in str(reply)
    assert engine.chat_history[-1].content == str(reply)


def test_the_next_turn_waits_for_the_stream_before_it(make_engine: Make,
                                                      make_llm: Any) -> None:
    gate = threading.Event()
    engine = make_engine(llm=make_llm(gate=gate))
    reply = engine.stream_chat(WALL)
    tokens = reply.response_gen  # kept open: closing it would wait for the writer
    next(tokens)
    threading.Timer(0.2, gate.set).start()
    follow = engine.chat(FOLLOW)  # held until the streamed turn is stored
    tokens.close()

    assert [t.query for t in engine.engine.history.turns("default")] == [WALL, FOLLOW]
    assert "21,196 km" in follow.response  # the streamed turn was in its history
    assert follow.sources[0].raw_output["history"]


def test_a_stream_that_fails_raises_to_the_reader_and_records_nothing(
    make_engine: Make, make_llm: Any,
) -> None:
    engine = make_engine(llm=make_llm(fail_after=2))
    reply = engine.stream_chat(WALL)
    with pytest.raises(RuntimeError, match="mid-stream"):
        for _ in reply.response_gen:
            pass
    wait_done(reply)
    assert engine.engine.history.size("default") == 0
    assert engine.chat_history == []  # the question is not left pending either


def test_print_response_stream(make_engine: Make, capsys: Any) -> None:
    engine = make_engine()
    engine.stream_chat(WALL).print_response_stream()
    assert "stone, brick" in capsys.readouterr().out
    assert engine.engine.history.size("default") == 1


async def test_astream_chat_shows_the_question_streams_then_records(make_engine: Make,
                                                                   make_llm: Any) -> None:
    gate = threading.Event()
    llm = make_llm(gate=gate)
    engine = make_engine(llm=llm)
    await engine.achat(WALL)
    llm.events.clear()

    reply = await engine.astream_chat(FOLLOW)
    assert engine.chat_history[-1].content == FOLLOW  # the question, at once
    assert engine.engine.history.size("default") == 1
    tokens = []
    async for token in reply.async_response_gen():
        tokens.append(token)
        if len(tokens) == 1:
            assert ("produced", 1) not in llm.events  # it came before the LLM went on
            assert engine.engine.history.size("default") == 1
            gate.set()

    assert len(tokens) > 5
    assert "21,196 km" in "".join(tokens)
    assert engine.engine.history.size("default") == 2
    assert engine.chat_history[-1].content == "".join(tokens).strip()


async def test_an_astream_read_half_way_keeps_the_whole_turn(make_engine: Make) -> None:
    engine = make_engine()
    reply = await engine.astream_chat(WALL)
    assert [m.role for m in engine.chat_history] == [MessageRole.USER]
    async for _ in reply.async_response_gen():
        break
    assert reply.awrite_response_to_history_task is not None
    await reply.awrite_response_to_history_task
    turns = engine.engine.history.turns("default")
    assert [(t.query, t.response) for t in turns] == [(WALL, reply.response)]
    assert "stone, brick" in reply.response and turns[0].passages


async def test_an_astream_that_fails_raises_and_records_nothing(make_engine: Make,
                                                                make_llm: Any) -> None:
    engine = make_engine(llm=make_llm(fail_after=2))
    reply = await engine.astream_chat(WALL)
    with pytest.raises(RuntimeError, match="mid-stream"):
        async for _ in reply.async_response_gen():
            pass
    assert engine.engine.history.size("default") == 0
    assert engine.chat_history == []
