"""with_dhrag_memory: every call style records its turn in the config's session, once the
answer is complete; errors name what to pass."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.language_models import FakeListChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda, RunnablePassthrough
from lc_support import FOLLOW_UP, PIG_A, PIG_Q, WALL_A, WALL_Q

from dhrag_core import DHRAG
from langchain_dhrag import DHRAGRetriever, format_documents, with_dhrag_memory

PROMPT = ChatPromptTemplate.from_messages([("system", "{context}"), ("human", "{question}")])


def cfg(sid: str) -> Any:
    return {"configurable": {"session_id": sid}}


def _chat(engine: DHRAG, answers: list[str]) -> tuple[Any, DHRAGRetriever]:
    retriever = DHRAGRetriever(engine=engine, k=3)
    chain = ({"context": retriever | format_documents, "question": RunnablePassthrough()}
             | PROMPT | FakeListChatModel(responses=answers) | StrOutputParser())
    return with_dhrag_memory(chain, retriever), retriever


def test_invoke_records_with_the_retrieved_passages(engine: DHRAG) -> None:
    chat, retriever = _chat(engine, [WALL_A, "21,196 km."])
    docs = retriever.invoke(WALL_Q, cfg("probe"))  # what the chain's retriever will see
    assert chat.invoke(WALL_Q, cfg("alice")) == WALL_A
    (turn,) = engine.history.turns("alice")
    assert (turn.query, turn.response) == (WALL_Q, WALL_A)
    assert [p.id for p in turn.passages] == [d.id for d in docs]
    chat.invoke(FOLLOW_UP, cfg("alice"))
    assert [t.query for t in engine.history.turns("alice")] == [WALL_Q, FOLLOW_UP]


def test_batch_and_abatch_record_each_in_its_own_session(engine: DHRAG) -> None:
    chat, _ = _chat(engine, [WALL_A, PIG_A, WALL_A, PIG_A])
    chat.batch([WALL_Q, PIG_Q], [cfg("a"), cfg("b")])
    asyncio.run(chat.abatch([WALL_Q, PIG_Q], [cfg("c"), cfg("d")]))
    for sid, q in (("a", WALL_Q), ("b", PIG_Q), ("c", WALL_Q), ("d", PIG_Q)):
        assert [t.query for t in engine.history.turns(sid)] == [q], sid


def test_streams_record_only_when_consumed_to_the_end(engine: DHRAG) -> None:
    chat, _ = _chat(engine, [WALL_A, WALL_A, PIG_A])
    stream = chat.stream(WALL_Q, cfg("s"))
    next(stream)
    assert engine.history.size("s") == 0  # not recorded mid-stream
    stream.close()  # abandoned half-way: nothing recorded
    assert engine.history.size("s") == 0
    assert "".join(chat.stream(WALL_Q, cfg("s"))) == WALL_A
    assert [t.response for t in engine.history.turns("s")] == [WALL_A]

    async def consume() -> str:
        return "".join([c async for c in chat.astream(PIG_Q, cfg("s"))])

    assert asyncio.run(consume()) == PIG_A
    assert [t.response for t in engine.history.turns("s")] == [WALL_A, PIG_A]


def test_errors_name_what_to_pass(engine: DHRAG) -> None:
    chat, retriever = _chat(engine, [WALL_A])
    with pytest.raises(ValueError, match=r"configurable.*with_dhrag_memory\(session_id"):
        chat.invoke(WALL_Q)
    failing = with_dhrag_memory(RunnableLambda(lambda _: 1 / 0), retriever)
    with pytest.raises(ZeroDivisionError):
        failing.invoke(WALL_Q, cfg("x"))
    assert engine.history.size("x") == 0  # no answer: nothing recorded
    keyed = with_dhrag_memory(RunnableLambda(lambda x: {"answer": "a", "docs": []}), engine)
    with pytest.raises(ValueError, match="input_key"):
        keyed.invoke({"question": WALL_Q, "lang": "en"}, cfg("x"))
    with pytest.raises(ValueError, match="output_key"):
        keyed.invoke({"question": WALL_Q}, cfg("x"))
    fine = with_dhrag_memory(RunnableLambda(lambda x: {"answer": "a", "docs": []}), engine,
                             input_key="question", output_key="answer")
    fine.invoke({"question": WALL_Q, "lang": "en"}, cfg("x"))
    assert [t.response for t in engine.history.turns("x")] == ["a"]
    with pytest.raises(TypeError, match="chain must be"):
        with_dhrag_memory("chain", engine)  # type: ignore[arg-type]


def _history_chat(memory: DHRAGRetriever, retriever: DHRAGRetriever, answers: list[str]) -> Any:
    """A chain retrieving with ``retriever``, its memory ``memory`` filling a placeholder."""
    from langchain_core.prompts import MessagesPlaceholder

    prompt = ChatPromptTemplate.from_messages([
        ("system", "{context}"), MessagesPlaceholder("history"), ("human", "{question}")])
    chain = (RunnablePassthrough.assign(context=(lambda x: x["question"]) | retriever
                                        | format_documents)
             | prompt | FakeListChatModel(responses=answers) | StrOutputParser())
    return with_dhrag_memory(chain, memory, input_key="question", history_key="history")


def test_history_key_selects_once_and_the_retriever_uses_that_selection(
    engine: DHRAG, monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    for name in ("select", "aselect"):
        original = getattr(engine, name)

        def spy(*args: Any, _original: Any = original, _name: str = name, **kw: Any) -> Any:
            calls.append(_name)
            return _original(*args, **kw)

        monkeypatch.setattr(engine, name, spy)
    retriever = DHRAGRetriever(engine=engine, k=3)
    chat = _history_chat(retriever, retriever, [WALL_A, "21,196 km."])
    chat.invoke({"question": WALL_Q}, cfg("alice"))
    assert calls == ["select"]  # before: one for the history, one by the retriever
    asyncio.run(chat.ainvoke({"question": FOLLOW_UP}, cfg("alice")))
    assert calls == ["select", "aselect"]
    turns = engine.history.turns("alice")
    assert [t.query for t in turns] == [WALL_Q, FOLLOW_UP]
    assert all(len(t.passages) == 3 for t in turns)  # the retriever's k, stored with the turn
    # another engine's retriever in the chain is not handed this engine's selection
    other = DHRAG(engine.knowledge, embedder=engine.history.embedder)
    foreign = _history_chat(retriever, DHRAGRetriever(engine=other, k=3), [PIG_A])
    foreign.invoke({"question": PIG_Q}, cfg("bob"))
    assert calls == ["select", "aselect", "select"]  # the memory's, for the history
    assert other.pending("bob", PIG_Q) is not None  # the chain's retriever made its own
