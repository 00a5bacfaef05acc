"""PostgreSQL fixtures: a throw-away server for the whole test session.

``postgres_server`` starts one with ``dhrag_core.testing.TempPostgres`` (PostgreSQL binaries
under /usr/lib/postgresql/*/bin or on the PATH). Without a server the PostgreSQL tests skip,
loudly; with ``DHRAG_REQUIRE_POSTGRES=1`` (as ``.ci/run`` sets) they fail instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from dhrag_core.testing import PostgresUnavailable, TempPostgres

REQUIRE_ENV = "DHRAG_REQUIRE_POSTGRES"
TABLES = "dhrag_turns, dhrag_log, dhrag_sessions, dhrag_meta, dhrag_questions, dhrag_state"
"""Every table a dhrag version created (dhrag_state: the unused table of earlier versions)."""


def no_server(reason: str) -> None:
    """Skip (or, under DHRAG_REQUIRE_POSTGRES=1, fail) a test that needs PostgreSQL."""
    message = f"POSTGRESQL TESTS NOT RUN: {reason}"
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{message} ({REQUIRE_ENV}=1)", pytrace=False)
    pytest.skip(message)


def start_server(*, durable: bool = False) -> TempPostgres:
    """A started server (``durable``: PostgreSQL's durable defaults, ``fsync`` on), or
    skip/fail the calling test."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        no_server("psycopg is not installed (pip install -e '.[dev]')")
    pg = TempPostgres(durable=durable)
    try:
        pg.start()
    except (PostgresUnavailable, OSError) as exc:
        no_server(f"could not start a local server: {exc}")
    return pg


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[TempPostgres]:
    pg = start_server()
    yield pg
    pg.stop()


@pytest.fixture(scope="session")
def postgres_dsn(postgres_server: TempPostgres) -> str:
    """The DSN of the session's server (its tables may hold other tests' data)."""
    return postgres_server.dsn


@pytest.fixture
def clean_postgres_dsn(postgres_dsn: str) -> str:
    """The session's DSN with the dhrag tables dropped first."""
    import psycopg

    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {TABLES}")
    return postgres_dsn
