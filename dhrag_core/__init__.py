"""dhrag_core: the framework-free DH-RAG history database and turn pipeline."""

from dhrag_core.algorithm.calibration import Calibration, calibrate
from dhrag_core.algorithm.integration import Candidate, integrate, softmax
from dhrag_core.algorithm.llm_rewriting import LLMRewriter
from dhrag_core.algorithm.rewriting import LightRewriter, QueryRewriter, Rewrite
from dhrag_core.algorithm.summaries import ExtractiveSummariser, Summariser
from dhrag_core.embedding import (
    Embedder,
    FunctionEmbedder,
    HashingEmbedder,
    MiniLMEmbedder,
    l2_normalise,
)
from dhrag_core.history import (
    NEW_CHAIN,
    AddResult,
    ChainPolicy,
    HistoryDatabase,
    SessionView,
    ThreadPolicy,
)
from dhrag_core.index import VectorIndex
from dhrag_core.knowledge.base import FaissKnowledgeBase, KnowledgeBase
from dhrag_core.knowledge.ingest import load_kb, load_passages
from dhrag_core.llm import LLM, LLMError, OpenAICompatibleLLM
from dhrag_core.numpy_minilm import NumpyMiniLMEmbedder
from dhrag_core.pipeline.engine import DHRAG
from dhrag_core.records import (
    ContextItem,
    HistoryHit,
    Passage,
    SelectedTurn,
    Selection,
    Turn,
)
from dhrag_core.settings import DHRAGSettings, Settings
from dhrag_core.store import (
    CorruptStoreError,
    HistoryStore,
    MemoryStore,
    PostgresStore,
    SQLiteStore,
    StaleSessionError,
    StoreUnavailableError,
    open_store,
)

__version__ = "0.1.0"

__all__ = [
    "DHRAG",
    "LLM",
    "NEW_CHAIN",
    "AddResult",
    "Calibration",
    "Candidate",
    "ChainPolicy",
    "ContextItem",
    "CorruptStoreError",
    "DHRAGSettings",
    "Embedder",
    "ExtractiveSummariser",
    "FaissKnowledgeBase",
    "FunctionEmbedder",
    "HashingEmbedder",
    "HistoryDatabase",
    "HistoryHit",
    "HistoryStore",
    "KnowledgeBase",
    "LLMError",
    "LLMRewriter",
    "LightRewriter",
    "MemoryStore",
    "MiniLMEmbedder",
    "NumpyMiniLMEmbedder",
    "OpenAICompatibleLLM",
    "Passage",
    "PostgresStore",
    "QueryRewriter",
    "Rewrite",
    "SQLiteStore",
    "SelectedTurn",
    "Selection",
    "SessionView",
    "Settings",
    "StaleSessionError",
    "StoreUnavailableError",
    "Summariser",
    "ThreadPolicy",
    "Turn",
    "VectorIndex",
    "__version__",
    "calibrate",
    "integrate",
    "l2_normalise",
    "load_kb",
    "load_passages",
    "open_store",
    "softmax",
]
