"""The dynamic history database H: per-session state, the update rule and DH-RAG selection."""

from dhrag_core.history.database import AddResult, HistoryDatabase
from dhrag_core.history.policy import NEW_CHAIN, ChainPolicy, SessionView, ThreadPolicy

__all__ = ["NEW_CHAIN", "AddResult", "ChainPolicy", "HistoryDatabase", "SessionView",
           "ThreadPolicy"]
