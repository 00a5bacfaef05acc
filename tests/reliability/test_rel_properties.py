"""Property tests of the history database, the scoring functions and the session tree.

A hypothesis state machine drives random sequences of add / search / select / delete /
reload / clock moves over several sessions with a small capacity, on a ``MemoryStore`` and on
a SQLite file, and checks after every step:

* every session holds at most ``capacity`` turns, exactly the ones a model of the sequence
  says it should (added, minus evicted, merges counted once);
* what ``add`` evicts is the lowest-weight turn(s), the weights recomputed from the outside
  with the public ``scoring`` functions (``alpha * relevance + (1 - alpha) * recency``
  against the new query, the new or merged turn protected);
* search and select never return another session's turn; scores are finite and in range;
* a new ``HistoryDatabase`` on the same store gives the same search results;
* the session tree accounts for every stored turn exactly once (one cluster, one summary
  node, one chain), agrees with the stored cluster/chain ids, and its running sums match.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from rel_support import check_tree

from dhrag_core import (
    HashingEmbedder,
    HistoryDatabase,
    Limits,
    MemoryStore,
    Settings,
    SQLiteStore,
    Tree,
    Weighting,
    softmax,
)
from dhrag_core.algorithm import scoring
from dhrag_core.algorithm.hierarchy import SessionTree
from dhrag_core.records import Turn

# -- the scoring functions ------------------------------------------------------------------

finite = st.floats(allow_nan=False, allow_infinity=False)
ages = st.floats(min_value=0.0, max_value=1e6, allow_nan=False)
half_lives = st.floats(min_value=1e-3, max_value=1e4, allow_nan=False)


@settings(deadline=None, max_examples=200)
@given(a=ages, b=ages, h=half_lives, sa=ages, sb=ages, hs=half_lives)
def test_recency_is_monotone_in_age_and_in_unit_range(
    a: float, b: float, h: float, sa: float, sb: float, hs: float
) -> None:
    young, old = min(a, b), max(a, b)
    r = scoring.recency([young, old], h)
    assert np.all((r >= 0) & (r <= 1)) and r[0] >= r[1]
    # with seconds: older in both turns and seconds is never more recent
    r2 = scoring.recency([young, old], h, [min(sa, sb), max(sa, sb)], hs)
    assert np.all((r2 >= 0) & (r2 <= 1)) and r2[0] >= r2[1]
    assert np.all(r2 <= r + 1e-15)


@settings(deadline=None, max_examples=100)
@given(age=st.floats(min_value=-1e9, max_value=0.0, allow_nan=False), h=half_lives)
def test_recency_of_negative_age_is_one(age: float, h: float) -> None:
    assert scoring.recency([age], h, [age], h)[0] == 1.0


unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@settings(deadline=None, max_examples=200)
@given(rel=st.lists(unit, min_size=1, max_size=20), data=st.data())
def test_combined_weight_alpha_ends_reduce_to_one_term(rel: list[float], data: Any) -> None:
    rec = data.draw(st.lists(unit, min_size=len(rel), max_size=len(rel)))
    assert np.array_equal(scoring.combined_weight(rel, rec, 1.0), np.asarray(rel))
    assert np.array_equal(scoring.combined_weight(rel, rec, 0.0), np.asarray(rec))
    alpha = data.draw(unit)
    w = scoring.combined_weight(rel, rec, alpha)
    lo, hi = np.minimum(rel, rec), np.maximum(rel, rec)
    assert np.all(w >= lo - 1e-12) and np.all(w <= hi + 1e-12)


@settings(deadline=None, max_examples=200)
@given(sims=st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=0, max_size=20))
def test_relevance_is_finite_and_in_unit_range(sims: list[float]) -> None:
    r = scoring.relevance(sims)
    assert np.all(np.isfinite(r)) and np.all((r >= 0) & (r <= 1))


@settings(deadline=None, max_examples=300)
@given(logits=st.lists(finite, min_size=1, max_size=30))
def test_softmax_sums_to_one_and_is_finite_for_extreme_inputs(logits: list[float]) -> None:
    w = softmax(logits)
    assert np.all(np.isfinite(w)) and np.all(w >= 0)
    assert float(w.sum()) == pytest.approx(1.0, abs=1e-9)
    assert w[int(np.argmax(logits))] == w.max()


def test_softmax_edge_cases() -> None:
    assert softmax([]).size == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warning either
        assert softmax([1e308, -1e308]).tolist() == [1.0, 0.0]
    assert softmax([5.0, 5.0, 5.0]) == pytest.approx([1 / 3] * 3)


@settings(deadline=None, max_examples=200)
@given(w=st.lists(st.floats(-1e6, 1e6), min_size=0, max_size=25), n=st.integers(-2, 30))
def test_lowest_weights_are_the_n_lowest(w: list[float], n: int) -> None:
    out = scoring.lowest_weights(w, n)
    assert len(out) == max(0, min(n, len(w))) and len(set(out.tolist())) == len(out)
    rest = sorted(set(range(len(w))) - set(out.tolist()))
    if len(out) and rest:
        assert max(w[i] for i in out) <= min(w[i] for i in rest)


# -- the state machine ----------------------------------------------------------------------

SESSIONS = ("zebra", "quokka", "ibis")
TOPICS = (
    "guinea pig hay diet",
    "bond interest rates",
    "kubernetes pod scheduling",
    "passport renewal forms",
    "great wall length",
)
ANSWERS = ("stone and brick", "about five percent", "use node affinity", "")
DIM = 64


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _eviction_weights(
    before: list[Turn], qv: np.ndarray, index: int, now: float, cfg: Settings
) -> dict[str, float]:
    """The update rule's weight of every stored turn against the new query, from outside."""
    sims = np.array([float(t.query_vector.astype(np.float64) @ qv) for t in before])
    rel = scoring.relevance(sims)
    rec = scoring.recency(
        [index - t.index for t in before], cfg.weighting.half_life_turns,
        [now - t.timestamp for t in before], cfg.weighting.half_life_seconds,
    )
    w = scoring.combined_weight(rel, rec, cfg.weighting.alpha)
    return {t.turn_id: float(x) for t, x in zip(before, w, strict=True)}


