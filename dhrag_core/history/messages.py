"""Messages that arrive one at a time, stored as turns: the rule ``DHRAG.record_messages`` and
``HistoryDatabase.record_messages`` share (they differ only in how a turn is recorded)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from dhrag_core.transcript import Role
from dhrag_core.validation import check_session_id, fit_answer, fit_query

if TYPE_CHECKING:
    from dhrag_core.history.database import HistoryDatabase

__all__ = ["record_messages"]


def record_messages(
    history: HistoryDatabase, session_id: str, messages: Sequence[tuple[Role, str]],
    record: Callable[[str, str], object],
) -> int:
    """Pair ``(role, text)`` messages into turns and ``record(question, answer)`` each.

    Each user message with the assistant message after it is a turn. The first assistant
    message answers the session's held question (``HistoryDatabase.held_question``) when no
    user message comes before it; a user message left unanswered is held in the history store
    (replacing any other), so its answer may come through another instance or process, or
    after a restart; an assistant message with no question is ignored. Every text is checked
    before anything is written: a bad one stores nothing. Returns the number of turns.
    """
    check_session_id(session_id)
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise TypeError("messages must be a sequence of (role, text) pairs")
    cfg = history.settings
    held = history.held_question(session_id)
    question, from_held, answers_held = held, held is not None, False
    turns: list[tuple[str, str]] = []
    for i, item in enumerate(messages):
        if not (isinstance(item, tuple) and len(item) == 2):
            raise TypeError(f"messages[{i}] must be a (role, text) pair, got {item!r:.80}")
        role, text = item
        if role == "user":
            fit_query(text, cfg.limits.max_query_chars, f"question of turn {len(turns)}",
                      warn=False)
            question, from_held = text, False
        elif role == "assistant":
            fit_answer(text, cfg.limits.max_text_chars, f"answer of turn {len(turns)}")
            if question is not None:
                answers_held = answers_held or from_held
                turns.append((question, text))
                question, from_held = None, False
        else:
            raise ValueError(f"messages[{i}] has role {role!r}; use 'user' or 'assistant'")
    current = held
    for n, (query, answer) in enumerate(turns):
        record(query, answer)
        if n == 0 and answers_held:  # taken at once: a later failure cannot answer it twice
            history.take_question(session_id, held)
            current = None
    if question != current:
        if question is None:
            history.take_question(session_id, current)
        else:
            history.hold_question(session_id, question)
    return len(turns)
