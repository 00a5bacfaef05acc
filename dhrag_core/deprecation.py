"""Old names kept for one release: each use warns (``DeprecationWarning``) with the new name.
Shared by the core and both adapters."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

__all__ = ["renamed_attribute", "warn_renamed"]


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
