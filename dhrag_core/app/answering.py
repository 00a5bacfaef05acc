"""An offline extractive answerer: the context sentence that best answers the question.

Stands in for an LLM in the demo and the chat command when no endpoint is configured; its
answers are labelled as extracts, never presented as generated text. A sentence is scored by
its embedding similarity to the question, the rare question words it shares (so "E03" finds
the E03 sentence, not the E07 one) and whether it holds the kind of answer asked for (a weight
for "how heavy", a duration for "how long does it take", a year for "when"); questions in the
text (FAQ headings) are never answers, and when nothing matches there is no answer.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dhrag_core.embedding import Embedder
from dhrag_core.records import Passage

__all__ = ["Extract", "ExtractiveAnswerer", "answer_kind", "content_words", "sentences"]

_EXPANSION = re.compile(r"\s*\([^()]*\)\s*$")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")
_WORD = re.compile(r"[^\W_]+(?:['\u2019-][^\W_]+)*")
_STOP_WORDS = (
    "a an the of to in on at for by with from and or but is are was were be been being do does "
    "did done has have had it its this that these those what which who whom whose when where "
    "why how can could should would will shall may might must i you he she we they them his "
    "her their our your my me us not no yes as into about than then there here if so such "
    "very also just any some all one much many long tell me please"
)
_STOP = frozenset(_STOP_WORDS.split())
_NUMBER = r"\b\d[\d,.]*|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|twelve|dozen|" \
          r"hundred|thousand|million|billion|half)\b"
_UNITS = {
    "weight": r"(?:kg|kilo(?:gram)?s?|g|grams?|lbs?|pounds?|ounces?|oz|tonnes?|tons?)\b",
    "duration": r"(?:seconds?|secs?|minutes?|mins?|hours?|hrs?|days?|weeks?|months?|years?|"
                r"decades?|centuries)\b",
    "size": r"(?:km|kilometres?|kilometers?|metres?|meters?|m|cm|mm|miles?|mi|feet|foot|ft|"
            r"inch(?:es)?|yards?|acres?|hectares?|square)\b",
}
_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("weight", re.compile(r"\bhow (?:heavy|light)\b|\bweigh", re.I)),
    ("duration", re.compile(r"\bhow long (?:does|do|did|will|would|can|to)\b.*\b(?:take|last|"
                            r"run|live|stay)|\bhow (?:much time|soon|often)\b|\bhow old\b|"
                            r"\bhow long (?:do|does|did) \w+ (?:live|last)", re.I)),
    ("size", re.compile(r"\bhow (?:long|tall|high|wide|far|deep|big|large|thick)\b", re.I)),
    ("year", re.compile(r"^\s*when\b|\bwhat (?:year|date|day|month)\b|\bsince when\b", re.I)),
    ("number", re.compile(r"\bhow (?:many|much)\b|\bwhat (?:number|percentage|amount)\b",
                          re.I)),
)
_KIND_TEXT = {
    **{k: re.compile(rf"(?:{_NUMBER})\s*(?:-\s*)?{u}", re.I) for k, u in _UNITS.items()},
    "year": re.compile(r"\b(?:1[0-9]{3}|20[0-9]{2})\b|\b(?:January|February|March|April|May|"
                       r"June|July|August|September|October|November|December)\b"),
    "number": re.compile(_NUMBER, re.I),
}


def sentences(text: str, min_chars: int = 25) -> list[str]:
    """Split passage text into sentences (a leading title line is dropped)."""
    body = text.split("\n", 1)[-1] if "\n" in text.strip() else text
    parts = [" ".join(p.split()) for p in _SENTENCE.split(body)]
    return [p for p in parts if len(p) >= min_chars]


def _stem(word: str) -> str:
    w = word.lower().replace("\u2019", "'").removesuffix("'s")
    if len(w) > 4 and w.endswith("ies"):
        return w[:-3] + "y"
    if len(w) > 4 and w.endswith(("ches", "shes", "sses", "xes", "zes")):
        return w[:-2]
    if len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    for suffix in ("ing", "ed"):
        if len(w) - len(suffix) >= 4 and w.endswith(suffix):
            return w[: -len(suffix)]
    return w


def content_words(text: str) -> set[str]:
    """Lower-cased, lightly stemmed words of ``text`` without stop words."""
    return {_stem(w) for w in _WORD.findall(text) if w.lower() not in _STOP}


def answer_kind(question: str) -> str | None:
    """What the question asks for: weight, duration, size, year, number, or None."""
    for kind, pattern in _KINDS:
        if pattern.search(question):
            return kind
    return None


@dataclass(frozen=True)
class Extract:
    """The chosen sentence and the passage it came from."""

    text: str
    passage: Passage
    similarity: float


class ExtractiveAnswerer:
    """Picks the sentence of the top passages that best answers the (rewritten) question.

    Args:
        embedder: Encodes question and sentences.
        passages: How many top context passages to read.
        min_similarity: Below this embedding similarity, a sentence sharing no content word
            with the question is no answer; with none left, ``answer`` returns None.
        word_weight: Weight of the shared rare words (0-1, IDF-weighted) in the score.
        kind_weight: Bonus for a sentence holding the kind of answer asked for.
    """

    def __init__(
        self, embedder: Embedder, passages: int = 3, *, min_similarity: float = 0.3,
        word_weight: float = 0.5, kind_weight: float = 0.15,
    ) -> None:
        self.embedder = embedder
        self.passages = passages
        self.min_similarity = min_similarity
        self.word_weight = word_weight
        self.kind_weight = kind_weight

    def answer(self, question: str, context: Sequence[Passage]) -> Extract | None:
        """The best sentence, or None when no sentence matches the question."""
        pool = [(s, p) for p in context[: self.passages] for s in sentences(p.text)
                if not s.rstrip("\"')").endswith("?")]  # FAQ questions are not answers
        if not pool:
            return None
        vecs = self.embedder.encode([s for s, _ in pool])
        sims = vecs @ self.embedder.encode([question])[0]
        titles = {id(p): content_words(p.title) for p in context[: self.passages]}
        words = [content_words(s) | titles[id(p)] for s, p in pool]  # "It" is the title
        # a rewriter's "(context words)" steer the similarity, not the word match: they name
        # the topic, which every sentence of the passage is about
        asked = content_words(_EXPANSION.sub("", question))
        topic = content_words(question)
        idf = {w: math.log((len(pool) + 1) / (0.5 + sum(w in ws for ws in words)))
               for w in asked}
        total = sum(idf.values()) or 1.0
        shared = np.array([sum(idf[w] for w in asked & ws) / total for ws in words])
        kind = answer_kind(question)
        wanted = _KIND_TEXT[kind] if kind is not None else None
        fits = np.array([wanted is not None and wanted.search(s) is not None for s, _ in pool])
        score = sims + self.word_weight * shared + self.kind_weight * fits
        related = np.array([bool(topic & ws) for ws in words])
        score[~related & (sims < self.min_similarity)] = -np.inf
        best = int(np.argmax(score))
        if not np.isfinite(score[best]):
            return None
        return Extract(text=pool[best][0], passage=pool[best][1], similarity=float(sims[best]))
