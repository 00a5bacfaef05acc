"""Bad input fails early with a TypeError/ValueError naming the argument; nothing is stored."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.base.llms.types import ChatMessage

from dhrag_core import HashingEmbedder
from llamaindex_dhrag import DHRAGChatEngine

Make = Callable[..., DHRAGChatEngine]


@pytest.mark.parametrize(("message", "error", "match"), [
    (None, TypeError, "message must be a str, got None"),
    (b"How long?", TypeError, "message must be a str, got bytes"),
    (42, TypeError, "message must be a str, got int"),
    ("", ValueError, "message must not be empty"),
    ("   \n", ValueError, "message must not be empty"),
])
async def test_bad_messages(make_engine: Make, message: Any, error: type[Exception],
                            match: str) -> None:
    engine = make_engine()
    with pytest.raises(error, match=match):
        engine.chat(message)
    with pytest.raises(error, match=match):
        engine.stream_chat(message)
    with pytest.raises(error, match=match):
        await engine.achat(message)
    with pytest.raises(error, match=match):
        await engine.astream_chat(message)
    assert engine.engine.history.size("default") == 0


async def test_a_long_or_unclean_message_is_cleaned_with_a_warning(make_engine: Make) -> None:
    engine = make_engine()
    for message, said in ((("word " * 2_000).strip(), "cut from 9,999"),
                          ("bad \ud800 text", "lone surrogates")):
        with pytest.warns(UserWarning, match=said):
            engine.chat(message)
        with pytest.warns(UserWarning, match=said):
            await engine.achat(message)
    queries = [t.query for t in engine.engine.history.turns("default")]
    assert "bad \ufffd text" in queries
    assert all(len(q) <= engine.engine.settings.limits.max_query_chars for q in queries)


@pytest.mark.parametrize(("session_id", "error"), [("", ValueError), (7, TypeError),
                                                   ("s" * 300, ValueError)])
def test_bad_session_ids(make_engine: Make, session_id: Any, error: type[Exception]) -> None:
    engine = make_engine()
    with pytest.raises(error, match="session_id"):
        engine.chat("Hi?", session_id=session_id)
    with pytest.raises(error, match="session_id"):
        make_engine(session_id=session_id)
    with pytest.raises(error, match="session_id"):
        engine.reset(session_id)


def test_bad_chat_history(make_engine: Make) -> None:
    engine = make_engine()
    engine.chat("What is the Great Wall of China built out of?")
    with pytest.raises(TypeError, match="messages must be a list of ChatMessage"):
        engine.chat("How long?", chat_history="user: hi")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"messages\[1\] must be a ChatMessage"):
        engine.chat("How long?", chat_history=[ChatMessage(role="user", content="a"),
                                               {"role": "user"}])  # type: ignore[list-item]
    assert engine.engine.history.size("default") == 1  # the stored history is untouched


def test_bad_constructor_arguments(make_engine: Make, index: VectorStoreIndex, llm: Any,
                                   hashing: HashingEmbedder) -> None:
    rag = make_engine().engine
    with pytest.raises(TypeError, match=r"engine must be a dhrag_core\.DHRAG"):
        DHRAGChatEngine(index, llm)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="llm must be a llama_index LLM"):
        DHRAGChatEngine(rag, None)
    with pytest.raises(TypeError, match="llm must be a llama_index LLM"):
        DHRAGChatEngine.from_defaults(index.as_retriever(), "gpt-4o")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="retriever must be"):
        DHRAGChatEngine.from_defaults(index, llm, embedder=hashing)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="retriever must be"):  # named before the missing LLM
        DHRAGChatEngine.from_defaults(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="context_str"):
        DHRAGChatEngine(rag, llm, context_prompt="No context here: {query}")
    with pytest.raises(TypeError, match="context_prompt must be"):
        DHRAGChatEngine(rag, llm, context_prompt=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="system_prompt must be"):
        DHRAGChatEngine(rag, llm, system_prompt=["be nice"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="k must be"):
        DHRAGChatEngine(rag, llm, k=0)
    with pytest.raises(TypeError, match="k must be"):
        DHRAGChatEngine(rag, llm, k="3")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="settings must be"):
        make_engine(settings={"alpha": 0.5})


def test_llm_failure_propagates_and_stores_nothing(make_engine: Make, make_llm: Any) -> None:
    engine = make_engine(llm=make_llm(fail=True))
    with pytest.raises(RuntimeError, match="scripted LLM failure"):
        engine.chat("What is the Great Wall of China built out of?")
    assert engine.engine.history.size("default") == 0
