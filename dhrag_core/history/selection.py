"""DH-RAG history selection (D_h^HM and D_h^CoT): which stored turns a query gets as history.

Hierarchical matching (cluster -> summary node -> turn) and chain tracking choose the thread T*
the query continues; every turn of T*'s latest window is then weighed like the update rule,
``alpha * relevance + (1 - alpha) * recency``, with recency counted in turns of the thread, and
the ``history_turns`` best kept.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from dhrag_core.algorithm import scoring
from dhrag_core.algorithm.coreference import cue_topic
from dhrag_core.algorithm.discourse import is_follow_up
from dhrag_core.algorithm.hierarchy import TreeMatch
from dhrag_core.algorithm.rewriting import names
from dhrag_core.algorithm.summaries import Summariser
from dhrag_core.algorithm.topic_shift import (
    Shift,
    back_reference,
    decide,
    is_unanswered,
    persons,
    shift_features,
    turn_words,
)
from dhrag_core.history.labels import cluster_labels, summary_text
from dhrag_core.history.policy import SessionView, ThreadPolicy
from dhrag_core.history.session import SessionState, Threads
from dhrag_core.records import SelectedTurn, Turn, Vector
from dhrag_core.settings import Settings

__all__ = ["Selector", "ThreadChoice", "ThreadDecision", "asks_follow_up", "hedged_threads"]

Clock = Callable[[], float]

_CHAIN_WINDOW = 64  # latest turns of a thread weighed for selection
_THREADS_RANKED = 8  # threads ranked per query (the rest need no order)
_SHIFT_WINDOW = 64  # latest turns of the session the thread decision reads
_UNRELATED = 0.25  # calibrated similarity below which a turn tells nothing of the query
_COHERENT = 0.5  # ...at or below which a turn's topic is not its anchor's


@dataclass(frozen=True)
class ThreadDecision:
    """The fitted thread decision for one query and what it read: the earlier answered turns
    (ids, oldest first), their question and answer similarities to the query, their threads,
    and the features; ``anchor`` is the id of the turn the query continues."""

    shift: Shift
    anchor: str | None
    turn_ids: tuple[str, ...]
    features: np.ndarray
    question_sims: np.ndarray
    answer_sims: np.ndarray
    threads: np.ndarray


@dataclass(frozen=True)
class ThreadChoice:
    """One query's choice of threads, made once and read by everything after it: selection
    (``threads``), the expansion of the query (``follow_up`` and ``in_latest_thread``) and
    the recording of its turn (``joins``, ``new_thread``; valid while the session is at
    ``version``, else ``add`` decides again)."""

    session_id: str
    query: str
    follow_up: bool
    """The question names nothing of its own ("who built it?"; ``discourse.is_follow_up``)."""
    threads: tuple[tuple[SelectedTurn, ...], ...]
    """The selection inside T* first, then inside each runner-up thread searched."""
    in_latest_thread: bool
    """T* is the thread of the session's latest turn."""
    joins: int | None
    """The thread a turn recorded for this query joins (``None``: as the tree links it)."""
    new_thread: bool
    """...or whether it starts one of its own (a new topic)."""
    version: int

    @property
    def t_star(self) -> int | None:
        """T*: the thread selection chose (``None`` without history)."""
        return self.threads[0][0].chain_id if self.threads and self.threads[0] else None


def asks_follow_up(query: str) -> bool:
    """The follow-up rule, in one place: the question names nothing of its own
    (``discourse.is_follow_up``); a vector given without its text is not one."""
    return bool(query) and is_follow_up(query)


def _names_elsewhere(query: str, turns: Sequence[Turn], threads: np.ndarray,
                     latest: int) -> bool:
    """Whether the question names (a capitalised word) something found in another thread's
    turns and not in the latest turn's thread ("the other pyramids at Giza")."""
    named = names(query)
    if not named:
        return False
    mine = threads == threads[latest]
    here = frozenset().union(*(turn_words(turns[int(i)].query, turns[int(i)].response)
                               for i in np.flatnonzero(mine)))
    there = frozenset().union(*(turn_words(turns[int(i)].query, turns[int(i)].response)
                                for i in np.flatnonzero(~mine)))
    return bool((named & there) - here)


