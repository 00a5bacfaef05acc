"""One frozen settings object for the whole pipeline, validated once at construction.

Each field is declared with its group, its description and its valid range beside it
(``_knob``); ``Settings.knobs()`` lists them, the class docstring and ``docs/settings.md`` are
written from them, and construction checks every value against its range.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, TypeVar

__all__ = ["GROUPS", "DHRAGSettings", "Knob", "Settings"]

T = TypeVar("T")

GROUPS = {
    "limits": "Limits: what one turn, session and process may hold",
    "weighting": "Weighting: the update rule and the history's selection inside a thread",
    "tree": "Tree: topic clusters, summary nodes, chains and topic vectors",
    "threads": "Threads: which thread T* a query continues, and hedging",
    "retrieval": "Retrieval: the expanded query and the knowledge-base search",
    "integration": "Integration: how knowledge-base and history passages are ranked together",
    "ablations": "Ablations: each switch turns off exactly the part it names",
}
"""The groups of ``Settings``, in the order the fields are declared."""


@dataclass(frozen=True)
class Knob:
    """One setting: its group, description and valid values.

    Attributes:
        name: The field's name.
        group: A key of ``GROUPS``.
        doc: What it does and why.
        default: The default value.
        kind: ``"number"``, ``"int"``, ``"bool"`` or ``"choice"``.
        low, high: Inclusive bounds of a number or int.
        optional: ``None`` is valid (it turns the knob off).
        choices: The valid strings of a ``"choice"``.
    """

    name: str
    group: str
    doc: str
    default: Any
    kind: str
    low: float = -math.inf
    high: float = math.inf
    optional: bool = False
    choices: tuple[str, ...] = ()

    def valid(self) -> str:
        """The valid values, as text."""
        if self.kind == "bool":
            text = "True or False"
        elif self.kind == "choice":
            text = " or ".join(repr(c) for c in self.choices)
        else:
            text = f"[{_num(self.low)}, {_num(self.high)}]" + (
                " (int)" if self.kind == "int" else "")
        return text + (" or None" if self.optional else "")

    def check(self, value: Any) -> None:
        """Raise ``TypeError`` (wrong type) or ``ValueError`` (out of range) naming the knob."""
        if value is None and self.optional:
            return
        if self.kind == "bool":
            if not isinstance(value, bool):
                raise TypeError(f"{self.name} must be a bool, got {value!r}")
        elif self.kind == "choice":
            if value not in self.choices:
                raise ValueError(f"{self.name} must be {self.valid()}, got {value!r}")
        else:
            _check_range(self.name, value, self.low, self.high, integer=self.kind == "int")


def _num(x: float) -> str:
    return "inf" if x == math.inf else f"{x:g}" if abs(x) < 1e6 else f"{x:.0e}"


def _check_range(name: str, value: Any, low: float, high: float, *, integer: bool = False) -> None:
    kind = "an int" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be {kind} in [{low}, {high}], got {type(value).__name__}")
    if integer and not isinstance(value, int):
        raise TypeError(f"{name} must be an int in [{low}, {high}], got {value!r}")
    if not math.isfinite(value) or not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value!r}")


def _knob(default: T, group: str, doc: str, *, low: float = -math.inf, high: float = math.inf,
          integer: bool = False, optional: bool = False, choices: Sequence[str] = ()) -> T:
    """A dataclass field carrying its ``Knob`` (the name is filled in by ``Settings.knobs``)."""
    if isinstance(default, bool):
        kind = "bool"
    elif choices:
        kind = "choice"
    else:
        kind = "int" if integer else "number"
    spec = Knob("", group, " ".join(doc.split()), default, kind, low, high,
                optional or default is None, tuple(choices))
    out: T = field(default=default, metadata={"knob": spec})
    return out


_BIG = 10**9


@dataclass(frozen=True)
class Settings:
    # -- limits ------------------------------------------------------------------------------
    max_query_chars: int = _knob(8_192, "limits", """Longest query used: a longer one is cut
        to it (at a word boundary, with a warning), so a long pasted message still gets its
        turn.""", low=1, high=_BIG, integer=True)
    max_text_chars: int = _knob(1_000_000, "limits", """Longest accepted response or passage
        text.""", low=1, high=10**10, integer=True)
    max_passages: int = _knob(50, "limits", "Most passages stored with one turn.",
                              low=0, high=10**6, integer=True)
    max_metadata_chars: int = _knob(1_000_000, "limits", """Longest accepted turn metadata, as
        JSON text.""", low=2, high=10**10, integer=True)
    max_passage_metadata_chars: int = _knob(10_000, "limits", """Longest metadata of a stored
        passage, as JSON text: a retriever's larger fields are dropped (largest first), as
        they would be copied into every turn that shows the passage.""",
        low=2, high=10**10, integer=True)
    capacity: int = _knob(1_000, "limits", """Most triples kept per session (paper eq. 14);
        the lowest weights are evicted.""", low=1, high=_BIG, integer=True)
    max_sessions_in_memory: int = _knob(1_000, "limits", """Most sessions whose indexes a
        ``HistoryDatabase`` keeps in memory; the least recently used beyond it are dropped and
        reloaded from the store when used again (the store is the source of truth).""",
        low=1, high=_BIG, integer=True)
    vector_cache_size: int = _knob(10_000, "limits", """Passage vectors ``DHRAG`` keeps (LRU)
        for knowledge bases that return text only: a conversation keeps meeting the same
        passages.""", low=0, high=_BIG, integer=True)
    max_pending: int = _knob(4096, "limits", """Sessions whose selections ``DHRAG`` keeps until
        their turns are recorded (least recently selected dropped first).""",
        low=1, high=_BIG, integer=True)
    max_pending_bytes: int = _knob(128 * 2**20, "limits", """Bytes the selections ``DHRAG``
        keeps until their turns are recorded may hold, all sessions together (their passages'
        texts and vectors, estimated); the least recently selected are dropped first, the
        newest always kept.""", low=1, high=10**15, integer=True)

    # -- weighting ---------------------------------------------------------------------------
    alpha: float = _knob(0.5, "weighting", """Balance of relevance against recency in the
        history weight (paper eq. 13): ``w = alpha * relevance + (1 - alpha) * recency``.""",
        low=0.0, high=1.0)
    half_life_turns: float = _knob(4.0, "weighting", """A stored turn's recency halves every
        this many turns of its session (of its thread, when selecting inside one).""",
        low=1e-9, high=math.inf)
    half_life_seconds: float | None = _knob(86_400.0, "weighting", """...and every this many
        seconds of wall clock; ``None`` ignores time.""", low=1e-9, high=math.inf,
        optional=True)
    merge_threshold: float = _knob(0.97, "weighting", """Similarity above which a new turn
        whose query *and* response match a stored one is merged into it instead of stored
        twice.""", low=0.0, high=1.0)
    history_turns: int = _knob(2, "weighting", "Most history turns selected per query.",
                               low=1, high=10**6, integer=True)
    root_weight: float = _knob(0.75, "weighting", """The turn that opened the thread (its
        earliest in the window weighed) also expands the query, with this times its relevance
        to the query (unsharpened), when the ``history_turns`` best do not already hold it: a
        thread's first question usually names what its follow-ups leave out. 0: off.""",
        low=0.0, high=100.0)
    relevance: str = _knob("query", "weighting", """What a stored turn's relevance to the query
        compares: ``"query"`` (its query, as paper eq. 13), ``"topic"`` (query pulled toward
        answer and passages) or ``"max"`` of both.""", choices=("query", "topic", "max"))
    relevance_contrast: float | None = _knob(0.1, "weighting", """If set, relevances are
        sharpened around the best match at this temperature before weighting
        (``scoring.contrast``); ``None`` keeps eq. 13 as is.""", low=1e-6, high=100.0,
        optional=True)

    # -- tree --------------------------------------------------------------------------------
    cluster_threshold: float = _knob(0.5, "tree", """A turn joins a topic cluster whose
        centroid it matches this well.""", low=-1.0, high=1.0)
    cluster_min_quality: float = _knob(0.6, "tree", """A cluster whose mean member-to-centroid
        similarity falls below this is split locally.""", low=-1.0, high=1.0)
    cluster_merge_every: int = _knob(16, "tree", """Every this many turns, clusters whose
        centroids converged merge.""", low=1, high=10**6, integer=True)
    chain_threshold: float = _knob(0.45, "tree", """A turn continues a chain whose latest turn
        or centroid it matches this well.""", low=-1.0, high=1.0)
    summary_size: int = _knob(8, "tree", "Most turns under one summary node.",
                              low=1, high=10**6, integer=True)
    min_tree_turns: int = _knob(64, "tree", """Below this many turns, matching scans flat (the
        tree cannot help).""", low=0, high=_BIG, integer=True)
    tree_clusters: int = _knob(3, "tree", "Beam width of hierarchical matching: clusters.",
                               low=1, high=10**6, integer=True)
    tree_summaries: int = _knob(6, "tree", "Beam width of hierarchical matching: summary nodes.",
                                low=1, high=10**6, integer=True)
    tree_turns: int = _knob(8, "tree", "Beam width of hierarchical matching: turns.",
                            low=1, high=10**6, integer=True)
    topic_answer_weight: float = _knob(3.0, "tree", """A turn's topic vector is its query plus
        this times its answer (and ``topic_passage_weight`` times its passages' mean);
        clustering, chains and expansion all use it.""", low=0.0, high=100.0)
    topic_passage_weight: float = _knob(3.0, "tree", """Weight of the passages' mean in a
        turn's topic vector (see ``topic_answer_weight``).""", low=0.0, high=100.0)
    answer_vector: str = _knob("passages", "tree", """How ``add`` gets the response's vector:
        ``"passages"`` derives it from the passages stored with it (their vectors, weighted by
        the squared share of the response's content words each one contains: no encoding)
        when the response drew on them (``answer_share``), else encodes it; ``"encode"``
        always encodes it.""", choices=("passages", "encode"))
    answer_share: float = _knob(0.5, "tree", """The response drew on its passages when one of
        them holds at least this share of its content words; an answer that did not (written
        from other sources, or saying it cannot answer) is encoded, as its passages would
        misstate it. 0: derived whenever a word is shared.""", low=0.0, high=1.0)
    answer_words: int | None = _knob(24, "tree", """Words of a response that are encoded when
        it is (its opening states its point; a short text keeps the turn's cost low);
        ``None``: all of it.""", low=1, high=_BIG, integer=True, optional=True)

    # -- threads -----------------------------------------------------------------------------
    thread_recency: float = _knob(0.2, "threads", """Bonus of a recently active thread (chain)
        when choosing the thread T* that a query continues (relevance of its best turn + this
        x its recency).""", low=0.0, high=10.0)
    thread_half_life: float = _knob(2.0, "threads", """Turns of the session after which that
        bonus halves.""", low=1e-9, high=math.inf)
    thread_decision: str = _knob("fitted", "threads", """How T* is chosen: ``"fitted"``
        (``algorithm.topic_shift``: a question stays with the latest answered turn's thread,
        goes back to the earlier thread it matches best, or starts a new topic and is given
        no history, by a small decision fitted on human topic labels; unanswered turns anchor
        nothing and are not handed on) or ``"scores"`` (the thread score alone: relevance plus
        ``thread_recency``, with ``thread_switch`` and ``follow_up_margin``).""",
        choices=("fitted", "scores"))
    thread_link: float | None = _knob(0.3, "threads", """A new turn joins the thread chosen for
        its query when the query matched that thread this well (else it links by its topic
        vector, ``chain_threshold``); ``None`` links by topic vector only.""",
        low=-1.0, high=1.0, optional=True)
    thread_switch: float | None = _knob(0.2, "threads", """Leaving the thread of the latest
        turn for another needs a relevance of at least this to the other thread (a new topic,
        matching nothing well, stays put); ``None``: the best thread score decides alone.""",
        low=-1.0, high=1.0, optional=True)
    follow_up_margin: float = _knob(0.3, "threads", """A follow-up that names nothing ("who
        was it built for?": a referring word or almost no content words, no cue) leaves the
        thread of the latest turn only for a thread at least this much more relevant
        (``use_cues``).""", low=0.0, high=2.0)
    thread_variants: int = _knob(3, "threads", """Threads whose reconstructed query searches
        the knowledge base: T* and the runner-ups by thread score. Each passage counts by its
        best match over these queries, so a wrong guess of T* costs less (1: T* only). A
        knowledge base searched by text is searched once, with the rewrite in T*; these
        queries re-rank its candidates.""", low=1, high=10**6, integer=True)
    hedge_margin: float | None = _knob(0.2, "threads", """A runner-up thread is searched only
        when its relevance to the query is within this of T*'s (a clear choice is not
        hedged); ``None``: always.""", low=0.0, high=2.0, optional=True)

    # -- retrieval ---------------------------------------------------------------------------
    kb_k: int = _knob(20, "retrieval", "Passages fetched from the knowledge base per query.",
                      low=1, high=10**6, integer=True)
    text_k: int | None = _knob(None, "retrieval", """Passages fetched from a knowledge base
        searched by text (it has no ``search_vectors``), to be re-ranked by the expanded query
        vector; ``None``: ``kb_k``.""", low=1, high=10**6, integer=True)
    context_k: int = _knob(10, "retrieval", """Passages in the integrated context (at most
        ``max_passages``: a turn stores the passages it showed).""",
        low=1, high=10**6, integer=True)
    expansion: float = _knob(0.4, "retrieval", """Weight of the selected history in the
        expanded query vector.""", low=0.0, high=100.0)
    follow_up_expansion: float = _knob(0.6, "retrieval", """``expansion`` for a follow-up that
        names nothing and stays in the latest turn's thread (``use_cues``): only the history
        says what it is about.""", low=0.0, high=100.0)
    expansion_weights: str = _knob("share", "retrieval", """How the selected turns' weights
        scale their pull on the expanded query: ``"share"`` divides each by their sum, so that
        ``expansion`` is the history's whole weight however large relevances come out on the
        embedder; ``"absolute"`` uses them as they are (their sum scales the pull).""",
        choices=("share", "absolute"))
    rewrite_vector: bool = _knob(False, "retrieval", """Embed the rewritten query (one more
        encoding) as the base of the expanded query vector, instead of the raw query (on both
        paths: a knowledge base searched by text always gets the rewritten text).""")
    search_raw_query: bool = _knob(False, "retrieval", """The raw query is searched too, as one
        more of those queries (a new topic, which no thread continues, keeps its own ranking;
        by text: it re-ranks).""")
    clarity_threshold: float | None = _knob(0.66, "retrieval", """A query the knowledge base
        answers clearly on its own -- the best similarity of the raw query to a passage found
        (by the expanded queries) at least this -- is ranked by the raw query alone: history
        expands only queries that need it; ``None``: always expanded.""",
        low=-1.0, high=1.0, optional=True)

    # -- integration -------------------------------------------------------------------------
    history_bonus: float = _knob(0.0, "integration", """Integration logit bonus of a history
        passage per unit history weight.""", low=-10.0, high=10.0)
    answer_bonus: float = _knob(0.0, "integration", """Further bonus per unit history weight
        and unit similarity between the passage and the answer given with it (the passages
        the answer drew on).""", low=-10.0, high=10.0)
    lexical_weight: float = _knob(0.16, "integration", """Weight of the question's words in the
        integration logits: each candidate gains this times the IDF-weighted share of the
        rewritten query's content words it contains (the question and the antecedents the
        rewriter filled in; IDF among the query's candidates: ``lexical.word_overlap``); 0:
        off.""", low=0.0, high=10.0)
    lexical_length_norm: float = _knob(0.0, "integration", """How much that share is
        normalised by the candidate's length (BM25's ``b``: a long passage holds more words by
        chance); 0: not at all.""", low=0.0, high=1.0)
    temperature: float = _knob(0.05, "integration", """Softmax temperature of the integration
        weights (paper eq. 6): it sets the weights reported with the context, not their order
        (a softmax keeps it).""", low=1e-6, high=100.0)

    # -- ablations ---------------------------------------------------------------------------
    use_clustering: bool = _knob(True, "ablations", """Match through topic clusters (off: every
        summary node is scored).""")
    use_hierarchy: bool = _knob(True, "ablations", """Beam search cluster -> summary -> turn
        (off: scan every turn).""")
    use_chains: bool = _knob(True, "ablations", """Select inside the thread T* with
        thread-local recency (off: select over the whole session, recency in session
        turns).""")
    use_recency: bool = _knob(True, "ablations", """Recency in the weights and the thread
        choice (off: relevance only).""")
    use_integration: bool = _knob(True, "ablations", """Merge history passages into the
        context (off: knowledge base only).""")
    use_rewrite: bool = _knob(True, "ablations", """Query reconstruction and vector expansion
        (off: the raw query).""")
    use_cues: bool = _knob(True, "ablations", """Read the question's words
        (``algorithm.discourse``): a follow-up that names nothing stays in the latest turn's
        thread unless another is ``follow_up_margin`` more relevant, and is expanded with
        ``follow_up_expansion`` (off: the vectors alone decide, every query expanded with
        ``expansion``).""")
    calibrate: bool = _knob(True, "ablations", """Centre every vector on the embedder's mean
        direction before comparing (``algorithm.calibration``), so that the thresholds and
        weights above mean the same for any embedder; off: vectors are compared as the
        embedder gives them.""")

    def __post_init__(self) -> None:
        for knob in self.knobs():
            knob.check(getattr(self, knob.name))
        if self.context_k > self.max_passages:
            raise ValueError(
                f"context_k ({self.context_k}) exceeds max_passages ({self.max_passages}): a "
                "turn stores the passages it showed; lower context_k or raise max_passages")

    @classmethod
    def knobs(cls) -> tuple[Knob, ...]:
        """Every setting with its group, description and valid values, in declared order."""
        return tuple(replace(f.metadata["knob"], name=f.name) for f in fields(cls))

    def with_(self, **changes: Any) -> Settings:
        """Return a copy with ``changes`` applied (validated like the constructor)."""
        known = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise TypeError(f"unknown setting(s) {unknown}; valid: {sorted(known)}")
        return replace(self, **changes)


def _docstring() -> str:
    lines = ["Knobs of the DH-RAG history database and turn pipeline, by group.", "",
             "Every similarity a threshold, margin or weight below is compared with is calibrated",
             "(``calibrate``): unrelated texts near 0, identical ones 1, whatever the embedder.",
             "", "Attributes:"]
    for group, title in GROUPS.items():
        lines.append(f"    {title.split(':')[0]}:")
        for k in Settings.knobs():
            if k.group == group:
                lines.append(f"        {k.name}: {k.doc} Valid: {k.valid()}.")
    return "\n".join(lines)


Settings.__doc__ = _docstring()

#: ``Settings`` under a name that does not clash with LlamaIndex's ``Settings`` in user code.
DHRAGSettings = Settings
