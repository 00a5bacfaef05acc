"""The question's own words as evidence for a candidate passage: the lexical term of
integration.

A dense query vector, above all one moved toward earlier turns, blurs the words that make a
question specific ("calculated", "1989"); a passage that holds them is more likely the one
asked for. IDF is counted among the query's own candidates, so any knowledge base works, with
no corpus statistics: a word every candidate holds tells none apart.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Sequence

import numpy as np

from dhrag_core.embedding import token_set

__all__ = ["passage_words", "word_overlap"]

passage_words = functools.lru_cache(maxsize=8192)(token_set)
"""A text's content words, cached: a conversation meets the same passages again."""


def word_overlap(query: str, texts: Sequence[str]) -> np.ndarray:
    """For each text, the share of the query's content words it contains, each word weighted
    by its IDF among the distinct ``texts`` (``ln((n + 1) / (df + 1)) + 1``); zeros when the
    query has no content word."""
    words = token_set(query)
    sets = [passage_words(t) for t in texts]
    if not words or not sets:
        return np.zeros(len(sets), dtype=np.float32)
    distinct = {t: s for t, s in zip(texts, sets, strict=True)}
    df = Counter(w for s in distinct.values() for w in words & s)
    n = len(distinct)
    idf = {w: math.log((n + 1) / (df[w] + 1)) + 1.0 for w in words}
    total = sum(idf.values())
    return np.array([sum(idf[w] for w in words & s) / total for s in sets], dtype=np.float32)
