"""One frozen settings object for the whole pipeline, validated once at construction."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

__all__ = ["Settings"]


def _check_range(name: str, value: Any, low: float, high: float, *, integer: bool = False) -> None:
    kind = "an int" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be {kind} in [{low}, {high}], got {type(value).__name__}")
    if integer and not isinstance(value, int):
        raise TypeError(f"{name} must be an int in [{low}, {high}], got {value!r}")
    if not math.isfinite(value) or not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value!r}")


@dataclass(frozen=True)
class Settings:
    """Knobs of the DH-RAG history database and turn pipeline.

    Attributes:
        alpha: Balance of relevance against recency in the history weight (paper eq. 13):
            ``w = alpha * relevance + (1 - alpha) * recency``.
        half_life_turns: A stored turn's recency halves every this many turns of its session.
        half_life_seconds: ...and every this many seconds of wall clock; ``None`` ignores time.
        capacity: Most triples kept per session (paper eq. 14); the lowest weights are evicted.
        merge_threshold: Cosine above which a new turn whose query *and* response match a stored
            one is merged into it instead of stored twice.
        max_query_chars: Longest accepted query; longer input is rejected, not truncated.
        max_text_chars: Longest accepted response or passage text.
        max_passages: Most passages stored with one turn.
    """

    alpha: float = 0.6
    half_life_turns: float = 4.0
    half_life_seconds: float | None = 86_400.0
    capacity: int = 1_000
    merge_threshold: float = 0.97
    max_query_chars: int = 8_192
    max_text_chars: int = 1_000_000
    max_passages: int = 50

    def __post_init__(self) -> None:
        _check_range("alpha", self.alpha, 0.0, 1.0)
        _check_range("half_life_turns", self.half_life_turns, 1e-9, math.inf)
        if self.half_life_seconds is not None:
            _check_range("half_life_seconds", self.half_life_seconds, 1e-9, math.inf)
        _check_range("capacity", self.capacity, 1, 10**9, integer=True)
        _check_range("merge_threshold", self.merge_threshold, 0.0, 1.0)
        _check_range("max_query_chars", self.max_query_chars, 1, 10**9, integer=True)
        _check_range("max_text_chars", self.max_text_chars, 1, 10**10, integer=True)
        _check_range("max_passages", self.max_passages, 0, 10**6, integer=True)

    def with_(self, **changes: Any) -> Settings:
        """Return a copy with ``changes`` applied (validated like the constructor)."""
        known = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise TypeError(f"unknown setting(s) {unknown}; valid: {sorted(known)}")
        return replace(self, **changes)
