"""Plain records: a passage, a stored turn (the paper's triple) and a history search hit."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["HistoryHit", "Passage", "Turn", "Vector"]

Vector = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Passage:
    """A passage shown to the LLM at some turn.

    ``id`` is the knowledge-base id when known; ``vector`` is its embedding when the caller
    already has it (a FAISS knowledge base does), which saves re-encoding it.
    """

    text: str
    id: str | None = None
    title: str = ""
    score: float | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    vector: Vector | None = field(default=None, compare=False, repr=False)

    @property
    def key(self) -> str:
        """Identity used for de-duplication: the id, else the text."""
        return self.id if self.id is not None else self.text


@dataclass(frozen=True, eq=False)
class Turn:
    """One (query, passages, response) triple of a session's history database.

    ``index`` is the turn number in its session (0-based, never reused); ``hits`` counts how
    many near-duplicate turns were merged into this one.
    """

    session_id: str
    turn_id: str
    index: int
    query: str
    passages: tuple[Passage, ...]
    response: str
    timestamp: float
    query_vector: Vector = field(repr=False)
    response_vector: Vector | None = field(repr=False)
    passage_vectors: Vector = field(repr=False)
    metadata: Mapping[str, Any] = field(default_factory=dict)
    hits: int = 1


@dataclass(frozen=True)
class HistoryHit:
    """A stored turn found by a history search, with the parts of its weight."""

    turn: Turn
    relevance: float
    recency: float
    weight: float
