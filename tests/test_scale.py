"""Costs that must stay low at scale: counted in comparisons rather than timed, and the
knowledge base's single-query search on one thread."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from dhrag_core import FaissKnowledgeBase, FunctionEmbedder
from dhrag_core.algorithm.clustering import TopicClusters
from dhrag_core.algorithm.scoring import top_order


class _AllPairs(TopicClusters):
    """The merge pass as it was: every pair of centroids compared."""

    def _close_pairs(self) -> set[tuple[int, int]]:
        self._dirty.clear()
        ids = sorted(self.clusters)
        if len(ids) < 2:
            return set()
        cents = np.stack([self.clusters[i].centroid for i in ids])
        sims = cents @ cents.T
        np.fill_diagonal(sims, -1.0)
        self.merge_comparisons += len(ids) ** 2
        return {(ids[int(a)], ids[int(b)])
                for a, b in zip(*np.nonzero(np.triu(sims) >= self._merge_bar()), strict=True)}


def _stream(n: int, topics: int, noise: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((topics, 48))
    v = centres[rng.integers(0, topics, n)] + noise * rng.standard_normal((n, 48))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def _run(tc: TopicClusters, vectors: np.ndarray) -> int:
    """Assign every vector; the number of merges (turns moved by a merge pass)."""
    stored: dict[str, np.ndarray] = {}
    moved = 0
    for i, v in enumerate(vectors):
        changed = tc.assign(f"t{i}", v, stored)
        stored[f"t{i}"] = v
        moved += len(changed) - 1
    return moved


def test_incremental_merge_pass_merges_what_comparing_all_pairs_merges() -> None:
    """Comparing only the clusters changed since the last pass finds the same merges as
    comparing every pair (a pair of unchanged clusters was below the bar at the last pass)."""
    vectors = _stream(1500, 30, 1.1)
    kwargs = dict(threshold=0.45, min_quality=0.5, merge_every=7)
    fast, full = TopicClusters(48, **kwargs), _AllPairs(48, **kwargs)
    assert _run(fast, vectors) == _run(full, vectors) > 0  # merges did happen
    assert fast.of == full.of
    assert fast.merge_comparisons < full.merge_comparisons / 5


def test_merge_pass_compares_only_changed_clusters_with_the_others() -> None:
    """With thousands of clusters, a merge pass compares the few clusters changed since the
    last pass with every centroid: linear in the clusters, where all pairs are quadratic."""
    tc = TopicClusters(48, threshold=0.9, merge_every=16)
    _run(tc, _stream(3000, 100_000, 0.05, seed=1))
    clusters = len(tc)
    assert clusters > 2500
    before = tc.merge_comparisons
    _run(tc, _stream(16, 16, 0.05, seed=2))  # one more pass
    per_pass = tc.merge_comparisons - before
    assert 0 < per_pass <= 17 * (clusters + 16)
    assert per_pass < clusters**2 / 50


def test_top_order_is_the_head_of_a_stable_descending_sort() -> None:
    rng = np.random.default_rng(3)
    for _ in range(200):
        scores = rng.integers(0, 6, rng.integers(1, 40)).astype(float)  # many ties
        k = int(rng.integers(0, 45))
        want = [int(i) for i in np.argsort(-scores, kind="stable")][:k]
        assert top_order(scores, k) == want
    assert top_order([1.0, 3.0, 2.0], None) == [1, 2, 0]


class _ThreadsSeen:
    """An index that records FAISS's OpenMP threads at each search, then searches."""

    def __init__(self, index: faiss.Index) -> None:
        self.index, self.threads = index, []

    def search(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        self.threads.append(faiss.omp_get_max_threads())
        return self.index.search(q, k)


def test_faiss_kb_searches_one_query_on_one_thread_and_restores_the_setting() -> None:
    rng = np.random.default_rng(4)
    vectors = rng.standard_normal((500, 16)).astype(np.float32)
    emb = FunctionEmbedder(lambda texts: rng.standard_normal((len(texts), 16)), dimension=16)
    texts = [f"passage {i}" for i in range(500)]
    fast = FaissKnowledgeBase(texts, emb, vectors=vectors)
    plain = FaissKnowledgeBase(texts, emb, vectors=vectors, single_query_threads=None)
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(2)
    try:
        seen = _ThreadsSeen(fast.index)
        fast.index = seen  # type: ignore[assignment]
        queries = rng.standard_normal((3, 16)).astype(np.float32)
        one = fast.search_vectors(queries[:1], 10)[0]
        several = fast.search_vectors(queries, 10)
        assert seen.threads == [1, 2] and faiss.omp_get_max_threads() == 2
        assert [p.id for p in one] == [p.id for p in plain.search_vectors(queries[:1], 10)[0]]
        assert [[p.id for p in r] for r in several] == [
            [p.id for p in r] for r in plain.search_vectors(queries, 10)]
    finally:
        faiss.omp_set_num_threads(before)
    for bad in (0, -1, 1.5, True, "1"):
        with pytest.raises(ValueError, match="single_query_threads"):
            FaissKnowledgeBase(texts, emb, vectors=vectors, single_query_threads=bad)
