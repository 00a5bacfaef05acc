"""The fitted thread decision (``algorithm.topic_shift``) and its switch."""

from __future__ import annotations

import numpy as np
import pytest

from dhrag_core import HashingEmbedder, HistoryDatabase, Retrieval, Settings, Threads
from dhrag_core.algorithm import topic_shift as ts
from tests.conftest import FakeClock


@pytest.mark.parametrize("answer", [
    "", "UNANSWERABLE", "I'm sorry, but I don't have the answer to your question.",
    "I could not find information about the longest mission to the Moon.",
    "Unfortunately, I do not have information on how to keep it confidential.",
    "The documents do not contain any information about Red Hat Virtualization.",
])
def test_an_answer_that_says_it_could_not_answer_is_unanswered(answer: str) -> None:
    assert ts.is_unanswered(answer)


@pytest.mark.parametrize("answer", [
    "The Great Wall is 21,196 km long.", "I don't know much, but it is 30 km long.",
    "It is subjective to determine whether it is the best comedy.",
])
def test_an_answer_with_content_is_answered(answer: str) -> None:
    assert not ts.is_unanswered(answer)


@pytest.mark.parametrize(("query", "back"), [
    ("which ethnic groups are a part of the union mentioned earlier?", True),
    ("Back to the tower: when was it built?", True),
    ("when was the aforementioned monument built?", True),
    ("When was it built?", False), ("Who was the first to climb it?", False),
])
def test_back_references(query: str, back: bool) -> None:
    assert ts.back_reference(query) is back


@pytest.mark.parametrize(("text", "genders"), [
    ("How many movies were made from his books?", {"m"}), ("When did she start writing?", {"f"}),
    ("Where does it grow?", set()), ("The Hershey bar: who made it?", set()),
])
def test_persons_are_the_genders_of_personal_pronouns(text: str, genders: set[str]) -> None:
    assert ts.persons(text) == genders


def _features(**values: float) -> np.ndarray:
    return np.array([values.get(name, 0.0) for name in ts.FEATURES])


def test_a_follow_up_close_to_the_latest_turn_stays() -> None:
    f = _features(question_latest=0.6, question_thread=0.6, words_latest=1.0,
                  words_thread=1.0, follow_up=1.0, has_other=1.0, question_other=0.1)
    shift = ts.decide(f, np.array([0.1, 0.6]), np.array([0.1, 0.4]), np.array([0, 1]), 1)
    assert shift.stay and shift.thread == 1 and shift.anchor == 1


def test_words_of_another_thread_only_go_back_to_it() -> None:
    f = _features(question_latest=0.05, question_thread=0.05, question_other=0.7,
                  words_other=1.0, words_other_only=1.0, back_reference=1.0, has_other=1.0)
    shift = ts.decide(f, np.array([0.7, 0.2, 0.05]), np.array([0.5, 0.1, 0.0]),
                      np.array([0, 0, 1]), 2)
    assert not shift.stay and shift.thread == 0 and shift.anchor == 0


def test_leaving_with_no_other_thread_to_return_to_goes_back_inside_its_own_thread() -> None:
    # turn 0 (Great Wall) and turn 2 (Berlin Wall) were chained together; turn 1 is another
    # topic the question does not match: "going back to the Great Wall" returns to turn 0
    f = _features(question_latest=0.4, question_thread=0.7, question_other=0.01,
                  back_reference=1.0, has_other=1.0)
    q, a = np.array([0.68, 0.01, 0.45]), np.array([0.52, 0.01, 0.37])
    shift = ts.decide(f, q, a, np.array([0, 1, 0]), 2)
    assert not shift.stay and shift.thread == 0 and shift.anchor == 0
    # below ``drift`` it is a new topic
    low = ts.decide(f, q * 0.3, a * 0.3, np.array([0, 1, 0]), 2)
    assert low.thread is None and low.anchor is None
    # a subject of its own ("When did the Berlin Wall come down?") is no return inside it
    named = ts.decide(f, q, a, np.array([0, 1, 0]), 2, names_subject=True)
    assert named.thread is None and named.anchor is None


def test_a_question_unrelated_to_everything_starts_a_new_topic() -> None:
    sims = np.array([0.02, -0.05])
    f = _features(question_latest=-0.05, question_thread=0.02, has_other=0.0,
                  question_other=-1.0)
    assert ts.unrelated(f, sims, sims)
    shift = ts.decide(f, sims, sims, np.array([0, 0]), 1)
    assert not shift.stay and shift.thread is None and shift.anchor is None
    # a follow-up is never "unrelated": its words lean on the latest turn
    assert not ts.unrelated(_features(follow_up=1.0), sims, sims)


def test_the_fitted_weights_match_the_features() -> None:
    assert len(ts.FITTED.weights) == len(ts.FEATURES)
    assert 0 < ts.FITTED.stay < 1


def _session(decision: str, clock: FakeClock) -> HistoryDatabase:
    db = HistoryDatabase(embedder=HashingEmbedder(), clock=clock,
                         settings=Settings(threads=Threads(thread_decision=decision)))
    for q, a in [("How tall is the Eiffel Tower in Paris?", "It is 330 metres tall."),
                 ("Who designed the Eiffel Tower?", "Gustave Eiffel's company."),
                 ("Who painted the Mona Lisa?", "I'm sorry, I don't have that information.")]:
        db.add("s", q, a)
    return db


def test_the_switch_is_not_inert(clock: FakeClock) -> None:
    """Fitted: the unanswered latest turn is not handed on and anchors nothing; by scores it
    is selected as the latest turn of its thread."""
    query = "What colour is the honey of bees?"
    fitted = [s.turn.query for s in _session("fitted", clock).select("s", query)]
    scores = [s.turn.query for s in _session("scores", clock).select("s", query)]
    assert "Who painted the Mona Lisa?" not in fitted
    assert "Who painted the Mona Lisa?" in scores


def test_an_unanswered_turn_is_never_handed_on(clock: FakeClock) -> None:
    db = _session("fitted", clock)
    for query in ("And who painted it?", "Who painted the Mona Lisa?", "How tall is it?"):
        assert all(not ts.is_unanswered(s.turn.response) for s in db.select("s", query))


def test_a_new_topic_hands_on_nothing_but_the_thread_still_moves_the_search() -> None:
    from dhrag_core import DHRAG, FaissKnowledgeBase

    emb = HashingEmbedder()
    kb = FaissKnowledgeBase(["The Great Wall is built of stone.", "Penguins live in the south."],
                            emb)
    rag = DHRAG(kb, embedder=emb, settings=Settings(retrieval=Retrieval(clarity_threshold=None)))
    rag.record("u", "What is the Great Wall of China built of?", "Stone, brick and earth.")
    query = "Where do emperor penguins breed in the Antarctic winter?"
    decided = rag.history.thread_decision("u", query)
    assert decided is not None and decided.shift.thread is None, "read as a new topic"
    sel = rag.select("u", query)
    assert sel.history == (), "no earlier turn is handed to the LLM"
    hidden = rag.history.select_threads("u", query, 1)[0]
    assert hidden and not any(t.on_topic for t in hidden)
    raw = emb.encode([query])[0]
    assert not np.allclose(sel.search_vector, raw), "the thread still moves the search"
