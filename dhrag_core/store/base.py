"""The storage protocol every history backend implements, and its errors."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from dhrag_core.closing import ClosedError
from dhrag_core.records import Turn

__all__ = [
    "LOG_KEEP", "CorruptStoreError", "HistoryStore", "IncrementalStore", "QuestionStore",
    "SessionSummary", "StaleSessionError", "StoreClosedError", "StoreUnavailableError",
    "SummaryStore", "check_owned", "in_log", "net_changes", "session_summaries", "summarize",
]

LOG_KEEP = 64
"""Versions of change log kept per session: a process further behind reloads the session."""

UPSERT, DELETE, MARK, RESET = 0, 1, 2, 3
"""Change-log operations: a turn written, a turn deleted, a version with no turn change, the
session deleted (no incremental catch-up across it; written by earlier versions, which kept a
deleted session's row: ``delete_session`` now removes every row and raises a version floor)."""


class StaleSessionError(RuntimeError):
    """Another writer changed the session since it was read; reload and retry."""


class StoreUnavailableError(RuntimeError, ConnectionError):
    """The store cannot be reached or written now (server down, bad DSN, disk full, a file
    that cannot be opened); the message names the store (password masked) and the cause.
    What the failed call was writing was rolled back; committed data is intact."""


class StoreClosedError(ClosedError):
    """The store was used after ``close()``; the message names the store. Open a new one."""


class CorruptStoreError(ValueError):
    """The store's file, or a turn stored in it, is damaged (or the file is not a dhrag
    store); the message names which.

    Nothing is repaired or overwritten: move the file aside (or restore a backup) and start
    again, or delete the named session.
    """


@runtime_checkable
class HistoryStore(Protocol):
    """Durable per-session storage of turns.

    Every call names one session, and nothing of one session is visible through another.
    Each session has a version that every successful ``apply`` increments, so a process that
    caches derived state (indexes, clusters) can tell when another writer changed the session.
    """

    def load(self, session_id: str) -> tuple[list[Turn], int]:
        """The session's turns ordered by ``index``, and its version (0 if never written)."""
        ...

    def version(self, session_id: str) -> int:
        """The session's current version (0 if never written)."""
        ...

    def apply(
        self,
        session_id: str,
        *,
        upsert: Sequence[Turn] = (),
        delete: Sequence[str] = (),
        expected_version: int | None = None,
    ) -> int:
        """Atomically insert/replace turns and delete turn ids.

        Raises:
            StaleSessionError: ``expected_version`` is given and differs from the stored one;
                nothing is written then.

        Returns:
            The new version.
        """
        ...

    def delete_session(self, session_id: str) -> None:
        """Remove the session's turns and version; other sessions are untouched."""
        ...

    def sessions(self) -> list[str]:
        """Ids of the sessions that hold at least one turn."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class IncrementalStore(Protocol):
    """A store that can say what changed since a version (optional; all built-in stores can).

    Without it, a process that finds the session changed by another process reloads the whole
    session; with it, only the turns written or deleted since its version.
    """

    def changes(
        self, session_id: str, since: int
    ) -> tuple[list[Turn], list[str], int] | None:
        """The turns written after version ``since`` and still stored (ordered by ``index``),
        the ids deleted after it, and the current version; ``None`` when the store cannot tell
        (too far behind, the session was deleted since, an unknown version)."""
        ...


@runtime_checkable
class QuestionStore(Protocol):
    """A store that keeps each session's unanswered question (optional; all built-in stores
    do, and ``delete_session`` removes it).

    A chat front end that writes the user's message before the answer exists (a message
    history fed one message at a time, a stream) holds the question here, so that whichever
    instance or process gets the answer can pair the two, also after a restart. Holding or
    taking a question leaves the session's turns and version as they are.
    """

    def hold_question(self, session_id: str, question: str) -> None:
        """Keep ``question`` as the session's unanswered question (replacing any other)."""
        ...

    def held_question(self, session_id: str) -> str | None:
        """The session's unanswered question; ``None`` when it has none."""
        ...

    def take_question(self, session_id: str, question: str | None = None) -> str | None:
        """Remove and return the session's unanswered question; with ``question``, only when
        the held one is that text (another writer may have replaced it: then ``None``, and
        the held one stays)."""
        ...


