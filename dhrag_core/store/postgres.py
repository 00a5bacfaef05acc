"""PostgreSQL store (psycopg 3 + psycopg_pool): one history shared by several worker processes.

Install with ``pip install dhrag[postgres]``. Each ``apply`` is one transaction that locks
only its session's row, so writers of different sessions never wait for each other and two
writers of one session are ordered by the row lock; ``expected_version`` turns a lost race
into ``StaleSessionError`` (``HistoryDatabase.add`` reloads and retries).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from dhrag_core.closing import Closeable
from dhrag_core.records import Turn
from dhrag_core.redact import redact_url, url_secrets
from dhrag_core.store.base import (
    DELETE,
    LOG_KEEP,
    MARK,
    UPSERT,
    StaleSessionError,
    StoreUnavailableError,
    check_owned,
    in_log,
    net_changes,
)
from dhrag_core.store.codec import decode_turn, encode_turn
from dhrag_core.store.schema import SCHEMA_VERSION, TURN_COLUMNS, ddl

if TYPE_CHECKING:
    from psycopg import Connection
    from psycopg_pool import ConnectionPool

__all__ = ["PostgresStore", "StoreUnavailableError", "redact_dsn"]

DSN_ENV = "DHRAG_POSTGRES_DSN"
_SCHEMA_LOCK = 0x64687261_67000001  # pg_advisory_xact_lock key of the schema set-up

_SCHEMA = ddl("postgresql")
_UPSERT = (
    f"INSERT INTO dhrag_turns ({', '.join(TURN_COLUMNS)}) "
    f"VALUES ({', '.join('%s' for _ in TURN_COLUMNS)}) ON CONFLICT (session_id, turn_id) DO UPDATE "
    f"SET {', '.join(f'{c} = EXCLUDED.{c}' for c in TURN_COLUMNS[2:])}"
)
# one statement, so the version and the turns come from one snapshot; the outer join keeps a
# row (with NULL turn columns) for a session without turns
_LOAD = (
    f"SELECT s.version, {', '.join(f't.{c}' for c in TURN_COLUMNS)} "
    "FROM (SELECT %s::text AS sid) k "
    "LEFT JOIN dhrag_sessions s ON s.session_id = k.sid "
    "LEFT JOIN dhrag_turns t ON t.session_id = k.sid ORDER BY t.idx"
)

T = TypeVar("T")


def redact_dsn(dsn: str) -> str:
    """The DSN with any password replaced by ``***`` (URL or ``key=value`` form; a password
    holding ``#``, ``?`` or ``/`` included)."""
    return redact_url(dsn)


def _import_psycopg() -> None:
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            "the PostgreSQL store needs psycopg 3 and psycopg_pool: pip install dhrag[postgres]"
        ) from exc


class _Uncommitted(Exception):
    """The connection failed before COMMIT was sent: nothing was written, safe to retry."""


