"""History storage backends behind one protocol."""

from dhrag_core.store.base import (
    CorruptStoreError,
    HistoryStore,
    IncrementalStore,
    QuestionStore,
    SessionSummary,
    StaleSessionError,
    StoreClosedError,
    StoreUnavailableError,
    SummaryStore,
    session_summaries,
)
from dhrag_core.store.memory import MemoryStore
from dhrag_core.store.postgres import PostgresStore, redact_dsn
from dhrag_core.store.sqlite import SQLiteStore

__all__ = [
    "CorruptStoreError",
    "HistoryStore",
    "IncrementalStore",
    "MemoryStore",
    "PostgresStore",
    "QuestionStore",
    "SQLiteStore",
    "SessionSummary",
    "StaleSessionError",
    "StoreClosedError",
    "StoreUnavailableError",
    "SummaryStore",
    "open_store",
    "redact_dsn",
    "session_summaries",
]

_URL_FORMS = "'memory', 'sqlite:///path/to/file.db' or 'postgresql://user:password@host:port/db'"


def open_store(url: str | None) -> HistoryStore:
    """A store from a URL: ``memory`` (or None), ``sqlite:///path/to/file.db`` (relative to
    the current folder; ``sqlite:////abs/path.db`` for an absolute path), or
    ``postgresql://user:password@host:port/dbname`` (also ``postgres://``; needs
    ``pip install dhrag[postgres]``)."""
    if url is None or url == "memory":
        return MemoryStore()
    if not isinstance(url, str):
        raise TypeError(f"store url must be a str, got {type(url).__name__}")
    if url.startswith("sqlite:///"):
        path = url[len("sqlite:///") :]
        if not path:
            raise ValueError("sqlite store url needs a file path: sqlite:///path/to/history.db")
        return SQLiteStore(path)
    if url.startswith(("postgresql://", "postgres://")):
        return PostgresStore(url)
    raise ValueError(f"unknown store url {redact_dsn(url)!r}; use {_URL_FORMS}")