@dataclass(frozen=True)
class SessionSummary:
    """One session as ``dhrag sessions`` lists it, read without decoding its turns."""

    session_id: str
    turns: int
    last_timestamp: float
    """The latest turn's timestamp."""
    last_metadata: Mapping[str, Any]
    """The latest turn's metadata (of equally late turns, the lowest ``index``)."""


@runtime_checkable
class SummaryStore(Protocol):
    """A store that summarises its sessions without decoding turns (all built-in stores)."""

    def summaries(self) -> list[SessionSummary]:
        """A summary of each session that holds at least one turn, ordered by id."""
        ...


def summarize(session_id: str, turns: Sequence[Turn]) -> SessionSummary:
    """The summary of a session's turns (given in ``index`` order; at least one)."""
    last = max(turns, key=lambda t: t.timestamp)
    return SessionSummary(session_id, len(turns), last.timestamp, dict(last.metadata))


def session_summaries(store: HistoryStore) -> list[SessionSummary]:
    """``store.summaries()``; for a store without it, each session loaded and summarised."""
    if isinstance(store, SummaryStore):
        return sorted(store.summaries(), key=lambda s: s.session_id)
    found = [(sid, store.load(sid)[0]) for sid in sorted(store.sessions())]
    return [summarize(sid, turns) for sid, turns in found if turns]


def summary_of_row(store: str, session_id: str, turns: int, ts: float,
                   metadata: str) -> SessionSummary:
    """A summary from stored columns; damaged metadata is a ``CorruptStoreError``."""
    try:
        meta = json.loads(metadata)
        if not isinstance(meta, dict):
            raise TypeError(f"a {type(meta).__name__}, not an object")
    except (ValueError, TypeError) as exc:
        raise CorruptStoreError(f"{store}: the latest turn of session {session_id!r} has "
                                f"damaged metadata: {exc}") from exc
    return SessionSummary(str(session_id), int(turns), float(ts), meta)


SUMMARY_SQL = (
    "SELECT session_id, n, ts, metadata FROM (SELECT session_id, ts, metadata, "
    "count(*) OVER (PARTITION BY session_id) AS n, row_number() OVER (PARTITION BY "
    "session_id ORDER BY ts DESC, idx) AS r FROM dhrag_turns) latest WHERE r = 1"
)
"""Each session's turn count and latest turn (timestamp, metadata), in SQLite or PostgreSQL."""


def net_changes(
    entries: Sequence[tuple[int, str, int]], since: int, current: int
) -> tuple[list[str], list[str]] | None:
    """From change-log entries ``(version, turn_id, op)`` after ``since``: the ids whose last
    change is a write and those whose last is a delete; ``None`` when the log does not cover
    every version up to ``current`` or crosses a session deletion."""
    if {v for v, _, _ in entries} != set(range(since + 1, current + 1)):
        return None
    last: dict[str, int] = {}
    for _, turn_id, op in sorted(entries, key=lambda e: (e[0], e[2])):
        if op == RESET:
            return None
        if op in (UPSERT, DELETE):
            last[turn_id] = op
    return ([t for t, op in last.items() if op == UPSERT],
            [t for t, op in last.items() if op == DELETE])


def check_owned(session_id: str, turns: Sequence[Turn]) -> None:
    """Refuse to write a turn of another session under ``session_id`` (nothing is written)."""
    for t in turns:
        if t.session_id != session_id:
            raise ValueError(f"turn {t.turn_id} belongs to session {t.session_id!r}")


def in_log(since: int, current: int) -> bool:
    """Whether a change log of the last ``LOG_KEEP`` versions can answer ``changes(since)``."""
    return current - LOG_KEEP < since <= current
