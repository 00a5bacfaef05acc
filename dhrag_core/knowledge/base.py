"""The static knowledge base K: a protocol for the user's retriever, and a FAISS default."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Protocol, runtime_checkable

import faiss
import numpy as np

from dhrag_core.embedding import Embedder, default_embedder, encode_checked, l2_normalise
from dhrag_core.records import Passage, Vector
from dhrag_core.settings import Settings
from dhrag_core.validation import check_k, clean_passage

__all__ = ["FaissKnowledgeBase", "KnowledgeBase", "query_rows"]

log = logging.getLogger(__name__)

MAX_PASSAGE_CHARS = Settings().limits.max_text_chars
"""Passages are cut to this at ingestion (the history's default limit)."""


@runtime_checkable
class KnowledgeBase(Protocol):
    """Anything that returns passages for a query (a vector store, a retriever, an API).

    Optional members the engine uses when present: ``search_vectors(vectors, k)`` (then it
    is searched by the expanded query vector, which must be in its embedding space) and the
    coroutines ``asearch(query, k)`` / ``asearch_vectors(vectors, k)``, awaited by
    ``DHRAG.aselect``.
    """

    def search(self, query: str, k: int) -> list[Passage]: ...


def query_rows(vectors: np.ndarray) -> list[list[float]]:
    """The rows of a ``search_vectors`` argument as float lists (what a framework's
    search-by-vector takes); ``ValueError`` unless it is a 2-D array."""
    m = np.asarray(vectors, dtype=np.float64)
    if m.ndim != 2:
        raise ValueError(f"vectors must be a 2-D array (one row per query), got {m.shape}")
    rows: list[list[float]] = m.tolist()
    return rows


@contextmanager
def _omp_threads(n: int | None) -> Iterator[None]:
    """FAISS's OpenMP threads for searches made by the calling thread: OpenMP keeps the
    setting per thread, so other threads' searches keep theirs (None: leave it)."""
    if n is None:
        yield
        return
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(n)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


def _checked_vectors(vectors: object, n: int, embedder: Embedder) -> np.ndarray:
    """The given passage ``vectors`` as an ``(n, dimension)`` matrix of finite numbers (their
    own precision); else ``ValueError`` naming the knowledge base, the row and the
    dimensions."""
    dim = embedder.dimension
    where = f"FaissKnowledgeBase: vectors (one row per passage, {dim} numbers each from " \
            f"{type(embedder).__name__})"
    try:
        m = np.asarray(vectors)
    except ValueError:  # rows of different lengths
        m = np.empty(0, dtype=object)
    if m.dtype == object:
        rows = list(vectors) if isinstance(vectors, (list, tuple)) else []
        for i, row in enumerate(rows):
            if np.shape(row) != (dim,):
                raise ValueError(f"{where}: row {i} has shape {np.shape(row)}, expected "
                                 f"({dim},)")
    if not np.issubdtype(m.dtype, np.number):
        raise ValueError(f"{where} must be numbers, got {type(vectors).__name__} of "
                         f"{m.dtype}")
    if m.shape != (n, dim):
        raise ValueError(f"{where} must have shape ({n}, {dim}), got {m.shape}")
    finite = np.isfinite(m).all(axis=1)
    if not finite.all():
        raise ValueError(f"{where}: {int((~finite).sum())} row(s) hold NaN or infinite values, "
                         f"the first row {int(np.flatnonzero(~finite)[0])}; re-embed them")
    return m


class FaissKnowledgeBase:
    """Exact inner-product search (FAISS ``IndexFlatIP``) over passages embedded once.

    Returned passages carry their vector, so storing them in the history costs no re-encoding.

    Args:
        passages: The corpus, as ``Passage`` objects or plain strings.
        embedder: Encodes queries (and the passages when ``vectors`` is not given).
        vectors: Precomputed unit-length passage embeddings, one row per passage (for large
            corpora, cache these: encoding runs at ~30 passages/s on a 2-core CPU).
        batch_size: Passages per encoding call, for progress logging on large corpora.
        single_query_threads: OpenMP threads for a search by one query (default 1: FAISS
            splits one query's scan over threads at a cost above the scan itself on small
            machines; the ids found are the same). Several queries use FAISS's default,
            one query per thread. None: FAISS's default for every search.
    """

    def __init__(
        self,
        passages: Sequence[Passage | str],
        embedder: Embedder | None = None,
        *,
        vectors: np.ndarray | None = None,
        batch_size: int = 256,
        single_query_threads: int | None = 1,
    ) -> None:
        if single_query_threads is not None and (
                isinstance(single_query_threads, bool) or not isinstance(single_query_threads, int)
                or single_query_threads < 1):
            raise ValueError("single_query_threads must be a positive int or None, got "
                             f"{single_query_threads!r}")
        self.single_query_threads = single_query_threads
        if isinstance(passages, (str, bytes, Passage)):
            raise TypeError("passages must be a sequence of str or Passage, not one item; "
                            "wrap it: [passage]")
        self.embedder: Embedder = embedder if embedder is not None else default_embedder()
        items = [p if isinstance(p, Passage) else Passage(text=p, id=str(i))
                 for i, p in enumerate(passages)]
        for i, p in enumerate(items):
            if not isinstance(p.text, str):
                raise TypeError(f"passages[{i}] must be a str or Passage")
        # what the history stores of a passage, the knowledge base holds from the start
        items = [clean_passage(p, MAX_PASSAGE_CHARS) for p in items]
        self.passages: list[Passage] = items
        if vectors is None:
            vectors = self._encode_all(batch_size)
        v = (l2_normalise(_checked_vectors(vectors, len(items), self.embedder)) if len(items)
             else np.zeros((0, self.embedder.dimension)))
        self.vectors: Vector = v.astype(np.float32)
        self.index = faiss.IndexFlatIP(self.embedder.dimension)
        if len(items):
            self.index.add(self.vectors)

    def _encode_all(self, batch_size: int) -> Vector:
        texts = [p.text for p in self.passages]
        chunks = []
        for start in range(0, len(texts), batch_size):
            chunks.append(encode_checked(self.embedder, texts[start : start + batch_size]))
            log.debug("encoded %d/%d passages", min(start + batch_size, len(texts)), len(texts))
        if not chunks:
            return np.zeros((0, self.embedder.dimension), dtype=np.float32)
        return np.concatenate(chunks)

    def __len__(self) -> int:
        return len(self.passages)

    def search(self, query: str, k: int) -> list[Passage]:
        """The ``k`` passages most similar to ``query``, best first, with scores and vectors."""
        return self.search_vectors(encode_checked(self.embedder, [query]), k)[0]

    def search_vectors(self, queries: np.ndarray, k: int) -> list[list[Passage]]:
        """Batch search by query embeddings (one list of passages per row)."""
        check_k(k)
        q = l2_normalise(queries)
        if q.ndim != 2 or q.shape[1] != self.embedder.dimension:
            raise ValueError(
                f"FaissKnowledgeBase.search_vectors: query vectors must have shape "
                f"(n, {self.embedder.dimension}), got {q.shape}: "
                "embed queries with the embedder this knowledge base was built with"
            )
        if not len(self.passages):
            return [[] for _ in range(q.shape[0])]
        with _omp_threads(self.single_query_threads if q.shape[0] == 1 else None):
            scores, ids = self.index.search(q, min(k, len(self.passages)))
        out = []
        for row_scores, row_ids in zip(scores, ids, strict=True):
            hits = []
            for score, i in zip(row_scores, row_ids, strict=True):
                if i < 0:
                    continue
                p = self.passages[int(i)]
                hits.append(Passage(text=p.text, id=p.id, title=p.title, score=float(score),
                                    metadata=p.metadata, vector=self.vectors[int(i)]))
            out.append(hits)
        return out
