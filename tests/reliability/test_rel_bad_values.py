"""Bad values from every side, as a user meets them (found by the outside attack of issue 41): a
damaged knowledge-base vector, a context larger than a turn can store, a timestamp no date can
be made of, session ids that forge or hide lines, and an embedder returning the wrong thing.
Each test failed before its fix."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dhrag_core import (
    DHRAG,
    Ablations,
    FaissKnowledgeBase,
    HashingEmbedder,
    HistoryDatabase,
    Passage,
    Retrieval,
    Settings,
    SQLiteStore,
)
from dhrag_core.app.chat_cli import run_chat
from dhrag_core.app.cli import build_parser, run_sessions

WALLS = [f"The wall number {i} is {i * 10} km long and built of stone." for i in range(80)]


class DamagedKB:
    """A knowledge base whose first passage comes back with a NaN in its vector."""

    def __init__(self, inner: FaissKnowledgeBase) -> None:
        self.inner = inner
        self.embedder = inner.embedder

    def search(self, query: str, k: int) -> list[Passage]:
        return self.inner.search(query, k)

    def search_vectors(self, vectors: np.ndarray, k: int) -> list[list[Passage]]:
        rows = self.inner.search_vectors(vectors, k)
        out = []
        for row in rows:
            bad = np.array(row[0].vector, dtype=np.float32)
            bad[3] = np.nan
            out.append([replace(row[0], vector=bad), *row[1:]])
        return out


def test_a_nan_passage_vector_is_re_encoded_and_the_turn_kept() -> None:
    emb = HashingEmbedder()
    rag = DHRAG(DamagedKB(FaissKnowledgeBase(WALLS[:10], emb)), embedder=emb)
    sel = rag.select("s", "How long is wall number 3?")
    assert all(np.isfinite(c.weight) for c in sel.context)
    assert all(np.isfinite(p.vector).all() for p in sel.passages if p.vector is not None)
    rag.record("s", sel.query, "30 km.")
    turns = rag.history.turns("s")
    assert len(turns) == 1 and len(turns[0].passages) == len(sel.passages)


def test_a_context_above_max_passages_is_refused_or_capped(tmp_path: Path,
                                                           capsys: Any) -> None:
    with pytest.raises(ValueError, match="max_passages"):
        Settings(retrieval=Retrieval(context_k=60, kb_k=80))
    emb = HashingEmbedder()
    rag = DHRAG(FaissKnowledgeBase(WALLS, emb), embedder=emb,
                settings=Settings(retrieval=Retrieval(kb_k=80)))
    sel = rag.select("s", "Which wall is built of stone?", k=60)
    assert len(sel.passages) == 60
    rag.record("s", sel.query, "All of them.")
    stored = rag.history.turns("s")[0].passages
    assert [p.key for p in stored] == [p.key for p in sel.passages[:50]]  # the best 50
    args = build_parser().parse_args(["chat", "--kb", str(tmp_path), "--embedder", "hashing",
                                      "--store", "memory", "--k", "60"])
    assert run_chat(args, io.StringIO("hello\n"), io.StringIO()) == 2
    assert "max_passages" in capsys.readouterr().err


@pytest.mark.parametrize("when", [1e20, 3e11, -1e13])
def test_a_timestamp_no_date_can_be_made_of_is_refused(when: float, tmp_path: Path) -> None:
    db = HistoryDatabase(embedder=HashingEmbedder(), store=f"sqlite:///{tmp_path / 'h.db'}")
    db.add("s", "kept", "a", timestamp=1_700_000_000.0)
    with pytest.raises(ValueError, match="between the years 1 and 9999"):
        db.add("s", "q", "a", timestamp=when)
    assert [t.query for t in db.turns("s")] == ["kept"]
    db.close()
    args = build_parser().parse_args(["sessions", "--store", f"sqlite:///{tmp_path / 'h.db'}"])
    out = io.StringIO()
    assert run_sessions(args, out) == 0 and "1 turn" in out.getvalue()


def test_session_ids_that_forge_or_hide_lines_are_escaped(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    db = HistoryDatabase(embedder=HashingEmbedder(), store=url)
    composed, decomposed = "caf\u00e9", "cafe\u0301"
    for sid in ("alice", "bob\n  mallory: 99 turns", composed, decomposed):
        db.add(sid, "q", "a")
    db.close()
    out = io.StringIO()
    assert run_sessions(build_parser().parse_args(["sessions", "--store", url]), out) == 0
    lines = out.getvalue().splitlines()
    assert len(lines) == 5  # the header and one line per session: no forged line
    assert any(line.startswith("  alice: ") for line in lines)
    assert any("'bob\\n  mallory: 99 turns'" in line for line in lines)
    assert any(line.startswith(f"  {composed}: ") for line in lines)
    assert any("'cafe\\u0301'" in line for line in lines)


class WrongEmbedder:
    """Returns one vector too few, or a list of strings."""

    dimension = 8

    def __init__(self, how: str) -> None:
        self.how = how

    def encode(self, texts: list[str]) -> Any:
        if self.how == "short":
            return np.ones((max(len(texts) - 1, 0), 8), np.float32)
        if self.how == "wide":
            return np.ones((len(texts), 9), np.float32)
        return [["x"] * 8 for _ in texts]


@pytest.mark.parametrize("how", ["short", "wide", "strings"])
def test_an_embedder_returning_the_wrong_thing_is_named(how: str) -> None:
    db = HistoryDatabase(embedder=WrongEmbedder(how),
                         settings=Settings(ablations=Ablations(calibrate=False)))
    with pytest.raises(TypeError, match=r"WrongEmbedder\.encode\(texts\)"):
        db.add("s", "a question", "an answer")
    with pytest.raises(TypeError, match=r"WrongEmbedder\.encode\(texts\)"):
        FaissKnowledgeBase(["one", "two"], WrongEmbedder(how))
    assert db.size("s") == 0


@pytest.mark.parametrize("bad", ["nul \x00 in it", "lone \ud800 surrogate", "x" * 1_000_001])
def test_an_unclean_chat_history_message_is_stored_cleaned(bad: str) -> None:
    """``chat_history=`` replaces the stored turns (warned); an answer in it that cannot be
    stored as given is stored cleaned, and the new turn is kept."""
    from llama_index.core.base.llms.types import ChatMessage, MessageRole
    from llama_index.core.llms import MockLLM

    from llamaindex_dhrag import DHRAGChatEngine

    emb = HashingEmbedder()
    engine = DHRAGChatEngine(DHRAG(FaissKnowledgeBase(WALLS[:10], emb), embedder=emb),
                             MockLLM(max_tokens=4), session_id="s")
    for q in ("How long is wall 1?", "And wall 2?", "Which is built of stone?"):
        engine.chat(q)
    history = [ChatMessage(role=MessageRole.USER, content="hello"),
               ChatMessage(role=MessageRole.ASSISTANT, content=bad)]
    with pytest.warns(UserWarning, match="replaced the 3 stored turn"):
        engine.chat("And wall 3?", chat_history=history)
    turns = engine.engine.history.turns("s")
    assert [t.query for t in turns] == ["hello", "And wall 3?"]
    assert "\x00" not in turns[0].response and len(turns[0].response) <= 1_000_000
    assert "dhrag_cleaned" in turns[0].metadata


def test_a_batch_of_one_sessions_questions_records_each_ones_passages() -> None:
    from langchain_core.language_models import FakeListChatModel
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import RunnablePassthrough

    from langchain_dhrag import DHRAGRetriever, format_documents, with_dhrag_memory

    retriever = DHRAGRetriever.from_knowledge(WALLS[:20], embedder=HashingEmbedder(), k=2)
    prompt = ChatPromptTemplate.from_messages([("system", "{context}"), ("human", "{question}")])
    chain = ({"context": retriever | format_documents, "question": RunnablePassthrough()}
             | prompt | FakeListChatModel(responses=["ok"] * 8) | StrOutputParser())
    chat = with_dhrag_memory(chain, retriever)
    cfg: Any = {"configurable": {"session_id": "alice"}}
    questions = [f"How long is wall number {i}?" for i in (1, 2, 3, 4)]
    chat.batch(questions, cfg)
    turns = retriever.engine.history.turns("alice")
    assert sorted(t.query for t in turns) == sorted(questions)
    assert [len(t.passages) for t in turns] == [2, 2, 2, 2]
    assert retriever.engine.pending("alice") is None


def test_a_huge_passage_metadata_field_is_not_copied_into_every_turn(tmp_path: Path) -> None:
    emb = HashingEmbedder()
    passages = [Passage(t, id=str(i), metadata={"source": f"doc{i}", "raw": "x" * 5_000_000})
                for i, t in enumerate(WALLS[:5])]
    path = tmp_path / "h.db"
    rag = DHRAG(FaissKnowledgeBase(passages, emb), embedder=emb, store=f"sqlite:///{path}")
    for i in range(5):
        sel = rag.select("s", f"How long is wall number {i}?")
        rag.record("s", sel.query, f"It is {i * 10} km long.", selection=sel)
    stored = rag.history.turns("s")
    assert len(stored) == 5 and all(len(t.passages) == 5 for t in stored)
    meta = stored[0].passages[0].metadata
    assert "raw" not in meta and meta["source"].startswith("doc")
    assert "'raw'" in meta["dhrag_cleaned"]
    rag.history.close()
    assert path.stat().st_size < 2_000_000


class HostileLLM:
    """An LLM server whose error text holds terminal escape sequences."""

    def complete(self, messages: Any, **kwargs: Any) -> str:
        from dhrag_core.llm import LLMError

        raise LLMError("502 from server: \x1b]0;pwned\x07\x1b[2J gone")

    async def acomplete(self, messages: Any, **kwargs: Any) -> str:
        return self.complete(messages)


def test_an_llm_servers_escape_sequences_never_reach_the_log(caplog: Any) -> None:
    from dhrag_core import LLMRewriter
    from dhrag_core.app.chat import ChatSession

    emb = HashingEmbedder()
    rag = DHRAG(FaissKnowledgeBase(WALLS[:10], emb), embedder=emb,
                rewriter=LLMRewriter(HostileLLM()))
    session = ChatSession(rag, "s", llm=HostileLLM())  # type: ignore[arg-type]
    with caplog.at_level("WARNING"):
        session.ask("How long is wall number 3?")
        session.ask("And how long is it?")
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "pwned" in text and "\x1b" not in text and "\x07" not in text


def test_base64_style_passwords_never_show() -> None:
    """Passwords holding URL delimiters (/ = + # ? & ; :), unencoded as users paste them:
    masked in repr and in the error of a store that cannot be reached, whatever libpq made
    of the URL."""
    import random
    import string

    from dhrag_core.store import PostgresStore, StoreUnavailableError, redact_dsn

    rng = random.Random(7)
    chars = string.ascii_letters + string.digits + "+/=#?&;:"
    for i in range(300):
        pw = "".join(rng.choice(chars) for _ in range(rng.randint(8, 24)))
        url = f"postgresql://bob:{pw}@127.0.0.1:1/dhrag"
        assert redact_dsn(url) == "postgresql://bob:***@127.0.0.1:1/dhrag", pw
        store = PostgresStore(url, timeout=1)
        assert pw not in repr(store)
        if i % 10:
            continue
        with pytest.raises(StoreUnavailableError) as err:
            store.sessions()
        message = str(err.value)
        leaked = [pw[j:j + 4] for j in range(len(pw) - 3) if pw[j:j + 4] in message
                  and pw[j:j + 4] not in "postgresql://bob:***@127.0.0.1:1/dhrag"]
        assert not leaked, (pw, message)


def test_llm_credentials_never_reach_the_log_or_the_error(caplog: Any) -> None:
    """A server answering 401 with the Basic credentials echoed; the client logging each
    request at INFO (as ``dhrag chat -v`` or any application at INFO does)."""
    import http.server
    import threading

    from dhrag_core import OpenAICompatibleLLM
    from dhrag_core.llm import LLMError

    class Refuse(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = f'{{"error": "bad credentials {self.headers.get("Authorization")}"}}'.encode()
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Refuse)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://alice:s3cretPW@127.0.0.1:{server.server_port}/v1?api_key=KEY12345678"
        llm = OpenAICompatibleLLM(base_url=url, model="m", api_key="sk-ABCDEFGH1234",
                                  max_retries=0, timeout=5)
        with caplog.at_level("DEBUG"), pytest.raises(LLMError) as err:
            llm.complete([{"role": "user", "content": "hi"}])
    finally:
        server.shutdown()
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "HTTP Request" in logged  # the client did log the request
    for shown in (logged, str(err.value)):
        for secret in ("s3cretPW", "KEY12345678", "sk-ABCDEFGH1234", "YWxpY2U6czNjcmV0UFc"):
            assert secret not in shown, (secret, shown)


@pytest.mark.parametrize(("table", "column", "where"), [
    ("dhrag_sessions", "version", "session_id = 's'"),
    ("dhrag_meta", "value", "key = 'schema_version'"),
])
def test_a_non_integer_version_is_a_corrupt_store_naming_the_file(
        tmp_path: Path, table: str, column: str, where: str) -> None:
    import sqlite3

    from dhrag_core.store import CorruptStoreError

    path = tmp_path / "h.db"
    db = HistoryDatabase(embedder=HashingEmbedder(), store=f"sqlite:///{path}")
    db.add("s", "q", "a")
    db.close()
    with sqlite3.connect(path) as conn:
        conn.execute(f"UPDATE {table} SET {column} = 'x1' WHERE {where}")
    with pytest.raises(CorruptStoreError, match=str(path)):
        again = HistoryDatabase(embedder=HashingEmbedder(), store=f"sqlite:///{path}")
        again.turns("s")


CLOSE_SCRIPT = """
import sys
from dhrag_core import DHRAG, FaissKnowledgeBase, HashingEmbedder
from langchain_dhrag import DHRAGRetriever
from llamaindex_dhrag import DHRAGChatEngine
from llama_index.core.llms import MockLLM
emb = HashingEmbedder()
kb = FaissKnowledgeBase(["The wall is 21,196 km long.", "Guinea pigs sleep in burrows."], emb)
q = "How long is the wall?"
with DHRAG(kb, embedder=emb, store=sys.argv[1]) as rag:
    rag.record("core", q, "21,196 km.", selection=rag.select("core", q))
with DHRAGRetriever(engine=DHRAG(kb, embedder=emb, store=sys.argv[1]), session_id="lc") as r:
    r.invoke("How long is the wall?")
llm = MockLLM(max_tokens=4)
with DHRAGChatEngine(DHRAG(kb, embedder=emb, store=sys.argv[1]), llm, session_id="li") as e:
    e.chat("How long is the wall?")
print("closed", rag.history.store._closed, r.engine.history.store._closed,
      e.engine.history.store._closed)
"""


def test_close_releases_postgres_pools_without_warnings(postgres_dsn: str) -> None:
    import subprocess
    import sys

    for _ in range(6):
        done = subprocess.run([sys.executable, "-c", CLOSE_SCRIPT, postgres_dsn],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "closed True True True" in done.stdout
        assert "Exception ignored" not in done.stderr, done.stderr


def test_a_latin1_postgres_database_is_refused_with_a_clear_error(postgres_dsn: str) -> None:
    import psycopg

    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS dhrag_latin1")
        conn.execute("CREATE DATABASE dhrag_latin1 ENCODING 'LATIN1' LC_COLLATE 'C' "
                     "LC_CTYPE 'C' TEMPLATE template0")
    base, _, _ = postgres_dsn.rpartition("/")
    db = HistoryDatabase(embedder=HashingEmbedder(), store=f"{base}/dhrag_latin1")
    with pytest.raises(ValueError, match="encoding is LATIN1"):
        db.add("s", "Do you like it? \U0001F600", "yes")
    db.close()


def test_postgres_roles_without_rights_get_a_permission_error(postgres_dsn: str,
                                                              capsys: Any) -> None:
    """A role without CREATE on the schema (the default for non-owners since PostgreSQL
    15), and a SELECT-only role: a PermissionError naming the store, for the API and the
    CLI, never a driver traceback."""
    import psycopg

    base, _, _ = postgres_dsn.rpartition("/")
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS dhrag_rights")
        conn.execute("CREATE DATABASE dhrag_rights")
        for role in ("dhrag_nocreate", "dhrag_reader"):
            conn.execute(f"DROP ROLE IF EXISTS {role}")
            conn.execute(f"CREATE ROLE {role} LOGIN")
    owner = f"{base}/dhrag_rights"
    with psycopg.connect(owner, autocommit=True) as conn:
        conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
    scheme, _, rest = base.partition("://")
    host = rest.rpartition("@")[2]
    nocreate = f"{scheme}://dhrag_nocreate@{host}/dhrag_rights"
    db = HistoryDatabase(embedder=HashingEmbedder(), store=nocreate)
    with pytest.raises(PermissionError, match="permission denied"):
        db.add("s", "q", "a")
    db.close()
    # the reader: tables exist (made by the owner), SELECT only
    seeded = HistoryDatabase(embedder=HashingEmbedder(), store=owner)
    seeded.add("s", "q", "a")
    seeded.close()
    with psycopg.connect(owner, autocommit=True) as conn:
        conn.execute("GRANT SELECT ON ALL TABLES IN SCHEMA public TO dhrag_reader")
    reader = f"{scheme}://dhrag_reader@{host}/dhrag_rights"
    db = HistoryDatabase(embedder=HashingEmbedder(), store=reader)
    assert db.size("s") == 1
    with pytest.raises(PermissionError, match="dhrag_reader"):
        db.add("s", "another", "b")
    db.close()
    args = build_parser().parse_args(["sessions", "--store", reader, "--delete", "s"])
    assert run_sessions(args, io.StringIO()) == 2
    assert "permission denied" in capsys.readouterr().err


def test_a_new_sqlite_history_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    """The default chat.db holds a user's conversations: created 0600 (its -wal too), in a
    folder created 0700; an existing file keeps the permissions its owner gave it."""
    path = tmp_path / "new" / "dhrag" / "chat.db"
    with SQLiteStore(path) as store:
        HistoryDatabase(embedder=HashingEmbedder(dimension=32), store=store).add("s",
                                                                                 "question",
                                                                                 "answer",
                                                                                 passages=["passage"])
        assert (path.stat().st_mode & 0o777) == 0o600
        wal = path.with_name("chat.db-wal")
        assert wal.exists() and (wal.stat().st_mode & 0o777) == 0o600
    assert (path.parent.stat().st_mode & 0o777) == 0o700
    shared = tmp_path / "shared.db"
    shared.touch(mode=0o644)
    shared.chmod(0o644)
    SQLiteStore(shared).close()
    assert (shared.stat().st_mode & 0o777) == 0o644


@pytest.mark.parametrize("wait_first", [False, True])
def test_a_retried_cancelled_arecord_stores_the_turn_once(wait_first: bool) -> None:
    """``arecord`` runs in a worker thread that a cancel cannot stop: the turn may still be
    stored after the caller saw ``CancelledError``. Retrying the same turn (before or after
    that thread finished) leaves one stored turn with its passages, not a duplicate."""
    import asyncio
    import time

    emb = HashingEmbedder()
    rag = DHRAG(FaissKnowledgeBase(WALLS[:10], emb), embedder=emb)
    question = "How long is wall number 3?"

    def stored() -> list[Any]:
        return [t for t in rag.history.turns("s") if t.query == question]

    async def run() -> list[str]:
        rag.record("s", "What is wall number 1 made of?", "Stone.")
        sel = rag.select("s", question)
        task = asyncio.create_task(rag.arecord("s", question, "30 km.", selection=sel))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        if wait_first:
            while not stored():
                await asyncio.sleep(0.01)
        await rag.arecord("s", question, "30 km.", selection=sel)
        return [p.key for p in sel.passages]

    shown = asyncio.run(run())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and stored()[0].merges == 0:
        time.sleep(0.01)  # the cancelled call's thread may still be writing
    turns = stored()
    assert len(turns) == 1 and turns[0].merges == 1 and turns[0].response == "30 km."
    assert [p.key for p in turns[0].passages] == shown
    assert rag.history.size("s") == 2