class HistoryMachine(RuleBasedStateMachine):
    """Random turns over three sessions; subclasses pick the store."""

    sqlite = False

    def __init__(self) -> None:
        super().__init__()
        self.tmp: str | None = None
        self.clock = Clock()
        self.emb = HashingEmbedder(DIM)
        self.model: dict[str, set[str]] = {s: set() for s in SESSIONS}
        self.db: HistoryDatabase | None = None
        self.memory: MemoryStore | None = None

    def _open(self) -> HistoryDatabase:
        if self.sqlite:
            assert self.tmp is not None
            store: Any = SQLiteStore(Path(self.tmp) / "h.db")
        else:
            assert self.memory is not None
            store = self.memory
        return HistoryDatabase(embedder=self.emb, store=store, settings=self.cfg,
                               clock=self.clock)

    @initialize(
        alpha=st.sampled_from([0.0, 0.3, 0.5, 1.0]),
        capacity=st.integers(1, 5),
        half_life_seconds=st.sampled_from([None, 600.0]),
    )
    def start(self, alpha: float, capacity: int, half_life_seconds: float | None) -> None:
        self.cfg = Settings(limits=Limits(capacity=capacity),
                            weighting=Weighting(alpha=alpha, half_life_turns=2.0,
                                                half_life_seconds=half_life_seconds),
                            tree=Tree(min_tree_turns=2, tree_clusters=2, tree_summaries=2,
                                      cluster_merge_every=3))
        if self.sqlite:
            self.tmp = tempfile.mkdtemp(prefix="dhrag-rel-")
        else:
            self.memory = MemoryStore()
        self.db = self._open()

    def teardown(self) -> None:
        if self.db is not None:
            self.db.close()
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)

    @property
    def d(self) -> HistoryDatabase:
        assert self.db is not None
        return self.db

    @rule(sid=st.sampled_from(SESSIONS), topic=st.sampled_from(TOPICS),
          extra=st.sampled_from(["", "", "today", "again please"]),
          answer=st.sampled_from(ANSWERS), n_passages=st.integers(0, 2))
    def add(self, sid: str, topic: str, extra: str, answer: str, n_passages: int) -> None:
        self._add_one(sid, topic, extra, answer, n_passages)

    @rule(sid=st.sampled_from(SESSIONS), turns=st.lists(
        st.tuples(st.sampled_from(TOPICS), st.sampled_from(["", "today", "again please"]),
                  st.sampled_from(ANSWERS), st.integers(0, 2), st.sampled_from([0.0, 120.0])),
        min_size=2, max_size=8))
    def add_burst(self, sid: str, turns: list[tuple[str, str, str, int, float]]) -> None:
        for topic, extra, answer, n_passages, seconds in turns:
            self.clock.now += seconds
            self._add_one(sid, topic, extra, answer, n_passages)

    def _add_one(self, sid: str, topic: str, extra: str, answer: str, n_passages: int) -> None:
        query = f"{topic} {extra} {sid}".replace("  ", " ")
        response = f"{answer} {sid}" if answer else ""
        passages = [f"{sid} passage {i} on {topic}" for i in range(n_passages)]
        before = self.d.turns(sid)
        qv = self.d.calibrate(self.emb.encode([query])[0]).astype(np.float64)
        r = self.d.add(sid, query, response, passages=passages)
        assert r.turn.session_id == sid
        ids_before = {t.turn_id for t in before}
        if r.merged:
            assert r.turn.turn_id in ids_before
            old = next(t for t in before if t.turn_id == r.turn.turn_id)
            assert float(old.query_vector @ qv) >= self.cfg.weighting.merge_threshold - 1e-6
            if response and old.response_vector is not None:
                # the response matches by text, or by vector (the vector the database gave
                # it: derived from the passages, or encoded)
                rv = r.turn.response_vector
                assert rv is not None
                assert (old.response == response
                        or float(old.response_vector @ rv)
                        >= self.cfg.weighting.merge_threshold - 1e-6)
        else:
            assert r.turn.turn_id not in ids_before
            # no stored turn was a near duplicate of the query *and* the response
            thr = self.cfg.weighting.merge_threshold
            for t in before:
                if float(t.query_vector @ qv) >= thr + 1e-6:
                    assert response and t.response_vector is not None
                    rv = r.turn.response_vector
                    assert rv is not None and t.response != response
                    assert float(t.response_vector @ rv) < thr - 1e-6, "duplicate not merged"
        expected_evicted = len(before) + (0 if r.merged else 1) - self.cfg.limits.capacity
        assert len(r.evicted) == max(0, expected_evicted)
        assert r.turn.turn_id not in r.evicted
        if r.evicted:
            w = _eviction_weights(before, qv, r.turn.index, self.clock.now, self.cfg)
            w.pop(r.turn.turn_id, None)  # a merged turn is protected
            kept = [x for tid, x in w.items() if tid not in r.evicted]
            gone = [w[tid] for tid in r.evicted]
            if kept:
                assert max(gone) <= min(kept) + 1e-6, (gone, kept)
        event("add: merged" if r.merged else "add: new turn")
        event(f"add: evicted {len(r.evicted)}")
        self.model[sid] = (self.model[sid] - set(r.evicted)) | {r.turn.turn_id}

    @rule(seconds=st.sampled_from([0.0, 1.0, 300.0, 5000.0]))
    def tick(self, seconds: float) -> None:
        self.clock.now += seconds

    @rule(sid=st.sampled_from(SESSIONS), topic=st.sampled_from(TOPICS), k=st.integers(1, 6))
    def search(self, sid: str, topic: str, k: int) -> None:
        hits = self.d.search(sid, f"{topic} {sid}", k=k)
        assert len(hits) == min(k, len(self.model[sid]))
        for h in hits:
            assert h.turn.session_id == sid and sid in h.turn.query
            assert h.turn.turn_id in self.model[sid]
            for x in (h.relevance, h.recency, h.weight):
                assert np.isfinite(x) and -1e-9 <= x <= 1 + 1e-6
        weights = [h.weight for h in hits]
        assert weights == sorted(weights, reverse=True)
        if hits:  # eq. 13 recomputed from the outside, at the next turn's index and now
            turns = self.d.turns(sid)
            qv = self.d.calibrate(self.emb.encode([f"{topic} {sid}"])[0])  # as it compares
            expect = _eviction_weights(turns, qv, max(t.index for t in turns) + 1,
                                       self.clock.now, self.cfg)
            for h in hits:
                assert abs(h.weight - expect[h.turn.turn_id]) <= 1e-6
            best = max(expect.values())
            assert hits[0].weight >= best - 1e-6

    @rule(sid=st.sampled_from(SESSIONS), topic=st.sampled_from(TOPICS))
    def select(self, sid: str, topic: str) -> None:
        chosen = self.d.select(sid, f"{topic} {sid}")
        # the best weighed, then the thread's opening turn when they do not hold it
        best = [c for c in chosen if "root" not in c.via]
        assert len(best) <= self.cfg.weighting.history_turns and len(chosen) - len(best) <= 1
        assert chosen[: len(best)] == best and len({c.turn.turn_id for c in chosen}) == len(
            chosen)
        # an empty session gives nothing; a question the fitted thread decision reads as a
        # new topic may get nothing either
        assert not chosen or self.model[sid]
        every = self.d.select_threads(sid, f"{topic} {sid}", 1)[0]
        assert bool(every) == bool(self.model[sid]), "the thread still moves the retrieval"
        for c in chosen:
            assert c.turn.session_id == sid and c.turn.turn_id in self.model[sid]
            assert np.isfinite(c.weight) and 0 <= c.recency <= 1

    @rule(sid=st.sampled_from(SESSIONS))
    def delete(self, sid: str) -> None:
        self.d.delete_session(sid)
        self.model[sid] = set()
        assert self.d.size(sid) == 0 and self.d.search(sid, "anything at all", k=3) == []

    @rule()
    def reload(self) -> None:
        queries = [(s, f"{t} {s}") for s in SESSIONS for t in TOPICS[:3]]
        before = [self.d.search(s, q, k=5) for s, q in queries]
        if self.sqlite:
            self.d.close()
        self.db = self._open()
        after = [self.d.search(s, q, k=5) for s, q in queries]
        for a, b in zip(before, after, strict=True):
            # k=5 >= capacity: every turn of the session, with the same scores
            wa = {h.turn.turn_id: h for h in a}
            wb = {h.turn.turn_id: h for h in b}
            assert wa.keys() == wb.keys()
            for tid, x in wa.items():
                y = wb[tid]
                assert abs(x.weight - y.weight) <= 1e-6
                assert abs(x.relevance - y.relevance) <= 1e-6
                assert x.recency == y.recency
            # the same order, except among weights tied within float32 rounding: identical
            # vectors in different FAISS slots score a few 1e-8 apart
            for x, y in zip(a, b, strict=True):
                if x.turn.turn_id != y.turn.turn_id:
                    assert abs(x.weight - wa[y.turn.turn_id].weight) <= 1e-6

    @precondition(lambda self: self.db is not None)
    @invariant()
    def sizes_and_tree(self) -> None:
        for sid in SESSIONS:
            turns = self.d.turns(sid)
            assert len(turns) <= self.cfg.limits.capacity
            assert {t.turn_id for t in turns} == self.model[sid]
            assert all(t.session_id == sid and sid in t.query for t in turns)
            check_tree(self.d, sid)


