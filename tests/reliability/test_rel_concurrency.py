"""Concurrency: many threads and sessions through the core, two writers on one SQLite file,
and concurrent async turns through both adapters inside one running event loop.

Sizes: 8 threads x 1,000 turns over 50 sessions on each store (``THREADS``/``TURNS``);
``DHRAG_RELIABILITY_TURNS`` lowers the per-thread count for a quick run.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore
from llama_index.core import VectorStoreIndex
from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
)
from llama_index.core.llms import CustomLLM
from llama_index.core.schema import TextNode
from rel_support import check_tree

from dhrag_core import (
    DHRAG,
    AddResult,
    FaissKnowledgeBase,
    HashingEmbedder,
    HistoryDatabase,
    Limits,
    MemoryStore,
    Retrieval,
    Settings,
    SQLiteStore,
    Tree,
)
from langchain_dhrag import DHRAGEmbeddings, DHRAGMemory, DHRAGRetriever
from llamaindex_dhrag import DHRAGChatEngine, DHRAGEmbedding

THREADS = 8
TURNS = int(os.environ.get("DHRAG_RELIABILITY_TURNS", "1000"))
SESSIONS = 50
WORDS = (
    "hay", "pig", "bond", "rate", "pod", "node", "visa", "form", "wall", "brick",
    "moon", "orbit", "tide", "salt", "wheat",
)
FACTS = [f"Fact {i}: the {w} is discussed in chapter {w}{i}." for i, w in enumerate(WORDS)]


def _sid(n: int) -> str:
    return f"sess{n:02d}"


def _run_threads(turn: Callable[[int, int], AddResult]) -> list[list[AddResult]]:
    """``THREADS`` threads, each doing ``TURNS`` turns; turn j of every thread goes to session
    j % SESSIONS, so every session is written by all threads at once."""
    results: list[list[AddResult]] = [[] for _ in range(THREADS)]
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def work(t: int) -> None:
        try:
            start.wait()
            for j in range(TURNS):
                results[t].append(turn(t, j))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[:3]
    return results


def _check_all_there(history: HistoryDatabase, results: list[list[AddResult]]) -> None:
    """Every returned turn is stored in its session, nothing else is, sizes are exact."""
    expected: dict[str, set[str]] = defaultdict(set)
    for rs in results:
        for r in rs:
            assert not r.evicted
            expected[r.turn.session_id].add(r.turn.turn_id)
    assert len(expected) == min(SESSIONS, TURNS)
    total = 0
    for sid, ids in expected.items():
        turns = history.turns(sid)
        assert {t.turn_id for t in turns} == ids, f"lost or foreign turns in {sid}"
        assert history.size(sid) == len(ids) == len(turns)
        assert all(t.session_id == sid and f"{sid} " in t.query for t in turns)
        idx = [t.index for t in turns]
        assert len(set(idx)) == len(idx)
        for hit in history.search(sid, f"{sid} thread3 about hay", k=10):
            assert hit.turn.session_id == sid
        total += len(ids)
    merged = sum(r.merged for rs in results for r in rs)
    assert total == THREADS * TURNS - merged


@pytest.fixture(params=["memory", "sqlite"])
def shared_store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    store = MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "h.db")
    yield store
    store.close()


def test_threads_times_turns_over_sessions_through_the_engine(shared_store: Any) -> None:
    emb = HashingEmbedder(128)
    rag = DHRAG(FaissKnowledgeBase(FACTS, emb), embedder=emb, store=shared_store,
                settings=Settings(retrieval=Retrieval(kb_k=5, context_k=3)))

    def turn(t: int, j: int) -> AddResult:
        sid = _sid(j % SESSIONS)
        query = f"{sid} thread{t} turn{j} about {WORDS[(t + j) % len(WORDS)]}"
        sel = rag.select(sid, query)
        assert sel.session_id == sid
        assert all(s.turn.session_id == sid for s in sel.history)
        return rag.record(sid, query, f"answer {t}.{j} on {WORDS[j % len(WORDS)]}",
                          selection=sel)

    results = _run_threads(turn)
    _check_all_there(rag.history, results)
    if isinstance(shared_store, SQLiteStore):
        assert shared_store.integrity_check() == "ok"
        # a fresh reader sees the same thing the writers' cache does
        fresh = HistoryDatabase(embedder=emb, store=SQLiteStore(shared_store.path))
        _check_all_there(fresh, results)
        fresh.close()


@pytest.mark.parametrize("writers", [2, 4])
def test_databases_on_one_sqlite_file_write_one_session(tmp_path: Path, writers: int) -> None:
    """``writers`` ``HistoryDatabase`` objects, each with its own connection (separate
    processes, as far as SQLite can tell), two threads each, write the same session at
    once: no turn is lost (4 writers used to exhaust the optimistic-write retries)."""
    emb = HashingEmbedder(64)
    path = tmp_path / "shared.db"
    cfg = Settings(limits=Limits(capacity=10_000))
    dbs = [HistoryDatabase(embedder=emb, store=SQLiteStore(path), settings=cfg)
           for _ in range(writers)]
    n = max(50, TURNS // 10)
    results: list[list[AddResult]] = [[] for _ in range(2 * writers)]
    errors: list[BaseException] = []
    start = threading.Barrier(2 * writers)

    def work(w: int) -> None:
        db = dbs[w % writers]
        try:
            start.wait()
            for j in range(n):
                sid = "shared" if j % 4 else f"side{j % 8}"
                results[w].append(
                    db.add(sid,
                           f"{sid} writer{w} turn{j} about {WORDS[j % len(WORDS)]}",
                           f"answer {w}.{j}",
                           passages=[f"passage {w}.{j}"])
                )
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(2 * writers)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[:3]
    expected: dict[str, set[str]] = defaultdict(set)
    for rs in results:
        for r in rs:
            expected[r.turn.session_id].add(r.turn.turn_id)
    assert sum(len(v) for v in expected.values()) == 2 * writers * n - sum(
        r.merged for rs in results for r in rs
    )
    for db in [*dbs, HistoryDatabase(embedder=emb, store=SQLiteStore(path), settings=cfg)]:
        for sid, ids in expected.items():
            turns = db.turns(sid)
            assert {t.turn_id for t in turns} == ids, sid
            assert len({t.index for t in turns}) == len(turns), "two turns got one index"
        db.close()


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_mixed_reads_writes_and_deletes_from_two_databases(tmp_path: Path, backend: str) -> None:
    """Six threads add, search, select and delete sessions at random through two databases
    on one store (a small capacity: evictions too). Nothing raises, reads see only their
    session, and afterwards both databases agree and every tree is whole."""
    emb = HashingEmbedder(64)
    cfg = Settings(limits=Limits(capacity=20), tree=Tree(min_tree_turns=4, cluster_merge_every=4))
    memory = MemoryStore()
    dbs = [HistoryDatabase(embedder=emb, settings=cfg, store=memory if backend == "memory"
                           else SQLiteStore(tmp_path / "h.db")) for _ in range(2)]
    sessions = [f"mix{i}" for i in range(4)]
    errors: list[BaseException] = []
    n_ops = max(100, TURNS // 2)

    def work(w: int) -> None:
        rnd = random.Random(w)
        try:
            for j in range(n_ops):
                db, sid = dbs[rnd.randrange(2)], rnd.choice(sessions)
                a, b = rnd.choice(WORDS), rnd.choice(WORDS)
                op = rnd.random()
                if op < 0.5:
                    db.add(sid, f"{sid} {a} {b} q{j}", f"{b} answer", passages=[f"{a} passage"])
                elif op < 0.7:
                    assert all(h.turn.session_id == sid for h in db.search(sid, a, k=3))
                elif op < 0.9:
                    assert all(t.turn.session_id == sid for t in db.select(sid, f"{a} {b}"))
                elif op < 0.96:
                    assert all(t.session_id == sid for t in db.turns(sid))
                    db.stats(sid)
                else:
                    db.delete_session(sid)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[:3]
    for sid in sessions:
        a, b = ([(t.turn_id, t.index, t.cluster_id) for t in db.turns(sid)] for db in dbs)
        assert a == b and len(a) <= cfg.limits.capacity, sid
        for db in dbs:
            check_tree(db, sid)
    for db in dbs:
        db.close()


# -- adapters inside one running event loop --------------------------------------------------

ASYNC_SESSIONS = 20
ASYNC_TURNS = 10


def _question(sid: str, i: int) -> str:
    return f"{sid} asks question {i} about the {WORDS[i % len(WORDS)]}"


async def test_langchain_retriever_and_memory_concurrent_sessions_one_loop() -> None:
    emb = HashingEmbedder(128)
    vs = InMemoryVectorStore(DHRAGEmbeddings(emb))
    await vs.aadd_documents([Document(f, id=f"fact-{i}") for i, f in enumerate(FACTS)])
    retriever = DHRAGRetriever.from_knowledge(vs, embedder=emb, k=4)
    engine = retriever.engine
    returned: dict[tuple[str, int], list[str]] = {}

    async def llm(question: str) -> str:
        await asyncio.sleep(0.001)
        return f"scripted answer to: {question}"

    async def conversation(n: int) -> None:
        sid = _sid(n)
        memory = DHRAGMemory(engine=engine, session_id=sid, input_key="input",
                             output_key="output")
        for i in range(ASYNC_TURNS):
            q = _question(sid, i)
            if n % 2:  # retriever + record
                docs = await retriever.ainvoke(q, config={"configurable": {"session_id": sid}})
                assert {d.metadata["dhrag"]["session_id"] for d in docs} == {sid}
                returned[sid, i] = [d.id or "" for d in docs]
                await retriever.arecord(sid, q, await llm(q))
            else:  # classic memory
                out = await memory.aload_memory_variables({"input": q})
                assert sid in out["rewritten_query"]
                for line in out["history"].splitlines():
                    assert line.startswith("AI:") or sid in line
                await memory.asave_context({"input": q}, {"output": await llm(q)})

    await asyncio.wait_for(
        asyncio.gather(*(conversation(n) for n in range(ASYNC_SESSIONS))), timeout=60
    )
    for n in range(ASYNC_SESSIONS):
        sid = _sid(n)
        turns = engine.history.turns(sid)
        assert [t.query for t in turns] == [_question(sid, i) for i in range(ASYNC_TURNS)]
        assert all(t.response == f"scripted answer to: {t.query}" for t in turns)
        if n % 2:
            for i, t in enumerate(turns):
                # the passages stored are the ones returned for that query in that session
                assert [p.id for p in t.passages] == returned[sid, i], (sid, i)


class _AsyncScriptedLLM(CustomLLM):
    """Answers with the user's last message, after yielding to the loop."""

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="scripted-async", is_chat_model=True)

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        raise AssertionError("sync path used under achat")

    def stream_complete(self, prompt: str, formatted: bool = False,
                        **kwargs: Any) -> CompletionResponseGen:
        raise AssertionError("sync path used under achat")

    async def achat(self, messages: Any, **kwargs: Any) -> ChatResponse:
        await asyncio.sleep(0.001)
        last = str(messages[-1].content).splitlines()[-1]
        return ChatResponse(message=ChatMessage(role="assistant", content=f"reply: {last}"))


