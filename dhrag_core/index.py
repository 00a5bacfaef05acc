"""Vector storage with stable slots, for history items that come and go.

Rows live in one preallocated float32 matrix (grown by a quarter when full, or reserved ahead
for a bulk load), so each vector is stored once, without the doubling of a growing
``std::vector``. A removed key frees its slot (zeroed) and the next insert reuses it: O(d) per
update, where ``IndexIDMap.remove_ids`` on a flat FAISS index compacts the whole array.
Queries are one pass of FAISS's inner-product kernel over the rows (``inner_products``).
A compact index keeps int8 codes and a scale per row instead (``dhrag_core.compact``), a
quarter of the memory, and scans the codes.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Generic, TypeVar

import faiss
import numpy as np

from dhrag_core import compact
from dhrag_core.records import Floats, Vector

__all__ = ["RowBuffer", "SumIndex", "VectorIndex", "inner_products"]

K = TypeVar("K", bound=Hashable)

# a session holds thousands of small row buffers (its summary nodes): little slack each
_NODE_SLACK = 2

_NO_SCALES = np.zeros(0, dtype=np.float32)
_NO_SCALES.setflags(write=False)


def _grown(size: int, needed: int, slack: int = 8) -> int:
    """A new capacity for ``needed`` rows: a quarter more, at least ``slack`` rows more."""
    return max(needed, size + max(slack, size // 4))


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
    """Keys -> unit vectors; exact top-k by inner product (cosine for normalised vectors).

    ``compact=True`` keeps each vector as int8 codes and a scale (``dhrag_core.compact``):
    what it returns are the products with the vectors as that rounds them.
    """

    def __init__(self, dimension: int, compact: bool = False) -> None:
        self.dimension = dimension
        self.compact = compact
        self._rows = np.zeros((0, dimension), dtype=np.uint8 if compact else np.float32)
        self._scales = _NO_SCALES
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

    def _products(self, query: Vector) -> np.ndarray:
        if self.compact:
            return compact.inner_products(self._rows[: self._n], self._scales[: self._n], query)
        return inner_products(self._rows[: self._n], query)

    def reserve(self, rows: int) -> None:
        """Make room for ``rows`` slots in all, so that a bulk load allocates once."""
        if rows > self._rows.shape[0]:
            grown = np.zeros((rows, self.dimension), dtype=self._rows.dtype)
            grown[: self._n] = self._rows[: self._n]
            self._rows = grown
            if self.compact:
                scales = np.zeros(rows, dtype=np.float32)
                scales[: self._n] = self._scales[: self._n]
                self._scales = scales
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
        if self.compact:
            self.add_codes(keys, *compact.encode(v))
        else:
            self._put(keys, v, None)

    def add_codes(self, keys: list[K], codes: compact.Codes, scales: np.ndarray) -> None:
        """``add`` for vectors already coded (``compact.encode``), to a compact index."""
        if not self.compact:
            raise ValueError("add_codes needs a compact index (VectorIndex(compact=True))")
        if codes.ndim != 2 or codes.shape[1] != self.dimension or len(scales) != len(codes):
            raise ValueError(f"codes must have shape (n, {self.dimension}), one scale each")
        self._put(keys, codes, np.asarray(scales, dtype=np.float32))

    def _put(self, keys: list[K], v: np.ndarray, scales: np.ndarray | None) -> None:
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
            if scales is not None:
                self._scales[slot] = scales[row]
            self._keys[slot] = key
            self._slot[key] = slot
            self._live[slot] = True
        if fresh:
            start, end = self._n, self._n + len(fresh)
            if end > self._rows.shape[0]:
                self.reserve(_grown(self._rows.shape[0], end))
            self._rows[start:end] = v[fresh]
            if scales is not None:
                self._scales[start:end] = scales[fresh]
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
            self._rows[slot] = 0
            if self.compact:
                self._scales[slot] = 0.0
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
        sims = self._products(q[0])
        sims[~self._live[: sims.size]] = -np.inf
        k = min(k, len(self._slot))
        top = np.argpartition(-sims, k - 1)[:k] if k < sims.size else np.arange(sims.size)
        top = top[np.argsort(-sims[top], kind="stable")]
        return [(self._keys[int(i)], float(sims[i])) for i in top]  # type: ignore[misc]

    def rows(self, keys: Sequence[K]) -> Vector:
        """The vectors of ``keys`` (KeyError if one is absent), stacked; a compact index
        decodes them in one go, to the values its products use."""
        at = np.fromiter((self._slot[k] for k in keys), dtype=np.int64, count=len(keys))
        if self.compact:
            return compact.decode(self._rows[at], self._scales[at])
        rows: Vector = self._rows[at]
        return rows

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
        sims = self._products(q)
        if len(self._slot) == n:  # no free slot (a full session reuses them): every row
            if self._all is None or self._all.size != n:
                self._all = np.arange(n)
                self._all.setflags(write=False)
            return self._all, sims
        slots = np.flatnonzero(self._live[:n])
        return slots, sims[slots]


class SumIndex(VectorIndex[K]):
    """Running sums of vectors by key, searched by cosine: the one copy of each cluster's or
    chain's vector sum, whose direction is its centroid.

    Rows hold the sums (float32) and a norm each; ``add_to`` adds a vector to a key's sum in
    O(d) (a new key starts at zero), and ``search`` / ``similarities`` give each sum's cosine
    with the query (0 for a zero sum), as the normalised centroid's inner product would.
    """

    def __init__(self, dimension: int) -> None:
        super().__init__(dimension)
        self._norms = np.zeros(0, dtype=np.float32)

    def reserve(self, rows: int) -> None:
        super().reserve(rows)
        if self._norms.size < self._rows.shape[0]:
            norms = np.zeros(self._rows.shape[0], dtype=np.float32)
            norms[: self._norms.size] = self._norms
            self._norms = norms

    def _put(self, keys: list[K], v: np.ndarray, scales: np.ndarray | None) -> None:
        super()._put(keys, v, scales)
        for key in keys:
            slot = self._slot[key]
            self._norms[slot] = np.linalg.norm(self._rows[slot])

    def remove(self, keys: list[K]) -> None:
        slots = [self._slot[k] for k in keys if k in self._slot]
        super().remove(keys)
        self._norms[slots] = 0.0

    def add_to(self, key: K, vector: Floats) -> None:
        """Add ``vector`` to the sum of ``key`` (a new key's sum starts at zero)."""
        slot = self._slot.get(key)
        if slot is None:
            self.add([key], vector)
            return
        v = self._check(vector)[0]
        self._rows[slot] += v
        self._norms[slot] = np.linalg.norm(self._rows[slot])

    def total(self, key: K) -> Vector:
        """The sum of ``key`` (a copy; zeros for a key never added to)."""
        slot = self._slot.get(key)
        if slot is None:
            return np.zeros(self.dimension, dtype=np.float32)
        out: Vector = self._rows[slot].copy()
        return out

    def norm(self, key: K) -> float:
        """The length of the sum of ``key`` (0 for a key never added to)."""
        slot = self._slot.get(key)
        return 0.0 if slot is None else float(self._norms[slot])

    def centroid(self, key: K) -> Vector:
        """The sum's direction (unit length; zeros for a zero sum)."""
        total, n = self.total(key), self.norm(key)
        out: Vector = (total / n).astype(np.float32) if n > 0 else total
        return out

    def _products(self, query: Vector) -> np.ndarray:
        sims = super()._products(query)
        norms = self._norms[: sims.size]
        out: np.ndarray = np.divide(sims, norms, out=np.zeros_like(sims), where=norms > 0)
        return out


class RowBuffer:
    """Row vectors kept in order, as int8 codes and a scale each (``dhrag_core.compact``), in
    a buffer with room to grow: appending a newest row and dropping the oldest (what nearly
    every turn does to a summary node) cost O(d), not a copy of all rows; a middle insert or
    delete moves the rows after it. Rows read back as ``compact.rounded`` of what was put."""

    __slots__ = ("_buf", "_hi", "_lo", "_scales")

    def __init__(self, rows: np.ndarray) -> None:
        codes, scales = compact.encode(rows)
        self._alloc(codes, scales, _grown(len(rows), len(rows), _NODE_SLACK))

    def _alloc(self, codes: np.ndarray, scales: np.ndarray, size: int) -> None:
        self._buf = np.empty((size, codes.shape[1]), dtype=np.uint8)
        self._scales = np.empty(size, dtype=np.float32)
        self._lo, self._hi = 0, len(codes)
        self._buf[: self._hi] = codes
        self._scales[: self._hi] = scales

    def codes(self) -> tuple[compact.Codes, np.ndarray]:
        """The rows' codes and scales (views, valid until the next change)."""
        return self._buf[self._lo : self._hi], self._scales[self._lo : self._hi]

    def view(self) -> Vector:
        """The rows, decoded (a new array)."""
        return compact.decode(*self.codes())

    def row(self, at: int) -> Vector:
        i = self._lo + at
        return compact.decode(self._buf[i], self._scales[i : i + 1])

    def rows_at(self, positions: np.ndarray) -> Vector:
        """The rows at ``positions``, decoded in one go."""
        at = positions + self._lo
        return compact.decode(self._buf[at], self._scales[at])

    def products(self, query: Vector) -> np.ndarray:
        """The rows' inner products with ``query`` (``compact.inner_products``)."""
        return compact.inner_products(*self.codes(), query)

    def insert(self, at: int, row: Floats) -> None:
        code, scale = compact.encode(row)
        if self._hi == len(self._buf):
            live, scales = self.codes()
            self._alloc(live, scales, _grown(len(live), len(live) + 1, _NODE_SLACK))
        i = self._lo + at
        self._buf[i + 1 : self._hi + 1] = self._buf[i : self._hi]
        self._scales[i + 1 : self._hi + 1] = self._scales[i : self._hi]
        self._buf[i] = code
        self._scales[i] = scale[0]
        self._hi += 1

    def delete(self, at: int) -> None:
        """Drop a row; once a quarter of the buffer or less is in use, it is reallocated
        smaller, so a node that shrank does not keep the room it once needed."""
        if at == 0:
            self._lo += 1
        else:
            i = self._lo + at
            self._buf[i : self._hi - 1] = self._buf[i + 1 : self._hi]
            self._scales[i : self._hi - 1] = self._scales[i + 1 : self._hi]
            self._hi -= 1
        live = self._hi - self._lo
        if len(self._buf) > 16 and 4 * live <= len(self._buf):
            codes, scales = self.codes()
            self._alloc(codes, scales, _grown(live, live, _NODE_SLACK))
