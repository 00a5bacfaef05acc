"""A 7-turn chat that switches topic and comes back, shared by the topic-switch tests of every
path (core, LangChain middleware, LCEL, LlamaIndex chat engine, ``dhrag chat``).

The knowledge base is ``tests/fixtures/topic_switch_kb/``: one ``.txt`` file per topic, eight
passages each, separated by blank lines. ``dhrag chat --kb DIR --min-words 1`` reads it as 32
passages (one per paragraph; with the default ``--min-words 120`` paragraphs would be merged);
``passages()`` loads the very same ``Passage``s (``load_passages``, what the CLI uses): id
``"<topic>.txt#<n>"``, title ``"<topic>.txt"``, text ``"<topic words>\\n<paragraph>"``.

Per turn each path collects a ``Seen`` -- what its LLM (or the CLI trace) actually got -- and
the tests check, at every turn: (a) every history turn handed to the LLM is of the current
turn's topic (turn 3, the first switch, is exempt), (b) the top context passage is of the
current topic, (c) the rewritten query holds no "besides".
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dhrag_core import MiniLMEmbedder, Passage, Selection
from dhrag_core.knowledge.ingest import load_passages

__all__ = [
    "ALL_TURNS",
    "CHAT",
    "HISTORY_TURNS",
    "KB_DIR",
    "MIN_WORDS",
    "SESSION",
    "TOPICS",
    "ChatTurn",
    "K",
    "Seen",
    "assert_history_on_topic",
    "assert_no_besides",
    "assert_top_on_topic",
    "check_seen",
    "describe_selection",
    "minilm",
    "passage_by_id",
    "passages",
    "report",
    "scripted_answer",
    "top_passage_in",
    "topic_of_passage",
    "turn_of_question",
]

KB_DIR = Path(__file__).resolve().parent / "fixtures" / "topic_switch_kb"
TOPICS = ("eiffel_tower", "giza_pyramids", "honey_bees", "great_wall")
K = 4
"""Context passages per turn, on every path."""
MIN_WORDS = 1
"""``load_passages``/``dhrag chat --min-words``: every paragraph is its own passage."""
SESSION = "topic-switch"


@dataclass(frozen=True)
class ChatTurn:
    question: str
    topic: str


CHAT: tuple[ChatTurn, ...] = (
    ChatTurn("When was the Eiffel Tower built?", "eiffel_tower"),
    ChatTurn("How tall is it?", "eiffel_tower"),
    ChatTurn("Why were the pyramids of Giza built?", "giza_pyramids"),  # new topic
    ChatTurn("Who was it built for?", "giza_pyramids"),
    ChatTurn("Back to the tower: when was it built?", "eiffel_tower"),  # a return
    ChatTurn("How do honey bees tell each other where flowers are?", "honey_bees"),  # new
    ChatTurn("How big are the other pyramids at Giza?", "giza_pyramids"),  # a return
)
ALL_TURNS = list(range(1, len(CHAT) + 1))
"""Turn numbers, from 1."""
HISTORY_TURNS = [n for n in ALL_TURNS if n != 3]
"""Turns whose selected history must be on topic: turn 3 opens a new topic, so its history
may still hold the old one."""


@functools.cache
def passages() -> tuple[Passage, ...]:
    """The fixture's 32 passages, as ``dhrag chat --kb KB_DIR --min-words 1`` loads them."""
    out = tuple(load_passages(KB_DIR, min_words=MIN_WORDS))
    assert len(out) == 8 * len(TOPICS), [p.id for p in out]
    assert {topic_of_passage(p) for p in out} == set(TOPICS)
    return out


@functools.cache
def minilm() -> MiniLMEmbedder:
    """One real all-MiniLM-L6-v2 embedder for the whole test session."""
    return MiniLMEmbedder()


def passage_by_id(pid: str) -> Passage:
    for p in passages():
        if p.id == pid:
            return p
    raise KeyError(pid)


def topic_of_passage(p: Passage | str) -> str:
    """The topic of a passage (or of its id / title / file name): the file it came from."""
    name = p if isinstance(p, str) else (p.id or p.title)
    stem = name.split("#", 1)[0].rsplit("/", 1)[-1].removesuffix(".txt")
    if stem not in TOPICS:
        raise ValueError(f"no topic for passage {name!r}")
    return stem


