"""The knowledge base's side of a turn: searching it (by vector or by text, blocking or
awaited) and each found passage's vector (its own, a cached one, or encoded), with the checks
that name the knowledge base when it returns something unusable."""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from dhrag_core.embedding import Embedder, encode_checked
from dhrag_core.knowledge.base import KnowledgeBase
from dhrag_core.records import Passage, Vector
from dhrag_core.settings import Settings
from dhrag_core.validation import as_items, check_found

__all__ = ["KnowledgeSearch", "check_same_space", "embedder_of"]


class KnowledgeSearch:
    """Searches ``knowledge`` for a turn and gives each passage found its vector in the
    ``embedder``'s space, keeping the latest ``vector_cache_size`` encoded ones."""

    def __init__(self, knowledge: KnowledgeBase, embedder: Embedder, settings: Settings,
                 vector_cache_size: int) -> None:
        self.knowledge = knowledge
        self.embedder = embedder
        self.settings = settings
        self.vector_cache_size = vector_cache_size
        self._vector_cache: OrderedDict[str, Vector] = OrderedDict()
        self._vector_lock = threading.Lock()

    def search(self, text: str, vectors: Vector) -> list[Passage]:
        """The passages found for the rows of ``vectors`` (each once), or for ``text`` from a
        knowledge base searched by text."""
        cfg = self.settings
        search_vectors = getattr(self.knowledge, "search_vectors", None)
        if callable(search_vectors):
            return _union(_check_rows(search_vectors(vectors, cfg.retrieval.kb_k), len(vectors)))
        k = cfg.retrieval.text_k or cfg.retrieval.kb_k
        return check_found(self.knowledge.search(text, k), "search(query, k)")

    async def asearch(self, text: str, vectors: Vector) -> list[Passage]:
        """``search`` awaiting the knowledge base's async members where it has them."""
        cfg, kb = self.settings, self.knowledge
        if callable(getattr(kb, "search_vectors", None)):
            asearch_vectors = getattr(kb, "asearch_vectors", None)
            if inspect.iscoroutinefunction(asearch_vectors):
                found = await asearch_vectors(vectors, cfg.retrieval.kb_k)
                return _union(_check_rows(found, len(vectors), "asearch_vectors(vectors, k)"))
            return await asyncio.to_thread(self.search, text, vectors)
        asearch = getattr(kb, "asearch", None)
        if inspect.iscoroutinefunction(asearch):
            k = cfg.retrieval.text_k or cfg.retrieval.kb_k
            return check_found(await asearch(text, k), "asearch(query, k)")
        return await asyncio.to_thread(self.search, text, vectors)

    def with_vectors(self, passages: Sequence[Passage]) -> tuple[list[Passage], list[Vector]]:
        """The passages, each carrying its vector (``passage_vectors``), and those vectors."""
        vectors = self.passage_vectors(passages)
        return [p if p.vector is v else replace(p, vector=v)
                for p, v in zip(passages, vectors, strict=True)], vectors

    def passage_vectors(self, passages: Sequence[Passage]) -> list[Vector]:
        """Vectors of passages from the knowledge base: their own, a cached one, or encoded.

        A vector that is not finite (a damaged index row) counts as none: the passage is
        encoded from its text. Retrievers that return text only would otherwise cost an
        encoding of every passage
        on every turn (~30 passages/s for MiniLM on 2 cores); a conversation keeps meeting
        the same passages, so an LRU cache by passage id (or text) removes most of it. The
        cache is shared by threads: every look-up and change holds ``_vector_lock`` (encoding
        does not).
        """
        _check_lengths(passages, self.embedder.dimension, self.knowledge)
        cache = self._vector_cache
        out: list[Vector | None] = []
        missing: list[int] = []
        with self._vector_lock:
            for i, p in enumerate(passages):
                own = p.vector if p.vector is not None and _finite(p.vector) else None
                v = own if own is not None else cache.get(p.key)
                if v is not None and own is None:
                    cache.move_to_end(p.key)
                out.append(v)
                if v is None:
                    missing.append(i)
        if missing:
            enc = encode_checked(self.embedder, [passages[i].text for i in missing])
            with self._vector_lock:
                for i, v in zip(missing, enc, strict=True):
                    out[i] = v
                    cache[passages[i].key] = v
                while len(cache) > self.vector_cache_size:
                    cache.popitem(last=False)
        return [v for v in out if v is not None]


def _finite(vector: Vector) -> bool:
    return bool(np.isfinite(np.asarray(vector, dtype=np.float32)).all())


def _check_lengths(passages: Sequence[Passage], dimension: int, knowledge: object) -> None:
    """``ValueError`` naming the knowledge base and the passage when a passage carries a vector
    that is not one of ``dimension`` numbers (another embedder's), not numpy's shape error
    later."""
    for p in passages:
        if p.vector is None:
            continue
        shape = np.shape(p.vector)
        if shape != (dimension,):
            which = repr(p.id) if p.id is not None else f"with text {p.text[:40]!r}"
            raise ValueError(
                f"the knowledge base ({type(knowledge).__name__}) returned passage {which} "
                f"with a vector of shape {shape}; the embedder gives {dimension}-d vectors: "
                "embed the knowledge base with the engine's embedder (or pass its embedder "
                "to DHRAG), or return passages without vectors")


def _union(rows: Sequence[Sequence[Passage]]) -> list[Passage]:
    """The passages of several result lists, each once (first seen kept), in list order."""
    seen: set[str] = set()
    out: list[Passage] = []
    for row in rows:
        for p in row:
            if p.key not in seen:
                seen.add(p.key)
                out.append(p)
    return out


def embedder_of(knowledge: KnowledgeBase) -> Embedder | None:
    """The knowledge base's own embedder, if it exposes one (``FaissKnowledgeBase`` and the
    adapters' knowledge bases do)."""
    found = getattr(knowledge, "embedder", None)
    return found if isinstance(found, Embedder) else None


def check_same_space(knowledge: KnowledgeBase, embedder: Embedder) -> None:
    """A knowledge base searched by vector must embed in the history embedder's space; a
    difference in dimension is caught here rather than inside the first search."""
    own = embedder_of(knowledge)
    if callable(getattr(knowledge, "search_vectors", None)) and own is not None \
            and own.dimension != embedder.dimension:
        raise ValueError(
            f"the knowledge base embeds in {own.dimension} dimensions but the embedder gives "
            f"{embedder.dimension}: pass the knowledge base's embedder to DHRAG (or leave "
            "embedder unset to share it)"
        )


def _check_rows(found: Any, rows: int, call: str = "search_vectors(vectors, k)") -> list[
        list[Passage]]:
    """``search_vectors``' result: one list of passages per query row."""
    got = as_items(found)
    if got is None or len(got) != rows:
        raise TypeError(
            f"the knowledge base's {call} must return one list of dhrag_core.Passage per "
            f"query row; asked with {rows}, got {type(found).__name__}"
            + (f" of length {len(got)}" if got is not None else "")
        )
    return [check_found(row, call) for row in got]