class SQLiteHistoryMachine(HistoryMachine):
    sqlite = True


#: DHRAG_FULL_RELIABILITY=1 runs 10x the sequences
FULL = os.environ.get("DHRAG_FULL_RELIABILITY") == "1"
_machine_settings = settings(
    deadline=None, max_examples=500 if FULL else 50, stateful_step_count=30,
    suppress_health_check=[HealthCheck.too_slow],
)
TestHistoryMemory = HistoryMachine.TestCase
TestHistoryMemory.settings = _machine_settings
TestHistorySQLite = SQLiteHistoryMachine.TestCase
TestHistorySQLite.settings = _machine_settings


# -- hierarchical matching against a flat scan -----------------------------------------------

WORDS = ("hay", "pig", "bond", "rate", "pod", "node", "visa", "form", "wall", "brick", "moon",
         "orbit", "tide", "salt", "wheat", "bread")


def _tree_db(turns: list[tuple[int, int, int]], cfg: Settings) -> HistoryDatabase:
    db = HistoryDatabase(embedder=HashingEmbedder(DIM), settings=cfg, clock=Clock())
    for i, (a, b, c) in enumerate(turns):
        db.add("tree",
               f"{WORDS[a]} {WORDS[b]} question {i}",
               f"{WORDS[b]} {WORDS[c]} answer",
               passages=[f"{WORDS[c]} {WORDS[a]} fact"])
    return db


