"""The adapter's public surface is pinned; importing it loads no model; no asyncio.run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import llamaindex_dhrag

EXPECTED = {
    "DHRAGChatEngine",
    "DHRAGEmbedding",
    "DHRAGMemoryBlock",
    "DHRAGRetriever",
    "LlamaIndexEmbedder",
    "LlamaIndexLLM",
    "RetrieverKnowledgeBase",
    "VectorStoreKnowledgeBase",
    "build_dhrag",
    "node_to_passage",
    "selection_to_nodes",
    "selection_trace",
}


def test_all_is_pinned() -> None:
    assert sorted(llamaindex_dhrag.__all__) == sorted(EXPECTED)  # exactly, no name twice
    for name in llamaindex_dhrag.__all__:
        assert hasattr(llamaindex_dhrag, name), name


def test_import_loads_no_model() -> None:
    code = (
        "import sys, llamaindex_dhrag\n"
        "heavy = {'torch', 'sentence_transformers', 'openai', 'llama_index.llms.openai'}\n"
        "print(sorted(heavy & set(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_library_code_never_starts_an_event_loop() -> None:
    package = Path(llamaindex_dhrag.__file__).parent
    for path in package.glob("*.py"):
        text = path.read_text("utf-8")
        assert "asyncio.run(" not in text, path
        assert "asyncio_run" not in text, path
        assert "run_until_complete" not in text, path


def test_package_is_typed() -> None:
    assert (Path(llamaindex_dhrag.__file__).parent / "py.typed").is_file()
