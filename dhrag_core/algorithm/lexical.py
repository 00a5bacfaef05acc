"""The question's own words as evidence for a candidate passage: the lexical term of
integration.

A dense query vector, above all one moved toward earlier turns, blurs the words that make a
question specific ("calculated", "1989"); a passage that holds them is more likely the one
asked for. IDF is counted among the query's own candidates, so any knowledge base works, with
no corpus statistics: a word every candidate holds tells none apart.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dhrag_core.embedding import stem_forms, token_set, word_at

__all__ = ["held_words", "word_overlap"]

def _holds(low: str, form: str) -> bool:
    """Whether the lower-cased text holds ``form`` as a word (``word_at``)."""
    n = len(form)
    i = low.find(form)
    while i >= 0:
        if word_at(low, i, i + n):
            return True
        i = low.find(form, i + 1)
    return False


def held_words(words: frozenset[str], text: str) -> frozenset[str]:
    """``words & token_set(text)`` for content words ``words`` (as ``token_set`` gives them),
    found by searching the text for each word's forms: no tokenising of the passage."""
    return _held({w: stem_forms(w) for w in words}, text)


def _held(forms: dict[str, tuple[str, ...]], text: str) -> frozenset[str]:
    # every form of a word begins with its first (the stem, or its plural alone), so a text
    # without that substring holds none: one C-level test rules most words out
    low = text.lower()
    return frozenset(w for w, fs in forms.items()
                     if fs and fs[0] in low and any(_holds(low, f) for f in fs))


def word_overlap(query: str, texts: Sequence[str], length_norm: float = 0.0) -> np.ndarray:
    """For each text, the share of the query's content words it contains, each word weighted
    by its IDF among the distinct ``texts`` (``ln((n + 1) / (df + 1)) + 1``); zeros when the
    query has no content word.

    A longer text holds more words by chance: with ``length_norm`` ``b`` in [0, 1] each share
    is divided by ``1 - b + b * len / mean len`` (BM25's length normalisation, lengths in
    words among the distinct ``texts``), so that length alone earns nothing; 0: no correction.
    """
    if not 0.0 <= length_norm <= 1.0:
        raise ValueError(f"length_norm must be in [0, 1], got {length_norm!r}")
    words = token_set(query)
    if not words or not texts:
        return np.zeros(len(texts), dtype=np.float32)
    forms = {w: stem_forms(w) for w in words}
    found = {t: _held(forms, t) for t in dict.fromkeys(texts)}
    df = {w: sum(w in h for h in found.values()) for w in words}
    n = len(found)
    idf = {w: math.log((n + 1) / (df[w] + 1)) + 1.0 for w in words}
    total = sum(idf.values())
    share = {t: sum(idf[w] for w in h) / total for t, h in found.items()}
    if length_norm:
        lengths = {t: max(len(t.split()), 1) for t in found}
        mean = sum(lengths.values()) / len(lengths)
        share = {t: v / (1.0 - length_norm + length_norm * lengths[t] / mean)
                 for t, v in share.items()}
    return np.array([share[t] for t in texts], dtype=np.float32)
