"""The engine argument under its deprecated name ``rag=`` (for one release)."""

from __future__ import annotations

from dhrag_core import DHRAG
from dhrag_core.deprecation import warn_renamed

__all__ = ["engine_argument"]


def engine_argument(engine: DHRAG | None, rag: DHRAG | None, owner: str) -> DHRAG:
    """The engine given to ``owner``'s constructor as ``engine``, or as the deprecated
    ``rag=`` (with a warning); ``TypeError`` for neither, both, or not a ``DHRAG``."""
    if rag is not None:
        if engine is not None:
            raise TypeError(f"{owner}: pass engine= only (rag= is its deprecated name)")
        warn_renamed(f"{owner}(rag=...)", f"{owner}(engine=...)", stacklevel=4)
        engine = rag
    if not isinstance(engine, DHRAG):
        raise TypeError(f"engine must be a dhrag_core.DHRAG, got {type(engine).__name__}")
    return engine
