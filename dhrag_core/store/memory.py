"""In-process store: the default when nothing needs to survive a restart."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from dhrag_core.closing import Closeable
from dhrag_core.records import Turn
from dhrag_core.store.base import (
    DELETE,
    LOG_KEEP,
    MARK,
    UPSERT,
    SessionSummary,
    StaleSessionError,
    check_owned,
    in_log,
    net_changes,
    summarize,
)

__all__ = ["MemoryStore"]


def _version(entry: tuple[int, str, int]) -> int:
    return entry[0]


@dataclass
class _Session:
    turns: dict[str, Turn] = field(default_factory=dict)
    version: int = 0
    log: list[tuple[int, str, int]] = field(default_factory=list)


class MemoryStore(Closeable):
    """A dict of sessions behind a lock; same contract as the durable stores."""

    def __init__(self) -> None:
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()
        self._floor = 0  # versions of deleted sessions stay below it (see delete_session)
        self._questions: dict[str, str] = {}

    def load(self, session_id: str) -> tuple[list[Turn], int]:
        with self._lock:
            s = self._sessions.get(session_id)
            if s is None:
                return [], 0
            return sorted(s.turns.values(), key=lambda t: t.index), s.version

    def version(self, session_id: str) -> int:
        with self._lock:
            s = self._sessions.get(session_id)
            return 0 if s is None else s.version

    def apply(
        self,
        session_id: str,
        *,
        upsert: Sequence[Turn] = (),
        delete: Sequence[str] = (),
        expected_version: int | None = None,
    ) -> int:
        check_owned(session_id, upsert)
        with self._lock:
            found = self._sessions.get(session_id)
            current = 0 if found is None else found.version
            if expected_version is not None and current != expected_version:
                raise StaleSessionError(
                    f"session {session_id!r} is at version {current}, expected {expected_version}"
                )
            s = found or _Session(version=self._floor)  # a new one starts above deleted ones
            for t in upsert:
                s.turns[t.turn_id] = t
            for turn_id in delete:
                s.turns.pop(turn_id, None)
            s.version += 1
            v = s.version
            # the log is in version order: drop its head older than LOG_KEEP versions
            del s.log[: bisect.bisect_right(s.log, v - LOG_KEEP, key=_version)]
            s.log += [(v, t.turn_id, UPSERT) for t in upsert]
            s.log += [(v, tid, DELETE) for tid in delete]
            s.log.append((v, "", MARK))
            self._sessions[session_id] = s
            return s.version

    def changes(
        self, session_id: str, since: int
    ) -> tuple[list[Turn], list[str], int] | None:
        with self._lock:
            s = self._sessions.get(session_id)
            current = 0 if s is None else s.version
            if s is None or not in_log(since, current):
                return ([], [], current) if since == current else None
            net = net_changes([e for e in s.log if e[0] > since], since, current)
            if net is None:
                return None
            written, deleted = net
            turns = sorted((s.turns[t] for t in written if t in s.turns), key=lambda t: t.index)
            return turns, deleted, current

    def delete_session(self, session_id: str) -> None:
        """Forget the session, its id included; a re-created one starts above its versions."""
        with self._lock:
            self._questions.pop(session_id, None)
            s = self._sessions.pop(session_id, None)
            if s is not None:
                self._floor = max(self._floor, s.version + 1)

    def hold_question(self, session_id: str, question: str) -> None:
        with self._lock:
            self._questions[session_id] = question

    def held_question(self, session_id: str) -> str | None:
        with self._lock:
            return self._questions.get(session_id)

    def take_question(self, session_id: str, question: str | None = None) -> str | None:
        with self._lock:
            held = self._questions.get(session_id)
            if held is None or (question is not None and held != question):
                return None
            del self._questions[session_id]
            return held

    def sessions(self) -> list[str]:
        with self._lock:
            return sorted(k for k, s in self._sessions.items() if s.turns)

    def summaries(self) -> list[SessionSummary]:
        with self._lock:
            found = sorted((k, list(s.turns.values())) for k, s in self._sessions.items()
                           if s.turns)
        return [summarize(k, sorted(turns, key=lambda t: t.index)) for k, turns in found]

    def close(self) -> None:
        """Nothing to release."""