def _beam_best(tree: SessionTree, qv: np.ndarray, cfg: Settings) -> float:
    """The best similarity inside the clusters and summary nodes the beam visits, recomputed
    from the tree's public structure."""
    cids = list(tree.clusters.clusters)
    cent = np.array([float(tree.clusters.clusters[c].centroid @ qv) for c in cids])
    top_c = [cids[i] for i in np.argsort(-cent, kind="stable")[: cfg.tree.tree_clusters]]
    nodes = tree.summary_nodes(top_c)
    node_sims = np.array([float(n.vector @ qv) for n in nodes])
    top_n = [nodes[i] for i in np.argsort(-node_sims, kind="stable")[: cfg.tree.tree_summaries]]
    return max(float(tree.vectors[m] @ qv) for n in top_n for m in n.members)


turn_triples = st.lists(
    st.tuples(st.integers(0, len(WORDS) - 1), st.integers(0, len(WORDS) - 1),
              st.integers(0, len(WORDS) - 1)),
    min_size=4, max_size=40,
)


@settings(deadline=None, max_examples=30 if not FULL else 300,
          suppress_health_check=[HealthCheck.too_slow])
@given(turns=turn_triples, beams=st.tuples(st.integers(1, 3), st.integers(1, 6)),
       queries=st.lists(st.tuples(st.integers(0, len(WORDS) - 1),
                                  st.integers(0, len(WORDS) - 1)), min_size=1, max_size=4))
