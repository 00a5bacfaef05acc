"""Deprecated: renamed ``langchain_dhrag.convert`` (this alias is removed in the next release).

Importing it warns (``DeprecationWarning``); every name resolves to ``langchain_dhrag.convert``.
"""

from __future__ import annotations

from typing import Any

from dhrag_core.deprecation import warn_renamed
from langchain_dhrag import convert

__all__ = list(convert.__all__)


def __getattr__(name: str) -> Any:
    if name in convert.__all__:
        return getattr(convert, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


warn_renamed("langchain_dhrag.documents", "langchain_dhrag.convert")
