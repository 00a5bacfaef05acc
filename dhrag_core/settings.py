"""One frozen settings object for the whole pipeline, validated once at construction."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

__all__ = ["DHRAGSettings", "Settings"]


def _check_range(name: str, value: Any, low: float, high: float, *, integer: bool = False) -> None:
    kind = "an int" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be {kind} in [{low}, {high}], got {type(value).__name__}")
    if integer and not isinstance(value, int):
        raise TypeError(f"{name} must be an int in [{low}, {high}], got {value!r}")
    if not math.isfinite(value) or not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value!r}")


@dataclass(frozen=True)
class Settings:
    """Knobs of the DH-RAG history database and turn pipeline.

    Every similarity a threshold, margin or weight below is compared with is calibrated
    (``calibrate``): unrelated texts near 0, identical ones 1, whatever the embedder.

    Attributes:
        alpha: Balance of relevance against recency in the history weight (paper eq. 13):
            ``w = alpha * relevance + (1 - alpha) * recency``.
        half_life_turns: A stored turn's recency halves every this many turns of its session.
        half_life_seconds: ...and every this many seconds of wall clock; ``None`` ignores time.
        capacity: Most triples kept per session (paper eq. 14); the lowest weights are evicted.
        merge_threshold: Cosine above which a new turn whose query *and* response match a stored
            one is merged into it instead of stored twice.
        max_query_chars: Longest accepted query; longer input is rejected, not truncated.
        max_text_chars: Longest accepted response or passage text.
        max_passages: Most passages stored with one turn.
        max_metadata_chars: Longest accepted turn metadata, as JSON text.
        max_passage_metadata_chars: Longest metadata of a stored passage, as JSON text: a
            retriever's larger fields are dropped (largest first), as they would be copied
            into every turn that shows the passage.
        max_sessions_in_memory: Most sessions whose indexes a ``HistoryDatabase`` keeps in
            memory; the least recently used beyond it are dropped and reloaded from the store
            when used again (the store is the source of truth).
        cluster_threshold: A turn joins a topic cluster whose centroid it matches this well.
        cluster_min_quality: A cluster whose mean member-to-centroid cosine falls below this
            is split locally.
        cluster_merge_every: Every this many turns, clusters whose centroids converged merge.
        chain_threshold: A turn continues a chain whose latest turn or centroid it matches
            this well.
        summary_size: Most turns under one summary node.
        min_tree_turns: Below this many turns, matching scans flat (the tree cannot help).
        tree_clusters, tree_summaries, tree_turns: Beam widths of hierarchical matching.
        history_turns: Most history turns selected per query.
        kb_k: Passages fetched from the knowledge base per query.
        text_k: Passages fetched from a knowledge base searched by text (it has no
            ``search_vectors``), to be re-ranked by the expanded query vector; ``None``: ``kb_k``.
        context_k: Passages in the integrated context.
        expansion: Weight of the selected history in the expanded query vector.
        follow_up_expansion: ``expansion`` for a follow-up that names nothing and stays in the
            latest turn's thread (``use_cues``): only the history says what it is about.
        rewrite_vector: Embed the rewritten query (one more encoding) as the base of the
            expanded query vector, instead of the raw query (on both paths: a knowledge base
            searched by text always gets the rewritten text).
        topic_answer_weight, topic_passage_weight: A turn's topic vector is its query plus
            these weights times its answer and its passages' mean (clustering, chains and
            expansion all use it).
        history_bonus: Integration logit bonus of a history passage per unit history weight.
        answer_bonus: Further bonus per unit history weight and unit cosine between the
            passage and the answer given with it (the passages the answer drew on).
        lexical_weight: Weight of the question's words in the integration logits: each
            candidate gains this times the IDF-weighted share of the rewritten query's content
            words it contains (the question and the antecedents the rewriter filled in; IDF
            among the query's candidates: ``lexical.word_overlap``); 0: off.
        lexical_length_norm: How much that share is normalised by the candidate's length
            (BM25's ``b``: a long passage holds more words by chance); 0: not at all.
        temperature: Softmax temperature of the integration weights (paper eq. 6): it sets
            the weights reported with the context, not their order (a softmax keeps it).
        relevance: What a stored turn's relevance to the query compares: ``"query"`` (its
            query, as paper eq. 13), ``"topic"`` (query pulled toward answer and passages) or
            ``"max"`` of both.
        relevance_contrast: If set, relevances are sharpened around the best match at this
            temperature before weighting (``scoring.contrast``); ``None`` keeps eq. 13 as is.
        thread_recency: Bonus of a recently active thread (chain) when choosing the thread T*
            that a query continues (relevance of its best turn + this x its recency).
        thread_half_life: Turns of the session after which that bonus halves.
        thread_link: A new turn joins the thread chosen for its query when the query matched
            that thread this well (else it links by its topic vector, ``chain_threshold``);
            ``None`` links by topic vector only.
        thread_switch: Leaving the thread of the latest turn for another needs a relevance of
            at least this to the other thread (a new topic, matching nothing well, stays put);
            ``None``: the best thread score decides alone.
        follow_up_margin: A follow-up that names nothing ("who was it built for?": a referring
            word or almost no content words, no cue) leaves the thread of the latest turn only
            for a thread at least this much more relevant (``use_cues``).
        thread_variants: Threads whose reconstructed query searches the knowledge base: T* and
            the runner-ups by thread score. Each passage counts by its best match over these
            queries, so a wrong guess of T* costs less (1: T* only). A knowledge base searched
            by text is searched once, with the rewrite in T*; these queries re-rank its
            candidates.
        root_weight: The turn that opened the thread (its earliest in the window weighed) also
            expands the query, with this times its relevance to the query (unsharpened), when
            the ``history_turns`` best do not already hold it: a thread's first question
            usually names what its follow-ups leave out. 0: off.
        hedge_margin: A runner-up thread is searched only when its relevance to the query is
            within this of T*'s (a clear choice is not hedged); ``None``: always.
        search_raw_query: The raw query is searched too, as one more of those queries (a new
            topic, which no thread continues, keeps its own ranking; by text: it re-ranks).
        clarity_threshold: A query the knowledge base answers clearly on its own -- the best
            similarity of the raw query to a passage found (by the expanded queries) at least
            this -- is ranked by the raw query alone: history expands only queries that need
            it; ``None``: always expanded.
        use_clustering: Match through topic clusters (off: every summary node is scored).
        use_hierarchy: Beam search cluster -> summary -> turn (off: scan every turn).
        use_chains: Select inside the thread T* with thread-local recency (off: select over
            the whole session, recency in session turns).
        use_recency: Recency in the weights and the thread choice (off: relevance only).
        use_integration: Merge history passages into the context (off: knowledge base only).
        use_rewrite: Query reconstruction and vector expansion (off: the raw query).
        use_cues: Read the question's words (``algorithm.discourse``): a follow-up that names
            nothing stays in the latest turn's thread unless another is ``follow_up_margin``
            more relevant, and is expanded with ``follow_up_expansion`` (off: the vectors
            alone decide, every query expanded with ``expansion``).
        calibrate: Centre every vector on the embedder's mean direction before comparing
            (``algorithm.calibration``), so that the thresholds and weights above mean the
            same for any embedder; off: vectors are compared as the embedder gives them.
        answer_vector: How ``add`` gets the response's vector: ``"passages"`` derives it from
            the passages stored with it (their vectors, weighted by the squared share of the
            response's content words each one contains: no encoding; a response with no
            passages or no word in common with them is encoded), ``"encode"`` always encodes
            the response.
    """

    alpha: float = 0.5
    half_life_turns: float = 4.0
    half_life_seconds: float | None = 86_400.0
    capacity: int = 1_000
    merge_threshold: float = 0.97
    max_query_chars: int = 8_192
    max_text_chars: int = 1_000_000
    max_passages: int = 50
    max_metadata_chars: int = 1_000_000
    max_passage_metadata_chars: int = 10_000
    max_sessions_in_memory: int = 1_000
    cluster_threshold: float = 0.5
    cluster_min_quality: float = 0.6
    cluster_merge_every: int = 16
    chain_threshold: float = 0.45
    summary_size: int = 8
    min_tree_turns: int = 64
    tree_clusters: int = 3
    tree_summaries: int = 6
    tree_turns: int = 8
    history_turns: int = 2
    root_weight: float = 0.75
    kb_k: int = 20
    text_k: int | None = None
    context_k: int = 10
    expansion: float = 0.5
    follow_up_expansion: float = 0.75
    topic_answer_weight: float = 3.0
    topic_passage_weight: float = 3.0
    rewrite_vector: bool = False
    history_bonus: float = 0.0
    answer_bonus: float = 0.0
    lexical_weight: float = 0.16
    lexical_length_norm: float = 0.0
    temperature: float = 0.05
    relevance: str = "query"
    relevance_contrast: float | None = 0.1
    thread_recency: float = 0.2
    thread_half_life: float = 2.0
    thread_link: float | None = 0.3
    thread_switch: float | None = 0.2
    follow_up_margin: float = 0.3
    thread_variants: int = 3
    hedge_margin: float | None = 0.2
    search_raw_query: bool = False
    clarity_threshold: float | None = 0.66
    use_clustering: bool = True
    use_hierarchy: bool = True
    use_chains: bool = True
    use_recency: bool = True
    use_integration: bool = True
    use_rewrite: bool = True
    use_cues: bool = True
    calibrate: bool = True
    answer_vector: str = "passages"

    def __post_init__(self) -> None:
        _check_range("alpha", self.alpha, 0.0, 1.0)
        _check_range("half_life_turns", self.half_life_turns, 1e-9, math.inf)
        if self.half_life_seconds is not None:
            _check_range("half_life_seconds", self.half_life_seconds, 1e-9, math.inf)
        _check_range("capacity", self.capacity, 1, 10**9, integer=True)
        _check_range("merge_threshold", self.merge_threshold, 0.0, 1.0)
        _check_range("max_query_chars", self.max_query_chars, 1, 10**9, integer=True)
        _check_range("max_text_chars", self.max_text_chars, 1, 10**10, integer=True)
        _check_range("max_passages", self.max_passages, 0, 10**6, integer=True)
        _check_range("max_metadata_chars", self.max_metadata_chars, 2, 10**10, integer=True)
        _check_range("max_passage_metadata_chars", self.max_passage_metadata_chars, 2, 10**10,
                     integer=True)
        _check_range("max_sessions_in_memory", self.max_sessions_in_memory, 1, 10**9,
                     integer=True)
        for name in ("cluster_threshold", "cluster_min_quality", "chain_threshold"):
            _check_range(name, getattr(self, name), -1.0, 1.0)
        for name in ("cluster_merge_every", "summary_size", "tree_clusters", "tree_summaries",
                     "tree_turns", "history_turns", "kb_k", "context_k", "thread_variants"):
            _check_range(name, getattr(self, name), 1, 10**6, integer=True)
        if self.text_k is not None:
            _check_range("text_k", self.text_k, 1, 10**6, integer=True)
        _check_range("min_tree_turns", self.min_tree_turns, 0, 10**9, integer=True)
        if self.context_k > self.max_passages:
            raise ValueError(
                f"context_k ({self.context_k}) exceeds max_passages ({self.max_passages}): a "
                "turn stores the passages it showed; lower context_k or raise max_passages")
        _check_range("expansion", self.expansion, 0.0, 100.0)
        _check_range("follow_up_expansion", self.follow_up_expansion, 0.0, 100.0)
        _check_range("root_weight", self.root_weight, 0.0, 100.0)
        _check_range("topic_answer_weight", self.topic_answer_weight, 0.0, 100.0)
        _check_range("topic_passage_weight", self.topic_passage_weight, 0.0, 100.0)
        _check_range("history_bonus", self.history_bonus, -10.0, 10.0)
        _check_range("answer_bonus", self.answer_bonus, -10.0, 10.0)
        _check_range("lexical_weight", self.lexical_weight, 0.0, 10.0)
        _check_range("lexical_length_norm", self.lexical_length_norm, 0.0, 1.0)
        _check_range("thread_recency", self.thread_recency, 0.0, 10.0)
        _check_range("thread_half_life", self.thread_half_life, 1e-9, math.inf)
        _check_range("follow_up_margin", self.follow_up_margin, 0.0, 2.0)
        if self.hedge_margin is not None:
            _check_range("hedge_margin", self.hedge_margin, 0.0, 2.0)
        for name in ("thread_link", "thread_switch", "clarity_threshold"):
            if getattr(self, name) is not None:
                _check_range(name, getattr(self, name), -1.0, 1.0)
        _check_range("temperature", self.temperature, 1e-6, 100.0)
        if self.relevance_contrast is not None:
            _check_range("relevance_contrast", self.relevance_contrast, 1e-6, 100.0)
        if self.relevance not in ("query", "topic", "max"):
            raise ValueError(f"relevance must be 'query', 'topic' or 'max', got {self.relevance!r}")
        if self.answer_vector not in ("passages", "encode"):
            raise ValueError(
                f"answer_vector must be 'passages' or 'encode', got {self.answer_vector!r}"
            )
        for f in fields(self):
            if ((f.name.startswith("use_") or f.name in ("search_raw_query", "calibrate"))
                    and not isinstance(getattr(self, f.name), bool)):
                raise TypeError(f"{f.name} must be a bool, got {getattr(self, f.name)!r}")

    def with_(self, **changes: Any) -> Settings:
        """Return a copy with ``changes`` applied (validated like the constructor)."""
        known = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise TypeError(f"unknown setting(s) {unknown}; valid: {sorted(known)}")
        return replace(self, **changes)


#: ``Settings`` under a name that does not clash with LlamaIndex's ``Settings`` in user code.
DHRAGSettings = Settings
