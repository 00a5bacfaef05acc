"""The analyses of the thread choice: ceiling, judge, tracking."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from bench_support import (
    _context,
    _kb,
    _many_conversations,
)

from benchmarks.harness.data import (
    Task,
    build_conversations,
)
from benchmarks.harness.interleave import interleave_benchmark
from dhrag_core import Settings
from dhrag_core.settings import with_changes


def test_choice_ceiling_logit_learns_the_signal_that_names_the_thread() -> None:
    from benchmarks.analyses.choice_ceiling import Choice, _cross_validated, fit_logit

    rng = np.random.default_rng(0)
    choices = []
    for i in range(300):
        signals = rng.normal(size=(4, 2))
        true = int(np.argmax(signals[:, 1] + 0.3 * rng.normal(size=4)))
        choices.append(Choice(signals, true, np.eye(4)[true], "return", f"c{i % 30}"))
    w = fit_logit(choices, (0, 1))
    assert w[1] > 1.0 and abs(w[0]) < 0.5 * w[1]
    picks = _cross_validated(choices, (0, 1))
    assert np.mean([p == c.true for p, c in zip(picks, choices, strict=True)]) > 0.7
    only_noise = _cross_validated(choices, (0,))
    assert np.mean([p == c.true for p, c in zip(only_noise, choices, strict=True)]) < 0.45


def test_thread_judge_is_asked_only_where_the_engine_hedges_and_abstains_without_the_thread(
) -> None:
    from benchmarks.analyses.thread_judge import judged
    from dhrag_core import Settings

    cfg = with_changes(Settings(), {"hedge_margin": 0.2, "thread_variants": 3})
    found = [(7, 0.6), (3, 0.5), (9, 0.45), (4, 0.1)]
    assert judged([(7, 0.6), (3, 0.3)], {3}, cfg, 1.0, 5, 0.0) is None  # a clear choice
    # hedged as the engine hedges: any runner-up in reach, not only the second
    assert judged([(7, 0.6), (3, 0.3), (9, 0.5)], {9}, cfg, 1.0, 5, 0.0)[0][0] == 9  # type: ignore[index]
    assert judged(found, {5}, cfg, 1.0, 5, 0.0) is None  # the thread is not shown: abstain
    assert judged(found, {4}, cfg, 1.0, 3, 0.0) is None  # ... nor among the first 3
    right = judged(found, {4}, cfg, 1.0, 5, 0.99)
    assert right is not None and right[0] == (4, 0.1)
    # the others fall out of the hedge: the engine searches with the pick alone
    assert all(rel < 0.1 - 0.2 for _, rel in right[1:]) and {t for t, _ in right} == {7, 3, 9, 4}
    wrong = {judged(found, {3}, cfg, 0.5, 4, d)[0][0] for d in np.linspace(0.5, 0.999, 40)}  # type: ignore[index]
    assert wrong == {7, 9, 4}  # a miss is any other candidate shown, never the right one
    assert judged(found, {3}, cfg, 0.5, 4, 0.49)[0][0] == 3  # type: ignore[index]


def test_judge_prompts_show_the_earlier_turns_numbered_and_nothing_later() -> None:
    from benchmarks.analyses.thread_judge import judge_prompts, oracle_judgments

    convs = build_conversations(interleave_benchmark(
        build_conversations(_many_conversations()), threads=3, block=(2, 3), seed=4))
    prompts = list(judge_prompts(convs))
    assert prompts == list(judge_prompts(convs))  # deterministic
    assert len({p["id"] for p in prompts}) == len(prompts) == sum(len(c.turns) - 1 for c in convs)
    for conv in convs:
        for i in range(1, len(conv.turns)):
            rec = next(p for p in prompts if p["id"] == f"{conv.conversation_id}#{i}")
            text = rec["prompt"]
            assert rec["turns"] == i and f"{i}. User: {conv.turns[i - 1].question}\n" in text
            assert f"New question: {conv.turns[i].question}\n" in text
            assert f"{i + 1}. User:" not in text
            assert all(t.question not in text for t in conv.turns[i + 1:])  # causal
            assert all(t.answer not in text for t in conv.turns[i:] if t.answer)
    # the labels' answer: the thread's latest earlier turn (from 1), 0 on a thread's first
    labels = {r["id"]: r["follows"] for r in oracle_judgments(convs)}
    assert labels.keys() == {p["id"] for p in prompts}
    for conv in convs:
        threads = [t.task.tags["thread"] if t.task else "" for t in conv.turns]
        for i in range(1, len(conv.turns)):
            follows = labels[f"{conv.conversation_id}#{i}"]
            kind = conv.turns[i].task.tags["kind"]  # type: ignore[union-attr]
            assert (follows == 0) == (kind == "first")
            if follows:
                assert threads[follows - 1] == threads[i]
                assert threads[i] not in threads[follows:i]
    # a judge wrong everywhere it can be names another thread's turn; deterministic per id
    wrong = list(oracle_judgments(convs, accuracy=0.0))
    assert wrong == list(oracle_judgments(convs, accuracy=0.0))
    for conv in convs:
        threads = [t.task.tags["thread"] if t.task else "" for t in conv.turns]
        for i in range(1, len(conv.turns)):
            follows = next(r["follows"] for r in wrong if r["id"] == f"{conv.conversation_id}#{i}")
            if set(threads[:i]) - {threads[i]}:
                assert 1 <= follows <= i and threads[follows - 1] != threads[i]
    half = [r["follows"] for r in oracle_judgments(convs, accuracy=0.5)]
    assert 0 < sum(a != b for a, b in zip(half, labels.values(), strict=True)) < len(half)


def test_judgments_file_is_checked_line_by_line(tmp_path: Path) -> None:
    from benchmarks.analyses.thread_judge import load_judgments

    good = tmp_path / "good.jsonl"
    good.write_text('{"id": "s#1", "follows": 1}\n\n{"id": "s#2", "follows": 0}\n')
    assert load_judgments(good) == {"s#1": 1, "s#2": 0}
    for line, message in [("not json", r":1: invalid JSON"),
                          ('{"follows": 1}', r":1: expected \{"),
                          ('["s#1", 1]', r":1: expected \{"),
                          ('{"id": "s#1", "follows": -1}', r":1: follows must be"),
                          ('{"id": "s#1", "follows": true}', r":1: follows must be"),
                          ('{"id": "s#1", "follows": "2"}', r":1: follows must be")]:
        bad = tmp_path / "bad.jsonl"
        bad.write_text(line + "\n")
        with pytest.raises(ValueError, match=message):
            load_judgments(bad)
    bad.write_text('{"id": "s#1", "follows": 1}\n{"id": "s#1", "follows": 2}\n')
    with pytest.raises(ValueError, match=r":2: id 's#1' appears twice"):
        load_judgments(bad)


def test_a_judged_turn_makes_its_chain_t_star_only_where_the_engine_hedges() -> None:
    from benchmarks.analyses.thread_judge import judged_by_turn

    cfg = with_changes(Settings(), {"hedge_margin": 0.2, "thread_variants": 3})
    found = [(7, 0.6), (3, 0.5), (9, 0.45), (4, 0.1)]
    assert judged_by_turn([(7, 0.6), (3, 0.3)], 3, cfg) is None  # a clear choice
    assert judged_by_turn(found, None, cfg) is None  # a new topic: the engine hedges
    picked = judged_by_turn(found, 4, cfg)  # the judge may name a chain beyond the hedge
    assert picked is not None and picked[0] == (4, 0.1)
    assert all(rel < 0.1 - 0.2 for _, rel in picked[1:]) and {t for t, _ in picked} == {7, 3, 9, 4}


def test_thread_tracking_summary() -> None:
    from benchmarks.analyses.thread_tracking import TrackedTurn, summarise, topic_of

    t = Task(task_id="s::2", conversation_id="s", turn=2, history=(), question="q",
             relevant=("x",), tags={"topic": "nile+amazon"})
    assert topic_of(t) == {"nile", "amazon"}
    assert topic_of(replace(t, tags={"thread": "c7", "topic": "x"})) == {"c7"}
    turns = [TrackedTurn(kind="continue", pattern="p", mrr=1.0, dhrag=True, rule=False,
                         previous=True),
             TrackedTurn(kind="continue", pattern="p", mrr=0.0, dhrag=None, rule=True,
                         previous=True),
             TrackedTurn(kind="return", pattern="q", mrr=0.5, dhrag=False, rule=True,
                         previous=False)]
    out = summarise(turns)
    assert out["continue on topic: dhrag"] == 0.5  # no history counts as not on topic
    assert out["continue on topic: rule"] == 0.5 and out["return on topic: rule"] == 1.0
    assert out["MRR@10 by pattern"] == {"p": 0.5, "q": 0.5}


def test_thread_analyses_make_their_part_right_through_the_core_policies() -> None:
    """``thread_gap``'s oracle policies (and a judge's) plug into the engine: with the grouping
    and the choice made right, every chain is one thread and T* is always the true one."""
    from types import SimpleNamespace

    from benchmarks.analyses.choice_ceiling import _choices, _Words
    from benchmarks.analyses.thread_gap import _replay
    from benchmarks.analyses.thread_judge import _judge

    convs = build_conversations(_many_conversations())
    bench = SimpleNamespace(conversations=convs)
    ctx = _context(_many_conversations())
    right = _replay(ctx, bench, 3, 0, Settings(), {"grouping", "choice"})
    assert right["purity"] and min(right["purity"]) == 1.0
    assert max(right["chains per thread"]) == 1.0
    t_star = right["continue: T* right"] + right["return: T* right"]
    assert t_star and min(t_star) == 1.0
    engine = _replay(ctx, bench, 3, 0, Settings(), set())
    assert min(engine["purity"]) < 1.0, "HashingEmbedder's chains mix these look-alike threads"
    counts: dict[str, int] = {"hedged": 0, "abstained": 0, "rule right": 0, "judge right": 0}
    judged = _replay(ctx, bench, 3, 0, Settings(), set(),
                     lambda truth: _judge(truth, 1.0, 5, counts))
    assert judged["MRR@10"] and counts["hedged"] >= counts["judge right"]
    choices = _choices(ctx, ctx.kb, bench, 3, 0, _Words(_kb()))
    assert choices and all(c.signals.shape[0] == len(c.mrr) for c in choices)

