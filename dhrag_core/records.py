"""Plain records: a passage, a stored turn (the paper's triple) and a history search hit."""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from dhrag_core import compact
from dhrag_core.compact import Codes

__all__ = [
    "ContextItem",
    "Floats",
    "HistoryHit",
    "Passage",
    "SelectedTurn",
    "Selection",
    "Turn",
    "Vector",
    "query_vectors",
]

Vector = npt.NDArray[np.float32]
Floats = npt.NDArray[np.floating[Any]]
"""A float vector of either width."""


class _NoMetadata(Mapping[str, Any]):
    """The empty metadata of a record: immutable, shared, equal to ``{}``, pickled by name."""

    __slots__ = ()

    def __getitem__(self, key: str) -> Any:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "{}"

    def __reduce__(self) -> str:
        return "NO_METADATA"


NO_METADATA: Mapping[str, Any] = _NoMetadata()
"""The metadata of a record given none: one shared empty mapping, not a dict per record."""


def _metadata(record: object) -> None:
    """Share ``NO_METADATA`` for an empty metadata mapping (a stored turn has several)."""
    meta = record.metadata  # type: ignore[attr-defined]
    if not meta and meta is not NO_METADATA:
        object.__setattr__(record, "metadata", NO_METADATA)


@dataclass(frozen=True, slots=True)
class Passage:
    """A passage shown to the LLM at some turn.

    ``id`` is the knowledge-base id when known; ``vector`` is its embedding when the caller
    already has it (a FAISS knowledge base does), which saves re-encoding it.
    """

    text: str
    id: str | None = None
    title: str = ""
    score: float | None = None
    metadata: Mapping[str, Any] = field(default_factory=lambda: NO_METADATA)
    vector: Vector | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        _metadata(self)

    @property
    def key(self) -> str:
        """Identity used for de-duplication: the id, else the text."""
        return self.id if self.id is not None else self.text


_UNSET: Any = object()
_HEADER = struct.Struct("<II")  # the dimension, and whether there is a response
_HEAD = _HEADER.size


def _pack(query: Floats, response: Floats | None, passages: Floats) -> bytes:
    """One buffer of a turn's vectors: header, scales (float32), codes (uint8), rows in the
    order query, response (if any), passages."""
    q = np.asarray(query, dtype=np.float32)
    if q.ndim != 1:
        raise ValueError(f"query_vector must be one vector, got shape {q.shape}")
    d = q.shape[0]
    p = np.asarray(passages, dtype=np.float32)
    if p.ndim != 2 or p.shape[1] != d:
        if p.size:
            raise ValueError(f"passage_vectors must have shape (n, {d}), got {p.shape}")
        p = p.reshape(0, d)
    parts = [q[None, :]]
    if response is not None:
        r = np.asarray(response, dtype=np.float32)
        if r.shape != (d,):
            raise ValueError(f"response_vector must have shape ({d},), got {r.shape}")
        parts.append(r[None, :])
    parts.append(p)
    for name, part in zip(("query_vector", "response_vector", "passage_vectors"),
                          (q, response, p), strict=True):
        if part is not None and not np.isfinite(part).all():
            raise ValueError(f"{name} must be finite")
    codes, scales = compact.encode(np.concatenate(parts))
    return (_HEADER.pack(d, response is not None) + scales.astype("<f4").tobytes()
            + codes.tobytes())


