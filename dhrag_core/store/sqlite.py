"""SQLite file store (stdlib ``sqlite3``, WAL): survives restarts, one transaction per apply."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from dhrag_core.closing import Closeable
from dhrag_core.records import Turn
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

__all__ = ["SQLiteStore"]

_DAMAGED = ("not a database", "malformed", "file is encrypted", "database corrupt")


def _is_damage(exc: sqlite3.DatabaseError) -> bool:
    """SQLite's errors for a damaged file (locks, permissions, full disks are not damage)."""
    msg = str(exc).lower()
    return type(exc) is sqlite3.DatabaseError or any(m in msg for m in _DAMAGED)


_SCHEMA = ddl("sqlite")


class SQLiteStore(Closeable):
    """History in one SQLite file; safe for threads of one process and for several processes.

    A file that is not writable opens read-only (reads work, writes raise ``PermissionError``).
    A file of another application is refused (``CorruptStoreError``) and left as it was.

    Args:
        path: The database file (created with its folder if missing, readable by its owner
            only: a chat history is private).
        timeout: Seconds to wait for another process's write lock.
        read_only: Open for reading only (default: when the file is not writable).
    """

    def __init__(
        self, path: str | Path, *, timeout: float = 30.0, read_only: bool | None = None
    ) -> None:
        self.path = Path(path)
        if self.path.is_dir():
            raise IsADirectoryError(
                f"SQLite store {self.path} is a directory; pass a file path, e.g. "
                f"{self.path / 'history.db'}"
            )
        if read_only is None:
            read_only = self.path.is_file() and not os.access(self.path, os.W_OK)
        self.read_only = read_only
        if not read_only:
            self._create_private()
        self._lock = threading.RLock()
        self._closed = False
        self._conn = self._connect(timeout)
        try:
            with self._guard():
                self._conn.row_factory = sqlite3.Row
                found = self._existing_schema()
                if read_only:
                    if found != SCHEMA_VERSION:
                        raise PermissionError(
                            f"SQLite store {self.path} is read-only and "
                            + ("holds no dhrag history" if found is None else
                               f"has the older schema version {found}")
                            + "; open it once with write access"
                        )
                else:
                    self._conn.execute("PRAGMA journal_mode=WAL")
                    self._conn.execute("PRAGMA synchronous=NORMAL")
                    self._conn.execute("PRAGMA foreign_keys=ON")
                    self._create_schema()
        except BaseException:
            self._conn.close()
            raise

    def _create_private(self) -> None:
        """Create the folder (owner only) and an empty file (0600) if missing; SQLite gives
        its -wal and -shm files the database file's permissions."""
        if not self.path.parent.exists():
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.close(os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))

    def _connect(self, timeout: float) -> sqlite3.Connection:
        def connect(target: str, uri: bool) -> sqlite3.Connection:
            conn = sqlite3.connect(target, timeout=timeout, isolation_level=None,
                                   check_same_thread=False, uri=uri)
            try:
                conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            except sqlite3.OperationalError:
                conn.close()
                raise
            except sqlite3.DatabaseError:
                pass  # a damaged file: reported by _guard on first use
            return conn

        try:
            if not self.read_only:
                return connect(str(self.path), False)
            uri = self.path.resolve().as_uri()
            try:
                return connect(f"{uri}?mode=ro", True)
            except sqlite3.OperationalError:
                # a WAL file whose folder is not writable either: nobody can change it
                return connect(f"{uri}?immutable=1", True)
        except sqlite3.OperationalError as exc:
            raise StoreUnavailableError(f"SQLite store {self.path} cannot be opened: {exc}"
                                        ) from exc

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """Report a damaged file as ``CorruptStoreError`` and a failure of the file (disk
        full, no permission, locked too long) as ``StoreUnavailableError``, naming the file;
        a closed store raises ``StoreClosedError``."""
        self._check_open()
        try:
            yield
        except CorruptStoreError as exc:
            if str(self.path) in str(exc):  # named already
                raise
            raise CorruptStoreError(f"{self.path}: {exc}") from exc
        except sqlite3.OperationalError as exc:
            if _is_damage(exc):
                raise self._damaged(exc) from exc
            raise StoreUnavailableError(
                f"SQLite store {self.path} failed: {exc} (this call changed nothing; "
                "committed data is intact)"
            ) from exc
        except sqlite3.DatabaseError as exc:
            if not _is_damage(exc):
                raise
            raise self._damaged(exc) from exc

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"SQLite store {self.path} is closed; open a new one")

    def _damaged(self, exc: sqlite3.DatabaseError) -> CorruptStoreError:
        return CorruptStoreError(
            f"{self.path} is damaged or not a dhrag SQLite database ({exc}); it was left "
            "untouched: move it aside or restore a backup"
        )

    def _writable(self) -> None:
        if self.read_only:
            raise PermissionError(
                f"SQLite store {self.path} is open read-only (the file is not writable); "
                "nothing was written"
            )

    def _existing_schema(self) -> int | None:
        """The dhrag schema version of the file, None for an empty file; refuses (changing
        nothing) a file of another application."""
        c = self._conn
        tables = sorted(r[0] for r in c.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'"))
        if not tables:
            return None
        version = None
        meta_ok = "dhrag_meta" not in tables or [
            r[1] for r in c.execute("PRAGMA table_info(dhrag_meta)")] == ["key", "value"]
        if "dhrag_meta" in tables and meta_ok:
            row = c.execute("SELECT value FROM dhrag_meta WHERE key='schema_version'").fetchone()
            version = None if row is None else self._integer(row[0], "dhrag_meta.schema_version")
        if version is None and not (meta_ok and all(t.startswith("dhrag_") for t in tables)):
            shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
            raise CorruptStoreError(
                f"not a dhrag history store (it holds tables {shown} of another "
                "application); it was left unchanged: pass a new or empty file"
            )
        if version is not None and version > SCHEMA_VERSION:
            raise RuntimeError(
                f"{self.path} has schema version {version}, newer than this dhrag "
                f"({SCHEMA_VERSION}); upgrade dhrag"
            )
        return version if version is not None else 0

    def _create_schema(self) -> None:
        with self._lock:
            self._conn.executescript(_SCHEMA)
            row = self._conn.execute(
                "SELECT value FROM dhrag_meta WHERE key='schema_version'"
            ).fetchone()
            if row is None or self._integer(row[0], "dhrag_meta.schema_version") < SCHEMA_VERSION:
                # the script above created what older versions lacked (see SCHEMA_VERSION)
                self._conn.execute(
                    "INSERT OR REPLACE INTO dhrag_meta VALUES ('schema_version', ?)",
                    (str(SCHEMA_VERSION),),
                )

    def _end(self, ok: bool) -> None:
        """COMMIT (or ROLLBACK) the open transaction, if SQLite has not ended it already (it
        rolls back by itself on a full disk, and ROLLBACK would then hide the cause)."""
        if self._conn.in_transaction:
            self._conn.execute("COMMIT" if ok else "ROLLBACK")

    def load(self, session_id: str) -> tuple[list[Turn], int]:
        with self._lock, self._guard():
            self._conn.execute("BEGIN")
            try:
                rows = self._conn.execute(
                    f"SELECT {', '.join(TURN_COLUMNS)} FROM dhrag_turns WHERE session_id=? "
                    "ORDER BY idx",
                    (session_id,),
                ).fetchall()
                version = self._version(session_id)
            finally:
                self._end(True)
            return [decode_turn(dict(r)) for r in rows], version

    def _version(self, session_id: str) -> int:
        row = self._conn.execute(
            "SELECT version FROM dhrag_sessions WHERE session_id=?", (session_id,)
        ).fetchone()
        return 0 if row is None else self._integer(
            row[0], f"the version of session {session_id!r} (dhrag_sessions)")

    def _integer(self, value: object, what: str) -> int:
        """A stored counter as an int; anything else means a damaged file."""
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return int(value)
        raise CorruptStoreError(f"{self.path}: {what} is {value!r}, not an integer; the "
                                "file is damaged (move it aside or restore a backup)")

    def version(self, session_id: str) -> int:
        with self._lock, self._guard():
            return self._version(session_id)

    def apply(
        self,
        session_id: str,
        *,
        upsert: Sequence[Turn] = (),
        delete: Sequence[str] = (),
        expected_version: int | None = None,
    ) -> int:
        check_owned(session_id, upsert)
        self._writable()
        rows = [encode_turn(t) for t in upsert]
        placeholders = ", ".join("?" for _ in TURN_COLUMNS)
        with self._lock, self._guard():
            c = self._conn
            c.execute("BEGIN IMMEDIATE")
            try:
                current = self._version(session_id)
                if expected_version is not None and current != expected_version:
                    raise StaleSessionError(
                        f"session {session_id!r} is at version {current}, "
                        f"expected {expected_version}"
                    )
                c.executemany(
                    f"INSERT OR REPLACE INTO dhrag_turns ({', '.join(TURN_COLUMNS)}) "
                    f"VALUES ({placeholders})",
                    [tuple(r[k] for k in TURN_COLUMNS) for r in rows],
                )
                c.executemany(
                    "DELETE FROM dhrag_turns WHERE session_id=? AND turn_id=?",
                    [(session_id, tid) for tid in delete],
                )
                c.execute(
                    "INSERT INTO dhrag_sessions VALUES (?, ?) ON CONFLICT(session_id) "
                    "DO UPDATE SET version = version + 1",
                    (session_id, self._floor() + 1 if current == 0 else 1),
                )
                new_version = self._version(session_id)
                self._log(session_id, new_version,
                          [(r["turn_id"], UPSERT) for r in rows]
                          + [(tid, DELETE) for tid in delete] + [("", MARK)])
                c.execute("COMMIT")
            except BaseException:
                self._end(False)
                raise
        return new_version

    def _log(self, session_id: str, version: int, entries: list[tuple[str, int]]) -> None:
        """Record what ``version`` changed, and forget versions beyond ``LOG_KEEP``."""
        c = self._conn
        c.execute("DELETE FROM dhrag_log WHERE session_id=? AND ver<=?",
                  (session_id, version - LOG_KEEP))
        c.executemany("INSERT INTO dhrag_log VALUES (?, ?, ?, ?)",
                      [(session_id, version, tid, op) for tid, op in entries])

    def changes(
        self, session_id: str, since: int
    ) -> tuple[list[Turn], list[str], int] | None:
        with self._lock, self._guard():
            self._conn.execute("BEGIN")
            try:
                current = self._version(session_id)
                if since == current:
                    return [], [], current
                if not in_log(since, current):
                    return None
                log = self._conn.execute(
                    "SELECT ver, turn_id, op FROM dhrag_log WHERE session_id=? AND ver>?",
                    (session_id, since),
                ).fetchall()
                net = net_changes([(int(v), str(t), int(o)) for v, t, o in log], since, current)
                if net is None:
                    return None
                written, deleted = net
                rows = []
                for start in range(0, len(written), 500):
                    ids = written[start : start + 500]
                    rows += self._conn.execute(
                        f"SELECT {', '.join(TURN_COLUMNS)} FROM dhrag_turns WHERE session_id=? "
                        f"AND turn_id IN ({', '.join('?' for _ in ids)})",
                        (session_id, *ids),
                    ).fetchall()
            finally:
                self._end(True)
            turns = sorted((decode_turn(dict(r)) for r in rows), key=lambda t: t.index)
        return turns, deleted, current

    def delete_session(self, session_id: str) -> None:
        """Remove every row naming the session (turns, version, change log).

        The session's version is not kept; instead the store's ``version_floor`` rises above
        it, so a re-created session starts at versions no cache can hold from before.
        """
        self._writable()
        with self._lock, self._guard():
            c = self._conn
            c.execute("BEGIN IMMEDIATE")
            try:
                version = self._version(session_id)
                for table in ("dhrag_turns", "dhrag_log", "dhrag_sessions", "dhrag_questions"):
                    c.execute(f"DELETE FROM {table} WHERE session_id=?", (session_id,))
                if version:
                    # +1 leaves a gap no change log covers: caches reload, never catch up
                    c.execute("INSERT OR REPLACE INTO dhrag_meta VALUES ('version_floor', ?)",
                              (str(max(self._floor(), version + 1)),))
                c.execute("COMMIT")
            except BaseException:
                self._end(False)
                raise

    def _floor(self) -> int:
        row = self._conn.execute(
            "SELECT value FROM dhrag_meta WHERE key='version_floor'").fetchone()
        return 0 if row is None else self._integer(row[0], "dhrag_meta.version_floor")

    def hold_question(self, session_id: str, question: str) -> None:
        self._writable()
        with self._lock, self._guard():
            self._conn.execute(
                "INSERT INTO dhrag_questions VALUES (?, ?) ON CONFLICT(session_id) "
                "DO UPDATE SET question = excluded.question",
                (session_id, question),
            )

    def held_question(self, session_id: str) -> str | None:
        with self._lock, self._guard():
            row = self._conn.execute(
                "SELECT question FROM dhrag_questions WHERE session_id=?", (session_id,)
            ).fetchone()
        return None if row is None else str(row[0])

    def take_question(self, session_id: str, question: str | None = None) -> str | None:
        self._writable()
        with self._lock, self._guard():
            c = self._conn
            c.execute("BEGIN IMMEDIATE")
            try:
                row = c.execute("SELECT question FROM dhrag_questions WHERE session_id=?",
                                (session_id,)).fetchone()
                held = None if row is None else str(row[0])
                if held is None or (question is not None and held != question):
                    held = None
                else:
                    c.execute("DELETE FROM dhrag_questions WHERE session_id=?", (session_id,))
                c.execute("COMMIT")
            except BaseException:
                self._end(False)
                raise
        return held

    def sessions(self) -> list[str]:
        with self._lock, self._guard():
            rows = self._conn.execute(
                "SELECT DISTINCT session_id FROM dhrag_turns ORDER BY 1"
            ).fetchall()
        return [r[0] for r in rows]

    def summaries(self) -> list[SessionSummary]:
        """Each session's turn count and latest turn, by SQL: no turn is decoded."""
        with self._lock, self._guard():
            rows = self._conn.execute(SUMMARY_SQL + " ORDER BY session_id").fetchall()
            return [summary_of_row(f"SQLite store {self.path}", *r) for r in rows]

    def integrity_check(self) -> str:
        """SQLite's ``PRAGMA integrity_check`` result ("ok" when the file is sound)."""
        with self._lock:
            self._check_open()
            return str(self._conn.execute("PRAGMA integrity_check").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._conn.close()
