"""The dynamic history database H: per-session state, the update rule and DH-RAG selection."""

from dhrag_core.history.database import AddResult, HistoryDatabase

__all__ = ["AddResult", "HistoryDatabase"]
