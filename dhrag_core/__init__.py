"""dhrag_core: the framework-free DH-RAG history database and turn pipeline."""

from dhrag_core.embedding import Embedder, HashingEmbedder, MiniLMEmbedder, l2_normalise
from dhrag_core.engine import DHRAG
from dhrag_core.history import AddResult, HistoryDatabase, PassageHit
from dhrag_core.index import VectorIndex
from dhrag_core.integration import Candidate, integrate, softmax
from dhrag_core.knowledge import FaissKnowledgeBase, KnowledgeBase
from dhrag_core.records import (
    ContextItem,
    HistoryHit,
    Passage,
    SelectedTurn,
    Selection,
    Turn,
)
from dhrag_core.rewriting import LightRewriter, QueryRewriter, Rewrite
from dhrag_core.settings import Settings
from dhrag_core.store import HistoryStore, MemoryStore, SQLiteStore, StaleSessionError, open_store
from dhrag_core.summaries import ExtractiveSummariser, Summariser

__version__ = "0.1.0"

__all__ = [
    "DHRAG",
    "AddResult",
    "Candidate",
    "ContextItem",
    "Embedder",
    "ExtractiveSummariser",
    "FaissKnowledgeBase",
    "HashingEmbedder",
    "HistoryDatabase",
    "HistoryHit",
    "HistoryStore",
    "KnowledgeBase",
    "LightRewriter",
    "MemoryStore",
    "MiniLMEmbedder",
    "Passage",
    "PassageHit",
    "QueryRewriter",
    "Rewrite",
    "SQLiteStore",
    "SelectedTurn",
    "Selection",
    "Settings",
    "StaleSessionError",
    "Summariser",
    "Turn",
    "VectorIndex",
    "__version__",
    "integrate",
    "l2_normalise",
    "open_store",
    "softmax",
]
