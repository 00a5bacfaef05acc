"""The hand-written topic-switch scenarios (``benchmarks/scenarios``) are a valid, causal benchmark
whose gold passages exist in the MTRAG knowledge base."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from benchmarks.harness.data import load_tasks
from benchmarks.harness.paths import default_cache, default_data

SCENARIOS = Path(__file__).resolve().parents[1] / "benchmarks" / "scenarios"
PATTERNS = ("cue-switch", "named-return", "unnamed-return", "comparison", "drill-down",
            "unrelated-specified")
KINDS = {"first", "continue", "switch", "return", "compare"}


def test_every_conversation_is_causal_tagged_and_scored() -> None:
    tasks = load_tasks(SCENARIOS / "tasks.jsonl")
    by_conversation: dict[str, list] = {}
    for t in tasks:
        by_conversation.setdefault(t.conversation_id, []).append(t)
    assert len(by_conversation) >= 30
    patterns = Counter(ts[0].tags["pattern"] for ts in by_conversation.values())
    assert set(patterns) == set(PATTERNS) and min(patterns.values()) >= 5
    for cid, ts in by_conversation.items():
        assert [t.turn for t in ts] == list(range(1, len(ts) + 1)), cid
        history: list[tuple[str, str]] = []
        for i, t in enumerate(ts):
            assert t.relevant, f"{t.task_id}: every turn is scored"
            assert t.tags["pattern"] == ts[0].tags["pattern"] and t.tags["kind"] in KINDS
            assert t.tags["topic"] and t.tags["domain"]
            assert (t.tags["kind"] == "first") is (i == 0), t.task_id
            assert [(m.role, m.text) for m in t.history] == [
                (role, text) for q, a in history for role, text in (("user", q), ("assistant", a))
            ], f"{t.task_id}: history is the conversation's earlier turns, in order"
            nxt = ts[i + 1] if i + 1 < len(ts) else None
            if nxt is not None:
                answer = nxt.history[-1]
                assert answer.role == "assistant" and answer.text.strip()
                history.append((t.question, answer.text))


def _kb_ids() -> set[str] | None:
    kb = default_cache() / "benchmarks" / "mtrag" / "kb.jsonl"
    if kb.is_file():
        with kb.open(encoding="utf-8") as f:
            return {json.loads(line)["id"] for line in f if line.strip()}
    return None


def test_every_gold_passage_is_in_the_knowledge_base(tmp_path: Path) -> None:
    ids = _kb_ids()
    if ids is None:
        if not (default_data() / "conversations.jsonl").is_file():
            pytest.skip("the MTRAG data is not here (../shared/data/mtrag)")
        from benchmarks.harness.convert_mtrag import convert

        convert(default_data(), tmp_path)
        with (tmp_path / "kb.jsonl").open(encoding="utf-8") as f:
            ids = {json.loads(line)["id"] for line in f if line.strip()}
    tasks = load_tasks(SCENARIOS / "tasks.jsonl")
    missing = sorted({r for t in tasks for r in t.relevant} - ids)
    assert not missing


def test_the_thread_oracle_reads_the_topics() -> None:
    """A session per topic of a conversation; a comparison stays with the turn before it."""
    from benchmarks.harness.runner import true_threads

    tasks = load_tasks(SCENARIOS / "tasks.jsonl")
    threads = true_threads(tasks)
    by_id = {(t.conversation_id, t.turn): t for t in tasks}
    for (cid, turn), thread in threads.items():
        topic = by_id[(cid, turn)].tags["topic"]
        if "+" in topic:
            assert thread == threads[(cid, turn - 1)] and thread in topic.split("+")
        else:
            assert thread == topic
    assert len({threads[("sw07", n)] for n in range(1, 7)}) == 2  # pyramid, forbidden city
