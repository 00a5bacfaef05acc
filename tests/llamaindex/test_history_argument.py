"""``chat_history=``: the engine's own history passed back changes nothing; a replacement that
drops stored turns says so (issue 55, item 4)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
from llama_index.core.base.llms.types import ChatMessage

from dhrag_core import Turn
from llamaindex_dhrag import DHRAGChatEngine

WALL = "What is the Great Wall of China built out of?"
PIGS = "Where do guinea pigs sleep in the wild?"
BERLIN = "When did the Berlin Wall come down?"
FOLLOW = "How long is it?"

Make = Callable[..., DHRAGChatEngine]


def _kept(turns: list[Turn]) -> list[tuple[str, str, int]]:
    return [(t.turn_id, t.query, len(t.passages)) for t in turns]


def _converse(engine: DHRAGChatEngine) -> list[Turn]:
    for q in (WALL, PIGS, BERLIN):
        engine.chat(q)
    turns = engine.engine.history.turns("default")
    assert all(t.passages for t in turns)
    return turns


def test_passing_back_the_engines_own_history_keeps_the_stored_turns(make_engine: Make) -> None:
    engine = make_engine()
    before = _converse(engine)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        engine.chat(FOLLOW, chat_history=engine.chat_history)
        reply = engine.stream_chat(FOLLOW + " Roughly?", chat_history=engine.chat_history)
        "".join(reply.response_gen)
    turns = engine.engine.history.turns("default")
    assert _kept(turns[:3]) == _kept(before)  # same turns, passages and all
    assert [t.query for t in turns[3:]] == [FOLLOW, FOLLOW + " Roughly?"]


async def test_achat_with_the_engines_own_history_keeps_the_stored_turns(
    make_engine: Make,
) -> None:
    engine = make_engine()
    before = _converse(engine)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        await engine.achat(FOLLOW, chat_history=engine.chat_history)
    assert _kept(engine.engine.history.turns("default")[:3]) == _kept(before)


def test_history_extended_with_new_exchanges_adds_only_those(make_engine: Make) -> None:
    engine = make_engine()
    before = _converse(engine)
    extra = [ChatMessage(role="user", content="Is the Moon far?"),
             ChatMessage(role="assistant", content="384,402 km on average.")]
    engine.chat(FOLLOW, chat_history=[*engine.chat_history, *extra])
    turns = engine.engine.history.turns("default")
    assert _kept(turns[:3]) == _kept(before)
    assert [(t.query, t.response) for t in turns[3:4]] == [("Is the Moon far?",
                                                             "384,402 km on average.")]
    assert turns[4].query == FOLLOW


def test_empty_chat_history_clears_the_session_with_a_warning(make_engine: Make) -> None:
    engine = make_engine()
    _converse(engine)
    with pytest.warns(UserWarning, match=r"replaced the 3 stored turn\(s\).*engine.reset\(\)"):
        engine.chat(FOLLOW, chat_history=[])
    assert [t.query for t in engine.engine.history.turns("default")] == [FOLLOW]


async def test_a_different_history_replaces_with_a_warning_pointing_at_the_caller(
    make_engine: Make,
) -> None:
    engine = make_engine()
    await engine.achat(PIGS)
    seed = [ChatMessage(role="user", content=WALL), ChatMessage(role="assistant", content="Stone.")]
    with pytest.warns(UserWarning, match="replaced the 1 stored turn") as caught:
        await engine.achat(FOLLOW, chat_history=seed)
    assert caught[0].filename == __file__
    assert [t.query for t in engine.engine.history.turns("default")] == [WALL, FOLLOW]


def test_reset_and_seeding_an_empty_session_say_nothing(make_engine: Make) -> None:
    engine = make_engine()
    engine.chat(WALL)
    seed = [ChatMessage(role="user", content=PIGS),
            ChatMessage(role="assistant", content="Burrows.")]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        engine.reset()
        engine.chat(FOLLOW, chat_history=seed)
    assert [t.query for t in engine.engine.history.turns("default")] == [PIGS, FOLLOW]


def test_from_defaults_seeded_with_the_stored_history_keeps_it(make_engine: Make,
                                                               tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'history.db'}"
    first = make_engine(store=url)
    first.chat(WALL)
    saved = first.chat_history
    before = _kept(first.engine.history.turns("default"))
    first.close()

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = make_engine(store=url, chat_history=saved)
    assert _kept(again.engine.history.turns("default")) == before
    again.close()
