"""Pure, vectorised scoring functions of the dynamic update (paper eq. 13-14)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = [
    "combined_weight", "contrast", "lowest_weights", "recency", "relevance", "thread_score",
    "top_order",
]

FloatArray = npt.NDArray[np.float64]


def relevance(similarity: npt.ArrayLike) -> FloatArray:
    """Map cosine similarities to a relevance in [0, 1] (negative similarity counts as none)."""
    sim = np.asarray(similarity, dtype=np.float64)
    out: FloatArray = np.fmin(np.fmax(sim, 0.0), 1.0)  # fmax/fmin map NaN to the bound
    return out


def recency(
    turn_age: npt.ArrayLike,
    half_life_turns: float,
    seconds_age: npt.ArrayLike | None = None,
    half_life_seconds: float | None = None,
) -> FloatArray:
    """Half-life decay in [0, 1]: halves every ``half_life_turns`` turns (and seconds, if given).

    Ages below zero (a clock that went backwards) count as zero, so recency never exceeds 1.
    """
    if half_life_turns <= 0:
        raise ValueError(f"half_life_turns must be > 0, got {half_life_turns!r}")
    halvings = np.maximum(np.asarray(turn_age, dtype=np.float64), 0.0) / half_life_turns
    if seconds_age is not None and half_life_seconds is not None:
        if half_life_seconds <= 0:
            raise ValueError(f"half_life_seconds must be > 0, got {half_life_seconds!r}")
        secs = np.maximum(np.asarray(seconds_age, dtype=np.float64), 0.0)
        halvings = halvings + secs / half_life_seconds
    out: FloatArray = np.exp2(-halvings)
    return out


def combined_weight(relevance: npt.ArrayLike, recency: npt.ArrayLike, alpha: float) -> FloatArray:
    """``alpha * relevance + (1 - alpha) * recency`` (paper eq. 13)."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha!r}")
    rel = np.asarray(relevance, dtype=np.float64)
    rec = np.asarray(recency, dtype=np.float64)
    return alpha * rel + (1.0 - alpha) * rec


def lowest_weights(
    weights: npt.ArrayLike, n: int, age: npt.ArrayLike | None = None
) -> npt.NDArray[np.intp]:
    """Positions of the ``n`` lowest weights (paper eq. 14: what TopN drops), ascending.

    Ties go to the lower ``age`` (e.g. the turn index: the older item is evicted), or to the
    earlier position when no ``age`` is given.
    """
    w = np.asarray(weights, dtype=np.float64)
    if n <= 0:
        return np.empty(0, dtype=np.intp)
    if n >= w.size:
        return np.arange(w.size, dtype=np.intp)
    # O(size): the n-th lowest weight, everything below it, then the ties at it broken by
    # age (old weights often tie exactly: relevance clipped to 0, recency decayed to 0)
    kth = w.min() if n == 1 else np.partition(w, n - 1)[n - 1]
    below = np.flatnonzero(w < kth)
    ties = np.flatnonzero(w == kth)
    need = n - below.size
    if age is None or need >= ties.size:
        picked = ties[:need]
    else:
        a = np.asarray(age)[ties]
        picked = ties[np.argsort(a, kind="stable")[:need]] if need > 1 else ties[[np.argmin(a)]]
    return np.sort(np.concatenate([below, picked])).astype(np.intp)


def contrast(relevance: npt.ArrayLike, temperature: float) -> FloatArray:
    """Sharpen relevances around the best one: ``r * exp((r - max r) / temperature)``.

    The best match keeps its relevance; a turn 0.2 below it (at temperature 0.1) keeps 14%.
    Lets a clear return to an earlier topic outweigh the recency of the topic just left,
    while an elliptical query, relevant to nothing in particular, changes little.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    r = np.asarray(relevance, dtype=np.float64)
    if r.size == 0:
        return r
    out: FloatArray = r * np.exp((r - r.max()) / temperature)
    return out


def thread_score(
    relevance: npt.ArrayLike, turns_since_active: npt.ArrayLike, bonus: float, half_life: float
) -> FloatArray:
    """How well a query continues each thread: its relevance plus ``bonus`` times the recency
    of the thread's latest turn (a thread active one turn ago gets ``bonus / 2**(1/half_life)``).
    """
    rel = np.asarray(relevance, dtype=np.float64)
    return rel + bonus * recency(turns_since_active, half_life)


def top_order(scores: npt.ArrayLike, k: int | None) -> list[int]:
    """Positions of the ``k`` highest scores, best first, ties in position order: the first
    ``k`` of a stable descending sort (all when ``k`` is None), found without sorting the
    rest."""
    s = np.asarray(scores, dtype=np.float64)
    if k is None or k >= s.size:
        return [int(i) for i in np.argsort(-s, kind="stable")]
    if k <= 0:
        return []
    kth = np.partition(-s, k - 1)[k - 1]
    cand = np.flatnonzero(-s <= kth)  # every tie of the k-th score, in position order
    return [int(i) for i in cand[np.argsort(-s[cand], kind="stable")[:k]]]
