"""The 7-turn topic-switch chat (``tests/topic_chat.py``) through the core: ``DHRAG.select``
then ``record``, real MiniLM, ``Settings()``, k=4. The LLM gets ``Selection.history``."""

from __future__ import annotations

import pytest
from topic_chat import (
    ALL_TURNS,
    CHAT,
    HISTORY_TURNS,
    SESSION,
    K,
    Seen,
    assert_history_on_topic,
    assert_no_besides,
    assert_top_on_topic,
    check_seen,
    describe_selection,
    minilm,
    passages,
    report,
    scripted_answer,
)

from dhrag_core import DHRAG, FaissKnowledgeBase, Settings
from dhrag_core.transcript import in_turn_order

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def seen() -> list[Seen]:
    rag = DHRAG(FaissKnowledgeBase(list(passages()), minilm()), settings=Settings())
    out = []
    for n, turn in enumerate(CHAT, 1):
        sel = rag.select(SESSION, turn.question, K)
        assert len(sel.passages) == K
        rag.record(SESSION, turn.question, scripted_answer(sel.passages[0]), selection=sel)
        out.append(Seen(n, [t.query for t in in_turn_order(sel.history)],
                        sel.passages[0].id or "", sel.rewritten_query,
                        describe_selection(sel)))
    assert rag.history.size(SESSION) == len(CHAT)
    check_seen(out)
    report("core DHRAG.select/record", out)
    rag.close()
    return out


@pytest.mark.parametrize("turn", HISTORY_TURNS)
def test_history_is_on_topic(seen: list[Seen], turn: int) -> None:
    assert_history_on_topic(seen[turn - 1])


@pytest.mark.parametrize("turn", ALL_TURNS)
def test_top_passage_is_on_topic(seen: list[Seen], turn: int) -> None:
    assert_top_on_topic(seen[turn - 1])


@pytest.mark.parametrize("turn", ALL_TURNS)
def test_rewritten_query_has_no_besides(seen: list[Seen], turn: int) -> None:
    assert_no_besides(seen[turn - 1])
