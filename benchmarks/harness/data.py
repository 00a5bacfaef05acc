"""The neutral benchmark format: ``kb.jsonl`` + ``tasks.jsonl``, with loaders and writers.

``kb.jsonl`` holds one passage per line: ``{"id", "text", "title"}``. ``tasks.jsonl`` holds one
user turn per line::

    {"task_id": "c1::2", "conversation_id": "c1", "turn": 2,
     "history": [{"role": "user", "text": ...}, {"role": "assistant", "text": ...}],
     "question": "...", "relevant": ["kb-id", ...],
     "rewrite": "optional reference rewrite", "tags": {"domain": "...", "multi_turn": "..."}}

``turn`` is 1-based and ``history`` holds every message before the question. A task with an
empty ``relevant`` list is replayed (the system sees the turn) but not scored. ``rewrite`` is a
reference (only a reference system may read it), never an input of the systems under test.

Example:
    >>> bench = load_benchmark("~/.cache/dhrag/benchmarks/mtrag")  # doctest: +SKIP
    >>> len(bench.kb), len(bench.evaluated_tasks)  # doctest: +SKIP
    (36639, 777)
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dhrag_core import Passage

__all__ = [
    "KB_FILE",
    "TASKS_FILE",
    "Benchmark",
    "Conversation",
    "ConversationTurn",
    "Message",
    "Task",
    "build_conversations",
    "load_benchmark",
    "load_kb",
    "load_tasks",
    "read_jsonl",
    "write_jsonl",
    "write_kb",
    "write_tasks",
]

log = logging.getLogger(__name__)

KB_FILE = "kb.jsonl"
TASKS_FILE = "tasks.jsonl"
ROLES = ("user", "assistant")


@dataclass(frozen=True)
class Message:
    """One message of a conversation: ``role`` is ``"user"`` or ``"assistant"``."""

    role: str
    text: str

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {self.role!r}")


@dataclass(frozen=True)
class Task:
    """One user turn of a conversation, with its gold passages (empty: not evaluated)."""

    task_id: str
    conversation_id: str
    turn: int
    history: tuple[Message, ...]
    question: str
    relevant: tuple[str, ...]
    rewrite: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)

    @property
    def evaluated(self) -> bool:
        """Whether the task has gold passages, so it is scored."""
        return bool(self.relevant)


@dataclass(frozen=True)
class ConversationTurn:
    """A user turn as replayed: the question, the answer given after it, and its task."""

    turn: int
    question: str
    answer: str
    task: Task | None


@dataclass(frozen=True)
class Conversation:
    """A conversation's user turns in order."""

    conversation_id: str
    turns: tuple[ConversationTurn, ...]


@dataclass(frozen=True)
class Benchmark:
    """A loaded benchmark: the knowledge base, the tasks and the conversations they form."""

    kb: list[Passage]
    tasks: list[Task]
    conversations: list[Conversation]

    @property
    def evaluated_tasks(self) -> list[Task]:
        """Tasks with gold passages."""
        return [t for t in self.tasks if t.evaluated]