class PostgresStore(Closeable):
    """History in PostgreSQL, shared by any number of threads and processes.

    Args:
        dsn: ``postgresql://user:password@host:port/dbname`` or ``key=value`` form; default
            ``$DHRAG_POSTGRES_DSN``.
        min_size: Connections the pool keeps open.
        max_size: Most connections of this process (threads beyond it wait).
        timeout: Seconds to wait for a connection before ``StoreUnavailableError``.

    The tables (``schema.TABLES``) are created on first use. A call that finds the server
    gone raises ``StoreUnavailableError`` naming the DSN (password masked); once the server is
    back, the next call reconnects.
"""

    def __init__(
        self,
        dsn: str | None = None,
        *,
        min_size: int = 1,
        max_size: int = 8,
        timeout: float = 10.0,
    ) -> None:
        dsn = dsn if dsn is not None else os.environ.get(DSN_ENV)
        if not dsn or not dsn.strip():
            raise ValueError(
                f"PostgresStore needs a DSN: pass postgresql://user:password@host:port/dbname "
                f"or set {DSN_ENV}"
            )
        if min_size < 0 or max_size < max(min_size, 1):
            raise ValueError(f"need 0 <= min_size <= max_size and max_size >= 1, "
                             f"got {min_size}, {max_size}")
        _import_psycopg()
        self.dsn = dsn
        self.min_size, self.max_size, self.timeout = min_size, max_size, timeout
        self._pool: ConnectionPool[Connection[Any]] | None = None
        self._lock = threading.Lock()
        self._closed = False

    def __repr__(self) -> str:
        return f"PostgresStore({redact_dsn(self.dsn)!r})"

    # -- connections -----------------------------------------------------------------------

    def _scrub(self, text: str) -> str:
        for secret in url_secrets(self.dsn):
            text = text.replace(secret, "***")
        return text

    def _unavailable(self, exc: BaseException, what: str = "") -> StoreUnavailableError:
        reason = self._scrub(str(exc).strip() or type(exc).__name__)
        return StoreUnavailableError(
            f"PostgreSQL store {redact_dsn(self.dsn)} is unavailable{what}: {reason}"
        )

    def _connect_error(self) -> str:
        """Why a direct connection fails now ("" if it works), for a pool-timeout message."""
        import psycopg

        try:
            with psycopg.connect(self.dsn, connect_timeout=max(2, int(self.timeout))):
                return ""
        except psycopg.Error as exc:
            return f"; {self._scrub(str(exc).strip())}"

    def _get_pool(self) -> ConnectionPool[Connection[Any]]:
        if self._pool is not None:
            return self._pool
        with self._lock:
            if self._closed:
                raise RuntimeError("PostgresStore is closed")
            if self._pool is None:
                import psycopg
                from psycopg_pool import ConnectionPool

                try:
                    conn = psycopg.connect(self.dsn, autocommit=True,
                                           connect_timeout=max(2, int(self.timeout)))
                except psycopg.Error as exc:
                    raise self._unavailable(exc) from None
                try:
                    self._check_encoding(conn)
                    self._create_schema(conn)
                except psycopg.errors.InsufficientPrivilege as exc:
                    raise self._denied(exc) from None
                except psycopg.OperationalError as exc:
                    raise self._unavailable(exc, " while creating its tables") from None
                finally:
                    conn.close()
                self._pool = ConnectionPool(
                    self.dsn, min_size=self.min_size, max_size=self.max_size,
                    timeout=self.timeout, kwargs={"autocommit": True}, open=True,
                    name="dhrag",
                )
        return self._pool

    def _schema_version(self, conn: Connection[Any]) -> int | None:
        if conn.execute("SELECT to_regclass('dhrag_meta')").fetchone() == (None,):
            return None
        row = conn.execute("SELECT value FROM dhrag_meta WHERE key = 'schema_version'"
                           ).fetchone()
        found = None if row is None else int(row[0])
        if found is not None and found > SCHEMA_VERSION:
            raise RuntimeError(
                f"PostgreSQL store {redact_dsn(self.dsn)} has dhrag schema version "
                f"{found}, newer than this dhrag ({SCHEMA_VERSION}); upgrade dhrag"
            )
        return found

    def _check_encoding(self, conn: Connection[Any]) -> None:
        """Refuse a database that cannot hold every character a chat may contain."""
        row = conn.execute("SHOW server_encoding").fetchone()
        encoding = str(row[0]) if row else "?"
        if encoding.upper() not in ("UTF8", "UTF-8"):
            raise ValueError(
                f"PostgreSQL store {redact_dsn(self.dsn)}: the database's encoding is "
                f"{encoding}, which cannot store every character of a chat (an emoji, say); "
                "use a database created with ENCODING 'UTF8'"
            )

    def _create_schema(self, conn: Connection[Any]) -> None:
        # an up-to-date schema is left alone: DDL on live tables (even IF NOT EXISTS) takes
        # locks that can deadlock with other workers' writes
        if self._schema_version(conn) == SCHEMA_VERSION:
            return
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            if self._schema_version(conn) == SCHEMA_VERSION:
                return
            conn.execute(_SCHEMA)  # creates what older versions lacked (see SCHEMA_VERSION)
            conn.execute(
                "INSERT INTO dhrag_meta VALUES ('schema_version', %s) "
                "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                (str(SCHEMA_VERSION),),
            )

    def _run(self, fn: Callable[[Connection[Any]], T], *, idempotent: bool) -> T:
        """``fn`` on a pooled connection; a connection found dead is replaced and ``fn`` run
        once more when that cannot repeat a write (reads, or nothing executed yet)."""
        import psycopg
        from psycopg_pool import PoolTimeout

        pool = self._get_pool()
        for attempt in (0, 1):
            try:
                with pool.connection() as conn:
                    return fn(conn)
            except PoolTimeout:
                raise StoreUnavailableError(
                    f"PostgreSQL store {redact_dsn(self.dsn)} is unavailable: no connection "
                    f"within {self.timeout:g}s (server unreachable, or all {self.max_size} "
                    f"busy){self._connect_error()}"
                ) from None
            except _Uncommitted as exc:
                if attempt:
                    raise self._unavailable(exc.__cause__ or exc) from None
                pool.check()
            except psycopg.errors.InsufficientPrivilege as exc:
                raise self._denied(exc) from None
            except psycopg.OperationalError as exc:
                if attempt or not idempotent:
                    raise self._unavailable(exc) from None
                pool.check()
        raise AssertionError("unreachable")

    def _denied(self, exc: BaseException) -> PermissionError:
        """A role without the rights a store needs (CREATE on the schema to make its tables,
        INSERT/UPDATE/DELETE on them to write)."""
        return PermissionError(
            f"PostgreSQL store {redact_dsn(self.dsn)}: permission denied "
            f"({self._scrub(str(exc).strip())}); the role needs CREATE on the schema for the "
            "first use, and SELECT, INSERT, UPDATE, DELETE on the dhrag_* tables"
        )

    # -- protocol --------------------------------------------------------------------------

    def load(self, session_id: str) -> tuple[list[Turn], int]:
        def read(conn: Connection[Any]) -> tuple[list[Turn], int]:
            cur = conn.execute(_LOAD, (session_id,))
            rows = cur.fetchall()
            version = rows[0][0] if rows else None
            turns = [decode_turn(dict(zip(TURN_COLUMNS, r[1:], strict=True)))
                     for r in rows if r[2] is not None]
            return turns, 0 if version is None else int(version)

        return self._run(read, idempotent=True)

    def version(self, session_id: str) -> int:
        def read(conn: Connection[Any]) -> int:
            row = conn.execute("SELECT version FROM dhrag_sessions WHERE session_id = %s",
                               (session_id,)).fetchone()
            return 0 if row is None else int(row[0])

        return self._run(read, idempotent=True)

    def apply(
        self,
        session_id: str,
        *,
        upsert: Sequence[Turn] = (),
        delete: Sequence[str] = (),
        expected_version: int | None = None,
    ) -> int:
        check_owned(session_id, upsert)
        rows = [tuple(r[k] for k in TURN_COLUMNS) for r in map(encode_turn, upsert)]
        deletes = list(delete)

        def write(conn: Connection[Any]) -> int:
            import psycopg

            committing = False
            try:
                # pipelined: lock + read, then all writes, then COMMIT -- three round trips
                # (a new session: two more)
                with conn.pipeline(), conn.transaction():
                    lock = "SELECT version FROM dhrag_sessions WHERE session_id = %s FOR UPDATE"
                    row = conn.execute(lock, (session_id,)).fetchone()
                    created = None
                    if row is None:
                        # a new session starts above every deleted one's versions; read in a
                        # statement after the lock, so a deletion that just committed is seen
                        created = conn.execute(
                            "INSERT INTO dhrag_sessions SELECT %s, COALESCE((SELECT "
                            "value::bigint FROM dhrag_meta WHERE key = 'version_floor'), 0) "
                            "ON CONFLICT DO NOTHING RETURNING version",
                            (session_id,),
                        ).fetchone()
                        row = conn.execute(lock, (session_id,)).fetchone()
                    if row is None:
                        raise StaleSessionError(f"session {session_id!r} was deleted meanwhile")
                    current = 0 if created is not None else int(row[0])
                    if expected_version is not None and current != expected_version:
                        raise StaleSessionError(
                            f"session {session_id!r} is at version {current}, "
                            f"expected {expected_version}"
                        )
                    version = int(row[0]) + 1
                    log = ([(session_id, version, r[1], UPSERT) for r in rows]
                           + [(session_id, version, tid, DELETE) for tid in deletes]
                           + [(session_id, version, "", MARK)])
                    with conn.cursor() as cur:
                        if rows:
                            cur.executemany(_UPSERT, rows)
                        if deletes:
                            cur.execute(
                                "DELETE FROM dhrag_turns WHERE session_id = %s "
                                "AND turn_id = ANY(%s)",
                                (session_id, deletes),
                            )
                        cur.execute("DELETE FROM dhrag_log WHERE session_id = %s AND ver <= %s",
                                    (session_id, version - LOG_KEEP))
                        cur.executemany("INSERT INTO dhrag_log VALUES (%s, %s, %s, %s)", log)
                        bumped = cur.execute(
                            "UPDATE dhrag_sessions SET version = version + 1 "
                            "WHERE session_id = %s RETURNING version",
                            (session_id,),
                        ).fetchone()
                    assert bumped is not None
                    committing = True
            except psycopg.OperationalError as exc:
                if committing:
                    raise
                raise _Uncommitted() from exc
            return int(bumped[0])

        return self._run(write, idempotent=False)

    def changes(
        self, session_id: str, since: int
    ) -> tuple[list[Turn], list[str], int] | None:
        def read(conn: Connection[Any]) -> tuple[list[Turn], list[str], int] | None:
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                row = conn.execute("SELECT version FROM dhrag_sessions WHERE session_id = %s",
                                   (session_id,)).fetchone()
                current = 0 if row is None else int(row[0])
                if since == current:
                    return [], [], current
                if not in_log(since, current):
                    return None
                log = conn.execute(
                    "SELECT ver, turn_id, op FROM dhrag_log WHERE session_id = %s AND ver > %s",
                    (session_id, since),
                ).fetchall()
                net = net_changes([(int(v), str(t), int(o)) for v, t, o in log], since, current)
                if net is None:
                    return None
                written, deleted = net
                rows = conn.execute(
                    f"SELECT {', '.join(TURN_COLUMNS)} FROM dhrag_turns "
                    "WHERE session_id = %s AND turn_id = ANY(%s) ORDER BY idx",
                    (session_id, written),
                ).fetchall() if written else []
            turns = [decode_turn(dict(zip(TURN_COLUMNS, r, strict=True))) for r in rows]
            return turns, deleted, current

        return self._run(read, idempotent=True)

    def delete_session(self, session_id: str) -> None:
        """Remove every row naming the session (turns, version, change log); the
        store's ``version_floor`` rises above its versions (see ``SQLiteStore``)."""
        def write(conn: Connection[Any]) -> None:
            with conn.transaction():
                row = conn.execute(
                    "DELETE FROM dhrag_sessions WHERE session_id = %s RETURNING version",
                    (session_id,),
                ).fetchone()
                if row is not None:
                    conn.execute(
                        "INSERT INTO dhrag_meta VALUES ('version_floor', %s) ON CONFLICT (key) "
                        "DO UPDATE SET value = GREATEST(dhrag_meta.value::bigint, "
                        "EXCLUDED.value::bigint)::text",
                        (str(int(row[0]) + 1),),
                    )
                for table in ("dhrag_turns", "dhrag_log", "dhrag_questions"):
                    conn.execute(f"DELETE FROM {table} WHERE session_id = %s", (session_id,))

        self._run(write, idempotent=True)

    def hold_question(self, session_id: str, question: str) -> None:
        def write(conn: Connection[Any]) -> None:
            conn.execute(
                "INSERT INTO dhrag_questions VALUES (%s, %s) ON CONFLICT (session_id) "
                "DO UPDATE SET question = EXCLUDED.question",
                (session_id, question),
            )

        self._run(write, idempotent=True)

    def held_question(self, session_id: str) -> str | None:
        def read(conn: Connection[Any]) -> str | None:
            row = conn.execute("SELECT question FROM dhrag_questions WHERE session_id = %s",
                               (session_id,)).fetchone()
            return None if row is None else str(row[0])

        return self._run(read, idempotent=True)

    def take_question(self, session_id: str, question: str | None = None) -> str | None:
        def write(conn: Connection[Any]) -> str | None:
            row = conn.execute(
                "DELETE FROM dhrag_questions WHERE session_id = %s "
                "AND (%s::text IS NULL OR question = %s) RETURNING question",
                (session_id, question, question),
            ).fetchone()
            return None if row is None else str(row[0])

        # not retried: a DELETE that committed before the connection died would return None
        return self._run(write, idempotent=False)

    def sessions(self) -> list[str]:
        def read(conn: Connection[Any]) -> list[str]:
            rows = conn.execute(
                "SELECT DISTINCT session_id FROM dhrag_turns ORDER BY 1"
            ).fetchall()
            return [str(r[0]) for r in rows]

        return self._run(read, idempotent=True)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
