"""Deleting a session removes it from every layer and changes no other session.

Layers: the store's rows (counted with ``sqlite3`` directly for the SQLite store), the
in-memory indexes, the topic clusters, summary nodes and chains of its tree, and every read
(``turns``, ``size``, ``search``, ``select``, ``stats``) -- of the
database that deleted it and of another database on the same store that had it cached.
Then the same through the adapters' clear/reset methods.
"""

from __future__ import annotations

import sqlite3
import time
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

from dhrag_core import (
    DHRAG,
    HashingEmbedder,
    HistoryDatabase,
    Limits,
    MemoryStore,
    Settings,
    SQLiteStore,
    Tree,
)
from langchain_dhrag import (
    DHRAGChatMessageHistory,
    DHRAGEmbeddings,
    DHRAGMemory,
    DHRAGRetriever,
)
from llamaindex_dhrag import DHRAGChatEngine, DHRAGEmbedding

N_SESSIONS = 30
TURNS = 12
WORDS = (
    "hay", "pig", "bond", "rate", "pod", "node", "visa", "form", "wall", "brick",
    "moon", "orbit", "tide", "salt",
)
QUERIES = ["hay and pig", "bond rate", "wall brick moon", "visa form"]


def _sid(n: int) -> str:
    return f"user{n:02d}"


class _Clock:
    def __init__(self, now: float = 1e6) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _fill(db: HistoryDatabase, clock: _Clock) -> None:
    for n in range(N_SESSIONS):
        sid = _sid(n)
        for i in range(TURNS):
            a, b = WORDS[(n + i) % len(WORDS)], WORDS[(3 * n + 2 * i) % len(WORDS)]
            db.add(sid,
                   f"{sid} asks about {a} and {b} ({i})",
                   f"{sid} answers {b} {i}",
                   passages=[f"{sid} passage on {a}"])
            clock.now += 7.0


def _snapshot(db: HistoryDatabase, sid: str) -> Any:
    """Everything a reader can see of one session."""
    searches = [[(h.turn.turn_id, round(h.weight, 6)) for h in db.search(sid, q, k=5)]
                for q in QUERIES]
    selected = [[s.turn.turn_id for s in db.select(sid, q)] for q in QUERIES]
    turns = [(t.turn_id, t.index, t.cluster_id, t.chain_id) for t in db.turns(sid)]
    stats = {k: v for k, v in db.stats(sid).items() if k != "comparisons"}  # a read counter
    return searches, selected, turns, stats


def _assert_gone(db: HistoryDatabase, sid: str) -> None:
    assert db.size(sid) == 0 and db.turns(sid) == []
    for q in [*QUERIES, f"{sid} asks about hay"]:
        assert db.search(sid, q, k=5) == []
        assert db.select(sid, q) == []
    stats = db.stats(sid)
    assert stats["turns"] == 0 and stats["clusters"] == 0
    assert stats["chains"]["chains"] == 0
    s = db._session(sid)
    assert len(s.queries) == 0 and not s.turns and s.latest is None
    tree = s.tree
    assert len(tree) == 0 and not tree.clusters.clusters and not tree.clusters.of
    assert not tree.chains.chains and not tree.chains.of
    assert tree.summary_nodes(list(range(1000))) == []


def _sqlite_rows(path: Path) -> dict[str, int]:
    con = sqlite3.connect(str(path))
    try:
        out: dict[str, int] = {}
        for table in ("dhrag_turns",):
            for sid, count in con.execute(
                f"SELECT session_id, COUNT(*) FROM {table} GROUP BY session_id"
            ):
                out[f"{table}:{sid}"] = count
        # the change log keeps no turn id of a deleted session (only a "deleted" marker)
        for sid, count in con.execute(
            "SELECT session_id, COUNT(*) FROM dhrag_log WHERE turn_id != '' GROUP BY session_id"
        ):
            out[f"dhrag_log:{sid}"] = count
        return out
    finally:
        con.close()


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_delete_one_session_of_thirty(backend: str, tmp_path: Path) -> None:
    emb = HashingEmbedder(128)
    path = tmp_path / "h.db"
    cfg = Settings(limits=Limits(capacity=10),
                   tree=Tree(min_tree_turns=4))  # evictions, and a tree that prunes
    shared = MemoryStore()

    def store() -> Any:
        return shared if backend == "memory" else SQLiteStore(path)

    clock = _Clock()
    db = HistoryDatabase(embedder=emb, store=store(), settings=cfg, clock=clock)
    _fill(db, clock)
    # another database (another process) with every session cached
    other = HistoryDatabase(embedder=emb, store=store(), settings=cfg, clock=clock)
    victims = [_sid(7), _sid(0), _sid(N_SESSIONS - 1)]
    for n in range(N_SESSIONS):
        other.turns(_sid(n))
    rows_before = _sqlite_rows(path) if backend == "sqlite" else {}

    for round_, victim in enumerate(victims):
        keep = [_sid(n) for n in range(N_SESSIONS) if _sid(n) not in victims[: round_ + 1]]
        # each database against itself: identical passages tie, and a tie's order follows
        # index slots, which differ between an incrementally built and a reloaded session
        before = {sid: _snapshot(other, sid) for sid in keep}
        before_db = {sid: _snapshot(db, sid) for sid in keep}
        assert db.size(victim) == cfg.limits.capacity
        db.delete_session(victim)
        _assert_gone(db, victim)
        _assert_gone(other, victim)
        _assert_gone(HistoryDatabase(embedder=emb, store=store(), settings=cfg), victim)
        if backend == "sqlite":
            rows = _sqlite_rows(path)
            assert not any(k.endswith(f":{victim}") for k in rows), rows
            gone = {f"{t}:{v}" for t in ("dhrag_turns", "dhrag_log") for v in victims[: round_ + 1]}
            assert rows == {k: v for k, v in rows_before.items() if k not in gone}
        else:
            assert victim not in shared.sessions()
        for sid in keep:  # no other session changed, for either database
            assert _snapshot(other, sid) == before[sid], sid
            assert _snapshot(db, sid) == before_db[sid], sid

    # a deleted session starts afresh: no ghost of its old turns, indexes from 0
    r = db.add(victims[0], "a brand new question about tides", "tides")
    assert r.turn.index == 0 and not r.merged and not r.evicted
    assert [t.turn_id for t in other.turns(victims[0])] == [r.turn.turn_id]
    db.close()
    other.close()


