"""Incremental topic clusters over a session's turns (paper eq. 15-17), with keyword labels.

A new turn joins the nearest centroid if it is similar enough, else opens a cluster. A cluster
whose quality (mean similarity of members to the centroid) falls below a floor is split
locally by agglomerative clustering (``average_linkage``), and every ``merge_every`` turns
clusters whose centroids converged are merged: only the clusters changed since the last pass
are compared (with every centroid), so a pass costs O(changed x clusters), not O(clusters^2).
Nothing ever refits the whole history, and the keyword labels come from the current texts, so
the vocabulary is never frozen.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from dhrag_core.embedding import tokens
from dhrag_core.index import SumIndex
from dhrag_core.records import Floats, Vector

__all__ = ["Cluster", "TopicClusters", "average_linkage", "keyword_labels"]

_SPLIT_LIMIT = 400


class _VectorsPlusNew(Mapping[str, Floats]):
    """The stored turns' vectors plus the new turn's, without copying the stored ones (a
    session's every vector): what a split of the new turn's cluster reads."""

    def __init__(self, base: Mapping[str, Floats], key: str, value: Floats) -> None:
        self._base, self._key, self._value = base, key, value

    def __getitem__(self, key: str) -> Floats:
        return self._value if key == self._key else self._base[key]

    def __iter__(self) -> Iterator[str]:
        yield from (k for k in self._base if k != self._key)
        yield self._key

    def __len__(self) -> int:
        return len(self._base) + (self._key not in self._base)


@dataclass(eq=False)
class Cluster:
    """A topic: its member turn ids and the running sum of their unit vectors (float32: a
    session holds thousands, and only the sum's direction is read), kept as the cluster's
    row of its ``TopicClusters``' ``SumIndex``."""

    id: int
    sums: SumIndex[int] = field(repr=False)
    members: set[str] = field(default_factory=set)

    @property
    def size(self) -> int:
        return len(self.members)

    @property
    def total(self) -> Vector:
        """The members' vector sum (a copy)."""
        return self.sums.total(self.id)

    @property
    def centroid(self) -> Vector:
        return self.sums.centroid(self.id)

    @property
    def quality(self) -> float:
        """Mean cosine of members to the centroid direction (1 for a single member)."""
        return self.sums.norm(self.id) / self.size if self.size else 1.0


class TopicClusters:
    """The topic layer of one session's history tree.

    Args:
        dimension: Vector size.
        threshold: A turn joins a cluster whose centroid it matches at least this well.
        min_quality: A cluster below this quality after a join is split locally.
        merge_every: Every this many assignments, centroids closer than ``threshold`` merge.
    """

    def __init__(
        self, dimension: int, threshold: float = 0.5, min_quality: float = 0.6,
        merge_every: int = 16,
    ) -> None:
        self.dimension = dimension
        self.threshold = threshold
        self.min_quality = min_quality
        self.merge_every = merge_every
        self.clusters: dict[int, Cluster] = {}
        self.of: dict[str, int] = {}
        self._next_id = 0
        self._since_merge = 0
        self._cents: SumIndex[int] = SumIndex(dimension)  # each cluster's vector sum
        # clusters whose centroid changed since the last merge pass: only their pairs can
        # have crossed the merge bar (every other pair was below it at that pass)
        self._dirty: set[int] = set()
        self.merge_comparisons = 0
        """Centroid pairs compared by merge passes so far (the cost a test bounds)."""

    def __len__(self) -> int:
        return len(self.clusters)

    def _new(self) -> Cluster:
        c = Cluster(self._next_id, self._cents)
        self.clusters[c.id] = c
        self._next_id += 1
        return c

    def _join(self, c: Cluster, turn_id: str, v: np.ndarray, changed: bool = True) -> None:
        c.members.add(turn_id)
        self._cents.add_to(c.id, v)
        self.of[turn_id] = c.id
        if changed:
            self._dirty.add(c.id)

    def _drop(self, cid: int) -> None:
        del self.clusters[cid]
        self._cents.remove([cid])
        self._dirty.discard(cid)

    def restore(self, turn_id: str, vector: Vector, cluster_id: int, changed: bool = True) -> None:
        """Put back a stored assignment (on reload), keeping the stored cluster id.

        ``changed``: the turn joined since the last merge pass, so its cluster is compared at
        the next one (a full reload passes False for older turns: the pass that followed them
        compared their clusters already)."""
        c = self.clusters.get(cluster_id)
        if c is None:
            c = self.clusters[cluster_id] = Cluster(cluster_id, self._cents)
        self._join(c, turn_id, vector.astype(np.float32), changed)
        self._next_id = max(self._next_id, cluster_id + 1)

    def resume(self, assigned: int) -> None:
        """After a reload, or turns of another writer: ``assigned`` turns were placed in all
        (the session's next turn index), so the merge passes keep their rhythm (every
        ``merge_every`` turns of the session, whichever process placed them)."""
        self._since_merge = assigned % self.merge_every

    def nearest(self, query: Vector, n: int) -> list[tuple[Cluster, float]]:
        """The ``n`` clusters whose centroids best match ``query``, best first."""
        return [(self.clusters[cid], sim) for cid, sim in self._cents.search(query, n)]

    def assign(
        self, turn_id: str, vector: Vector, vectors: Mapping[str, Floats],
        age: Callable[[str], int] | None = None,
    ) -> dict[str, int]:
        """Place a new turn; returns every assignment that changed (the new turn included).

        ``vectors`` gives the topic vectors of stored turns, needed only when a split
        re-organises a cluster; ``age`` orders turns oldest first (default: insertion order
        of ``vectors``) so a split of a huge cluster looks at its newest members.
        """
        v = vector.astype(np.float32)
        best = self.nearest(vector, 1)
        target = best[0][0] if best and best[0][1] >= self.threshold else self._new()
        self._join(target, turn_id, v)
        changed = {turn_id: target.id}
        if target.size > 2 and target.quality < self.min_quality:
            changed.update(self._split(target, _VectorsPlusNew(vectors, turn_id, vector), age))
        self._since_merge += 1
        if self._since_merge >= self.merge_every:
            self._since_merge = 0
            changed.update(self._merge_close())
        return changed

    def remove(self, turn_id: str, vector: Vector) -> None:
        cid = self.of.pop(turn_id, None)
        if cid is None:
            return
        c = self.clusters[cid]
        c.members.discard(turn_id)
        self._cents.add_to(cid, -vector.astype(np.float32))
        if not c.members:
            self._drop(cid)
        else:
            self._dirty.add(cid)

    def _split(
        self, c: Cluster, vectors: Mapping[str, Floats], age: Callable[[str], int] | None
    ) -> dict[str, int]:
        """Re-cluster one degraded cluster's members (bounded: at most the newest 400)."""
        if age is None:
            position = {m: i for i, m in enumerate(vectors) if m in c.members}
            age = position.__getitem__
        members = heapq.nlargest(_SPLIT_LIMIT, c.members, key=age)[::-1]
        x = np.stack([vectors[m] for m in members]).astype(np.float64)
        labels = average_linkage(x, 1.0 - self.min_quality).tolist()
        if len(set(labels)) < 2:
            return {}
        keep = Counter(labels).most_common(1)[0][0]
        changed: dict[str, int] = {}
        for label in sorted(set(labels) - {keep}):
            fresh = self._new()
            for m, lab in zip(members, labels, strict=True):
                if lab == label:
                    self.remove(m, vectors[m])
                    self._join(fresh, m, vectors[m].astype(np.float32))
                    changed[m] = fresh.id
        return changed

    def _merge_close(self) -> dict[str, int]:
        """Merge clusters whose centroids converged (``_merge`` of ``_close_pairs``)."""
        return self._merge(self._close_pairs())

    def _merge_bar(self) -> float:
        """``max(threshold, (1 + min_quality) / 2)``: above what a split leaves apart, so a
        split is not undone by the next merge pass."""
        return max(self.threshold, (1.0 + self.min_quality) / 2)

    def _close_pairs(self) -> set[tuple[int, int]]:
        """Cluster id pairs (smaller first) whose centroids meet the merge bar, found by
        comparing only the clusters changed since the last pass with every centroid."""
        dirty = sorted(self._dirty)
        self._dirty.clear()
        if len(self.clusters) < 2:
            return set()
        bar = self._merge_bar()
        pairs: set[tuple[int, int]] = set()
        for cid in dirty:
            slots, sims = self._cents.similarities(self.clusters[cid].centroid)
            self.merge_comparisons += len(slots)
            for at in np.flatnonzero(sims >= bar):
                other = self._cents.key_at(int(slots[at]))
                if other != cid:
                    pairs.add((min(cid, other), max(cid, other)))
        return pairs

    def _merge(self, pairs: Iterable[tuple[int, int]]) -> dict[str, int]:
        """Merge each pair in id order, the smaller cluster into the larger, each cluster at
        most once per pass; every turn that moved, with its new cluster id."""
        changed: dict[str, int] = {}
        merged: set[int] = set()
        for ca, cb in sorted(pairs):
            if ca in merged or cb in merged:
                continue
            big, small = sorted((self.clusters[ca], self.clusters[cb]), key=lambda c: -c.size)
            for m in small.members:
                self.of[m] = big.id
                changed[m] = big.id
            big.members |= small.members
            self._cents.add_to(big.id, small.total)
            self._drop(small.id)
            self._dirty.add(big.id)
            merged.update((ca, cb))
        return changed

def average_linkage(x: np.ndarray, threshold: float) -> npt.NDArray[np.intp]:
    """Flat clusters of the rows of ``x``: agglomerative clustering with average linkage over
    cosine distance, merging while the two closest clusters are closer than ``threshold``.

    The partition of scikit-learn's ``AgglomerativeClustering(metric="cosine",
    linkage="average", distance_threshold=threshold)`` (average linkage never merges below an
    earlier merge, so stopping at the threshold equals cutting the full tree there), in NumPy:
    importing scikit-learn's clustering costs a process about 70 MiB of memory. Labels number
    the clusters in order of their first row. O(n^2) memory and O(n^3) time in the worst case:
    for the few hundred rows of a split.
    """
    x = np.asarray(x, dtype=np.float64)
    n = len(x)
    if n < 2:
        return np.zeros(n, dtype=np.intp)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    u = np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)
    dist = 1.0 - u @ u.T
    np.clip(dist, 0.0, 2.0, out=dist)
    np.fill_diagonal(dist, np.inf)
    size = np.ones(n)
    owner = np.arange(n)
    for _ in range(n - 1):
        i, j = divmod(int(np.argmin(dist)), n)
        if not dist[i, j] < threshold:
            break
        i, j = min(i, j), max(i, j)
        # Lance-Williams for average linkage: the merged cluster's mean distance to each other
        merged = (size[i] * dist[i] + size[j] * dist[j]) / (size[i] + size[j])
        dist[i], dist[:, i] = merged, merged
        dist[i, i] = np.inf
        dist[j], dist[:, j] = np.inf, np.inf
        size[i] += size[j]
        owner[owner == j] = i
    _, first, labels = np.unique(owner, return_index=True, return_inverse=True)
    order = np.argsort(np.argsort(first))
    out: npt.NDArray[np.intp] = order[labels].astype(np.intp)
    return out


def keyword_labels(
    groups: Mapping[int, Iterable[str]], n_terms: int = 3, only: Iterable[int] | None = None,
) -> dict[int, str]:
    """Class-based TF-IDF keywords per group of texts (terms frequent here, rare elsewhere),
    for the groups in ``only`` (default: all; the others still count as "elsewhere")."""
    counts: dict[int, Counter[str]] = {}
    for g, texts in groups.items():
        c = counts[g] = Counter()
        for text in texts:
            c.update(tokens(text))
    df: Counter[str] = Counter()
    for c in counts.values():
        df.update(set(c))
    n = max(len(counts), 1)
    labels = {}
    for g in counts if only is None else only:
        c = counts[g]
        total = sum(c.values()) or 1
        best = heapq.nsmallest(
            n_terms, c, key=lambda t: (-(c[t] / total) * math.log(1 + n / df[t]), t)
        )
        labels[g] = ", ".join(best)
    return labels

