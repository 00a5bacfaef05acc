"""A small BM25 retriever (scipy sparse matrices), the benchmark's second retriever.

Scores follow Lucene's BM25: ``idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))`` and
``tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avg_len))`` per document term, summed over the
query's terms (each counted as often as it occurs). Tokens: lowercase alphanumeric runs, English
stop words removed, no stemming.

Example:
    >>> index = BM25Index([Passage("the cat sat", id="a"), Passage("a dog ran", id="b")])
    >>> [p.id for p in index.search("cat", 1)]
    ['a']
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

import numpy as np
from scipy import sparse
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS, CountVectorizer

from dhrag_core import Passage

__all__ = ["BM25Index", "tokenize"]

log = logging.getLogger(__name__)

_TOKEN = re.compile(r"[a-z0-9]+")


def tokenize(text: str) -> list[str]:
    """Lowercase alphanumeric tokens without English stop words."""
    return [t for t in _TOKEN.findall(text.lower()) if t not in ENGLISH_STOP_WORDS]


def bm25_weights(counts: sparse.csr_matrix, k1: float, b: float) -> sparse.csc_matrix:
    """Document x term BM25 weights from raw term counts (a pure function of the counts)."""
    n_docs = counts.shape[0]
    lengths = np.asarray(counts.sum(axis=1)).ravel()
    norm = k1 * (1 - b + b * lengths / max(float(lengths.mean()), 1e-9))
    df = np.bincount(counts.indices, minlength=counts.shape[1])
    idf = np.log1p((n_docs - df + 0.5) / (df + 0.5))
    tf = counts.data.astype(np.float64)
    rows = np.repeat(np.arange(n_docs), np.diff(counts.indptr))
    data = idf[counts.indices] * tf * (k1 + 1) / (tf + norm[rows])
    weights = sparse.csr_matrix((data, counts.indices, counts.indptr), shape=counts.shape)
    return weights.tocsc()


class BM25Index:
    """BM25 over passage texts; ``search(query, k)`` like a ``KnowledgeBase``.

    Args:
        passages: The corpus (its text is indexed, not its title).
        k1: Term-frequency saturation.
        b: Length normalisation.
    """

    def __init__(self, passages: Sequence[Passage], *, k1: float = 1.2, b: float = 0.75) -> None:
        if k1 < 0 or not 0 <= b <= 1:
            raise ValueError(f"need k1 >= 0 and 0 <= b <= 1, got k1={k1}, b={b}")
        self.passages = list(passages)
        self._vectorizer = CountVectorizer(tokenizer=tokenize, lowercase=False,
                                           token_pattern=None, dtype=np.float64)
        counts = self._vectorizer.fit_transform([p.text for p in self.passages])
        self._weights = bm25_weights(sparse.csr_matrix(counts), k1, b)
        log.info("BM25 index: %d passages, %d terms", *self._weights.shape)

    def __len__(self) -> int:
        return len(self.passages)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every passage for ``query``."""
        q = self._vectorizer.transform([query])
        if not q.nnz:
            return np.zeros(len(self.passages))
        return np.asarray(self._weights[:, q.indices] @ q.data).ravel()

    def search(self, query: str, k: int) -> list[Passage]:
        """The ``k`` best passages (positive scores only), best first, with ``score`` set."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be an int >= 1, got {k!r}")
        s = self.scores(query)
        top = np.argpartition(-s, min(k, len(s) - 1))[:k] if len(s) > k else np.arange(len(s))
        top = top[np.lexsort((top, -s[top]))]
        return [Passage(text=self.passages[i].text, id=self.passages[i].id,
                        title=self.passages[i].title, score=float(s[i]))
                for i in top if s[i] > 0]