def _refers_elsewhere(query: str, turns: Sequence[Turn], threads: np.ndarray,
                      latest: int) -> bool:
    """Whether the question's "he" or "she" agrees with another thread's turns and with none
    of the latest turn's thread ("how many movies were made from his books?" after turns on
    cashew trees, Dickens before them)."""
    asked = persons(query)
    if not asked:
        return False
    mine = threads == threads[latest]
    here = frozenset().union(*(persons(turns[int(i)].query + " " + turns[int(i)].response)
                               for i in np.flatnonzero(mine)))
    there = frozenset().union(*(persons(turns[int(i)].query + " " + turns[int(i)].response)
                                for i in np.flatnonzero(~mine)))
    return bool((asked & there) - here)


def _names_new(query: str, turns: Sequence[Turn]) -> bool:
    """Whether the question names (a capitalised word) something no earlier turn holds
    ("How do Berlin Wall guards..." after turns on the Great Wall): a subject of its own."""
    named = names(query)
    if not named:
        return False
    held = frozenset().union(*(turn_words(t.query, t.response) for t in turns))
    return bool(named - held)


def _relates(s: SessionState, t: SelectedTurn, qv: Vector) -> bool:
    """Whether a selected turn's question or answer relates to the query (calibrated
    similarity above ``_UNRELATED``): one that does not is stale in a drifting thread, whatever
    its recency."""
    sims = [float(s.queries.rows([t.turn.turn_id])[0] @ qv)]
    if t.turn.response_vector is not None:
        sims.append(float(t.turn.response_vector @ qv))
    return max(sims) > _UNRELATED


def _coherent(s: SessionState, t: SelectedTurn, anchor: str) -> bool:
    """Whether a selected turn's topic vector is the anchor's topic (calibrated similarity
    above ``_COHERENT``): a turn of a thread's older topic that shares a word with the query
    ("built") moves the retrieval but is not handed to the LLM."""
    topics = s.tree.topic_rows([t.turn.turn_id, anchor])
    return float(topics[0] @ topics[1]) > _COHERENT


def hedged_threads(threads: Sequence[tuple[int, float]], n: int,
                   margin: float | None) -> list[int]:
    """T* and the runner-ups among the first ``n`` ``(thread, relevance)`` whose relevance is
    within ``margin`` of T*'s (all ``n`` when ``margin`` is ``None``): the threads searched."""
    top = threads[0][1]
    return [t for i, (t, rel) in enumerate(threads[:n])
            if i == 0 or margin is None or rel >= top - margin]


