"""The update rule of H (paper eq. 11-14) and the ranking it implies.

One turn's update: insert the triple (or merge it into a near-duplicate: by vector, or by words
when the embedder gives different questions one vector), weigh every stored triple by
``alpha * relevance + (1 - alpha) * recency`` against the new query, and evict the lowest
weights beyond ``capacity`` -- from the store and the indexes, in one store transaction.

``rank_by_weight`` (behind ``HistoryDatabase.search``) ranks by this same weight over every
stored turn, so what search ranks last is what the next update evicts first. DH-RAG selection
(``selection.py``) weighs by the same formula but only its candidates, with recency counted in
turns of the query's thread and relevance taken as ``Settings.weighting.relevance`` says.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from dhrag_core import compact
from dhrag_core.algorithm import scoring
from dhrag_core.embedding import token_set
from dhrag_core.history.policy import NEW_CHAIN, ChainPolicy, SessionView
from dhrag_core.history.selection import Selector
from dhrag_core.history.session import SessionState
from dhrag_core.history.sessions import SessionCache
from dhrag_core.records import HistoryHit, Passage, Turn, Vector
from dhrag_core.settings import Settings

__all__ = ["AddResult", "UpdateRule", "rank_by_weight", "weights"]

log = logging.getLogger(__name__)

_PRUNE_FROM = 4096  # stored turns from which eviction weighs only the turns that may go
_SAME_VECTOR = 1e-4
"""1 - cosine under which two stored (int8-coded) vectors are one vector, a code or two apart
(two wordings an embedder tells apart sit much further apart)."""


@dataclass(frozen=True)
class AddResult:
    """What one ``add`` did: the stored turn, whether it merged a duplicate, what it evicted."""

    turn: Turn
    merged: bool
    evicted: tuple[str, ...]
    timings: Mapping[str, float] = field(default_factory=dict, repr=False, compare=False)
    """Seconds: ``encode_s`` (embedding the response and passages) and ``update_s`` (weights,
    eviction, organisation and the store write)."""


def weights(
    s: SessionState, settings: Settings, slots: np.ndarray, sims: np.ndarray, index: int,
    now: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(relevance, recency, weight) of the turns in ``slots`` given their query similarities,
    ages counted in turns of the session (up to ``index``) and seconds (up to ``now``)."""
    rel = scoring.relevance(sims)
    rec = scoring.recency(
        index - s.slot_index[slots], settings.weighting.half_life_turns,
        now - s.slot_time[slots], settings.weighting.half_life_seconds,
    )
    return rel, rec, scoring.combined_weight(rel, rec, settings.weighting.alpha)


def rank_by_weight(
    s: SessionState, settings: Settings, qv: Vector, k: int, now: float
) -> list[HistoryHit]:
    """The ``k`` stored turns with the highest update-rule weight for ``qv``, best first
    (ties: the newer turn first), scored exactly over every stored turn in one pass."""
    slots, sims = s.similarities(qv)
    rel, rec, w = weights(s, settings, slots, sims, s.next_index, now)
    top = np.argpartition(-w, k - 1)[:k] if w.size > k else np.arange(w.size)
    order = top[np.lexsort((-s.slot_index[slots[top]], -w[top]))]
    return [
        HistoryHit(
            turn=s.turns[s.queries.key_at(int(slots[i]))], relevance=float(rel[i]),
            recency=float(rec[i]), weight=float(w[i]),
        )
        for i in order
    ]


def _same_words(a: str, b: str) -> bool:
    """Whether two texts say the same in words: the same content words (``token_set``), or,
    for texts without any, the same words once case-folded."""
    words_a, words_b = token_set(a), token_set(b)
    if words_a or words_b:
        return words_a == words_b
    return a.casefold().split() == b.casefold().split()


def _same_vector(a: Vector, b: Vector) -> bool:
    """Whether two stored vectors are one (``_SAME_VECTOR``)."""
    norms = float(np.linalg.norm(a)) * float(np.linalg.norm(b))
    return norms > 0.0 and float(a @ b) >= (1.0 - _SAME_VECTOR) * norms


