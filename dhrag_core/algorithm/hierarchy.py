"""One session's history tree -- topic clusters -> summary nodes -> turns -- and its matching.

Summary nodes are the turns of one cluster that also share a chain (one thread within one
topic); their vectors are running sums, kept up to date as turns come, go and move.
Matching walks the tree top-down and scores only the children of the best nodes, so it
compares the query with far fewer vectors than a flat scan once the history is large; below
``min_tree_turns`` it scans flat.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

import numpy as np

from dhrag_core.algorithm.chains import ChainTracker
from dhrag_core.algorithm.clustering import TopicClusters
from dhrag_core.algorithm.members import OrderedMembers
from dhrag_core.embedding import l2_normalise
from dhrag_core.records import Compact, Turn, Vector
from dhrag_core.settings import Settings

__all__ = ["SessionTree", "SummaryNode", "TreeMatch", "topic_vector"]


def topic_vector(turn: Turn, response_weight: float = 3.0, passage_weight: float = 3.0) -> Vector:
    """What a turn is about: its query, pulled toward its answer and passages.

    Elliptical queries ("how long is it?") carry little topic on their own; the answer and the
    passages shown with them do. The weights come from ``Settings`` (``topic_answer_weight``,
    ``topic_passage_weight``).
    """
    v = turn.query_vector.astype(np.float64).copy()
    if turn.response_vector is not None:
        v += response_weight * turn.response_vector
    if len(turn.passage_vectors):
        v += passage_weight * turn.passage_vectors.mean(axis=0, dtype=np.float64)
    out: Vector = l2_normalise(v)[0]
    return out


@dataclass(frozen=True)
class SummaryNode:
    """A run of turns of one topic and one chain, with its vector (normalised mean)."""

    key: str
    cluster_id: int
    chain_id: int
    members: Sequence[str]
    """Oldest first; a live view, valid until the tree next changes."""
    vector: Vector


def _top(scores: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` highest scores, best first (ties: earlier position first)."""
    if scores.size > k:
        kth = np.partition(scores, scores.size - k)[scores.size - k]
        candidates = np.flatnonzero(scores >= kth)
    else:
        candidates = np.arange(scores.size)
    return candidates[np.argsort(-scores[candidates], kind="stable")[:k]]


@dataclass(frozen=True)
class TreeMatch:
    """A turn reached by matching, with its similarity and the path that reached it."""

    turn_id: str
    similarity: float
    cluster_id: int
    summary_key: str | None


