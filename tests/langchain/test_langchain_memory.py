"""DHRAGMemory (classic memory), DHRAGChatMessageHistory, and the with_dhrag_memory drop-in
with the selected turns as the prompt's history."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.documents import Document
from langchain_core.language_models import FakeListChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore
from lc_support import FOLLOW_UP, PIG_A, PIG_Q, WALL_A, WALL_Q, ToolFakeChatModel, hash_engine

from dhrag_core import DHRAG
from langchain_dhrag import (
    DHRAGChatMessageHistory,
    DHRAGMemory,
    DHRAGRetriever,
    format_documents,
    with_dhrag_memory,
)

TOPICS = [
    (WALL_Q, WALL_A),
    (PIG_Q, PIG_A),
    ("What do guinea pigs eat?", "Hay, fresh vegetables and vitamin C pellets."),
    ("When did the Berlin Wall come down?", "On 9 November 1989."),
    ("How old do guinea pigs get?", "Usually four to eight years."),
]


def fill(memory: DHRAGMemory, turns: list[tuple[str, str]] = TOPICS) -> None:
    for q, a in turns:
        memory.load_memory_variables({"input": q})
        memory.save_context({"input": q}, {"output": a})


def test_load_returns_the_selected_history_not_the_buffer(engine: DHRAG) -> None:
    memory = DHRAGMemory(engine=engine, session_id="alice")
    fill(memory)
    assert engine.history.size("alice") == len(TOPICS)
    query = "Who was the Great Wall of China built to keep out?"

    out = memory.load_memory_variables({"input": query})

    assert set(out) == {"history", "rewritten_query"}
    history = out["history"]
    selected = engine.select("alice", query).history
    shown = [q for q, _ in TOPICS if f"Human: {q}\n" in history]
    assert sorted(shown) == sorted(s.turn.query for s in selected)
    assert 0 < len(shown) < len(TOPICS)  # the selection, not the whole buffer
    assert f"Human: {WALL_Q}\nAI: {WALL_A}" in history  # the turn this query returns to
    # oldest first, whatever the selection order
    assert [history.index(q) for q in shown] == sorted(history.index(q) for q in shown)
    assert out["rewritten_query"].startswith(query)


def test_elliptical_input_gets_a_rewritten_query(engine: DHRAG) -> None:
    memory = DHRAGMemory(engine=engine, session_id="default")
    fill(memory, [(WALL_Q, WALL_A)])
    out = memory.load_memory_variables({"input": FOLLOW_UP})
    assert out["rewritten_query"] != FOLLOW_UP
    assert "wall" in out["rewritten_query"].lower()


def test_save_stores_input_passages_and_output(engine: DHRAG) -> None:
    memory = DHRAGMemory(engine=engine, session_id="alice", context_key="context", k=3)
    loaded = memory.load_memory_variables({"input": WALL_Q})
    memory.save_context({"input": WALL_Q}, {"output": WALL_A})

    (turn,) = engine.history.turns("alice")
    assert (turn.query, turn.response) == (WALL_Q, WALL_A)
    assert len(loaded["context"]) == 3
    assert [p.id for p in turn.passages] == [d.id for d in loaded["context"]]


def test_save_with_passages_key_and_without_a_load(engine: DHRAG) -> None:
    memory = DHRAGMemory(engine=engine, passages_key="source_documents", session_id="default")
    memory.save_context(
        {"question": PIG_Q},
        {"answer": PIG_A, "source_documents": [Document("Cavies live in burrows.", id="c")]},
    )
    memory.save_context({"question": WALL_Q}, {"answer": WALL_A})

    first, second = engine.history.turns("default")
    assert (first.query, first.response) == (PIG_Q, PIG_A)
    assert [p.id for p in first.passages] == ["c"]
    assert second.passages == ()  # nothing was selected or given for it


def test_memory_shares_the_retrievers_selection(engine: DHRAG) -> None:
    retriever = DHRAGRetriever(engine=engine, k=2)
    memory = DHRAGMemory(engine=engine, session_id="alice")
    docs = retriever.invoke(WALL_Q, config={"configurable": {"session_id": "alice"}})
    memory.save_context({"input": WALL_Q}, {"output": WALL_A})
    assert [p.id for p in engine.history.turns("alice")[0].passages] == [d.id for d in docs]


def test_clear_and_session_isolation(engine: DHRAG) -> None:
    alice = DHRAGMemory(engine=engine, session_id="alice")
    bob = DHRAGMemory(engine=engine, session_id="bob")
    fill(alice, TOPICS[:2])
    fill(bob, TOPICS[2:3])

    bob_history = bob.load_memory_variables({"input": WALL_Q})["history"]
    assert WALL_Q not in bob_history and TOPICS[2][0] in bob_history

    alice.clear()
    assert engine.history.size("alice") == 0
    assert engine.history.size("bob") == 1
    assert alice.load_memory_variables({"input": WALL_Q})["history"] == ""


def test_session_from_inputs(engine: DHRAG) -> None:
    memory = DHRAGMemory(engine=engine)
    memory.load_memory_variables({"input": WALL_Q, "session_id": "carol"})
    memory.save_context({"input": WALL_Q, "session_id": "carol"}, {"output": WALL_A})
    assert engine.history.size("carol") == 1
    with pytest.raises(ValueError, match=r"session_id.*DHRAGMemory\(session_id"):
        memory.save_context({"input": WALL_Q}, {"output": WALL_A})  # no session anywhere
    assert engine.history.size("default") == 0


def test_return_messages(engine: DHRAG) -> None:
    memory = DHRAGMemory(engine=engine, return_messages=True, memory_key="chat_history",
                         session_id="default")
    fill(memory, [(WALL_Q, WALL_A)])
    msgs = memory.load_memory_variables({"input": FOLLOW_UP})["chat_history"]
    assert msgs == [HumanMessage(WALL_Q), AIMessage(WALL_A)]
    assert memory.memory_variables == ["chat_history", "rewritten_query"]


def test_works_inside_a_classic_chain(engine: DHRAG) -> None:
    from langchain_classic.chains import LLMChain

    prompt = ChatPromptTemplate.from_messages([
        ("system", "Conversation so far:\n{history}\nStandalone question: {rewritten_query}"),
        ("human", "{input}"),
    ])
    llm = FakeListChatModel(responses=[WALL_A, "About 21,196 km."])
    memory = DHRAGMemory(engine=engine, session_id="alice")
    with pytest.warns(Warning):  # LLMChain itself is deprecated upstream
        chain = LLMChain(llm=llm, prompt=prompt, memory=memory)
    chain.invoke({"input": WALL_Q})
    out = chain.invoke({"input": FOLLOW_UP})
    assert out["text"] == "About 21,196 km."
    assert WALL_Q in out["history"]
    assert [t.query for t in engine.history.turns("alice")] == [WALL_Q, FOLLOW_UP]


@pytest.mark.filterwarnings("ignore:The class `ConversationChain` was deprecated")
def test_conversation_chain_with_its_default_prompt(engine: DHRAG) -> None:
    """``ConversationChain``'s prompt has only {history} and {input}: with
    ``rewritten_query_key=None`` the memory adds nothing else, and the chain runs."""
    from langchain_classic.chains import ConversationChain

    model = ToolFakeChatModel(messages=iter([AIMessage(WALL_A), AIMessage("About 21,196 km.")]))
    memory = DHRAGMemory(engine=engine, session_id="alice", rewritten_query_key=None)
    assert memory.memory_variables == ["history"]
    chain = ConversationChain(llm=model, memory=memory)
    chain.invoke({"input": WALL_Q})
    out = chain.invoke({"input": FOLLOW_UP})

    assert out["response"] == "About 21,196 km." and "rewritten_query" not in out
    assert f"Human: {WALL_Q}\nAI: {WALL_A}" in out["history"]
    prompt = model.seen[-1][0].text
    assert f"Current conversation:\nHuman: {WALL_Q}\nAI: {WALL_A}\nHuman: {FOLLOW_UP}" in prompt
    assert [(t.query, t.response) for t in engine.history.turns("alice")] == [
        (WALL_Q, WALL_A), (FOLLOW_UP, "About 21,196 km.")]
    with pytest.raises(ValueError, match="rewritten_query"):
        ConversationChain(llm=model, memory=DHRAGMemory(engine=engine, session_id="alice"))


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda m: m.load_memory_variables({"a": "x", "b": "y"}), ValueError, "input_key"),
        (lambda m: m.load_memory_variables({"input": 3}), TypeError, r"inputs\['input'\]"),
        (lambda m: m.load_memory_variables({"input": "  "}), ValueError, "query"),
        (lambda m: m.load_memory_variables("text"), TypeError, "inputs must be a dict"),
        (lambda m: m.save_context({"input": "q"}, {"a": "1", "b": "2"}), ValueError,
         "output_key"),
        (lambda m: m.save_context({"input": "q", "session_id": ""}, {"o": "a"}), ValueError,
         "session_id"),
    ],
)
def test_bad_inputs(engine: DHRAG, call: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        call(DHRAGMemory(engine=engine, session_id="default"))


def test_explicit_keys(engine: DHRAG) -> None:
    memory = DHRAGMemory(engine=engine, input_key="question", output_key="answer",
                         session_id="default")
    memory.save_context({"question": WALL_Q, "other": "x"}, {"answer": WALL_A, "extra": 1})
    assert engine.history.turns("default")[0].response == WALL_A
    with pytest.raises(ValueError, match="input_key"):
        memory.load_memory_variables({"input": WALL_Q})


async def test_async_memory(engine: DHRAG) -> None:
    memory = DHRAGMemory(engine=engine, session_id="alice")
    await memory.aload_memory_variables({"input": WALL_Q})
    await memory.asave_context({"input": WALL_Q}, {"output": WALL_A})
    out = await memory.aload_memory_variables({"input": FOLLOW_UP})
    assert WALL_Q in out["history"]
    assert engine.history.turns("alice")[0].passages  # the async load's passages were kept
    await memory.aclear()
    assert engine.history.size("alice") == 0


# -- chat message history ------------------------------------------------------------------


def test_chat_history_pairs_messages_into_turns(engine: DHRAG) -> None:
    history = DHRAGChatMessageHistory(engine, "alice")
    assert isinstance(history, BaseChatMessageHistory)
    history.add_user_message(WALL_Q)
    assert engine.history.size("alice") == 0  # waits for the answer
    history.add_ai_message(WALL_A)
    history.add_messages([SystemMessage("ignored"), HumanMessage(PIG_Q), AIMessage(PIG_A)])

    assert history.messages == [HumanMessage(WALL_Q), AIMessage(WALL_A), HumanMessage(PIG_Q),
                                AIMessage(PIG_A)]
    assert DHRAGChatMessageHistory(engine, "bob").messages == []
    selected = history.select_messages("Who was the Great Wall built to keep out?")
    assert HumanMessage(WALL_Q) in selected

    history.clear()
    assert history.messages == []


def test_chat_history_errors(engine: DHRAG) -> None:
    with pytest.raises(ValueError, match="session_id"):
        DHRAGChatMessageHistory(engine, " ")
    with pytest.raises(TypeError, match="engine"):
        DHRAGChatMessageHistory("engine", "a")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"messages\[0\]"):
        DHRAGChatMessageHistory(engine, "a").add_messages(["hi"])  # type: ignore[list-item]
    # a bad text anywhere in the batch stores nothing of it
    batch = [HumanMessage(WALL_Q), AIMessage(WALL_A), HumanMessage("   "),
             AIMessage("an answer")]
    with pytest.raises(ValueError, match="question of turn 1"):
        DHRAGChatMessageHistory(engine, "a").add_messages(batch)
    assert engine.history.size("a") == 0
    # a NUL is text that can be cleaned: the turn is kept, with a warning
    with pytest.warns(UserWarning, match="NUL"):
        DHRAGChatMessageHistory(engine, "a").add_messages(
            [HumanMessage("bad\x00question"), AIMessage("an answer")])
    assert [t.query for t in engine.history.turns("a")] == ["badquestion"]


def test_drop_in_gives_the_prompt_the_selected_turns_and_records_them(engine: DHRAG) -> None:
    retriever = DHRAGRetriever(engine=engine, k=3)
    prompt = ChatPromptTemplate.from_messages([
        ("system", "Context:\n{context}"),
        MessagesPlaceholder("history"),
        ("human", "{question}"),
    ])
    seen: list[Any] = []
    llm = FakeListChatModel(responses=[WALL_A, PIG_A, "About 21,196 km.", PIG_A])
    rag = (
        RunnablePassthrough.assign(context=(lambda x: x["question"]) | retriever
                                   | format_documents)
        | prompt | (lambda p: seen.append(p.to_messages()) or p) | llm | StrOutputParser()
    )
    chat = with_dhrag_memory(rag, retriever, input_key="question", history_key="history")
    expected: list[str] = []
    for sid, q in (("alice", WALL_Q), ("alice", PIG_Q), ("alice", FOLLOW_UP), ("bob", PIG_Q)):
        if q == FOLLOW_UP:
            selected = engine.select(sid, q).history
            expected = [s.turn.query for s in sorted(selected, key=lambda s: s.turn.index)]
        chat.invoke({"question": q}, config={"configurable": {"session_id": sid}})

    alice = engine.history.turns("alice")
    assert [(t.query, t.response) for t in alice] == [
        (WALL_Q, WALL_A), (PIG_Q, PIG_A), (FOLLOW_UP, "About 21,196 km.")]
    assert all(len(t.passages) == 3 for t in alice)  # the retriever's passages were paired
    assert [t.query for t in engine.history.turns("bob")] == [PIG_Q]
    # the follow-up's prompt holds the turns DH-RAG selected for it, not the whole history
    shown = [m.text for m in seen[2] if isinstance(m, HumanMessage)][:-1]
    assert shown == expected and 0 < len(expected) < 2
    assert [m.text for m in seen[0] if isinstance(m, HumanMessage)] == [WALL_Q]
    assert [m.text for m in seen[3] if isinstance(m, HumanMessage)] == [PIG_Q]  # bob: new


def test_chat_history_question_and_answer_through_different_instances(
    store: InMemoryVectorStore, tmp_path: Path
) -> None:
    """The question waits in the history store, not in the object: its answer may come
    through a new instance (a ``get_session_history`` factory), another worker on the same
    SQLite file, or a process started after a restart."""
    url = f"sqlite:///{tmp_path / 'history.db'}"
    worker_a, worker_b = hash_engine(store, history=url), hash_engine(store, history=url)
    docs = DHRAGRetriever(engine=worker_a, k=2, session_id="alice").invoke(WALL_Q)
    DHRAGChatMessageHistory(worker_a, "alice").add_user_message(WALL_Q)
    DHRAGChatMessageHistory(worker_a, "alice").add_ai_message(WALL_A)
    (turn,) = worker_a.history.turns("alice")
    assert (turn.query, turn.response) == (WALL_Q, WALL_A)
    assert [p.id for p in turn.passages] == [d.id for d in docs]  # the retriever's selection

    DHRAGChatMessageHistory(worker_a, "alice").add_user_message(PIG_Q)
    on_b = DHRAGChatMessageHistory(worker_b, "alice")
    assert on_b.messages[-1] == HumanMessage(PIG_Q)  # every worker sees the waiting question
    on_b.add_ai_message(PIG_A)
    assert [(t.query, t.response) for t in worker_a.history.turns("alice")] == [
        (WALL_Q, WALL_A), (PIG_Q, PIG_A)]

    DHRAGChatMessageHistory(worker_b, "alice").add_user_message(FOLLOW_UP)
    worker_a.close()
    worker_b.close()
    restarted = hash_engine(store, history=url)
    history = DHRAGChatMessageHistory(restarted, "alice")
    history.add_ai_message("About 21,196 km.")
    assert history.messages == [HumanMessage(WALL_Q), AIMessage(WALL_A), HumanMessage(PIG_Q),
                                AIMessage(PIG_A), HumanMessage(FOLLOW_UP),
                                AIMessage("About 21,196 km.")]
    assert restarted.history.held_question("alice") is None
    restarted.close()


def test_chat_history_a_bad_message_keeps_the_waiting_question(engine: DHRAG) -> None:
    DHRAGChatMessageHistory(engine, "alice").add_user_message(WALL_Q)
    with pytest.raises(ValueError, match="question of turn 1"):
        DHRAGChatMessageHistory(engine, "alice").add_messages(
            [AIMessage(WALL_A), HumanMessage(" \n ")])
    assert engine.history.size("alice") == 0
    history = DHRAGChatMessageHistory(engine, "alice")
    assert history.messages == [HumanMessage(WALL_Q)]
    history.add_messages([AIMessage("", tool_calls=[{"name": "t", "args": {}, "id": "1"}]),
                          AIMessage(WALL_A)])  # a tool-calling step is not the answer
    assert history.messages == [HumanMessage(WALL_Q), AIMessage(WALL_A)]
    history.add_user_message(PIG_Q)
    history.clear()
    assert history.messages == [] and engine.history.held_question("alice") is None