@dataclass(frozen=True, eq=False, slots=True, init=False)
class Turn:
    """One (query, passages, response) triple of a session's history database.

    ``index`` is the turn number in its session (0-based, never reused); ``merges`` counts how
    many near-duplicate turns were merged into this one (0: recorded once); ``cluster_id`` and
    ``chain_id`` place it in the session's topic tree and chain of related turns (-1: not
    organised). Its vectors are kept in one buffer, ``vectors``, as int8 codes with a scale
    each (``dhrag_core.compact``: a quarter of float32's memory); ``query_vector``,
    ``response_vector`` and ``passage_vectors`` (one row per passage) decode them to float32.
    The passages themselves keep no vector.

    Built with the vectors (any float arrays) as keywords, or with ``vectors``, the buffer of
    another turn (what ``dataclasses.replace`` passes): vectors given by keyword replace the
    buffer's.
    """

    session_id: str
    turn_id: str
    index: int
    query: str
    passages: tuple[Passage, ...]
    response: str
    timestamp: float
    vectors: bytes = field(repr=False)
    metadata: Mapping[str, Any] = field(default_factory=lambda: NO_METADATA)
    merges: int = 0
    cluster_id: int = -1
    chain_id: int = -1

    def __init__(
        self, session_id: str, turn_id: str, index: int, query: str,
        passages: tuple[Passage, ...], response: str, timestamp: float,
        query_vector: Floats = _UNSET, response_vector: Floats | None = _UNSET,
        passage_vectors: Floats = _UNSET, metadata: Mapping[str, Any] = NO_METADATA,
        merges: int = 0, cluster_id: int = -1, chain_id: int = -1, *,
        vectors: bytes | None = None,
    ) -> None:
        given = (query_vector, response_vector, passage_vectors)
        if vectors is None or any(v is not _UNSET for v in given):
            if vectors is None and (query_vector is _UNSET or passage_vectors is _UNSET):
                raise TypeError("Turn needs query_vector and passage_vectors, or vectors")
            if vectors is not None:
                old_q, old_r, old_p = _unpack(vectors)
                query_vector = old_q if query_vector is _UNSET else query_vector
                response_vector = old_r if response_vector is _UNSET else response_vector
                passage_vectors = old_p if passage_vectors is _UNSET else passage_vectors
            vectors = _pack(query_vector, None if response_vector is _UNSET else response_vector,
                            passage_vectors)
        put = object.__setattr__
        for name, value in (
            ("session_id", session_id), ("turn_id", turn_id), ("index", index),
            ("query", query), ("passages", passages), ("response", response),
            ("timestamp", timestamp), ("vectors", vectors), ("metadata", metadata),
            ("merges", merges), ("cluster_id", cluster_id), ("chain_id", chain_id),
        ):
            put(self, name, value)
        _metadata(self)

    def _layout(self) -> tuple[int, int, int]:
        """(dimension, rows, first passage row) of ``vectors``."""
        d, response = _HEADER.unpack_from(self.vectors)
        return d, (len(self.vectors) - _HEAD) // (d + 4), 1 + response

    def _rows(self, start: int, stop: int) -> Vector:
        d, rows, _ = self._layout()
        codes, scales = self._codes(start, stop, d, rows)
        return compact.decode(codes, scales)

    def _codes(self, start: int, stop: int, d: int, rows: int) -> tuple[Codes, Vector]:
        n = stop - start
        scales = np.frombuffer(self.vectors, dtype="<f4", count=n,
                               offset=_HEAD + 4 * start)
        codes = np.frombuffer(self.vectors, dtype=np.uint8, count=n * d,
                              offset=_HEAD + 4 * rows + d * start).reshape(n, d)
        return codes, scales

    @property
    def query_vector(self) -> Vector:
        """The query's vector (float32, decoded: a new array on every read)."""
        out: Vector = self._rows(0, 1)[0]
        return out

    @property
    def query_codes(self) -> tuple[Codes, float]:
        """The query's codes (a read-only view) and scale: what an index keeps, as stored."""
        d, rows, _ = self._layout()
        codes, scales = self._codes(0, 1, d, rows)
        return codes[0], float(scales[0])

    @property
    def response_vector(self) -> Vector | None:
        """The response's vector (float32, decoded), None when it has none."""
        if self._layout()[2] == 1:
            return None
        out: Vector = self._rows(1, 2)[0]
        return out

    @property
    def passage_vectors(self) -> Vector:
        """The passages' vectors, one row each (float32, decoded)."""
        _, rows, first = self._layout()
        return self._rows(first, rows)

    def decoded(self) -> tuple[Vector, Vector | None, Vector]:
        """``(query_vector, response_vector, passage_vectors)``, decoded in one go."""
        _, n, first = self._layout()
        rows = self._rows(0, n)
        return rows[0], rows[1] if first == 2 else None, rows[first:]


def query_vectors(turns: Sequence[Turn]) -> Vector:
    """The turns' query vectors, stacked (float32): decoded in one go, not turn by turn."""
    if not turns:
        return np.zeros((0, 0), dtype=np.float32)
    coded = [t.query_codes for t in turns]
    return compact.decode(np.stack([c for c, _ in coded]),
                          np.array([s for _, s in coded], dtype=np.float32))


