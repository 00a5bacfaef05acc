"""The LangChain example's one-call drop-in, with the real MiniLM over a real LangChain vector
store (offline): the second turn's retrieval uses the first turn, by turn and passage ids."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from langchain_core.language_models import FakeListChatModel

from dhrag_core import MiniLMEmbedder
from dhrag_core.app.demo import DEMO_TURNS

pytestmark = pytest.mark.model

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "langchain_lcel_chain.py"
CFG: Any = {"configurable": {"session_id": "alice"}}


@pytest.fixture(scope="module")
def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("langchain_lcel_chain", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def embedder() -> MiniLMEmbedder:
    return MiniLMEmbedder()


def _chat(example: ModuleType, embedder: MiniLMEmbedder) -> Any:
    return example.build_chat(embedder, FakeListChatModel(responses=example.SCRIPTED_ANSWERS))


def _check_follow_up(retriever: Any, first: dict[str, Any], second: dict[str, Any]) -> None:
    turn0, turn1 = retriever.engine.history.turns("alice")
    assert [p.id for p in turn0.passages] == [d.id for d in first["docs"]]  # recorded itself
    assert (turn0.query, turn1.query) == DEMO_TURNS[:2]
    trace = second["docs"][0].metadata["dhrag"]
    assert trace["history_turns"] == [turn0.index]  # the follow-up selected the first turn
    assert trace["rewritten_query"] != DEMO_TURNS[1]
    assert "Great Wall" in second["docs"][0].metadata["title"]
    assert [p.id for p in turn1.passages] == [d.id for d in second["docs"]]


def test_drop_in_sync_invoke_and_stream(example: ModuleType, embedder: MiniLMEmbedder) -> None:
    chat, retriever = _chat(example, embedder)
    assert retriever.engine.history.embedder is embedder  # the store's model, no second one
    first = chat.invoke(DEMO_TURNS[0], CFG)
    second = chat.invoke(DEMO_TURNS[1], CFG)
    _check_follow_up(retriever, first, second)

    chunks = list(chat.stream(DEMO_TURNS[2], CFG))
    assert len(chunks) > 3
    third = retriever.engine.history.turns("alice")[-1]
    assert (third.query, third.response) == (DEMO_TURNS[2], example.SCRIPTED_ANSWERS[2])
    with pytest.raises(ValueError, match="session_id"):
        chat.invoke(DEMO_TURNS[0])  # no session named: an error, not a shared "default"


def test_drop_in_async_ainvoke_and_abatch(example: ModuleType, embedder: MiniLMEmbedder) -> None:
    chat, retriever = _chat(example, embedder)

    async def main() -> None:
        first = await chat.ainvoke(DEMO_TURNS[0], CFG)
        second = await chat.ainvoke(DEMO_TURNS[1], CFG)
        _check_follow_up(retriever, first, second)
        configs: Any = [{"configurable": {"session_id": s}} for s in ("bob", "carol")]
        await chat.abatch([DEMO_TURNS[2], DEMO_TURNS[5]], configs)

    asyncio.run(main())
    history = retriever.engine.history
    assert [t.query for t in history.turns("bob")] == [DEMO_TURNS[2]]
    assert [t.query for t in history.turns("carol")] == [DEMO_TURNS[5]]
