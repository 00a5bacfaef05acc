"""Vector storage with stable slots, for history items that come and go.

Rows live in one preallocated float32 matrix (grown by a quarter when full, or reserved ahead
for a bulk load), so each vector is stored once, without the doubling of a growing
``std::vector``. A removed key frees its slot (zeroed) and the next insert reuses it: O(d) per
update, where ``IndexIDMap.remove_ids`` on a flat FAISS index compacts the whole array.
Queries are one pass of FAISS's inner-product kernel over the rows (``inner_products``).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

import faiss
import numpy as np

from dhrag_core.records import Floats, Vector

__all__ = ["RowBuffer", "VectorIndex", "inner_products"]

K = TypeVar("K", bound=Hashable)


def _grown(size: int, needed: int) -> int:
    """A new capacity for ``needed`` rows: a quarter more, at least 8 rows of slack."""
    return max(needed, size + max(8, size // 4))


def inner_products(rows: np.ndarray, query: np.ndarray) -> np.ndarray:
    """``rows @ query`` in float32, by FAISS's single-threaded SIMD kernel: over a large
    matrix it is faster than OpenBLAS's ``sgemv`` and leaves the other cores free (README,
    performance of the history work); each row's product is the same wherever it sits."""
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    query = np.ascontiguousarray(query, dtype=np.float32)
    n, d = rows.shape
    if query.shape != (d,):
        raise ValueError(f"query must have shape ({d},), got {query.shape}")
    out = np.empty(n, dtype=np.float32)
    if n:
        faiss.fvec_inner_products_ny(  # type: ignore[attr-defined]
            faiss.swig_ptr(out), faiss.swig_ptr(query), faiss.swig_ptr(rows), d, n)
    return out


