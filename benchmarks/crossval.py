"""Cross-validation by conversation: folds of original conversations, held-out choice of a
setting, and the values a ``--grid`` or ``--also`` argument takes."""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence

import numpy as np

from benchmarks.metrics import TaskScore

__all__ = ["cross_validate", "fold_of", "parse_value", "task_fold"]


def parse_value(value: str) -> object:
    """A setting's value from its text: int, float, true/false/none, else the text."""
    for convert in (int, float):
        try:
            return convert(value)
        except ValueError:
            pass
    return {"true": True, "false": False, "none": None}.get(value.lower(), value)


def fold_of(thread: str, folds: int) -> int:
    """The fold of an original conversation (stable across runs and sets)."""
    return zlib.crc32(thread.encode()) % folds


def task_fold(score: TaskScore, folds: int, domains: Sequence[str] | None = None) -> int:
    """A scored task's fold: its original conversation's (``fold_of``), or with ``domains``
    the index of its domain (leave one domain out)."""
    if domains is not None:
        return list(domains).index(score.tags.get("domain", ""))
    return fold_of(score.tags.get("thread", score.task_id.split("::")[0]), folds)


def cross_validate(scores: Mapping[str, Sequence[tuple[int, float]]], folds: int) -> float:
    """Mean held-out score when each fold takes the setting best on the other folds.

    Args:
        scores: Setting name -> ``(fold, score)`` per task (same tasks, same order, for all).
    """
    names = list(scores)
    fold = np.array([f for f, _ in scores[names[0]]])
    table = np.array([[v for _, v in scores[n]] for n in names])
    held = np.zeros(fold.size)
    for k in range(folds):
        train, test = fold != k, fold == k
        best = int(np.argmax(table[:, train].mean(axis=1)))
        held[test] = table[best, test]
    return float(held.mean())
