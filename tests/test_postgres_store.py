"""PostgreSQL-specific behaviour: configuration errors, outages and restarts, schema set-up."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from pg_support import TABLES, start_server

from dhrag_core import (
    HashingEmbedder,
    HistoryDatabase,
    Limits,
    PostgresStore,
    Settings,
    StoreUnavailableError,
    open_store,
)
from dhrag_core.store.postgres import SCHEMA_VERSION, redact_dsn
from dhrag_core.testing import TempPostgres


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_redact_dsn() -> None:
    assert redact_dsn("postgresql://bob:s3cr%40t@db.example:5433/h?sslmode=require") == (
        "postgresql://bob:***@db.example:5433/h?sslmode=require"
    )
    assert "hunter2" not in redact_dsn("postgres://bob@h/db?password=hunter2&sslmode=disable")
    assert redact_dsn("host=h port=5 password='a b' user=u") == "host=h port=5 password=*** user=u"
    assert redact_dsn("host=h password=x") == "host=h password=***"
    assert redact_dsn("postgresql://h/db") == "postgresql://h/db"


HARD_PASSWORDS = ["pa#ss", "pa?ss", "a#b?c/d", "x@y#z", "s3cr%23t?"]


@pytest.mark.parametrize("secret", HARD_PASSWORDS)
def test_redact_dsn_hides_passwords_with_url_delimiters(secret: str) -> None:
    """``#`` and ``?`` are valid in a libpq password; urlsplit cut the URL there first."""
    dsn = f"postgresql://bob:{secret}@db.example:5433/h?sslmode=require"
    assert redact_dsn(dsn) == "postgresql://bob:***@db.example:5433/h?sslmode=require"
    assert secret not in redact_dsn(f"postgres://bob@h/db?password={secret}")
    assert secret not in repr(PostgresStore(dsn))


@pytest.mark.parametrize("secret", HARD_PASSWORDS)
def test_unavailable_error_hides_passwords_with_url_delimiters(secret: str) -> None:
    dsn = f"postgresql://bob:{secret}@127.0.0.1:{closed_port()}/nowhere"
    with pytest.raises(StoreUnavailableError) as info:
        PostgresStore(dsn, timeout=2).version("s")
    assert secret not in str(info.value) and "bob:***@127.0.0.1" in str(info.value)


