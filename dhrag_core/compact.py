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
_BLOCK = 256  # rows per scan: a heap this small fills in half the time of one of every row
_IDS = np.arange(_BLOCK, dtype=np.int64)


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


def _scales(peak: np.ndarray) -> npt.NDArray[np.float32]:
    """The least float32 scale whose ``scale * _TOP`` reaches ``peak``: a function of the
    decoded peak too, which is what makes encoding a decoded vector give it back."""
    with np.errstate(over="ignore"):  # too large for float32: refused by the caller
        s = (peak / _TOP).astype(np.float32)
    up, down = np.float32(np.inf), np.float32(0.0)
    for _ in range(3):
        s = np.where(s * _TOP < peak, np.nextafter(s, up), s)
    for _ in range(3):
        lower = np.nextafter(s, down)
        s = np.where(lower * _TOP >= peak, lower, s)
    out: npt.NDArray[np.float32] = np.where(peak > 0, s, np.float32(1.0)).astype(np.float32)
    return out


def encode(vectors: npt.ArrayLike) -> tuple[Codes, npt.NDArray[np.float32]]:
    """``(codes, scales)`` of a vector (codes of shape ``(d,)``, one scale) or of the rows of
    a matrix. Raises ValueError for a value that is not finite (or too large for a scale)."""
    x = np.asarray(vectors, dtype=np.float32)
    single = x.ndim == 1
    x = np.ascontiguousarray(x[None, :] if single else x)
    if x.ndim != 2:
        raise ValueError(f"expected a vector or a matrix, got shape {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError("vectors must be finite")
    n, d = x.shape
    if n == 0 or d == 0:
        return np.zeros((n, d), np.uint8), np.ones(n, np.float32)
    peak = np.abs(x).max(axis=1)
    scales = _scales(peak)
    if not np.isfinite(scales).all():
        raise ValueError("vectors must be finite and within float32 range")
    codes = _quantizer(d).compute_codes(np.ascontiguousarray(x / scales[:, None]))
    return (codes[0], scales[:1]) if single else (codes, scales)


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


def inner_products(codes: Codes, scales: np.ndarray, query: np.ndarray) -> np.ndarray:
    """``decode(codes, scales) @ query`` in float32 without decoding, by FAISS's scanner over
    the codes (single-threaded; each row's product is the same wherever it sits). Equal to
    the decoded products up to float32 rounding."""
    n, d = codes.shape
    q = np.ascontiguousarray(query, dtype=np.float32)
    if q.shape != (d,):
        raise ValueError(f"query must have shape ({d},), got {q.shape}")
    out = np.empty(n, dtype=np.float32)
    if n == 0:
        return out
    codes = np.ascontiguousarray(codes, dtype=np.uint8)
    # a fresh scanner per call: it holds the query, so two threads must never share one
    scanner = _quantizer(d).select_InvertedListScanner(  # type: ignore[attr-defined]
        faiss.METRIC_INNER_PRODUCT, None, False, None, False)
    scanner.set_query(faiss.swig_ptr(q))
    scanner.set_list(0, 0)
    # each block of rows fills a heap of its own size, started empty (-inf), so every row
    # lands in it, scattered back by label; a small heap stays cheap to fill
    dist = np.empty(_BLOCK, dtype=np.float32)
    labels = np.empty(_BLOCK, dtype=np.int64)
    for start in range(0, n, _BLOCK):
        m = min(_BLOCK, n - start)
        dist.fill(-np.inf)
        scanner.scan_codes(m, faiss.swig_ptr(codes[start:]), faiss.swig_ptr(_IDS),
                           faiss.swig_ptr(dist), faiss.swig_ptr(labels), m)
        out[start + labels[:m]] = dist[:m]
    out *= scales[:n]
    return out
