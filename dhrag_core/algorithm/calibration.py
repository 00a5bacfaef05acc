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

Measuring ``m`` encodes 551 probe texts (seconds for a local model), so it is done once per
embedder, not per process: the default model's is shipped (``data/calibration_minilm.json``,
made by ``scripts/build_calibration.py``) and any other's is kept on disk
(``calibration_cache_dir``), each keyed by the embedder's identity and checked against its
vectors for a few fingerprint texts, so that a changed model is measured again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Sequence
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from dhrag_core.embedding import (
    Embedder,
    LocalModelEmbedder,
    check_finite,
    l2_normalise,
    opening_words,
)
from dhrag_core.private_files import write_private
from dhrag_core.records import Vector

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

__all__ = [
    "CACHE_ENV",
    "Calibration",
    "calibrate",
    "calibration_cache_dir",
    "calibration_record",
    "embedder_identity",
    "fingerprint_texts",
    "measure",
    "probe_texts",
    "rescale",
]

_PROBE_WORDS = 24  # probe texts are the opening words of each demo passage: short to encode
_MOST_UNRELATED = 0.98  # above this cosine of unrelated texts an embedder tells nothing apart
_SAME_MODEL = 1e-5  # 1 - cosine of two fingerprint rows under which they are the same model's
_FORMAT = 1  # of the shipped and cached files
SHIPPED = "calibration_minilm.json"
"""The default model's calibration, in ``dhrag_core/data``."""
_NO_NAME = frozenset({"", "unknown"})  # model names that name nothing (llama-index's default)
_KEEP_AFTER_S = 1.0  # a calibration measured quicker than this is measured again, not kept
CACHE_ENV = "DHRAG_CALIBRATION_CACHE"
"""Names the calibration cache folder; ``off`` keeps nothing on disk."""

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


