"""What the harness tests share: a tiny MTRAG folder, tasks, a knowledge base, spies."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness.data import (
    Message,
    Task,
)
from benchmarks.harness.kbcache import text_sha1
from benchmarks.harness.systems import BenchContext
from dhrag_core import FaissKnowledgeBase, HashingEmbedder, Passage


def _user(text: str, mt: str, answerable: str = "ANSWERABLE") -> dict[str, Any]:
    return {"speaker": "user", "text": text,
            "enrichments": {"Multi-Turn": [mt], "Answerability": [answerable],
                            "Question Type": ["Factoid"]}}


def _agent(text: str, contexts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"speaker": "agent", "text": text, "contexts": contexts}


def _lines(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _write_mtrag(root: Path) -> None:
    messages = [
        _user("What is alpha?", "N/A"),
        _agent("Alpha is first.", [{"document_id": "d1", "text": "Alpha ctx", "title": "Alpha"}]),
        _user("And its successor?", "Follow-up"),
        _agent("Beta.", [{"document_id": "d2", "text": "Beta ctx"}]),
        _user("Why?", "Clarification", "UNANSWERABLE"),
        _agent("Unknown.", []),
    ]
    record = {"domain": "d", "messages": messages}
    conversation = {"source_file": "conversations/7.json", "record": record}
    _lines(root / "conversations.jsonl", [conversation])
    tasks = []
    for turn in (1, 2, 3):
        agent = messages[2 * turn - 1]
        if turn == 2:  # a passage that appears only in tasks.jsonl contexts
            agent = _agent("Beta.", [{"document_id": "d3", "text": "Gamma ctx", "title": "G"}])
        tasks.append({"source_file": f"tasks/dom/h7<::>{turn}.json", "record": {
            "task_id": f"h7<::>{turn}", "conversation_id": "7", "turn_id": turn,
            "domain": "dom", "user": messages[2 * turn - 2], "agent": agent}})
    _lines(root / "tasks.jsonl", tasks)
    _lines(root / "corpus_pool.jsonl", [
        {"id": "d1", "title": "Pool alpha", "text": "pool alpha"},
        {"id": "d2", "title": "Beta title", "text": "pool beta"},
        {"id": "d9", "title": "", "text": "pool only"},
    ])
    rt = root / "retrieval_tasks" / "dom"
    _lines(rt / "dom_rewrite.jsonl", [{"_id": "h7<::>2", "text": "|user|: What follows alpha?"}])
    (rt / "qrels").mkdir(parents=True)
    (rt / "qrels" / "dev.tsv").write_text(
        "query-id\tcorpus-id\tscore\nh7<::>1\td1\t1\nh7<::>2\td2\t1\nh7<::>2\td3\t1\n",
        encoding="utf-8")


QUESTIONS = ["where is alpha city", "how big is it", "what about beta town"]


ANSWERS = ["alpha city is north", "it is large", "beta town is south"]


def _tasks(conversation: str = "c1") -> list[Task]:
    tasks = []
    for i, q in enumerate(QUESTIONS):
        history = tuple(m for j in range(i) for m in (
            Message("user", f"{conversation} {QUESTIONS[j]}"), Message("assistant", ANSWERS[j])))
        tasks.append(Task(task_id=f"{conversation}::{i + 1}", conversation_id=conversation,
                          turn=i + 1, history=history, question=f"{conversation} {q}",
                          relevant=(f"gold-{conversation}-{i + 1}",),
                          rewrite=f"SECRET REWRITE {conversation} {i + 1}",
                          tags={"domain": "geo", "multi_turn": "Follow-up"}))
    return tasks


def _kb() -> list[Passage]:
    texts = {"n1": "alpha city lies in the north", "n2": "beta town lies in the south",
             "n3": "a large city"}
    kb = [Passage(text=t, id=i) for i, t in texts.items()]
    for c in ("c1", "c2"):
        kb += [Passage(text=f"gold passage {c} {i}", id=f"gold-{c}-{i}") for i in (1, 2, 3)]
    return kb


class SpySystem:
    """Records everything the harness shows it; returns gold only when told to (turn 2)."""

    name = "spy"

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def start(self, conversation_id: str) -> None:
        self.events.append(("start", conversation_id))

    def retrieve(self, question: str, k: int) -> list[Passage]:
        self.events.append(("retrieve", question, k))
        turn = sum(e[0] == "retrieve" for e in self.events[self._last_start():])
        hits = [Passage(text="n", id="n1"), Passage(text="n", id="n2")]
        return [Passage(text="g", id=f"gold-c1-{turn}"), *hits] if turn == 2 else hits

    def observe(self, question: str, passages: list[Passage], answer: str) -> None:
        self.events.append(("observe", question, [p.id for p in passages], answer))

    def _last_start(self) -> int:
        return max(i for i, e in enumerate(self.events) if e[0] == "start")


def _context(tasks: list[Task]) -> BenchContext:
    emb = HashingEmbedder()
    kb = FaissKnowledgeBase(_kb(), emb)
    refs = {(t.conversation_id, t.turn): t.rewrite for t in tasks if t.rewrite}
    return BenchContext(kb=kb, embedder=emb, references=refs)


class CountingEmbedder(HashingEmbedder):
    """A hashing embedder that counts the texts it encodes."""

    def __init__(self) -> None:
        super().__init__(64)
        self.count = 0

    def encode(self, texts: Any) -> Any:
        self.count += len(texts)
        return super().encode(texts)


def _seed_file(path: Path, passages: list[Passage], emb: HashingEmbedder, *,
               noise: float = 0.0) -> Path:
    vectors = emb.encode([p.text for p in passages])
    if noise:
        vectors = np.roll(vectors, 1, axis=1)
    np.savez(path, ids=np.array([p.id for p in passages]),
             text_sha1=np.array([text_sha1(p.text) for p in passages]), E=vectors,
             meta=np.array("{}"))
    return path


def _many_conversations(n: int = 7, turns: int = 5) -> list[Task]:
    tasks = []
    for c in range(n):
        history: list[Message] = []
        for t in range(1, turns + 1 - (c % 3)):
            tasks.append(Task(task_id=f"c{c}::{t}", conversation_id=f"c{c}", turn=t,
                              history=tuple(history), question=f"c{c} question {t}",
                              relevant=(f"gold-c{c}-{t}",) if t % 4 else (),
                              rewrite=f"rewrite c{c} {t}", tags={"domain": f"d{c % 2}"}))
            history += [Message("user", f"c{c} question {t}"),
                        Message("assistant", f"c{c} answer {t}")]
    return tasks


# MTRAG's own ids, as its tasks.jsonl has them (conversation id, "<::>", turn), with domains
MTRAG_IDS = {
    "dd6b6ffd177f2b311abe676261279d2f<::>1": "clapnq",
    "62a5aee8a497bee6fc467df13bf23cfc<::>1": "govt",
    "e9dd465e8dd63a80dda8f3ce9cba6848<::>1": "fiqa",
    "d5b1e735a040853ed361a3dfde1b8ef0<::>1": "cloud",
}


def _conversation(cid: str, turns: list[tuple[str, str]]) -> list[Task]:
    tasks, history = [], []
    for n, (question, answer) in enumerate(turns, 1):
        tasks.append(Task(task_id=f"{cid}::{n}", conversation_id=cid, turn=n,
                          history=tuple(history), question=question, relevant=(f"g-{cid}-{n}",)))
        history += [Message("user", question), Message("assistant", answer)]
    return tasks