class VectorIndex(Generic[K]):
    """Keys -> unit vectors; exact top-k by inner product (cosine for normalised vectors)."""

    def __init__(self, dimension: int) -> None:
        self.dimension = dimension
        self._rows = np.zeros((0, dimension), dtype=np.float32)
        self._n = 0
        self._keys: list[K | None] = []
        self._slot: dict[K, int] = {}
        self._free: list[int] = []
        self._live = np.zeros(0, dtype=bool)
        self._all: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self._slot)

    def __contains__(self, key: object) -> bool:
        return key in self._slot

    def _storage(self) -> Vector:
        return self._rows[: self._n]

    def reserve(self, rows: int) -> None:
        """Make room for ``rows`` slots in all, so that a bulk load allocates once."""
        if rows > self._rows.shape[0]:
            grown = np.zeros((rows, self.dimension), dtype=np.float32)
            grown[: self._n] = self._rows[: self._n]
            self._rows = grown
        if self._live.size < rows:
            live = np.zeros(rows, dtype=bool)
            live[: self._live.size] = self._live
            self._live = live

    def _check(self, vectors: np.ndarray) -> Vector:
        v = np.ascontiguousarray(vectors, dtype=np.float32)
        if v.ndim == 1:
            v = v[None, :]
        if v.ndim != 2 or v.shape[1] != self.dimension:
            raise ValueError(f"vectors must have shape (n, {self.dimension}), got {v.shape}")
        if not np.isfinite(v).all():
            raise ValueError("vectors contain NaN or infinity")
        return v

    def add(self, keys: list[K], vectors: np.ndarray) -> None:
        """Insert (or overwrite) one vector per key."""
        v = self._check(vectors)
        if len(keys) != v.shape[0]:
            raise ValueError(f"{len(keys)} keys for {v.shape[0]} vectors")
        fresh: list[int] = []
        for row, key in enumerate(keys):
            slot = self._slot.get(key)
            if slot is None and self._free:
                slot = self._free.pop()
            if slot is None:
                fresh.append(row)
                continue
            self._rows[slot] = v[row]
            self._keys[slot] = key
            self._slot[key] = slot
            self._live[slot] = True
        if fresh:
            start, end = self._n, self._n + len(fresh)
            if end > self._rows.shape[0]:
                self.reserve(_grown(self._rows.shape[0], end))
            self._rows[start:end] = v[fresh]
            self._n = end
            for i, row in enumerate(fresh):
                self._keys.append(keys[row])
                self._slot[keys[row]] = start + i
            self._live[start:end] = True

    def remove(self, keys: list[K]) -> None:
        """Forget keys (unknown keys are ignored); their slots are reused by later adds."""
        for key in keys:
            slot = self._slot.pop(key, None)
            if slot is None:
                continue
            self._rows[slot] = 0.0
            self._keys[slot] = None
            self._live[slot] = False
            self._free.append(slot)

    def search(self, query: np.ndarray, k: int) -> list[tuple[K, float]]:
        """Top ``k`` keys by inner product with ``query``, best first."""
        if k <= 0 or not self._slot:
            return []
        q = self._check(query)[:1]
        # One query: one pass over the rows beats IndexFlat.search, whose OpenMP start-up
        # dominates on few cores.
        sims = inner_products(self._storage(), q[0])
        sims[~self._live[: sims.size]] = -np.inf
        k = min(k, len(self._slot))
        top = np.argpartition(-sims, k - 1)[:k] if k < sims.size else np.arange(sims.size)
        top = top[np.argsort(-sims[top], kind="stable")]
        return [(self._keys[int(i)], float(sims[i])) for i in top]  # type: ignore[misc]

    def slot_of(self, key: K) -> int:
        """The slot holding ``key`` (KeyError if absent); slots are stable until removal."""
        return self._slot[key]

    def key_at(self, slot: int) -> K:
        key = self._keys[slot]
        if key is None:
            raise KeyError(f"slot {slot} is free")
        return key

    @property
    def n_slots(self) -> int:
        """Live plus free slots: the length of arrays that callers keep aligned with slots."""
        return self._n

    def similarities(self, query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(slots, inner products)`` of every live vector with ``query``, in slot order."""
        q = self._check(query)[0]
        if not self._slot:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        n = self._n
        sims = inner_products(self._storage(), q)
        if len(self._slot) == n:  # no free slot (a full session reuses them): every row
            if self._all is None or self._all.size != n:
                self._all = np.arange(n)
                self._all.setflags(write=False)
            return self._all, sims
        slots = np.flatnonzero(self._live[:n])
        return slots, sims[slots]


class RowBuffer:
    """Row vectors kept in order in a buffer with room to grow: appending a newest row and
    dropping the oldest (what nearly every turn does to a summary node) cost O(d), not a copy
    of all rows; a middle insert or delete moves the rows after it."""

    __slots__ = ("_buf", "_hi", "_lo")

    def __init__(self, rows: np.ndarray) -> None:
        self._buf = np.empty((_grown(len(rows), len(rows)), rows.shape[1]), dtype=np.float32)
        self._lo, self._hi = 0, len(rows)
        self._buf[: self._hi] = rows

    def view(self) -> np.ndarray:
        return self._buf[self._lo : self._hi]

    def insert(self, at: int, row: Floats) -> None:
        if self._hi == len(self._buf):
            live = self.view()
            grown = np.empty((_grown(len(live), len(live) + 1), self._buf.shape[1]),
                             dtype=np.float32)
            grown[: len(live)] = live
            self._buf, self._lo, self._hi = grown, 0, len(live)
        i = self._lo + at
        self._buf[i + 1 : self._hi + 1] = self._buf[i : self._hi]
        self._buf[i] = row
        self._hi += 1

    def delete(self, at: int) -> None:
        """Drop a row; once a quarter of the buffer or less is in use, it is reallocated
        smaller, so a node that shrank does not keep the room it once needed."""
        if at == 0:
            self._lo += 1
        else:
            i = self._lo + at
            self._buf[i : self._hi - 1] = self._buf[i + 1 : self._hi]
            self._hi -= 1
        live = self._hi - self._lo
        if len(self._buf) > 16 and 4 * live <= len(self._buf):
            rows = self.view()
            self._buf = np.empty((_grown(live, live), rows.shape[1]), dtype=np.float32)
            self._buf[:live] = rows
            self._lo, self._hi = 0, live