async def test_llamaindex_achat_concurrent_sessions_one_loop() -> None:
    emb = HashingEmbedder(128)
    index = VectorStoreIndex(
        nodes=[TextNode(id_=f"fact-{i}", text=f) for i, f in enumerate(FACTS)],
        embed_model=DHRAGEmbedding(emb),
    )
    engine = DHRAGChatEngine.from_defaults(index.as_retriever(similarity_top_k=4),
                                           _AsyncScriptedLLM(), embedder=emb)

    async def conversation(n: int) -> None:
        sid = _sid(n)
        for i in range(ASYNC_TURNS):
            r = await engine.achat(_question(sid, i), session_id=sid)
            assert r.response == f"reply: {_question(sid, i)}"

    await asyncio.wait_for(
        asyncio.gather(*(conversation(n) for n in range(ASYNC_SESSIONS))), timeout=60
    )
    for n in range(ASYNC_SESSIONS):
        sid = _sid(n)
        history = engine.get_chat_history(sid)
        users = [str(m.content) for m in history if m.role == "user"]
        assert users == [_question(sid, i) for i in range(ASYNC_TURNS)], sid
        assistants = [str(m.content) for m in history if m.role == "assistant"]
        assert len(assistants) == ASYNC_TURNS and all(sid in a for a in assistants)
