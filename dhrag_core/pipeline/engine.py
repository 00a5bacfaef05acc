"""DHRAG: one conversational turn of DH-RAG (Algorithm 1 of the paper), read top to bottom.

``select`` runs before the LLM: embed the query, select history turns (hierarchical matching
and chain tracking), reconstruct the query, search the knowledge base, integrate both into one
weighted context. ``record`` runs after it: store (query, passages, response), which updates
weights, evicts, and organises the new turn into clusters, summaries and chains.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import sys
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from dhrag_core.algorithm.calibration import Calibration
from dhrag_core.algorithm.discourse import is_follow_up
from dhrag_core.algorithm.hierarchy import topic_vector
from dhrag_core.algorithm.integration import Candidate, integrate
from dhrag_core.algorithm.lexical import word_overlap
from dhrag_core.algorithm.rewriting import LightRewriter, QueryRewriter, Rewrite, expand_vector
from dhrag_core.algorithm.summaries import Summariser
from dhrag_core.closing import Closeable, ClosedError
from dhrag_core.embedding import Embedder, encode_checked
from dhrag_core.history import AddResult, HistoryDatabase
from dhrag_core.history.messages import record_messages
from dhrag_core.history.policy import ChainPolicy, ThreadPolicy
from dhrag_core.knowledge.base import KnowledgeBase
from dhrag_core.records import ContextItem, Passage, SelectedTurn, Selection, Turn, Vector
from dhrag_core.settings import Settings
from dhrag_core.store import HistoryStore
from dhrag_core.timing import StageTimer
from dhrag_core.transcript import Role
from dhrag_core.validation import (
    as_items,
    check_found,
    check_k,
    check_session_id,
    fit_answer,
    fit_query,
)

__all__ = ["DHRAG", "EngineCloser", "selection_bytes"]

_PENDING_PER_SESSION = 16
"""Pending selections the engine keeps per session slot of ``Settings.max_pending``, on
average: all sessions together keep at most ``max_pending * _PENDING_PER_SESSION`` (65,536 by
default), and any one session may use them all (a batch of many questions of one session).
``Settings.max_pending_bytes`` bounds the memory they hold as well (``selection_bytes``)."""

_OBJECT_BYTES = 200
"""What ``selection_bytes`` counts for one record object (a passage, a context item, a
selected turn) besides its texts and arrays: its fields and their boxes."""

log = logging.getLogger(__name__)


class DHRAG(Closeable):
    """The DH-RAG pipeline over a static knowledge base and a dynamic history database.

    Args:
        knowledge: The static knowledge base K (anything with ``search(query, k)``; one that
            also has ``search_vectors(vectors, k)`` is searched with the expanded query vector).
        embedder: Encodes queries and history; default: the knowledge base's own ``embedder``
            when it has one (one model in memory, and the expanded query vectors are in the
            space it searches), else offline MiniLM.
        store: History store or URL (``memory``, ``sqlite:///path.db``,
            ``postgresql://user:password@host/db``).
        settings: Every knob and ablation switch.
        rewriter: Query reconstruction; default: ``LightRewriter`` (no LLM).
        summariser: Summary-node texts; default: extractive.
        integration_matrix: ``W`` of eq. 6 (``dimension x dimension``); default identity.
        history: An existing ``HistoryDatabase`` (then ``embedder``/``store``/``settings``
            come from it).
        vector_cache_size, max_pending, max_pending_bytes: Override the ``Settings`` of
            those names (validated as they are).
        calibration: How vectors are centred before any comparison; default: measured from
            the embedder (``HistoryDatabase``).
        thread_policy, chain_policy: Replace the engine's thread choice or chain linking
            (``dhrag_core.history.policy``); given to the ``HistoryDatabase`` it builds.

    Example:
        >>> from dhrag_core import DHRAG, FaissKnowledgeBase, HashingEmbedder
        >>> emb = HashingEmbedder()
        >>> kb = FaissKnowledgeBase(["The Great Wall is 21,196 km long."], emb)
        >>> rag = DHRAG(kb, embedder=emb)
        >>> sel = rag.select("alice", "How long is the Great Wall?")
        >>> _ = rag.record("alice", sel.query, "About 21,196 km.")  # stores sel's passages
        >>> rag.pending("alice") is None
        True
    """

    def __init__(
        self,
        knowledge: KnowledgeBase,
        *,
        embedder: Embedder | None = None,
        store: HistoryStore | str | None = None,
        settings: Settings | None = None,
        rewriter: QueryRewriter | None = None,
        summariser: Summariser | None = None,
        integration_matrix: np.ndarray | None = None,
        history: HistoryDatabase | None = None,
        clock: Callable[[], float] = time.time,
        vector_cache_size: int | None = None,
        max_pending: int | None = None,
        max_pending_bytes: int | None = None,
        calibration: Calibration | None = None,
        thread_policy: ThreadPolicy | None = None,
        chain_policy: ChainPolicy | None = None,
    ) -> None:
        if not isinstance(knowledge, KnowledgeBase):
            raise TypeError("knowledge must have a search(query, k) method (KnowledgeBase)")
        with contextlib.suppress(TypeError):  # a knowledge base without a length: unknown
            if len(knowledge) == 0:  # type: ignore[arg-type]
                warnings.warn(f"the knowledge base ({type(knowledge).__name__}) holds no "
                              "passages: every search finds nothing and every context is "
                              "history alone; give it passages (load_kb says why a folder "
                              "gave none)", UserWarning, stacklevel=2)
        for name, given in (("calibration", calibration), ("thread_policy", thread_policy),
                            ("chain_policy", chain_policy)):
            if history is not None and given is not None:
                raise ValueError(f"pass {name}= to the HistoryDatabase given as history=, "
                                 "not here")
        if history is None and embedder is None:
            embedder = _embedder_of(knowledge)
        self.history = history or HistoryDatabase(
            embedder=embedder, store=store, settings=settings, clock=clock,
            summariser=summariser, calibration=calibration, thread_policy=thread_policy,
            chain_policy=chain_policy,
        )
        self.knowledge = knowledge
        self.settings = self.history.settings
        _check_same_space(knowledge, self.history.embedder)
        self.rewriter: QueryRewriter = rewriter or LightRewriter()
        dim = self.history.embedder.dimension
        if integration_matrix is not None and np.shape(integration_matrix) != (dim, dim):
            raise ValueError(f"integration_matrix must be {dim}x{dim}")
        self.integration_matrix = integration_matrix
        limits = {k: v for k, v in (("vector_cache_size", vector_cache_size),
                                    ("max_pending", max_pending),
                                    ("max_pending_bytes", max_pending_bytes)) if v is not None}
        own = self.settings.with_(**limits) if limits else self.settings
        self.vector_cache_size = own.vector_cache_size
        self._vector_cache: OrderedDict[str, Vector] = OrderedDict()
        self._vector_lock = threading.Lock()
        self.max_pending = own.max_pending
        self.max_pending_bytes = own.max_pending_bytes
        self._pending: OrderedDict[str, OrderedDict[str, Selection]] = OrderedDict()
        self._pending_count = 0  # selections in self._pending, all sessions together
        self._pending_bytes = 0  # their selection_bytes, all together
        self._dropped: OrderedDict[int, None] = OrderedDict()  # hashes of dropped (sid, query)
        self._pending_lock = threading.Lock()

    # -- pending selections -----------------------------------------------------------------

    def pending(self, session_id: str, query: str | None = None) -> Selection | None:
        """The session's selection made for ``query`` and not yet recorded (without
        ``query``: its latest one)."""
        if query is not None and not isinstance(query, str):
            raise TypeError(f"query must be a str, got {type(query).__name__}")
        with self._pending_lock:
            per = self._pending.get(session_id)
            if not per:
                return None
            return per.get(query) if query is not None else next(reversed(per.values()))

    def _keep_pending(self, selection: Selection) -> Selection:
        """Keep a selection until its turn is recorded: per session, one per question, so that
        several questions of one session selected at once (a batch, of any size) each record
        their own passages. Bounded engine-wide: at most ``max_pending`` sessions,
        ``max_pending * _PENDING_PER_SESSION`` selections and ``max_pending_bytes`` of them
        (``selection_bytes``; the newest is kept whatever its size), the least recently
        selected dropped first; recording a turn whose selection was dropped logs a warning
        naming the settings (never silently stored without its passages)."""
        budget = self.max_pending * _PENDING_PER_SESSION
        size = selection_bytes(selection)
        with self._pending_lock:
            per = self._pending.setdefault(selection.session_id, OrderedDict())
            replaced = per.get(selection.query)
            if replaced is None:
                self._pending_count += 1
            else:
                self._pending_bytes -= selection_bytes(replaced)
            self._pending_bytes += size
            per[selection.query] = selection
            per.move_to_end(selection.query)
            self._pending.move_to_end(selection.session_id)
            self._dropped.pop(hash((selection.session_id, selection.query)), None)
            while len(self._pending) > self.max_pending:
                sid, gone = self._pending.popitem(last=False)
                self._forget_pending(sid, gone, budget)
            while self._pending_count > budget or (
                    self._pending_bytes > self.max_pending_bytes and self._pending_count > 1):
                sid, oldest = next(iter(self._pending.items()))
                query, old = oldest.popitem(last=False)
                if not oldest:
                    del self._pending[sid]
                self._forget_pending(sid, {query: old}, budget)
        return selection

    def _forget_pending(self, session_id: str, queries: Mapping[str, Selection],
                        budget: int) -> None:
        """Count dropped pending selections out, remembering which (as hashes, the latest
        ``2 * budget``) so that recording their turns warns. Called with the lock held."""
        self._pending_count -= len(queries)
        self._pending_bytes -= sum(map(selection_bytes, queries.values()))
        for query in queries:
            self._dropped[hash((session_id, query))] = None
        while len(self._dropped) > 2 * budget:
            self._dropped.popitem(last=False)

    def _take_pending(self, session_id: str, query: str, *, warn: bool = False) -> Selection | None:
        """Remove and return the session's pending selection made for ``query`` (the others
        stay: their own turns may still be recorded). ``warn``: log a warning if it was
        dropped by the pending limit (its turn is then stored without passages)."""
        with self._pending_lock:
            per = self._pending.get(session_id)
            sel = per.pop(query, None) if per is not None else None
            if per is not None and not per:
                del self._pending[session_id]
            if sel is not None:
                self._pending_count -= 1
                self._pending_bytes -= selection_bytes(sel)
                return sel
            dropped = hash((session_id, query)) in self._dropped
            self._dropped.pop(hash((session_id, query)), None)
        if dropped and warn:
            log.warning(
                "the selection made for this question of session %r was dropped before its "
                "turn was recorded: more than max_pending=%d sessions, %d selections or "
                "max_pending_bytes=%d bytes of them were pending at once; its turn is stored "
                "without passages (raise Settings.max_pending or max_pending_bytes, or record "
                "turns before selecting more)",
                session_id, self.max_pending, self.max_pending * _PENDING_PER_SESSION,
                self.max_pending_bytes)
        return None

    def _is_pending(self, session_id: str, query: str) -> bool:
        with self._pending_lock:
            return query in self._pending.get(session_id, ())

    def _restore_pending(self, selection: Selection | None) -> None:
        if selection is not None:
            with self._pending_lock:
                per = self._pending.setdefault(selection.session_id, OrderedDict())
                if selection.query not in per:
                    per[selection.query] = selection
                    self._pending_count += 1
                    self._pending_bytes += selection_bytes(selection)

    # -- before the LLM ---------------------------------------------------------------------

    def select(self, session_id: str, query: str, k: int | None = None) -> Selection:
        """History, rewritten query and integrated context for ``query`` (nothing stored).

        The selection is kept as the session's pending one until ``record`` stores its turn.
        """
        return self._keep_pending(self.preview(session_id, query, k))

    def preview(self, session_id: str, query: str, k: int | None = None, *,
                thread_variants: int | None = None) -> Selection:
        """``select`` without keeping the selection pending: what the query would get.

        ``thread_variants`` overrides ``Settings.thread_variants`` for this query (1: T*'s
        query alone), e.g. to compare hedging with T* alone on the same turn.
        """
        self._check_open()
        check_session_id(session_id)
        cfg = self.settings
        query = fit_query(query, cfg.max_query_chars)
        k = cfg.context_k if k is None else check_k(k)
        if thread_variants is not None:
            check_k(thread_variants, "thread_variants")
        timer = StageTimer()
        qv, threads, expansion = self._match(session_id, query, timer, thread_variants)
        history = threads[0]
        with timer("rewrite_s"):
            rewrite = self._rewrite(query, _for_rewrite(history))
        with timer("expand_s"):
            search = self._search_vectors(query, qv, rewrite, threads, expansion)
        with timer("kb_s"):
            kb = self._search_kb(rewrite.text, search)
        return self._integrate(session_id, query, rewrite, qv, search, history, kb, k, timer)

    def rank(self, words: str, search_vectors: Vector, passages: Sequence[Passage],
             k: int) -> list[ContextItem]:
        """Knowledge-base ``passages`` ranked as integration ranks them, without history:
        each by its best match over the rows of ``search_vectors`` (the embedder's space)
        plus the lexical term of ``words``. The passages' own vectors are used, or encoded."""
        k = check_k(k)
        rows = np.atleast_2d(np.asarray(search_vectors, dtype=np.float32))
        found, vectors = self._with_vectors(passages)
        return self._context(words, rows, [], found, vectors, k)

    async def aselect(self, session_id: str, query: str, k: int | None = None) -> Selection:
        """``select`` without blocking the event loop.

        CPU work (embedding, history matching, integration) runs in worker threads; the async
        members of the parts plugged in are awaited on the caller's loop: the rewriter's
        ``arewrite(query, history)`` and the knowledge base's ``asearch_vectors(vectors, k)``
        (searched by vector) or ``asearch(query, k)`` (by text). Parts without them run in a
        worker thread.
        """
        self._check_open()
        check_session_id(session_id)
        query = fit_query(query, self.settings.max_query_chars)
        k = self.settings.context_k if k is None else check_k(k)
        timer = StageTimer()
        qv, threads, expansion = await asyncio.to_thread(self._match, session_id, query, timer)
        history = threads[0]
        with timer("rewrite_s"):
            rewrite = await self._arewrite(query, _for_rewrite(history))
        with timer("expand_s"):
            search = await asyncio.to_thread(
                self._search_vectors, query, qv, rewrite, threads, expansion
            )
        with timer("kb_s"):
            kb = await self._asearch_kb(rewrite.text, search)
        selection = await asyncio.to_thread(
            self._integrate, session_id, query, rewrite, qv, search, history, kb, k, timer
        )
        return self._keep_pending(selection)

    def _match(
        self, session_id: str, query: str, timer: StageTimer, variants: int | None = None,
    ) -> tuple[Vector, list[list[SelectedTurn]], float]:
        """The query vector, the selections inside the candidate threads (T*'s first) and the
        weight of the history in the expanded query: ``follow_up_expansion`` for a follow-up
        that names nothing and stays in the latest turn's thread (only the history says what
        it is about), else ``expansion``. ``variants``: ``thread_variants`` for this query."""
        cfg = self.settings
        with timer("encode_s"):
            qv = self.history.encode_query(query)  # validates the query first
        follow_up = is_follow_up(query)
        with timer("history_s"):
            threads = self.history.select_threads(
                session_id, qv, (variants or cfg.thread_variants) if cfg.use_rewrite else 1,
                follow_up=follow_up, query_text=query,
            )
            stays = (follow_up and cfg.use_cues and bool(threads[0])
                     and threads[0][0].chain_id == self.history.latest_thread(session_id))
        return qv, threads, cfg.follow_up_expansion if stays else cfg.expansion

    async def _arewrite(self, query: str, history: Sequence[SelectedTurn]) -> Rewrite:
        if not self.settings.use_rewrite or not history:
            return Rewrite(query)
        arewrite = getattr(self.rewriter, "arewrite", None)
        if inspect.iscoroutinefunction(arewrite):
            found: Rewrite = await arewrite(query, history)
            return found
        return await asyncio.to_thread(self.rewriter.rewrite, query, history)

    def _rewrite(self, query: str, history: Sequence[SelectedTurn]) -> Rewrite:
        if not self.settings.use_rewrite or not history:
            return Rewrite(query)
        return self.rewriter.rewrite(query, history)

    def _search_vectors(
        self, query: str, qv: Vector, rewrite: Rewrite, threads: Sequence[Sequence[SelectedTurn]],
        expansion: float | None = None,
    ) -> Vector:
        """The query vectors to search with, one per row, the expanded query first.

        Sums are taken in the history's calibrated space and mapped back to the embedder's
        (``qv`` and the rows are the embedder's vectors), so that any knowledge base can be
        searched with them. The expanded query moves the query toward the turns selected in T*
        by their weights;
        its base is the rewritten query's embedding when ``rewrite_vector`` is set, else the raw
        query's. The query expanded inside each runner-up thread follows (``thread_variants``),
        and the raw query (``search_raw_query``): when T* is a wrong guess, the right thread or
        the query alone still ranks its passages. Searched by vector, each row is a search; a
        knowledge base searched by text gets the rewritten text, and its candidates are
        re-ranked by these rows (each by its best match). ``expansion``: the history's weight
        in T*'s row (default ``Settings.expansion``).
        """
        cfg = self.settings
        strength = cfg.expansion if expansion is None else expansion
        if not cfg.use_rewrite:
            return qv[None, :]
        calibration = self.history.calibration
        centred = base = calibration.apply(qv)
        if cfg.rewrite_vector and rewrite.text != query:
            base = calibration.apply(self.history.encode_query(rewrite.text))

        def topic(t: Turn) -> Vector:
            return topic_vector(t, cfg.topic_answer_weight, cfg.topic_passage_weight)

        share = cfg.expansion_weights == "share"
        rows = [expand_vector(base, threads[0], strength, topic, share)]
        if threads[0]:
            rows += [expand_vector(centred, h, cfg.expansion, topic, share)
                     for h in threads[1:] if h]
            if cfg.search_raw_query:
                rows.append(centred)
        return calibration.invert(np.stack(rows)).astype(np.float32, copy=False)

    def _search_kb(self, text: str, vectors: Vector) -> list[Passage]:
        cfg = self.settings
        search_vectors = getattr(self.knowledge, "search_vectors", None)
        if callable(search_vectors):
            return _union(_check_rows(search_vectors(vectors, cfg.kb_k), len(vectors)))
        return check_found(self.knowledge.search(text, cfg.text_k or cfg.kb_k), "search(query, k)")

    async def _asearch_kb(self, text: str, vectors: Vector) -> list[Passage]:
        cfg, kb = self.settings, self.knowledge
        if callable(getattr(kb, "search_vectors", None)):
            asearch_vectors = getattr(kb, "asearch_vectors", None)
            if inspect.iscoroutinefunction(asearch_vectors):
                found = await asearch_vectors(vectors, cfg.kb_k)
                return _union(_check_rows(found, len(vectors), "asearch_vectors(vectors, k)"))
            return await asyncio.to_thread(self._search_kb, text, vectors)
        asearch = getattr(kb, "asearch", None)
        if inspect.iscoroutinefunction(asearch):
            return check_found(await asearch(text, cfg.text_k or cfg.kb_k), "asearch(query, k)")
        return await asyncio.to_thread(self._search_kb, text, vectors)

    def _integrate(
        self, session_id: str, query: str, rewrite: Rewrite, qv: Vector, search: Vector,
        history: Sequence[SelectedTurn], kb: Sequence[Passage], k: int, timer: StageTimer,
    ) -> Selection:
        with timer("encode_s"):
            kb, vectors = self._with_vectors(kb)
        with timer("integrate_s"):
            threshold = self.settings.clarity_threshold
            clarity = self._clarity(qv, vectors)
            gated = clarity is not None and threshold is not None and clarity >= threshold
            if gated:
                search = qv[None, :]
            context = self._context(rewrite.text, search, history, kb, vectors, k)
        return Selection(
            session_id=session_id, query=query, rewritten_query=rewrite.text,
            history=tuple(_shown(history)), context=tuple(context), query_vector=qv,
            search_vector=search[0], search_vectors=tuple(search), timings=dict(timer),
            clarity=clarity, gated=gated,
        )

    def _clarity(self, qv: Vector, vectors: Sequence[Vector]) -> float | None:
        """The raw query's best similarity (``Calibration.similarity``) to the knowledge-base
        candidates found for the expanded queries (or the rewritten text), when the clarity
        gate is on: no further search; a clear query's own best passages are near its
        expansion's."""
        cfg = self.settings
        if cfg.clarity_threshold is None or not cfg.use_rewrite or not vectors:
            return None
        best = float((np.stack(vectors).astype(np.float32, copy=False) @ qv).max())
        return float(self.history.calibration.similarity(best))

    def _context(
        self, words: str, search: Vector, history: Sequence[SelectedTurn],
        kb: Sequence[Passage], vectors: Sequence[Vector], k: int,
    ) -> list[ContextItem]:
        """The integrated context; ``words`` (the rewritten query: the question and the
        antecedents it names) weigh through ``lexical_weight``. A history passage scores with
        the embedder's vector (its stored, centred one mapped back), as the others do."""
        cfg = self.settings
        candidates = [Candidate(p, v, "kb") for p, v in zip(kb, vectors, strict=True)]
        # a passage also in the knowledge base scores with its one float32 vector, so that
        # the int8 rounding of the stored copy never decides between the two
        exact = {p.key: v for p, v in zip(kb, vectors, strict=True)}
        calibration = self.history.calibration
        for s in history if cfg.use_integration else ():
            stored = s.turn.passage_vectors
            for i, p in enumerate(s.turn.passages):
                vector = exact.get(p.key)
                if vector is None:
                    vector = calibration.invert(stored[i])
                candidates.append(Candidate(replace(p, vector=vector), vector, "history", s))
        lexical = None
        if cfg.lexical_weight and candidates:
            texts = [c.passage.text for c in candidates]
            lexical = cfg.lexical_weight * word_overlap(words, texts, cfg.lexical_length_norm)
        return integrate(
            search, candidates, k, matrix=self.integration_matrix,
            temperature=cfg.temperature, history_bonus=cfg.history_bonus,
            answer_bonus=cfg.answer_bonus,
            weighted=cfg.use_integration, lexical=lexical,
            unrelated=calibration.unrelated,
        )

    def _with_vectors(self, passages: Sequence[Passage]) -> tuple[list[Passage], list[Vector]]:
        """The passages, each carrying its vector (``_passage_vectors``), and those vectors."""
        vectors = self._passage_vectors(passages)
        return [p if p.vector is v else replace(p, vector=v)
                for p, v in zip(passages, vectors, strict=True)], vectors

    def _passage_vectors(self, passages: Sequence[Passage]) -> list[Vector]:
        """Vectors of passages from the knowledge base: their own, a cached one, or encoded.

        A vector that is not finite (a damaged index row) counts as none: the passage is
        encoded from its text. Retrievers that return text only would otherwise cost an
        encoding of every passage
        on every turn (~30 passages/s for MiniLM on 2 cores); a conversation keeps meeting
        the same passages, so an LRU cache by passage id (or text) removes most of it. The
        cache is shared by threads: every look-up and change holds ``_vector_lock`` (encoding
        does not).
        """
        _check_lengths(passages, self.history.embedder.dimension, self.knowledge)
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
            enc = encode_checked(self.history.embedder, [passages[i].text for i in missing])
            with self._vector_lock:
                for i, v in zip(missing, enc, strict=True):
                    out[i] = v
                    cache[passages[i].key] = v
                while len(cache) > self.vector_cache_size:
                    cache.popitem(last=False)
        return [v for v in out if v is not None]

    # -- after the LLM ----------------------------------------------------------------------

    def record(
        self,
        session_id: str,
        query: str,
        response: str,
        *,
        selection: Selection | None = None,
        passages: Sequence[Passage | str] | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> AddResult:
        """Store the turn's triple: the passages shown and the response. Updates weights,
        evicts, organises.

        The passages are ``passages`` when given, else the context of ``selection``, else
        that of the session's pending selection (the latest ``select``) if it was made for
        ``query`` (it is then no longer pending), else none; a context longer than
        ``Settings.max_passages`` (``select`` with a larger ``k``) keeps its best ones.
        """
        self._check_open()
        check_session_id(session_id)
        asked = query
        query = fit_query(query, self.settings.max_query_chars, warn=False)
        if query != asked and selection is None and not self._is_pending(session_id, query):
            fit_query(asked, self.settings.max_query_chars)  # warned at select otherwise
        if selection is not None and selection.session_id != session_id:
            raise ValueError(
                f"selection belongs to session {selection.session_id!r}, not {session_id!r}"
            )
        if selection is not None and selection.query != query:
            raise ValueError(
                f"selection was made for the query {selection.query!r}, not {query!r}: "
                "pass the selection of this query, or its passages as passages="
            )
        taken = self._take_pending(session_id, query,
                                   warn=selection is None and passages is None)
        selection = selection if selection is not None else taken
        # a selection made with a k above max_passages stores its best max_passages
        shown: Sequence[Passage | str] = (
            passages if passages is not None
            else (selection.passages[: self.settings.max_passages] if selection is not None
                  else [])
        )
        qv = selection.query_vector if selection is not None else None
        try:
            return self.history.add(session_id, query, shown, response, metadata=metadata,
                                    query_vector=qv)
        except BaseException:
            self._restore_pending(taken)
            raise

    async def arecord(
        self,
        session_id: str,
        query: str,
        response: str,
        *,
        selection: Selection | None = None,
        passages: Sequence[Passage | str] | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> AddResult:
        """``record`` off the event loop."""
        return await asyncio.to_thread(
            self.record, session_id, query, response, selection=selection, passages=passages,
            metadata=metadata,
        )

    def record_turns(
        self, session_id: str, turns: Sequence[tuple[str, str]], *, replace_history: bool = False
    ) -> None:
        """Store (question, answer) turns, each with the passages of its pending selection
        when one was made for it (a message history written after the retrieval), else none
        (a transcript carried over), after checking every one: a bad text anywhere stores
        nothing and, with ``replace_history``, keeps the session's history as it was (else
        it is reset first)."""
        self._check_open()
        check_session_id(session_id)
        cfg = self.settings
        for i, (query, answer) in enumerate(turns):
            fit_query(query, cfg.max_query_chars, f"question of turn {i}", warn=False)
            fit_answer(answer, cfg.max_text_chars, f"answer of turn {i}")
        if replace_history:
            self.reset(session_id)
        for query, answer in turns:
            self.record(session_id, query, answer)

    def record_messages(self, session_id: str, messages: Sequence[tuple[Role, str]]) -> int:
        """Store a conversation that arrives one message at a time (a chat message history, a
        memory fed messages, a stream): ``(role, text)`` pairs as ``transcript.exchanges``
        gives them, each user message with the assistant message after it a turn, recorded as
        ``record`` does (with the passages of its pending selection). A question left
        unanswered is held in the history store for an answer that comes later, through any
        instance or process (``history.messages.record_messages``). Returns the turns stored.
        """
        self._check_open()
        return record_messages(self.history, session_id, messages,
                               lambda query, answer: self.record(session_id, query, answer))

    def close(self) -> None:
        """Close the history's store (``HistoryDatabase.close``); also on leaving a ``with``
        block. The knowledge base is the caller's and stays open. Using the engine afterwards
        raises ``ClosedError``; closing again does nothing."""
        self.history.close()

    def _check_open(self) -> None:
        if getattr(self.history, "closed", False):
            raise ClosedError(
                "this DHRAG engine was closed (close(), or the end of its with block, or its "
                "HistoryDatabase's close()): its history store is shut; make a new DHRAG to go "
                "on")

    def reset(self, session_id: str) -> None:
        """Forget one session's history (and its pending selection)."""
        self._check_open()
        self.history.delete_session(session_id)
        with self._pending_lock:
            gone: Mapping[str, Selection] = self._pending.pop(session_id, {})
            self._pending_count -= len(gone)
            self._pending_bytes -= sum(map(selection_bytes, gone.values()))


def selection_bytes(selection: Selection) -> int:
    """Estimated bytes a kept selection holds: its texts, its arrays (the query's, the search
    rows', each passage's vector) and ``_OBJECT_BYTES`` per record; what bounds the pending
    selections (``Settings.max_pending_bytes``). Arrays shared with a knowledge base count
    as the selection's own: an estimate from above."""
    size = _OBJECT_BYTES + sys.getsizeof(selection.query) + sys.getsizeof(
        selection.rewritten_query)
    size += sum(v.nbytes for v in (selection.query_vector, selection.search_vector,
                                   *selection.search_vectors))
    for item in selection.context:
        p = item.passage
        size += 2 * _OBJECT_BYTES + sys.getsizeof(p.text) + len(p.metadata) * _OBJECT_BYTES
        size += p.vector.nbytes if p.vector is not None else 0
    for turn in selection.history:
        size += _OBJECT_BYTES + sys.getsizeof(turn.turn.query) + sys.getsizeof(
            turn.turn.response)
    return size


def _shown(history: Sequence[SelectedTurn]) -> list[SelectedTurn]:
    """The selected turns handed to the LLM (``SelectedTurn.on_topic``); the others only move
    the retrieval."""
    return [t for t in history if t.on_topic]


def _for_rewrite(history: Sequence[SelectedTurn]) -> Sequence[SelectedTurn]:
    """What the rewriter completes the question from: the turns handed on (the rewritten
    question is shown too, so it names nothing of a turn that is not)."""
    return _shown(history)


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


def _embedder_of(knowledge: KnowledgeBase) -> Embedder | None:
    """The knowledge base's own embedder, if it exposes one (``FaissKnowledgeBase`` and the
    adapters' knowledge bases do)."""
    found = getattr(knowledge, "embedder", None)
    return found if isinstance(found, Embedder) else None


def _check_same_space(knowledge: KnowledgeBase, embedder: Embedder) -> None:
    """A knowledge base searched by vector must embed in the history embedder's space; a
    difference in dimension is caught here rather than inside the first search."""
    own = _embedder_of(knowledge)
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


class EngineCloser(Closeable):
    """``close()`` and ``with`` blocks for a wrapper of a ``DHRAG`` engine (the adapters'
    retrievers and chat engine): closing the wrapper closes the engine's history store."""

    def _engine_to_close(self) -> DHRAG:
        raise NotImplementedError

    def close(self) -> None:
        """Close the engine's history store (``DHRAG.close``); also on leaving a ``with``."""
        self._engine_to_close().close()
