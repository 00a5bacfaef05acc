"""One session's history tree -- topic clusters -> summary nodes -> turns -- and its matching.

Summary nodes are the turns of one cluster that also share a chain (one thread within one
topic); their vectors are running sums, kept up to date as turns come, go and move. A summary
node also holds its turns' topic vectors, stacked and int8-coded: the tree's one copy of each.
Matching walks the tree top-down and scores only the children of the best nodes, so it
compares the query with far fewer vectors than a flat scan once the history is large; below
``min_tree_turns`` it scans flat.
"""

from __future__ import annotations

import bisect
import heapq
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

import numpy as np

from dhrag_core import compact
from dhrag_core.algorithm.chains import ChainTracker
from dhrag_core.algorithm.clustering import TopicClusters
from dhrag_core.algorithm.members import OrderedMembers
from dhrag_core.embedding import l2_normalise
from dhrag_core.records import Turn, Vector
from dhrag_core.settings import Settings

__all__ = ["SessionTree", "SummaryNode", "TreeMatch", "topic_vector"]


def topic_vector(turn: Turn, response_weight: float = 3.0, passage_weight: float = 3.0) -> Vector:
    """What a turn is about: its query, pulled toward its answer and passages.

    Elliptical queries ("how long is it?") carry little topic on their own; the answer and the
    passages shown with them do. The weights come from ``Settings`` (``topic_answer_weight``,
    ``topic_passage_weight``).
    """
    query, response, passages = turn.decoded()
    v = query.astype(np.float64)
    if response is not None:
        v += response_weight * response
    if len(passages):
        v += passage_weight * passages.mean(axis=0, dtype=np.float64)
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


