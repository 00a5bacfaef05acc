"""``HistoryDatabase``: the dynamic history database H behind one facade.

Its parts, one job each: ``sessions`` (sessions in memory, in step with other workers),
``session`` (one session's derived state), ``inputs`` (checks and encoding of a turn),
``update`` (the update rule: merge, weights, eviction), ``selection`` (DH-RAG selection) and
``labels`` (cluster labels and summary texts shown with selected turns).
"""

from __future__ import annotations

import logging
import random
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from dhrag_core.algorithm.calibration import Calibration, calibrate
from dhrag_core.algorithm.chains import chain_length_stats
from dhrag_core.algorithm.summaries import ExtractiveSummariser, Summariser
from dhrag_core.closing import Closeable, ClosedError
from dhrag_core.embedding import Embedder, default_embedder, encode_checked
from dhrag_core.history.inputs import check_passages, check_timestamp, check_vector, encode_turn
from dhrag_core.history.messages import record_messages
from dhrag_core.history.policy import ChainPolicy, SessionView, ThreadPolicy
from dhrag_core.history.selection import Selector, ThreadChoice, ThreadDecision, asks_follow_up
from dhrag_core.history.session import SessionState
from dhrag_core.history.sessions import SessionCache
from dhrag_core.history.update import AddResult, UpdateRule, rank_by_weight
from dhrag_core.records import HistoryHit, Passage, SelectedTurn, Turn, Vector
from dhrag_core.settings import Settings
from dhrag_core.store import (
    HistoryStore,
    MemoryStore,
    QuestionStore,
    StaleSessionError,
    open_store,
)
from dhrag_core.timing import StageTimer
from dhrag_core.transcript import Role
from dhrag_core.validation import (
    CLEANED_KEY,
    check_k,
    check_metadata,
    check_session_id,
    fit_answer,
    fit_query,
)

__all__ = ["AddResult", "HistoryDatabase"]

log = logging.getLogger(__name__)

_RETRY_SECONDS = 120.0
"""How long an optimistic write keeps retrying under contention (jittered backoff), before
``StaleSessionError``: long enough for a dozen processes writing one session at once."""


