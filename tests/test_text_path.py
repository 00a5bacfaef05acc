"""The MTRAG text-path harness: DH-RAG over a knowledge base that only has search(text, k)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.harness.data import Benchmark, Conversation, ConversationTurn, Message, Task
from benchmarks.studies.text_path import TextOnlyKB, markdown, run_text_path
from dhrag_core import DHRAG, FaissKnowledgeBase, HashingEmbedder, Passage

PASSAGES = [
    Passage("The Great Wall of China was built of stone, brick, tamped earth and wood.", "built"),
    Passage("The Great Wall of China is 21,196 km long in total.", "length"),
    Passage("How long is the Amazon river? It is about 6,400 km long.", "amazon"),
    Passage("Guinea pigs sleep in burrows dug by other animals.", "pigs"),
]
QUESTIONS = [("What is the Great Wall of China built out of?", "Stone and brick.", "built"),
             ("How long is it?", "21,196 km.", "length")]


def bench() -> Benchmark:
    tasks, turns = [], []
    history: tuple[Message, ...] = ()
    for i, (q, a, gold) in enumerate(QUESTIONS, start=1):
        task = Task(f"c<::>{i}", "c", i, history, q, (gold,))
        tasks.append(task)
        turns.append(ConversationTurn(i, q, a, task))
        history += (Message("user", q), Message("assistant", a))
    return Benchmark(kb=PASSAGES, tasks=tasks, conversations=[Conversation("c", tuple(turns))])


def test_text_only_kb_is_searched_with_the_rewritten_question() -> None:
    emb = HashingEmbedder()
    kb = TextOnlyKB(FaissKnowledgeBase(PASSAGES, emb), emb)
    assert not hasattr(kb, "search_vectors")
    searched: list[str] = []
    inner = kb.search

    def spy(text: str, k: int) -> list[Passage]:
        searched.append(text)
        return inner(text, k)

    kb.search = spy  # type: ignore[method-assign]
    rag = DHRAG(kb, embedder=emb)
    sel = rag.select("s", QUESTIONS[0][0])
    rag.record("s", sel.query, QUESTIONS[0][1], selection=sel)
    rag.select("s", "How long is it?")
    assert searched[-1] == "How long is the Great Wall of China?"


def test_the_rewritten_text_finds_what_the_raw_question_misses(tmp_path: Path) -> None:
    runs = {r.name: r for r in run_text_path(bench(), HashingEmbedder(), cache_dir=tmp_path,
                                             seed=None)}
    assert len(runs) == 6 and all(r.scores["n"] == 2 for r in runs.values())
    raw, sub = runs["text path, raw question"], runs["text path, substitute, rewrite embedded"]
    # "How long is it?" alone ranks the Amazon first; rewritten, the Great Wall's length (the
    # default re-ranks by the raw question's expanded vector: with this bag-of-words fake,
    # "long" keeps the Amazon first there)
    assert sub.scores["MRR@10"] == 1.0 > raw.scores["MRR@10"]
    table = markdown(list(runs.values()))
    assert table.count("\n") == 7 and "| text path, append | 2 |" in table
