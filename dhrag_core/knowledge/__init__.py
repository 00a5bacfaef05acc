"""Knowledge bases: the ``KnowledgeBase`` protocol, the FAISS one, and building one from files
(``ingest``: documents split into passages; ``embed_cache``: their vectors cached on disk)."""

from dhrag_core.knowledge.base import FaissKnowledgeBase, KnowledgeBase
from dhrag_core.knowledge.ingest import load_kb, load_passages
from dhrag_core.knowledge.path import search_path

__all__ = ["FaissKnowledgeBase", "KnowledgeBase", "load_kb", "load_passages", "search_path"]
