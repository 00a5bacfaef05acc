"""An offline extractive answerer: the context sentence that best matches the question.

Stands in for an LLM in the demo and the chat command when no endpoint is configured; its
answers are labelled as extracts, never presented as generated text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dhrag_core.embedding import Embedder
from dhrag_core.records import Passage

__all__ = ["Extract", "ExtractiveAnswerer", "sentences"]

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")


def sentences(text: str, min_chars: int = 25) -> list[str]:
    """Split passage text into sentences (a leading title line is dropped)."""
    body = text.split("\n", 1)[-1] if "\n" in text.strip() else text
    parts = [" ".join(p.split()) for p in _SENTENCE.split(body)]
    return [p for p in parts if len(p) >= min_chars]


@dataclass(frozen=True)
class Extract:
    """The chosen sentence and the passage it came from."""

    text: str
    passage: Passage
    similarity: float


class ExtractiveAnswerer:
    """Picks the sentence of the top passages most similar to the (rewritten) question."""

    def __init__(self, embedder: Embedder, passages: int = 3) -> None:
        self.embedder = embedder
        self.passages = passages

    def answer(self, question: str, context: Sequence[Passage]) -> Extract | None:
        pool = [(s, p) for p in context[: self.passages] for s in sentences(p.text)]
        if not pool:
            return None
        vecs = self.embedder.encode([s for s, _ in pool])
        sims = vecs @ self.embedder.encode([question])[0]
        best = int(np.argmax(sims))
        return Extract(text=pool[best][0], passage=pool[best][1], similarity=float(sims[best]))
