"""dhrag_core: the framework-free DH-RAG history database and turn pipeline.

Names are imported on first use (PEP 562), so that ``import dhrag_core`` (and the ``dhrag``
command's first instant) loads no NumPy, FAISS or store driver until one is asked for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dhrag_core.algorithm.calibration import Calibration, calibrate
    from dhrag_core.algorithm.integration import Candidate, integrate, softmax
    from dhrag_core.algorithm.llm_rewriting import LLMRewriter
    from dhrag_core.algorithm.rewriting import LightRewriter, QueryRewriter, Rewrite
    from dhrag_core.algorithm.summaries import ExtractiveSummariser, Summariser
    from dhrag_core.closing import ClosedError
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
    from dhrag_core.settings import (
        Ablations,
        DHRAGSettings,
        Experiments,
        Integration,
        Limits,
        Retrieval,
        Settings,
        Threads,
        Tree,
        Weighting,
    )
    from dhrag_core.store import (
        CorruptStoreError,
        HistoryStore,
        MemoryStore,
        PostgresStore,
        SQLiteStore,
        StaleSessionError,
        StoreClosedError,
        StoreUnavailableError,
        open_store,
    )

_EXPORTS = {
    "Calibration": "dhrag_core.algorithm.calibration",
    "calibrate": "dhrag_core.algorithm.calibration",
    "Candidate": "dhrag_core.algorithm.integration",
    "integrate": "dhrag_core.algorithm.integration",
    "softmax": "dhrag_core.algorithm.integration",
    "LLMRewriter": "dhrag_core.algorithm.llm_rewriting",
    "LightRewriter": "dhrag_core.algorithm.rewriting",
    "QueryRewriter": "dhrag_core.algorithm.rewriting",
    "Rewrite": "dhrag_core.algorithm.rewriting",
    "ExtractiveSummariser": "dhrag_core.algorithm.summaries",
    "Summariser": "dhrag_core.algorithm.summaries",
    "Embedder": "dhrag_core.embedding",
    "FunctionEmbedder": "dhrag_core.embedding",
    "HashingEmbedder": "dhrag_core.embedding",
    "MiniLMEmbedder": "dhrag_core.embedding",
    "l2_normalise": "dhrag_core.embedding",
    "NEW_CHAIN": "dhrag_core.history",
    "AddResult": "dhrag_core.history",
    "ChainPolicy": "dhrag_core.history",
    "HistoryDatabase": "dhrag_core.history",
    "SessionView": "dhrag_core.history",
    "ThreadPolicy": "dhrag_core.history",
    "VectorIndex": "dhrag_core.index",
    "FaissKnowledgeBase": "dhrag_core.knowledge.base",
    "KnowledgeBase": "dhrag_core.knowledge.base",
    "load_kb": "dhrag_core.knowledge.ingest",
    "load_passages": "dhrag_core.knowledge.ingest",
    "LLM": "dhrag_core.llm",
    "LLMError": "dhrag_core.llm",
    "OpenAICompatibleLLM": "dhrag_core.llm",
    "NumpyMiniLMEmbedder": "dhrag_core.numpy_minilm",
    "DHRAG": "dhrag_core.pipeline.engine",
    "ContextItem": "dhrag_core.records",
    "HistoryHit": "dhrag_core.records",
    "Passage": "dhrag_core.records",
    "SelectedTurn": "dhrag_core.records",
    "Selection": "dhrag_core.records",
    "Turn": "dhrag_core.records",
    "Settings": "dhrag_core.settings",
    "DHRAGSettings": "dhrag_core.settings",
    "Ablations": "dhrag_core.settings",
    "Experiments": "dhrag_core.settings",
    "Integration": "dhrag_core.settings",
    "Limits": "dhrag_core.settings",
    "Retrieval": "dhrag_core.settings",
    "Threads": "dhrag_core.settings",
    "Tree": "dhrag_core.settings",
    "Weighting": "dhrag_core.settings",
    "CorruptStoreError": "dhrag_core.store",
    "HistoryStore": "dhrag_core.store",
    "MemoryStore": "dhrag_core.store",
    "PostgresStore": "dhrag_core.store",
    "SQLiteStore": "dhrag_core.store",
    "StaleSessionError": "dhrag_core.store",
    "StoreClosedError": "dhrag_core.store",
    "ClosedError": "dhrag_core.closing",
    "StoreUnavailableError": "dhrag_core.store",
    "open_store": "dhrag_core.store",
}

__version__ = "0.1.0"

__all__ = [
    "DHRAG",
    "LLM",
    "NEW_CHAIN",
    "Ablations",
    "AddResult",
    "Calibration",
    "Candidate",
    "ChainPolicy",
    "ClosedError",
    "ContextItem",
    "CorruptStoreError",
    "DHRAGSettings",
    "Embedder",
    "Experiments",
    "ExtractiveSummariser",
    "FaissKnowledgeBase",
    "FunctionEmbedder",
    "HashingEmbedder",
    "HistoryDatabase",
    "HistoryHit",
    "HistoryStore",
    "Integration",
    "KnowledgeBase",
    "LLMError",
    "LLMRewriter",
    "LightRewriter",
    "Limits",
    "MemoryStore",
    "MiniLMEmbedder",
    "NumpyMiniLMEmbedder",
    "OpenAICompatibleLLM",
    "Passage",
    "PostgresStore",
    "QueryRewriter",
    "Retrieval",
    "Rewrite",
    "SQLiteStore",
    "SelectedTurn",
    "Selection",
    "SessionView",
    "Settings",
    "StaleSessionError",
    "StoreClosedError",
    "StoreUnavailableError",
    "Summariser",
    "ThreadPolicy",
    "Threads",
    "Tree",
    "Turn",
    "VectorIndex",
    "Weighting",
    "__version__",
    "calibrate",
    "integrate",
    "l2_normalise",
    "load_kb",
    "load_passages",
    "open_store",
    "softmax",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dhrag_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
