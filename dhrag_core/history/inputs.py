"""Checks and encoding of one turn's input before anything is written.

Passages are cleaned to what every store can keep, given vectors are validated, and whatever
is missing (query, response, passages) is encoded in one batch.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from dhrag_core.algorithm.calibration import Calibration
from dhrag_core.embedding import (
    Embedder,
    encode_checked,
    l2_normalise,
    opening_words,
    token_set,
    tokens,
)
from dhrag_core.records import Passage, Vector
from dhrag_core.settings import Settings
from dhrag_core.validation import CLEANED_KEY, check_text, clean_passage, one_line

__all__ = ["answer_shares", "check_passages", "check_timestamp", "check_vector", "encode_turn"]

log = logging.getLogger(__name__)


def check_passages(passages: Any, settings: Settings) -> list[Passage]:
    """The passages, cleaned to what every store can keep (``clean_passage``): a passage
    a retriever returned never costs the turn."""
    if passages is None:
        return []
    if isinstance(passages, (str, bytes, Passage)):
        raise TypeError("passages must be a list of str or Passage, not a single item")
    out: list[Passage] = []
    for i, p in enumerate(passages):
        if not isinstance(p, Passage):
            # retrievers do return empty documents; storing one is harmless
            if isinstance(p, str):
                p = Passage(text=p)
            else:
                check_text(f"passages[{i}]", p, max_chars=settings.limits.max_text_chars)
        elif not isinstance(p.text, str):
            check_text(f"passages[{i}].text", p.text, max_chars=1)
        clean = clean_passage(p, settings.limits.max_text_chars,
                              settings.limits.max_passage_metadata_chars)
        if clean is not p:
            log.warning("passages[%d] (%s) cleaned to be stored: %s", i,
                        one_line(clean.id or clean.title or "no id"),
                        one_line(clean.metadata.get(CLEANED_KEY, "")))
        out.append(clean)
    if len(out) > settings.limits.max_passages:
        raise ValueError(
            f"passages has {len(out)} items; the limit is {settings.limits.max_passages} "
            "(Settings.limits.max_passages)"
        )
    return out


_EARLIEST, _LATEST = -62_135_596_800.0, 253_402_300_799.0  # years 1 and 9999, in Unix seconds


def check_timestamp(timestamp: Any) -> None:
    """A Unix time in seconds that a date can be made of (years 1 to 9999), or ``None``."""
    if timestamp is None:
        return
    if (isinstance(timestamp, bool) or not isinstance(timestamp, (int, float))
            or not np.isfinite(timestamp)):
        raise TypeError(f"timestamp must be a finite number of seconds, got {timestamp!r}")
    if not _EARLIEST <= timestamp <= _LATEST:
        raise ValueError(f"timestamp must be Unix seconds between the years 1 and 9999 "
                         f"({_EARLIEST:.0f} to {_LATEST:.0f}), got {timestamp!r}")


def check_vector(name: str, v: Any, dimension: int) -> Vector:
    """``v`` as a unit float32 vector of ``dimension``; ValueError when it cannot be one."""
    a = np.asarray(v, dtype=np.float32)
    if a.ndim != 1 or a.shape[0] != dimension or not np.isfinite(a).all():
        raise ValueError(
            f"{name} must be a finite vector of length {dimension}, got shape {a.shape}"
        )
    out: Vector = l2_normalise(a)[0]
    return out


@functools.lru_cache(maxsize=2048)
def _passage_words(text: str) -> frozenset[str]:
    """A passage's content words; cached, as a conversation meets the same passages again."""
    return token_set(text)


def _check_vectors(vectors: Sequence[Any], names: Sequence[str], dimension: int) -> Vector:
    """``check_vector`` of each vector, in one pass over the stacked rows."""
    rows = [np.asarray(v, dtype=np.float32) for v in vectors]
    for name, a in zip(names, rows, strict=True):
        if a.shape != (dimension,):
            check_vector(name, a, dimension)
    stacked = np.stack(rows)
    if not np.isfinite(stacked).all():
        bad = int(np.flatnonzero(~np.isfinite(stacked).all(axis=1))[0])
        check_vector(names[bad], rows[bad], dimension)
    return l2_normalise(stacked)


def answer_shares(response: str, passages: Sequence[Passage],
                  least: float = 0.0) -> np.ndarray | None:
    """Weights of the passages in a response's derived vector: the squared share of the
    response's content words that each passage contains; None when no passage holds at least
    ``least`` of them (or none holds one): the response did not draw on these passages."""
    words = set(tokens(response))
    if not words or not passages:
        return None
    shares = np.array([len(words.intersection(_passage_words(p.text))) for p in passages],
                      dtype=np.float32) / len(words)
    best = float(shares.max())
    if best == 0.0 or best < least:
        return None
    out: np.ndarray = shares**2
    return out


def encode_turn(
    embedder: Embedder, settings: Settings, query: str, response: str, items: list[Passage],
    query_vector: Vector | None, calibration: Calibration | None = None,
) -> tuple[Vector, Vector | None, Vector]:
    """Query, response and passage vectors: given ones checked, the rest encoded in one
    batch (the response's opening words, ``Settings.tree.answer_words``, only when
    ``Settings.tree.answer_vector`` asks for it or the response did not draw on its passages,
    ``Settings.tree.answer_share``; otherwise it is derived from the passages it draws on); all
    centred by ``calibration`` when given, the derived response from the centred passages."""
    dim = embedder.dimension
    missing = [i for i, p in enumerate(items) if p.vector is None]
    shares = None
    if response and settings.tree.answer_vector == "passages":
        shares = answer_shares(response, items, settings.tree.answer_share)
    encode_response = bool(response) and shares is None
    texts = [query] if query_vector is None else []
    texts += [opening_words(response, settings.tree.answer_words)] if encode_response else []
    texts += [items[i].text for i in missing]
    enc = encode_checked(embedder, texts) if texts else np.zeros((0, dim), np.float32)
    pos = 0
    if query_vector is None:
        qv = enc[0]
        pos = 1
    else:
        qv = check_vector("query_vector", query_vector, dim)
    rv = None
    if encode_response:
        rv = enc[pos]
        pos += 1
    pv = np.zeros((len(items), dim), dtype=np.float32)
    given = [i for i, p in enumerate(items) if p.vector is not None]
    if given:
        pv[given] = _check_vectors(
            [items[i].vector for i in given], [f"passages[{i}].vector" for i in given], dim
        )
    if missing:
        pv[missing] = enc[pos:]
    if calibration is not None:
        qv = calibration.apply(qv)
        pv = calibration.apply(pv) if len(items) else pv
        rv = None if rv is None else calibration.apply(rv)
    if shares is not None:
        rv = l2_normalise(shares @ pv)[0]
    return qv, rv, pv
