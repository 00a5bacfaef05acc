"""Turns of one tree node in turn order, with their running vector sum and stacked vectors.

A chain (thread) and a summary node are both such a node: their latest member and member
order matter, and their mean vector is matched against queries.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping

import numpy as np

from dhrag_core.index import RowBuffer
from dhrag_core.records import Floats

__all__ = ["OrderedMembers"]


class OrderedMembers:
    """Member turn ids sorted by turn index (``members[-1]`` is the latest), the running sum of
    their vectors, and their vectors stacked in member order -- built on first use (``rows``),
    then kept in step with every add and discard."""

    __slots__ = ("_rows", "indexes", "members", "total")

    def __init__(self, dimension: int) -> None:
        self.members: list[str] = []
        self.indexes: list[int] = []
        self.total = np.zeros(dimension, dtype=np.float64)
        self._rows: RowBuffer | None = None

    def __len__(self) -> int:
        return len(self.members)

    def add(self, turn_id: str, vector: Floats, index: int) -> None:
        at = bisect.bisect_right(self.indexes, index)
        self.members.insert(at, turn_id)
        self.indexes.insert(at, index)
        if self._rows is not None:
            self._rows.insert(at, vector)
        self.total = self.total + vector.astype(np.float64)

    def discard(self, turn_id: str, vector: Floats) -> None:
        at = self.members.index(turn_id)
        del self.members[at], self.indexes[at]
        if self._rows is not None:
            self._rows.delete(at)
        self.total = self.total - vector.astype(np.float64)

    def rows(self, vectors: Mapping[str, Floats]) -> np.ndarray:
        """The members' vectors stacked in member order (``vectors``: every member's)."""
        if self._rows is None:
            self._rows = RowBuffer(np.stack([vectors[m] for m in self.members]))
        return self._rows.view()
