"""The causal replay and what each turn records."""

from __future__ import annotations

import json
from typing import Any

import pytest
from bench_support import (
    ANSWERS,
    QUESTIONS,
    SpySystem,
    _tasks,
)

from benchmarks.harness.data import (
    Task,
    build_conversations,
)
from benchmarks.harness.replay import System, history_coverage, replay, score_runs
from dhrag_core import Passage


def test_replay_is_causal_and_never_leaks() -> None:
    tasks = _tasks("c1") + _tasks("c2")
    spy = SpySystem()
    assert isinstance(spy, System)
    runs = replay(spy, build_conversations(tasks), k=10, show_progress=False)
    expected: list[tuple[Any, ...]] = []
    for c in ("c1", "c2"):
        expected.append(("start", c))
        for i, q in enumerate(QUESTIONS):
            ids = ["gold-c1-2", "n1", "n2"] if i == 1 else ["n1", "n2"]
            answer = ANSWERS[i] if i < len(QUESTIONS) - 1 else ""  # last answer is unknown
            expected += [("retrieve", f"{c} {q}", 10), ("observe", f"{c} {q}", ids, answer)]
    assert spy.events == expected  # turn order; only current and past turns
    shown = json.dumps(spy.events)
    assert "SECRET REWRITE" not in shown
    assert "gold-c2" not in shown  # the spy never returned them, so it never saw them
    scores = score_runs(runs, tasks)
    assert [s.values["MRR@10"] for s in scores] == [0, 1, 0, 0, 0, 0]


def test_replay_scores_only_evaluated_tasks() -> None:
    tasks = _tasks()
    tasks[0] = Task(**{**tasks[0].__dict__, "relevant": ()})
    runs = replay(SpySystem(), build_conversations(tasks), show_progress=False)
    assert len(runs) == 3 and [s.task_id for s in score_runs(runs, tasks)] == ["c1::2", "c1::3"]


def test_history_coverage_finds_gold_retrieved_at_earlier_turns() -> None:
    tasks = _tasks()
    tasks[2] = Task(**{**tasks[2].__dict__, "relevant": ("gold-c1-2",)})
    runs = replay(SpySystem(), build_conversations(tasks), show_progress=False)
    # turn 2: gold in the ranking; turn 3: gold only among turn 2's passages; turn 1 not counted
    assert history_coverage(runs, tasks) == {"query": 0.5, "history": 0.5, "either": 1.0,
                                             "n": 2.0}


def test_replay_can_record_the_top_passages_first_sentence_instead_of_the_datas_answer(
) -> None:
    class Sentences(SpySystem):
        def retrieve(self, question: str, k: int) -> list[Passage]:
            super().retrieve(question, k)
            return [Passage(text=f"Top for {question}. Second sentence.", id="t"),
                    Passage(text="Other.", id="o")]

    spy = Sentences()
    replay(spy, build_conversations(_tasks("c1")), show_progress=False, answers="top-passage")
    observed = [e for e in spy.events if e[0] == "observe"]
    assert [e[3] for e in observed] == [f"Top for c1 {q}." for q in QUESTIONS]
    assert not {e[3] for e in observed} & set(ANSWERS)
    with pytest.raises(ValueError, match="answers"):
        replay(spy, build_conversations(_tasks("c1")), show_progress=False, answers="gold")