class Selector:
    """Selects history turns for a query under ``settings`` (its ablation switches apply);
    ``thread_policy`` may replace the engine's choice of threads (``policy``)."""

    def __init__(self, settings: Settings, summariser: Summariser,
                 thread_policy: ThreadPolicy | None = None) -> None:
        self.settings = settings
        self.summariser = summariser
        self.thread_policy = thread_policy

    def choose(self, s: SessionState, session_id: str, qv: Vector, n: int, clock: Clock,
               query: str) -> ThreadChoice:
        """The query's ``ThreadChoice``: the selections inside its ``n`` threads
        (``select_threads``), the thread its turn will join (``continued_thread``) and whether
        T* is the latest turn's thread; the caller holds ``s.lock``."""
        asks = asks_follow_up(query)
        threads = self.select_threads(s, qv, n, clock, follow_up=asks, query=query)
        joins, new_thread = self.continued_thread(s, qv, query, follow_up=asks)
        latest = s.tree.chain_of(s.latest) if s.latest is not None and s.tree.has_chains \
            else None
        first = threads[0]
        return ThreadChoice(
            session_id=session_id, query=query, follow_up=asks,
            threads=tuple(tuple(t) for t in threads),
            in_latest_thread=bool(first) and first[0].chain_id == latest,
            joins=joins, new_thread=new_thread, version=s.version)

    def select_threads(
        self, s: SessionState, qv: Vector, n: int, clock: Clock, *, follow_up: bool = False,
        query: str = "",
    ) -> list[list[SelectedTurn]]:
        """The selection inside each of the ``n`` threads the query most likely continues, T*
        first, runner-ups only within ``hedge_margin`` of T*'s relevance; one list without
        chains (``use_chains=False``) or history. A question the fitted thread decision reads
        as a new topic gets T*'s turns with ``on_topic`` False: none is handed to the LLM.
        Only T*'s turns carry their cluster label and summary text: the runner-ups' shape the
        search and are not shown.
        ``follow_up``: the query names nothing of its own (``discourse.is_follow_up``);
        ``query``: its text, for a thread policy."""
        if not s.turns:
            return [[]]
        if not self.settings.ablations.use_chains:
            return [self._select_flat(s, qv, clock)]
        if not s.tree.has_chains:
            return [[]]
        threads, matches = self.threads(s, qv, follow_up=follow_up, limit=self._limit(n),
                                        query=query)
        decided = self.shift(s, qv, query, follow_up)
        anchor = None
        new_topic = False
        if decided is not None and self.thread_policy is None:
            anchor = decided.anchor
            new_topic = decided.shift.thread is None
        kept = hedged_threads(threads, n, self.settings.threads.hedge_margin)
        out = [self._select_in_thread(s, qv, t, matches, clock, describe=i == 0,
                                      anchor=anchor if i == 0 else None, follow_up=follow_up)
               for i, t in enumerate(kept)]
        if new_topic:
            # no earlier turn is about a new topic: none is handed on; the thread the scores
            # choose still moves the retrieval, as a misjudged continue needs it
            out[0] = [replace(t, on_topic=False) for t in out[0]]
        return out

    def continued_thread(self, s: SessionState, qv: Vector, query: str = "", *,
                         follow_up: bool | None = None) -> tuple[int | None, bool]:
        """The thread a new turn joins because its query continues it, and whether it starts
        one of its own instead (a new topic, ``thread_decision="fitted"``). Fitted: the
        thread decided for its query; by scores (``thread_link``): the T* that selection
        chose, when the query matched it well enough."""
        cfg = self.settings
        if not cfg.ablations.use_chains or not s.tree.has_chains:
            return None, False
        if follow_up is None:
            follow_up = asks_follow_up(query)
        decided = self.shift(s, qv, query, follow_up)
        if decided is not None and self.thread_policy is None:
            if decided.shift.thread is None:
                return None, True
            thread, relevance = self.threads(s, qv, follow_up=follow_up, limit=self._limit(1),
                                             query=query)[0][0]
            # a question that stays but hardly matches its thread links by its topic vector:
            # an abrupt switch the decision missed still starts a thread of its own
            weak = (cfg.threads.thread_link is not None and relevance < cfg.threads.thread_link
                    and not follow_up)  # a follow-up's own words name no topic to link by
            return (None if decided.shift.stay and weak else thread), False
        if cfg.threads.thread_link is None:
            return None, False
        thread, relevance = self.threads(s, qv, follow_up=follow_up,
                                         limit=self._limit(1), query=query)[0][0]
        return (thread if relevance >= cfg.threads.thread_link else None), False

    def shift(self, s: SessionState, qv: Vector, query: str,
              follow_up: bool) -> ThreadDecision | None:
        """The fitted thread decision for the query (``topic_shift.decide``) over the latest
        answered turns of the session; ``None`` when it does not apply (``thread_decision``
        is ``"scores"``, no chains, or no answered turn)."""
        cfg = self.settings
        if (cfg.threads.thread_decision != "fitted" or not cfg.ablations.use_chains
                or not s.tree.has_chains):
            return None
        key = qv.tobytes() + (b"f" if follow_up else b"") + b"\0" + query.encode(
            "utf-8", "replace")
        memo = s.shift_memo
        if memo is not None and memo[0] == key and memo[1] == s.version:
            held: ThreadDecision | None = memo[2]
            return held
        recent = heapq.nlargest(_SHIFT_WINDOW, s.turns.values(), key=lambda t: t.index)
        # turns being evicted or merged away have left the tree already
        answered = [t for t in reversed(recent) if not is_unanswered(t.response)
                    and s.tree.chain_of(t.turn_id) is not None]
        found: ThreadDecision | None = None
        if answered:
            ids = tuple(t.turn_id for t in answered)
            q_sims = (s.queries.rows(list(ids)) @ qv).astype(np.float64)
            a_sims = np.array([q if t.response_vector is None
                               else float(t.response_vector @ qv)
                               for t, q in zip(answered, q_sims, strict=True)])
            threads = np.array([s.tree.chain_of(i) or 0 for i in ids], dtype=np.int64)
            latest = len(answered) - 1
            back = back_reference(query)
            cues = cfg.ablations.use_cues
            features = shift_features(
                turn_words(query, ""), follow_up and cues, back and cues,
                q_sims, a_sims, [turn_words(t.query, t.response) for t in answered], threads,
                latest, s.next_index - 1 - answered[-1].index)
            named = cfg.ablations.use_cues and not back and (
                cue_topic(query)[0] is not None or _names_new(query, answered)
                or _refers_elsewhere(query, answered, threads, latest))
            shift = decide(features, q_sims, a_sims, threads, latest, names_subject=named,
                           held=cfg.ablations.use_cues and follow_up and not back
                           and not _names_elsewhere(query, answered, threads, latest))
            found = ThreadDecision(shift, None if shift.anchor is None else ids[shift.anchor],
                                   ids, features, q_sims, a_sims, threads)
        s.shift_memo = (key, s.version, found)
        return found

    def _limit(self, n: int) -> int:
        """How many threads selection ranks: the same for ``select`` and the ``add`` after
        it (which reuses the ranking), at least the ``n`` searched."""
        return max(n, self.settings.threads.thread_variants, _THREADS_RANKED)

    def threads(self, s: SessionState, qv: Vector, *, follow_up: bool = False,
                limit: int | None = None, query: str = "") -> Threads:
        """Chains (threads) by how well the query continues them, T* first, with their
        relevance (the first ``limit``; all when None); and the tree matches.

        A chain's relevance is its best matched turn's (or its centroid's) similarity to the
        query; chains active lately get ``thread_recency`` more, so an elliptical follow-up,
        relevant to nothing in particular, stays in the thread of the turn before it. A
        ``follow_up`` (a question that names nothing) leaves the latest turn's thread only for
        one ``follow_up_margin`` more relevant: its "it" is what the latest turn spoke of,
        however alike its wording is to an older question's. A ``thread_policy`` then sees
        this ranking of every thread (and ``query``) and may replace it.
        """
        key = qv.tobytes() + (b"f" if follow_up else b"") + str(limit).encode()
        if self.thread_policy is not None:  # its choice may read the words; else the vector
            key += b"\0" + query.encode("utf-8", "replace")  # decides: select's ranking serves add
        memo = s.thread_memo
        if memo is not None and memo[0] == key and memo[1] == s.version:
            return memo[2]
        cfg = self.settings
        tree = s.tree
        matches = tree.match(qv, hierarchical=cfg.ablations.use_hierarchy,
                             clusters=cfg.ablations.use_clustering)
        matched: dict[int, float] = {}
        for m in matches:
            cid = tree.chain_of(m.turn_id)
            if cid is not None:
                matched[cid] = max(matched.get(cid, -1.0), m.similarity)
        slots, rel, last = tree.rank_chains(qv, matched)
        bonus = cfg.threads.thread_recency if cfg.ablations.use_recency else 0.0
        score = scoring.thread_score(rel, s.next_index - last, bonus, cfg.threads.thread_half_life)
        # a policy may put any thread first: it sees them all
        order = scoring.top_order(score, None if self.thread_policy is not None else limit)
        current = tree.chain_of(s.latest) if s.latest is not None else None
        best = order[0]
        if current is not None:
            stay = int(np.searchsorted(slots, tree.chain_slot(current)))
            weak = cfg.threads.thread_switch is not None and rel[best] < cfg.threads.thread_switch
            held = (follow_up and cfg.ablations.use_cues
                    and rel[best] - rel[stay] < cfg.threads.follow_up_margin)
            if stay != best and (weak or held):
                order = [stay, *(i for i in order if i != stay)][: len(order)]
        ranked = [(tree.chain_at(int(slots[i])), float(rel[i])) for i in order]
        decided = self.shift(s, qv, query, follow_up)
        if decided is not None and decided.shift.thread is not None:
            chosen = decided.shift.thread
            first = int(np.searchsorted(slots, tree.chain_slot(chosen)))
            ranked = [(chosen, float(rel[first])),
                      *((c, r) for c, r in ranked if c != chosen)][: len(ranked)]
        if self.thread_policy is not None:
            ranked = self._by_policy(s, query, qv, ranked)[:limit]
        found = ranked, matches
        s.thread_memo = (key, s.version, found)
        return found

    def _by_policy(self, s: SessionState, query: str, qv: Vector,
                   ranked: list[tuple[int, float]]) -> list[tuple[int, float]]:
        assert self.thread_policy is not None
        chosen = self.thread_policy.order(SessionView(s), query, qv, list(ranked))
        if chosen is None:
            return ranked
        out = [(int(c), float(r)) for c, r in chosen]
        unknown = [c for c, _ in out if not s.tree.has_chain(c)]
        if not out or unknown or len({c for c, _ in out}) != len(out):
            raise ValueError(
                f"{type(self.thread_policy).__name__}.order must return distinct chain ids of "
                f"the session (or None), got {chosen!r}")
        return out

    def select_in(self, s: SessionState, qv: Vector, thread: int,
                  clock: Clock) -> list[SelectedTurn]:
        """The selection inside a given thread, as if the query continued it (no labels or
        summaries): what T*'s would be were ``thread`` chosen."""
        matches = s.tree.match(qv, hierarchical=self.settings.ablations.use_hierarchy,
                               clusters=self.settings.ablations.use_clustering)
        return self._select_in_thread(s, qv, thread, matches, clock, describe=False)

    def _select_in_thread(
        self, s: SessionState, qv: Vector, thread: int, matches: Sequence[TreeMatch],
        clock: Clock, *, describe: bool = True, anchor: str | None = None,
        follow_up: bool = False,
    ) -> list[SelectedTurn]:
        """DH-RAG selection inside ``thread``: every turn of its latest window is weighed,
        with recency counted in turns of that thread (other threads' turns do not age it), so
        what a thread gets does not depend on how many other threads the session holds.

        With the fitted thread decision, unanswered turns are not candidates (they ground
        nothing); ``anchor``, the turn the question was judged to continue, comes first; the
        others are kept only when related to the question (any, for a ``follow_up``: its
        words name nothing to relate to), and handed to the LLM only when on the anchor's
        topic (else ``on_topic`` is False): a thread drifts, and a turn of its older topic is
        stale there whatever its recency."""
        members = s.tree.chain_latest(thread, _CHAIN_WINDOW)
        if self.settings.threads.thread_decision == "fitted":
            members = [m for m in members if not is_unanswered(s.turns[m].response)] \
                or members
        via: dict[str, list[str]] = {m: ["chain"] for m in members}
        for m in matches:
            if m.turn_id in via:
                via[m.turn_id].insert(0, "hierarchy")
        via[members[-1]].append("recent")
        ages = range(len(members), 0, -1)
        if anchor is None or anchor not in via:
            return self._weigh(s, qv, via, ages, clock, describe=describe, root=members[0])
        chosen = self._weigh(s, qv, via, ages, clock, describe=describe, root=members[0],
                             first=anchor)
        out = []
        for t in chosen:
            if t.turn.turn_id == anchor:
                out.append(t)
            elif follow_up or _relates(s, t, qv):  # else stale: dropped
                out.append(t if _coherent(s, t, anchor) else replace(t, on_topic=False))
        return out

    def _select_flat(self, s: SessionState, qv: Vector, clock: Clock) -> list[SelectedTurn]:
        """Selection without threads (``use_chains=False``): matched turns and the latest turn
        of the session, recency counted in turns of the session."""
        via: dict[str, list[str]] = {}
        for m in s.tree.match(qv, hierarchical=self.settings.ablations.use_hierarchy,
                              clusters=self.settings.ablations.use_clustering):
            via.setdefault(m.turn_id, []).append("hierarchy")
        if s.latest is not None:
            via.setdefault(s.latest, []).append("recent")
        return self._weigh(s, qv, via, [s.next_index - s.turns[t].index for t in via], clock)

    def _weigh(self, s: SessionState, qv: Vector, via: dict[str, list[str]],
               ages: Sequence[float], clock: Clock, *, describe: bool = True,
               root: str | None = None, first: str | None = None) -> list[SelectedTurn]:
        """Weigh the candidates ``alpha * relevance + (1 - alpha) * recency`` (relevance
        sharpened around the best one) and keep the ``history_turns`` best, then ``root``
        (the thread's opening turn) if they do not hold it, weighed ``root_weight`` times its
        relevance; with ``describe``, each with its cluster's label and its summary node's
        text."""
        cfg = self.settings
        alpha = cfg.weighting.alpha if cfg.ablations.use_recency else 1.0
        ids = list(via)
        turns = [s.turns[i] for i in ids]
        raw = scoring.relevance(self._relevance_sims(s, ids, qv))
        rel = raw if cfg.weighting.relevance_contrast is None else scoring.contrast(
            raw, cfg.weighting.relevance_contrast)
        now = float(clock())
        rec = scoring.recency(ages, cfg.weighting.half_life_turns,
                              [now - t.timestamp for t in turns], cfg.weighting.half_life_seconds)
        weight = scoring.combined_weight(rel, rec, alpha)
        order = [int(i) for i in np.lexsort((-np.array([t.index for t in turns]), -weight))]
        if first is not None:
            at = ids.index(first)
            order = [at, *(i for i in order if i != at)]
        chosen = order[: cfg.weighting.history_turns]
        if root is not None and cfg.weighting.root_weight > 0:
            r = ids.index(root)
            if r not in chosen and raw[r] > 0:
                rel[r] = raw[r]
                weight[r] = cfg.weighting.root_weight * raw[r]
                via[root].append("root")
                chosen.append(r)
        labels = cluster_labels(s, {turns[i].cluster_id for i in chosen}) if describe else {}
        return [
            SelectedTurn(
                turn=turns[i], relevance=float(rel[i]), recency=float(rec[i]),
                weight=float(weight[i]), via=tuple(via[ids[i]]), cluster_id=turns[i].cluster_id,
                cluster_label=labels.get(turns[i].cluster_id, ""),
                summary=summary_text(s, self.summariser, turns[i]) if describe else None,
                chain_id=turns[i].chain_id,
            )
            for i in chosen
        ]

    def _relevance_sims(self, s: SessionState, ids: list[str], qv: Vector) -> np.ndarray:
        """Similarities the candidates' relevance is taken from
        (``Settings.weighting.relevance``): of their queries, of their topic vectors, or the
        larger of the two."""
        mode = self.settings.weighting.relevance
        q_sims = s.queries.rows(ids) @ qv
        if mode == "query":
            return q_sims
        t_sims = s.tree.topic_rows(ids) @ qv
        return t_sims if mode == "topic" else np.maximum(q_sims, t_sims)