def turn_of_question(question: str) -> int:
    """The chat turn (from 1) that asked ``question``."""
    for n, t in enumerate(CHAT, 1):
        if t.question == question:
            return n
    raise ValueError(f"{question!r} is no question of the chat")


def _body(p: Passage) -> str:
    return p.text.split("\n", 1)[1]


def scripted_answer(p: Passage) -> str:
    """The scripted LLM's answer from its top context passage: the passage's first sentence."""
    return re.split(r"(?<=[.!?])\s+", _body(p), maxsplit=1)[0]


def top_passage_in(context: str) -> Passage:
    """The fixture passage shown first in a prompt's context section (the earliest full
    passage text in it)."""
    found = [(context.find(p.text), p) for p in passages() if p.text in context]
    if not found:
        raise AssertionError(f"no fixture passage in the context given to the LLM:\n{context}")
    return min(found, key=lambda f: f[0])[1]


@dataclass
class Seen:
    """What one path's LLM got at one turn (``turn`` from 1)."""

    turn: int
    history: list[str]
    """The questions of the history turns the LLM was given, as it got them (oldest first)."""
    top: str
    """Id of the top context passage."""
    rewritten: str
    """The rewritten query (the search query of the turn)."""
    selected: str = ""
    """How the engine selected the history: turn, question, topic, weight, relevance, recency,
    via (for the failure messages)."""
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def topic(self) -> str:
        return CHAT[self.turn - 1].topic

    def why(self) -> str:
        t = CHAT[self.turn - 1]
        lines = [f"turn {self.turn} {t.question!r} (topic {t.topic})",
                 f"  rewritten query: {self.rewritten!r}",
                 f"  top passage: {self.top} ({topic_of_passage(self.top)})",
                 "  history the LLM got: " + (", ".join(
                     f"turn {turn_of_question(q)} {q!r} ({CHAT[turn_of_question(q) - 1].topic})"
                     for q in self.history) or "(none)")]
        if self.selected:
            lines.append("  selected by the engine:\n" + self.selected)
        return "\n".join(lines)


def describe_selection(sel: Selection) -> str:
    """The selected history of a selection, one line per turn, best first."""
    if not sel.history:
        return "    (none)"
    return "\n".join(
        f"    turn {s.turn.index + 1} {s.turn.query!r} ({_topic_of_turn(s.turn.query)}) "
        f"weight={s.weight:.3f} relevance={s.relevance:.3f} recency={s.recency:.3f} "
        f"via {'+'.join(s.via)} cluster {s.cluster_id} chain {s.chain_id}"
        for s in sel.history
    )


def _topic_of_turn(question: str) -> str:
    try:
        return CHAT[turn_of_question(question) - 1].topic
    except ValueError:
        return "?"


def assert_history_on_topic(seen: Seen) -> None:
    """(a) every history turn handed to the LLM is of the current turn's topic."""
    off = [q for q in seen.history if CHAT[turn_of_question(q) - 1].topic != seen.topic]
    assert not off, f"off-topic history handed to the LLM: {off}\n{seen.why()}"


def assert_top_on_topic(seen: Seen) -> None:
    """(b) the top passage of the context is of the current topic."""
    assert topic_of_passage(seen.top) == seen.topic, (
        f"top passage {seen.top} is off topic\n{seen.why()}")


def assert_no_besides(seen: Seen) -> None:
    """(c) the rewritten query holds no "besides"."""
    assert "besides" not in seen.rewritten.lower(), (
        f"rewritten query says 'besides'\n{seen.why()}")


def check_turn(seen: Sequence[Seen], n: int) -> None:
    """Turn ``n`` (1-based) of a path's chat: its history on topic (turn 3 exempt: it may keep
    the old topic), its top passage on topic, no "besides" in its rewrite."""
    if n in HISTORY_TURNS:
        assert_history_on_topic(seen[n - 1])
    assert_top_on_topic(seen[n - 1])
    assert_no_besides(seen[n - 1])


def report(path: str, seen: Sequence[Seen]) -> None:
    """Print what each turn got (shown with ``pytest -s``, or under a failing test)."""
    print(f"== {path}")
    for s in seen:
        print(s.why())


def check_seen(seen: Sequence[Seen]) -> None:
    """The run itself is sound: one ``Seen`` per turn, in order."""
    assert [s.turn for s in seen] == ALL_TURNS, [s.turn for s in seen]
