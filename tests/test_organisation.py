"""The DH-RAG organisation: topic clusters, chains, summary nodes, hierarchical matching."""

from __future__ import annotations

import heapq

import numpy as np
import pytest

from dhrag_core import (
    Ablations,
    FunctionEmbedder,
    HashingEmbedder,
    HistoryDatabase,
    Limits,
    Passage,
    Settings,
    Threads,
    Tree,
    Turn,
    Weighting,
    compact,
)
from dhrag_core.algorithm.chains import ChainTracker, chain_length_stats
from dhrag_core.algorithm.clustering import TopicClusters, average_linkage, keyword_labels
from dhrag_core.algorithm.hierarchy import SessionTree
from dhrag_core.algorithm.members import OrderedMembers
from dhrag_core.embedding import l2_normalise
from dhrag_core.records import SelectedTurn
from dhrag_core.settings import with_changes
from tests.conftest import FakeClock

DIM = 32


def unit(*components: float) -> np.ndarray:
    v = np.zeros(DIM, dtype=np.float32)
    v[: len(components)] = components
    return l2_normalise(v)[0]


def noisy(base: np.ndarray, rng: np.random.Generator, scale: float = 0.15) -> np.ndarray:
    return l2_normalise(base + scale * rng.standard_normal(DIM))[0]


def test_clusters_assign_incrementally_by_threshold() -> None:
    tc = TopicClusters(DIM, threshold=0.7)
    vecs = {"a": unit(1, 0.1), "b": unit(1, 0.2), "c": unit(0, 0, 1)}
    seen: dict[str, np.ndarray] = {}
    for tid, v in vecs.items():
        tc.assign(tid, v, seen)
        seen[tid] = v
    assert tc.of["a"] == tc.of["b"] != tc.of["c"]
    assert len(tc) == 2
    tc.remove("c", vecs["c"])
    assert len(tc) == 1 and "c" not in tc.of


def test_degraded_cluster_is_split_locally_not_refit() -> None:
    rng = np.random.default_rng(0)
    tc = TopicClusters(DIM, threshold=0.3, min_quality=0.95, merge_every=10_000)
    a, b = unit(1), unit(0, 1)
    seen: dict[str, np.ndarray] = {}
    changed_total: dict[str, int] = {}
    for i in range(12):
        v = noisy(a if i % 2 == 0 else 0.6 * a + 0.8 * b, rng, 0.01)
        changed_total.update(tc.assign(f"t{i}", v, seen))
        seen[f"t{i}"] = v
    # the two directions (cosine 0.6) first share a cluster, whose quality then triggers a split
    assert len(tc) >= 2
    groups = {tc.of[f"t{i}"] for i in range(0, 12, 2)}
    assert len(groups) == 1, "members of one direction stay together after the split"
    assert all(c.quality >= 0.9 for c in tc.clusters.values())


def _same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    pairs = set(zip(a.tolist(), b.tolist(), strict=True))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist()))


def test_average_linkage_gives_scikit_learns_partition() -> None:
    from sklearn.cluster import AgglomerativeClustering

    rng = np.random.default_rng(3)
    splits = 0
    for _ in range(60):
        n, d, k = int(rng.integers(2, 80)), int(rng.integers(3, 40)), int(rng.integers(1, 6))
        centres = rng.standard_normal((k, d))
        x = centres[rng.integers(0, k, n)] + rng.uniform(0.1, 1.5) * rng.standard_normal((n, d))
        threshold = float(rng.uniform(0.05, 0.9))
        ours = average_linkage(x, threshold)
        theirs = AgglomerativeClustering(
            n_clusters=None, metric="cosine", linkage="average", distance_threshold=threshold,
        ).fit_predict(x)
        assert _same_partition(ours, theirs)
        first = [int(np.flatnonzero(ours == lab)[0]) for lab in range(ours.max() + 1)]
        assert first == sorted(first), "labels number the clusters by their first row"
        splits += 1 < len(set(ours.tolist())) < n
    assert splits > 20, "the cases must include partitions that are neither one nor all"


def test_average_linkage_merges_only_below_the_threshold() -> None:
    x = np.array([[1.0, 0.0], [0.99, 0.14], [0.0, 1.0], [0.1, 0.995], [-1.0, 0.0]])
    assert average_linkage(x, 0.05).tolist() == [0, 0, 1, 1, 2]
    assert average_linkage(x, 2.0).tolist() == [0, 0, 0, 0, 0]
    assert average_linkage(x, 0.0).tolist() == [0, 1, 2, 3, 4]
    assert average_linkage(x[:1], 0.5).tolist() == [0]


