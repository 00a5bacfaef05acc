"""DHRAGChatEngine over a real VectorStoreIndex: history makes elliptical follow-ups work."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from llama_index.core import Settings as LlamaSettings
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.chat_engine.types import AgentChatResponse, BaseChatEngine
from llama_index.core.schema import MetadataMode

from dhrag_core import Experiments, Settings
from llamaindex_dhrag import DHRAGChatEngine

WALL = "What is the Great Wall of China built out of?"
PIGS = "Where do guinea pigs sleep in the wild?"

Make = Callable[..., DHRAGChatEngine]


def _ids(reply: AgentChatResponse) -> list[str]:
    return [n.node.node_id for n in reply.source_nodes]


def test_is_a_llamaindex_chat_engine(make_engine: Make) -> None:
    assert isinstance(make_engine(), BaseChatEngine)


def test_elliptical_follow_up_is_answered_from_the_right_passage(make_engine: Make,
                                                                 llm: Any) -> None:
    engine = make_engine()
    first = engine.chat(WALL)
    assert _ids(first)[0] == "wall-material"
    assert "stone, brick" in first.response

    follow = engine.chat("How long is it?")

    assert _ids(follow)[0] == "wall-length"
    assert "21,196 km" in follow.response
    trace = follow.sources[0].raw_output
    assert trace["rewritten_query"] != "How long is it?"
    assert "wall" in trace["rewritten_query"].lower()
    assert [h["query"] for h in trace["history"]] == [WALL]
    assert trace["history"][0]["weight"] > 0
    # the LLM saw the raw message, the selected earlier turn (both sides) and the context
    prompt = llm.prompts[-1]
    assert prompt.rstrip().endswith("user: How long is it?\nassistant:")
    assert WALL in prompt and first.response in prompt
    assert "21,196 km long" in prompt


def test_without_history_the_same_follow_up_is_not_answered(make_engine: Make) -> None:
    reply = make_engine().chat("How long is it?")
    assert _ids(reply)[0] != "wall-length"
    assert "21,196" not in reply.response
    assert reply.sources[0].raw_output["history"] == []


def test_topic_switch_follows_the_new_topic(make_engine: Make) -> None:
    engine = make_engine()
    engine.chat(WALL)
    engine.chat("How long is it?")
    engine.chat(PIGS)

    reply = engine.chat("How many years do they live?")

    assert all(i.startswith("pig-") for i in _ids(reply)[:2])
    assert "guinea pigs" in reply.response.lower()
    assert "wall" not in reply.sources[0].raw_output["rewritten_query"].lower()
    assert PIGS in [h["query"] for h in reply.sources[0].raw_output["history"]]


def test_response_carries_the_trace(make_engine: Make) -> None:
    # history passages win ties
    engine = make_engine(settings=Settings(experiments=Experiments(history_bonus=0.1)))
    engine.chat(WALL)
    reply = engine.chat("How long is it?")

    (tool,) = reply.sources
    assert tool.tool_name == "dhrag_context"
    assert tool.raw_input == {"message": "How long is it?", "session_id": "default"}
    assert "rewritten query:" in tool.content
    trace = tool.raw_output
    assert reply.metadata == {"dhrag": trace}
    assert set(trace) == {"session_id", "query", "rewritten_query", "history", "context"}
    assert len(trace["context"]) == len(reply.source_nodes)

    scores = [float(n.score or 0.0) for n in reply.source_nodes]
    assert scores == sorted(scores, reverse=True)
    assert 0.99 < sum(scores) <= 1.0 + 1e-6  # softmax weights over all candidates, top-k kept
    for node, row in zip(reply.source_nodes, trace["context"], strict=True):
        meta = node.node.metadata["dhrag"]
        assert meta["weight"] == row["weight"] == pytest.approx(node.score, abs=1e-4)
        assert meta["source"] in {"kb", "history"}
        assert meta["rewritten_query"] == trace["rewritten_query"]
        # the trace stays out of what an LLM or an embedder would read
        assert "rewritten_query" not in node.node.get_content(metadata_mode=MetadataMode.LLM)
    history_items = [n for n in reply.source_nodes
                     if n.node.metadata["dhrag"]["source"] == "history"]
    assert history_items and all(n.node.metadata["dhrag"]["turn"] == 0 for n in history_items)


def test_chat_history_lists_stored_turns_and_reset_clears_the_session(make_engine: Make) -> None:
    engine = make_engine()
    a = engine.chat(WALL)
    engine.chat(PIGS, session_id="bob")

    history = engine.chat_history
    assert [(m.role, m.content) for m in history] == [
        (MessageRole.USER, WALL), (MessageRole.ASSISTANT, a.response)
    ]
    assert engine.get_chat_history("bob")[0].content == PIGS

    engine.reset()
    assert engine.chat_history == []
    assert len(engine.get_chat_history("bob")) == 2  # other sessions are kept


def test_sessions_do_not_share_history(make_engine: Make) -> None:
    engine = make_engine()
    engine.chat(WALL, session_id="alice")
    reply = engine.chat("How long is it?", session_id="bob")
    assert reply.sources[0].raw_output["history"] == []
    assert reply.sources[0].raw_output["session_id"] == "bob"
    assert engine.engine.history.size("alice") == 1


def test_chat_history_argument_replaces_the_session_history(make_engine: Make) -> None:
    engine = make_engine()
    engine.chat(PIGS)
    seed = [
        ChatMessage(role=MessageRole.SYSTEM, content="Be brief."),
        ChatMessage(role=MessageRole.USER, content=WALL),
        ChatMessage(role=MessageRole.ASSISTANT, content="Stone, brick, earth and wood."),
    ]

    with pytest.warns(UserWarning, match="replaced the 1 stored turn"):
        reply = engine.chat("How long is it?", chat_history=seed)

    assert "21,196 km" in reply.response
    assert [m.content for m in engine.chat_history] == [
        WALL, "Stone, brick, earth and wood.", "How long is it?", reply.response
    ]


def test_from_defaults_seeds_chat_history(make_engine: Make) -> None:
    seed = [ChatMessage(role="user", content=WALL), ChatMessage(role="assistant", content="Stone.")]
    engine = make_engine(chat_history=seed, session_id="carol")
    assert engine.session_id == "carol"
    assert [m.content for m in engine.chat_history] == [WALL, "Stone."]


def test_sqlite_history_survives_a_restart(make_engine: Make, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'history.db'}"
    first = make_engine(store=url)
    first.chat(WALL)
    first.engine.history.close()

    again = make_engine(store=url)
    assert again.chat_history[0].content == WALL
    assert "21,196 km" in again.chat("How long is it?").response


def _is_rewrite(prompt: str) -> bool:
    # the core LLMRewriter's prompt, through the chat API (``assistant:`` closes it)
    return prompt.rstrip().removesuffix("assistant:").rstrip().endswith("Standalone question:")


def _rewrite_or_answer(prompt: str) -> str:
    if _is_rewrite(prompt):
        return 'Standalone question: "How long is the Great Wall of China?"'
    m = re.search(r"\[1\][^\n]*\n([^\n]+)", prompt)
    return m.group(1).strip() if m else "I don't know."


def test_llm_rewriter_rewrites_with_the_engine_llm(make_engine: Make, make_llm: Any) -> None:
    llm = make_llm(answer_fn=_rewrite_or_answer)
    engine = make_engine(llm=llm, rewriter="llm")
    engine.chat(WALL)
    reply = engine.chat("How long is it?")
    assert reply.sources[0].raw_output["rewritten_query"] == "How long is the Great Wall of China?"
    rewrite_prompt = next(p for p in llm.prompts if _is_rewrite(p))
    assert WALL in rewrite_prompt and "stone, brick" in rewrite_prompt.lower()  # both sides
    assert "21,196 km" in reply.response


def test_system_prompt_and_custom_context_prompt(make_engine: Make, llm: Any) -> None:
    engine = make_engine(
        system_prompt="You are terse.",
        context_prompt="Q: {query}\nStandalone: {rewritten_query}\nDocs:\n{context_str}",
    )
    engine.chat(WALL)
    engine.chat("How long is it?")
    prompt = llm.prompts[-1]
    assert prompt.startswith("system: You are terse.\n\nQ: How long is it?\nStandalone: How long")
    assert "Docs:\n[1]" in prompt


def test_k_limits_the_context(make_engine: Make) -> None:
    reply = make_engine(k=2).chat(WALL)
    assert len(reply.source_nodes) == 2


def test_condense_plus_context_without_condensing_misses_what_dhrag_finds(
    make_engine: Make, index: Any, llm: Any, memories: Callable[..., Any]
) -> None:
    from llama_index.core.chat_engine import CondensePlusContextChatEngine

    plain = CondensePlusContextChatEngine.from_defaults(
        index.as_retriever(similarity_top_k=4), llm=llm, skip_condense=True, memory=memories()
    )
    plain.chat(WALL)
    plain_reply = plain.chat("How long is it?")
    assert "wall-length" not in [n.node.node_id for n in plain_reply.source_nodes[:1]]
    assert "21,196" not in plain_reply.response

    engine = make_engine()
    engine.chat(WALL)
    follow = engine.chat("How long is it?")
    assert _ids(follow)[0] == "wall-length" and "21,196 km" in follow.response


def test_prompt_and_trace_text_count_turns_from_1(make_engine: Make, llm: Any) -> None:
    # history passages win ties
    engine = make_engine(settings=Settings(experiments=Experiments(history_bonus=0.1)))
    engine.chat(WALL)
    reply = engine.chat("How long is it?")
    # the first turn is turn 1 in what the LLM reads and in the trace text, as in /trace
    assert "shown at turn 1," in llm.prompts[-1] and "turn 0" not in llm.prompts[-1]
    assert "history turn 1 (weight" in reply.sources[0].content
    assert reply.sources[0].raw_output["history"][0]["turn"] == 0  # the record's Turn.index


def test_from_defaults_falls_back_to_llamaindex_settings_llm(
    index: Any, llm: Any, hashing: Any
) -> None:
    LlamaSettings.llm = llm  # restored by the autouse fixture
    engine = DHRAGChatEngine.from_defaults(index.as_retriever(similarity_top_k=5),
                                           embedder=hashing, search="text", session_id="s")
    assert engine.llm is llm
    assert "stone, brick" in engine.chat(WALL).response


def test_from_defaults_without_any_llm_says_how_to_give_one(
    index: Any, hashing: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_default(self: Any) -> None:
        raise ImportError("llama-index-llms-openai is not installed")

    monkeypatch.setattr(type(LlamaSettings), "llm", property(no_default))
    with pytest.raises(ValueError, match=r"no llm: pass llm=\.\.\. or set llama_index\.core\."
                                         r"Settings\.llm \(.*not installed"):
        DHRAGChatEngine.from_defaults(index.as_retriever(), embedder=hashing)
