"""The LlamaIndex example without the model: it says what it embeds before it embeds."""

from __future__ import annotations

import importlib.util
import io
import sys
from pathlib import Path
from types import ModuleType

import numpy as np

from dhrag_core import FunctionEmbedder, HashingEmbedder
from llamaindex_dhrag import DHRAGEmbedding

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llamaindex_chat_engine.py"


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("llamaindex_chat_engine_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the LLM's annotations through it
    spec.loader.exec_module(module)
    return module


def test_build_index_says_how_many_chunks_it_embeds_before_embedding(tmp_path: Path) -> None:
    for i in range(5):
        (tmp_path / f"{i}.txt").write_text(f"Passage {i} about the Great Wall.", "utf-8")
    out = io.StringIO()
    hashing = HashingEmbedder(dimension=64)
    said_before: list[str] = []

    def encode(texts: list[str]) -> np.ndarray:
        said_before.append(out.getvalue())
        return hashing.encode(texts)

    index = _example().build_index(tmp_path, DHRAGEmbedding(FunctionEmbedder(encode, 64)),
                                   out)
    assert len(index.docstore.docs) == 5
    line = f"embedding 5 chunks from {tmp_path} ...\n"
    assert out.getvalue() == line
    assert said_before and said_before[0] == line  # on screen before the first encode


def test_stand_in_llm_answers_the_standalone_question_not_the_bare_message() -> None:
    prompt = (
        "Standalone question: How long is the Great Wall of China?\n\n"
        "Documents:\n[1] Notes (kb, weight 0.60)\n"
        "It is not long before the pandas eat bamboo again. "
        "The Great Wall of China measures 21,196 km with all of its branches.\n\n"
        "End of documents.\n"
        "user: How long is it?"
    )
    llm = _example().ExtractiveLLM(embedder=HashingEmbedder(dimension=256))
    answer = llm.complete(prompt).text
    assert answer.startswith("[extractive stand-in LLM]")
    assert "21,196 km" in answer
