"""The 7-turn topic-switch chat (``tests/topic_chat.py``) through the LangChain adapters, with
the real MiniLM and ``Settings()``, k=4, over a LangChain ``InMemoryVectorStore``:

* ``DHRAGMiddleware`` in a ``create_agent`` agent with a checkpointer: the checks read the
  system message the scripted model receives (the history part the middleware writes:
  ``User: ...`` / ``Assistant: ...`` lines, then "made standalone: ...", then "Retrieved
  passages:").
* LCEL, ``with_dhrag_memory(chain, retriever, input_key="question", history_key="history")``:
  the checks read the messages that fill the prompt's ``MessagesPlaceholder("history")`` as
  the scripted model receives them, and the context passages of its system message.

The scripted model answers with the first sentence of its top context passage.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any

import pytest
from topic_chat import (
    ALL_TURNS,
    CHAT,
    SESSION,
    K,
    Seen,
    check_seen,
    check_turn,
    describe_selection,
    minilm,
    passages,
    report,
    scripted_answer,
    top_passage_in,
)

pytest.importorskip("langchain.agents.middleware")

from langchain.agents import create_agent
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import Runnable, RunnableLambda
from langchain_core.vectorstores import InMemoryVectorStore
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import Field

from dhrag_core import DHRAG, Selection, Settings
from dhrag_core.transcript import in_turn_order
from langchain_dhrag import (
    DHRAGEmbeddings,
    DHRAGMiddleware,
    DHRAGRetriever,
    format_documents,
    with_dhrag_memory,
)

pytestmark = pytest.mark.model

SYSTEM_PROMPT = "You are a guide."
HISTORY_HEAD = ("Earlier conversation relevant to the user's latest message (selected from "
                "the conversation history, oldest first):\n")
STANDALONE = "The latest message, made standalone: "
RETRIEVED = "Retrieved passages:\n"
LCEL_CONTEXT = "Context:\n"


class TopicChatModel(BaseChatModel):
    """Answers with the first sentence of the top passage of its system message's context
    (the text after ``marker``); keeps every prompt it gets."""

    marker: str
    prompts: list[list[BaseMessage]] = Field(default_factory=list)

    def bind_tools(  # type: ignore[override]
        self, tools: Any, **kwargs: Any
    ) -> Runnable[Any, BaseMessage]:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any,
    ) -> ChatResult:
        self.prompts.append(list(messages))
        assert isinstance(messages[0], SystemMessage), messages
        system = messages[0].text
        assert self.marker in system, system
        answer = scripted_answer(top_passage_in(system.split(self.marker, 1)[1]))
        return ChatResult(generations=[ChatGeneration(message=AIMessage(answer))])

    @property
    def _llm_type(self) -> str:
        return "topic-scripted"


def _retriever() -> DHRAGRetriever:
    """A retriever (and engine: ``.engine``) over the fixture in a LangChain vector store."""
    store = InMemoryVectorStore(DHRAGEmbeddings(minilm()))
    store.add_documents([Document(p.text, id=p.id, metadata={"title": p.title, **p.metadata})
                         for p in passages()])
    retriever = DHRAGRetriever.from_knowledge(store, k=K, settings=Settings())
    assert retriever.engine.settings == Settings()
    return retriever


def _spy(engine: DHRAG) -> list[tuple[Selection, int | None]]:
    """Every selection the engine makes, with the k it was asked for."""
    made: list[tuple[Selection, int | None]] = []
    select = engine.select

    def spy(session_id: str, query: str, k: int | None = None) -> Selection:
        sel = select(session_id, query, k)
        made.append((sel, k))
        return sel

    engine.select = spy  # type: ignore[method-assign]
    return made


# -- the agent middleware --------------------------------------------------------------------


def middleware_history(system: str) -> list[str]:
    """The questions of the history turns the middleware wrote into the system message."""
    if HISTORY_HEAD not in system:
        return []
    block = system.split(HISTORY_HEAD, 1)[1].split("\n\n", 1)[0]
    return [line.removeprefix("User: ") for line in block.splitlines()
            if line.startswith("User: ")]


def middleware_rewrite(system: str, question: str) -> str:
    """The standalone query the middleware showed (it shows none when it equals the
    question, or when no history was selected)."""
    for line in system.splitlines():
        if line.startswith(STANDALONE):
            return line.removeprefix(STANDALONE)
    return question


@pytest.fixture(scope="module")
def agent_run() -> tuple[list[Seen], list[list[BaseMessage]], list[Selection]]:
    engine = _retriever().engine
    made = _spy(engine)
    model = TopicChatModel(marker=RETRIEVED)
    agent = create_agent(model, [], system_prompt=SYSTEM_PROMPT,
                         middleware=[DHRAGMiddleware(engine, k=K)],
                         checkpointer=InMemorySaver())
    cfg: Any = {"configurable": {"thread_id": SESSION}}
    seen = []
    for n, turn in enumerate(CHAT, 1):
        out = agent.invoke({"messages": [HumanMessage(turn.question)]}, cfg)
        assert len(model.prompts) == n, "one model call per turn"
        assert [k for _, k in made] == [K] * n, "one selection per turn, with k=4"
        sel = made[-1][0]
        assert sel.query == turn.question
        system = model.prompts[-1][0].text
        assert system.startswith(SYSTEM_PROMPT), system
        top = top_passage_in(system.split(RETRIEVED, 1)[1])
        assert top.id == sel.passages[0].id
        assert out["messages"][-1].text == scripted_answer(top)  # the scripted model answered
        seen.append(Seen(n, middleware_history(system), top.id or "",
                         middleware_rewrite(system, turn.question), describe_selection(sel)))
    assert [t.query for t in engine.history.turns(SESSION)] == [t.question for t in CHAT]
    check_seen(seen)
    report("LangChain DHRAGMiddleware", seen)
    return seen, model.prompts, [s for s, _ in made]


@pytest.fixture(scope="module")
def agent_seen(agent_run: tuple[list[Seen], Any, Any]) -> list[Seen]:
    return agent_run[0]


@pytest.mark.parametrize("turn", ALL_TURNS)
def test_agent_turn_is_on_topic(agent_seen: list[Seen], turn: int) -> None:
    check_turn(agent_seen, turn)


def test_agent_model_gets_the_selected_history_and_the_current_message_only(
    agent_run: tuple[list[Seen], list[list[BaseMessage]], list[Selection]],
) -> None:
    """The middleware hands the model ``Selection.history`` (oldest first) and, of the
    checkpointed thread, only the current message."""
    seen, prompts, selections = agent_run
    for s, prompt, sel in zip(seen, prompts, selections, strict=True):
        assert s.history == [t.query for t in in_turn_order(sel.history)], s.why()
        rest = prompt[1:]
        assert [type(m) for m in rest] == [HumanMessage], rest
        assert rest[0].text == CHAT[s.turn - 1].question
        assert s.rewritten == sel.rewritten_query or not sel.history, s.why()


# -- LCEL: with_dhrag_memory and a MessagesPlaceholder ---------------------------------------


@pytest.fixture(scope="module")
def lcel_run() -> tuple[list[Seen], list[list[BaseMessage]], list[tuple[Selection, int | None]],
                        list[list[Document]]]:
    retriever = _retriever()
    made = _spy(retriever.engine)
    model = TopicChatModel(marker=LCEL_CONTEXT)
    docs_seen: list[list[Document]] = []

    def keep(docs: list[Document]) -> list[Document]:
        docs_seen.append(docs)
        return docs

    prompt = ChatPromptTemplate.from_messages([
        ("system", LCEL_CONTEXT + "{context}"),
        MessagesPlaceholder("history"),
        ("human", "{question}"),
    ])
    rag_chain = ({"context": itemgetter("question") | retriever | RunnableLambda(keep)
                  | format_documents,
                  "question": itemgetter("question"), "history": itemgetter("history")}
                 | prompt | model | StrOutputParser())
    chat = with_dhrag_memory(rag_chain, retriever, input_key="question", history_key="history")
    cfg: Any = {"configurable": {"session_id": SESSION}}
    seen = []
    for n, turn in enumerate(CHAT, 1):
        answer = chat.invoke({"question": turn.question}, cfg)
        assert len(model.prompts) == n and len(docs_seen) == n
        messages = model.prompts[-1]
        assert isinstance(messages[-1], HumanMessage)
        assert messages[-1].text == turn.question
        placeholder = messages[1:-1]  # what filled MessagesPlaceholder("history")
        top = top_passage_in(messages[0].text.split(LCEL_CONTEXT, 1)[1])
        assert answer == scripted_answer(top)
        assert top.id == docs_seen[-1][0].id
        trace = docs_seen[-1][0].metadata["dhrag"]
        seen.append(Seen(
            n, [m.text for m in placeholder if isinstance(m, HumanMessage)], top.id or "",
            trace["rewritten_query"],
            "\n".join(f"    [select k={k}]\n{describe_selection(s)}"
                      for s, k in made if s.query == turn.question)))
    assert [t.query for t in retriever.engine.history.turns(SESSION)] == [
        t.question for t in CHAT]
    check_seen(seen)
    report("LangChain LCEL with_dhrag_memory(history_key=...)", seen)
    return seen, model.prompts, made, docs_seen


@pytest.fixture(scope="module")
def lcel_seen(lcel_run: tuple[list[Seen], Any, Any, Any]) -> list[Seen]:
    return lcel_run[0]


@pytest.mark.parametrize("turn", ALL_TURNS)
def test_lcel_turn_is_on_topic(lcel_seen: list[Seen], turn: int) -> None:
    check_turn(lcel_seen, turn)


def test_lcel_placeholder_holds_the_selected_history_as_messages(
    lcel_run: tuple[list[Seen], list[list[BaseMessage]], list[tuple[Selection, int | None]],
                    list[list[Document]]],
) -> None:
    """The placeholder gets ``Selection.history`` oldest first, as Human/AI message pairs,
    and the same turns as the selection that retrieved the context."""
    seen, prompts, made, docs_seen = lcel_run
    for s, prompt, docs in zip(seen, prompts, docs_seen, strict=True):
        mine = [sel for sel, _ in made if sel.query == CHAT[s.turn - 1].question]
        # one selection: made for the history placeholder, handed on to the chain's retriever
        assert len(mine) == 1, "with_dhrag_memory's select (history_key), the retriever's reuse"
        history_sel = retrieval_sel = mine[0]
        turns = in_turn_order(history_sel.history)
        expected: list[BaseMessage] = []
        for t in turns:
            expected += [HumanMessage(t.query), AIMessage(t.response)]
        assert [(type(m), m.text) for m in prompt[1:-1]] == [
            (type(m), m.text) for m in expected], s.why()
        assert [h.turn.index for h in history_sel.history] == [
            h.turn.index for h in retrieval_sel.history] == docs[0].metadata["dhrag"][
            "history_turns"], s.why()
