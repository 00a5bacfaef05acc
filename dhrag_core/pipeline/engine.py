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
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from dhrag_core.algorithm.calibration import Calibration
from dhrag_core.algorithm.integration import Candidate, integrate
from dhrag_core.algorithm.lexical import word_overlap
from dhrag_core.algorithm.rewriting import LightRewriter, QueryRewriter, Rewrite
from dhrag_core.algorithm.summaries import Summariser
from dhrag_core.closing import Closeable, ClosedError
from dhrag_core.embedding import Embedder
from dhrag_core.history import AddResult, HistoryDatabase
from dhrag_core.history.messages import record_messages
from dhrag_core.history.policy import ChainPolicy, ThreadPolicy
from dhrag_core.history.selection import ThreadChoice
from dhrag_core.knowledge.base import KnowledgeBase
from dhrag_core.pipeline.expansion import search_vectors
from dhrag_core.pipeline.knowledge_search import KnowledgeSearch, check_same_space, embedder_of
from dhrag_core.pipeline.pending import PendingSelections, selection_bytes
from dhrag_core.records import ContextItem, Passage, SelectedTurn, Selection, Vector
from dhrag_core.settings import Settings
from dhrag_core.store import HistoryStore
from dhrag_core.timing import StageTimer
from dhrag_core.transcript import Role
from dhrag_core.validation import (
    check_k,
    check_session_id,
    fit_answer,
    fit_query,
)

