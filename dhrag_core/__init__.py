"""dhrag_core: the framework-free DH-RAG history database and turn pipeline."""

from dhrag_core.embedding import Embedder, HashingEmbedder, MiniLMEmbedder, l2_normalise
from dhrag_core.history import AddResult, HistoryDatabase, PassageHit
from dhrag_core.index import VectorIndex
from dhrag_core.knowledge import FaissKnowledgeBase, KnowledgeBase
from dhrag_core.records import HistoryHit, Passage, Turn
from dhrag_core.settings import Settings
from dhrag_core.store import HistoryStore, MemoryStore, SQLiteStore, StaleSessionError, open_store

__version__ = "0.1.0"

__all__ = [
    "AddResult",
    "Embedder",
    "FaissKnowledgeBase",
    "HashingEmbedder",
    "HistoryDatabase",
    "HistoryHit",
    "HistoryStore",
    "KnowledgeBase",
    "MemoryStore",
    "MiniLMEmbedder",
    "Passage",
    "PassageHit",
    "SQLiteStore",
    "Settings",
    "StaleSessionError",
    "Turn",
    "VectorIndex",
    "__version__",
    "l2_normalise",
    "open_store",
]
