"""Summary nodes (paper eq. 18-21): the middle layer between topic clusters and turns."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from dhrag_core.embedding import tokens
from dhrag_core.records import Turn, query_vectors

__all__ = ["ExtractiveSummariser", "Summariser"]

_TOKEN_CACHE = 4096


@runtime_checkable
class Summariser(Protocol):
    """Writes a short text that stands for a group of related turns."""

    def summarise(self, turns: Sequence[Turn]) -> str: ...


class ExtractiveSummariser:
    """The group's most central query, then its most frequent content words.

    No model call: centrality is the cosine of each query vector to the group's mean.
    """

    def __init__(self, n_terms: int = 4) -> None:
        self.n_terms = n_terms
        self._tokens: dict[tuple[str, str, int], list[str]] = {}

    def _words(self, turn: Turn) -> list[str]:
        """The turn's content words, remembered: a summary node re-reads the same turns."""
        key = (turn.session_id, turn.turn_id, turn.index)  # a merged turn gets a new index
        words = self._tokens.get(key)
        if words is None:
            if len(self._tokens) >= _TOKEN_CACHE:
                self._tokens.clear()
            words = self._tokens[key] = tokens(f"{turn.query} {turn.response}")
        return words

    def summarise(self, turns: Sequence[Turn]) -> str:
        if not turns:
            return ""
        vecs = query_vectors(turns)
        central = turns[int(np.argmax(vecs @ vecs.mean(axis=0)))]
        counts: Counter[str] = Counter()
        for t in turns:
            counts.update(self._words(t))
        terms = [w for w, _ in counts.most_common(self.n_terms)]
        return f"{central.query} [{', '.join(terms)}]" if terms else central.query