__all__ = ["DHRAG", "EngineCloser", "selection_bytes"]

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
        vector_cache_size, max_pending, max_pending_bytes: Deprecated (they go in the next
            release): ``settings=Settings(limits=Limits(max_pending=...))``.
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
            embedder = embedder_of(knowledge)
        self.history = history or HistoryDatabase(
            embedder=embedder, store=store, settings=settings, clock=clock,
            summariser=summariser, calibration=calibration, thread_policy=thread_policy,
            chain_policy=chain_policy,
        )
        self.knowledge = knowledge
        self.settings = self.history.settings
        check_same_space(knowledge, self.history.embedder)
        self.rewriter: QueryRewriter = rewriter or LightRewriter()
        dim = self.history.embedder.dimension
        if integration_matrix is not None and np.shape(integration_matrix) != (dim, dim):
            raise ValueError(f"integration_matrix must be {dim}x{dim}")
        self.integration_matrix = integration_matrix
        limits = {k: v for k, v in (("vector_cache_size", vector_cache_size),
                                    ("max_pending", max_pending),
                                    ("max_pending_bytes", max_pending_bytes)) if v is not None}
        if limits:
            shown = ", ".join(f"{k}=..." for k in limits)
            warnings.warn(f"DHRAG({shown}) is deprecated and goes in the next release: pass "
                          f"settings=Settings(limits=Limits({shown}))", DeprecationWarning,
                          stacklevel=2)
        own = replace(self.settings.limits, **limits)
        self.vector_cache_size = own.vector_cache_size
        self._kb = KnowledgeSearch(knowledge, self.history.embedder, self.settings,
                                   own.vector_cache_size)
        self.max_pending = own.max_pending
        self.max_pending_bytes = own.max_pending_bytes
        self._pending = PendingSelections(own.max_pending, own.max_pending_bytes)

    # -- pending selections -----------------------------------------------------------------

    def pending(self, session_id: str, query: str | None = None) -> Selection | None:
        """The session's selection made for ``query`` and not yet recorded (without
        ``query``: its latest one)."""
        if query is not None and not isinstance(query, str):
            raise TypeError(f"query must be a str, got {type(query).__name__}")
        return self._pending.get(session_id, query)

    # -- before the LLM ---------------------------------------------------------------------

    def select(self, session_id: str, query: str, k: int | None = None) -> Selection:
        """History, rewritten query and integrated context for ``query`` (nothing stored).

        The selection is kept as the session's pending one until ``record`` stores its turn.
        """
        selection, choice = self._select(session_id, query, k)
        self._pending.keep(selection, choice)
        return selection

    def preview(self, session_id: str, query: str, k: int | None = None, *,
                thread_variants: int | None = None) -> Selection:
        """``select`` without keeping the selection pending: what the query would get.

        ``thread_variants`` overrides ``Settings.threads.thread_variants`` for this query (1: T*'s
        query alone), e.g. to compare hedging with T* alone on the same turn.
        """
        return self._select(session_id, query, k, thread_variants)[0]

    def _select(self, session_id: str, query: str, k: int | None,
                thread_variants: int | None = None) -> tuple[Selection, ThreadChoice]:
        self._check_open()
        check_session_id(session_id)
        cfg = self.settings
        query = fit_query(query, cfg.limits.max_query_chars)
        k = cfg.retrieval.context_k if k is None else check_k(k)
        if thread_variants is not None:
            check_k(thread_variants, "thread_variants")
        timer = StageTimer()
        qv, choice = self._match(session_id, query, timer, thread_variants)
        history = choice.threads[0]
        with timer("rewrite_s"):
            rewrite = self._rewrite(query, _for_rewrite(history))
        with timer("expand_s"):
            search = self._search_vectors(query, qv, rewrite, choice)
        with timer("kb_s"):
            kb = self._kb.search(rewrite.text, search)
        selection = self._integrate(session_id, query, rewrite, qv, search, history, kb, k,
                                    timer)
        return selection, choice

    def rank(self, words: str, search_vectors: Vector, passages: Sequence[Passage],
             k: int) -> list[ContextItem]:
        """Knowledge-base ``passages`` ranked as integration ranks them, without history:
        each by its best match over the rows of ``search_vectors`` (the embedder's space)
        plus the lexical term of ``words``. The passages' own vectors are used, or encoded."""
        k = check_k(k)
        rows = np.atleast_2d(np.asarray(search_vectors, dtype=np.float32))
        found, vectors = self._kb.with_vectors(passages)
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
        query = fit_query(query, self.settings.limits.max_query_chars)
        k = self.settings.retrieval.context_k if k is None else check_k(k)
        timer = StageTimer()
        qv, choice = await asyncio.to_thread(self._match, session_id, query, timer)
        history = choice.threads[0]
        with timer("rewrite_s"):
            rewrite = await self._arewrite(query, _for_rewrite(history))
        with timer("expand_s"):
            search = await asyncio.to_thread(self._search_vectors, query, qv, rewrite, choice)
        with timer("kb_s"):
            kb = await self._kb.asearch(rewrite.text, search)
        selection = await asyncio.to_thread(
            self._integrate, session_id, query, rewrite, qv, search, history, kb, k, timer
        )
        self._pending.keep(selection, choice)
        return selection

    def _match(
        self, session_id: str, query: str, timer: StageTimer, variants: int | None = None,
    ) -> tuple[Vector, ThreadChoice]:
        """The query vector (the embedder's) and the query's ``ThreadChoice``: the selections
        inside its candidate threads (T*'s first), made once and read by the expansion and by
        the recording of its turn. ``variants``: ``thread_variants`` for this query."""
        cfg = self.settings
        with timer("encode_s"):
            qv = self.history.encode_query(query)  # validates the query first
        with timer("history_s"):
            n = (variants or cfg.threads.thread_variants) if cfg.ablations.use_rewrite else 1
            choice = self.history.choose(session_id, query, n, query_vector=qv)
        return qv, choice

    async def _arewrite(self, query: str, history: Sequence[SelectedTurn]) -> Rewrite:
        if not self.settings.ablations.use_rewrite or not history:
            return Rewrite(query)
        arewrite = getattr(self.rewriter, "arewrite", None)
        if inspect.iscoroutinefunction(arewrite):
            found: Rewrite = await arewrite(query, history)
            return found
        return await asyncio.to_thread(self.rewriter.rewrite, query, history)

    def _rewrite(self, query: str, history: Sequence[SelectedTurn]) -> Rewrite:
        if not self.settings.ablations.use_rewrite or not history:
            return Rewrite(query)
        return self.rewriter.rewrite(query, history)

    def _search_vectors(self, query: str, qv: Vector, rewrite: Rewrite,
                        choice: ThreadChoice) -> Vector:
        """The rows to search with (``expansion.search_vectors``): based on the rewritten
        question's embedding with ``rewrite_vector``, else on the question's."""
        cfg = self.settings
        rewritten = None
        if cfg.ablations.use_rewrite and cfg.experiments.rewrite_vector and rewrite.text != query:
            rewritten = self.history.encode_query(rewrite.text)
        return search_vectors(qv, choice, cfg, self.history.calibration, rewritten=rewritten)

    def _integrate(
        self, session_id: str, query: str, rewrite: Rewrite, qv: Vector, search: Vector,
        history: Sequence[SelectedTurn], kb: Sequence[Passage], k: int, timer: StageTimer,
    ) -> Selection:
        with timer("encode_s"):
            kb, vectors = self._kb.with_vectors(kb)
        with timer("integrate_s"):
            threshold = self.settings.retrieval.clarity_threshold
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
        if cfg.retrieval.clarity_threshold is None or not cfg.ablations.use_rewrite or not vectors:
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
        for s in history if cfg.ablations.use_integration else ():
            stored = s.turn.passage_vectors
            for i, p in enumerate(s.turn.passages):
                vector = exact.get(p.key)
                if vector is None:
                    vector = calibration.invert(stored[i])
                candidates.append(Candidate(replace(p, vector=vector), vector, "history", s))
        lexical = None
        if cfg.integration.lexical_weight and candidates:
            texts = [c.passage.text for c in candidates]
            lexical = cfg.integration.lexical_weight * word_overlap(
                words, texts, cfg.experiments.lexical_length_norm)
        return integrate(
            search, candidates, k, matrix=self.integration_matrix,
            temperature=cfg.experiments.temperature, history_bonus=cfg.experiments.history_bonus,
            answer_bonus=cfg.experiments.answer_bonus,
            weighted=cfg.ablations.use_integration, lexical=lexical,
            unrelated=calibration.unrelated,
        )

    # -- after the LLM ----------------------------------------------------------------------

    def record(
        self,
        session_id: str,
        query: str,
        answer: str | None = None,
        *,
        selection: Selection | None = None,
        passages: Sequence[Passage | str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        response: str | None = None,
    ) -> AddResult:
        """Store the turn: ``query``, the passages shown and the ``answer``. Updates weights,
        evicts, organises.

        The passages are ``passages`` when given, else the context of ``selection``, else
        that of the session's pending selection (the latest ``select``) if it was made for
        ``query`` (it is then no longer pending), else none; a context longer than
        ``Settings.limits.max_passages`` (``select`` with a larger ``k``) keeps its best ones.
        ``response=``: the former name of ``answer``, until the next release (it warns).
        """
        self._check_open()
        check_session_id(session_id)
        answer = _answer_of(answer, response)
        asked = query
        query = fit_query(query, self.settings.limits.max_query_chars, warn=False)
        if query != asked and selection is None and (session_id, query) not in self._pending:
            fit_query(asked, self.settings.limits.max_query_chars)  # warned at select otherwise
        if selection is not None and selection.session_id != session_id:
            raise ValueError(
                f"selection belongs to session {selection.session_id!r}, not {session_id!r}"
            )
        if selection is not None and selection.query != query:
            raise ValueError(
                f"selection was made for the query {selection.query!r}, not {query!r}: "
                "pass the selection of this query, or its passages as passages="
            )
        taken = self._pending.take(session_id, query,
                                   warn=selection is None and passages is None)
        choice = None
        if taken is not None and (selection is None or selection is taken[0]):
            selection, choice = taken
        # a selection made with a k above max_passages stores its best max_passages
        shown: Sequence[Passage | str] = (
            passages if passages is not None
            else (selection.passages[: self.settings.limits.max_passages] if selection is not None
                  else [])
        )
        qv = selection.query_vector if selection is not None else None
        try:
            return self.history.add(session_id, query, answer, passages=shown,
                                    metadata=metadata, query_vector=qv, choice=choice)
        except BaseException:
            self._pending.restore(taken)
            raise

    async def arecord(
        self,
        session_id: str,
        query: str,
        answer: str | None = None,
        *,
        selection: Selection | None = None,
        passages: Sequence[Passage | str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        response: str | None = None,
    ) -> AddResult:
        """``record`` off the event loop."""
        answer = _answer_of(answer, response)
        return await asyncio.to_thread(
            self.record, session_id, query, answer, selection=selection, passages=passages,
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
            fit_query(query, cfg.limits.max_query_chars, f"question of turn {i}", warn=False)
            fit_answer(answer, cfg.limits.max_text_chars, f"answer of turn {i}")
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
        self._pending.forget_session(session_id)


def _answer_of(answer: str | None, response: str | None) -> str:
    """The answer of a ``record`` call, also from its former name ``response=`` (warned)."""
    if response is not None:
        warnings.warn("record(response=) is deprecated: pass the answer as answer= (or third, "
                      "by position)", DeprecationWarning, stacklevel=3)
        if answer is not None:
            raise TypeError("record() got the answer both as answer and as response=")
        return response
    if answer is None:
        raise TypeError("answer must be a str, got None: record(session_id, query, answer)")
    return answer


def _shown(history: Sequence[SelectedTurn]) -> list[SelectedTurn]:
    """The selected turns handed to the LLM (``SelectedTurn.on_topic``); the others only move
    the retrieval."""
    return [t for t in history if t.on_topic]


def _for_rewrite(history: Sequence[SelectedTurn]) -> Sequence[SelectedTurn]:
    """What the rewriter completes the question from: the turns handed on (the rewritten
    question is shown too, so it names nothing of a turn that is not)."""
    return _shown(history)


class EngineCloser(Closeable):
    """``close()`` and ``with`` blocks for a wrapper of a ``DHRAG`` engine (the adapters'
    retrievers and chat engine): closing the wrapper closes the engine's history store."""

    def _engine_to_close(self) -> DHRAG:
        raise NotImplementedError

    def close(self) -> None:
        """Close the engine's history store (``DHRAG.close``); also on leaving a ``with``."""
        self._engine_to_close().close()
