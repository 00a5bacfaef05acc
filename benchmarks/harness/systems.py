"""Baseline systems and the registry that builds systems by name.

Every dense baseline embeds a query built from the conversation so far and searches the same
``FaissKnowledgeBase``; each memoises its query embeddings (text -> vector), so a text is
encoded once per system, as a deployed system would cache it. ``bm25-*`` baselines send the
same query texts to a BM25 index over the same passages (a second retriever).

Plug in another system (a DH-RAG pipeline, say) by registering a factory::

    register_system("dhrag", lambda ctx: MyDHRAG(ctx.kb, ctx.embedder))

and run ``python -m benchmarks run --import my_module --systems last-turn,dhrag``.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from benchmarks.harness.replay import System
from benchmarks.harness.sparse import BM25Index
from dhrag_core import (
    Calibration,
    Embedder,
    FaissKnowledgeBase,
    Passage,
    Settings,
    calibrate,
    l2_normalise,
)
from dhrag_core.algorithm.lexical import word_overlap
from dhrag_core.records import Vector

__all__ = [
    "REGISTRY",
    "BenchContext",
    "DenseSystem",
    "Exchange",
    "Memory",
    "MemorySystem",
    "QueryEncoder",
    "SparseSystem",
    "SystemSpec",
    "answer_interpolation",
    "build_systems",
    "clarity_gated",
    "embedded",
    "interpolate",
    "interpolation",
    "join_last_n",
    "last_n_text",
    "reference_text",
    "register_answer_interpolations",
    "register_system",
    "resolve_names",
    "text_builder",
]

Exchange = tuple[str, str]
"""An earlier turn: ``(question, answer)``."""

INTERPOLATION_GRID = ((0.2, 0.3, 0.5), (0.0, 0.2, 0.3))
"""Weights tried for the previous and the first question (tuned on the benchmark's data)."""
ANSWER_GRID = ((0.2, 0.3), (0.0, 0.2), (0.2, 0.3, 0.5))
"""Weights tried for the previous question, the first question and the previous answer."""
LENGTH_GRID = (0.02, 0.05, 0.1)
"""Weights of the length-only prior (``last-turn-length-*``), in calibrated similarity per
doubling of a candidate's length."""
BM25_SYSTEMS = ("last-turn", "all-questions", "last-1-q", "last-1-qa")
"""Text baselines also run with BM25."""


class QueryEncoder:
    """Embeds query texts, remembering each text's vector.

    Args:
        embedder: The query embedder (the knowledge base's).
    """

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self._memo: dict[str, Vector] = {}

    def __call__(self, text: str) -> Vector:
        """The unit vector of ``text`` (shape ``(dimension,)``)."""
        v = self._memo.get(text)
        if v is None:
            v = self.embedder.encode([text])[0]
            self._memo[text] = v
        return v

    def __len__(self) -> int:
        return len(self._memo)


@dataclass
class Memory:
    """What a baseline remembers of its conversation: its id and the earlier exchanges."""

    conversation_id: str = ""
    exchanges: list[Exchange] = field(default_factory=list)


TextBuilder = Callable[[Memory, str], str]
"""``(memory, current question) -> query text``."""
VectorBuilder = Callable[[Memory, str, QueryEncoder], Vector]
"""``(memory, current question, encoder) -> query vector``."""


class MemorySystem:
    """Base of the baselines: remembers the exchanges of the current conversation.

    Args:
        name: Label in reports.
        reference: Whether the system reads reference data (then reported as a reference).
    """

    def __init__(self, name: str, *, reference: bool = False) -> None:
        self.name = name
        self.reference = reference
        self.memory = Memory()

    def start(self, conversation_id: str) -> None:
        self.memory = Memory(conversation_id)

    def retrieve(self, question: str, k: int) -> list[Passage]:
        raise NotImplementedError

    def observe(self, question: str, passages: list[Passage], answer: str) -> None:
        self.memory.exchanges.append((question, answer))


class DenseSystem(MemorySystem):
    """Embeds a query vector built from memory and searches a FAISS knowledge base.

    Args:
        name: Label in reports.
        kb: The knowledge base (its embedder encodes queries, memoised per system).
        build: Memory and current question -> query vector.
        reference: Whether the system reads reference data.
    """

    def __init__(self, name: str, kb: FaissKnowledgeBase, build: VectorBuilder, *,
                 reference: bool = False, lexical_weight: float = 0.0,
                 words: TextBuilder | None = None, length_weight: float = 0.0) -> None:
        super().__init__(name, reference=reference)
        self.kb = kb
        self.encoder = QueryEncoder(kb.embedder)
        self._build = build
        self.lexical_weight = lexical_weight
        self.length_weight = length_weight
        self._words = words
        self._pool = Settings().retrieval.kb_k
        self._calibration: Calibration | None = None

    def retrieve(self, question: str, k: int) -> list[Passage]:
        """The top ``k``; with ``lexical_weight``, dhrag's lexical term given to the baseline:
        its ``kb_k`` candidates re-ranked by similarity (calibrated as dhrag's) + weight x
        ``word_overlap`` with the question (or the text ``words`` builds); with
        ``length_weight``, + that weight x ``log2`` of each candidate's length over their
        median length (a prior on length alone)."""
        query = self._build(self.memory, question, self.encoder)
        if not self.lexical_weight and not self.length_weight:
            return self.kb.search_vectors(query[None, :], k)[0]
        found = self.kb.search_vectors(query[None, :], max(k, self._pool))[0]
        if self._calibration is None:
            self._calibration = calibrate(self.kb.embedder)
        scores = self._calibration.similarity(np.array([p.score or 0.0 for p in found]))
        if self.lexical_weight:
            text = self._words(self.memory, question) if self._words is not None else question
            scores = scores + self.lexical_weight * word_overlap(
                text, [p.text for p in found], Settings().experiments.lexical_length_norm)
        if self.length_weight:
            scores = scores + self.length_weight * length_prior([p.text for p in found])
        order = np.argsort(-scores, kind="stable")[:k]
        return [replace(found[i], score=float(scores[i])) for i in order]


def length_prior(texts: Sequence[str]) -> np.ndarray:
    """``log2`` of each text's length in words over the median length of ``texts``."""
    lengths = np.array([max(len(t.split()), 1) for t in texts], dtype=np.float64)
    out: np.ndarray = np.log2(lengths / np.median(lengths))
    return out


class SparseSystem(MemorySystem):
    """Builds a query text from memory and searches a BM25 index.

    Args:
        name: Label in reports.
        index: The BM25 index.
        build: Memory and current question -> query text.
        reference: Whether the system reads reference data.
    """

    def __init__(self, name: str, index: BM25Index, build: TextBuilder, *,
                 reference: bool = False) -> None:
        super().__init__(name, reference=reference)
        self.index = index
        self._build = build

    def retrieve(self, question: str, k: int) -> list[Passage]:
        return self.index.search(self._build(self.memory, question), k)


def join_last_n(exchanges: Sequence[Exchange], question: str, n: int | None,
                answers: bool) -> str:
    """The last ``n`` earlier turns (all when ``None``), with or without answers, then the question.

    Example:
        >>> join_last_n([("q1", "a1"), ("q2", "a2")], "q3", 1, answers=True)
        'q2\\na2\\nq3'
    """
    recent = exchanges if n is None else exchanges[max(0, len(exchanges) - n) :] if n else []
    parts = [x for q, a in recent for x in ((q, a) if answers and a else (q,))]
    return "\n".join([*parts, question])


def interpolate(current: Vector, previous: Vector | None, first: Vector | None,
                w_prev: float, w_first: float, answer: Vector | None = None,
                w_answer: float = 0.0) -> Vector:
    """``current + w_prev * previous + w_first * first + w_answer * answer``, normalised
    (absent terms skipped)."""
    v = np.asarray(current, dtype=np.float32).copy()
    for term, w in ((previous, w_prev), (first, w_first), (answer, w_answer)):
        if term is not None and w:
            v += w * term
    out: Vector = l2_normalise(v)[0]
    return out


def last_n_text(n: int | None, answers: bool) -> TextBuilder:
    """A text builder: ``join_last_n`` over the memory."""
    def build(memory: Memory, question: str) -> str:
        return join_last_n(memory.exchanges, question, n, answers)
    return build


def reference_text(references: Mapping[tuple[str, int], str]) -> TextBuilder:
    """A text builder reading the reference rewrite of the current turn (else the question)."""
    def build(memory: Memory, question: str) -> str:
        turn = len(memory.exchanges) + 1
        return references.get((memory.conversation_id, turn), question)
    return build


def embedded(text: TextBuilder) -> VectorBuilder:
    """A vector builder embedding a text builder's query."""
    def build(memory: Memory, question: str, enc: QueryEncoder) -> Vector:
        return enc(text(memory, question))
    return build


def text_builder(n: int | None, answers: bool) -> VectorBuilder:
    """A vector builder embedding ``join_last_n`` (``embedded(last_n_text(n, answers))``)."""
    return embedded(last_n_text(n, answers))


def interpolation(w_prev: float, w_first: float) -> VectorBuilder:
    """A vector builder mixing the current, previous and first question vectors."""
    def build(memory: Memory, question: str, enc: QueryEncoder) -> Vector:
        ex = memory.exchanges
        if not ex:
            return enc(question)
        return interpolate(enc(question), enc(ex[-1][0]), enc(ex[0][0]), w_prev, w_first)
    return build


def answer_interpolation(w_prev: float, w_first: float, w_answer: float) -> VectorBuilder:
    """Like ``interpolation``, plus the previous answer's vector (the answer-aware baseline:
    dhrag reads answers, so its strongest simple rival may too)."""
    def build(memory: Memory, question: str, enc: QueryEncoder) -> Vector:
        ex = memory.exchanges
        if not ex:
            return enc(question)
        answer = enc(ex[-1][1]) if ex[-1][1] else None
        return interpolate(enc(question), enc(ex[-1][0]), enc(ex[0][0]), w_prev, w_first,
                           answer, w_answer)
    return build


def clarity_gated(kb: FaissKnowledgeBase, build: VectorBuilder, threshold: float) -> VectorBuilder:
    """``build``, except that a question whose own best passage has a similarity of at least
    ``threshold`` (calibrated as dhrag calibrates it: ``Calibration.similarity``) is searched
    as is: dhrag's clarity gate (``Settings.retrieval.clarity_threshold``)
    given to a baseline, so that the gate's gain is not credited to the history organisation."""
    calibration = calibrate(kb.embedder)

    def gated(memory: Memory, question: str, enc: QueryEncoder) -> Vector:
        own = enc(question)
        best = kb.search_vectors(own[None, :], 1)[0]
        if best and best[0].vector is not None and float(
                calibration.similarity(float(best[0].vector @ own))) >= threshold:
            return own
        return build(memory, question, enc)
    return gated


@dataclass(frozen=True)
class BenchContext:
    """What a system factory may use.

    Attributes:
        kb: The knowledge base (its ``embedder`` embeds queries).
        embedder: The query embedder.
        references: ``(conversation_id, turn) -> reference rewrite``; only reference systems
            may read it.
        threads: ``(conversation_id, turn) -> thread`` (the original conversation of an
            interleaved turn); only reference systems may read it.
    """

    kb: FaissKnowledgeBase
    embedder: Embedder
    references: Mapping[tuple[str, int], str] = field(default_factory=dict)
    threads: Mapping[tuple[str, int], str] = field(default_factory=dict)

    @cached_property
    def answer_encoder(self) -> QueryEncoder:
        """One memo of text vectors shared by the answer-aware baselines (answers are long:
        encoding them once per grid point would dominate the run)."""
        return QueryEncoder(self.kb.embedder)

    @cached_property
    def bm25(self) -> BM25Index:
        """A BM25 index over the same passages, built on first use."""
        return BM25Index(self.kb.passages)


SystemFactory = Callable[[BenchContext], System]


@dataclass(frozen=True)
class SystemSpec:
    """A registered system: its factory, whether it is a reference, what it does."""

    name: str
    factory: SystemFactory
    reference: bool = False
    description: str = ""


REGISTRY: dict[str, SystemSpec] = {}
"""Registered systems by name, in registration (and report) order."""


def register_system(name: str, factory: SystemFactory, *, reference: bool = False,
                    description: str = "", replace: bool = False) -> None:
    """Add a system factory under ``name``.

    Raises:
        ValueError: If ``name`` is taken and ``replace`` is false.
    """
    if not name or any(c in name for c in ",*?[] "):
        raise ValueError(f"name must be non-empty without ',*?[] ', got {name!r}")
    if name in REGISTRY and not replace:
        raise ValueError(f"system {name!r} is already registered (pass replace=True)")
    REGISTRY[name] = SystemSpec(name, factory, reference, description)


def resolve_names(patterns: Iterable[str]) -> list[str]:
    """Registered names matching the patterns (exact names or globs such as ``interp-*``).

    Raises:
        ValueError: If a pattern matches nothing; the message lists the valid names.
    """
    out: list[str] = []
    for pattern in patterns:
        hits = [n for n in REGISTRY if fnmatch.fnmatchcase(n, pattern)]
        if not hits:
            raise ValueError(f"unknown system {pattern!r}; choose from: {', '.join(REGISTRY)}")
        out.extend(h for h in hits if h not in out)
    return out


def build_systems(patterns: Iterable[str], ctx: BenchContext) -> list[System]:
    """Instantiate the systems matching ``patterns`` (see ``resolve_names``)."""
    return [REGISTRY[name].factory(ctx) for name in resolve_names(patterns)]


def _answer_aware(name: str, build: VectorBuilder, gate: bool = False,
                  lexical: bool = False) -> SystemFactory:
    def factory(ctx: BenchContext) -> System:
        threshold = Settings().retrieval.clarity_threshold
        chosen = build
        if gate and threshold is not None:
            chosen = clarity_gated(ctx.kb, build, threshold)
        weight = Settings().integration.lexical_weight if lexical else 0.0
        system = DenseSystem(name, ctx.kb, chosen, lexical_weight=weight)
        system.encoder = ctx.answer_encoder
        return system
    return factory


def register_answer_interpolations(
    grid: tuple[Sequence[float], Sequence[float], Sequence[float]],
    variants: Sequence[str] | None = None,
) -> list[str]:
    """Register the answer-aware interpolations ``interp-qa-P-F-A`` of ``grid`` (weights of
    the previous question, the first question and the previous answer), each also with dhrag's
    clarity gate (``-gated``) and lexical term (``-lex``), or only the ``variants`` named
    (``""``, ``"-lex"``, ``"-gated"``, ``"-gated-lex"``); names already registered are kept.
    Returns the names added."""
    lexical = Settings().integration.lexical_weight
    gates = [False] + ([True] if Settings().retrieval.clarity_threshold is not None else [])
    added = []
    for w_prev in grid[0]:
        for w_first in grid[1]:
            for w_ans in grid[2]:
                base = f"interp-qa-{w_prev:g}-{w_first:g}-{w_ans:g}"
                for gate in gates:
                    for lex in [False] + ([True] if lexical else []):
                        suffix = ("-gated" if gate else "") + ("-lex" if lex else "")
                        name = base + suffix
                        if name in REGISTRY or (variants is not None and suffix not in variants):
                            continue
                        register_system(
                            name, _answer_aware(name, answer_interpolation(w_prev, w_first, w_ans),
                                                gate=gate, lexical=lex),
                            description=f"question + {w_prev:g} x previous + {w_first:g} x first "
                                        f"+ {w_ans:g} x previous answer"
                                        + (", a question clear on its own searched as is "
                                           "(dhrag's clarity gate)" if gate else "")
                                        + (", re-ranked with dhrag's lexical term" if lex else ""))
                        added.append(name)
    return added


def _register_baselines() -> None:
    def dense(name: str, build: VectorBuilder) -> SystemFactory:
        return lambda ctx: DenseSystem(name, ctx.kb, build)

    def bm25(name: str, text: TextBuilder) -> SystemFactory:
        return lambda ctx: SparseSystem(name, ctx.bm25, text)

    texts: list[tuple[str, TextBuilder, str]] = [
        ("last-turn", last_n_text(0, False), "the current question alone"),
        ("all-questions", last_n_text(None, False), "every user question so far, joined"),
    ]
    for answers in (False, True):
        what = "questions and answers" if answers else "questions"
        texts += [(f"last-{n}-{'qa' if answers else 'q'}", last_n_text(n, answers),
                   f"the {what} of the last {n} turns + the question") for n in (1, 2, 3)]
    for name, text, description in texts:
        register_system(name, dense(name, embedded(text)), description=description)
    lexical = Settings().integration.lexical_weight
    if lexical:
        register_system(
            "last-turn-lex",
            lambda ctx: DenseSystem("last-turn-lex", ctx.kb, embedded(last_n_text(0, False)),
                                    lexical_weight=lexical),
            description="the current question alone, re-ranked with dhrag's lexical term")
    for w in LENGTH_GRID:
        register_system(
            f"last-turn-length-{w:g}",
            lambda ctx, w=w: DenseSystem(f"last-turn-length-{w:g}", ctx.kb,
                                         embedded(last_n_text(0, False)), length_weight=w),
            description=f"the current question alone, its candidates re-ranked with {w:g} x "
                        "log2(length / median length): a prior on passage length alone")
    for w_prev in INTERPOLATION_GRID[0]:
        for w_first in INTERPOLATION_GRID[1]:
            name = f"interp-{w_prev:g}-{w_first:g}"
            register_system(name, dense(name, interpolation(w_prev, w_first)),
                            description=f"question + {w_prev:g} x previous + {w_first:g} x first")
    register_answer_interpolations(ANSWER_GRID)
    register_system(
        "rewrite-ref",
        lambda ctx: DenseSystem("rewrite-ref", ctx.kb, embedded(reference_text(ctx.references)),
                                reference=True),
        reference=True,
        description="the MTRAG LLM rewrite from the data (reference, not an input)")
    if lexical:
        register_system(
            "rewrite-ref-lex",
            lambda ctx: DenseSystem(
                "rewrite-ref-lex", ctx.kb, embedded(reference_text(ctx.references)),
                reference=True, lexical_weight=lexical, words=reference_text(ctx.references)),
            reference=True,
            description="the MTRAG LLM rewrite, re-ranked with dhrag's lexical term on its words")
    for name, text, description in texts:
        if name in BM25_SYSTEMS:
            register_system(f"bm25-{name}", bm25(f"bm25-{name}", text),
                            description=f"BM25: {description}")
    register_system(
        "bm25-rewrite-ref",
        lambda ctx: SparseSystem("bm25-rewrite-ref", ctx.bm25, reference_text(ctx.references),
                                 reference=True),
        reference=True, description="BM25: the MTRAG LLM rewrite (reference)")


_register_baselines()
