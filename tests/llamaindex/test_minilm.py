"""The example and the bridges with the real all-MiniLM-L6-v2 model (offline)."""

from __future__ import annotations

import asyncio
import importlib.util
import io
import json
import sys
from importlib import resources
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from dhrag_core import MiniLMEmbedder, Retrieval, Settings
from llamaindex_dhrag import (
    DHRAGChatEngine,
    DHRAGEmbedding,
    LlamaIndexEmbedder,
    VectorStoreKnowledgeBase,
)

pytestmark = pytest.mark.model

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llamaindex_chat_engine.py"
TURNS = (
    "What is the Great Wall of China built out of?",
    "How long is it?",
    "When did the Berlin Wall come down?",
    "How many people died trying to cross it?",
)


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder()


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("llamaindex_chat_engine_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the LLM's annotations through it
    spec.loader.exec_module(module)
    return module


def _docs(folder: Path) -> Path:
    """A slice of the shipped demo passages: two walls and some guinea pigs as distractors."""
    data = resources.files("dhrag_core") / "data" / "demo_kb.jsonl"
    rows = [json.loads(line) for line in data.read_text("utf-8").splitlines()]
    keep = [r for r in rows if r["title"] in {"Great Wall of China", "Berlin Wall"}]
    keep += [r for r in rows if r["title"] == "Guinea pig"][:6]
    for r in keep:
        (folder / f"{r['id']}.txt").write_text(r["text"], encoding="utf-8")
    return folder


def test_example_conversation_with_minilm(minilm: MiniLMEmbedder, tmp_path: Path) -> None:
    out = io.StringIO()
    replies = _example().run(_docs(tmp_path), embedder=minilm, turns=TURNS, out=out)
    wall, length, berlin, died = replies

    assert wall.source_nodes[0].node.metadata["title"] == "Great Wall of China"
    trace = length.sources[0].raw_output
    assert "wall" in trace["rewritten_query"].lower()
    assert trace["history"][0]["query"] == TURNS[0]
    assert [h["turn"] for h in trace["history"]] == [0]  # the first turn, by id
    # the elliptical follow-up finds the length: in the passages the LLM is given (which
    # sentence the extractive stand-in then picks is the stand-in's business)
    assert any("21,196 km" in n.node.get_content() for n in length.source_nodes[:3])
    assert all(n.node.metadata["title"] == "Great Wall of China"
               for n in length.source_nodes[:3])

    assert berlin.source_nodes[0].node.metadata["title"] == "Berlin Wall"
    died_trace = died.sources[0].raw_output
    assert died_trace["history"][0]["query"] == TURNS[2]  # after the topic switch
    assert "berlin" in died_trace["rewritten_query"].lower()
    assert all(n.node.metadata["title"] == "Berlin Wall" for n in died.source_nodes[:3])

    text = out.getvalue()
    assert text.count("rewritten query:") == 4 and "selected history:" in text
    assert "[extractive stand-in LLM]" in text


def test_minilm_embedding_bridge_round_trip(minilm: MiniLMEmbedder) -> None:
    texts = ["How long is the Great Wall of China?", "Guinea pigs sleep in burrows."]
    model = DHRAGEmbedding(minilm)
    assert np.allclose(model.get_text_embedding_batch(texts), minilm.encode(texts), atol=1e-5)
    back = LlamaIndexEmbedder(model)
    assert back.dimension == 384
    assert np.allclose(back.encode(texts), minilm.encode(texts), atol=1e-5)


def test_example_engine_async_follow_up_uses_the_first_turn(
    minilm: MiniLMEmbedder, tmp_path: Path
) -> None:
    example = _example()
    index = example.build_index(_docs(tmp_path), DHRAGEmbedding(minilm))
    engine = DHRAGChatEngine.from_defaults(
        index.as_retriever(similarity_top_k=8), example.ExtractiveLLM(embedder=minilm),
        settings=Settings(retrieval=Retrieval(kb_k=8, context_k=5)),
        context_prompt=example.CONTEXT_PROMPT,
    )
    assert isinstance(engine.engine.knowledge, VectorStoreKnowledgeBase)  # searched by vector
    assert engine.engine.history.embedder is minilm  # the index's model, no second one

    async def main() -> tuple[Any, Any]:
        first = await engine.achat(TURNS[0], session_id="bob")
        return first, await engine.achat(TURNS[1], session_id="bob")

    first, second = asyncio.run(main())
    turn0, turn1 = engine.engine.history.turns("bob")
    assert [p.id for p in turn0.passages] == [n.node.node_id for n in first.source_nodes]
    assert [h["turn"] for h in second.sources[0].raw_output["history"]] == [turn0.index]
    assert second.source_nodes[0].node.metadata["title"] == "Great Wall of China"
    assert turn1.query == TURNS[1]
    with pytest.raises(ValueError, match="no session id"):
        engine.chat(TURNS[0])  # no session named anywhere: an error, not "default"
