"""The public surface of langchain_dhrag is pinned, and importing it stays light."""

from __future__ import annotations

import subprocess
import sys

import langchain_dhrag

EXPECTED = {
    "TRACE_KEY",
    "DHRAGChatMessageHistory",
    "DHRAGEmbeddings",
    "DHRAGMemory",
    "DHRAGMemoryRunnable",
    "DHRAGMiddleware",
    "DHRAGRetriever",
    "LangChainEmbedder",
    "LangChainLLM",
    "RetrieverKnowledgeBase",
    "VectorStoreKnowledgeBase",
    "document_to_passage",
    "format_documents",
    "selection_to_documents",
    "with_dhrag_memory",
}


def test_all_is_pinned() -> None:
    assert sorted(langchain_dhrag.__all__) == sorted(EXPECTED)  # exactly, no name twice
    for name in langchain_dhrag.__all__:
        assert getattr(langchain_dhrag, name) is not None, name


def test_unknown_attribute() -> None:
    try:
        langchain_dhrag.NoSuchThing  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("expected AttributeError")


def test_import_loads_no_model_and_no_agent_framework() -> None:
    code = (
        "import sys, langchain_dhrag\n"
        "heavy = {'torch', 'sentence_transformers', 'langchain', 'langgraph', 'openai'}\n"
        "print(sorted(heavy & set(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