class SessionTree:
    """Clusters, chains and summary nodes of one session, kept in step with its turns."""

    def __init__(self, dimension: int, settings: Settings) -> None:
        self.settings = settings
        self.clusters = TopicClusters(
            dimension, threshold=settings.cluster_threshold,
            min_quality=settings.cluster_min_quality, merge_every=settings.cluster_merge_every,
        )
        self.chains = ChainTracker(dimension, threshold=settings.chain_threshold)
        self.vectors: dict[str, Compact] = {}
        """Topic vectors, float16: the one copy per turn (everything computes with exactly
        these values, as float32)."""
        self.index_of: dict[str, int] = {}
        self.comparisons = 0
        # summary nodes: (cluster id, chain id) -> members in turn order and their vector sum
        self._nodes: dict[tuple[int, int], OrderedMembers] = {}
        self._node_of: dict[str, tuple[int, int]] = {}
        self._cluster_nodes: dict[int, set[tuple[int, int]]] = defaultdict(set)

    def _node_add(self, turn_id: str) -> None:
        key = (self.clusters.of[turn_id], self.chains.of[turn_id])
        node = self._nodes.get(key)
        if node is None:
            node = self._nodes[key] = OrderedMembers(len(self.vectors[turn_id]))
        node.add(turn_id, self.vectors[turn_id], self.index_of[turn_id])
        self._node_of[turn_id] = key
        self._cluster_nodes[key[0]].add(key)

    def _node_remove(self, turn_id: str) -> None:
        key = self._node_of.pop(turn_id, None)
        if key is None:
            return
        node = self._nodes[key]
        node.discard(turn_id, self.vectors[turn_id])
        if not node.members:
            del self._nodes[key]
            self._cluster_nodes[key[0]].discard(key)

    def __len__(self) -> int:
        return len(self.vectors)

    def _age(self, turn_id: str) -> int:
        """Turn index (the turn being inserted is newer than every stored one)."""
        return self.index_of.get(turn_id, 1 << 62)

    def topic(self, turn: Turn) -> tuple[Vector, Compact]:
        """``topic_vector`` with this tree's weights, rounded to float16: (float32, float16)."""
        cfg = self.settings
        kept = topic_vector(turn, cfg.topic_answer_weight, cfg.topic_passage_weight).astype(
            np.float16)
        return kept.astype(np.float32), kept

    # -- upkeep -------------------------------------------------------------------------------

    def insert(self, turn: Turn, thread: int | None = None) -> tuple[int, int, dict[str, int]]:
        """Organise a new turn: (cluster id, chain id, cluster ids of other turns that moved).

        ``thread``: the chain the turn's query was judged to continue, if any."""
        v, kept = self.topic(turn)
        changed = self.clusters.assign(turn.turn_id, v, self.vectors, self._age)
        chain_id = self.chains.link(turn.turn_id, v, turn.index, thread)
        self.vectors[turn.turn_id] = kept
        self.index_of[turn.turn_id] = turn.index
        for moved in changed:
            self._node_remove(moved)
            self._node_add(moved)
        cluster_id = changed.pop(turn.turn_id)
        return cluster_id, chain_id, changed

    def restore(self, turns: Sequence[Turn]) -> None:
        """Rebuild from stored turns and their stored cluster/chain ids (index order)."""
        for t in sorted(turns, key=lambda t: t.index):
            if t.cluster_id < 0 or t.chain_id < 0:
                self.insert(t)  # stored without organisation (imported): organise it now
                continue
            v, kept = self.topic(t)
            self.vectors[t.turn_id] = kept
            self.index_of[t.turn_id] = t.index
            self.clusters.restore(t.turn_id, v, t.cluster_id)
            self.chains.restore(t.turn_id, v, t.index, t.chain_id)
            self._node_add(t.turn_id)

    def remove(self, turn_id: str) -> None:
        kept = self.vectors.get(turn_id)
        if kept is None:
            return
        v = kept.astype(np.float32)
        self._node_remove(turn_id)
        self.clusters.remove(turn_id, v)
        self.chains.remove(turn_id, v, self.vectors)
        del self.vectors[turn_id]
        del self.index_of[turn_id]

    # -- what selection reads ----------------------------------------------------------------

    @property
    def has_chains(self) -> bool:
        return bool(self.chains.chains)

    def chain_of(self, turn_id: str) -> int | None:
        """The chain (thread) holding ``turn_id``; None when the turn is not in the tree."""
        return self.chains.of.get(turn_id)

    def chain_window(self, chain_id: int, size: int) -> tuple[list[str], list[int], np.ndarray]:
        """The chain's latest ``size`` members: ids, turn indexes and topic vectors, oldest
        first."""
        return self.chains.window(chain_id, self.vectors, size)

    def chain_ages(self, chain_id: int, indexes: Sequence[int]) -> list[int]:
        """Turns of the chain from each given turn index on (1: its latest turn)."""
        return self.chains.thread_ages(chain_id, indexes)

    def rank_chains(
        self, query: Vector, matched: Mapping[int, float]
    ) -> tuple[list[int], np.ndarray, np.ndarray]:
        """Every chain's id, relevance to ``query`` (its centroid's cosine, raised to
        ``matched[chain]``, a matched turn's similarity) and latest turn index."""
        slots, rel, last = self.chains.relevance(query, matched)
        return [self.chains.at_slot(int(slot)) for slot in slots], rel, last

    def chain_lengths(self) -> list[int]:
        return self.chains.lengths()

    def cluster_ids(self) -> list[int]:
        """Ids of the topic clusters, oldest first."""
        return list(self.clusters.clusters)

    def cluster_members(self, cluster_id: int) -> AbstractSet[str]:
        """The turns of a topic cluster (empty when there is no such cluster)."""
        cluster = self.clusters.clusters.get(cluster_id)
        return cluster.members if cluster is not None else frozenset()

    # -- the summary layer ------------------------------------------------------------------

    def summary_nodes(self, cluster_ids: Sequence[int]) -> list[SummaryNode]:
        """The summary nodes under the given clusters (kept up to date on every change)."""
        nodes: list[SummaryNode] = []
        for cid in cluster_ids:
            keys = sorted(self._cluster_nodes.get(cid, ()))
            if not keys:
                continue
            vecs = l2_normalise(np.stack([self._nodes[k].total for k in keys]))
            nodes.extend(
                SummaryNode(f"{k[0]}.{k[1]}", k[0], k[1], self._nodes[k].members, v)
                for k, v in zip(keys, vecs, strict=True)
            )
        return nodes

    def summary_of(self, turn_id: str) -> tuple[str, list[str]]:
        """The summary node holding ``turn_id``: its key and its latest members (at most
        ``summary_size``, up to this turn), oldest first."""
        key = self._node_of[turn_id]
        node = self._nodes[key]
        ids, indexes = node.members, node.indexes
        end = bisect.bisect_right(indexes, self.index_of[turn_id])
        return f"{key[0]}.{key[1]}", ids[max(0, end - self.settings.summary_size) : end]

    # -- matching ---------------------------------------------------------------------------

    def match(
        self, query: Vector, *, hierarchical: bool = True, clusters: bool = True
    ) -> list[TreeMatch]:
        """Turns matched to ``query``, best first (at most ``settings.tree_turns``).

        Hierarchical: best clusters -> their best summary nodes -> those nodes' turns
        (``clusters=False``: the summary nodes of every cluster).
        Flat (``hierarchical=False``, or a tree below ``min_tree_turns``): every turn.
        """
        cfg = self.settings
        if not self.vectors:
            return []
        if not hierarchical or len(self.vectors) < cfg.min_tree_turns:
            ids = list(self.vectors)
            sims = np.stack([self.vectors[i] for i in ids]).astype(np.float32) @ query
            self.comparisons += len(ids)
            order = _top(sims, cfg.tree_turns)
            return [TreeMatch(ids[i], float(sims[i]), self.clusters.of.get(ids[i], -1), None)
                    for i in order]
        if clusters:
            top = [c.id for c, _ in self.clusters.nearest(query, cfg.tree_clusters)]
            self.comparisons += len(self.clusters)
        else:
            top = list(self.clusters.clusters)
        nodes = self.summary_nodes(top)
        node_sims = np.stack([n.vector for n in nodes]) @ query
        self.comparisons += len(nodes)
        best_nodes = [nodes[i] for i in np.argsort(-node_sims, kind="stable")[: cfg.tree_summaries]]
        found: list[str] = []
        parts, owner = [], []
        for n, node in enumerate(best_nodes):
            members = self._nodes[(node.cluster_id, node.chain_id)]
            ids = members.members
            parts.append(members.rows(self.vectors) @ query)
            found.extend(ids)
            owner.append(np.full(len(ids), n))
        sims = np.concatenate(parts)
        node_of = np.concatenate(owner)
        self.comparisons += len(found)
        return [
            TreeMatch(found[i], float(sims[i]), best_nodes[node_of[i]].cluster_id,
                      best_nodes[node_of[i]].key)
            for i in _top(sims, cfg.tree_turns)
        ]
