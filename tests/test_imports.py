"""The public surface is pinned, and importing loads no model and no framework."""

from __future__ import annotations

import subprocess
import sys

import dhrag_core

EXPECTED_CORE = {
    "AddResult", "Embedder", "FaissKnowledgeBase", "HashingEmbedder", "HistoryDatabase",
    "HistoryHit", "HistoryStore", "KnowledgeBase", "MemoryStore", "MiniLMEmbedder", "Passage",
    "SQLiteStore", "Settings", "StaleSessionError", "Turn", "VectorIndex",
    "__version__", "l2_normalise", "open_store",
}


def test_core_all_is_pinned() -> None:
    assert set(dhrag_core.__all__) >= EXPECTED_CORE
    for name in dhrag_core.__all__:
        assert hasattr(dhrag_core, name), name


def test_settings_have_a_name_beside_llamaindex_settings() -> None:
    assert dhrag_core.DHRAGSettings is dhrag_core.Settings
    assert "DHRAGSettings" in dhrag_core.__all__


def test_import_loads_no_model_and_no_framework() -> None:
    code = (
        "import sys, dhrag_core\n"
        "heavy = {'torch', 'sentence_transformers', 'langchain_core', 'llama_index'}\n"
        "print(sorted(heavy & set(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