def test_a_split_does_not_import_scikit_learn() -> None:
    """Splitting a cluster must not load scikit-learn (about 90 MiB of a worker's memory)."""
    import subprocess
    import sys

    code = (
        "import sys, numpy as np\n"
        "from dhrag_core.algorithm.clustering import TopicClusters\n"
        "tc = TopicClusters(8, threshold=0.3, min_quality=0.95, merge_every=10_000)\n"
        "a, b = np.eye(8)[0], 0.6 * np.eye(8)[0] + 0.8 * np.eye(8)[1]\n"
        "seen = {}\n"
        "for i in range(12):\n"
        "    v = (a if i % 2 == 0 else b).astype(np.float32)\n"
        "    tc.assign(f't{i}', v, seen); seen[f't{i}'] = v\n"
        "assert len(tc) >= 2, 'no split happened'\n"
        "print('sklearn' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_close_clusters_merge_periodically() -> None:
    tc = TopicClusters(DIM, threshold=0.9, merge_every=3)
    seen: dict[str, np.ndarray] = {}
    # two clusters whose centroids converge as members arrive
    for i, v in enumerate([unit(1, 0.5), unit(1, -0.5), unit(1, 0.05)]):
        tc.assign(f"t{i}", v, seen)
        seen[f"t{i}"] = v
    assert len(tc) == 1 or len({tc.of[t] for t in seen}) < 3


def test_keyword_labels_prefer_distinctive_terms() -> None:
    labels = keyword_labels({
        0: ["guinea pig diet", "guinea pig cage size"],
        1: ["bond interest rates", "bond yield and interest"],
    })
    assert "guinea" in labels[0] and "pig" in labels[0]
    assert "bond" in labels[1] and "interest" in labels[1]


def test_keyword_labels_of_some_groups_still_contrast_with_the_others() -> None:
    groups = {0: ["guinea guinea diet", "guinea cage diet"], 1: ["guinea bond"]}
    assert keyword_labels({0: groups[0]}, n_terms=1) == {0: "guinea"}, "the most frequent"
    assert keyword_labels(groups, n_terms=1, only=[0]) == {0: "diet"}, (
        "guinea occurs in group 1 too: diet is the more distinctive"
    )
    assert keyword_labels(groups, n_terms=1, only=[]) == {}


def test_chains_link_related_turns_and_rejoin_an_earlier_thread() -> None:
    tracker = ChainTracker(DIM, threshold=0.8)
    wall, pig = unit(1), unit(0, 1)
    ids = {}
    for i, (tid, v) in enumerate([("w1", wall), ("w2", unit(1, 0.2)), ("p1", pig),
                                  ("p2", unit(0.1, 1)), ("w3", unit(1, 0.1))]):
        ids[tid] = tracker.link(tid, v, i)
    assert ids["w1"] == ids["w2"] == ids["w3"], "returning to the wall re-joins its chain"
    assert ids["p1"] == ids["p2"] != ids["w1"]
    stats = chain_length_stats(tracker.lengths())
    assert stats["chains"] == 2 and stats["mean"] == 2.5 and stats["histogram"] == {2: 1, 3: 1}


def _tree_with_topics(n_topics: int, per_topic: int, settings: Settings) -> SessionTree:
    from dataclasses import replace as dc_replace

    from dhrag_core import Turn

    rng = np.random.default_rng(1)
    centres = [unit(*([0.0] * t + [1.0])) for t in range(n_topics)]
    tree = SessionTree(DIM, settings)
    idx = 0
    for rep in range(per_topic):
        for t, c in enumerate(centres):
            v = noisy(c, rng, 0.1)
            turn = Turn(session_id="s", turn_id=f"{t}-{rep}", index=idx, query="q",
                        passages=(), response="", timestamp=0.0, query_vector=v,
                        response_vector=None, passage_vectors=np.zeros((0, DIM), np.float32))
            cid, chain, _ = tree.insert(turn)
            dc_replace(turn, cluster_id=cid, chain_id=chain)
            idx += 1
    return tree


def test_hierarchical_matching_prunes_and_agrees_with_flat_scan() -> None:
    s = Settings(tree=Tree(min_tree_turns=64, tree_clusters=2, tree_summaries=3, tree_turns=5,
                           cluster_threshold=0.6, chain_threshold=0.6))
    tree = _tree_with_topics(n_topics=12, per_topic=25, settings=s)
    assert len(tree) == 300
    members = [m for c in tree.clusters.clusters.values() for m in c.members]
    assert sorted(members) == sorted(tree.vectors), "every turn under exactly one cluster"
    rng = np.random.default_rng(2)
    for t in range(12):
        q = noisy(unit(*([0.0] * t + [1.0])), rng, 0.1)
        tree.comparisons = 0
        hier = tree.match(q, hierarchical=True)
        hier_cost = tree.comparisons
        tree.comparisons = 0
        flat = tree.match(q, hierarchical=False)
        assert hier[0].turn_id == flat[0].turn_id
        assert hier[0].turn_id.startswith(f"{t}-")
        assert hier_cost < tree.comparisons / 3, (hier_cost, tree.comparisons)


def test_small_trees_fall_back_to_flat_scan() -> None:
    s = Settings(tree=Tree(min_tree_turns=64))
    tree = _tree_with_topics(n_topics=3, per_topic=4, settings=s)
    tree.comparisons = 0
    tree.match(unit(1), hierarchical=True)
    assert tree.comparisons == len(tree) == 12


def test_history_persists_cluster_and_chain_ids(tmp_path, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path / 'h.db'}"
    emb = HashingEmbedder()
    db = HistoryDatabase(embedder=emb, store=url, clock=clock)
    queries = ["guinea pig diet hay", "guinea pig cage hay", "bond interest rates",
               "bond interest yields"]
    for q in queries:
        db.add("s", q, "")
    before = [(t.turn_id, t.cluster_id, t.chain_id) for t in db.turns("s")]
    assert all(c >= 0 and ch >= 0 for _, c, ch in before)
    assert before[0][1] == before[1][1] != before[2][1] == before[3][1]
    sel_before = [s.turn.turn_id for s in db.select("s", "guinea pig hay")]
    db.close()
    db2 = HistoryDatabase(embedder=emb, store=url, clock=clock)
    assert [(t.turn_id, t.cluster_id, t.chain_id) for t in db2.turns("s")] == before
    assert [s.turn.turn_id for s in db2.select("s", "guinea pig hay")] == sel_before
    assert db2.stats("s")["clusters"] == 2


def test_select_reports_why(clock: FakeClock) -> None:
    db = HistoryDatabase(embedder=HashingEmbedder(), clock=clock,
                         settings=Settings(weighting=Weighting(history_turns=3),
                                           ablations=Ablations(use_chains=False)))
    db.add("s",
           "What do guinea pigs eat?",
           "Hay.",
           passages=["Guinea pigs eat hay and vegetables."])
    db.add("s", "How do bonds pay interest?", "Coupons.", passages=["Bonds pay coupons."])
    picked = db.select("s", "Which vegetables are good for guinea pigs?")
    top = picked[0]
    assert top.turn.query == "What do guinea pigs eat?"
    assert "hierarchy" in top.via and top.relevance > picked[1].relevance
    assert "guinea" in top.cluster_label and top.summary and "guinea" in top.summary.lower()
    assert 0 <= top.recency <= 1 and top.weight == pytest.approx(
        0.5 * top.relevance + 0.5 * top.recency)
    assert any("recent" in p.via for p in picked)
    assert db.select("nobody", "anything") == []


GUINEA = [("What do guinea pigs eat?", "Guinea pigs eat hay, fresh vegetables and pellets."),
          ("How much hay do guinea pigs need each day?", "Guinea pigs need unlimited hay.")]
BONDS = [("How do government bonds pay interest?", "Bonds pay a fixed coupon twice a year."),
         ("Are bond coupons taxed?", "Bond coupons are taxed as income.")]
RETURN = "Which vegetables are safe for guinea pigs?"


def _switch_and_return(settings: Settings, clock: FakeClock) -> HistoryDatabase:
    # the thread-score rules (thread_switch, recency bonus, hedging) on hashing vectors
    db = HistoryDatabase(embedder=HashingEmbedder(), clock=clock,
                         settings=with_changes(settings, {"thread_decision": "scores"}))
    for q, a in GUINEA + BONDS:
        db.add("s", q, a, passages=[a])
    return db


def test_a_return_to_an_earlier_thread_selects_that_thread_only(clock: FakeClock) -> None:
    db = _switch_and_return(Settings(weighting=Weighting(history_turns=3)), clock)
    picked = db.select("s", RETURN)
    assert {p.turn.query for p in picked} == {q for q, _ in GUINEA}
    latest = next(p for p in picked if p.turn.query == GUINEA[-1][0])
    # recency counts turns of the thread: its latest turn is one turn old, not three
    assert "recent" in latest.via and latest.recency == pytest.approx(2 ** (-1 / 4))
    assert {p.chain_id for p in picked} == {picked[0].turn.chain_id}
    # an elliptical follow-up stays in the thread of the turn before it
    assert {p.turn.query for p in db.select("s", "And then?")} <= {q for q, _ in BONDS}


def test_every_turn_of_the_thread_is_weighed_not_only_the_matched_ones(
        clock: FakeClock) -> None:
    more = [("Can guinea pigs eat carrots?", "Guinea pigs may eat carrots as a treat."),
            ("Do guinea pigs need vitamin C?", "Guinea pigs need vitamin C every day.")]

    def picked(tree_turns: int) -> list[str]:
        # thread scores: the fitted decision also drops turns unrelated to the query
        db = HistoryDatabase(embedder=HashingEmbedder(), clock=clock,
                             settings=Settings(weighting=Weighting(history_turns=3),
                                               tree=Tree(tree_turns=tree_turns),
                                               threads=Threads(thread_decision="scores")))
        for q, a in GUINEA + more + BONDS:
            db.add("s", q, a, passages=[a])
        return [p.turn.query for p in db.select("s", RETURN)]

    # what T* gets does not hang on how many of the session's matches fall in it
    narrow = picked(1)
    assert len(narrow) == 3 and set(narrow) <= {q for q, _ in GUINEA + more}
    assert narrow == picked(8)


def test_root_weight_keeps_the_turn_that_opened_the_thread(clock: FakeClock) -> None:
    more = [("Can guinea pigs eat carrots?", "Guinea pigs may eat carrots as a treat."),
            ("Do guinea pigs need vitamin C?", "Guinea pigs need vitamin C every day.")]
    query = "Do guinea pigs need vitamin C every day?"

    def picked(**changes: float) -> list[SelectedTurn]:
        db = HistoryDatabase(embedder=HashingEmbedder(), clock=clock,
                             settings=with_changes(Settings(), {"history_turns": 1,
                                                                "thread_decision": "scores",
                                                                **changes}))
        for q, a in BONDS + GUINEA + more:
            db.add("s", q, a, passages=[a])
        return db.select("s", query)

    off = picked(root_weight=0.0)
    assert [p.turn.query for p in off] == [more[-1][0]] and "root" not in off[0].via
    on = picked(root_weight=0.6)
    assert [p.turn.query for p in on] == [more[-1][0], GUINEA[0][0]], "the thread's, not BONDS'"
    root = on[1]
    assert "root" in root.via and 0 < root.relevance < on[0].relevance
    assert root.weight == pytest.approx(0.6 * root.relevance)
    assert (on[0].turn.query, on[0].weight, on[0].via) == (
        off[0].turn.query, off[0].weight, off[0].via), "the best weighed turn is unchanged"
    # a root already among the best weighed is not added twice
    assert [p.turn.query for p in picked(root_weight=0.6, history_turns=4)].count(
        GUINEA[0][0]) == 1
    with pytest.raises(ValueError, match="root_weight"):
        Settings(weighting=Weighting(root_weight=-0.1))


def test_thread_switch_keeps_a_weak_match_in_the_current_thread(clock: FakeClock) -> None:
    leave = _switch_and_return(Settings(weighting=Weighting(history_turns=3),
                                        threads=Threads(thread_switch=None)), clock)
    assert {p.turn.query for p in leave.select("s", RETURN)} == {q for q, _ in GUINEA}
    stay = _switch_and_return(Settings(weighting=Weighting(history_turns=3),
                                       threads=Threads(thread_switch=0.99)), clock)
    picked = stay.select("s", RETURN)
    assert picked and {p.turn.query for p in picked} <= {q for q, _ in BONDS}


def test_use_chains_off_selects_across_threads(clock: FakeClock) -> None:
    db = _switch_and_return(Settings(weighting=Weighting(history_turns=3),
                                     ablations=Ablations(use_chains=False)), clock)
    picked = {p.turn.query: p for p in db.select("s", RETURN)}
    assert BONDS[-1][0] in picked and "recent" in picked[BONDS[-1][0]].via


def test_use_recency_off_weighs_by_relevance_alone(clock: FakeClock) -> None:
    on = _switch_and_return(Settings(weighting=Weighting(history_turns=3)), clock).select(
        "s", RETURN)
    off = _switch_and_return(Settings(weighting=Weighting(history_turns=3),
                                      ablations=Ablations(use_recency=False)), clock).select(
        "s", RETURN)
    assert all(p.weight == pytest.approx(p.relevance) for p in off)
    assert any(p.weight != pytest.approx(p.relevance) for p in on)
    # the candidates are the same turns: only their weights changed
    assert {p.turn.query for p in on} == {p.turn.query for p in off}


def test_use_recency_off_drops_the_recent_threads_bonus_in_the_thread_choice(
        clock: FakeClock) -> None:
    """The query matches the older thread (.55) a little better than the latest one (.5):
    the latest thread's larger recency bonus keeps it T*; without recency the older one
    wins."""
    a, b = unit(1), unit(0, 1)
    q = unit(0.55, 0.5, float(np.sqrt(1 - 0.55**2 - 0.5**2)))
    table = {"walls of stone": a, "stone walls answer": a, "bond coupons": b,
             "coupon answer": b, "tell me about lighthouse keepers history": q}

    def t_star(recency: bool) -> set[str]:
        db = HistoryDatabase(embedder=_fixed_embedder(table), clock=clock,
                             settings=Settings(threads=Threads(thread_decision="scores"),
                                               ablations=Ablations(use_recency=recency,
                                                                   use_cues=False,
                                                                   calibrate=False)))
        for question, answer in [("walls of stone", "stone walls answer")] * 2 + [
                ("bond coupons", "coupon answer")] * 2:
            db.add("s", question, answer)
        picked = db.select("s", "tell me about lighthouse keepers history")
        return {p.turn.query for p in picked}

    assert t_star(True) == {"bond coupons"}
    assert t_star(False) == {"walls of stone"}


def _fixed_embedder(table: dict[str, np.ndarray]) -> FunctionEmbedder:
    return FunctionEmbedder(lambda texts: [table.get(t, unit(0, 0, 0, 0, 0, 0, 1))
                                           for t in texts], DIM)


def test_a_follow_up_joins_the_thread_its_query_continues(clock: FakeClock) -> None:
    a, other = unit(1), unit(0, 0, 1)
    table = {"first question": a, "first answer": a, "follow-up": unit(1, 1.1),
             "answer about something else": other}

    def chain_of_follow_up(link: float | None) -> bool:
        db = HistoryDatabase(embedder=_fixed_embedder(table), clock=clock,
                             settings=Settings(threads=Threads(thread_link=link,
                                                               thread_decision="scores")))
        first = db.add("s", "first question", "first answer").turn
        follow = db.add("s", "follow-up", "answer about something else").turn
        return first.chain_id == follow.chain_id

    # its topic vector (query pulled toward an unrelated answer) alone would start a chain
    assert not chain_of_follow_up(None)
    assert chain_of_follow_up(0.3)


def _many_topics(settings: Settings, clock: FakeClock) -> HistoryDatabase:
    rng = np.random.default_rng(7)
    table = {}
    db = HistoryDatabase(embedder=_fixed_embedder(table), clock=clock, settings=settings)
    for i in range(40):
        q = f"q{i}"
        table[q] = noisy(unit(*([0.0] * (i % 8) + [1.0])), rng, 0.2)
        db.add("s", q, "")
    table["query"] = unit(0, 0, 1)
    return db


@pytest.mark.parametrize("chains", [True, False])
@pytest.mark.parametrize("switch", ["use_hierarchy", "use_clustering"])
def test_tree_switches_change_what_matching_compares(switch: str, chains: bool,
                                                     clock: FakeClock) -> None:
    """In the default path (threads) as in the flat one (``use_chains=False``)."""
    base = Settings(tree=Tree(min_tree_turns=16, tree_clusters=2, tree_summaries=2, tree_turns=4),
                    ablations=Ablations(use_chains=chains))
    counts = []
    for on in (True, False):
        db = _many_topics(with_changes(base, {switch: on}), clock)
        before = db.comparisons("s")
        assert before == db.stats("s")["comparisons"]
        db.select("s", "query")
        counts.append(db.comparisons("s") - before)
        assert db.comparisons("s") == db.stats("s")["comparisons"]
    assert counts[0] != counts[1]
    if switch == "use_hierarchy":
        assert counts[1] == 40  # flat: every turn
    else:
        assert counts[1] > 0


def test_chain_removal_keeps_turn_order_and_the_latest_turn() -> None:
    tracker = ChainTracker(DIM, threshold=0.5)
    # rounded as the tree's topic vectors are: the latest-turn index keeps them exactly
    vectors = {f"t{i}": compact.rounded(unit(1, 0.05 * i)) for i in range(5)}
    for i, (tid, v) in enumerate(vectors.items()):
        tracker.link(tid, v, i)
    chain = tracker.chains[tracker.of["t0"]]
    assert chain.members == ["t0", "t1", "t2", "t3", "t4"] and chain.last_index == 4
    tracker.remove("t2", vectors["t2"], vectors)  # a middle turn: the latest stays
    assert chain.members == ["t0", "t1", "t3", "t4"] and chain.last_index == 4
    tracker.remove("t4", vectors["t4"], vectors)  # the latest: the one before takes over
    assert chain.last_index == 3
    best = tracker.best_link(vectors["t3"])  # its latest vector is t3's now
    t3 = vectors["t3"]
    assert best is not None and best[1] == pytest.approx(float(t3 @ t3), abs=1e-6)
    tracker.restore("t2", vectors["t2"], 2, chain.id)  # an older turn slots in by index
    assert chain.members == ["t0", "t1", "t2", "t3"] and chain.indexes == [0, 1, 2, 3]
    for tid in ("t0", "t1", "t2", "t3"):
        tracker.remove(tid, vectors[tid], vectors)
    assert not tracker.chains and len(tracker) == 0


def test_summary_members_and_matching_follow_removals_and_moves() -> None:
    s = Settings(tree=Tree(min_tree_turns=20, tree_clusters=2, tree_summaries=3, tree_turns=4,
                           summary_size=3, cluster_threshold=0.6, chain_threshold=0.6))
    tree = _tree_with_topics(n_topics=4, per_topic=10, settings=s)
    rng = np.random.default_rng(5)
    for victim in ["0-0", "1-3", "2-9", "0-5", "3-1"]:
        tree.remove(victim)
        for t in range(4):
            q = noisy(unit(*([0.0] * t + [1.0])), rng, 0.1)
            hier, flat = tree.match(q), tree.match(q, hierarchical=False)
            assert victim not in {m.turn_id for m in hier}
            assert hier[0].turn_id == flat[0].turn_id
        for tid in tree.vectors:
            key, members = tree.summary_of(tid)
            # the latest members of the turn's node, up to the turn itself, oldest first
            same = sorted((m for m in tree.vectors if tree.summary_of(m)[0] == key
                           and tree.index_of[m] <= tree.index_of[tid]),
                          key=tree.index_of.__getitem__)
            assert members == same[-3:] and members[-1] == tid


def test_split_of_a_large_cluster_looks_at_its_newest_members() -> None:
    import dhrag_core.algorithm.clustering as clustering

    tc = TopicClusters(DIM, threshold=0.3, min_quality=0.95, merge_every=10_000)
    limit = clustering._SPLIT_LIMIT
    rng = np.random.default_rng(3)
    a, b = unit(1), unit(0, 1)
    seen: dict[str, np.ndarray] = {}
    age = {f"t{i:04d}": i for i in range(limit + 200)}
    # ids sort in reverse of age, so an id-ordered cut would pick the oldest members
    names = sorted(age, reverse=True)
    for i, name in enumerate(names):
        age[name] = i
        v = noisy(a if i < limit else 0.6 * a + 0.8 * b, rng, 0.01)
        changed = tc.assign(name, v, seen, age.__getitem__)
        seen[name] = v
        if len(changed) > 1:
            moved = [m for m in changed if m != name]
            assert all(age[m] >= limit for m in moved), "the split moved the new direction"
            return
    pytest.fail("the cluster never split")


def test_group_rows_stay_in_step_with_members_through_inserts_and_deletes() -> None:
    from dhrag_core.compact import rounded
    from dhrag_core.index import RowBuffer as _Rows

    rng = np.random.default_rng(9)
    rows = [rounded(rng.standard_normal(4)) for _ in range(3)]  # rows keep rounded values
    buf = _Rows(np.stack(rows))
    for step in range(300):
        op = rng.integers(0, 4)
        if op < 2 or not rows:  # mostly append the newest, sometimes insert in the middle
            at = len(rows) if op == 0 else int(rng.integers(0, len(rows) + 1))
            v = rounded(rng.standard_normal(4))
            rows.insert(at, v)
            buf.insert(at, v)
        else:  # mostly drop the oldest, sometimes another
            at = 0 if op == 2 else int(rng.integers(0, len(rows)))
            del rows[at]
            buf.delete(at)
        expected = np.stack(rows) if rows else np.zeros((0, 4), np.float32)
        assert np.array_equal(buf.view(), expected), step
        assert len(buf._buf) <= max(16, 4 * len(rows)), "a buffer that shrank gives room back"


def test_select_threads_selects_inside_the_runner_up_threads_too(clock: FakeClock) -> None:
    db = _switch_and_return(Settings(weighting=Weighting(history_turns=3),
                                     threads=Threads(hedge_margin=None)), clock)
    first, second = db.select_threads("s", RETURN, 2)
    assert [p.turn.turn_id for p in first] == [p.turn.turn_id for p in db.select("s", RETURN)]
    assert {p.turn.query for p in first} == {q for q, _ in GUINEA}
    assert {p.turn.query for p in second} <= {q for q, _ in BONDS} and second
    assert len({p.chain_id for p in second}) == 1 != first[0].chain_id
    assert len(db.select_threads("s", RETURN, 5)) == 2, "one list per thread there is"
    assert all(p.summary and p.cluster_label for p in first), "T*'s turns are described"
    assert all(p.summary is None and p.cluster_label == "" for p in second), (
        "the runner-ups only shape the search: no labels or summaries computed for them"
    )
    flat = _switch_and_return(Settings(weighting=Weighting(history_turns=3),
                                       threads=Threads(hedge_margin=None),
                                       ablations=Ablations(use_chains=False)),
                              clock)
    assert len(flat.select_threads("s", RETURN, 3)) == 1
    assert db.select_threads("nobody", RETURN, 3) == [[]]
    with pytest.raises(TypeError, match="n must be an int"):
        db.select_threads("s", RETURN, 1.5)  # type: ignore[arg-type]


def test_hedge_margin_drops_runner_up_threads_far_below_t_star(clock: FakeClock) -> None:
    wide = _switch_and_return(Settings(weighting=Weighting(history_turns=3),
                                       threads=Threads(hedge_margin=2.0)), clock)
    assert len(wide.select_threads("s", RETURN, 2)) == 2, "within the margin: hedged"
    tight = _switch_and_return(Settings(weighting=Weighting(history_turns=3),
                                        threads=Threads(hedge_margin=0.0)), clock)
    only = tight.select_threads("s", RETURN, 2)
    assert len(only) == 1, "the runner-up is less relevant than T*: not searched"
    assert [p.turn.turn_id for p in only[0]] == [p.turn.turn_id for p in tight.select("s", RETURN)]
    with pytest.raises(ValueError, match="hedge_margin"):
        Settings(threads=Threads(hedge_margin=-0.1))


def test_vector_index_matches_a_brute_force_scan_through_growth_reuse_and_reserve() -> None:
    from dhrag_core.index import VectorIndex

    rng = np.random.default_rng(3)
    index: VectorIndex[int] = VectorIndex(16)
    truth: dict[int, np.ndarray] = {}
    for step in range(60):
        keys = [int(k) for k in rng.integers(0, 200, 5)]
        vecs = rng.standard_normal((5, 16)).astype(np.float32)
        if step == 30:
            index.reserve(index.n_slots + 500)
        index.add(keys, vecs)
        truth.update(zip(keys, vecs, strict=True))
        gone = [k for k in truth if rng.random() < 0.1]
        index.remove(gone)
        for k in gone:
            del truth[k]
    assert len(index) == len(truth) and index.n_slots <= 200
    q = rng.standard_normal(16).astype(np.float32)
    slots, sims = index.similarities(q)
    got = {index.key_at(int(s)): float(v) for s, v in zip(slots, sims, strict=True)}
    assert got.keys() == truth.keys()
    for k, v in truth.items():
        assert got[k] == pytest.approx(float(v @ q), abs=1e-4)
    best = max(truth, key=lambda k: float(truth[k] @ q))
    assert index.search(q, 1)[0][0] == best


def test_sum_index_keeps_running_sums_searched_by_cosine() -> None:
    from dhrag_core.index import SumIndex

    rng = np.random.default_rng(4)
    index: SumIndex[int] = SumIndex(16)
    truth: dict[int, np.ndarray] = {}
    for _ in range(400):
        key = int(rng.integers(0, 40))
        v = rng.standard_normal(16).astype(np.float32)
        if key in truth and rng.random() < 0.3:
            index.add_to(key, -truth[key] / 2)  # a member leaves: its vector is subtracted
            truth[key] = truth[key] - truth[key] / 2
        else:
            index.add_to(key, v)
            truth[key] = truth.get(key, np.zeros(16, np.float32)) + v
        if rng.random() < 0.05:
            gone = next(iter(truth))
            index.remove([gone])
            del truth[gone]
    assert len(index) == len(truth) and index.n_slots <= 40
    q = rng.standard_normal(16).astype(np.float32)
    slots, sims = index.similarities(q)
    got = {index.key_at(int(s)): float(v) for s, v in zip(slots, sims, strict=True)}
    assert got.keys() == truth.keys()
    for k, t in truth.items():
        np.testing.assert_allclose(index.total(k), t, atol=1e-4)
        assert index.norm(k) == pytest.approx(float(np.linalg.norm(t)), rel=1e-5)
        assert got[k] == pytest.approx(float(t @ q) / float(np.linalg.norm(t)), abs=1e-5)
        np.testing.assert_allclose(index.centroid(k), t / np.linalg.norm(t), atol=1e-5)
    best = max(truth, key=lambda k: float(truth[k] @ q) / float(np.linalg.norm(truth[k])))
    assert index.search(q, 1)[0][0] == best
    assert index.norm(10_000) == 0.0 and not index.total(10_000).any()


def test_ordered_members_keep_turn_order_sum_and_rows_in_step() -> None:
    """The one structure behind chains and summary nodes: members sorted by turn index, the
    vector sum and the stacked rows agree after adds and discards in any order."""
    from dhrag_core.compact import rounded

    rng = np.random.default_rng(3)
    vectors = {f"t{i}": rounded(noisy(unit(1), rng, 0.5)) for i in range(8)}
    node = OrderedMembers(DIM, rows=True)
    for i in (4, 1, 6, 0, 7, 3):
        node.add(f"t{i}", vectors[f"t{i}"], i)
    node.discard("t6", vectors["t6"], 6)
    node.discard("t0", vectors["t0"])  # found without its index too
    want = ["t1", "t3", "t4", "t7"]
    assert node.members == want and node.indexes == [1, 3, 4, 7] and len(node) == 4
    np.testing.assert_array_equal(node.rows(), np.stack([vectors[m] for m in want]))
    assert np.array_equal(node.row(node.position("t4", 4)), vectors["t4"])
    with pytest.raises(ValueError):
        node.position("t6", 6)
    with pytest.raises(ValueError, match="keeps no rows"):
        OrderedMembers(DIM).rows()
    np.testing.assert_allclose(node.total, np.sum([vectors[m] for m in want], axis=0),
                               atol=1e-6)


def test_tree_exposes_chains_and_clusters_to_selection() -> None:
    tree = SessionTree(DIM, Settings(tree=Tree(chain_threshold=0.8, cluster_threshold=0.8)))
    wall, pig = unit(1), unit(0, 1)
    empty = np.zeros((0, DIM), dtype=np.float32)
    for i, v in enumerate([wall, wall, pig, wall]):
        tree.insert(Turn(session_id="s", turn_id=f"t{i}", index=i, query="q", passages=(),
                         response="", timestamp=0.0, query_vector=v, response_vector=None,
                         passage_vectors=empty))
    chain = tree.chain_of("t0")
    assert chain is not None and tree.chain_of("t1") == chain == tree.chain_of("t3")
    assert tree.chain_of("t2") != chain and tree.chain_of("missing") is None
    assert tree.chain_latest(chain, 2) == ["t1", "t3"]
    slots, rel, last = tree.rank_chains(wall, {})
    chain_ids = [tree.chain_at(int(slot)) for slot in slots]
    assert all(tree.chain_slot(c) == slot for c, slot in zip(chain_ids, slots, strict=True))
    assert sorted(chain_ids) == sorted({chain, tree.chain_of("t2")})
    at = chain_ids.index(chain)
    assert rel[at] > rel[1 - at] and last[at] == 3
    assert sorted(tree.chain_lengths()) == [1, 3]
    assert sorted(len(tree.cluster_members(c)) for c in tree.cluster_ids()) == [1, 3]
    assert tree.cluster_members(10_000) == frozenset()


def test_the_tree_keeps_one_topic_row_per_stored_turn_through_eviction() -> None:
    """The summary nodes' rows are the one copy of the topic vectors: after many evictions,
    moves and splits there is exactly one row per stored turn, equal to its topic vector,
    and the buffers hold little slack (evicted rows are freed)."""
    rng = np.random.default_rng(5)
    centres = [unit(*rng.standard_normal(4)) for _ in range(5)]
    calls = iter(range(10**6))
    db = HistoryDatabase(embedder=HashingEmbedder(DIM),
                         settings=Settings(limits=Limits(capacity=120),
                                           weighting=Weighting(merge_threshold=1.0)),
                         clock=lambda: float(next(calls)))
    for i in range(400):
        c = centres[int(rng.integers(0, 5))]
        pv = [Passage(text=f"p{i}.{j}", vector=noisy(c, rng, 0.4)) for j in range(2)]
        db.add("s", f"q{i}", "", passages=pv, query_vector=noisy(c, rng, 0.4))
    s = db._session("s")
    tree = s.tree
    assert len(s.turns) == 120 == len(tree) == len(tree.vectors)
    nodes = tree._nodes.values()
    assert sum(len(n.rows()) for n in nodes) == 120
    for tid, turn in s.turns.items():
        np.testing.assert_array_equal(tree.vectors[tid], tree.topic(turn))
    for n in nodes:  # a node that shrank gave back its room
        assert n._rows is not None and len(n._rows._buf) <= max(16, 4 * len(n))
    assert s.queries.n_slots <= 121, "evicted query rows are reused, not appended"
    for cid in tree.cluster_ids():  # read from the nodes' ends: the same as from every member
        assert tree.latest_members(cid, 7) == heapq.nlargest(
            7, tree.cluster_members(cid), key=tree.index_of.__getitem__)
    log = db.store._sessions["s"].log  # type: ignore[attr-defined]
    assert {e[0] for e in log} == set(range(400 - 64 + 1, 401)), "64 versions of change log"


def test_inner_products_match_numpy_and_check_shapes() -> None:
    from dhrag_core.index import inner_products

    rng = np.random.default_rng(5)
    rows = rng.standard_normal((1003, 384)).astype(np.float32)
    q = rng.standard_normal(384).astype(np.float32)
    np.testing.assert_allclose(inner_products(rows, q), rows @ q, rtol=0, atol=1e-4)
    # a non-contiguous view and float64 input are converted, not misread
    np.testing.assert_allclose(inner_products(rows[::2], q.astype(np.float64)),
                               rows[::2] @ q, rtol=0, atol=1e-4)
    # a row's product does not depend on where it sits
    assert inner_products(rows[7:8], q)[0] == inner_products(rows, q)[7]
    assert inner_products(rows[:0], q).shape == (0,)
    with pytest.raises(ValueError, match="shape"):
        inner_products(rows, q[:10])
