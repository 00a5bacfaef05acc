"""The one rule both adapters follow to search a framework's store: by vector or by text."""

from __future__ import annotations

from typing import Literal

from dhrag_core.validation import SearchPath, check_search

__all__ = ["search_path"]


def search_path(search: SearchPath, *, by_vector: bool, same_embedder: bool,
                needs: str) -> Literal["vector", "text"]:
    """``"vector"`` where the store can be searched with the engine's expanded query vector
    (``by_vector``: it ranks by a query embedding alone) and the engine embeds with the
    store's own model (``same_embedder``: the vectors live in one space), unless ``search``
    asks for ``"text"``; else ``"text"`` (the rewritten query as text, its candidates
    re-ranked by the expanded vectors).

    Raises:
        ValueError: ``search="vector"`` where the vector path is impossible; ``needs`` says
            what it takes, in the framework's words.
    """
    check_search(search)
    if search != "text" and by_vector and same_embedder:
        return "vector"
    if search == "vector":
        raise ValueError(f'search="vector" needs {needs}')
    return "text"