def _unpack(vectors: bytes) -> tuple[Vector, Vector | None, Vector]:
    t = object.__new__(Turn)
    object.__setattr__(t, "vectors", vectors)
    return t.decoded()


@dataclass(frozen=True)
class HistoryHit:
    """A stored turn found by a history search, with the parts of its weight."""

    turn: Turn
    relevance: float
    recency: float
    weight: float


@dataclass(frozen=True)
class SelectedTurn:
    """A history turn chosen for the current query, and why (paper figure 6).

    ``via`` names the matchers that found it: ``"hierarchy"`` (cluster -> summary -> turn),
    ``"chain"`` (a turn of the thread T*, every one of which is weighed), ``"recent"`` (the
    thread's latest turn, which elliptical follow-ups lean on), ``"root"`` (the turn that
    opened the thread, kept beside the best weighed ones: ``Settings.weighting.root_weight``).
    """

    turn: Turn
    relevance: float
    recency: float
    weight: float
    via: tuple[str, ...]
    cluster_id: int
    cluster_label: str
    summary: str | None
    chain_id: int
    on_topic: bool = True
    """False: the turn moves the retrieval but is not handed to the LLM (``Selection.history``
    leaves it out): it relates neither to the query nor to the topic of the turn the query
    continues (``Settings.threads.thread_decision="fitted"``)."""


@dataclass(frozen=True)
class ContextItem:
    """One passage of the integrated context C with its integration weight (paper eq. 6-7).

    ``source`` is ``"kb"`` (the static knowledge base) or ``"history"`` (shown with the earlier
    turn ``turn``); ``score`` is the logit ``q^T W d / tau`` (plus the history term), and
    ``weight`` its softmax over the candidates.
    """

    passage: Passage
    source: str
    score: float
    weight: float
    similarity: float
    turn: Turn | None = None
    selected: SelectedTurn | None = None


@dataclass(frozen=True)
class Selection:
    """Everything chosen for one query: rewritten query, history turns, integrated context."""

    session_id: str
    query: str
    rewritten_query: str
    history: tuple[SelectedTurn, ...]
    context: tuple[ContextItem, ...]
    query_vector: Vector = field(repr=False)
    search_vector: Vector = field(repr=False)
    timings: Mapping[str, float] = field(default_factory=dict, repr=False, compare=False)
    """Seconds per stage: ``encode_s``, ``history_s`` (matching), ``rewrite_s``, ``expand_s``,
    ``kb_s`` (knowledge-base search), ``integrate_s``."""
    search_vectors: tuple[Vector, ...] = field(default=(), repr=False, compare=False)
    """Every query vector the knowledge base was searched with, ``search_vector`` first (the
    runner-up threads' expanded queries and the raw query follow;
    ``Settings.threads.thread_variants``)."""
    clarity: float | None = field(default=None, compare=False)
    """The raw query's best cosine to the knowledge-base candidates, when the clarity gate is on
    (``Settings.retrieval.clarity_threshold``); at or above the threshold the context is ranked by
    the raw query alone."""
    gated: bool = field(default=False, compare=False)
    """Whether the clarity gate fired: the context is ranked by the raw query alone."""

    @property
    def passages(self) -> list[Passage]:
        """The context passages, best first (what to store with the turn, and show the LLM)."""
        return [c.passage for c in self.context]

    def trace(self) -> list[dict[str, Any]]:
        """A plain, JSON-friendly account of why each context item was chosen."""
        out = []
        for c in self.context:
            row: dict[str, Any] = {
                "source": c.source, "id": c.passage.id, "title": c.passage.title,
                "weight": round(c.weight, 4), "similarity": round(c.similarity, 4),
            }
            cleaned = c.passage.metadata.get("dhrag_cleaned")
            if cleaned:  # what was changed to store it (NULs, lone surrogates, cut)
                row["cleaned"] = cleaned
            if c.selected is not None:
                s = c.selected
                row.update(turn=s.turn.index, relevance=round(s.relevance, 4),
                           recency=round(s.recency, 4), history_weight=round(s.weight, 4),
                           cluster=s.cluster_id, cluster_label=s.cluster_label,
                           summary=s.summary, chain=s.chain_id, via=list(s.via))
            out.append(row)
        return out