def read_jsonl(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Yield the JSON object of each non-blank line of ``path``."""
    for _, row in numbered_jsonl(path):
        yield row


def numbered_jsonl(path: str | os.PathLike[str]) -> Iterator[tuple[int, Any]]:
    """Yield ``(line number, JSON value)`` for each non-blank line of ``path``, so a caller
    checking the values can say where a bad one is."""
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from exc


def write_jsonl(rows: Iterable[Mapping[str, Any]], path: str | os.PathLike[str]) -> int:
    """Write one JSON object per line, atomically (via a renamed temporary file).

    Returns:
        The number of rows written.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    n = 0
    with open(tmp, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    os.replace(tmp, target)
    return n


def _require(row: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    if key not in row:
        raise ValueError(f"{where}: missing field {key!r}")
    value = row[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(f"{where}: field {key!r} must be {kind.__name__}, got {value!r:.60}")
    return value


def passage_from_row(row: Mapping[str, Any], where: str = "kb") -> Passage:
    """A ``Passage`` from a ``kb.jsonl`` row (``title`` optional)."""
    title = row.get("title") or ""
    return Passage(
        text=_require(row, "text", str, where), id=_require(row, "id", str, where), title=title
    )


def passage_to_row(passage: Passage) -> dict[str, str]:
    """The ``kb.jsonl`` row of a passage (its id must be set)."""
    if passage.id is None:
        raise ValueError("a knowledge-base passage needs an id")
    return {"id": passage.id, "text": passage.text, "title": passage.title}


def task_from_row(row: Mapping[str, Any], where: str = "tasks") -> Task:
    """A ``Task`` from a ``tasks.jsonl`` row, validated."""
    history = tuple(
        Message(role=_require(m, "role", str, where), text=_require(m, "text", str, where))
        for m in _require(row, "history", list, where)
    )
    relevant = _require(row, "relevant", list, where)
    if not all(isinstance(r, str) for r in relevant):
        raise ValueError(f"{where}: 'relevant' must be a list of kb ids (str)")
    turn = _require(row, "turn", int, where)
    if turn < 1:
        raise ValueError(f"{where}: 'turn' must be an int >= 1, got {turn}")
    rewrite = row.get("rewrite")
    if rewrite is not None and not isinstance(rewrite, str):
        raise ValueError(f"{where}: 'rewrite' must be a str or null")
    tags = row.get("tags") or {}
    if not isinstance(tags, dict):
        raise ValueError(f"{where}: 'tags' must be an object")
    return Task(
        task_id=_require(row, "task_id", str, where),
        conversation_id=_require(row, "conversation_id", str, where),
        turn=turn,
        history=history,
        question=_require(row, "question", str, where),
        relevant=tuple(relevant),
        rewrite=rewrite,
        tags={str(k): str(v) for k, v in tags.items()},
    )


def task_to_row(task: Task) -> dict[str, Any]:
    """The ``tasks.jsonl`` row of a task."""
    row: dict[str, Any] = {
        "task_id": task.task_id,
        "conversation_id": task.conversation_id,
        "turn": task.turn,
        "history": [{"role": m.role, "text": m.text} for m in task.history],
        "question": task.question,
        "relevant": list(task.relevant),
    }
    if task.rewrite is not None:
        row["rewrite"] = task.rewrite
    if task.tags:
        row["tags"] = dict(task.tags)
    return row


def load_kb(path: str | os.PathLike[str]) -> list[Passage]:
    """Read ``kb.jsonl``; ids must be unique."""
    passages = [passage_from_row(r, f"{path}:{i}") for i, r in enumerate(read_jsonl(path), 1)]
    seen: set[str] = set()
    for p in passages:
        if p.key in seen:
            raise ValueError(f"{path}: duplicate passage id {p.key!r}")
        seen.add(p.key)
    return passages


def load_tasks(path: str | os.PathLike[str]) -> list[Task]:
    """Read ``tasks.jsonl``; task ids must be unique."""
    tasks = [task_from_row(r, f"{path}:{i}") for i, r in enumerate(read_jsonl(path), 1)]
    ids = [t.task_id for t in tasks]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: duplicate task ids")
    return tasks


def write_kb(passages: Iterable[Passage], path: str | os.PathLike[str]) -> int:
    """Write ``kb.jsonl``; return the number of passages."""
    return write_jsonl((passage_to_row(p) for p in passages), path)


def write_tasks(tasks: Iterable[Task], path: str | os.PathLike[str]) -> int:
    """Write ``tasks.jsonl``; return the number of tasks."""
    return write_jsonl((task_to_row(t) for t in tasks), path)


def _transcript_turns(messages: Sequence[Message], conversation_id: str) -> list[tuple[str, str]]:
    """(question, answer) pairs of a transcript; consecutive assistant messages are joined."""
    turns: list[tuple[str, list[str]]] = []
    for m in messages:
        if m.role == "user":
            turns.append((m.text, []))
        elif not turns:
            raise ValueError(f"conversation {conversation_id!r} starts with an assistant message")
        else:
            turns[-1][1].append(m.text)
    return [(q, "\n".join(a)) for q, a in turns]


def _conversation(conversation_id: str, tasks: list[Task]) -> Conversation:
    last = max(tasks, key=lambda t: t.turn)
    pairs = _transcript_turns([*last.history, Message("user", last.question)], conversation_id)
    by_turn = {t.turn: t for t in tasks}
    if len(by_turn) != len(tasks):
        raise ValueError(f"conversation {conversation_id!r} has two tasks for one turn")
    for t in tasks:
        n_users = sum(m.role == "user" for m in t.history)
        if n_users != t.turn - 1 or pairs[t.turn - 1][0] != t.question:
            raise ValueError(
                f"task {t.task_id!r}: turn {t.turn} does not match its history "
                f"({n_users} earlier user messages) and the conversation's transcript"
            )
    turns = tuple(
        ConversationTurn(turn=i, question=q, answer=a, task=by_turn.get(i))
        for i, (q, a) in enumerate(pairs, 1)
    )
    return Conversation(conversation_id=conversation_id, turns=turns)


def build_conversations(tasks: Sequence[Task]) -> list[Conversation]:
    """Group tasks into conversations, in order of first appearance.

    The transcript comes from the history of each conversation's last task, so turns without a
    task are still replayed; the answer of the last turn is unknown (empty).

    Raises:
        ValueError: If a task's turn number or question disagrees with the transcript.
    """
    groups: dict[str, list[Task]] = {}
    for t in tasks:
        groups.setdefault(t.conversation_id, []).append(t)
    return [_conversation(cid, ts) for cid, ts in groups.items()]


def load_benchmark(directory: str | os.PathLike[str],
                   kb_file: str | os.PathLike[str] | None = None) -> Benchmark:
    """Load ``kb.jsonl`` (or ``kb_file``: tasks over another benchmark's knowledge base) and
    ``tasks.jsonl`` from ``directory`` and check gold ids exist."""
    root = Path(directory).expanduser()
    kb_path = root / KB_FILE if kb_file is None else Path(kb_file).expanduser()
    for path in (kb_path, root / TASKS_FILE):
        if not path.is_file():
            raise FileNotFoundError(
                f"{path} not found: convert a dataset first (python -m benchmarks convert)"
            )
    kb = load_kb(kb_path)
    tasks = load_tasks(root / TASKS_FILE)
    ids = {p.key for p in kb}
    missing = {r for t in tasks for r in t.relevant if r not in ids}
    if missing:
        log.warning("%d relevant ids are not in the knowledge base (e.g. %s)",
                    len(missing), sorted(missing)[:3])
    return Benchmark(kb=kb, tasks=tasks, conversations=build_conversations(tasks))
