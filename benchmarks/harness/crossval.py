"""Cross-validation by conversation: the original conversation of a scored task, folds of
original conversations, held-out choice of a setting, the fixed tuning / report halves of a
benchmark, and the values a ``--grid`` or ``--also`` argument takes."""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence

import numpy as np

from benchmarks.harness.convert_mtrag import TURN_SEPARATOR
from benchmarks.harness.data import Benchmark, build_conversations
from benchmarks.harness.metrics import TaskScore

__all__ = ["SPLITS", "conversation_of", "cross_validate", "fold_of", "half_of", "parse_value",
           "split_benchmark", "task_fold"]

SPLITS = ("tune", "report", "all")
"""``tune``: the half of the conversations defaults are chosen on; ``report``: the other half,
which the headline tables are scored on; ``all``: both."""


def parse_value(value: str) -> object:
    """A setting's value from its text: int, float, true/false/none, else the text."""
    for convert in (int, float):
        try:
            return convert(value)
        except ValueError:
            pass
    return {"true": True, "false": False, "none": None}.get(value.lower(), value)


def conversation_of(score: TaskScore) -> str:
    """The original conversation of a scored task: the key every sign flip and fold goes by.

    An interleaved task carries it as its ``thread`` tag (the conversation's
    ``conversation_id``); a plain task's id is that id and the turn, joined by MTRAG's
    ``<::>`` (``29e3...bae<::>2``) or the neutral format's ``::`` (``sw01::2``). So a
    conversation's plain tasks and its interleaved copies share one key: one cluster of
    ``paired_randomisation_test`` (``report``, ``tune_dhrag``), one fold (``task_fold``).
    """
    thread = score.tags.get("thread")
    if thread:
        return thread
    for separator in (TURN_SEPARATOR, "::"):  # MTRAG's first: it holds the other
        conversation, found, _ = score.task_id.partition(separator)
        if found:
            return conversation
    return score.task_id


def fold_of(thread: str, folds: int) -> int:
    """The fold of an original conversation (stable across runs and sets)."""
    return zlib.crc32(thread.encode()) % folds


def task_fold(score: TaskScore, folds: int, domains: Sequence[str] | None = None) -> int:
    """A scored task's fold: its original conversation's (``fold_of``), or with ``domains``
    the index of its domain (leave one domain out)."""
    if domains is not None:
        return list(domains).index(score.tags.get("domain", ""))
    return fold_of(conversation_of(score), folds)


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


def half_of(bench: Benchmark) -> dict[str, str]:
    """Conversation id -> ``tune`` or ``report``: within each domain, conversations ordered
    by a hash of their id alternate between the halves (fixed, balanced by domain, and the
    same for every run and every interleaving made from them)."""
    domain: dict[str, str] = {}
    for t in bench.tasks:
        domain.setdefault(t.conversation_id, t.tags.get("domain", ""))
    out: dict[str, str] = {}
    for d in sorted(set(domain.values())):
        ids = sorted((c for c, dd in domain.items() if dd == d),
                     key=lambda c: (zlib.crc32(c.encode()), c))
        out.update({c: "tune" if i % 2 == 0 else "report" for i, c in enumerate(ids)})
    return out


def split_benchmark(bench: Benchmark, split: str) -> Benchmark:
    """The conversations of one half (``SPLITS``; ``all``: the benchmark itself)."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if split == "all":
        return bench
    half = half_of(bench)
    tasks = [t for t in bench.tasks if half[t.conversation_id] == split]
    return Benchmark(kb=bench.kb, tasks=tasks, conversations=build_conversations(tasks))