def fingerprint_texts() -> tuple[str, ...]:
    """The few texts whose vectors tell whether a shipped or cached calibration is the
    embedder's own: four of the probe questions (short: quick to encode)."""
    questions = probe_texts()[1]
    return tuple(questions[i * len(questions) // 4] for i in range(4))


@lru_cache(maxsize=1)
def _probes_digest() -> str:
    """SHA-256 of the probe texts: a calibration measured on other probes is not reused."""
    h = hashlib.sha256()
    for group in probe_texts():
        h.update(b"\1")
        for t in group:
            h.update(t.encode("utf-8", "surrogatepass") + b"\0")
    return h.hexdigest()


def calibration_cache_dir() -> Path | None:
    """Where calibrations of embedders other than the default are kept: ``$DHRAG_CALIBRATION_
    CACHE`` (``off``: nowhere), else ``$DHRAG_CACHE/calibration``, else
    ``~/.cache/dhrag/calibration``."""
    given = os.environ.get(CACHE_ENV, "").strip()
    if given.lower() == "off":
        return None
    if given:
        return Path(given).expanduser()
    root = os.environ.get("DHRAG_CACHE") or Path.home() / ".cache" / "dhrag"
    return Path(root).expanduser() / "calibration"


def embedder_identity(embedder: Embedder, _depth: int = 0) -> str | None:
    """What names an embedder's model, to file its calibration under: its class and
    dimension with its model folder (a local model) or the model name of what it wraps
    (``model_path``, ``model_name`` or ``model`` of itself, its ``embeddings`` or
    ``embed_model``; a dhrag embedder inside those: its identity); None for one that names
    no model (nothing is kept on disk for it)."""
    cls = type(embedder)
    name = f"{cls.__module__}.{cls.__qualname__}:{embedder.dimension}"
    if isinstance(embedder, LocalModelEmbedder):
        try:
            return f"{name}:{embedder.model_path.resolve()}"
        except RuntimeError:  # weights not installed: encoding will say so
            return None
    for inner in (embedder, getattr(embedder, "embeddings", None),
                  getattr(embedder, "embed_model", None)):
        if inner is None:
            continue
        wrapped = getattr(inner, "embedder", None) if inner is not embedder else None
        if wrapped is not None and _depth < 3 and isinstance(wrapped, Embedder):
            found = embedder_identity(wrapped, _depth + 1)  # a dhrag embedder in a framework's
            return f"{name}:{found}" if found else None
        for attr in ("model_path", "model_name", "model"):
            value = getattr(inner, attr, None)
            if isinstance(value, (str, os.PathLike)) and str(value) not in _NO_NAME:
                kind = type(inner)
                return f"{name}:{kind.__module__}.{kind.__qualname__}:{attr}={value}"
    return None


def measure(embedder: Embedder, texts: Sequence[str] | None = None) -> Calibration:
    """The embedder's calibration measured now (``calibrate`` without the shipped one, the
    disk cache or the memo): the mean of its vectors for ``texts``, or by default the
    average of its means over the two groups of probe texts."""
    groups = probe_texts() if texts is None else (tuple(texts),)
    n = sum(map(len, groups))
    found = np.asarray(embedder.encode([t for g in groups for t in g]))
    if found.ndim != 2 or found.shape != (n, embedder.dimension):
        raise ValueError(
            f"{type(embedder).__name__} returned shape {found.shape} for {n} probe texts; "
            f"expected (n, {embedder.dimension})"
        )
    check_finite(embedder, found, " of the calibration probe texts")
    means, at = [], 0
    for g in groups:
        means.append(l2_normalise(found[at : at + len(g)]).mean(axis=0, dtype=np.float64))
        at += len(g)
    mean = np.mean(means, axis=0)
    if float(mean @ mean) > _MOST_UNRELATED:
        log.warning("the embedder gives nearly the same vector for varied probe texts "
                    "(mean cosine %.3f): its vectors are compared uncentred", float(mean @ mean))
        mean = np.zeros_like(mean)
    return Calibration(mean)


_MEMO: dict[tuple[str, str], Calibration] = {}
_MEMO_LOCK = threading.Lock()


def calibrate(
    embedder: Embedder, texts: Sequence[str] | None = None, *, cached: bool = True
) -> Calibration:
    """The embedder's calibration: the mean of its vectors for ``texts``, or by default the
    average of its means over the two groups of probe texts (passages and questions, which
    sit apart in most models). Deterministic for a deterministic embedder, so every worker
    and every restart centres the same way.

    For the probe texts it is measured once per embedder: the shipped one when the embedder's
    vectors for ``fingerprint_texts`` are the default model's, else the one kept in
    ``calibration_cache_dir`` for its identity (``embedder_identity``) when they match, else
    measured now (and kept there, unless that took under a second: a cheap embedder is
    measured again rather than leaving files); ``cached=False`` measures it now. A local
    model's is also kept per process.
    """
    if texts is not None or not cached:
        return measure(embedder, texts)
    key = _memo_key(embedder)
    if key is not None and key in _MEMO:
        return _MEMO[key]
    prints = _fingerprint(embedder)
    out = _shipped(prints)
    if out is None:
        identity = embedder_identity(embedder)
        folder = calibration_cache_dir() if identity is not None else None
        path = None
        if identity is not None and folder is not None:
            path = folder / f"{hashlib.sha256(identity.encode()).hexdigest()[:40]}.json"
            out = _read(path, prints, shipped=False)
        if out is None:
            log.info("calibrating %s on %d probe texts%s", type(embedder).__name__,
                     sum(map(len, probe_texts())), f" (once: kept in {path})" if path else "")
            started = time.perf_counter()
            out = measure(embedder)
            if path is not None and identity is not None and (
                    time.perf_counter() - started >= _KEEP_AFTER_S):
                _write(path, identity, prints, out)
    if key is not None:
        with _MEMO_LOCK:
            _MEMO[key] = out
    return out


def _fingerprint(embedder: Embedder) -> npt.NDArray[np.float64]:
    texts = fingerprint_texts()
    found = np.asarray(embedder.encode(list(texts)), dtype=np.float64)
    if found.shape != (len(texts), embedder.dimension):
        raise ValueError(
            f"{type(embedder).__name__} returned shape {found.shape} for {len(texts)} probe "
            f"texts; expected ({len(texts)}, {embedder.dimension})"
        )
    check_finite(embedder, found, " of the calibration probe texts")
    return l2_normalise(found).astype(np.float64)


def calibration_record(embedder: Embedder, identity: str) -> dict[str, Any]:
    """The embedder's calibration measured now, as the JSON record it is shipped or cached
    as: the mean, with the embedder's vectors for ``fingerprint_texts``."""
    return _record(identity, _fingerprint(embedder), measure(embedder))


def _record(identity: str, prints: npt.NDArray[np.float64], cal: Calibration) -> dict[str, Any]:
    """The JSON a calibration is kept as (shipped or cached)."""
    return {
        "format": _FORMAT,
        "identity": identity,
        "dimension": cal.dimension,
        "probes_sha256": _probes_digest(),
        "fingerprint_texts": list(fingerprint_texts()),
        "fingerprint": [[float(x) for x in row] for row in prints],
        "mean": [float(x) for x in cal.mean.astype(np.float64)],
    }


def _parse(data: Any, dimension: int) -> tuple[npt.NDArray[np.float64], Calibration] | None:
    """The fingerprint and calibration of a kept record; None when it was made for other
    probe texts or another dimension; ``ValueError`` when it is damaged."""
    if not isinstance(data, dict) or data.get("format") != _FORMAT:
        raise ValueError("not a calibration record of this version")
    missing = {"dimension", "probes_sha256", "fingerprint_texts", "fingerprint", "mean"} - set(data)
    if missing:
        raise ValueError(f"no {', '.join(sorted(missing))}")
    if (data.get("probes_sha256") != _probes_digest()
            or data.get("fingerprint_texts") != list(fingerprint_texts())):
        return None  # made for other probe texts
    if data.get("dimension") != dimension:
        return None
    prints = np.asarray(data["fingerprint"], dtype=np.float64)
    mean = np.asarray(data["mean"], dtype=np.float64)
    if prints.shape != (len(fingerprint_texts()), dimension) or mean.shape != (dimension,):
        raise ValueError(f"fingerprint {prints.shape} or mean {mean.shape} of the wrong shape")
    if not np.isfinite(prints).all():
        raise ValueError("non-finite fingerprint")
    return prints, Calibration(mean)


def _same_model(kept: npt.NDArray[np.float64], prints: npt.NDArray[np.float64]) -> bool:
    return bool(((kept * prints).sum(axis=1) >= 1.0 - _SAME_MODEL).all())


def _read(path: Traversable, prints: npt.NDArray[np.float64], *, shipped: bool
          ) -> Calibration | None:
    """The calibration kept in ``path`` if it is this embedder's; a damaged file is warned
    about and measured again, never an error."""
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        if shipped:
            log.warning("the shipped calibration %s is missing: measuring it", path)
        return None
    except OSError as exc:
        log.warning("cannot read the calibration file %s (%s): measuring it again", path, exc)
        return None
    try:
        parsed = _parse(json.loads(text), prints.shape[1])
    except (ValueError, TypeError, KeyError) as exc:
        log.warning("the calibration file %s is damaged (%s): measuring it again", path, exc)
        return None
    if parsed is None or not _same_model(parsed[0], prints):
        if not shipped:
            log.info("the calibration kept in %s is for other vectors: measuring it again", path)
        return None
    return parsed[1]


def _shipped(prints: npt.NDArray[np.float64]) -> Calibration | None:
    """The shipped calibration of all-MiniLM-L6-v2 if these are that model's vectors."""
    return _read(resources.files("dhrag_core").joinpath("data", SHIPPED), prints,
                 shipped=True)


def _write(path: Path, identity: str, prints: npt.NDArray[np.float64], cal: Calibration) -> None:
    """Keep a calibration (owner-only folder and file, replaced atomically); a folder that
    cannot be written is warned about, never an error."""
    try:
        write_private(path, json.dumps(_record(identity, prints, cal)).encode("utf-8"))
    except OSError as exc:
        log.warning("cannot keep the calibration in %s (%s): it will be measured again in "
                    "the next process", path, exc)


def _memo_key(embedder: Embedder) -> tuple[str, str] | None:
    """A key under which a local model's calibration can be kept: its class and folder."""
    if not isinstance(embedder, LocalModelEmbedder):
        return None
    try:
        path = embedder.model_path
    except RuntimeError:  # weights not installed: encoding will say so
        return None
    return type(embedder).__qualname__, str(path)
