"""The 7-turn topic-switch chat (``tests/topic_chat.py``) through ``DHRAGChatEngine``, with the
real MiniLM (the index's embedding model, so the index is searched by vector), ``Settings()``
and k=4. A scripted chat LLM keeps the messages it is given -- system (the context prompt),
the history turns as user/assistant messages, the user's message -- and answers with the
first sentence of the top context passage; the checks read those messages."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
    MessageRole,
)
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_chat_callback
from llama_index.core.schema import TextNode
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

from dhrag_core import Selection, Settings
from llamaindex_dhrag import DHRAGChatEngine, DHRAGEmbedding

pytestmark = pytest.mark.model


class TopicChatLLM(CustomLLM):
    """A chat LLM that answers with the first sentence of the top passage of its system
    message and keeps every message list it gets."""

    _calls: list[list[ChatMessage]] = PrivateAttr(default_factory=list)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="topic-scripted", is_chat_model=True)

    @property
    def calls(self) -> list[list[ChatMessage]]:
        return self._calls

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        self._calls.append(list(messages))
        assert messages[0].role == MessageRole.SYSTEM, messages
        answer = scripted_answer(top_passage_in(messages[0].content or ""))
        return ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=answer))

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        raise AssertionError("the chat engine must call chat(), not complete()")

    def stream_complete(self, prompt: str, formatted: bool = False,
                        **kwargs: Any) -> CompletionResponseGen:
        raise AssertionError("the chat engine must call chat(), not stream_complete()")


@pytest.fixture(scope="module")
def run() -> tuple[list[Seen], list[list[ChatMessage]], list[Selection], list[Any]]:
    nodes = [TextNode(id_=p.id, text=p.text, metadata={"title": p.title},
                      excluded_embed_metadata_keys=["title"],
                      excluded_llm_metadata_keys=["title"]) for p in passages()]
    index = VectorStoreIndex(nodes=nodes, embed_model=DHRAGEmbedding(minilm()))
    llm = TopicChatLLM()
    engine = DHRAGChatEngine.from_defaults(index.as_retriever(similarity_top_k=20), llm,
                                           session_id=SESSION, k=K, settings=Settings())
    assert engine.engine.settings == Settings()
    made: list[Selection] = []
    select = engine.engine.select

    def spy(session_id: str, query: str, k: int | None = None) -> Selection:
        assert k == K
        sel = select(session_id, query, k)
        made.append(sel)
        return sel

    engine.engine.select = spy  # type: ignore[method-assign]
    seen, replies = [], []
    for n, turn in enumerate(CHAT, 1):
        reply = engine.chat(turn.question)
        replies.append(reply)
        assert len(llm.calls) == n and len(made) == n
        messages = llm.calls[-1]
        assert messages[-1].role == MessageRole.USER and messages[-1].content == turn.question
        top = top_passage_in(messages[0].content or "")
        assert reply.response == scripted_answer(top)
        assert top.id == reply.source_nodes[0].node.node_id
        history = [m.content or "" for m in messages[1:-1] if m.role == MessageRole.USER]
        assert reply.metadata is not None
        seen.append(Seen(n, history, top.id or "",
                         reply.metadata["dhrag"]["rewritten_query"], describe_selection(made[-1])))
    assert [t.query for t in engine.engine.history.turns(SESSION)] == [t.question for t in CHAT]
    check_seen(seen)
    report("LlamaIndex DHRAGChatEngine", seen)
    return seen, llm.calls, made, replies


@pytest.fixture(scope="module")
def seen(run: tuple[list[Seen], Any, Any, Any]) -> list[Seen]:
    return run[0]


@pytest.mark.parametrize("turn", ALL_TURNS)
def test_turn_is_on_topic(seen: list[Seen], turn: int) -> None:
    check_turn(seen, turn)


def test_llm_gets_the_selected_history_as_messages(
    run: tuple[list[Seen], list[list[ChatMessage]], list[Selection], list[Any]],
) -> None:
    """Between the system message and the user's message the LLM gets exactly
    ``Selection.history``, oldest first, as user/assistant pairs."""
    seen, calls, made, replies = run
    for s, messages, sel, reply in zip(seen, calls, made, replies, strict=True):
        turns = sorted((h.turn for h in sel.history), key=lambda t: t.index)
        expected = [(r, text) for t in turns
                    for r, text in ((MessageRole.USER, t.query),
                                    (MessageRole.ASSISTANT, t.response))]
        assert [(m.role, m.content) for m in messages[1:-1]] == expected, s.why()
        assert reply.metadata is not None
        assert [h["turn"] for h in reply.metadata["dhrag"]["history"]] == [
            h.turn.index for h in sel.history]
