"""One owner per turn: the history makes one ``ThreadChoice`` per question, which selection,
the expansion of the query and the recording of its turn all read."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from dhrag_core import DHRAG, Ablations, FaissKnowledgeBase, HashingEmbedder, Settings
from dhrag_core.history.selection import Selector

WALLS = ["The Great Wall of China is 21,196 km long.", "The Great Wall was built of stone.",
         "Guinea pigs sleep in short naps.", "Guinea pigs eat hay and vegetables."]
TURNS = [("How long is the Great Wall of China?", "21,196 km."),
         ("What was it built of?", "Stone."),
         ("Do guinea pigs sleep?", "In short naps.")]


def _engine() -> DHRAG:
    emb = HashingEmbedder()
    return DHRAG(FaissKnowledgeBase(WALLS, emb), embedder=emb,
                 settings=Settings(ablations=Ablations(calibrate=False)))


def _count_continued(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls = [0]
    original = Selector.continued_thread

    def counting(self: Selector, *args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Selector, "continued_thread", counting)
    return calls


def test_record_takes_the_thread_from_the_selection_and_does_not_decide_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine = _engine()
    for q, a in TURNS:
        engine.select("s", q)
        engine.record("s", q, a)
    calls = _count_continued(monkeypatch)
    engine.select("s", "And what do they eat?")
    assert calls[0] == 1  # decided once, with the selection
    result = engine.record("s", "And what do they eat?", "Hay.")
    assert calls[0] == 1  # the record read it
    assert result.turn.chain_id == engine.history.view("s").turn(
        result.turn.turn_id).chain_id


def test_a_choice_made_before_the_session_changed_is_decided_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine = _engine()
    for q, a in TURNS:
        engine.record("s", q, a)
    first, second = "How wide is the Great Wall?", "Where do guinea pigs live?"
    engine.select("s", first)
    engine.select("s", second)  # a batch: both selected before either is recorded
    calls = _count_continued(monkeypatch)
    engine.record("s", first, "About 5 m.")  # the session is as it was at its choice
    assert calls[0] == 0
    engine.record("s", second, "In burrows.")  # it changed since: decided again
    assert calls[0] == 1


def test_the_choice_says_what_the_expansion_reads() -> None:
    engine = _engine()
    for q, a in TURNS[:2]:
        engine.select("s", q)
        engine.record("s", q, a)
    choice = engine.history.choose("s", "Who built it?", 3)
    assert choice.follow_up and choice.in_latest_thread
    assert choice.t_star == engine.history.latest_thread("s")
    assert choice.threads[0] and all(t.chain_id == choice.t_star for t in choice.threads[0])
    named = engine.history.choose("s", "Where do guinea pigs sleep?", 3)
    assert not named.follow_up


def test_the_follow_up_rule_has_one_caller_in_the_core() -> None:
    root = Path(__file__).parents[1] / "dhrag_core"
    callers = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "is_follow_up":
                callers.append(f"{path.relative_to(root)}:{node.lineno}")
    assert len(callers) == 1, callers
