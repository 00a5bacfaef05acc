"""DHRAGMiddleware in real ``langchain.agents.create_agent`` agents (scripted chat model)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("langchain.agents.middleware")

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from lc_support import (
    FOLLOW_UP,
    PIG_A,
    PIG_Q,
    WALL_A,
    WALL_Q,
    ToolFakeChatModel,
    demo_passages,
)

from dhrag_core import DHRAG, FaissKnowledgeBase, HashingEmbedder
from langchain_dhrag import DHRAGMiddleware, document_to_passage, selection_to_documents


@tool
def word_count(text: str) -> int:
    """Count the words of a text."""
    return len(text.split())


def tool_call(text: str) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": "word_count", "args": {"text": text}, "id": "c1"}])


def scripted(*messages: AIMessage) -> ToolFakeChatModel:
    return ToolFakeChatModel(messages=iter(messages))


def cfg(session_id: str) -> dict[str, Any]:
    return {"configurable": {"session_id": session_id}}


def system_of(prompt: list[BaseMessage]) -> str:
    assert isinstance(prompt[0], SystemMessage)
    return prompt[0].text


def ask(agent: Any, text: str, config: dict[str, Any]) -> Any:
    return agent.invoke({"messages": [HumanMessage(text)]}, config)


@pytest.fixture
def counted(engine: DHRAG) -> Iterator[list[str]]:
    calls: list[str] = []
    select = engine.select

    def spy(session_id: str, query: str, k: int | None = None) -> Any:
        calls.append(query)
        return select(session_id, query, k)

    engine.select = spy  # type: ignore[method-assign]
    yield calls


def test_agent_memory_across_turns(engine: DHRAG, counted: list[str]) -> None:
    model = scripted(tool_call("a b c"), AIMessage(WALL_A), AIMessage("About 21,196 km."))
    agent = create_agent(model, [word_count], system_prompt="You are a guide.",
                         middleware=[DHRAGMiddleware(engine, k=2)])

    first = ask(agent, WALL_Q, cfg("alice"))
    assert first["messages"][-1].text == WALL_A
    assert counted == [WALL_Q]  # one selection for the turn, though the model ran twice
    (turn,) = engine.history.turns("alice")
    assert (turn.query, turn.response) == (WALL_Q, WALL_A)  # the final answer, once
    assert len(turn.passages) == 2

    ask(agent, FOLLOW_UP, cfg("alice"))
    system = system_of(model.seen[-1])
    assert system.startswith("You are a guide.")
    assert f"User: {WALL_Q}" in system and f"Assistant: {WALL_A}" in system
    assert "made standalone: How long is " in system and "standalone: How long is it?" not in system
    assert "Retrieved passages:\n[1] " in system
    assert [t.query for t in engine.history.turns("alice")] == [WALL_Q, FOLLOW_UP]


def test_the_system_message_shows_the_passage_titles() -> None:
    """Passages of a dhrag knowledge base carry their title in ``Passage.title`` (in the
    documents: the DH-RAG trace), not in their metadata: the agent is shown it anyway."""
    emb = HashingEmbedder()
    engine = DHRAG(FaissKnowledgeBase(demo_passages(), emb), embedder=emb)
    docs = selection_to_documents(engine.preview("alice", WALL_Q, k=2))
    assert all("title" not in d.metadata for d in docs)
    titles = [d.metadata["dhrag"]["title"] for d in docs]
    assert titles[0] == "Great Wall of China" and all(titles)

    model = scripted(AIMessage(WALL_A))
    agent = create_agent(model, [], middleware=[DHRAGMiddleware(engine, k=2)])
    ask(agent, WALL_Q, cfg("alice"))
    shown = system_of(model.seen[-1]).split("Retrieved passages:\n")[1]
    assert shown == "\n".join(f"[{i}] {t}: {d.page_content}"
                              for i, (t, d) in enumerate(zip(titles, docs, strict=True), 1))
    assert document_to_passage(docs[0]).title == "Great Wall of China"  # and back


def test_a_message_over_the_query_limit_is_cut_with_a_warning_and_the_run_survives(
    engine: DHRAG,
) -> None:
    model = scripted(AIMessage(WALL_A))
    agent = create_agent(model, [], middleware=[DHRAGMiddleware(engine)])
    pasted = WALL_Q + " " + "and more context " * 600  # 10,000+ characters
    with pytest.warns(UserWarning, match=r"cut from 10,\d{3} .*max_query_chars") as said:
        ask(agent, pasted, cfg("long"))
    assert sum("cut from" in str(w.message) for w in said) == 1  # once per message
    (turn,) = engine.history.turns("long")
    assert turn.query.startswith(WALL_Q)
    assert len(turn.query) <= engine.settings.limits.max_query_chars
    assert turn.response == WALL_A and turn.passages  # the run recorded, with its passages


def test_sessions_do_not_mix(engine: DHRAG) -> None:
    model = scripted(AIMessage(WALL_A), AIMessage(PIG_A))
    agent = create_agent(model, [], middleware=[DHRAGMiddleware(engine)])
    ask(agent, WALL_Q, cfg("alice"))
    ask(agent, PIG_Q, cfg("bob"))
    assert WALL_Q not in system_of(model.seen[-1])
    assert [t.query for t in engine.history.turns("bob")] == [PIG_Q]
    assert [t.query for t in engine.history.turns("alice")] == [WALL_Q]


def test_checkpointed_thread_sees_only_the_current_turn(engine: DHRAG) -> None:
    model = scripted(AIMessage(WALL_A), AIMessage("About 21,196 km."))
    agent = create_agent(model, [], middleware=[DHRAGMiddleware(engine, include_context=False)],
                         checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "t1"}}
    ask(agent, WALL_Q, thread)
    out = ask(agent, FOLLOW_UP, thread)

    assert len(out["messages"]) == 4  # the checkpointed thread keeps everything ...
    prompt = model.seen[-1]
    assert [type(m) for m in prompt] == [SystemMessage, HumanMessage]  # ... the model does not
    assert prompt[1].text == FOLLOW_UP
    assert f"User: {WALL_Q}" in system_of(prompt)  # the earlier turn comes from DH-RAG
    assert "Retrieved passages" not in system_of(prompt)
    assert engine.history.size("t1") == 2  # thread_id is the session


def test_keep_the_whole_thread_when_asked(engine: DHRAG) -> None:
    model = scripted(AIMessage(WALL_A), AIMessage("About 21,196 km."))
    agent = create_agent(model, [], checkpointer=InMemorySaver(),
                         middleware=[DHRAGMiddleware(engine, current_turn_only=False)])
    thread = {"configurable": {"thread_id": "t1"}}
    ask(agent, WALL_Q, thread)
    ask(agent, FOLLOW_UP, thread)
    assert [m.text for m in model.seen[-1][1:]] == [WALL_Q, WALL_A, FOLLOW_UP]


@dataclass
class Ctx:
    session_id: str


def test_session_from_runtime_context_and_no_recording(engine: DHRAG) -> None:
    model = scripted(AIMessage(WALL_A))
    agent = create_agent(model, [], context_schema=Ctx,
                         middleware=[DHRAGMiddleware(engine, record_turns=False)])
    agent.invoke({"messages": [HumanMessage(WALL_Q)]}, cfg("from-config"),
                 context=Ctx(session_id="from-context"))
    assert engine.history.size("from-context") == 0  # record_turns=False
    assert engine.history.size("from-config") == 0
    # the selection was made for the context's session (and waits there, unrecorded)
    assert engine.pending("from-context", WALL_Q) is not None


async def test_async_agent(engine: DHRAG) -> None:
    model = scripted(tool_call("x y"), AIMessage(WALL_A), AIMessage("About 21,196 km."))
    agent = create_agent(model, [word_count], middleware=[DHRAGMiddleware(engine)])
    await agent.ainvoke({"messages": [HumanMessage(WALL_Q)]}, cfg("alice"))
    await agent.ainvoke({"messages": [HumanMessage(FOLLOW_UP)]}, cfg("alice"))
    assert [t.response for t in engine.history.turns("alice")] == [WALL_A, "About 21,196 km."]
    assert f"User: {WALL_Q}" in system_of(model.seen[-1])


def test_bad_arguments(engine: DHRAG) -> None:
    with pytest.raises(TypeError, match="engine"):
        DHRAGMiddleware("engine")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="k must be"):
        DHRAGMiddleware(engine, k=0)
    with pytest.raises(ValueError, match="session_id"):
        DHRAGMiddleware(engine, session_id="")


def test_a_run_without_a_session_is_an_error(engine: DHRAG) -> None:
    agent = create_agent(scripted(AIMessage(WALL_A)), [], middleware=[DHRAGMiddleware(engine)])
    with pytest.raises(ValueError, match=r"no session id.*DHRAGMiddleware\(session_id"):
        agent.invoke({"messages": [HumanMessage(WALL_Q)]})
    assert engine.history.size("default") == 0
    fixed = create_agent(scripted(AIMessage(WALL_A)), [],
                         middleware=[DHRAGMiddleware(engine, session_id="kiosk")])
    fixed.invoke({"messages": [HumanMessage(WALL_Q)]})  # a default chosen explicitly
    assert engine.history.size("kiosk") == 1
