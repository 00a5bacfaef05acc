"""PostgreSQL store (psycopg 3 + psycopg_pool): one history shared by several worker processes.

Install with ``pip install dhrag[postgres]``. Each ``apply`` is one transaction that locks
only its session's row, so writers of different sessions never wait for each other and two
writers of one session are ordered by the row lock; ``expected_version`` turns a lost race
into ``StaleSessionError`` (``HistoryDatabase.add`` reloads and retries).

Writers of one session take turns fairly: every write (and ``version``) takes the session's
advisory lock in shared mode. After a lost race (``StaleSessionError``) the store's next
version check of the session (``version`` or ``changes``, which ``HistoryDatabase`` makes
before it retries) first waits for that lock in exclusive mode (PostgreSQL grants waiting locks
in order), and keeps it until the store's next ``apply`` of the session: the retry cannot lose,
so a process loses at most once per write, however many write the session.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from dhrag_core.closing import Closeable
from dhrag_core.records import Turn
from dhrag_core.redact import redact_url, url_secrets
from dhrag_core.store.base import (
    DELETE,
    LOG_KEEP,
    MARK,
    SUMMARY_SQL,
    UPSERT,
    CorruptStoreError,
    SessionSummary,
    StaleSessionError,
    StoreClosedError,
    StoreUnavailableError,
    check_owned,
    in_log,
    net_changes,
    summary_of_row,
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

_TURN_IDLE_S = 15
"""Seconds a writer may hold its turn (the session's exclusive lock) idle before the server
ends it, so that a writer that never retries cannot stop the others for long."""

T = TypeVar("T")


def _session_key(session_id: str) -> int:
    """The session's advisory-lock key: the same in every process."""
    digest = hashlib.blake2b(session_id.encode("utf-8", "surrogatepass"), digest_size=8)
    return int.from_bytes(digest.digest(), "big", signed=True)


class _Resources:
    """The pool and the held turns of a store, released by ``close()`` or when the store is
    dropped unclosed (a finalizer, which may run in one of the pool's own threads)."""

    def __init__(self) -> None:
        self.pool: ConnectionPool[Connection[Any]] | None = None
        self.turns: dict[str, Connection[Any]] = {}
        self.owed: set[str] = set()
        self.lock = threading.Lock()

    def close(self) -> None:
        with self.lock:
            pool, self.pool = self.pool, None
            turns, self.turns = list(self.turns.values()), {}
            self.owed.clear()
        for conn in turns:
            with contextlib.suppress(Exception):
                conn.close()
        if pool is None:
            return
        own = [*getattr(pool, "_workers", ()), getattr(pool, "_sched_runner", None)]
        if threading.current_thread() in own:
            # a thread cannot join itself (psycopg_pool's close would): close from another
            threading.Thread(target=pool.close, name="dhrag-pool-close", daemon=True).start()
        else:
            pool.close()


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
    for name in ("psycopg", "psycopg.pool"):
        logger = logging.getLogger(name)
        if _QUIET not in logger.filters:
            logger.addFilter(_QUIET)


class _QuietCleanup(logging.Filter):
    """Demotes to DEBUG psycopg's warnings about cleaning up after a failed connection
    ("error ignored terminating <Pipeline>: pipeline aborted", "discarding broken
    connection"): the store reports the failure itself, as ``StoreUnavailableError``, and
    without this the warnings reach stderr as stray lines where logging is not set up."""

    _NOISE = ("error ignored ", "discarding broken connection", "discarding closed connection",
              "rolling back returned connection", "closing returned connection",
              "error resetting connection")

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.WARNING and str(record.msg).startswith(self._NOISE):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


_QUIET = _QuietCleanup()


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
        self._res = _Resources()
        self._lock = threading.Lock()
        self._closed = False
        self._release = weakref.finalize(self, self._res.close)

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
        pool = self._res.pool
        if pool is not None:
            return pool
        with self._lock:
            if self._closed:
                raise StoreClosedError(
                    f"PostgreSQL store {redact_dsn(self.dsn)} is closed; open a new one")
            if self._res.pool is None:
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
                self._res.pool = ConnectionPool(
                    self.dsn, min_size=self.min_size, max_size=self.max_size,
                    timeout=self.timeout, kwargs={"autocommit": True}, open=True,
                    name="dhrag",
                )
            return self._res.pool

    def _schema_version(self, conn: Connection[Any]) -> int | None:
        if conn.execute("SELECT to_regclass('dhrag_meta')").fetchone() == (None,):
            return None
        row = conn.execute("SELECT value FROM dhrag_meta WHERE key = 'schema_version'"
                           ).fetchone()
        found = None if row is None else self._integer(row[0], "dhrag_meta.schema_version")
        if found is not None and found > SCHEMA_VERSION:
            raise RuntimeError(
                f"PostgreSQL store {redact_dsn(self.dsn)} has dhrag schema version "
                f"{found}, newer than this dhrag ({SCHEMA_VERSION}); upgrade dhrag"
            )
        return found

    def _integer(self, value: object, what: str) -> int:
        """A stored counter as an int; anything else means a damaged store."""
        text = str(value).strip()
        if text.lstrip("-").isdigit():
            return int(text)
        raise CorruptStoreError(
            f"PostgreSQL store {redact_dsn(self.dsn)}: {what} is {value!r}, not an integer; "
            "the store is damaged (set it right or restore a backup)")

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
        from psycopg_pool import PoolClosed, PoolTimeout

        pool = self._get_pool()
        for attempt in (0, 1):
            try:
                with pool.connection() as conn:
                    return fn(conn)
            except PoolClosed:
                raise StoreClosedError(
                    f"PostgreSQL store {redact_dsn(self.dsn)} is closed; open a new one"
                ) from None
            except psycopg.errors.InvalidTextRepresentation as exc:
                raise CorruptStoreError(
                    f"PostgreSQL store {redact_dsn(self.dsn)} is damaged: "
                    f"{self._scrub(str(exc).strip())} (a counter in dhrag_meta, such as "
                    "version_floor, is not an integer; set it right or restore a backup)"
                ) from None
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
        """The session's version; first, while another process holds its turn to write the
        session, waits until it has written (a version read then would soon be stale)."""
        query = "SELECT version FROM dhrag_sessions WHERE session_id = %s"
        key = _session_key(session_id)
        self._claim_turn(session_id)
        with self._res.lock:
            held = session_id in self._res.turns  # then the lock is ours already

        def read(conn: Connection[Any]) -> int:
            if held:
                row = conn.execute(query, (session_id,)).fetchone()
            else:
                with conn.pipeline():  # one round trip; the read follows the wait
                    conn.execute("SELECT pg_advisory_xact_lock_shared(%s)", (key,))
                    row = conn.execute(query, (session_id,)).fetchone()
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
        key = _session_key(session_id)
        held = self._take_turn(session_id)
        if held is not None:
            done = self._write_in_turn(held, session_id, rows, deletes, expected_version)
            if done is not None:
                return done

        def write(conn: Connection[Any]) -> int:
            import psycopg

            committing = False
            try:
                # pipelined: lock + read, then all writes, then COMMIT -- three round trips
                # (a new session: two more)
                with conn.pipeline(), conn.transaction():
                    # waits while a writer that lost a race holds its turn (see the module)
                    conn.execute("SELECT pg_advisory_xact_lock_shared(%s)", (key,))
                    version = self._write(conn, session_id, rows, deletes, expected_version)
                    committing = True
            except psycopg.OperationalError as exc:
                if committing:
                    raise
                raise _Uncommitted() from exc
            return version

        try:
            return self._run(write, idempotent=False)
        except StaleSessionError:
            with self._res.lock:
                self._res.owed.add(session_id)
            raise

    def _write(self, conn: Connection[Any], session_id: str, rows: list[tuple[Any, ...]],
               deletes: list[str], expected_version: int | None) -> int:
        """``apply``'s statements, in the caller's transaction; the new version."""
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
                f"session {session_id!r} is at version {current}, expected {expected_version}"
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
                    "DELETE FROM dhrag_turns WHERE session_id = %s AND turn_id = ANY(%s)",
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
        return int(bumped[0])

    # -- fair turns ------------------------------------------------------------------------

    def _claim_turn(self, session_id: str) -> None:
        """After a lost race: wait for the session's exclusive lock, in a transaction of a
        connection of its own, kept for this store's next ``apply`` of the session (the
        server ends it after ``_TURN_IDLE_S`` idle). A failure leaves the retry optimistic."""
        import psycopg

        with self._res.lock:
            if session_id not in self._res.owed:
                return
            self._res.owed.discard(session_id)
            if session_id in self._res.turns:  # held already (another thread lost meanwhile)
                return
        key = _session_key(session_id)
        conn: Connection[Any] | None = None
        try:
            conn = psycopg.connect(self.dsn, connect_timeout=max(2, int(self.timeout)))
            conn.execute("SELECT set_config('idle_in_transaction_session_timeout', %s, true)",
                         (f"{_TURN_IDLE_S}s",))
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (key,))
        except BaseException as exc:  # an interrupted wait included: release the connection
            if conn is not None:
                with contextlib.suppress(psycopg.Error):
                    conn.close()
            if isinstance(exc, psycopg.Error):
                return
            raise
        with self._res.lock:
            old = self._res.turns.pop(session_id, None)
            if self._closed:
                old, conn = conn, None
            else:
                self._res.turns[session_id] = conn
        if old is not None:
            with contextlib.suppress(psycopg.Error):
                old.close()

    def _take_turn(self, session_id: str) -> Connection[Any] | None:
        with self._res.lock:
            return self._res.turns.pop(session_id, None)

    def _write_in_turn(self, conn: Connection[Any], session_id: str, rows: list[tuple[Any, ...]],
                       deletes: list[str], expected_version: int | None) -> int | None:
        """``apply`` in the held turn's transaction; ``None`` when it wrote nothing (the
        turn was lost, or another failure: the caller writes as usual, which reports it)."""
        import psycopg

        committing = False
        try:
            with conn.pipeline():
                version = self._write(conn, session_id, rows, deletes, expected_version)
            committing = True
            conn.commit()
            return version
        except psycopg.OperationalError as exc:
            if committing:
                raise self._unavailable(exc) from None
            return None
        except (psycopg.Error, StaleSessionError):
            return None
        finally:
            with contextlib.suppress(psycopg.Error):
                conn.close()

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

        self._claim_turn(session_id)
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

        held = self._take_turn(session_id)
        if held is not None:
            held.close()
        with self._res.lock:
            self._res.owed.discard(session_id)
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

    def summaries(self) -> list[SessionSummary]:
        """Each session's turn count and latest turn, by SQL: no turn is decoded."""
        def read(conn: Connection[Any]) -> list[SessionSummary]:
            rows = conn.execute(SUMMARY_SQL).fetchall()
            name = f"PostgreSQL store {redact_dsn(self.dsn)}"
            return sorted((summary_of_row(name, *r) for r in rows), key=lambda s: s.session_id)

        return self._run(read, idempotent=True)

    def close(self) -> None:
        """Close the pool (and any held turn); closing twice is fine."""
        with self._lock:
            self._closed = True
        self._release()