class _TopicVectors(Mapping[str, Vector]):
    """Topic vectors by turn id, decoded from the summary nodes' rows (each a new array)."""

    def __init__(self, tree: SessionTree) -> None:
        self._tree = tree

    def __getitem__(self, turn_id: str) -> Vector:
        tree = self._tree
        node = tree._nodes[tree._node_of[turn_id]]
        return node.row(node.position(turn_id, tree.index_of[turn_id]))

    def __iter__(self) -> Iterator[str]:
        return iter(self._tree.index_of)

    def __len__(self) -> int:
        return len(self._tree.index_of)

    def __contains__(self, turn_id: object) -> bool:
        return turn_id in self._tree._node_of


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
            dimension, threshold=settings.tree.cluster_threshold,
            min_quality=settings.tree.cluster_min_quality,
            merge_every=settings.tree.cluster_merge_every,
        )
        self.chains = ChainTracker(dimension, threshold=settings.tree.chain_threshold)
        self.dimension = dimension
        self.vectors: Mapping[str, Vector] = _TopicVectors(self)
        """Topic vectors by turn id (``compact.rounded``): the summary nodes' rows."""
        self.index_of: dict[str, int] = {}
        self.comparisons = 0
        # summary nodes: (cluster id, chain id) -> members in turn order and their vector sum
        self._nodes: dict[tuple[int, int], OrderedMembers] = {}
        self._node_of: dict[str, tuple[int, int]] = {}
        self._cluster_nodes: dict[int, set[tuple[int, int]]] = defaultdict(set)

    def _node_add(self, turn_id: str, vector: Vector) -> None:
        key = (self.clusters.of[turn_id], self.chains.of[turn_id])
        node = self._nodes.get(key)
        if node is None:
            node = self._nodes[key] = OrderedMembers(self.dimension, rows=True)
        node.add(turn_id, vector, self.index_of[turn_id])
        self._node_of[turn_id] = key
        self._cluster_nodes[key[0]].add(key)

    def _node_remove(self, turn_id: str) -> Vector | None:
        """Take the turn out of its summary node; its topic vector (a copy), None if absent."""
        key = self._node_of.pop(turn_id, None)
        if key is None:
            return None
        node = self._nodes[key]
        index = self.index_of[turn_id]
        vector = node.row(node.position(turn_id, index))
        node.discard(turn_id, vector, index)
        if not node.members:
            del self._nodes[key]
            self._cluster_nodes[key[0]].discard(key)
        return vector

    def __len__(self) -> int:
        return len(self.index_of)

    def topic_rows(self, turn_ids: Sequence[str]) -> Vector:
        """The topic vectors of ``turn_ids``, stacked: each summary node's rows decoded in one
        go, not one by one."""
        out = np.empty((len(turn_ids), self.dimension), dtype=np.float32)
        groups: dict[tuple[int, int], tuple[list[int], list[int]]] = defaultdict(
            lambda: ([], []))
        for i, tid in enumerate(turn_ids):
            key = self._node_of[tid]
            ats, positions = groups[key]
            ats.append(i)
            positions.append(self._nodes[key].position(tid, self.index_of[tid]))
        for key, (ats, positions) in groups.items():
            out[ats] = self._nodes[key].rows_at(np.asarray(positions))
        return out

    def _age(self, turn_id: str) -> int:
        """Turn index (the turn being inserted is newer than every stored one)."""
        return self.index_of.get(turn_id, 1 << 62)

    def topic(self, turn: Turn) -> Vector:
        """``topic_vector`` with this tree's weights, rounded as the summary nodes store it
        (``compact.rounded``): the value added to every running sum is the one later read
        back and subtracted."""
        cfg = self.settings
        return compact.rounded(topic_vector(turn, cfg.tree.topic_answer_weight,
                                            cfg.tree.topic_passage_weight))

    # -- upkeep -------------------------------------------------------------------------------

    def insert(self, turn: Turn, thread: int | None = None, *,
               new_chain: bool = False) -> tuple[int, int, dict[str, int]]:
        """Organise a new turn: (cluster id, chain id, cluster ids of other turns that moved).

        ``thread``: the chain the turn's query was judged to continue, if any; ``new_chain``:
        the turn starts a chain of its own (a chain policy's decision)."""
        v = self.topic(turn)
        changed = self.clusters.assign(turn.turn_id, v, self.vectors, self._age)
        chain_id = self.chains.link(turn.turn_id, v, turn.index, thread, new=new_chain)
        self.index_of[turn.turn_id] = turn.index
        for moved in changed:
            old = self._node_remove(moved)
            self._node_add(moved, v if old is None else old)
        cluster_id = changed.pop(turn.turn_id)
        return cluster_id, chain_id, changed

    def restore(self, turns: Sequence[Turn], *, full: bool = False) -> None:
        """Rebuild from stored turns and their stored cluster/chain ids (index order).

        ``full``: ``turns`` are the whole session (a reload), so only the clusters of the turns
        since the last merge pass count as changed: the next pass compares those, not every
        cluster with every other (else: every cluster of ``turns`` changed)."""
        ordered = sorted(turns, key=lambda t: t.index)
        assigned = ordered[-1].index + 1 if ordered else 0
        since_pass = assigned - assigned % self.clusters.merge_every if full else 0
        for t in ordered:
            if t.cluster_id < 0 or t.chain_id < 0:
                self.insert(t)  # stored without organisation (imported): organise it now
                continue
            v = self.topic(t)
            self.index_of[t.turn_id] = t.index
            self.clusters.restore(t.turn_id, v, t.cluster_id, changed=t.index >= since_pass)
            self.chains.restore(t.turn_id, v, t.index, t.chain_id)
            self._node_add(t.turn_id, v)
        if full:
            self.clusters.resume(assigned)

    def remove(self, turn_id: str) -> None:
        v = self._node_remove(turn_id)
        if v is None:
            return
        self.clusters.remove(turn_id, v)
        self.chains.remove(turn_id, v, self.vectors)
        del self.index_of[turn_id]

    # -- what selection reads ----------------------------------------------------------------

    @property
    def has_chains(self) -> bool:
        return bool(self.chains.chains)

    def has_chain(self, chain_id: int) -> bool:
        """Whether a chain of that id holds turns."""
        return chain_id in self.chains.chains

    def chain_ids(self) -> list[int]:
        """Ids of the chains that hold turns."""
        return list(self.chains.chains)

    def chain_members(self, chain_id: int) -> list[str]:
        """Every member of a chain, oldest first (empty when there is no such chain)."""
        chain = self.chains.chains.get(chain_id)
        return list(chain.members) if chain is not None else []

    def chain_of(self, turn_id: str) -> int | None:
        """The chain (thread) holding ``turn_id``; None when the turn is not in the tree."""
        return self.chains.of.get(turn_id)

    def chain_latest(self, chain_id: int, size: int) -> list[str]:
        """The chain's latest ``size`` members, oldest first."""
        return self.chains.latest(chain_id, size)

    def rank_chains(
        self, query: Vector, matched: Mapping[int, float]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every chain's slot (``chain_at`` gives its id), relevance to ``query`` (its
        centroid's cosine, raised to ``matched[chain]``, a matched turn's similarity) and
        latest turn index; slots ascending."""
        return self.chains.relevance(query, matched)

    def chain_at(self, slot: int) -> int:
        """The chain id held in a slot of ``rank_chains``."""
        return self.chains.at_slot(slot)

    def chain_slot(self, chain_id: int) -> int:
        """The slot of ``rank_chains`` holding a chain."""
        return self.chains.slot_of(chain_id)

    def chain_lengths(self) -> list[int]:
        return self.chains.lengths()

    def cluster_ids(self) -> list[int]:
        """Ids of the topic clusters, oldest first."""
        return list(self.clusters.clusters)

    def latest_members(self, cluster_id: int, n: int) -> list[str]:
        """The ``n`` latest turns of a topic cluster, newest first: read from the ends of its
        summary nodes (each in turn order), not from every member."""
        tails = (m for key in self._cluster_nodes.get(cluster_id, ())
                 for m in self._nodes[key].members[-n:])
        return heapq.nlargest(n, tails, key=self.index_of.__getitem__)

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
        return f"{key[0]}.{key[1]}", ids[max(0, end - self.settings.tree.summary_size) : end]

    # -- matching ---------------------------------------------------------------------------

    def match(
        self, query: Vector, *, hierarchical: bool = True, clusters: bool = True
    ) -> list[TreeMatch]:
        """Turns matched to ``query``, best first (at most ``settings.tree.tree_turns``).

        Hierarchical: best clusters -> their best summary nodes -> those nodes' turns
        (``clusters=False``: the summary nodes of every cluster).
        Flat (``hierarchical=False``, or a tree below ``min_tree_turns``): every turn.
        """
        cfg = self.settings
        if not self.index_of:
            return []
        if not hierarchical or len(self.index_of) < cfg.tree.min_tree_turns:
            ids = list(self.index_of)
            sims = self.topic_rows(ids) @ query
            self.comparisons += len(ids)
            order = _top(sims, cfg.tree.tree_turns)
            return [TreeMatch(ids[i], float(sims[i]), self.clusters.of.get(ids[i], -1), None)
                    for i in order]
        if clusters:
            top = [c.id for c, _ in self.clusters.nearest(query, cfg.tree.tree_clusters)]
            self.comparisons += len(self.clusters)
        else:
            top = list(self.clusters.clusters)
        nodes = self.summary_nodes(top)
        node_sims = np.stack([n.vector for n in nodes]) @ query
        self.comparisons += len(nodes)
        order = np.argsort(-node_sims, kind="stable")[: cfg.tree.tree_summaries]
        best_nodes = [nodes[i] for i in order]
        found: list[str] = []
        parts, owner = [], []
        for n, node in enumerate(best_nodes):
            members = self._nodes[(node.cluster_id, node.chain_id)]
            ids = members.members
            parts.append(members.products(query))
            found.extend(ids)
            owner.append(np.full(len(ids), n))
        sims = np.concatenate(parts)
        node_of = np.concatenate(owner)
        self.comparisons += len(found)
        return [
            TreeMatch(found[i], float(sims[i]), best_nodes[node_of[i]].cluster_id,
                      best_nodes[node_of[i]].key)
            for i in _top(sims, cfg.tree.tree_turns)
        ]
