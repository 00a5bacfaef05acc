"""Plain records: a passage, a stored turn (the paper's triple) and a history search hit."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "Compact",
    "ContextItem",
    "Floats",
    "HistoryHit",
    "Passage",
    "SelectedTurn",
    "Selection",
    "Turn",
    "Vector",
]

Vector = npt.NDArray[np.float32]
Compact = npt.NDArray[np.float16]
"""A vector kept in memory as float16 (half of float32), computed with as float32."""
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


@dataclass(frozen=True, eq=False, slots=True)
class Turn:
    """One (query, passages, response) triple of a session's history database.

    ``index`` is the turn number in its session (0-based, never reused); ``merges`` counts how
    many near-duplicate turns were merged into this one (0: recorded once); ``cluster_id`` and
    ``chain_id`` place it in the session's topic tree and chain of related turns (-1: not
    organised). Its vectors (any float arrays given) are kept as float16, half the memory of
    float32, and computed with as float32; ``passage_vectors`` has one row per passage, and
    the passages themselves keep no vector.
    """

    session_id: str
    turn_id: str
    index: int
    query: str
    passages: tuple[Passage, ...]
    response: str
    timestamp: float
    query_vector: Floats = field(repr=False)
    response_vector: Floats | None = field(repr=False)
    passage_vectors: Floats = field(repr=False)
    metadata: Mapping[str, Any] = field(default_factory=lambda: NO_METADATA)
    merges: int = 0
    cluster_id: int = -1
    chain_id: int = -1

    def __post_init__(self) -> None:
        _metadata(self)
        # one compact copy of each vector: float16, whatever the caller's arrays were; a
        # value float16 cannot hold is refused here, never stored as infinity
        for name in ("query_vector", "response_vector", "passage_vectors"):
            v = getattr(self, name)
            if v is None:
                continue
            if not (isinstance(v, np.ndarray) and v.dtype == np.float16 and v.flags.c_contiguous):
                with np.errstate(over="ignore"):
                    v = np.ascontiguousarray(v, dtype=np.float16)
                object.__setattr__(self, name, v)
            if not np.isfinite(v).all():
                raise ValueError(f"{name} must be finite and within float16 range (65504)")


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
    ``"chain"`` (the best turn of the best chain T*), ``"recent"`` (the latest turn, kept for
    elliptical follow-ups).
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
    runner-up threads' expanded queries and the raw query follow; ``Settings.thread_variants``)."""
    clarity: float | None = field(default=None, compare=False)
    """The raw query's best cosine to the knowledge-base candidates, when the clarity gate is on
    (``Settings.clarity_threshold``); at or above the threshold the context is ranked by the raw
    query alone."""
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