@pytest.mark.parametrize("command", ["chat", "demo"])
def test_cli_store_errors_hide_the_password(command: str, tmp_path: Path) -> None:
    kb = tmp_path / "kb.txt"
    kb.write_text("The Great Wall is long.", encoding="utf-8")
    extra = ["--embedder", "hashing", "--kb", str(kb)] if command == "chat" else []
    dsn = f"postgresql://bob:top#se?cret@127.0.0.1:{closed_port()}/db"
    proc = subprocess.run([sys.executable, "-m", "dhrag_core.app.cli", command, *extra,
                           "--store", dsn], capture_output=True, text=True, timeout=120,
                          check=False, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, proc.stderr
    assert "top#se?cret" not in proc.stdout + proc.stderr and "se?cret" not in proc.stderr
    assert "bob:***@127.0.0.1" in proc.stderr and "Traceback" not in proc.stderr


def test_dsn_is_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DHRAG_POSTGRES_DSN", raising=False)
    with pytest.raises(ValueError, match="DHRAG_POSTGRES_DSN"):
        PostgresStore()
    monkeypatch.setenv("DHRAG_POSTGRES_DSN", "postgresql://u:pw@127.0.0.1:1/x")
    assert "pw" not in repr(PostgresStore())


def test_missing_driver_names_the_extra() -> None:
    code = ("import sys; sys.modules['psycopg'] = None\n"
            "import dhrag_core\n"
            "try:\n    dhrag_core.PostgresStore('postgresql://h/db')\n"
            "except ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert "pip install dhrag[postgres]" in out


def test_bad_dsn_names_host_and_port_not_password() -> None:
    port = closed_port()
    store = open_store(f"postgresql://bob:topsecret@127.0.0.1:{port}/nowhere")
    with pytest.raises(StoreUnavailableError) as info:
        store.load("s")
    msg = str(info.value)
    assert f"127.0.0.1:{port}" in msg and "topsecret" not in msg and "***" in msg
    assert isinstance(info.value, RuntimeError) and isinstance(info.value, ConnectionError)
    store.close()
    with pytest.raises(StoreUnavailableError) as info:
        PostgresStore("postgresql://bob:topsecret@127.0.0.1:notaport/db").version("s")
    assert "notaport" in str(info.value) and "topsecret" not in str(info.value)


def test_wrong_database_is_a_clear_error(postgres_dsn: str) -> None:
    bad = postgres_dsn.rsplit("/", 1)[0] + "/no_such_db"
    with pytest.raises(StoreUnavailableError, match="no_such_db"):
        PostgresStore(bad).version("s")


def test_open_store_accepts_both_schemes(clean_postgres_dsn: str) -> None:
    for url in (clean_postgres_dsn, clean_postgres_dsn.replace("postgresql://", "postgres://")):
        store = open_store(url)
        assert isinstance(store, PostgresStore) and store.version("x") == 0
        store.close()


def test_newer_schema_is_refused(clean_postgres_dsn: str) -> None:
    import psycopg

    PostgresStore(clean_postgres_dsn).close()
    store = PostgresStore(clean_postgres_dsn)
    store.version("s")
    store.close()
    with psycopg.connect(clean_postgres_dsn, autocommit=True) as conn:
        conn.execute("UPDATE dhrag_meta SET value = %s WHERE key = 'schema_version'",
                     (str(SCHEMA_VERSION + 1),))
    with pytest.raises(RuntimeError, match="newer than this dhrag"):
        PostgresStore(clean_postgres_dsn).version("s")
    with psycopg.connect(clean_postgres_dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {TABLES}")


def test_schema_created_by_many_processes_at_once(clean_postgres_dsn: str) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def first_use() -> None:
        store = PostgresStore(clean_postgres_dsn)
        try:
            barrier.wait()
            store.apply("s")
        except BaseException as exc:
            errors.append(exc)
        finally:
            store.close()

    threads = [threading.Thread(target=first_use) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    store = PostgresStore(clean_postgres_dsn)
    assert store.version("s") == 8
    store.close()


@pytest.fixture
def own_server() -> Iterator[TempPostgres]:
    """A server of this test's own, which it may stop and restart."""
    pg = start_server()
    yield pg
    pg.stop()


def test_server_restart_and_outage_lose_nothing(own_server: TempPostgres) -> None:
    import psycopg

    clock = iter(range(10**6, 10**7))
    db = HistoryDatabase(embedder=HashingEmbedder(dimension=64),
                         store=PostgresStore(own_server.dsn, min_size=2, timeout=10),
                         settings=Settings(limits=Limits(capacity=100)),
                         clock=lambda: float(next(clock)))
    for i in range(5):
        db.add("s", f"question {i} about topic {i}", f"answer {i}", passages=[f"passage {i}"])
    own_server.restart()
    db.add("s", "question 5 after the restart", "answer 5", passages=["passage 5"])
    assert db.size("s") == 6 and db.search("s", "restart", k=1)[0].turn.index == 5

    own_server.stop_server()
    with pytest.raises(StoreUnavailableError, match=f"127.0.0.1:{own_server.port}"):
        db.add("s", "question while the server is down", "lost")
    own_server.start_server()
    db.add("s", "question 6 after the outage", "answer 6", passages=["passage 6"])
    assert [t.index for t in db.turns("s")] == list(range(7))
    db.close()
    with psycopg.connect(own_server.dsn) as conn:
        rows = conn.execute("SELECT query FROM dhrag_turns ORDER BY idx").fetchall()
    assert [r[0] for r in rows][-2:] == ["question 5 after the restart",
                                         "question 6 after the outage"]
    assert len(rows) == 7
