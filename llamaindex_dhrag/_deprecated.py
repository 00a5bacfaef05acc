"""Old names kept for one release: each use warns (``DeprecationWarning``) with the new name."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from dhrag_core import DHRAG

__all__ = ["engine_argument", "renamed_attribute", "warn_renamed"]


def warn_renamed(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warn that ``old`` is deprecated and will be removed in the next release: use ``new``."""
    warnings.warn(f"{old} is deprecated and will be removed in the next release; use {new}",
                  DeprecationWarning, stacklevel=stacklevel)


def renamed_attribute(
    module: str, name: str, renamed: Mapping[str, str], namespace: Mapping[str, Any]
) -> Any:
    """For a module's ``__getattr__``: the object an old ``name`` now has under its new name
    in ``namespace``, with a warning; ``AttributeError`` for any other name."""
    new = renamed.get(name)
    if new is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    warn_renamed(f"{module}.{name}", f"{module}.{new}", stacklevel=4)
    return namespace[new]


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
