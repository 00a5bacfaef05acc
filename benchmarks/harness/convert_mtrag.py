"""Convert the MTRAG data (``shared/data/mtrag``) to the neutral format of
``benchmarks.harness.data``.

The knowledge base is ``corpus_pool.jsonl`` plus every passage in any ``contexts`` of
``conversations.jsonl`` and ``tasks.jsonl``; where a passage appears in contexts, the contexts'
text (and title, when given) wins. Gold ids come from ``retrieval_tasks/*/qrels/dev.tsv``,
reference rewrites from ``retrieval_tasks/*/*_rewrite.jsonl``, tags from the user enrichments.

Example:
    >>> summary = convert("../shared/data/mtrag", "/tmp/mtrag")  # doctest: +SKIP
    >>> summary.n_passages, summary.n_evaluated  # doctest: +SKIP
    (36639, 777)
"""

from __future__ import annotations

import csv
import json
import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness.data import (
    KB_FILE,
    TASKS_FILE,
    Message,
    Task,
    read_jsonl,
    write_kb,
    write_tasks,
)
from dhrag_core import Passage

__all__ = ["ConversionSummary", "convert", "mtrag_kb", "mtrag_tasks", "read_qrels", "read_rewrites"]

log = logging.getLogger(__name__)

TURN_SEPARATOR = "<::>"
QUERY_PREFIX = "|user|: "
MANIFEST_FILE = "manifest.json"
_ROLE = {"user": "user", "agent": "assistant"}
_TAGS = {
    "Multi-Turn": "multi_turn",
    "Answerability": "answerability",
    "Question Type": "question_type",
}


@dataclass(frozen=True)
class ConversionSummary:
    """What a conversion wrote."""

    source: str
    target: str
    n_passages: int
    n_context_passages: int
    n_tasks: int
    n_evaluated: int
    n_relevant_pairs: int
    n_conversations: int


