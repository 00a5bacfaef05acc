"""Calibration: every vector dhrag compares is centred on the embedder's mean direction.

Embedders differ in where unrelated texts sit: one puts them near cosine 0, another (e5, bge)
near 0.7-0.9, because all their vectors share a common component. A threshold, a margin or a
weight that adds another term to a cosine then means something else for each model. Centring
removes that component: ``c(v) = (v - m) / |v - m|``, with ``m`` the embedder's mean
direction over fixed, varied probe texts (passages and questions). Identical texts stay at 1
and unrelated ones sit near 0 whatever the model, and every similarity, centroid and weighted
sum computed on centred vectors is unchanged when the embedder adds a constant component to
all its vectors.

The map is a bijection of the unit sphere (for ``|m| < 1``), so ``invert`` gives back the
embedder's own vector: the history stores centred vectors and hands out raw ones, and the
engine searches and ranks knowledge-base passages with the embedder's vectors (a single query
ranks exactly as the embedder ranks it), their cosines put on the same scale by ``similarity``.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from functools import lru_cache
from importlib import resources

import numpy as np
import numpy.typing as npt

from dhrag_core.embedding import Embedder, LocalModelEmbedder, l2_normalise, opening_words
from dhrag_core.records import Vector

__all__ = ["Calibration", "calibrate", "probe_texts", "rescale"]

_PROBE_WORDS = 24  # probe texts are the opening words of each demo passage: short to encode
_MOST_UNRELATED = 0.98  # above this cosine of unrelated texts an embedder tells nothing apart

log = logging.getLogger(__name__)


class Calibration:
    """The centring map of one embedder: ``apply`` to compare, ``invert`` to give back.

    Args:
        mean: The embedder's mean direction ``m`` (its norm below 1); zeros: the identity.
    """

    def __init__(self, mean: npt.ArrayLike) -> None:
        m = np.asarray(mean, dtype=np.float64)
        if m.ndim != 1 or m.size == 0 or not np.isfinite(m).all():
            raise ValueError(f"mean must be a finite 1-d vector, got shape {m.shape}")
        if float(m @ m) >= 1.0:
            raise ValueError("mean must have a norm below 1 (the mean of unit vectors)")
        self.mean = m.astype(np.float32)

    @classmethod
    def from_vectors(cls, vectors: npt.ArrayLike) -> Calibration:
        """The calibration whose mean is that of these vectors (each L2-normalised first),
        e.g. a knowledge base's own."""
        rows = l2_normalise(np.asarray(vectors, dtype=np.float32))
        if rows.shape[0] < 2:
            raise ValueError("a calibration needs at least 2 vectors")
        return cls(rows.mean(axis=0, dtype=np.float64))

    @classmethod
    def identity(cls, dimension: int) -> Calibration:
        """No centring: vectors are compared as the embedder gives them."""
        return cls(np.zeros(dimension))

    @property
    def dimension(self) -> int:
        return int(self.mean.shape[0])

    @property
    def unrelated(self) -> float:
        """The embedder's cosine of unrelated texts: ``|m|^2``, the mean cosine of the pairs
        of vectors ``m`` is the mean of."""
        return float(self.mean.astype(np.float64) @ self.mean.astype(np.float64))

    def similarity(self, cosine: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """A cosine of two of the embedder's own vectors on the calibrated scale: unrelated
        texts 0, identical ones 1 (``rescale``)."""
        return rescale(cosine, self.unrelated)

    def apply(self, vectors: npt.ArrayLike) -> Vector:
        """Centred unit vectors (a 1-d input gives a 1-d output)."""
        v = np.asarray(vectors, dtype=np.float32)
        out = l2_normalise(v - self.mean)
        return out[0] if v.ndim == 1 else out

    def invert(self, vectors: npt.ArrayLike) -> Vector:
        """The embedder's unit vectors whose centred form is ``vectors``: ``r c + m`` with the
        ``r > 0`` that gives unit length."""
        c = np.asarray(vectors, dtype=np.float32)
        rows = l2_normalise(c).astype(np.float64)
        m = self.mean.astype(np.float64)
        cm = rows @ m
        r = -cm + np.sqrt(cm * cm + 1.0 - float(m @ m))
        out = l2_normalise((r[:, None] * rows + m).astype(np.float32))
        return out[0] if c.ndim == 1 else out


def rescale(cosine: npt.ArrayLike, unrelated: float) -> npt.NDArray[np.float64]:
    """``(cos - unrelated) / (1 - unrelated)``: cosines put on a scale where the embedder's
    unrelated texts sit at 0 and identical ones at 1."""
    if not 0.0 <= unrelated < 1.0:
        raise ValueError(f"unrelated must be in [0, 1), got {unrelated!r}")
    out: npt.NDArray[np.float64] = (
        (np.asarray(cosine, dtype=np.float64) - unrelated) / (1.0 - unrelated))
    return out


@lru_cache(maxsize=1)
def probe_texts() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The fixed probe texts, two groups: the opening words of each passage of the packaged
    demo knowledge base (varied Wikipedia text), and questions as people type them into a
    chat (``data/probe_questions.txt``), many of them elliptical follow-ups."""
    data = resources.files("dhrag_core").joinpath("data")
    passages = []
    for line in data.joinpath("demo_kb.jsonl").read_text("utf-8").split("\n"):
        if line.strip():  # split on newlines only: U+2028 may sit inside a JSON string
            passages.append(opening_words(str(json.loads(line)["text"]), _PROBE_WORDS))
    questions = [q.strip() for q in data.joinpath("probe_questions.txt").read_text(
        "utf-8").split("\n") if q.strip()]
    return tuple(passages), tuple(questions)


_MEMO: dict[tuple[str, str], Calibration] = {}
_MEMO_LOCK = threading.Lock()


def calibrate(embedder: Embedder, texts: Sequence[str] | None = None) -> Calibration:
    """The embedder's calibration: the mean of its vectors for ``texts``, or by default the
    average of its means over the two groups of probe texts (passages and questions, which
    sit apart in most models). Deterministic for a deterministic embedder, so every worker
    and every restart centres the same way; a local model's is measured once per process."""
    key = _memo_key(embedder) if texts is None else None
    if key is not None and key in _MEMO:
        return _MEMO[key]
    groups = probe_texts() if texts is None else (tuple(texts),)
    found = np.asarray(embedder.encode([t for g in groups for t in g]))
    if found.ndim != 2 or found.shape != (sum(map(len, groups)), embedder.dimension):
        raise ValueError(
            f"the embedder returned shape {found.shape} for {sum(map(len, groups))} probe "
            f"texts; expected (n, {embedder.dimension})"
        )
    means, at = [], 0
    for g in groups:
        means.append(l2_normalise(found[at : at + len(g)]).mean(axis=0, dtype=np.float64))
        at += len(g)
    mean = np.mean(means, axis=0)
    if float(mean @ mean) > _MOST_UNRELATED:
        log.warning("the embedder gives nearly the same vector for varied probe texts "
                    "(mean cosine %.3f): its vectors are compared uncentred", float(mean @ mean))
        mean = np.zeros_like(mean)
    out = Calibration(mean)
    if key is not None:
        with _MEMO_LOCK:
            _MEMO[key] = out
    return out


def _memo_key(embedder: Embedder) -> tuple[str, str] | None:
    """A key under which a local model's calibration can be kept: its class and folder."""
    if not isinstance(embedder, LocalModelEmbedder):
        return None
    try:
        path = embedder.model_path
    except RuntimeError:  # weights not installed: encoding will say so
        return None
    return type(embedder).__qualname__, str(path)
