"""Where a warning should point: the first caller outside dhrag and LlamaIndex."""

from __future__ import annotations

import sys

_INSIDE = ("llamaindex_dhrag.", "dhrag_core.", "llama_index")


def caller_level() -> int:
    """The ``stacklevel`` that names, for the function calling this one, its first caller
    outside this package, the core and LlamaIndex (whose dispatcher wraps chat methods)."""
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and str(frame.f_globals.get("__name__", "")).startswith(
            _INSIDE):
        frame, level = frame.f_back, level + 1
    return level
