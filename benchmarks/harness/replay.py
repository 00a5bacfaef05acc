"""Causal replay: drive a retrieval system through each conversation, one turn at a time.

For every conversation the harness calls ``start``; then for each user turn in order it calls
``retrieve(question, k)``, scores the ranking when the turn is an evaluated task, and calls
``observe(question, ranked, answer)`` with the answer written in the data (``answers=
"dataset"``) or, as a deployment without the dataset's answers would have it, the first
sentence of the passage the system itself ranked first (``"top-passage"``). The system sees
the current question and earlier turns only: never gold passages, rewrites or later turns.

Example:
    >>> runs = replay(LastTurnSystem(kb), bench.conversations)  # doctest: +SKIP
    >>> scores = score_runs(runs, bench.tasks)  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from tqdm.auto import tqdm

from benchmarks.harness.data import Conversation, Task
from benchmarks.harness.metrics import TaskScore, score_task
from dhrag_core import Passage

__all__ = ["ANSWERS", "System", "TurnRun", "first_sentence", "history_coverage", "replay",
           "score_runs"]

ANSWERS = ("dataset", "top-passage")
"""Where the answer ``observe`` gets comes from (``replay``'s ``answers``)."""

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")

log = logging.getLogger(__name__)


@runtime_checkable
class System(Protocol):
    """A conversational retriever as the harness drives it.

    Attributes:
        name: Label in reports.
    """

    name: str

    # Optional: a system that keeps a memory may set ``last_history_s`` (seconds of memory
    # work -- selection, rewriting, update -- in the turn just observed); reported apart from
    # the whole turn's latency.

    def start(self, conversation_id: str) -> None:
        """Begin a new conversation with empty memory."""
        ...

    def retrieve(self, question: str, k: int) -> list[Passage]:
        """Ranked passages (best first, at most ``k``) for the current question."""
        ...

    def observe(self, question: str, passages: list[Passage], answer: str) -> None:
        """Record the finished turn: its question, the passages retrieved, the answer given."""
        ...


@dataclass(frozen=True)
class TurnRun:
    """What happened at one turn of the replay."""

    conversation_id: str
    turn: int
    task_id: str | None
    ranked: tuple[str, ...]
    retrieve_s: float
    observe_s: float
    history_s: float | None = None


def first_sentence(text: str, limit: int = 400) -> str:
    """The text's first sentence (at most ``limit`` characters): an extractive answer."""
    head = _SENTENCE_END.split(text.strip(), maxsplit=1)[0]
    return head[:limit]


def _replay_conversation(system: System, conversation: Conversation, k: int,
                         answers: str) -> list[TurnRun]:
    runs: list[TurnRun] = []
    system.start(conversation.conversation_id)
    for turn in conversation.turns:
        t0 = time.perf_counter()
        ranked = list(system.retrieve(turn.question, k))
        t1 = time.perf_counter()
        ids = tuple(p.key for p in ranked[:k])
        t2 = time.perf_counter()
        answer = (turn.answer if answers == "dataset"
                  else first_sentence(ranked[0].text) if ranked else "")
        system.observe(turn.question, list(ranked), answer)
        t3 = time.perf_counter()
        runs.append(TurnRun(
            conversation_id=conversation.conversation_id,
            turn=turn.turn,
            task_id=turn.task.task_id if turn.task is not None else None,
            ranked=ids,
            retrieve_s=t1 - t0,
            observe_s=t3 - t2,
            history_s=getattr(system, "last_history_s", None),
        ))
    return runs


def replay(
    system: System, conversations: Sequence[Conversation], *, k: int = 10,
    show_progress: bool = True, answers: str = "dataset",
) -> list[TurnRun]:
    """Replay every conversation through ``system``; one ``TurnRun`` per user turn.

    Args:
        system: The system under test.
        conversations: Conversations in the order to replay.
        k: Passages asked for at each turn (scored: the first ``k`` returned).
        show_progress: Show a progress bar over turns.
        answers: ``"dataset"`` (the data's answers) or ``"top-passage"`` (``ANSWERS``).
    """
    if answers not in ANSWERS:
        raise ValueError(f"answers must be one of {ANSWERS}, got {answers!r}")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an int >= 1, got {k!r}")
    total = sum(len(c.turns) for c in conversations)
    runs: list[TurnRun] = []
    with tqdm(total=total, desc=system.name, unit="turn", disable=not show_progress) as bar:
        for conversation in conversations:
            runs.extend(_replay_conversation(system, conversation, k, answers))
            bar.update(len(conversation.turns))
    return runs


def score_runs(runs: Sequence[TurnRun], tasks: Sequence[Task]) -> list[TaskScore]:
    """Scores of the evaluated tasks among ``runs``, in run order."""
    by_id = {t.task_id: t for t in tasks}
    out: list[TaskScore] = []
    for run in runs:
        task = by_id.get(run.task_id) if run.task_id is not None else None
        if task is not None and task.evaluated:
            out.append(score_task(task.task_id, task.turn, run.ranked, task.relevant, task.tags))
    return out


def history_coverage(runs: Sequence[TurnRun], tasks: Sequence[Task]) -> dict[str, float]:
    """Where gold passages are, for evaluated tasks at turn >= 2: shares of tasks with a gold
    passage in the system's own ranking (``query``), among the passages it retrieved at earlier
    turns of the conversation (``history``), in ``either``; plus ``n``.

    The ``history`` share bounds what a history database of the system's own retrievals can
    contribute; ``either`` bounds a system that merges both channels perfectly.
    """
    by_id = {t.task_id: t for t in tasks}
    seen: dict[str, set[str]] = {}
    counts = {"query": 0, "history": 0, "either": 0, "n": 0}
    for run in runs:
        past = seen.setdefault(run.conversation_id, set())
        task = by_id.get(run.task_id) if run.task_id is not None else None
        if task is not None and task.evaluated and run.turn >= 2:
            gold = set(task.relevant)
            in_query, in_history = bool(gold & set(run.ranked)), bool(gold & past)
            counts["n"] += 1
            counts["query"] += in_query
            counts["history"] += in_history
            counts["either"] += in_query or in_history
        past.update(run.ranked)
    n = counts["n"]
    return {k: (v / n if n and k != "n" else float(v)) for k, v in counts.items()}