def test_deleting_an_unknown_or_empty_session_is_harmless(tmp_path: Path) -> None:
    db = HistoryDatabase(embedder=HashingEmbedder(64), store=SQLiteStore(tmp_path / "h.db"))
    db.add("alice", "hello there", "hi")
    db.delete_session("nobody")
    db.delete_session("nobody")
    db.delete_session("alice")
    db.delete_session("alice")
    _assert_gone(db, "alice")
    _assert_gone(db, "nobody")
    db.close()


# -- through the adapters --------------------------------------------------------------------

FACTS = [f"Fact {i}: the {w} matters." for i, w in enumerate(WORDS)]


def _langchain_engine() -> DHRAG:
    emb = HashingEmbedder(128)
    vs = InMemoryVectorStore(DHRAGEmbeddings(emb))
    vs.add_documents([Document(f, id=f"fact-{i}") for i, f in enumerate(FACTS)])
    return DHRAGRetriever.from_knowledge(vs, embedder=emb, k=3).engine


def test_langchain_reset_and_clear_forget_one_session_only() -> None:
    engine = _langchain_engine()
    retriever = DHRAGRetriever(engine=engine, k=3)
    sids = [_sid(n) for n in range(6)]
    for sid in sids:
        for i in range(4):
            q = f"{sid} asks about the {WORDS[i]}"
            retriever.invoke(q, session_id=sid)
            retriever.record(sid, q, f"{sid} answer {i}")
    engine.history.clock = _Clock(time.time() + 60)  # frozen: weights must not drift
    before = {sid: _snapshot(engine.history, sid) for sid in sids}

    # the retriever: reset one session, also dropping its pending selection
    retriever.invoke(f"{sids[0]} pending question", session_id=sids[0])
    retriever.reset(sids[0])
    _assert_gone(engine.history, sids[0])
    retriever.record(sids[0], f"{sids[0]} pending question", "late answer")
    (late,) = engine.history.turns(sids[0])
    assert late.passages == (), "a selection made before reset leaked into the new history"

    # classic memory and chat message history: clear
    memory = DHRAGMemory(engine=engine, session_id=sids[1])
    memory.clear()
    _assert_gone(engine.history, sids[1])
    chat = DHRAGChatMessageHistory(engine=engine, session_id=sids[2])
    assert len(chat.messages) == 8
    chat.clear()
    assert chat.messages == []
    _assert_gone(engine.history, sids[2])
    for sid in sids[3:]:
        assert _snapshot(engine.history, sid) == before[sid], sid


async def test_langchain_aclear_in_a_running_loop() -> None:
    engine = _langchain_engine()
    memory = DHRAGMemory(engine=engine, session_id="alice", input_key="input")
    await memory.asave_context({"input": "alice asks about hay"}, {"output": "hay is grass"})
    engine.record("bob", "bob asks about bonds", "bonds pay")
    await memory.aclear()
    _assert_gone(engine.history, "alice")
    assert engine.history.size("bob") == 1


class _EchoLLM(CustomLLM):
    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="echo", is_chat_model=True)

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text="echo")

    def stream_complete(self, prompt: str, formatted: bool = False,
                        **kwargs: Any) -> CompletionResponseGen:
        raise NotImplementedError

    def chat(self, messages: Any, **kwargs: Any) -> ChatResponse:
        last = str(messages[-1].content).splitlines()[-1]
        return ChatResponse(message=ChatMessage(role="assistant", content=f"echo {last}"))


def test_llamaindex_reset_forgets_one_session_only() -> None:
    emb = HashingEmbedder(128)
    index = VectorStoreIndex(nodes=[TextNode(id_=f"fact-{i}", text=f)
                                    for i, f in enumerate(FACTS)],
                             embed_model=DHRAGEmbedding(emb))
    engine = DHRAGChatEngine.from_defaults(index.as_retriever(similarity_top_k=3), _EchoLLM(),
                                           embedder=emb, session_id=_sid(0))
    sids = [_sid(n) for n in range(5)]
    for sid in sids:
        for i in range(3):
            engine.chat(f"{sid} asks about the {WORDS[i]}", session_id=sid)
    history = engine.engine.history
    history.clock = _Clock(time.time() + 60)  # frozen: weights must not drift with the wall clock
    before = {sid: _snapshot(history, sid) for sid in sids}
    engine.reset(sids[3])
    _assert_gone(history, sids[3])
    assert engine.get_chat_history(sids[3]) == []
    engine.reset()  # the engine's own session
    _assert_gone(history, sids[0])
    for sid in (sids[1], sids[2], sids[4]):
        assert _snapshot(history, sid) == before[sid], sid
