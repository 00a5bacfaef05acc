"""Adapter rows of the benchmark: DH-RAG through the LangChain and LlamaIndex adapters ranks as
the core does on the vector path, and the text path runs."""

from __future__ import annotations

import json
from importlib import resources

import pytest

import benchmarks.harness.adapter_systems  # registers lc-*, li-*
import benchmarks.harness.dhrag_systems  # noqa: F401  (registers dhrag)
from benchmarks.harness.data import Message, Task, build_conversations
from benchmarks.harness.replay import replay
from benchmarks.harness.systems import BenchContext, build_systems
from dhrag_core import FaissKnowledgeBase, HashingEmbedder, Passage
from dhrag_core.app.demo import DEMO_TURNS

# the stores the adapter rows use are maintained, non-deprecated integrations
pytestmark = pytest.mark.filterwarnings("error::DeprecationWarning")

ANSWERS = ["Stone, brick, tamped earth and wood.", "About 21,196 km.",
           "In burrows dug by other animals.", "Yes, they are popular pets.",
           "Nomads from the steppe.", "On 9 November 1989."]


def _context() -> BenchContext:
    data = resources.files("dhrag_core") / "data" / "demo_kb.jsonl"
    rows = [json.loads(line) for line in data.read_text("utf-8").splitlines()]
    passages = [Passage(r["text"], id=r["id"], title=r["title"]) for r in rows]
    emb = HashingEmbedder()
    return BenchContext(kb=FaissKnowledgeBase(passages, emb), embedder=emb)


def _tasks() -> list[Task]:
    turns = list(zip(DEMO_TURNS, ANSWERS, strict=False))
    tasks = []
    for i, (q, _) in enumerate(turns):
        history = tuple(m for p, a in turns[:i]
                        for m in (Message("user", p), Message("assistant", a)))
        tasks.append(Task(task_id=f"c::{i + 1}", conversation_id="c", turn=i + 1,
                          history=history, question=q, relevant=("x",)))
    return tasks


@pytest.fixture(scope="module")
def runs() -> dict[str, list[tuple[str, ...]]]:
    ctx = _context()
    convs = build_conversations(_tasks())
    systems = build_systems(["dhrag", "lc-vector", "li-vector", "lc-text", "li-text"], ctx)
    return {s.name: [r.ranked for r in replay(s, convs, k=5, show_progress=False)]
            for s in systems}


def test_vector_paths_rank_as_the_core(runs: dict[str, list[tuple[str, ...]]]) -> None:
    assert len(runs["dhrag"]) == len(ANSWERS) and all(len(r) == 5 for r in runs["dhrag"])
    assert runs["lc-vector"] == runs["dhrag"]
    assert runs["li-vector"] == runs["dhrag"]


def test_text_paths_run_and_differ(runs: dict[str, list[tuple[str, ...]]]) -> None:
    assert runs["lc-text"] == runs["li-text"]  # the same text path through both adapters
    assert runs["lc-text"][0] == runs["dhrag"][0]  # no history yet: the same search
    assert runs["lc-text"] != runs["dhrag"]  # with history: another path