class HistoryDatabase(Closeable):
    """Per-session store of (query, passages, response) triples with relevance+recency upkeep.

    Thread-safe: turns of different sessions proceed in parallel, turns of one session in
    order. Several processes may share a durable store: each notices another's write by the
    session version and reloads.

    Args:
        embedder: Encodes queries, responses and passages; default: offline MiniLM (lazy).
        store: A ``HistoryStore`` or a URL (``memory``, ``sqlite:///path.db``,
            ``postgresql://user:password@host/db``).
        settings: Weights, capacity and limits.
        clock: Seconds since the epoch; inject one to test recency.
        summariser: Writes the summary-node texts shown in traces; default: extractive.
        calibration: How vectors are centred before any comparison (``calibration``); default:
            measured from the embedder on the probe texts at first use when
            ``Settings.ablations.calibrate`` is on, else none. Stored vectors are centred: a
            store is read with the calibration it was written with.
        thread_policy: Replaces the engine's choice of the thread a query continues
            (``history.policy.ThreadPolicy``); default: the engine's rule.
        chain_policy: Replaces the engine's choice of the chain a new turn joins
            (``history.policy.ChainPolicy``); default: the engine's rule.

    Example:
        >>> from dhrag_core import HashingEmbedder, HistoryDatabase
        >>> db = HistoryDatabase(embedder=HashingEmbedder())
        >>> _ = db.add("alice", "Who built the Athar Jamad mosque?", ["It was built in 1680."])
        >>> db.search("alice", "mosque builder", k=1)[0].turn.query
        'Who built the Athar Jamad mosque?'
    """

    def __init__(
        self,
        embedder: Embedder | None = None,
        store: HistoryStore | str | None = None,
        settings: Settings | None = None,
        clock: Callable[[], float] = time.time,
        summariser: Summariser | None = None,
        calibration: Calibration | None = None,
        *,
        thread_policy: ThreadPolicy | None = None,
        chain_policy: ChainPolicy | None = None,
    ) -> None:
        if settings is not None and not isinstance(settings, Settings):
            raise TypeError(
                f"settings must be a dhrag_core.Settings, got {type(settings).__name__}"
            )
        if not isinstance(store, (str, type(None), HistoryStore)):
            raise TypeError(
                "store must be a URL (memory, sqlite:///path.db, postgresql://...) or a "
                "HistoryStore (load, version, apply, delete_session, sessions, close), got "
                f"{type(store).__name__}"
            )
        if embedder is not None and not isinstance(embedder, Embedder):
            raise TypeError("embedder must have .dimension and .encode(texts) (Embedder protocol)")
        self.settings = settings or Settings()
        self.embedder: Embedder = embedder if embedder is not None else default_embedder()
        self.store: HistoryStore = store if not isinstance(store, (str, type(None))) else (
            open_store(store)
        )
        self.clock = clock
        self.summariser: Summariser = summariser or ExtractiveSummariser()
        if calibration is not None and (
            not isinstance(calibration, Calibration)
            or calibration.dimension != self.embedder.dimension
        ):
            raise TypeError(
                "calibration must be a dhrag_core.Calibration of the embedder's dimension"
            )
        self._calibration = calibration
        self._calibration_lock = threading.Lock()
        # a store that cannot hold questions (a custom one): they stay in this process
        kept = self.store
        self._local_questions = not isinstance(kept, QuestionStore)
        self._questions: QuestionStore = kept if isinstance(kept, QuestionStore) else MemoryStore()
        self._cache = SessionCache(self.store, self.embedder, self.settings)
        self._sessions = self._cache.sessions  # least recently used first
        if thread_policy is not None and not callable(getattr(thread_policy, "order", None)):
            raise TypeError("thread_policy must have order(view, query, query_vector, ranked)")
        if chain_policy is not None and not callable(getattr(chain_policy, "link", None)):
            raise TypeError("chain_policy must have link(view, turn, proposed)")
        self._selector = Selector(self.settings, self.summariser, thread_policy)
        self._update = UpdateRule(self.settings, self._cache, self._selector, chain_policy)
        self._closed = False

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called: every use of the store then raises
        ``ClosedError``."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(
                "this HistoryDatabase was closed (close(), or the end of its with block, or "
                "the close() of the DHRAG engine over it): its store is shut; make a new one "
                "to go on")

    def _session(self, session_id: str) -> SessionState:
        """The session's derived state, brought up to date with the store."""
        self._check_open()
        return self._cache.get(session_id)

    # -- inputs ----------------------------------------------------------------------------

    @property
    def calibration(self) -> Calibration:
        """The centring every stored and compared vector goes through (measured once)."""
        found = self._calibration
        if found is None:
            with self._calibration_lock:
                found = self._calibration
                if found is None:
                    found = self._calibration = (
                        calibrate(self.embedder) if self.settings.ablations.calibrate
                        else Calibration.identity(self.embedder.dimension)
                    )
        return found

    def calibrate(self, vectors: Vector) -> Vector:
        """The embedder's vectors as the history compares them (``Calibration.apply``)."""
        return self.calibration.apply(vectors)

    def encode_query(self, query: str) -> Vector:
        """The embedding of a query (validated like ``add`` validates it), as the embedder
        gives it."""
        query = fit_query(query, self.settings.limits.max_query_chars)
        out: Vector = encode_checked(self.embedder, [query])[0]
        return out

    def _query_vector(self, query: str | Vector) -> Vector:
        if isinstance(query, np.ndarray):
            return self.calibrate(check_vector("query", query, self.embedder.dimension))
        return self.calibrate(self.encode_query(query))

    def _encode_turn(
        self, query: str, response: str, items: list[Passage], query_vector: Vector | None
    ) -> tuple[Vector, Vector | None, Vector]:
        """Query, response and passage vectors, centred (``inputs.encode_turn``)."""
        return encode_turn(self.embedder, self.settings, query, response, items, query_vector,
                           self.calibration)

    # -- update ----------------------------------------------------------------------------

    def add(
        self,
        session_id: str,
        query: str,
        answer: str | Sequence[Passage | str] | None = "",
        *former: str,
        passages: Sequence[Passage | str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        query_vector: Vector | None = None,
        timestamp: float | None = None,
        choice: ThreadChoice | None = None,
        response: str | None = None,
    ) -> AddResult:
        """Store one turn, ``query``, its ``answer`` and the ``passages`` shown (the shape of
        ``DHRAG.record``); merge near-duplicates, evict beyond capacity.

        Passages that carry a ``vector`` (the embedder's, like ``query_vector``) are not
        re-encoded. ``choice``: the ``ThreadChoice`` made for this query (``choose``); the
        thread the turn joins is taken from it while the session has not changed since,
        else decided again. All input is checked before anything is written, so a bad call
        leaves the session as it was. The former shape ``add(session_id, query, passages,
        response)`` (and ``response=``) works until the next release, with a warning.
        """
        self._check_open()
        check_session_id(session_id)
        response, passages = _turn_of(answer, former, passages, response)
        query = fit_query(query, self.settings.limits.max_query_chars)
        response, cleaned = fit_answer(response, self.settings.limits.max_text_chars, "answer")
        items = check_passages(passages, self.settings)
        meta = check_metadata("metadata", metadata,
                              max_chars=self.settings.limits.max_metadata_chars)
        if cleaned:  # stored as it could be, and said so: the answer was given already
            note = "response: " + "; ".join(cleaned)
            log.warning("session %r: %s", session_id, note)
            meta = {**(meta or {}), CLEANED_KEY: note}
        check_timestamp(timestamp)

        timer = StageTimer()
        with timer("encode_s"):
            vectors = self._encode_turn(query, response, items, query_vector)
        items = [replace(p, vector=None) for p in items]

        deadline = time.monotonic() + _RETRY_SECONDS
        attempt = 0
        while True:
            with timer("update_s"):
                s = self._session(session_id)
                with s.lock:
                    now = float(self.clock() if timestamp is None else timestamp)
                    try:
                        joins = None
                        if choice is not None and choice.session_id == session_id \
                                and choice.query == query and choice.version == s.version:
                            joins = (choice.joins, choice.new_thread)
                        result = self._update.apply(
                            session_id, s, query, items, response, meta, vectors, now, joins
                        )
                        self._cache.keep(session_id, s)
                    except StaleSessionError:
                        # reloaded already; retry against the fresh state, after a jittered
                        # pause so that writers in other processes stop colliding in step
                        attempt += 1
                        if time.monotonic() > deadline:
                            raise StaleSessionError(
                                f"session {session_id!r} kept changing for "
                                f"{_RETRY_SECONDS:g} s ({attempt} tries); gave up") from None
                        time.sleep(random.uniform(0, min(0.001 * 2 ** attempt, 0.2)))
                        continue
            return replace(result, timings=dict(timer))

    # -- the unanswered question -----------------------------------------------------------

    def hold_question(self, session_id: str, question: str) -> None:
        """Keep ``question`` in the store as the session's unanswered question (replacing
        any other), so that its answer can arrive through another instance, process or
        after a restart (``store.QuestionStore``; a store without it keeps the question in
        this object). Checked like a query; the turns are left as they are."""
        self._check_open()
        check_session_id(session_id)
        question = fit_query(question, self.settings.limits.max_query_chars, "question")
        self._questions.hold_question(session_id, question)

    def held_question(self, session_id: str) -> str | None:
        """The session's unanswered question (``hold_question``); ``None`` when none."""
        self._check_open()
        check_session_id(session_id)
        return self._questions.held_question(session_id)

    def take_question(self, session_id: str, question: str | None = None) -> str | None:
        """Remove and return the session's unanswered question; with ``question``, only when
        the held one is that text (a newer one held by another writer stays)."""
        self._check_open()
        check_session_id(session_id)
        if question is not None and not isinstance(question, str):
            raise TypeError(f"question must be a str or None, got {type(question).__name__}")
        return self._questions.take_question(session_id, question)

    def record_messages(self, session_id: str, messages: Sequence[tuple[Role, str]]) -> int:
        """``DHRAG.record_messages`` for a history without an engine: each turn stored with
        ``add`` (no passages); a question left unanswered is held in the store."""
        return record_messages(self, session_id, messages,
                               lambda query, answer: self.add(session_id, query, answer))

    # -- reads -----------------------------------------------------------------------------

    def search(self, session_id: str, query: str | Vector, k: int = 5) -> list[HistoryHit]:
        """The ``k`` stored turns of the session with the highest weight for ``query``.

        The weight is the update rule's ``alpha * relevance + (1 - alpha) * recency`` (the one
        eviction uses), scored exactly over every stored turn in one vectorised pass; unlike
        ``select`` it does not look at topics or threads.
        """
        check_session_id(session_id)
        check_k(k)
        qv = self._query_vector(query)
        s = self._session(session_id)
        with s.lock:
            if not s.turns:
                return []
            return rank_by_weight(s, self.settings, qv, k, float(self.clock()))

    def select(self, session_id: str, query: str | Vector) -> list[SelectedTurn]:
        """The history turns DH-RAG selects for ``query`` (D_h^HM and D_h^CoT), best first.

        Candidates come from hierarchical matching (cluster -> summary -> turn), from the best
        turn of the best chain T*, and the latest turn (elliptical follow-ups); each is
        weighed like the update rule, ``alpha * relevance + (1 - alpha) * recency``, with
        recency counted in turns of T*, and the ``history_turns`` best are kept. The ablation
        switches of ``Settings`` apply here. Only the turns handed to the LLM
        (``SelectedTurn.on_topic``; ``select_threads`` gives every one).
        """
        return [t for t in self.select_threads(session_id, query, 1)[0] if t.on_topic]

    def choose(self, session_id: str, query: str, n: int, *,
               query_vector: Vector | None = None) -> ThreadChoice:
        """The ``ThreadChoice`` for ``query``: the selections inside the ``n`` threads it most
        likely continues, T* first (as ``select_threads``), whether it is a follow-up and
        whether T* is the latest turn's thread, and the thread its turn will join. The
        engine makes it once per question; pass it to ``add`` with the turn.
        ``query_vector``: the query's embedding when already made (the embedder's)."""
        self._check_open()
        check_session_id(session_id)
        check_k(n, "n")
        qv = self._query_vector(query if query_vector is None else query_vector)
        s = self._session(session_id)
        with s.lock:
            return self._selector.choose(s, session_id, qv, n, lambda: self.clock(), query)

    def select_threads(
        self, session_id: str, query: str | Vector, n: int, *, follow_up: bool | None = None,
        query_text: str | None = None,
    ) -> list[list[SelectedTurn]]:
        """``select`` inside each of the ``n`` threads the query most likely continues.

        The first list is ``select``'s (inside T*); the others select the same way inside the
        runner-up threads whose relevance is within ``Settings.threads.hedge_margin`` of T*'s, best
        first, so a caller can hedge when the thread is uncertain. Their turns carry no
        cluster label or summary text (computing those is not free, and only T*'s are shown).
        Without chains (``use_chains=False``) or history there is one list. ``follow_up``:
        whether the query names nothing of its own (``discourse.is_follow_up``), read from
        its text when ``None`` (a vector given as ``query`` then counts as not one).
        ``query_text``: the question's text when ``query`` is its vector (a thread policy
        reads it).
        """
        check_session_id(session_id)
        check_k(n, "n")
        if follow_up is None:
            follow_up = isinstance(query, str) and asks_follow_up(query)
        text = _text_of(query, query_text)
        qv = self._query_vector(query)
        s = self._session(session_id)
        with s.lock:
            # the clock is read when each thread is weighed, as ``self.clock`` is then
            return self._selector.select_threads(s, qv, n, lambda: self.clock(),
                                                 follow_up=follow_up, query=text)

    def rank_threads(self, session_id: str, query: str | Vector, *,
                     query_text: str | None = None,
                     limit: int | None = None) -> list[tuple[int, float]]:
        """The threads (chain ids) by how well ``query`` continues them, T* first, with its
        relevance to each, as selection ranks them (the thread policy applied); the first
        ``limit`` (all when ``None``). ``query_text`` as in ``select_threads``."""
        check_session_id(session_id)
        if limit is not None:
            check_k(limit, "limit")
        text = _text_of(query, query_text)
        qv = self._query_vector(query)
        s = self._session(session_id)
        with s.lock:
            if not s.tree.has_chains:
                return []
            ranked, _ = self._selector.threads(s, qv, follow_up=asks_follow_up(text),
                                               limit=limit, query=text)
            return list(ranked)

    def thread_decision(self, session_id: str, query: str) -> ThreadDecision | None:
        """What the fitted thread decision (``Settings.threads.thread_decision``) makes of ``query``
        and what it read (``selection.ThreadDecision``); ``None`` where it does not apply.
        For analyses and the fit of its constants."""
        check_session_id(session_id)
        qv = self._query_vector(query)
        s = self._session(session_id)
        with s.lock:
            return self._selector.shift(s, qv, query, asks_follow_up(query))

    def select_in_thread(self, session_id: str, query: str | Vector,
                         thread: int) -> list[SelectedTurn]:
        """The selection inside ``thread`` (a chain id of ``rank_threads``), as if ``query``
        continued it: what T*'s selection would be were that thread chosen."""
        check_session_id(session_id)
        qv = self._query_vector(query)
        s = self._session(session_id)
        with s.lock:
            if isinstance(thread, bool) or not isinstance(thread, int) or not s.tree.has_chain(
                    thread):
                raise ValueError(f"thread must be a chain id of session {session_id!r}, "
                                 f"got {thread!r}")
            return self._selector.select_in(s, qv, thread, lambda: self.clock())

    @property
    def sessions_in_memory(self) -> int:
        """Sessions whose derived state is held in memory now (``max_sessions_in_memory``)."""
        return len(self._sessions)

    def view(self, session_id: str) -> SessionView:
        """A read-only view of the session's stored turns and threads, valid until the
        session next changes (analyses, tests, a policy's own bookkeeping)."""
        check_session_id(session_id)
        return SessionView(self._session(session_id))

    def latest_thread(self, session_id: str) -> int | None:
        """The thread (chain) of the session's latest turn; ``None`` without turns."""
        check_session_id(session_id)
        s = self._session(session_id)
        with s.lock:
            return s.tree.chain_of(s.latest) if s.latest is not None else None

    def stats(self, session_id: str) -> dict[str, Any]:
        """Size of the session's tree: turns, clusters, chains and chain-length statistics,
        and the vectors compared so far by matching and by the clusters' merge passes."""
        check_session_id(session_id)
        s = self._session(session_id)
        with s.lock:
            return {
                "turns": len(s.turns),
                "clusters": len(s.tree.clusters),
                "chains": chain_length_stats(s.tree.chain_lengths()),
                "comparisons": s.tree.comparisons,
                "merge_comparisons": s.tree.clusters.merge_comparisons,
            }

    def comparisons(self, session_id: str) -> int:
        """Vectors the session's history matching has compared with queries so far: a
        counter read in O(1), unlike ``stats``."""
        check_session_id(session_id)
        return int(self._session(session_id).tree.comparisons)

    def turns(self, session_id: str) -> list[Turn]:
        """The session's stored turns, oldest first."""
        check_session_id(session_id)
        s = self._session(session_id)
        with s.lock:
            return sorted(s.turns.values(), key=lambda t: t.index)

    def size(self, session_id: str) -> int:
        check_session_id(session_id)
        s = self._session(session_id)
        return len(s.turns)

    def delete_session(self, session_id: str) -> None:
        """Forget everything of one session (and only that session)."""
        check_session_id(session_id)
        s = self._session(session_id)
        with s.lock:
            self.store.delete_session(session_id)  # the held question with it
            if self._local_questions:
                self._questions.take_question(session_id)
            self._cache.reload(session_id, s)
        self._cache.forget(session_id)

    def close(self) -> None:
        """Close the store (a PostgreSQL store's connection pool: its threads stop now, not
        at interpreter exit). Also on leaving a ``with`` block; the database is then of no
        further use (``ClosedError``), and closing again does nothing."""
        if self._closed:
            return
        self._closed = True
        self.store.close()


def _turn_of(answer: Any, former: tuple[str, ...], passages: Any,
             response: str | None) -> tuple[Any, Any]:
    """(answer, passages) of an ``add`` call, read from the former shape ``add(session_id,
    query, passages, response)`` or ``response=`` too, with a ``DeprecationWarning``."""
    if len(former) > 1:
        raise TypeError(f"add() takes at most 4 positional arguments ({3 + len(former)} given)")
    # a list third, with no passages= beside it, is the former shape's passages
    old = bool(former) or (passages is None and isinstance(answer, (list, tuple)))
    if old or response is not None:
        warnings.warn("HistoryDatabase.add(session_id, query, passages, response) and "
                      "response= are deprecated: call add(session_id, query, answer, "
                      "passages=...)", DeprecationWarning, stacklevel=3)
    if old:
        if passages is not None:
            raise TypeError("add() got passages both by position and as passages=")
        answer, passages = (former[0] if former else ""), answer
    if response is not None:
        if answer != "":
            raise TypeError("add() got the answer both as answer and as response=")
        answer = response
    return answer, passages


def _text_of(query: str | Vector, query_text: str | None) -> str:
    """The question's words: ``query`` itself, or ``query_text`` when ``query`` is a vector."""
    return query if isinstance(query, str) else (query_text or "")