class UpdateRule:
    """Applies one turn to a session: merge or insert, evict, organise, write."""

    def __init__(self, settings: Settings, sessions: SessionCache, selector: Selector,
                 chain_policy: ChainPolicy | None = None) -> None:
        self.settings = settings
        self.sessions = sessions
        self.selector = selector
        self.chain_policy = chain_policy

    def apply(
        self, session_id: str, s: SessionState, query: str, items: list[Passage], response: str,
        meta: dict[str, Any], vectors: tuple[Vector, Vector | None, Vector], now: float,
        joins: tuple[int | None, bool] | None = None,
    ) -> AddResult:
        """Store the turn (its query, response and passage ``vectors``) at time ``now``;
        the caller holds ``s.lock``. ``joins``: the thread the turn joins and whether it
        starts one, as chosen for its query at this version of the session (else decided
        here). On any failure the session is reloaded (or marked to reload on its next use)
        and the error raised."""
        qv, rv, pv = vectors
        # the turn's passage_vectors are the one copy kept of the passages' vectors
        items = [replace(p, vector=None) if p.vector is not None else p for p in items]
        index = s.next_index
        slots, sims = s.similarities(qv)
        # the response as the turn will store it: the one both sides of a comparison keep
        stored_rv = None if rv is None else compact.rounded(rv)
        dup = self._near_duplicate(s, slots, sims, (query, qv), (response, stored_rv))
        if dup is not None:
            turn = self._merged(dup, index, query, items, response, meta, vectors, now)
        else:
            turn = Turn(
                session_id=session_id, turn_id=uuid.uuid4().hex, index=index, query=query,
                passages=tuple(items), response=response, timestamp=now, query_vector=qv,
                response_vector=rv, passage_vectors=pv, metadata=meta,
            )
        size = len(s.turns) + (0 if dup is not None else 1)
        evicted = self._eviction(
            s, slots, sims, index, now, size - self.settings.limits.capacity, turn.turn_id
        )
        try:
            for tid in [*evicted, *([dup.turn_id] if dup is not None else [])]:
                s.tree.remove(tid)
            thread, new_chain = joins if joins is not None \
                else self.selector.continued_thread(s, qv, query)
            if self.chain_policy is not None:
                thread, new_chain = self._by_policy(s, turn, thread, new_chain)
            cluster_id, chain_id, moved = s.tree.insert(turn, thread, new_chain=new_chain)
            turn = replace(turn, cluster_id=cluster_id, chain_id=chain_id)
            upsert = [turn] + [replace(s.turns[tid], cluster_id=cid)
                               for tid, cid in moved.items() if tid in s.turns]
            s.version = self.sessions.store.apply(
                session_id, upsert=upsert, delete=evicted, expected_version=s.version
            )
        except BaseException:
            # the tree may be ahead of the store: rebuild it now, or (store unreachable) on
            # the next call, without hiding the error that stopped this one
            try:
                self.sessions.reload(session_id, s)
            except Exception:
                s.version = -1
                log.warning("session %r will reload on its next use", session_id)
            raise
        s.drop(evicted)
        s.put(upsert)
        return AddResult(turn=turn, merged=dup is not None, evicted=tuple(evicted))

    def _by_policy(self, s: SessionState, turn: Turn, proposed: int | None,
                   new: bool = False) -> tuple[int | None, bool]:
        """(the chain to prefer, whether to start one) as the chain policy decides (``None``:
        the engine's ``proposed`` and ``new``)."""
        assert self.chain_policy is not None
        decided = self.chain_policy.link(SessionView(s), turn, proposed)
        if decided is None:
            return proposed, new
        if decided == NEW_CHAIN:
            return None, True
        if isinstance(decided, bool) or not isinstance(decided, int) or not s.tree.has_chain(
                decided):
            raise ValueError(f"{type(self.chain_policy).__name__}.link must return a chain id "
                             f"of the session, NEW_CHAIN or None, got {decided!r}")
        return decided, False

    def _near_duplicate(
        self, s: SessionState, slots: np.ndarray, sims: np.ndarray,
        query: tuple[str, Vector], response: tuple[str, Vector | None],
    ) -> Turn | None:
        """The stored turn the new one repeats: the closest whose query is above
        ``merge_threshold`` and whose response matches too (the same text, or close vectors:
        a derived vector reflects the passages, not the wording); several stored turns may
        share a query with different answers, and the first must not hide a true duplicate.

        Vectors are evidence only from an embedder that tells texts apart. When a stored
        question in other words has the new query's very vector (llama-index's
        ``MockEmbedding`` gives every text one), this one does not: every vector comparison
        then gives way to a comparison of words (``_same_words``), so distinct turns are kept.
        """
        threshold = self.settings.weighting.merge_threshold
        close = np.flatnonzero(sims >= threshold)
        if close.size == 0:
            return None
        text, qv = query
        answer, rv = response
        olds = [s.turns[s.queries.key_at(int(slots[i]))]
                for i in close[np.argsort(-sims[close], kind="stable")]]
        stored_qv = compact.rounded(qv)
        blind = any(_same_vector(stored_qv, old.query_vector)
                    and not _same_words(text, old.query) for old in olds)
        for old in olds:
            if blind and not _same_words(text, old.query):
                continue
            other = old.response_vector
            if (rv is None or other is None or old.response == answer
                    or (_same_words(old.response, answer) if blind
                        else float(other.astype(np.float32) @ rv) >= threshold)):
                return old
        return None

    def _merged(
        self, old: Turn, index: int, query: str, items: list[Passage], response: str,
        meta: dict[str, Any], vectors: tuple[Vector, Vector | None, Vector], now: float,
    ) -> Turn:
        """The newer turn wins; passages are the union (newest first), capped."""
        qv, rv, pv = vectors
        seen = {p.key for p in items}
        keep = [i for i, p in enumerate(old.passages) if p.key not in seen]
        room = max(self.settings.limits.max_passages - len(items), 0)
        keep = keep[:room]
        passages = tuple(items) + tuple(old.passages[i] for i in keep)
        merged_vectors = (np.concatenate([pv, old.passage_vectors[keep]])
                          if keep else pv)
        return Turn(
            session_id=old.session_id, turn_id=old.turn_id, index=index, query=query,
            passages=passages, response=response or old.response, timestamp=now,
            query_vector=qv, response_vector=rv if rv is not None else old.response_vector,
            passage_vectors=merged_vectors, metadata={**old.metadata, **meta},
            merges=old.merges + 1, cluster_id=old.cluster_id, chain_id=old.chain_id,
        )

    def _eviction(
        self, s: SessionState, slots: np.ndarray, sims: np.ndarray, index: int, now: float,
        n: int, protect: str,
    ) -> list[str]:
        """The ``n`` turns of lowest weight (never ``protect``, the turn being written)."""
        if n <= 0:
            return []
        protected = s.queries.slot_of(protect) if protect in s.queries else None
        drop = self._lowest_one(s, slots, sims, index, now, protected) if n == 1 else None
        if drop is None:
            _, _, weight = weights(s, self.settings, slots, sims, index, now)
            if protected is not None:
                weight[slots == protected] = np.inf
            # equal weights evict the older turn (by turn index: slots are reused)
            drop = scoring.lowest_weights(weight, n, age=s.slot_index[slots])
        return [s.queries.key_at(int(slots[i])) for i in drop]

    def _lowest_one(
        self, s: SessionState, slots: np.ndarray, sims: np.ndarray, index: int, now: float,
        protected: int | None,
    ) -> np.ndarray | None:
        """The position ``lowest_weights`` picks over every turn (ties: the older), found by
        weighing only the turns whose relevance leaves them a chance: a weight is at least
        ``alpha * relevance``, so the least similar turn's weight bounds which similarities
        can still be lowest. None when that bound prunes nothing."""
        alpha = self.settings.weighting.alpha
        if sims.size < _PRUNE_FROM or alpha < 1e-6:
            return None
        j = int(np.argmin(sims))
        if protected is not None and slots[j] == protected:
            return None
        bound = float(weights(s, self.settings, slots[j : j + 1], sims[j : j + 1], index,
                              now)[2][0])
        limit = bound / alpha * (1.0 + 1e-9)  # a margin far above the rounding of the weights
        if not limit < 1.0:
            return None
        threshold = np.float32(limit)
        if float(threshold) < limit:
            threshold = np.nextafter(threshold, np.float32(np.inf))
        # any similarity above the threshold has alpha * relevance > bound: not the lowest
        cand = np.flatnonzero(sims <= threshold)
        if protected is not None:
            cand = cand[slots[cand] != protected]
        ages = s.slot_index[slots[cand]]
        if bound == 0.0:  # the least weight possible: the oldest candidate, if it has it
            oldest = cand[int(np.argmin(ages))]
            if weights(s, self.settings, slots[oldest : oldest + 1], sims[oldest : oldest + 1],
                       index, now)[2][0] == 0.0:
                return np.array([oldest])
        _, _, weight = weights(s, self.settings, slots[cand], sims[cand], index, now)
        return cand[scoring.lowest_weights(weight, 1, age=ages)]
