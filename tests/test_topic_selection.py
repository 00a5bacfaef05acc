"""The history-selection benchmark on topic labels (``benchmarks.harness.topic_selection``), on a
small file in TopiOCQA's format written here (the real data stays in ../shared/data)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from benchmarks.harness.topic_selection import (
    judge,
    kind_of,
    load_topiocqa,
    replay,
    select_conversations,
    split_of,
    summarise,
)
from dhrag_core import HashingEmbedder, Settings

ROWS = [
    (1, "Where is the Eiffel Tower?", "In Paris.", "Eiffel Tower"),
    (1, "How tall is the Eiffel Tower?", "330 metres.", "Eiffel Tower"),
    (1, "Who built the pyramids of Giza?", "Egyptian workers.", "Giza pyramids"),
    (1, "Who painted it?", "UNANSWERABLE", ""),
    (1, "When was the Eiffel Tower finished?", "In 1889.", "Eiffel Tower"),
    (2, "What do honey bees eat?", "Nectar and pollen.", "Honey bee"),
    (2, "How do honey bees make honey?", "From nectar.", "Honey bee"),
]


@pytest.fixture
def data(tmp_path: Path) -> Path:
    rows, turn = [], {}
    for conv, q, a, topic in ROWS:
        turn[conv] = turn.get(conv, 0) + 1
        rows.append({"Conversation_no": conv, "Turn_no": turn[conv], "Question": q,
                     "Answer": a, "Topic": topic, "Context": [], "is_nq": False})
    path = tmp_path / "topiocqa.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(rows[::-1], f)  # any order: turns are sorted by number
    return path


def test_turn_kinds_follow_the_labels() -> None:
    topics = ["A", "A", "B", "", "A", "C"]
    assert [kind_of(topics, t) for t in range(6)] == [None, "same", "new", None, "return",
                                                      "new"]


def test_the_split_is_by_conversation_number() -> None:
    assert [split_of(n) for n in (1, 2, 3, 4)] == ["report", "tune", "report", "tune"]


def test_judge_scores_the_first_turn_and_every_turn_selected() -> None:
    topics = ["A", "B", "A", "A"]
    assert judge(topics, 3, [2, 1, 0]) == {"p1": 1.0, "any": 1.0, "on": 2.0, "n": 3.0}
    assert judge(topics, 3, [1, 0]) == {"p1": 0.0, "any": 1.0, "on": 1.0, "n": 2.0}
    assert judge(topics, 3, []) == {"p1": 0.0, "any": 0.0, "on": 0.0, "n": 0.0}


def test_replay_and_summary(data: Path) -> None:
    convs = load_topiocqa(data)
    assert [c.number for c in convs] == [1, 2]
    assert [t.question for t in convs[0].turns][:2] == [ROWS[0][1], ROWS[1][1]]
    assert [c.number for c in select_conversations(convs, "tune", None)] == [2]
    judged = replay(convs, HashingEmbedder(), Settings())
    assert [(j.conversation, j.turn, j.kind) for j in judged] == [
        ("topiocqa-1", 1, "same"), ("topiocqa-1", 2, "new"), ("topiocqa-1", 4, "return"),
        ("topiocqa-2", 1, "same")]
    ret = next(j for j in judged if j.kind == "return")
    assert ret.picks["previous"] == [3] and ret.picks["oracle"] == [1, 0]
    assert 3 not in ret.picks["dhrag"], "the unanswered turn is never handed on"
    topics = {c.id: [t.topic for t in c.turns] for c in convs}
    summary = summarise(judged, topics)
    assert summary["same"]["previous"]["P@1"] == 1.0
    assert summary["return"]["previous"]["P@1"] == 0.0
    assert summary["return"]["oracle"]["precision"] == 1.0
    assert summary["new"]["oracle"]["given history"] == 0.0
    assert summary["conversations"] == 2


def test_a_missing_file_says_where_the_data_goes(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="topiocqa"):
        load_topiocqa(tmp_path / "nothing.json")
