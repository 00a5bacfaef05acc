"""Vectors kept as int8 codes with one float32 scale each: a quarter of float32's memory.

A vector ``x`` is stored as ``scale = max|x| / (127/127.5)`` (1 for a zero vector) and the
codes of ``x / scale`` under FAISS's 8-bit uniform scalar quantizer over [-1, 1]; it decodes
to ``scale * (code - 127) / 127.5``. The largest component lands on a code's centre, so
encoding a decoded vector gives back the same codes and scale, bit for bit: a vector rounded
once (``rounded``) is stored, reloaded and re-encoded without drifting, and running sums that
add it and later subtract its stored copy cancel exactly.

``inner_products`` scores a query against coded rows without decoding them, by FAISS's
inner-product scanner over the codes, then times each row's scale.
"""

from __future__ import annotations

import threading
from typing import Any

import faiss
import numpy as np
import numpy.typing as npt

__all__ = ["Codes", "decode", "encode", "inner_products", "rounded"]

Codes = npt.NDArray[np.uint8]

_TABLE = ((np.arange(256) - 127) / 127.5).astype(np.float32)
"""The value of each code (times the scale): what FAISS's quantizer decodes it to."""
_TOP = _TABLE[254]
"""Where the largest component lands: code 254 (or 0 for a negative one), a code's centre."""

_lock = threading.Lock()
_quantizers: dict[int, faiss.ScalarQuantizer] = {}
_ids = np.zeros(0, dtype=np.int64)
_idle_scanners: dict[int, list[object]] = {}
"""Scanners not in use, by dimension. FAISS's Python binding cannot free a scanner (it has no
destructor to call), so each one made is kept and reused: a call takes one, and gives it back
when done; there are never more than the calls that ran at once."""


def _quantizer(d: int) -> faiss.ScalarQuantizer:
    """The trained quantizer for ``d`` dimensions (an untrained one crashes FAISS)."""
    sq = _quantizers.get(d)
    if sq is None:
        with _lock:
            sq = _quantizers.get(d)
            if sq is None:
                sq = faiss.ScalarQuantizer(d, faiss.ScalarQuantizer.QT_8bit_uniform)
                sq.train(np.array([[-1.0] * d, [1.0] * d], dtype=np.float32))
                _quantizers[d] = sq
    return sq


def _scale(peak: np.float32) -> np.float32:
    """The least float32 scale whose ``scale * _TOP`` reaches ``peak`` (> 0): a function of
    the decoded peak too, which is what makes encoding a decoded vector give it back."""
    with np.errstate(over="ignore"):  # too large for float32: refused by the caller
        s = np.float32(peak / _TOP)
    while s * _TOP < peak:  # the quotient is within an ulp of the least scale
        s = np.nextafter(s, np.float32(np.inf))
    while (lower := np.nextafter(s, np.float32(0.0))) * _TOP >= peak:
        s = lower
    return s


def _scales(peak: np.ndarray) -> npt.NDArray[np.float32]:
    """``_scale`` of each peak (1 for a zero vector), vectorised."""
    with np.errstate(over="ignore"):
        s: npt.NDArray[np.float32] = (peak / _TOP).astype(np.float32)
    for _ in range(2):
        low = s * _TOP < peak
        if not low.any():
            break
        s[low] = np.nextafter(s[low], np.float32(np.inf))
    for _ in range(2):
        lower = np.nextafter(s, np.float32(0.0))
        enough = (lower * _TOP >= peak) & (peak > 0)
        if not enough.any():
            break
        s[enough] = lower[enough]
    s[peak == 0] = 1.0
    return s


def _codes(x: np.ndarray, scales: np.ndarray | np.float32) -> Codes:
    unit = x / scales
    unit += np.float32(1.0)
    unit /= np.float32(2.0)
    np.clip(unit, np.float32(0.0), np.float32(1.0), out=unit)
    unit *= np.float32(255.0)
    codes: Codes = unit.astype(np.uint8)
    return codes


