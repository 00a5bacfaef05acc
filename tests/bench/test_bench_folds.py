"""Folds by conversation, the tuning and report halves, cross-validation."""

from __future__ import annotations

import pytest
from bench_support import (
    _kb,
    _tasks,
)

from benchmarks.harness.data import (
    Benchmark,
    build_conversations,
)
from benchmarks.harness.metrics import TaskScore


def test_cross_validation_scores_each_fold_with_the_setting_best_elsewhere() -> None:
    from benchmarks.harness.crossval import cross_validate, fold_of

    # folds 0 and 1 are scored with b (best on the other two folds), fold 2 with a: 0.5, 0.5, 0
    # -- below both settings' own means, as choosing on other data is
    scores = {"a": [(0, 1.0), (1, 1.0), (2, 0.0)], "b": [(0, 0.5), (1, 0.5), (2, 1.0)]}
    assert cross_validate(scores, 3) == pytest.approx((0.5 + 0.5 + 0.0) / 3)
    # with one setting the cross-validated figure is its mean
    assert cross_validate({"a": scores["a"]}, 3) == pytest.approx(2 / 3)
    assert fold_of("conversation-1", 5) == fold_of("conversation-1", 5) in range(5)


def test_task_fold_leaves_one_domain_out_or_splits_by_conversation() -> None:
    from benchmarks.harness.crossval import fold_of, task_fold

    conversation = "dd6b6ffd177f2b311abe676261279d2f"
    plain = TaskScore(f"{conversation}<::>2", 2, {"MRR@10": 1.0}, {"domain": "clapnq"})
    woven = TaskScore("s0-3x000::5", 5, {"MRR@10": 0.0},
                      {"domain": "clapnq", "thread": conversation})
    domains = ["clapnq", "cloud", "fiqa", "govt"]
    assert task_fold(plain, 4, domains) == task_fold(woven, 4, domains) == 0
    # by conversation, a thread and its interleaved copy share a fold
    assert task_fold(plain, 5) == task_fold(woven, 5) == fold_of(conversation, 5)
    with pytest.raises(ValueError):
        task_fold(TaskScore("x", 1, {}, {"domain": "other"}), 3, domains)


def test_the_tune_and_report_halves_split_conversations_by_domain() -> None:
    from dataclasses import replace as with_

    from benchmarks.harness.crossval import half_of, split_benchmark

    tasks = []
    for d, domain in enumerate(("geo", "law", "tech")):
        for c in range(5 + d):
            tasks += [with_(t, tags={**t.tags, "domain": domain})
                      for t in _tasks(f"{domain}{c}")]
    bench = Benchmark(kb=_kb(), tasks=tasks, conversations=build_conversations(tasks))
    half = half_of(bench)
    assert half == half_of(Benchmark(kb=bench.kb, tasks=tasks[::-1],
                                     conversations=bench.conversations))  # order-free
    for domain, n in (("geo", 5), ("law", 6), ("tech", 7)):
        tune = sum(1 for c, h in half.items() if c.startswith(domain) and h == "tune")
        assert tune == (n + 1) // 2  # alternating within the domain
    tune, report = split_benchmark(bench, "tune"), split_benchmark(bench, "report")
    seen = [{t.conversation_id for t in b.tasks} for b in (tune, report)]
    assert not seen[0] & seen[1] and seen[0] | seen[1] == set(half)
    assert len(tune.tasks) + len(report.tasks) == len(tasks)
    assert {c.conversation_id for c in tune.conversations} == seen[0]
    assert split_benchmark(bench, "all") is bench
    with pytest.raises(ValueError, match="split"):
        split_benchmark(bench, "test")

