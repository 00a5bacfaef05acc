"""Ranking metrics with binary relevance, per-task scores, splits and a paired significance test.

Formulas (``ranked`` best first, ``relevant`` the gold set ``R``):

- Recall@k = |top-k ∩ R| / |R|
- MRR@k = 1 / rank of the first relevant passage in the top k, else 0
- nDCG@k = DCG@k / IDCG@k, DCG@k = sum over relevant top-k ranks i of 1 / log2(i + 1),
  IDCG@k the DCG of an ideal ranking (min(k, |R|) relevant passages first)

Example:
    >>> ndcg_at_k(["a", "x", "b"], {"a", "b"}, 3)  # doctest: +ELLIPSIS
    0.919...
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

__all__ = [
    "DEPTH_BUCKETS",
    "METRICS",
    "TaskScore",
    "depth_bucket",
    "mean_scores",
    "ndcg_at_k",
    "paired_randomisation_test",
    "recall_at_k",
    "reciprocal_rank",
    "score_task",
    "split_scores",
]

DEPTH_BUCKETS = ("1", "2", "3-4", "5+")


def _check(ranked: Sequence[str], relevant: Collection[str], k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an int >= 1, got {k!r}")
    if isinstance(ranked, str) or isinstance(relevant, str):
        raise TypeError("ranked and relevant must be collections of ids, not one str")


def _dedupe(ranked: Sequence[str], k: int) -> list[str]:
    """The top ``k`` ids with repeats dropped (a repeated id cannot count twice)."""
    seen: set[str] = set()
    out: list[str] = []
    for doc in ranked[:k]:
        if doc not in seen:
            seen.add(doc)
            out.append(doc)
    return out


def recall_at_k(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """Share of the relevant ids found in the top ``k`` (0 when nothing is relevant)."""
    _check(ranked, relevant, k)
    if not relevant:
        return 0.0
    gold = set(relevant)
    return sum(doc in gold for doc in _dedupe(ranked, k)) / len(gold)


def reciprocal_rank(ranked: Sequence[str], relevant: Collection[str], k: int = 10) -> float:
    """1 / rank of the first relevant id within the top ``k``, else 0."""
    _check(ranked, relevant, k)
    gold = set(relevant)
    for rank, doc in enumerate(ranked[:k], 1):
        if doc in gold:
            return 1.0 / rank
    return 0.0


def ndcg_at_k(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """Binary-relevance nDCG at ``k`` (0 when nothing is relevant)."""
    _check(ranked, relevant, k)
    gold = set(relevant)
    if not gold:
        return 0.0
    dcg = sum(1.0 / math.log2(i + 1) for i, doc in enumerate(ranked[:k], 1)
              if doc in gold and doc not in ranked[: i - 1])
    ideal = sum(1.0 / math.log2(i + 1) for i in range(1, min(k, len(gold)) + 1))
    return dcg / ideal


MetricFn = Callable[[Sequence[str], Collection[str]], float]

METRICS: dict[str, MetricFn] = {
    "R@1": lambda r, g: recall_at_k(r, g, 1),
    "R@5": lambda r, g: recall_at_k(r, g, 5),
    "R@10": lambda r, g: recall_at_k(r, g, 10),
    "MRR@10": lambda r, g: reciprocal_rank(r, g, 10),
    "nDCG@3": lambda r, g: ndcg_at_k(r, g, 3),
    "nDCG@10": lambda r, g: ndcg_at_k(r, g, 10),
}
"""The reported metrics, by name, in table order."""


@dataclass(frozen=True)
class TaskScore:
    """The metric values of one system on one task, with what splits need."""

    task_id: str
    turn: int
    values: Mapping[str, float]
    tags: Mapping[str, str] = field(default_factory=dict)


def score_task(
    task_id: str, turn: int, ranked: Sequence[str], relevant: Collection[str],
    tags: Mapping[str, str] | None = None,
) -> TaskScore:
    """All ``METRICS`` of one ranking."""
    values = {name: fn(ranked, relevant) for name, fn in METRICS.items()}
    return TaskScore(task_id=task_id, turn=turn, values=values, tags=dict(tags or {}))


def depth_bucket(turn: int) -> str:
    """Turn-depth bucket: ``"1"``, ``"2"``, ``"3-4"`` or ``"5+"``."""
    if turn < 1:
        raise ValueError(f"turn must be >= 1, got {turn}")
    return "1" if turn == 1 else "2" if turn == 2 else "3-4" if turn <= 4 else "5+"


def mean_scores(scores: Iterable[TaskScore]) -> dict[str, float]:
    """Mean of every metric over ``scores``, plus ``n`` (the number of tasks)."""
    items = list(scores)
    out = {name: float(np.mean([s.values[name] for s in items])) if items else float("nan")
           for name in METRICS}
    out["n"] = float(len(items))
    return out


def split_scores(
    scores: Iterable[TaskScore], key: Callable[[TaskScore], str | None]
) -> dict[str, dict[str, float]]:
    """Mean scores per group (``key`` returning ``None`` leaves a task out), groups sorted."""
    groups: dict[str, list[TaskScore]] = {}
    for s in scores:
        g = key(s)
        if g is not None:
            groups.setdefault(g, []).append(s)
    return {g: mean_scores(groups[g]) for g in sorted(groups)}


def paired_randomisation_test(
    a: npt.ArrayLike, b: npt.ArrayLike, *, clusters: Sequence[object] | None = None,
    n_resamples: int = 10_000, seed: int = 0,
) -> float:
    """Two-sided p-value of a paired randomisation (sign-flip) test of mean(a) vs mean(b).

    Under the null hypothesis the two systems are exchangeable on each task, so each per-task
    difference keeps or flips its sign at random. With ``clusters`` (one label per task, e.g.
    the original conversation), the differences of one cluster keep or flip their sign
    together: tasks of one conversation, or replays of it in several sessions, are not
    independent. ``p = (1 + #{|mean| >= |observed|}) / (1 + n_resamples)``.
    """
    x, y = np.asarray(a, dtype=np.float64).ravel(), np.asarray(b, dtype=np.float64).ravel()
    if len(x) != len(y):
        raise ValueError(f"a and b must be paired (same length), got {len(x)} and {len(y)}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    diff = x - y
    if clusters is not None:
        if len(clusters) != len(diff):
            raise ValueError(f"clusters must label every task: {len(clusters)} labels for "
                             f"{len(diff)} tasks")
        _, at = np.unique(np.asarray([str(c) for c in clusters]), return_inverse=True)
        diff = np.bincount(at, weights=diff)  # one summed difference per cluster
    n = len(x)
    if not n or not np.any(diff):
        return 1.0
    observed = abs(diff.sum()) / n
    rng = np.random.default_rng(seed)
    hits = 0
    for start in range(0, n_resamples, 1000):
        m = min(1000, n_resamples - start)
        signs = rng.choice(np.array([-1.0, 1.0]), size=(m, len(diff)))
        hits += int(np.sum(np.abs(signs @ diff) / n >= observed - 1e-12))
    return (1 + hits) / (1 + n_resamples)
