"""The SQLite store against hostile files: a full disk, another application's database, a
read-only file, a directory (issue 18, items 5, 6 and 8).

Each must give an error naming the file and the cause, change nothing that was committed, and
leave a file that is not ours exactly as it was.
"""

from __future__ import annotations

import hashlib
import io
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from dhrag_core import (
    DHRAG,
    FaissKnowledgeBase,
    HashingEmbedder,
    HistoryDatabase,
    SQLiteStore,
    StoreUnavailableError,
)
from dhrag_core.app.chat import ChatSession
from dhrag_core.app.chat_cli import chat_loop
from dhrag_core.store import CorruptStoreError

REPO = Path(__file__).resolve().parents[2]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def seeded(path: Path, turns: int = 3) -> HistoryDatabase:
    db = HistoryDatabase(embedder=HashingEmbedder(64), store=f"sqlite:///{path}")
    for i in range(turns):
        db.add("s", f"question {i} about walls", f"answer {i}", passages=[f"passage {i}"])
    return db


# -- 5. a full disk ------------------------------------------------------------------------


def fill_up(store: SQLiteStore) -> None:
    """Let the connection grow the file by a few pages only: SQLITE_FULL, as on a full disk."""
    pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
    store._conn.execute(f"PRAGMA max_page_count={pages + 2}")


def test_a_full_disk_is_a_store_error_naming_file_and_cause(tmp_path: Path) -> None:
    path = tmp_path / "full.db"
    db = seeded(path)
    before = [(t.turn_id, t.query) for t in db.turns("s")]
    assert isinstance(db.store, SQLiteStore)
    fill_up(db.store)
    with pytest.raises(StoreUnavailableError) as info:
        for i in range(50):
            db.add("s", f"a long question {i}", "y" * 20_000, passages=["x" * 20_000] * 4)
    msg = str(info.value)
    assert str(path) in msg and "full" in msg, msg
    assert "cannot rollback" not in msg
    assert isinstance(info.value, ConnectionError)  # an OSError: the CLI's error path
    db.close()
    again = HistoryDatabase(embedder=HashingEmbedder(64), store=f"sqlite:///{path}")
    assert [(t.turn_id, t.query) for t in again.turns("s")][: len(before)] == before
    assert again.store.integrity_check() == "ok"  # type: ignore[attr-defined]
    again.close()


def test_the_chat_says_the_disk_is_full_and_goes_on(tmp_path: Path) -> None:
    emb = HashingEmbedder(64)
    path = tmp_path / "chat.db"
    kb = FaissKnowledgeBase(["The Great Wall is 21,196 km long. " * 300], emb)
    rag = DHRAG(kb, embedder=emb, store=f"sqlite:///{path}")
    session = ChatSession(rag, "s", store_url=f"sqlite:///{path}")
    session.ask("How long is the Great Wall?")
    assert isinstance(rag.history.store, SQLiteStore)
    fill_up(rag.history.store)
    questions = "".join(f"Tell me more about the wall, part {i}?\n" for i in range(30))
    out = io.StringIO()
    assert chat_loop(session, io.StringIO(questions + "/save\n/reset\n/trace\n"), out) == 0
    text = out.getvalue()
    assert "error: SQLite store" in text and "full" in text and str(path) in text
    assert text.rstrip().endswith("bye") and "continue it with" in text
    rag.history.close()


# -- 6. another application's database -----------------------------------------------------


def foreign(path: Path, meta_columns: str | None = None) -> str:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO users VALUES (1, 'ada')")
    if meta_columns is not None:
        conn.execute(f"CREATE TABLE dhrag_meta ({meta_columns})")
    conn.commit()
    conn.close()
    return digest(path)


@pytest.mark.parametrize("meta", [None, "a TEXT, b TEXT, c INTEGER"])
def test_another_applications_file_is_refused_and_left_unchanged(
    tmp_path: Path, meta: str | None
) -> None:
    path = tmp_path / "app.db"
    before = foreign(path, meta)
    with pytest.raises(CorruptStoreError, match="not a dhrag history store") as info:
        SQLiteStore(path)
    assert str(path) in str(info.value) and "users" in str(info.value)
    assert digest(path) == before
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # not switched to WAL
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert not {t for t in tables if t.startswith("dhrag_") and t != "dhrag_meta"}
    conn.close()
    assert not path.with_name("app.db-wal").exists()


def test_an_empty_file_becomes_a_store(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    path.touch()
    store = SQLiteStore(path)
    assert store.sessions() == []
    store.close()


# -- 8. read-only files and directories ----------------------------------------------------


def test_a_read_only_store_opens_for_reading(tmp_path: Path) -> None:
    path = tmp_path / "ro.db"
    seeded(path).close()
    before = digest(path)
    db = HistoryDatabase(embedder=HashingEmbedder(64),
                         store=SQLiteStore(path, read_only=True))
    assert db.turns("s")[0].query == "question 0 about walls"
    assert db.select("s", "walls")
    with pytest.raises(PermissionError, match=f"{path}.*read-only"):
        db.add("s", "one more?", "no")
    with pytest.raises(PermissionError, match="read-only"):
        db.delete_session("s")
    assert len(db.turns("s")) == 3
    db.close()
    assert digest(path) == before


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                    reason="root writes to read-only files anyway")
def test_a_file_without_write_permission_opens_read_only(tmp_path: Path) -> None:
    path = tmp_path / "ro.db"
    seeded(path).close()
    path.chmod(0o444)
    store = SQLiteStore(path)
    assert store.read_only and store.load("s")[1] > 0
    store.close()


def test_not_writable_is_detected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a non-root user sees for a 0444 file (root may write anyway)."""
    path = tmp_path / "ro.db"
    seeded(path).close()
    real = os.access
    monkeypatch.setattr("dhrag_core.store.sqlite.os.access",
                        lambda p, mode: False if mode == os.W_OK else real(p, mode))
    store = SQLiteStore(path)
    assert store.read_only and len(store.load("s")[0]) == 3
    store.close()


def test_a_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(IsADirectoryError, match=f"{tmp_path} is a directory; pass a file"):
        SQLiteStore(tmp_path)
    env = {**os.environ, "DHRAG_CACHE": str(tmp_path / "cache"),
           "XDG_DATA_HOME": str(tmp_path / "data")}
    kb = tmp_path / "kb.txt"
    kb.write_text("The Great Wall is long.", encoding="utf-8")
    for args in (["chat", "--embedder", "hashing", "--kb", str(kb)], ["demo"]):
        proc = subprocess.run([sys.executable, "-m", "dhrag_core.app.cli", *args, "--store",
                               f"sqlite:///{tmp_path}"], capture_output=True, text=True,
                              cwd=REPO, env=env, timeout=120, stdin=subprocess.DEVNULL)
        assert proc.returncode == 2, proc.stderr
        assert "is a directory" in proc.stderr and "Traceback" not in proc.stderr
