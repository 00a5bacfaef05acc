"""The unanswered question kept in the history store (``HistoryDatabase.hold_question``) and
``DHRAG.record_messages``, which pairs messages arriving one at a time through it: a question
and its answer may come through different engines (workers) or across a restart."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from dhrag_core import (
    DHRAG,
    FaissKnowledgeBase,
    HashingEmbedder,
    HistoryDatabase,
    Limits,
    MemoryStore,
    Passage,
    Settings,
    SQLiteStore,
    Turn,
)
from dhrag_core.settings import with_changes
from dhrag_core.store import QuestionStore

WALL_Q, WALL_A = "How long is the Great Wall?", "About 21,196 km."
PIG_Q, PIG_A = "Where do guinea pigs sleep?", "In burrows."
FOLLOW_UP = "What is it built of?"

EMB = HashingEmbedder()
KB = FaissKnowledgeBase([Passage("The Great Wall is 21,196 km long.", id="wall"),
                         Passage("Guinea pigs sleep in burrows.", id="pig")], EMB)


def engine(store: Any = None, **settings: Any) -> DHRAG:
    return DHRAG(KB, embedder=EMB, store=store, settings=with_changes(Settings(), settings))


def stored(rag: DHRAG, session: str = "s") -> list[tuple[str, str]]:
    return [(t.query, t.response) for t in rag.history.turns(session)]


def test_question_and_answer_through_two_workers_and_a_restart(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'history.db'}"
    a, b = engine(url), engine(url)
    assert a.record_messages("s", [("user", WALL_Q)]) == 0
    assert b.history.held_question("s") == WALL_Q
    assert b.record_messages("s", [("assistant", WALL_A)]) == 1
    assert stored(a) == stored(b) == [(WALL_Q, WALL_A)]
    assert a.history.held_question("s") is None

    a.record_messages("s", [("user", PIG_Q)])
    a.close()
    b.close()
    restarted = engine(url)
    assert restarted.history.held_question("s") == PIG_Q
    assert restarted.record_messages("s", [("assistant", PIG_A), ("user", FOLLOW_UP)]) == 1
    assert stored(restarted) == [(WALL_Q, WALL_A), (PIG_Q, PIG_A)]
    assert restarted.history.held_question("s") == FOLLOW_UP
    restarted.reset("s")
    assert restarted.history.held_question("s") is None and stored(restarted) == []
    restarted.close()


def test_pairing_rules() -> None:
    rag = engine()
    assert rag.record_messages("s", [("assistant", "a greeting with no question")]) == 0
    rag.record_messages("s", [("user", "an abandoned question")])
    rag.record_messages("s", [("user", WALL_Q)])  # a new question replaces it
    assert rag.record_messages("s", [("assistant", WALL_A), ("assistant", "more")]) == 1
    rag.record_messages("s", [("user", "unanswered")])
    assert rag.record_messages("s", [("user", PIG_Q), ("assistant", PIG_A)]) == 1
    assert rag.history.held_question("s") is None, "the replaced question is not kept"
    assert stored(rag) == [(WALL_Q, WALL_A), (PIG_Q, PIG_A)]
    assert rag.record_messages("s", []) == 0 and rag.history.held_question("s") is None


def test_the_pending_selection_s_passages_are_kept_when_split() -> None:
    rag = engine()
    selection = rag.select("s", WALL_Q, k=1)
    rag.record_messages("s", [("user", WALL_Q)])
    rag.record_messages("s", [("assistant", WALL_A)])
    (turn,) = rag.history.turns("s")
    assert [p.id for p in turn.passages] == [p.id for p in selection.passages] == ["wall"]


@pytest.mark.parametrize(
    ("messages", "error", "match"),
    [
        ([("user", "  ")], ValueError, "question of turn 0"),
        ([("assistant", WALL_A), ("system", "hi")], ValueError, "role 'system'"),
        ([("assistant", WALL_A), ["user", PIG_Q]], TypeError, r"messages\[1\]"),
        ([("user", 3)], TypeError, "question of turn 0"),
        ("user: hi", TypeError, "sequence"),
    ],
)
def test_bad_messages_store_nothing_and_keep_the_held_question(
    messages: Any, error: type[Exception], match: str
) -> None:
    rag = engine(max_text_chars=60_000)
    rag.record_messages("s", [("user", WALL_Q)])
    with pytest.raises(error, match=match):
        rag.record_messages("s", messages)
    assert rag.history.held_question("s") == WALL_Q and stored(rag) == []


def test_a_long_or_unclean_message_is_stored_cleaned_with_a_warning() -> None:
    rag = engine(max_text_chars=60_000)
    with pytest.warns(UserWarning, match="NUL"):
        rag.record_messages("s", [("user", "bad\x00question")])
    assert rag.history.held_question("s") == "badquestion"
    rag.record_messages("s", [("assistant", "x" * 70_000)])
    (turn,) = rag.history.turns("s")
    assert turn.query == "badquestion" and len(turn.response) == 60_000
    assert "cut from 70,000" in turn.metadata["dhrag_cleaned"]


def test_hold_question_checks_its_input() -> None:
    db = HistoryDatabase(embedder=EMB, settings=Settings(limits=Limits(max_query_chars=40)))
    db.hold_question("s", WALL_Q)
    for bad, error in (("", ValueError), (b"q", TypeError)):
        with pytest.raises(error, match="question"):
            db.hold_question("s", bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="session_id"):
        db.hold_question(" ", WALL_Q)
    with pytest.raises(TypeError, match="question must be a str"):
        db.take_question("s", 3)  # type: ignore[arg-type]
    assert db.held_question("s") == WALL_Q


def test_a_read_only_sqlite_store_shows_the_question_and_refuses_to_change_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "history.db"
    writer = HistoryDatabase(embedder=EMB, store=SQLiteStore(path))
    writer.hold_question("s", WALL_Q)
    writer.close()
    reader = HistoryDatabase(embedder=EMB, store=SQLiteStore(path, read_only=True))
    assert reader.held_question("s") == WALL_Q
    for change in (lambda: reader.hold_question("s", PIG_Q), lambda: reader.take_question("s")):
        with pytest.raises(PermissionError, match="read-only"):
            change()
    assert reader.held_question("s") == WALL_Q
    reader.close()


class TurnsOnly:
    """A custom store with only the ``HistoryStore`` methods (no ``QuestionStore``)."""

    def __init__(self) -> None:
        self.inner = MemoryStore()

    def load(self, session_id: str) -> tuple[list[Turn], int]:
        return self.inner.load(session_id)

    def version(self, session_id: str) -> int:
        return self.inner.version(session_id)

    def apply(self, session_id: str, *, upsert: Sequence[Turn] = (),
              delete: Sequence[str] = (), expected_version: int | None = None) -> int:
        return self.inner.apply(session_id, upsert=upsert, delete=delete,
                                expected_version=expected_version)

    def delete_session(self, session_id: str) -> None:
        self.inner.delete_session(session_id)

    def sessions(self) -> list[str]:
        return self.inner.sessions()

    def close(self) -> None:
        self.inner.close()


def test_a_store_without_questions_keeps_them_in_the_process() -> None:
    store = TurnsOnly()
    assert not isinstance(store, QuestionStore)
    rag = engine(store)
    rag.record_messages("s", [("user", WALL_Q)])
    assert rag.history.held_question("s") == WALL_Q
    rag.record_messages("s", [("assistant", WALL_A)])
    assert stored(rag) == [(WALL_Q, WALL_A)]
    rag.record_messages("s", [("user", PIG_Q)])
    rag.reset("s")
    assert rag.history.held_question("s") is None


def test_a_history_database_alone_records_messages_the_same_way(tmp_path: Path) -> None:
    """For a front end with a ``HistoryDatabase`` and no engine (a memory block): the same
    rule, each turn stored without passages."""
    url = f"sqlite:///{tmp_path / 'history.db'}"
    first = HistoryDatabase(embedder=EMB, store=url)
    assert first.record_messages("s", [("assistant", "hello"), ("user", WALL_Q)]) == 0
    first.close()
    second = HistoryDatabase(embedder=EMB, store=url)
    assert second.record_messages("s", [("assistant", WALL_A), ("user", PIG_Q)]) == 1
    (turn,) = second.turns("s")
    assert (turn.query, turn.response, turn.passages) == (WALL_Q, WALL_A, ())
    assert second.held_question("s") == PIG_Q
    second.close()