def encode(vectors: npt.ArrayLike) -> tuple[Codes, npt.NDArray[np.float32]]:
    """``(codes, scales)`` of a vector (codes of shape ``(d,)``, one scale) or of the rows of
    a matrix. Raises ValueError for a value that is not finite (or too large for a scale).

    The codes are those of FAISS's quantizer (``(x / scale + 1) / 2``, clipped to [0, 1],
    times 255, truncated), computed here in the same float32 steps: cheaper for one row."""
    x = np.asarray(vectors, dtype=np.float32)
    if x.ndim == 1:
        peak = np.abs(x).max() if x.size else np.float32(0.0)
        if not np.isfinite(peak):  # a NaN anywhere makes the peak NaN
            raise ValueError("vectors must be finite")
        scale = _scale(peak) if peak > 0 else np.float32(1.0)
        if not np.isfinite(scale):
            raise ValueError("vectors must be finite and within float32 range")
        return _codes(x, scale), np.array([scale], dtype=np.float32)
    if x.ndim != 2:
        raise ValueError(f"expected a vector or a matrix, got shape {x.shape}")
    n, d = x.shape
    if n == 0 or d == 0:
        return np.zeros((n, d), np.uint8), np.ones(n, np.float32)
    peaks = np.abs(x).max(axis=1)
    if not np.isfinite(peaks).all():
        raise ValueError("vectors must be finite")
    scales = _scales(peaks)
    if not np.isfinite(scales).all():
        raise ValueError("vectors must be finite and within float32 range")
    return _codes(x, scales[:, None]), scales


def decode(codes: Codes, scales: npt.ArrayLike) -> npt.NDArray[np.float32]:
    """The float32 vector (or rows) that codes and their scale(s) stand for."""
    s = np.asarray(scales, dtype=np.float32)
    out: npt.NDArray[np.float32] = _TABLE[codes]
    out *= s if codes.ndim == 1 else s.reshape(-1, 1)
    return out


def rounded(vectors: npt.ArrayLike) -> npt.NDArray[np.float32]:
    """A vector (or rows) as it will be stored: ``decode(*encode(v))``, a fixed point."""
    codes, scales = encode(vectors)
    return decode(codes, scales)


def _row_ids(n: int) -> np.ndarray:
    global _ids
    ids = _ids
    if ids.size < n:
        ids = np.arange(max(n, 2 * ids.size), dtype=np.int64)
        ids.setflags(write=False)
        _ids = ids
    return ids


def inner_products(codes: Codes, scales: np.ndarray, query: np.ndarray) -> np.ndarray:
    """``decode(codes, scales) @ query`` in float32 without decoding, by FAISS's scanner over
    the codes (single-threaded; each row's product is the same wherever it sits). Equal to
    the decoded products up to float32 rounding."""
    n, d = codes.shape
    q = np.ascontiguousarray(query, dtype=np.float32)
    if q.shape != (d,):
        raise ValueError(f"query must have shape ({d},), got {q.shape}")
    if n == 0:
        return np.empty(0, dtype=np.float32)
    codes = np.ascontiguousarray(codes, dtype=np.uint8)
    # a scanner holds the query: each call has one of its own, taken from the idle ones
    with _lock:
        idle = _idle_scanners.setdefault(d, [])
        scanner: Any = idle.pop() if idle else None
    if scanner is None:
        scanner = _quantizer(d).select_InvertedListScanner(  # type: ignore[attr-defined]
            faiss.METRIC_INNER_PRODUCT, None, False, None, False)
    try:
        return _scan(scanner, codes, scales, q, n)
    finally:
        with _lock:
            _idle_scanners[d].append(scanner)


def _scan(scanner: Any, codes: Codes, scales: np.ndarray, q: np.ndarray, n: int) -> np.ndarray:
    scanner.set_query(faiss.swig_ptr(q))
    scanner.set_list(0, 0)
    # a range scan with no floor keeps every row, in row order, in a growing buffer: a
    # third of the time of a heap of every row (a top-k scan), and of float32's kernel
    result = faiss.RangeSearchResult(1)
    partial = faiss.RangeSearchPartialResult(result)  # type: ignore[attr-defined]
    found = partial.new_result(0)
    scanner.scan_codes_range(n, faiss.swig_ptr(codes), faiss.swig_ptr(_row_ids(n)),
                             -np.inf, found)
    if found.nres != n:
        raise RuntimeError(f"the scan returned {found.nres} products for {n} rows")
    partial.finalize()
    out: np.ndarray = faiss.rev_swig_ptr(result.distances, n) * scales[:n]
    return out
