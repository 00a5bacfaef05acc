"""The dynamic history database H: per-session triples, a FAISS query index, the update rule.

One turn's update (paper eq. 11-14) is: insert the triple (or merge it into a near-duplicate),
weigh every stored triple by ``alpha * relevance + (1 - alpha) * recency`` against the new
query, and evict the lowest weights beyond ``capacity`` -- from the store and the indexes, in
one store transaction.
"""

from __future__ import annotations

import heapq
import logging
import random
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from dhrag_core.algorithm import scoring
from dhrag_core.algorithm.chains import chain_length_stats
from dhrag_core.algorithm.clustering import keyword_labels
from dhrag_core.algorithm.hierarchy import SessionTree, TreeMatch
from dhrag_core.algorithm.summaries import ExtractiveSummariser, Summariser
from dhrag_core.embedding import Embedder, MiniLMEmbedder, l2_normalise, tokens
from dhrag_core.index import VectorIndex
from dhrag_core.records import HistoryHit, Passage, SelectedTurn, Turn, Vector
from dhrag_core.settings import Settings
from dhrag_core.store import HistoryStore, StaleSessionError, open_store
from dhrag_core.timing import StageTimer
from dhrag_core.validation import (
    CLEANED_KEY,
    check_k,
    check_metadata,
    check_session_id,
    check_text,
    clean_passage,
)

__all__ = ["AddResult", "HistoryDatabase"]

_Threads = tuple[list[tuple[int, float]], list[TreeMatch]]
"""Thread ids with their relevance, T* first; and the tree matches of the query."""

log = logging.getLogger(__name__)

_MAX_RETRIES = 50  # optimistic writes under contention: retried with jittered backoff
_SUMMARY_CACHE = 512
_CHAIN_WINDOW = 64
_PUT_CHUNK = 4096  # turns indexed per batch on a bulk load


@dataclass(frozen=True)
class AddResult:
    """What one ``add`` did: the stored turn, whether it merged a duplicate, what it evicted."""

    turn: Turn
    merged: bool
    evicted: tuple[str, ...]
    timings: Mapping[str, float] = field(default_factory=dict, repr=False, compare=False)
    """Seconds: ``encode_s`` (embedding the response and passages) and ``update_s`` (weights,
    eviction, organisation and the store write)."""


