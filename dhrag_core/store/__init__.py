"""History storage backends behind one protocol."""

from dhrag_core.store.base import HistoryStore, StaleSessionError
from dhrag_core.store.memory import MemoryStore
from dhrag_core.store.sqlite import SQLiteStore

__all__ = ["HistoryStore", "MemoryStore", "SQLiteStore", "StaleSessionError", "open_store"]


def open_store(url: str | None) -> HistoryStore:
    """A store from a URL: ``memory`` (or None), ``sqlite:///path/to/file.db``."""
    if url is None or url == "memory":
        return MemoryStore()
    if not isinstance(url, str):
        raise TypeError(f"store url must be a str, got {type(url).__name__}")
    if url.startswith("sqlite:///"):
        path = url[len("sqlite:///") :]
        if not path:
            raise ValueError("sqlite store url needs a file path: sqlite:///path/to/history.db")
        return SQLiteStore(path)
    raise ValueError(f"unknown store url {url!r}; use 'memory' or 'sqlite:///path/to/file.db'")
