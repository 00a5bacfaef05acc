"""The public surface is pinned, and importing loads no model and no framework."""

from __future__ import annotations

import subprocess
import sys

import dhrag_core

EXPECTED_CORE = {
    "Ablations", "AddResult", "Calibration", "Candidate", "ChainPolicy", "ClosedError",
    "ContextItem", "CorruptStoreError", "DHRAG", "DHRAGSettings", "Embedder", "Experiments",
    "ExtractiveSummariser", "FaissKnowledgeBase", "FunctionEmbedder", "HashingEmbedder",
    "HistoryDatabase", "HistoryHit", "HistoryStore", "Integration", "KnowledgeBase", "LLM",
    "LLMError", "LLMRewriter", "LightRewriter", "Limits", "MemoryStore", "MiniLMEmbedder",
    "NEW_CHAIN", "NumpyMiniLMEmbedder", "OpenAICompatibleLLM", "Passage", "PostgresStore",
    "QueryRewriter", "Retrieval", "Rewrite", "SQLiteStore", "SelectedTurn", "Selection",
    "SessionView", "Settings", "StaleSessionError", "StoreClosedError", "StoreUnavailableError",
    "Summariser", "ThreadPolicy", "Threads", "Tree", "Turn", "VectorIndex", "Weighting",
    "__version__", "calibrate", "integrate", "l2_normalise", "load_kb", "load_passages",
    "open_store", "softmax",
}


def test_core_all_is_pinned() -> None:
    assert set(dhrag_core.__all__) == EXPECTED_CORE
    assert len(dhrag_core.__all__) == len(EXPECTED_CORE), "a name is listed twice"
    for name in dhrag_core.__all__:
        assert hasattr(dhrag_core, name), name


def test_settings_have_a_name_beside_llamaindex_settings() -> None:
    assert dhrag_core.DHRAGSettings is dhrag_core.Settings
    assert "DHRAGSettings" in dhrag_core.__all__


def test_import_loads_no_model_and_no_framework() -> None:
    code = (
        "import sys, dhrag_core\n"
        "heavy = {'torch', 'sentence_transformers', 'langchain_core', 'llama_index',"
        " 'tokenizers', 'safetensors'}\n"
        "print(sorted(heavy & set(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# The folders of dhrag_core are layers; a module imports only from its own layer or below.
_LAYERS = {"": 0, "algorithm": 1, "store": 1, "history": 2, "knowledge": 2, "pipeline": 3,
           "app": 4}


def _layer(module: str) -> str:
    """The layer of ``dhrag_core.X.Y``: its folder, or "" for a top-level module."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[1] in _LAYERS else ""


def test_core_layers_import_only_downward() -> None:
    import ast
    from pathlib import Path

    root = Path(dhrag_core.__file__).parent
    wrong = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).with_suffix("")
        module = ".".join(rel.parts).removesuffix(".__init__")
        if module == "dhrag_core":
            continue  # the facade re-exports every layer
        here = _layer(module + ".x" if path.name == "__init__.py" else module)
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                if not name.startswith("dhrag_core."):
                    continue
                there = _layer(name + ".x" if name.count(".") == 1 and name.split(".")[1]
                               in _LAYERS else name)
                if there != here and (_LAYERS[there] >= _LAYERS[here]):
                    wrong.append(f"{module} imports {name}")
    assert not wrong, wrong


def _benchmark_imports() -> dict[str, set[str]]:
    """benchmarks module -> the benchmarks modules it imports (anywhere in its body)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "benchmarks"
    graph: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).with_suffix("")
        module = ".".join(rel.parts).removesuffix(".__init__")
        found = graph.setdefault(module, set())
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found.update(n for n in names if n.startswith("benchmarks.") and n != module)
    return graph


def test_no_benchmark_module_imports_the_command_line_entry_point() -> None:
    graph = _benchmark_imports()
    assert "benchmarks.__main__" in graph
    assert not [m for m, deps in graph.items() if "benchmarks.__main__" in deps]


def test_benchmark_modules_import_each_other_without_a_cycle() -> None:
    graph = _benchmark_imports()
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def cycle_from(module: str, path: list[str]) -> list[str] | None:
        state[module] = 1
        for dep in sorted(graph.get(module, ())):
            if state.get(dep) == 1:
                return [*path, module, dep]
            if dep not in state and (found := cycle_from(dep, [*path, module])):
                return found
        state[module] = 2
        return None

    for module in sorted(graph):
        found = cycle_from(module, []) if module not in state else None
        assert found is None, " -> ".join(found or [])
