"""Chain-of-thought tracking (paper eq. 22-24): threads of related turns, matched as a whole.

A new turn joins the chain it continues best -- compared with each chain's latest turn and its
centroid, so a user who comes back to an earlier thread re-joins that chain, not only the
adjacent one -- or starts a new chain. At query time T* = argmax_T score(q, T) (similarity to
the chain, tempered by how recently the chain was active), then the best triple inside T*.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import numpy as np

from dhrag_core.algorithm.members import OrderedMembers
from dhrag_core.index import SumIndex, VectorIndex
from dhrag_core.records import Floats, Vector

__all__ = ["Chain", "ChainTracker", "chain_length_stats"]


class Chain(OrderedMembers):
    """One thread: its turns in turn order with their vector sum (``OrderedMembers``; the sum
    is the chain's row of its tracker's ``SumIndex``), and the latest turn's index
    (``members[-1]`` is the latest)."""

    __slots__ = ("id", "last_index")

    def __init__(self, chain_id: int, dimension: int, sums: SumIndex[int]) -> None:
        super().__init__(dimension, sums=sums, key=chain_id)
        self.id = chain_id
        self.last_index = -1

    @property
    def centroid(self) -> Vector:
        assert self._sums is not None
        return self._sums.centroid(self.id)


class ChainTracker:
    """The chains of one session.

    Turn vectors are expected ``compact.rounded`` (as the tree's topic vectors are): the
    latest turn of each chain is kept as int8 codes, exact for such a vector.

    Args:
        dimension: Vector size.
        threshold: A turn continues a chain whose latest turn or centroid it matches this well.
    """

    def __init__(self, dimension: int, threshold: float = 0.45) -> None:
        self.dimension = dimension
        self.threshold = threshold
        self.chains: dict[int, Chain] = {}
        self.of: dict[str, int] = {}
        self._next_id = 0
        # latest-turn and centroid vectors of every chain, updated in place: linking a turn
        # costs two matrix-vector products, not a re-stack of every chain. The latest turns'
        # topic vectors are ``compact.rounded`` already: kept as int8 codes, they are exact.
        self._lasts: VectorIndex[int] = VectorIndex(dimension, compact=True)
        self._cents: SumIndex[int] = SumIndex(dimension)  # each chain's vector sum
        self._last_index = np.zeros(0, dtype=np.float64)  # by slot of ``_cents``

    def __len__(self) -> int:
        return len(self.chains)

    def _add(self, chain: Chain, turn_id: str, vector: Vector, index: int) -> None:
        chain.add(turn_id, vector, index)
        latest = index >= chain.last_index
        if latest:
            chain.last_index = index
        self.of[turn_id] = chain.id
        self._sync(chain, vector if latest else None)

    def _sync(self, chain: Chain, latest: Floats | None) -> None:
        """Update the chain's latest index, and its latest vector if given (its sum is kept
        by the chain itself)."""
        if latest is not None:
            self._lasts.add([chain.id], latest)
        slot = self._cents.slot_of(chain.id)
        if self._last_index.size <= slot:
            self._last_index = np.resize(self._last_index, max(2 * self._last_index.size,
                                                               slot + 1))
        self._last_index[slot] = chain.last_index

    def best_link(self, vector: Vector) -> tuple[int, float] | None:
        """The chain a new turn continues best -- max(sim to latest turn, sim to centroid) --
        and that score; None when there are no chains."""
        if not self.chains:
            return None
        slots, last_sims = self._lasts.similarities(vector)
        cent_slots, cent_sims = self._cents.similarities(vector)
        # both indexes see the same adds and removes in the same order: same slots
        assert np.array_equal(slots, cent_slots)
        scores = np.maximum(last_sims, cent_sims)
        best = int(np.argmax(scores))
        return self._lasts.key_at(int(slots[best])), float(scores[best])

    def link(self, turn_id: str, vector: Vector, index: int, prefer: int | None = None, *,
             new: bool = False) -> int:
        """Attach a new turn to ``prefer`` (the chain its query was judged to continue), else
        to the chain it continues best, or start one (always with ``new``); returns the id."""
        best = None if new else self.best_link(vector)
        if prefer is not None and prefer in self.chains and not new:
            chain = self.chains[prefer]
        elif best is not None and best[1] >= self.threshold:
            chain = self.chains[best[0]]
        else:
            chain = Chain(self._next_id, self.dimension, self._cents)
            self.chains[chain.id] = chain
            self._next_id += 1
        self._add(chain, turn_id, vector, index)
        return chain.id

    def restore(self, turn_id: str, vector: Vector, index: int, chain_id: int) -> None:
        """Put back a stored link (turns must come in index order)."""
        chain = self.chains.get(chain_id)
        if chain is None:
            chain = self.chains[chain_id] = Chain(chain_id, self.dimension, self._cents)
        self._add(chain, turn_id, vector, index)
        self._next_id = max(self._next_id, chain_id + 1)

    def remove(self, turn_id: str, vector: Vector, vectors: Mapping[str, Floats]) -> None:
        cid = self.of.pop(turn_id, None)
        if cid is None:
            return
        chain = self.chains[cid]
        was_latest = chain.members[-1] == turn_id
        chain.discard(turn_id, vector)
        if not chain.members:
            del self.chains[cid]
            self._lasts.remove([cid])
            self._cents.remove([cid])
            return
        latest = None
        if was_latest:
            chain.last_index, latest = chain.indexes[-1], vectors[chain.members[-1]]
        self._sync(chain, latest)

    def latest(self, chain_id: int, size: int) -> list[str]:
        """The chain's latest ``size`` members, oldest first."""
        return self.chains[chain_id].members[-size:]

    def relevance(
        self, vector: Vector, matched: Mapping[int, float]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(slots, relevance, latest turn index)`` of every chain, vectorised: the cosine of
        its centroid to ``vector``, raised to ``matched[chain]`` (a matched turn's similarity)."""
        slots, sims = self._cents.similarities(vector)
        rel = sims.astype(np.float64)
        if matched:
            at = np.searchsorted(slots, [self._cents.slot_of(c) for c in matched])
            rel[at] = np.maximum(rel[at], np.fromiter(matched.values(), dtype=np.float64))
        return slots, rel, self._last_index[slots]

    def at_slot(self, slot: int) -> int:
        """The chain id held in a slot of ``relevance``."""
        return self._cents.key_at(slot)

    def slot_of(self, chain_id: int) -> int:
        """The slot of ``relevance`` holding a chain."""
        return self._cents.slot_of(chain_id)

    def lengths(self) -> list[int]:
        return [len(c.members) for c in self.chains.values()]


def chain_length_stats(lengths: list[int]) -> dict[str, float | dict[int, int]]:
    """Mean length and the histogram, comparable with the paper's (mean 1.73, mostly 2-3)."""
    if not lengths:
        return {"chains": 0, "mean": 0.0, "histogram": {}}
    return {
        "chains": len(lengths),
        "mean": float(np.mean(lengths)),
        "histogram": dict(sorted(Counter(lengths).items())),
    }
