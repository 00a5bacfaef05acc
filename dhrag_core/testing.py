"""A throw-away local PostgreSQL server for tests, examples and benchmarks (needs ``initdb`` /
``pg_ctl``; shipped with the package so that all three may import it).

As root, the server runs as the ``postgres`` system user (``initdb`` refuses root). It listens
on 127.0.0.1 and a free port, trusts local connections, runs with ``fsync=off`` (fast, not
crash-safe; ``durable=True`` keeps PostgreSQL's durable defaults) and lives in a temporary
folder that ``stop`` removes. ``crash`` stops it like a crash (no checkpoint), so
``start_server`` runs crash recovery.

    with TempPostgres() as pg:
        store = PostgresStore(pg.dsn)
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

__all__ = ["PostgresUnavailable", "TempPostgres", "find_bindir"]

DATABASE = "dhrag_test"


class PostgresUnavailable(RuntimeError):
    """The local server could not be started (binaries missing, no postgres user, ...)."""


def find_bindir() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl``: $PG_BINDIR, the newest
    /usr/lib/postgresql/*/bin, or the PATH."""
    env = os.environ.get("PG_BINDIR")
    if env and (Path(env) / "initdb").exists():
        return Path(env)
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TempPostgres:
    """Start with ``start()`` (or ``with``); ``dsn`` names a fresh database on it.

    ``durable=False`` (the default) runs with ``fsync``, ``synchronous_commit`` and
    ``full_page_writes`` off: an acknowledged commit can be lost on a crash. ``durable=True``
    leaves them at PostgreSQL's defaults (on), for crash-durability tests.
    """

    def __init__(self, database: str = DATABASE, *, durable: bool = False) -> None:
        self.database = database
        self.durable = durable
        self.port = 0
        self.root: Path | None = None
        self._opts = ""
        self._as_postgres = hasattr(os, "geteuid") and os.geteuid() == 0
        self._bindir = find_bindir()

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{self.database}"

    @property
    def data(self) -> Path:
        assert self.root is not None, "server not started"
        return self.root / "data"

    def _run(self, *args: str, timeout: float = 60.0) -> None:
        assert self._bindir is not None
        cmd = [str(self._bindir / args[0]), *args[1:]]
        if self._as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            log = ""
            if self.root is not None and (self.root / "server.log").exists():
                log = (self.root / "server.log").read_text(errors="replace")[-2000:]
            raise PostgresUnavailable(
                f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()}\n{log}"
            )

    def start(self) -> str:
        """Create the cluster and the database, start the server; returns the DSN."""
        if self._bindir is None:
            raise PostgresUnavailable(
                "PostgreSQL binaries not found (no /usr/lib/postgresql/*/bin/initdb, no initdb "
                "on PATH); install them, e.g. apt-get install -y postgresql"
            )
        if self._as_postgres and shutil.which("runuser") is None:
            raise PostgresUnavailable("running as root but runuser is missing")
        # the postgres user must reach the folder: /tmp rather than a $TMPDIR under /root
        base = "/tmp" if self._as_postgres and os.path.isdir("/tmp") else None
        self.root = Path(tempfile.mkdtemp(prefix="dhrag-pg-", dir=base))
        if self._as_postgres:
            try:
                shutil.chown(self.root, "postgres", "postgres")
            except (LookupError, OSError) as exc:
                shutil.rmtree(self.root, ignore_errors=True)
                self.root = None
                raise PostgresUnavailable(f"no usable 'postgres' system user: {exc}") from exc
        try:
            self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres",
                      "-E", "UTF8", "--no-sync", "--no-instructions")
            self.port = _free_port()
            opts = (f"-c listen_addresses=127.0.0.1 -p {self.port} "
                    f"-c unix_socket_directories='{self.root}' -c max_connections=200")
            if not self.durable:
                opts += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
            self._opts = opts
            self.start_server()
            self._create_database()
        except BaseException:
            self.stop()
            raise
        return self.dsn

    def _create_database(self) -> None:
        import psycopg

        admin = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        with psycopg.connect(admin, autocommit=True, connect_timeout=10) as conn:
            conn.execute(f'CREATE DATABASE "{self.database}"')

    def restart(self) -> None:
        """``pg_ctl restart -m fast``: every open connection is dropped; data stays."""
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.data.parent / "server.log"),
                  "-w", "-t", "60", "-m", "fast", "restart")

    def stop_server(self) -> None:
        """Stop the server (fast shutdown), keeping its data for ``start_server``."""
        self._run("pg_ctl", "-D", str(self.data), "-w", "-m", "fast", "stop")

    def crash(self) -> None:
        """Crash-stop the server (``pg_ctl stop -m immediate``: every process quits at once,
        without a checkpoint; what is only in shared memory is lost), keeping its data;
        ``start_server`` then runs crash recovery."""
        self._run("pg_ctl", "-D", str(self.data), "-w", "-t", "60", "-m", "immediate", "stop")

    def start_server(self) -> None:
        """Start the stopped (or crashed) server again, on the same port and folder."""
        self._run("pg_ctl", "-D", str(self.data), "-o", self._opts, "-l",
                  str(self.data.parent / "server.log"), "-w", "-t", "60", "start")

    def stop(self) -> None:
        """Stop the server (if running) and remove its folder."""
        if self.root is None:
            return
        if (self.data / "postmaster.pid").exists():
            with contextlib.suppress(PostgresUnavailable, subprocess.TimeoutExpired):
                self._run("pg_ctl", "-D", str(self.data), "-w", "-m", "immediate", "stop")
        shutil.rmtree(self.root, ignore_errors=True)
        self.root = None

    def __enter__(self) -> TempPostgres:
        self.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
