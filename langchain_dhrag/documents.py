"""Deprecated: renamed ``langchain_dhrag.convert`` (this alias is removed in the next release).

Importing it warns (``DeprecationWarning``) and re-exports ``langchain_dhrag.convert``.
"""

from __future__ import annotations

from dhrag_core.deprecation import warn_renamed
from langchain_dhrag.convert import (
    TRACE_KEY,
    document_title,
    document_to_passage,
    documents_to_passages,
    format_documents,
    format_history,
    history_messages,
    selection_to_documents,
    turns_to_messages,
)

__all__ = [
    "TRACE_KEY",
    "document_title",
    "document_to_passage",
    "documents_to_passages",
    "format_documents",
    "format_history",
    "history_messages",
    "selection_to_documents",
    "turns_to_messages",
]

warn_renamed("langchain_dhrag.documents", "langchain_dhrag.convert")
