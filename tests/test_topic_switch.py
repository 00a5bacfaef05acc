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

from dhrag_core import DHRAG, FaissKnowledgeBase, HistoryDatabase, Settings
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


@pytest.mark.parametrize(("person", "return_question"), [
    (("when was charles dickens born", "On 7 February 1812. He was an English writer."),
     "how many movies have been made from his books?"),
    (("how many books has agatha christie sold", "Around two billion. She is the best-selling "
      "fiction writer of all time."), "how many languages has she been translated into?"),
])
def test_a_he_or_she_goes_back_to_the_thread_that_spoke_of_a_person(
    person: tuple[str, str], return_question: str,
) -> None:
    """After a thread about a person and one about cashew trees (no "he" or "she" in it), a
    question whose "his" or "she" can only mean the person goes back to that thread."""
    history = HistoryDatabase(embedder=minilm())
    for question, answer in (person, (
            "random question: where do cashews come from originally?",
            "The cashew tree is native to northeastern Brazil."),
            ("how long before a tree gives nuts?", "A tree starts producing after about "
             "three years.")):
        history.add(SESSION, question, answer)
    assert [h.turn.query for h in history.select(SESSION, return_question)][:1] == [person[0]]