@dataclass
class _Session:
    """Derived in-memory state of one session, rebuilt from the store whenever it changed."""

    dimension: int
    settings: Settings
    version: int = 0
    turns: dict[str, Turn] = field(default_factory=dict)
    next_index: int = 0
    lock: threading.RLock = field(default_factory=threading.RLock)
    latest: str | None = None
    labels: dict[int, tuple[int, str]] = field(default_factory=dict)
    summaries: dict[tuple[tuple[str, int], ...], str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.queries: VectorIndex[str] = VectorIndex(self.dimension)
        self.slot_index = np.zeros(0, dtype=np.float64)
        self.slot_time = np.zeros(0, dtype=np.float64)
        self.tree = SessionTree(self.dimension, self.settings)
        self._last: tuple[bytes, int, np.ndarray, np.ndarray] | None = None
        self.thread_memo: tuple[bytes, int, _Threads] | None = None
        """Threads of the last query at the last version: ``add`` reuses what ``select``
        found."""

    def similarities(self, qv: Vector) -> tuple[np.ndarray, np.ndarray]:
        """Slots and query similarities of every turn, remembered for the same query and
        version: a turn searches and then adds with one query, and pays for one scan."""
        key = qv.tobytes()
        if self._last is not None and self._last[0] == key and self._last[1] == self.version:
            return self._last[2], self._last[3]
        slots, sims = self.queries.similarities(qv)
        self._last = (key, self.version, slots, sims)
        return slots, sims

    def put(self, turns: Sequence[Turn]) -> None:
        """Index turns (new ones, or new versions of stored ones) in one batch."""
        if not turns:
            return
        for turn in turns:
            self.turns[turn.turn_id] = turn
        if len(turns) > _PUT_CHUNK:  # a bulk load: allocate once, copy without a full stack
            self.queries.reserve(self.queries.n_slots + len(turns))
        for at in range(0, len(turns), _PUT_CHUNK):
            chunk = turns[at : at + _PUT_CHUNK]
            self.queries.add([t.turn_id for t in chunk],
                             np.stack([t.query_vector for t in chunk]))
        n = self.queries.n_slots
        if self.slot_index.size < n:
            size = max(2 * self.slot_index.size, n)
            self.slot_index = np.resize(self.slot_index, size)
            self.slot_time = np.resize(self.slot_time, size)
        for turn in turns:
            slot = self.queries.slot_of(turn.turn_id)
            self.slot_index[slot] = turn.index
            self.slot_time[slot] = turn.timestamp
        self.next_index = max(self.next_index, max(t.index for t in turns) + 1)
        newest = max(turns, key=lambda t: t.index)
        if self.latest is None or newest.index >= self.turns[self.latest].index:
            self.latest = newest.turn_id

    def drop(self, turn_ids: Sequence[str]) -> None:
        for tid in turn_ids:
            self.tree.remove(tid)
            self.turns.pop(tid, None)
            if tid == self.latest:
                rest = list(self.turns.values())
                self.latest = max(rest, key=lambda t: t.index).turn_id if rest else None
        self.queries.remove(list(turn_ids))


def _answer_shares(response: str, passages: Sequence[Passage]) -> np.ndarray | None:
    """Weights of the passages in a response's derived vector: the squared share of the
    response's content words that each passage contains; None when no passage shares one."""
    words = set(tokens(response))
    if not words or not passages:
        return None
    shares = np.array([len(words.intersection(tokens(p.text))) for p in passages],
                      dtype=np.float32) / len(words)
    if not shares.any():
        return None
    out: np.ndarray = shares**2
    return out


class HistoryDatabase:
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
    ) -> None:
        if settings is not None and not isinstance(settings, Settings):
            raise TypeError(
                f"settings must be a dhrag_core.Settings, got {type(settings).__name__}"
            )
        if embedder is not None and not isinstance(embedder, Embedder):
            raise TypeError("embedder must have .dimension and .encode(texts) (Embedder protocol)")
        self.settings = settings or Settings()
        self.embedder: Embedder = embedder if embedder is not None else MiniLMEmbedder()
        self.store: HistoryStore = store if not isinstance(store, (str, type(None))) else (
            open_store(store)
        )
        self.clock = clock
        self.summariser: Summariser = summariser or ExtractiveSummariser()
        self._sessions: OrderedDict[str, _Session] = OrderedDict()  # least recently used first
        self._lock = threading.Lock()

    # -- session cache -------------------------------------------------------------------

    def _session(self, session_id: str) -> _Session:
        """The session's derived state, reloaded if the store changed under it.

        At most ``Settings.max_sessions_in_memory`` sessions stay in memory (least recently
        used dropped first); a session with no stored turn is not kept, so reading unknown
        session ids allocates nothing lasting.
        """
        with self._lock:
            s = self._sessions.get(session_id)
            if s is not None:
                self._sessions.move_to_end(session_id)
        if s is None:
            s = _Session(self.embedder.dimension, self.settings)
            s.version = -1
        with s.lock:
            if s.version != self.store.version(session_id) and not self._catch_up(session_id, s):
                self._reload(session_id, s)
            if s.turns:
                self._keep(session_id, s)
        return s

    def _keep(self, session_id: str, s: _Session) -> None:
        """Cache ``s`` (unless the session is cached already) within the bound."""
        with self._lock:
            if session_id in self._sessions:
                return
            self._sessions[session_id] = s
            while len(self._sessions) > self.settings.max_sessions_in_memory:
                self._sessions.popitem(last=False)

    def _catch_up(self, session_id: str, s: _Session) -> bool:
        """Apply only what another process changed since ``s.version`` (stores with a change
        log); False when the whole session must be reloaded instead."""
        changes = getattr(self.store, "changes", None)
        if s.version < 0 or not callable(changes):
            return False
        got = changes(session_id, s.version)
        if got is None:
            return False
        turns, deleted, version = got
        self._check_dimensions(session_id, turns)
        s.drop([t for t in deleted if t in s.turns]
               + [t.turn_id for t in turns if t.turn_id in s.turns])
        s.tree.restore(turns)
        s.put(turns)
        s.version, s._last, s.thread_memo = version, None, None
        log.debug("caught up session %r: %d written, %d deleted, version %d", session_id,
                  len(turns), len(deleted), version)
        return True

    def _check_dimensions(self, session_id: str, turns: Sequence[Turn]) -> None:
        for t in turns:
            if t.query_vector.shape[0] != self.embedder.dimension:
                raise ValueError(
                    f"session {session_id!r} was stored with {t.query_vector.shape[0]}-d "
                    f"vectors but the embedder gives {self.embedder.dimension}-d; use the "
                    "embedder the session was written with"
                )

    def _reload(self, session_id: str, s: _Session) -> None:
        turns, version = self.store.load(session_id)
        fresh = _Session(self.embedder.dimension, self.settings)
        self._check_dimensions(session_id, turns)
        fresh.put(turns)
        fresh.tree.restore(turns)
        s.turns, s.queries = fresh.turns, fresh.queries
        s.tree, s.latest = fresh.tree, fresh.latest
        s.labels, s.summaries = {}, {}
        s.slot_index, s.slot_time = fresh.slot_index, fresh.slot_time
        s.next_index, s.version = fresh.next_index, version
        s.thread_memo = None
        s._last = None
        log.debug("loaded session %r: %d turns, version %d", session_id, len(turns), version)

    # -- inputs ----------------------------------------------------------------------------

    def _passages(self, passages: Any) -> list[Passage]:
        """The passages, cleaned to what every store can keep (``clean_passage``): a passage
        a retriever returned never costs the turn."""
        if passages is None:
            return []
        if isinstance(passages, (str, bytes, Passage)):
            raise TypeError("passages must be a list of str or Passage, not a single item")
        out: list[Passage] = []
        for i, p in enumerate(passages):
            if not isinstance(p, Passage):
                # retrievers do return empty documents; storing one is harmless
                if isinstance(p, str):
                    p = Passage(text=p)
                else:
                    check_text(f"passages[{i}]", p, max_chars=self.settings.max_text_chars)
            elif not isinstance(p.text, str):
                check_text(f"passages[{i}].text", p.text, max_chars=1)
            clean = clean_passage(p, self.settings.max_text_chars)
            if clean is not p:
                log.warning("passages[%d] (%s) cleaned to be stored: %s", i,
                            clean.id or clean.title or "no id",
                            clean.metadata.get(CLEANED_KEY, ""))
            out.append(clean)
        if len(out) > self.settings.max_passages:
            raise ValueError(
                f"passages has {len(out)} items; the limit is {self.settings.max_passages} "
                "(Settings.max_passages)"
            )
        return out

    def _vector(self, name: str, v: Any) -> Vector:
        a = np.asarray(v, dtype=np.float32)
        if a.ndim != 1 or a.shape[0] != self.embedder.dimension or not np.isfinite(a).all():
            raise ValueError(
                f"{name} must be a finite vector of length {self.embedder.dimension}, "
                f"got shape {a.shape}"
            )
        out: Vector = l2_normalise(a)[0]
        return out

    def encode_query(self, query: str) -> Vector:
        """The embedding of a query (validated like ``add`` validates it)."""
        check_text("query", query, max_chars=self.settings.max_query_chars)
        out: Vector = self.embedder.encode([query])[0]
        return out

    # -- update ----------------------------------------------------------------------------

    def add(
        self,
        session_id: str,
        query: str,
        passages: Sequence[Passage | str] | None = None,
        response: str = "",
        *,
        metadata: Mapping[str, Any] | None = None,
        query_vector: Vector | None = None,
        timestamp: float | None = None,
    ) -> AddResult:
        """Store one turn's triple, merge near-duplicates, evict beyond capacity.

        Passages that carry a ``vector`` are not re-encoded. All input is checked before
        anything is written, so a bad call leaves the session as it was.
        """
        check_session_id(session_id)
        check_text("query", query, max_chars=self.settings.max_query_chars)
        check_text("response", response, max_chars=self.settings.max_text_chars, allow_empty=True)
        items = self._passages(passages)
        meta = check_metadata("metadata", metadata, max_chars=self.settings.max_metadata_chars)
        if timestamp is not None and (
            isinstance(timestamp, bool) or not isinstance(timestamp, (int, float))
            or not np.isfinite(timestamp)
        ):
            raise TypeError(f"timestamp must be a finite number of seconds, got {timestamp!r}")

        timer = StageTimer()
        with timer("encode_s"):
            qv, rv, pv = self._encode_turn(query, response, items, query_vector)
        items = [replace(p, vector=None) for p in items]

        for attempt in range(_MAX_RETRIES):
            with timer("update_s"):
                s = self._session(session_id)
                with s.lock:
                    try:
                        result = self._add_locked(
                            session_id, s, query, items, response, meta, qv, rv, pv, timestamp
                        )
                        self._keep(session_id, s)
                    except StaleSessionError:
                        # reloaded already; retry against the fresh state, after a jittered
                        # pause so that writers in other processes stop colliding in step
                        time.sleep(random.uniform(0, 0.001 * 2 ** min(attempt, 6)))
                        continue
            return replace(result, timings=dict(timer))
        raise StaleSessionError(f"session {session_id!r} kept changing; gave up after retries")

    def _encode_turn(
        self, query: str, response: str, items: list[Passage], query_vector: Vector | None
    ) -> tuple[Vector, Vector | None, Vector]:
        """Query, response and passage vectors: given ones checked, the rest encoded in one
        batch (the response only when ``Settings.answer_vector`` asks for it)."""
        dim = self.embedder.dimension
        missing = [i for i, p in enumerate(items) if p.vector is None]
        shares = None
        if response and self.settings.answer_vector == "passages":
            shares = _answer_shares(response, items)
        encode_response = bool(response) and shares is None
        texts = ([query] if query_vector is None else []) + ([response] if encode_response else [])
        texts += [items[i].text for i in missing]
        enc = self.embedder.encode(texts) if texts else np.zeros((0, dim), np.float32)
        pos = 0
        if query_vector is None:
            qv = enc[0]
            pos = 1
        else:
            qv = self._vector("query_vector", query_vector)
        rv = None
        if encode_response:
            rv = enc[pos]
            pos += 1
        pv = np.zeros((len(items), dim), dtype=np.float32)
        for i, p in enumerate(items):
            if p.vector is not None:
                pv[i] = self._vector(f"passages[{i}].vector", p.vector)
        if missing:
            pv[missing] = enc[pos:]
        if shares is not None:
            rv = l2_normalise(shares @ pv)[0]
        return qv, rv, pv

    def _add_locked(
        self,
        session_id: str,
        s: _Session,
        query: str,
        items: list[Passage],
        response: str,
        meta: dict[str, Any],
        qv: Vector,
        rv: Vector | None,
        pv: Vector,
        timestamp: float | None,
    ) -> AddResult:
        now = float(self.clock() if timestamp is None else timestamp)
        index = s.next_index
        slots, sims = s.similarities(qv)
        dup = self._near_duplicate(s, slots, sims, response, rv)
        if dup is not None:
            turn = self._merged(dup, index, query, items, response, meta, qv, rv, pv, now)
        else:
            turn = Turn(
                session_id=session_id, turn_id=uuid.uuid4().hex, index=index, query=query,
                passages=tuple(items), response=response, timestamp=now, query_vector=qv,
                response_vector=rv, passage_vectors=pv, metadata=meta,
            )
        size = len(s.turns) + (0 if dup is not None else 1)
        evicted = self._eviction(
            s, slots, sims, index, now, size - self.settings.capacity, turn.turn_id
        )
        try:
            for tid in [*evicted, *([dup.turn_id] if dup is not None else [])]:
                s.tree.remove(tid)
            cluster_id, chain_id, moved = s.tree.insert(turn, self._continued_thread(s, qv))
            turn = replace(turn, cluster_id=cluster_id, chain_id=chain_id)
            upsert = [turn] + [replace(s.turns[tid], cluster_id=cid)
                               for tid, cid in moved.items() if tid in s.turns]
            s.version = self.store.apply(
                session_id, upsert=upsert, delete=evicted, expected_version=s.version
            )
        except BaseException:
            # the tree may be ahead of the store: rebuild it now, or (store unreachable) on
            # the next call, without hiding the error that stopped this one
            try:
                self._reload(session_id, s)
            except Exception:
                s.version = -1
                log.warning("session %r will reload on its next use", session_id)
            raise
        s.drop(evicted)
        s.put(upsert)
        return AddResult(turn=turn, merged=dup is not None, evicted=tuple(evicted))

    def _continued_thread(self, s: _Session, qv: Vector) -> int | None:
        """The thread a new turn joins because its query continues it (``thread_link``): the
        T* that selection chose for that query, when the query matched it well enough."""
        cfg = self.settings
        if not cfg.use_chains or cfg.thread_link is None or not s.tree.chains.chains:
            return None
        thread, relevance = self._thread_of(s, qv)
        return thread if relevance >= cfg.thread_link else None

    def _near_duplicate(
        self, s: _Session, slots: np.ndarray, sims: np.ndarray, response: str,
        rv: Vector | None,
    ) -> Turn | None:
        threshold = self.settings.merge_threshold
        close = np.flatnonzero(sims >= threshold)
        # the closest query whose response matches too (the same text, or close vectors: a
        # derived vector reflects the passages, not the wording): several stored turns may
        # share a query with different answers, and the first must not hide a true duplicate
        for i in close[np.argsort(-sims[close], kind="stable")]:
            old = s.turns[s.queries.key_at(int(slots[i]))]
            other = old.response_vector
            if (rv is None or other is None or old.response == response
                    or float(other @ rv) >= threshold):
                return old
        return None

    def _merged(
        self, old: Turn, index: int, query: str, items: list[Passage], response: str,
        meta: dict[str, Any], qv: Vector, rv: Vector | None, pv: Vector, now: float,
    ) -> Turn:
        """The newer turn wins; passages are the union (newest first), capped."""
        seen = {p.key for p in items}
        keep = [i for i, p in enumerate(old.passages) if p.key not in seen]
        room = max(self.settings.max_passages - len(items), 0)
        keep = keep[:room]
        passages = tuple(items) + tuple(old.passages[i] for i in keep)
        vectors = np.concatenate([pv, old.passage_vectors[keep]]) if keep else pv
        return replace(
            old, index=index, query=query, passages=passages,
            response=response or old.response, timestamp=now, query_vector=qv,
            response_vector=rv if rv is not None else old.response_vector,
            passage_vectors=np.ascontiguousarray(vectors, dtype=np.float32),
            metadata={**old.metadata, **meta}, merges=old.merges + 1,
        )

    def _weights(
        self, s: _Session, slots: np.ndarray, sims: np.ndarray, index: int, now: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(relevance, recency, weight) of the turns in ``slots`` given their similarities."""
        rel = scoring.relevance(sims)
        rec = scoring.recency(
            index - s.slot_index[slots], self.settings.half_life_turns,
            now - s.slot_time[slots], self.settings.half_life_seconds,
        )
        return rel, rec, scoring.combined_weight(rel, rec, self.settings.alpha)

    def _eviction(
        self, s: _Session, slots: np.ndarray, sims: np.ndarray, index: int, now: float, n: int,
        protect: str,
    ) -> list[str]:
        if n <= 0:
            return []
        _, _, weight = self._weights(s, slots, sims, index, now)
        if protect in s.queries:
            weight[slots == s.queries.slot_of(protect)] = np.inf
        # equal weights evict the older turn (by turn index: slots are reused)
        drop = scoring.lowest_weights(weight, n, age=s.slot_index[slots])
        return [s.queries.key_at(int(slots[i])) for i in drop]

    # -- reads -----------------------------------------------------------------------------

    def _query_vector(self, query: str | Vector) -> Vector:
        if isinstance(query, np.ndarray):
            return self._vector("query", query)
        return self.encode_query(query)


    def search(self, session_id: str, query: str | Vector, k: int = 5) -> list[HistoryHit]:
        """The ``k`` stored turns of the session with the highest weight for ``query``.

        The weight is the update rule's ``alpha * relevance + (1 - alpha) * recency``, scored
        exactly over every stored turn in one vectorised pass over the FAISS storage.
        """
        check_session_id(session_id)
        check_k(k)
        qv = self._query_vector(query)
        s = self._session(session_id)
        with s.lock:
            if not s.turns:
                return []
            return self._top_weighted(s, qv, k)

    def _top_weighted(self, s: _Session, qv: Vector, k: int) -> list[HistoryHit]:
        slots, sims = s.similarities(qv)
        rel, rec, w = self._weights(s, slots, sims, s.next_index, float(self.clock()))
        top = np.argpartition(-w, k - 1)[:k] if w.size > k else np.arange(w.size)
        order = top[np.lexsort((-s.slot_index[slots[top]], -w[top]))]
        return [
            HistoryHit(
                turn=s.turns[s.queries.key_at(int(slots[i]))], relevance=float(rel[i]),
                recency=float(rec[i]), weight=float(w[i]),
            )
            for i in order
        ]

    def select(self, session_id: str, query: str | Vector) -> list[SelectedTurn]:
        """The history turns DH-RAG selects for ``query`` (D_h^HM and D_h^CoT), best first.

        Candidates come from hierarchical matching (cluster -> summary -> turn), from the best
        turn of the best chain T*, and the latest turn (elliptical follow-ups); each is
        weighed like the update rule, ``alpha * relevance + (1 - alpha) * recency``, and the
        ``history_turns`` best are kept. The ablation switches of ``Settings`` apply here.
        """
        return self.select_threads(session_id, query, 1)[0]

    def select_threads(
        self, session_id: str, query: str | Vector, n: int
    ) -> list[list[SelectedTurn]]:
        """``select`` inside each of the ``n`` threads the query most likely continues.

        The first list is ``select``'s (inside T*); the others select the same way inside the
        runner-up threads, best first, so a caller can hedge when the thread is uncertain.
        Without chains (``use_chains=False``) or history there is one list.
        """
        check_session_id(session_id)
        check_k(n, "n")
        qv = self._query_vector(query)
        s = self._session(session_id)
        with s.lock:
            if not s.turns:
                return [[]]
            if not self.settings.use_chains:
                return [self._select_flat(s, qv)]
            if not s.tree.chains.chains:
                return [[]]
            threads, matches = self._threads_of(s, qv)
            return [self._select_in_thread(s, qv, t, matches) for t, _ in threads[:n]]

    def _thread_of(self, s: _Session, qv: Vector) -> tuple[int, float]:
        """T*, the chain (thread) the query continues, and its relevance."""
        return self._threads_of(s, qv)[0][0]

    def _threads_of(
        self, s: _Session, qv: Vector
    ) -> _Threads:
        """Chains (threads) by how well the query continues them, T* first, with their
        relevance; and the tree matches.

        A chain's relevance is its best matched turn's (or its centroid's) similarity to the
        query; chains active lately get ``thread_recency`` more, so an elliptical follow-up,
        relevant to nothing in particular, stays in the thread of the turn before it.
        """
        key = qv.tobytes()
        memo = s.thread_memo
        if memo is not None and memo[0] == key and memo[1] == s.version:
            return memo[2]
        cfg = self.settings
        chains = s.tree.chains
        matches = s.tree.match(qv, hierarchical=cfg.use_hierarchy,
                               clusters=cfg.use_clustering)
        matched: dict[int, float] = {}
        for m in matches:
            cid = chains.of[m.turn_id]
            matched[cid] = max(matched.get(cid, -1.0), m.similarity)
        slots, rel, last = chains.relevance(qv, matched)
        bonus = cfg.thread_recency if cfg.use_recency else 0.0
        score = scoring.thread_score(rel, s.next_index - last, bonus, cfg.thread_half_life)
        order = [int(i) for i in np.argsort(-score, kind="stable")]
        current = chains.of.get(s.latest) if s.latest is not None else None
        best = order[0]
        if (cfg.thread_switch is not None and current is not None
                and chains.at_slot(int(slots[best])) != current
                and rel[best] < cfg.thread_switch):
            stay = chains.position(slots, current)
            order.remove(stay)
            order.insert(0, stay)
        found = [(chains.at_slot(int(slots[i])), float(rel[i])) for i in order], matches
        s.thread_memo = (key, s.version, found)
        return found

    def _select_in_thread(
        self, s: _Session, qv: Vector, thread: int, matches: Sequence[TreeMatch]
    ) -> list[SelectedTurn]:
        """DH-RAG selection inside ``thread``: its matched turns, its best turn and its latest,
        with recency counted in turns of that thread (other threads' turns do not age it)."""
        cfg = self.settings
        chains = s.tree.chains
        via: dict[str, list[str]] = {}
        for m in matches:
            if chains.of[m.turn_id] == thread:
                via.setdefault(m.turn_id, []).append("hierarchy")
        members, _, vectors = chains.window(thread, s.tree.vectors, _CHAIN_WINDOW)
        alpha = cfg.alpha if cfg.use_recency else 1.0
        ages = np.arange(len(members), 0, -1, dtype=np.float64)
        weight = scoring.combined_weight(scoring.relevance(vectors @ qv),
                                         scoring.recency(ages, cfg.half_life_turns), alpha)
        via.setdefault(members[int(np.argmax(weight))], []).append("chain")
        via.setdefault(members[-1], []).append("recent")
        return self._weigh(s, qv, via, chains.thread_ages(thread, [s.turns[t].index for t in via]))

    def _select_flat(self, s: _Session, qv: Vector) -> list[SelectedTurn]:
        """Selection without threads (``use_chains=False``): matched turns and the latest turn
        of the session, recency counted in turns of the session."""
        via: dict[str, list[str]] = {}
        for m in s.tree.match(qv, hierarchical=self.settings.use_hierarchy,
                                  clusters=self.settings.use_clustering):
            via.setdefault(m.turn_id, []).append("hierarchy")
        if s.latest is not None:
            via.setdefault(s.latest, []).append("recent")
        return self._weigh(s, qv, via, [s.next_index - s.turns[t].index for t in via])

    def _weigh(self, s: _Session, qv: Vector, via: dict[str, list[str]],
               ages: Sequence[float]) -> list[SelectedTurn]:
        """Weigh the candidates ``alpha * relevance + (1 - alpha) * recency`` (relevance
        sharpened around the best one) and keep the ``history_turns`` best."""
        cfg = self.settings
        alpha = cfg.alpha if cfg.use_recency else 1.0
        ids = list(via)
        turns = [s.turns[i] for i in ids]
        rel = scoring.relevance(self._relevance_sims(s, ids, turns, qv))
        if cfg.relevance_contrast is not None:
            rel = scoring.contrast(rel, cfg.relevance_contrast)
        now = float(self.clock())
        rec = scoring.recency(ages, cfg.half_life_turns, [now - t.timestamp for t in turns],
                              cfg.half_life_seconds)
        weight = scoring.combined_weight(rel, rec, alpha)
        order = np.lexsort((-np.array([t.index for t in turns]), -weight))
        chosen = [int(i) for i in order[: cfg.history_turns]]
        labels = self._labels(s, {turns[i].cluster_id for i in chosen})
        return [
            SelectedTurn(
                turn=turns[i], relevance=float(rel[i]), recency=float(rec[i]),
                weight=float(weight[i]), via=tuple(via[ids[i]]), cluster_id=turns[i].cluster_id,
                cluster_label=labels.get(turns[i].cluster_id, ""),
                summary=self._summary(s, turns[i]), chain_id=turns[i].chain_id,
            )
            for i in chosen
        ]

    def _summary(self, s: _Session, turn: Turn) -> str:
        """The text of the summary node holding ``turn``, cached while its members stand
        (a merged turn gets a new index, so an edited member is a new key)."""
        _, members = s.tree.summary_of(turn.turn_id)
        key = tuple((m, s.turns[m].index) for m in members)
        text = s.summaries.get(key)
        if text is None:
            if len(s.summaries) >= _SUMMARY_CACHE:
                s.summaries.clear()
            text = s.summaries[key] = self.summariser.summarise([s.turns[m] for m in members])
        return text

    def _relevance_sims(
        self, s: _Session, ids: list[str], turns: list[Turn], qv: Vector
    ) -> np.ndarray:
        mode = self.settings.relevance
        q_sims = np.stack([t.query_vector for t in turns]) @ qv
        if mode == "query":
            return q_sims
        t_sims = np.stack([s.tree.vectors[i] for i in ids]) @ qv
        return t_sims if mode == "topic" else np.maximum(q_sims, t_sims)

    @staticmethod
    def _labels(s: _Session, cluster_ids: set[int], sample: int = 20) -> dict[int, str]:
        """Keyword labels of the given clusters, contrasted with up to 4 other clusters.

        Labels are cached per cluster and recomputed once it has grown or shrunk by a fifth,
        so a long session does not re-tokenise its clusters on every query.
        """
        clusters = s.tree.clusters.clusters
        out: dict[int, str] = {}
        stale: set[int] = set()
        for cid in cluster_ids:
            size = clusters[cid].size if cid in clusters else 0
            cached = s.labels.get(cid)
            if cached is not None and abs(cached[0] - size) <= max(2, size // 5):
                out[cid] = cached[1]
            elif size:
                stale.add(cid)
        if stale:
            others = [c for c in clusters if c not in stale][:4]
            groups: dict[int, list[str]] = {}
            for cid in [*stale, *others]:
                members = heapq.nlargest(sample, clusters[cid].members,
                                         key=s.tree.index_of.__getitem__)
                groups[cid] = [f"{s.turns[m].query} {s.turns[m].response}" for m in members]
            for cid, label in keyword_labels(groups).items():
                if cid in stale:
                    s.labels[cid] = (clusters[cid].size, label)
                    out[cid] = label
        return out

    def stats(self, session_id: str) -> dict[str, Any]:
        """Size of the session's tree: turns, clusters, chains and chain-length statistics."""
        check_session_id(session_id)
        s = self._session(session_id)
        with s.lock:
            return {
                "turns": len(s.turns),
                "clusters": len(s.tree.clusters),
                "chains": chain_length_stats(s.tree.chains.lengths()),
                "comparisons": s.tree.comparisons,
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
            self.store.delete_session(session_id)
            self._reload(session_id, s)
        with self._lock:
            self._sessions.pop(session_id, None)

    def close(self) -> None:
        self.store.close()
