"""One session's derived in-memory state: its turns, their query index and its history tree.

Everything here is derived from the stored turns and rebuilt from them (``reset_from``) or
brought up to date with another worker's changes (``apply_changes``); the store stays the
source of truth.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from dhrag_core.algorithm.hierarchy import SessionTree, TreeMatch
from dhrag_core.index import VectorIndex
from dhrag_core.records import Turn, Vector
from dhrag_core.settings import Settings

__all__ = ["SessionState", "Threads"]

Threads = tuple[list[tuple[int, float]], list[TreeMatch]]
"""Thread ids with their relevance, T* first; and the tree matches of the query."""

_PUT_CHUNK = 4096  # turns indexed per batch on a bulk load


class SessionState:
    """Derived state of one session: turns by id, the query index, each slot's turn index and
    time, the history tree, and the caches of labels, summaries and the last query's work.

    ``version`` is the store version this state reflects (-1: never loaded). Callers hold
    ``lock`` while they read or change it.
    """

    def __init__(self, dimension: int, settings: Settings) -> None:
        self.dimension = dimension
        self.settings = settings
        self.lock = threading.RLock()
        self.reset_from([], -1)

    def reset_from(self, turns: Sequence[Turn], version: int) -> None:
        """Rebuild everything from the stored turns of ``version`` (a full load)."""
        self.turns: dict[str, Turn] = {}
        self.next_index = 0
        self.latest: str | None = None
        self.queries: VectorIndex[str] = VectorIndex(self.dimension, compact=True)
        self.slot_index = np.zeros(0, dtype=np.float64)
        self.slot_time = np.zeros(0, dtype=np.float64)
        self.tree = SessionTree(self.dimension, self.settings)
        self.labels: dict[int, tuple[int, str]] = {}
        """Cluster id -> (its size when labelled, the label)."""
        self.summaries: dict[tuple[tuple[str, int], ...], str] = {}
        """Summary node members (id, turn index) -> the summary text."""
        self.put(turns)
        self.tree.restore(turns, full=True)
        self.version = version
        self.forget_memos()

    def apply_changes(self, turns: Sequence[Turn], deleted: Sequence[str], version: int) -> None:
        """Bring the state to ``version`` given what changed since: turns written (new ones or
        new versions of held ones) and turn ids deleted."""
        self.drop([t for t in deleted if t in self.turns]
                  + [t.turn_id for t in turns if t.turn_id in self.turns])
        self.tree.restore(turns)
        self.put(turns)
        self.tree.clusters.resume(self.next_index)  # passes by turn index, whoever wrote
        self.version = version
        self.forget_memos()

    def forget_memos(self) -> None:
        self._similarity_memo: tuple[bytes, int, np.ndarray, np.ndarray] | None = None
        self.thread_memo: tuple[bytes, int, Threads] | None = None
        """Threads of the last query at the last version: ``add`` reuses what ``select``
        found."""
        self.shift_memo: tuple[bytes, int, Any] | None = None
        """The thread decision of the last query at the last version (``topic_shift``)."""

    def similarities(self, qv: Vector) -> tuple[np.ndarray, np.ndarray]:
        """Slots and query similarities of every turn, remembered for the same query and
        version: a turn searches and then adds with one query, and pays for one scan."""
        key = qv.tobytes()
        memo = self._similarity_memo
        if memo is not None and memo[0] == key and memo[1] == self.version:
            return memo[2], memo[3]
        slots, sims = self.queries.similarities(qv)
        self._similarity_memo = (key, self.version, slots, sims)
        return slots, sims

    def put(self, turns: Sequence[Turn]) -> None:
        """Index turns (new ones, or new versions of stored ones) in one batch."""
        if not turns:
            return
        for turn in turns:
            self.turns[turn.turn_id] = turn
        if len(turns) > _PUT_CHUNK:  # a bulk load: allocate once, copy without a full stack
            self.queries.reserve(self.queries.n_slots + len(turns))
        for at in range(0, len(turns), _PUT_CHUNK):
            chunk = turns[at : at + _PUT_CHUNK]
            coded = [t.query_codes for t in chunk]
            self.queries.add_codes([t.turn_id for t in chunk], np.stack([c for c, _ in coded]),
                                   np.array([s for _, s in coded], dtype=np.float32))
        n = self.queries.n_slots
        if self.slot_index.size < n:
            size = max(2 * self.slot_index.size, n)
            self.slot_index = np.resize(self.slot_index, size)
            self.slot_time = np.resize(self.slot_time, size)
        for turn in turns:
            slot = self.queries.slot_of(turn.turn_id)
            self.slot_index[slot] = turn.index
            self.slot_time[slot] = turn.timestamp
        self.next_index = max(self.next_index, max(t.index for t in turns) + 1)
        newest = max(turns, key=lambda t: t.index)
        if self.latest is None or newest.index >= self.turns[self.latest].index:
            self.latest = newest.turn_id

    def drop(self, turn_ids: Sequence[str]) -> None:
        """Forget turns (evicted, merged away or deleted) in the tree and the indexes."""
        for tid in turn_ids:
            self.tree.remove(tid)
            self.turns.pop(tid, None)
            if tid == self.latest:
                rest = list(self.turns.values())
                self.latest = max(rest, key=lambda t: t.index).turn_id if rest else None
        self.queries.remove(list(turn_ids))
