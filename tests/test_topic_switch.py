"""The 7-turn topic-switch chat (``tests/topic_chat.py``) through the core: ``DHRAG.select``
then ``record``, real MiniLM, ``Settings()``, k=4. The LLM gets ``Selection.history``."""

from __future__ import annotations

import pytest
from topic_chat import (
    ALL_TURNS,
    CHAT,
    SESSION,
    K,
    Seen,
    check_seen,
    check_turn,
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


@pytest.mark.parametrize("turn", ALL_TURNS)
def test_turn_is_on_topic(seen: list[Seen], turn: int) -> None:
    check_turn(seen, turn)
