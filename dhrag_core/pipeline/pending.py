"""Selections kept between ``select`` and ``record``: per session, one per question, with the
``ThreadChoice`` they were made from, bounded engine-wide by sessions, count and bytes."""

from __future__ import annotations

import logging
import sys
import threading
from collections import OrderedDict
from collections.abc import Iterator

from dhrag_core.history.selection import ThreadChoice
from dhrag_core.records import Selection

__all__ = ["PER_SESSION", "PendingSelections", "selection_bytes"]

PER_SESSION = 16
"""Pending selections kept per session slot of ``Settings.limits.max_pending``, on average: all
sessions together keep at most ``max_pending * PER_SESSION`` (65,536 by default), and any one
session may use them all (a batch of many questions of one session).
``Settings.limits.max_pending_bytes`` bounds the memory they hold as well (``selection_bytes``)."""

_OBJECT_BYTES = 200
"""What ``selection_bytes`` counts for one record object (a passage, a context item, a
selected turn) besides its texts and arrays: its fields and their boxes."""

log = logging.getLogger("dhrag_core.pipeline.engine")

Kept = tuple[Selection, ThreadChoice | None]


def selection_bytes(selection: Selection) -> int:
    """Estimated bytes a kept selection holds: its texts, its arrays (the query's, the search
    rows', each passage's vector) and ``_OBJECT_BYTES`` per record; what bounds the pending
    selections (``Settings.limits.max_pending_bytes``). Arrays shared with a knowledge base count
    as the selection's own: an estimate from above."""
    size = _OBJECT_BYTES + sys.getsizeof(selection.query) + sys.getsizeof(
        selection.rewritten_query)
    size += sum(v.nbytes for v in (selection.query_vector, selection.search_vector,
                                   *selection.search_vectors))
    for item in selection.context:
        p = item.passage
        size += 2 * _OBJECT_BYTES + sys.getsizeof(p.text) + len(p.metadata) * _OBJECT_BYTES
        size += p.vector.nbytes if p.vector is not None else 0
    for turn in selection.history:
        size += _OBJECT_BYTES + sys.getsizeof(turn.turn.query) + sys.getsizeof(
            turn.turn.response)
    return size


class PendingSelections:
    """Selections waiting for their turns, so that several questions of one session selected
    at once (a batch, of any size) each record their own passages and thread. At most
    ``max_sessions`` sessions, ``max_sessions * PER_SESSION`` selections and ``max_bytes`` of
    them (the newest kept whatever its size), the least recently selected dropped first;
    ``take`` of a dropped one logs a warning naming the settings (its turn is never silently
    stored without its passages). Thread-safe."""

    def __init__(self, max_sessions: int, max_bytes: int) -> None:
        self.max_sessions = max_sessions
        self.max_bytes = max_bytes
        self._kept: OrderedDict[str, OrderedDict[str, Kept]] = OrderedDict()
        self.count = 0
        """Selections kept, all sessions together."""
        self.bytes = 0
        """Their ``selection_bytes``, all together."""
        self._dropped: OrderedDict[int, None] = OrderedDict()  # hashes of (session, query)
        self._lock = threading.Lock()

    @property
    def budget(self) -> int:
        """Most selections kept at once."""
        return self.max_sessions * PER_SESSION

    def __iter__(self) -> Iterator[Selection]:
        with self._lock:
            return iter([sel for per in self._kept.values() for sel, _ in per.values()])

    def get(self, session_id: str, query: str | None = None) -> Selection | None:
        """The session's selection kept for ``query`` (without: its latest)."""
        with self._lock:
            per = self._kept.get(session_id)
            if not per:
                return None
            if query is None:
                return next(reversed(per.values()))[0]
            kept = per.get(query)
            return kept[0] if kept is not None else None

    def __contains__(self, key: tuple[str, str]) -> bool:
        session_id, query = key
        with self._lock:
            return query in self._kept.get(session_id, ())

    def keep(self, selection: Selection, choice: ThreadChoice | None) -> None:
        """Keep ``selection`` (and the thread choice it was made from) until its turn is
        recorded, dropping the least recently selected beyond the bounds."""
        size = selection_bytes(selection)
        with self._lock:
            per = self._kept.setdefault(selection.session_id, OrderedDict())
            replaced = per.get(selection.query)
            if replaced is None:
                self.count += 1
            else:
                self.bytes -= selection_bytes(replaced[0])
            self.bytes += size
            per[selection.query] = (selection, choice)
            per.move_to_end(selection.query)
            self._kept.move_to_end(selection.session_id)
            self._dropped.pop(hash((selection.session_id, selection.query)), None)
            while len(self._kept) > self.max_sessions:
                sid, gone = self._kept.popitem(last=False)
                self._forget(sid, gone)
            while self.count > self.budget or (self.bytes > self.max_bytes and self.count > 1):
                sid, oldest = next(iter(self._kept.items()))
                query, old = oldest.popitem(last=False)
                if not oldest:
                    del self._kept[sid]
                self._forget(sid, {query: old})

    def _forget(self, session_id: str, queries: dict[str, Kept]) -> None:
        """Count dropped selections out, remembering which (as hashes, the latest
        ``2 * budget``) so that recording their turns warns. Called with the lock held."""
        self.count -= len(queries)
        self.bytes -= sum(selection_bytes(sel) for sel, _ in queries.values())
        for query in queries:
            self._dropped[hash((session_id, query))] = None
        while len(self._dropped) > 2 * self.budget:
            self._dropped.popitem(last=False)

    def take(self, session_id: str, query: str, *, warn: bool = False) -> Kept | None:
        """Remove and return the session's selection kept for ``query`` with its choice (the
        others stay: their own turns may still be recorded). ``warn``: log a warning if it
        was dropped by the bounds (its turn is then stored without passages)."""
        with self._lock:
            per = self._kept.get(session_id)
            kept = per.pop(query, None) if per is not None else None
            if per is not None and not per:
                del self._kept[session_id]
            if kept is not None:
                self.count -= 1
                self.bytes -= selection_bytes(kept[0])
                return kept
            dropped = hash((session_id, query)) in self._dropped
            self._dropped.pop(hash((session_id, query)), None)
        if dropped and warn:
            log.warning(
                "the selection made for this question of session %r was dropped before its "
                "turn was recorded: more than max_pending=%d sessions, %d selections or "
                "max_pending_bytes=%d bytes of them were pending at once; its turn is stored "
                "without passages (raise Settings.limits.max_pending or max_pending_bytes, or "
                "record turns before selecting more)",
                session_id, self.max_sessions, self.budget, self.max_bytes)
        return None

    def restore(self, kept: Kept | None) -> None:
        """Put back what ``take`` returned (its turn could not be stored)."""
        if kept is None:
            return
        selection = kept[0]
        with self._lock:
            per = self._kept.setdefault(selection.session_id, OrderedDict())
            if selection.query not in per:
                per[selection.query] = kept
                self.count += 1
                self.bytes += selection_bytes(selection)

    def forget_session(self, session_id: str) -> None:
        """Drop every selection of one session (its history was reset)."""
        with self._lock:
            gone: dict[str, Kept] = self._kept.pop(session_id, OrderedDict())
            self.count -= len(gone)
            self.bytes -= sum(selection_bytes(sel) for sel, _ in gone.values())
