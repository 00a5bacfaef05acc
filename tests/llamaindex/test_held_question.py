"""A question whose answer is not stored yet is held in the history store
(``HistoryDatabase.hold_question``), so another block or engine on the same store, another
worker or a restarted process, sees it and pairs it with its answer."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.base.llms.types import ChatMessage, MessageRole

from dhrag_core import Ablations, HashingEmbedder, HistoryDatabase, Settings
from llamaindex_dhrag import DHRAGChatEngine, DHRAGMemoryBlock

from .li_support import wait_done

WALL = "What is the Great Wall of China built out of?"
WALL_A = "Stone, brick, tamped earth and wood."
FOLLOW = "How long is it?"
PIGS = "Where do guinea pigs sleep in the wild?"

Make = Callable[..., DHRAGChatEngine]


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'history.db'}"


def _block(hashing: HashingEmbedder, url: str) -> DHRAGMemoryBlock:
    """A block on its own database object over the store at ``url``: another worker's."""
    db = HistoryDatabase(embedder=hashing, store=url,
                         settings=Settings(ablations=Ablations(use_chains=False)))
    return DHRAGMemoryBlock(history=db)


def _stored(history: HistoryDatabase, session: str = "s") -> list[tuple[str, str]]:
    return [(t.query, t.response) for t in history.turns(session)]


def _roles(engine: DHRAGChatEngine) -> list[tuple[MessageRole, str | None]]:
    return [(m.role, m.content) for m in engine.chat_history]



# -- DHRAGMemoryBlock ---------------------------------------------------------------------------


async def test_a_question_put_through_one_block_and_its_answer_through_another(
    hashing: HashingEmbedder, tmp_path: Path,
) -> None:
    url = _url(tmp_path)
    asked, answered = _block(hashing, url), _block(hashing, url)
    await asked.aput([ChatMessage(role="user", content=WALL)], session_id="s")
    assert _stored(answered.history) == [] and answered.history.held_question("s") == WALL

    await answered.aput([ChatMessage(role="tool", content="search results"),
                         ChatMessage(role="assistant", content=WALL_A)], session_id="s")
    assert _stored(asked.history) == _stored(answered.history) == [(WALL, WALL_A)]
    assert asked.history.held_question("s") is None


async def test_a_held_question_outlives_a_restart(hashing: HashingEmbedder,
                                                  tmp_path: Path) -> None:
    url = _url(tmp_path)
    before = _block(hashing, url)
    await before.aput([ChatMessage(role="user", content=WALL),
                       ChatMessage(role="assistant", content=WALL_A),
                       ChatMessage(role="user", content=PIGS)], session_id="s")
    before.history.close()

    after = _block(hashing, url)
    assert _stored(after.history) == [(WALL, WALL_A)]
    assert after.history.held_question("s") == PIGS
    await after.aput([ChatMessage(role="assistant", content="In burrows.")], session_id="s")
    assert _stored(after.history) == [(WALL, WALL_A), (PIGS, "In burrows.")]
    after.history.close()


async def test_the_answer_of_a_question_is_its_assistant_messages_joined(
    hashing: HashingEmbedder, tmp_path: Path,
) -> None:
    """An answer in several assistant messages (an agent's, around its tool calls) is one
    answer, also when it arrives through another block."""
    url = _url(tmp_path)
    await _block(hashing, url).aput([ChatMessage(role="user", content=WALL)], session_id="s")
    other = _block(hashing, url)
    await other.aput([ChatMessage(role="assistant", content=""),  # a tool call: no text
                      ChatMessage(role="tool", content="stone, brick"),
                      ChatMessage(role="assistant", content="Stone and brick."),
                      ChatMessage(role="assistant", content="Also tamped earth and wood.")],
                     session_id="s")
    assert _stored(other.history) == [(WALL, "Stone and brick.\nAlso tamped earth and wood.")]


# -- DHRAGChatEngine ----------------------------------------------------------------------------


def test_a_streaming_question_shows_in_another_engine_and_is_taken_when_answered(
    make_engine: Make, make_llm: Any, tmp_path: Path,
) -> None:
    url = _url(tmp_path)
    gate = threading.Event()
    writer = make_engine(llm=make_llm(gate=gate), store=url)
    writer.chat(WALL)
    other = make_engine(store=url)

    reply = writer.stream_chat(FOLLOW)
    tokens = reply.response_gen
    first = next(tokens)
    assert _roles(other)[-1] == (MessageRole.USER, FOLLOW) and len(other.chat_history) == 3
    assert _roles(writer) == _roles(other)

    gate.set()
    answer = (first + "".join(tokens)).strip()
    wait_done(reply)
    assert "21,196 km" in answer
    assert [m.content for m in other.chat_history][-2:] == [FOLLOW, answer]
    assert len(other.chat_history) == 4 and other.engine.history.held_question("default") is None


def test_a_restarted_engine_shows_the_question_a_stream_left_and_moves_on(
    make_engine: Make, make_llm: Any, tmp_path: Path,
) -> None:
    """A process that stopped mid-stream leaves its question held: a new engine on the same
    file shows it; the next turn recorded leaves it behind (its answer, if it still comes,
    is recorded by its writer)."""
    url = _url(tmp_path)
    gate = threading.Event()
    stopped = make_engine(llm=make_llm(gate=gate), store=url)
    reply = stopped.stream_chat(WALL)
    tokens = reply.response_gen
    next(tokens)  # the writer waits at the gate, as if its process had stopped

    restarted = make_engine(store=url)
    assert _roles(restarted) == [(MessageRole.USER, WALL)]
    restarted.chat(PIGS)
    assert [m.content for m in restarted.chat_history][0::2] == [PIGS]
    assert restarted.engine.history.held_question("default") is None

    gate.set()
    tokens.close()
    wait_done(reply)
    assert [m.content for m in restarted.chat_history][0::2] == [PIGS, WALL]
    assert restarted.engine.history.held_question("default") is None


def test_a_failed_stream_leaves_no_question_held(make_engine: Make, make_llm: Any,
                                                 tmp_path: Path) -> None:
    url = _url(tmp_path)
    engine = make_engine(llm=make_llm(fail_after=2), store=url)
    reply = engine.stream_chat(WALL)
    with pytest.raises(RuntimeError, match="mid-stream"):
        for _ in reply.response_gen:
            pass
    wait_done(reply)
    assert engine.engine.history.held_question("default") is None
    assert make_engine(store=url).chat_history == []


async def test_an_astream_question_shows_in_another_engine(make_engine: Make, make_llm: Any,
                                                            tmp_path: Path) -> None:
    url = _url(tmp_path)
    gate = threading.Event()
    writer = make_engine(llm=make_llm(gate=gate), store=url)
    other = make_engine(store=url)
    reply = await writer.astream_chat(WALL)
    assert _roles(other) == [(MessageRole.USER, WALL)]
    tokens = []
    async for token in reply.async_response_gen():
        tokens.append(token)
        gate.set()
    assert reply.awrite_response_to_history_task is None  # awaited by the full read
    assert _roles(other) == [(MessageRole.USER, WALL),
                             (MessageRole.ASSISTANT, "".join(tokens).strip())]
    assert other.engine.history.held_question("default") is None