def test_pruned_matching_finds_the_best_turn_of_its_beam_and_flat_best_when_covered(
    turns: list[tuple[int, int, int]], beams: tuple[int, int], queries: list[tuple[int, int]]
) -> None:
    cfg = Settings(limits=Limits(capacity=1000),
                   tree=Tree(min_tree_turns=3, tree_clusters=beams[0], tree_summaries=beams[1],
                             tree_turns=3))
    db = _tree_db(turns, cfg)
    tree = check_tree(db, "tree")
    emb = db.embedder
    for a, b in queries:
        qv = db.calibrate(emb.encode([f"{WORDS[a]} {WORDS[b]}"])[0])
        pruned = tree.match(qv)
        flat = tree.match(qv, hierarchical=False)
        assert pruned and flat and all(m.summary_key is not None for m in pruned)
        for m in pruned:
            assert abs(m.similarity - float(tree.vectors[m.turn_id] @ qv)) <= 1e-5
        sims = [m.similarity for m in pruned]
        assert sims == sorted(sims, reverse=True)
        # never better than the exact scan; exactly the best of what the beam visits
        assert pruned[0].similarity <= flat[0].similarity + 1e-6
        assert abs(pruned[0].similarity - _beam_best(tree, qv, cfg)) <= 1e-5
        n_nodes = len(tree.summary_nodes(list(tree.clusters.clusters)))
        if len(tree.clusters) <= cfg.tree.tree_clusters and n_nodes <= cfg.tree.tree_summaries:
            # the beam covers the whole tree: the pruned top item is the flat top item
            assert abs(pruned[0].similarity - flat[0].similarity) <= 1e-6
            if flat[0].similarity - flat[1 if len(flat) > 1 else 0].similarity > 1e-6:
                assert pruned[0].turn_id == flat[0].turn_id


def test_summary_views_are_in_turn_order_and_end_at_the_turn() -> None:
    cfg = Settings(limits=Limits(capacity=6), tree=Tree(summary_size=3, min_tree_turns=3))
    db = _tree_db([(i % 3, (i + 1) % 4, i % 5) for i in range(20)], cfg)
    tree = check_tree(db, "tree")
    for t in db.turns("tree"):
        _, members = tree.summary_of(t.turn_id)
        assert members[-1] == t.turn_id and len(members) <= cfg.tree.summary_size
        idx = [tree.index_of[m] for m in members]
        assert idx == sorted(idx)


def test_equal_weights_evict_the_older_turn() -> None:
    """``lowest_weights`` breaks ties toward the older item; the history database must hand
    it the turns in turn order, not in (reused) index-slot order. With alpha = 1 the same
    question with different answers ties: the oldest goes, not the previous newest."""
    db = HistoryDatabase(embedder=HashingEmbedder(DIM), clock=Clock(),
                         settings=Settings(limits=Limits(capacity=2),
                                           weighting=Weighting(alpha=1.0, half_life_seconds=None)))
    answers = ["red apples", "blue skies", "green grass", "yellow sun", "purple rain"]
    ids = [db.add("s", "what colour is it", a).turn.turn_id for a in answers]
    assert [t.turn_id for t in db.turns("s")] == ids[-2:]