def _records(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(source_file, record)`` of each line of a repackaged MTRAG file."""
    for row in read_jsonl(path):
        yield str(row.get("source_file", "")), row["record"]


def _contexts(messages: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    for m in messages:
        yield from m.get("contexts") or []


def mtrag_kb(
    pool: Iterable[Mapping[str, Any]], contexts: Iterable[Mapping[str, Any]]
) -> list[Passage]:
    """The knowledge base, sorted by id: pool rows overridden by context passages.

    Args:
        pool: ``corpus_pool.jsonl`` rows (``id``, ``title``, ``text``).
        contexts: Context dicts (``document_id``, ``text``, optional ``title``).
    """
    rows: dict[str, tuple[str, str]] = {
        str(r["id"]): (str(r["text"]), str(r.get("title") or "")) for r in pool
    }
    for c in contexts:
        doc = str(c["document_id"])
        title = c.get("title") or rows.get(doc, ("", ""))[1]
        rows[doc] = (str(c["text"]), str(title))
    return [Passage(text=t, id=i, title=ti) for i, (t, ti) in sorted(rows.items())]


def read_qrels(paths: Iterable[Path]) -> dict[str, list[str]]:
    """BEIR qrels (``query-id``, ``corpus-id``, ``score``) -> task id -> ids with score > 0."""
    out: dict[str, list[str]] = {}
    for path in paths:
        with open(path, encoding="utf-8", newline="") as f:
            for row in csv.DictReader(f, delimiter="\t"):
                if float(row["score"]) > 0:
                    out.setdefault(row["query-id"], []).append(row["corpus-id"])
    return out


def read_rewrites(paths: Iterable[Path]) -> dict[str, str]:
    """BEIR query files -> task id -> query text without the ``|user|:`` prefix."""
    out: dict[str, str] = {}
    for path in paths:
        for row in read_jsonl(path):
            out[str(row["_id"])] = _strip_prefix(str(row["text"]))
    return out


def _strip_prefix(text: str) -> str:
    return text[len(QUERY_PREFIX) :] if text.startswith(QUERY_PREFIX) else text


def _tags(enrichments: Mapping[str, Sequence[str]], domain: str) -> dict[str, str]:
    tags = {"domain": domain}
    for key, name in _TAGS.items():
        values = enrichments.get(key) or []
        if values:
            tags[name] = "+".join(values)
    return tags


def _conversation_tasks(
    messages: Sequence[Mapping[str, Any]],
    info: Mapping[int, Mapping[str, Any]],
    fallback_id: str,
    qrels: Mapping[str, list[str]],
    rewrites: Mapping[str, str],
) -> list[Task]:
    """One task per user message of a conversation; ``info`` maps turn -> tasks.jsonl record."""
    first = next(iter(info.values()), None)
    conv_id = str(first["task_id"]).split(TURN_SEPARATOR)[0] if first else fallback_id
    domain = str(first["domain"]) if first else ""
    history: list[Message] = []
    tasks: list[Task] = []
    for m in messages:
        role = _ROLE[str(m["speaker"])]
        if role == "user":
            turn = sum(x.role == "user" for x in history) + 1
            rec = info.get(turn)
            if rec is not None and rec["user"]["text"] != m["text"]:
                raise ValueError(f"task {rec['task_id']!r}: question differs from conversation")
            task_id = str(rec["task_id"]) if rec else f"{conv_id}{TURN_SEPARATOR}{turn}"
            tasks.append(Task(
                task_id=task_id, conversation_id=conv_id, turn=turn, history=tuple(history),
                question=str(m["text"]), relevant=tuple(qrels.get(task_id, ())),
                rewrite=rewrites.get(task_id), tags=_tags(m.get("enrichments") or {}, domain),
            ))
        history.append(Message(role, str(m["text"])))
    return tasks


def mtrag_tasks(
    conversations: Iterable[tuple[str, Mapping[str, Any]]],
    task_records: Iterable[Mapping[str, Any]],
    qrels: Mapping[str, list[str]],
    rewrites: Mapping[str, str],
) -> list[Task]:
    """Neutral tasks for every user turn of every conversation.

    Args:
        conversations: ``(source_file, record)`` pairs; the file stem is the conversation
            number that ``tasks.jsonl`` records call ``conversation_id``.
        task_records: ``tasks.jsonl`` records (``task_id``, ``conversation_id``, ``turn_id``,
            ``domain``, ``user``).
        qrels: Task id -> relevant ids.
        rewrites: Task id -> reference rewrite.
    """
    info: dict[str, dict[int, Mapping[str, Any]]] = {}
    for rec in task_records:
        info.setdefault(str(rec["conversation_id"]), {})[int(rec["turn_id"])] = rec
    tasks: list[Task] = []
    for source, record in conversations:
        number = Path(source).stem
        tasks.extend(_conversation_tasks(
            record["messages"], info.get(number, {}), f"conversation-{number}", qrels, rewrites
        ))
    unknown = set(qrels) - {t.task_id for t in tasks}
    if unknown:
        log.warning("%d qrels tasks have no conversation turn (e.g. %s)",
                    len(unknown), sorted(unknown)[:3])
    return tasks


def convert(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> ConversionSummary:
    """Convert the MTRAG folder ``source`` to ``kb.jsonl`` + ``tasks.jsonl`` under ``target``.

    Raises:
        FileNotFoundError: If an input file is missing.
    """
    src, dst = Path(source).expanduser(), Path(target).expanduser()
    for name in ("conversations.jsonl", "tasks.jsonl", "corpus_pool.jsonl", "retrieval_tasks"):
        if not (src / name).exists():
            raise FileNotFoundError(f"{src / name} not found: is {src} the MTRAG data folder?")
    conversations = list(_records(src / "conversations.jsonl"))
    task_records = [rec for _, rec in _records(src / "tasks.jsonl")]
    contexts = [
        *_contexts(m for _, c in conversations for m in c["messages"]),
        *_contexts(rec["agent"] for rec in task_records),
    ]
    kb = mtrag_kb(read_jsonl(src / "corpus_pool.jsonl"), contexts)
    tasks = mtrag_tasks(
        conversations,
        task_records,
        read_qrels(sorted(src.glob("retrieval_tasks/*/qrels/dev.tsv"))),
        read_rewrites(sorted(src.glob("retrieval_tasks/*/*_rewrite.jsonl"))),
    )
    write_kb(kb, dst / KB_FILE)
    write_tasks(tasks, dst / TASKS_FILE)
    summary = ConversionSummary(
        source=str(src),
        target=str(dst),
        n_passages=len(kb),
        n_context_passages=len({str(c["document_id"]) for c in contexts}),
        n_tasks=len(tasks),
        n_evaluated=sum(t.evaluated for t in tasks),
        n_relevant_pairs=sum(len(t.relevant) for t in tasks),
        n_conversations=len({t.conversation_id for t in tasks}),
    )
    (dst / MANIFEST_FILE).write_text(json.dumps(asdict(summary), indent=2) + "\n", encoding="utf-8")
    log.info("converted %s -> %s: %s", src, dst, summary)
    return summary
