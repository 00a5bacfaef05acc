"""Seams for the two thread decisions: which thread a query continues, and which chain a new
turn joins.

The engine's own rules decide by default (``Selector.threads``: relevance, recency, cues;
``ChainTracker.link``: the thread the query was judged to continue, else the topic vector).
A ``ThreadPolicy`` or ``ChainPolicy`` given to ``HistoryDatabase`` (or ``DHRAG``) sees the
engine's decision and a read-only ``SessionView`` and may replace it: an LLM judging the
thread, a learned rule, or an analysis that makes one decision right to measure the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol, runtime_checkable

from dhrag_core.history.session import SessionState
from dhrag_core.records import Turn, Vector

__all__ = ["NEW_CHAIN", "ChainPolicy", "Link", "Ranked", "SessionView", "ThreadPolicy"]

Ranked = list[tuple[int, float]]
"""Threads (chain ids) with the query's relevance to each, T* first."""

NEW_CHAIN: Literal["new"] = "new"
Link = int | Literal["new"] | None
"""What a ``ChainPolicy`` decides: a chain id to join, ``NEW_CHAIN``, or ``None`` (the engine's
own rule)."""


class SessionView:
    """A read-only view of one session's stored turns and their threads (chains).

    Valid until the session next changes; read it inside the policy call (or, outside one,
    right after ``HistoryDatabase.view``).
    """

    def __init__(self, state: SessionState) -> None:
        self._s = state

    @property
    def turn_ids(self) -> list[str]:
        """Stored turn ids, oldest first."""
        return sorted(self._s.turns, key=lambda t: self._s.turns[t].index)

    def turn(self, turn_id: str) -> Turn:
        """The stored turn (``KeyError`` for an unknown id)."""
        return self._s.turns[turn_id]

    def chain_of(self, turn_id: str) -> int | None:
        """The chain (thread) a stored turn belongs to."""
        return self._s.tree.chain_of(turn_id)

    def chain_members(self, chain_id: int) -> list[str]:
        """The turn ids of a chain, oldest first (empty for an unknown id)."""
        return self._s.tree.chain_members(chain_id)

    @property
    def chains(self) -> list[int]:
        """Chain ids, in the order their first stored turn came."""
        tree, turns = self._s.tree, self._s.turns
        return sorted(tree.chain_ids(), key=lambda c: turns[tree.chain_members(c)[0]].index)

    @property
    def latest(self) -> str | None:
        """The id of the latest stored turn."""
        return self._s.latest

    @property
    def next_index(self) -> int:
        """The index the next turn of the session gets."""
        return self._s.next_index

    def __len__(self) -> int:
        return len(self._s.turns)


@runtime_checkable
class ThreadPolicy(Protocol):
    """Chooses the thread a query continues, given the engine's ranking."""

    def order(self, view: SessionView, query: str, query_vector: Vector,
              ranked: Sequence[tuple[int, float]]) -> Sequence[tuple[int, float]] | None:
        """The threads to use, T* first (a subset or re-ordering of ``ranked``), or ``None``
        to keep the engine's order. ``query`` is empty where only the vector is known."""
        ...


@runtime_checkable
class ChainPolicy(Protocol):
    """Chooses the chain a new turn joins, given the engine's proposal."""

    def link(self, view: SessionView, turn: Turn, proposed: int | None) -> Link:
        """A chain id to join, ``NEW_CHAIN`` to start one, or ``None`` for the engine's rule.
        ``proposed``: the thread the engine judged the turn's query to continue, if any."""
        ...
