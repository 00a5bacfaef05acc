"""Turns of one tree node in turn order, with their running vector sum (and, for a summary
node, their vectors, int8-coded: the one copy the tree keeps).

A chain (thread) and a summary node are both such a node: their latest member and member
order matter, and their mean vector is matched against queries.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable
from typing import Any

import numpy as np

from dhrag_core.index import RowBuffer, SumIndex
from dhrag_core.records import Floats, Vector

__all__ = ["OrderedMembers"]


class OrderedMembers:
    """Member turn ids sorted by turn index (``members[-1]`` is the latest) and the running
    sum of their vectors (float32: a session holds thousands of nodes, and only the sum's
    direction is read); with ``rows=True`` also their vectors, stacked in member order and
    kept in step with every add and discard (``rows``, ``row``, ``products``) as int8 codes:
    vectors already ``compact.rounded`` read back exactly, so a discard subtracts the very
    vector the add added."""

    __slots__ = ("_key", "_own", "_rows", "_sums", "indexes", "members")

    def __init__(self, dimension: int, rows: bool = False, *,
                 sums: SumIndex[Any] | None = None, key: Hashable = None) -> None:
        self.members: list[str] = []
        self.indexes: list[int] = []
        # the running sum: an array of its own, or row ``key`` of a ``SumIndex`` shared with
        # the node's peers (one copy, searched by cosine there)
        self._own = np.zeros(dimension, dtype=np.float32) if sums is None else None
        self._sums, self._key = sums, key
        self._rows = RowBuffer(np.zeros((0, dimension), dtype=np.float32)) if rows else None

    @property
    def total(self) -> Vector:
        """The members' vector sum (float32; a copy when it lives in a ``SumIndex``)."""
        if self._sums is not None:
            return self._sums.total(self._key)
        assert self._own is not None
        return self._own

    def _accumulate(self, vector: Floats) -> None:
        v = vector.astype(np.float32)
        if self._sums is not None:
            self._sums.add_to(self._key, v)
        else:
            assert self._own is not None
            self._own = self._own + v

    def __len__(self) -> int:
        return len(self.members)

    def add(self, turn_id: str, vector: Floats, index: int) -> None:
        at = bisect.bisect_right(self.indexes, index)
        self.members.insert(at, turn_id)
        self.indexes.insert(at, index)
        if self._rows is not None:
            self._rows.insert(at, vector)
        self._accumulate(vector)

    def position(self, turn_id: str, index: int | None = None) -> int:
        """Where ``turn_id`` (of turn ``index``, if known: found by bisection) is; ValueError
        when it is not a member."""
        if index is not None:
            at = bisect.bisect_left(self.indexes, index)
            if at < len(self.members) and self.members[at] == turn_id:
                return at
        return self.members.index(turn_id)

    def discard(self, turn_id: str, vector: Floats, index: int | None = None) -> None:
        at = self.position(turn_id, index)
        del self.members[at], self.indexes[at]
        if self._rows is not None:
            self._rows.delete(at)
        self._accumulate(-vector)

    def _buffer(self) -> RowBuffer:
        if self._rows is None:
            raise ValueError("this node keeps no rows (OrderedMembers(rows=True) does)")
        return self._rows

    def rows(self) -> Vector:
        """The members' vectors stacked in member order (decoded: a new array)."""
        return self._buffer().view()

    def row(self, at: int) -> Vector:
        """The vector of the member at position ``at`` (decoded: a new array)."""
        return self._buffer().row(at)

    def rows_at(self, positions: np.ndarray) -> Vector:
        """The vectors of the members at ``positions`` (decoded: a new array)."""
        return self._buffer().rows_at(positions)

    def products(self, query: Vector) -> np.ndarray:
        """The members' inner products with ``query``, in member order, from the codes."""
        return self._buffer().products(query)
