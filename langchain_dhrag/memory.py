"""DH-RAG as LangChain memory: ``DHRAGMemory`` (classic chains, ``langchain-classic``) and
``DHRAGChatMessageHistory`` (one session as a chat message history)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from langchain_classic.base_memory import BaseMemory
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.documents import Document
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from pydantic import Field

from dhrag_core import DHRAG, Passage, Selection
from dhrag_core.transcript import Role
from dhrag_core.validation import check_session_id
from langchain_dhrag._context import missing_session
from langchain_dhrag.convert import (
    documents_to_passages,
    format_history,
    history_messages,
    selection_to_documents,
    turns_to_messages,
)

__all__ = ["DHRAGChatMessageHistory", "DHRAGMemory"]


class DHRAGMemory(BaseMemory):
    """Conversation memory that loads only the history DH-RAG selects for the new input.

    ``load_memory_variables`` returns, under ``memory_key``, the selected earlier turns
    (oldest first; a string, or messages with ``return_messages=True``) and, under
    ``rewritten_query_key`` (unless None), the standalone query reconstructed from them;
    with ``context_key`` set, also the integrated context as documents (a prompt with only
    ``{history}`` and ``{input}``, such as ``ConversationChain``'s default, needs
    ``rewritten_query_key=None``). ``save_context`` stores the turn (input, passages,
    output): the passages are the documents under ``passages_key`` when given, else the
    context of the latest selection for this input (made by this memory or by a
    ``DHRAGRetriever`` on the same engine). ``clear`` forgets the session.

    The session is ``inputs["session_id"]`` when the inputs carry one (see ``session_key``),
    else the ``session_id`` field; with neither, a ``ValueError`` says how to pass one.

    Args:
        engine: The ``DHRAG`` engine (shared with a ``DHRAGRetriever`` if there is one).
        session_id: The session of this memory (default: none; each call's inputs name it).
        memory_key: Output key of the selected history.
        rewritten_query_key: Output key of the rewritten query (None: not returned).
        context_key: Output key of the context documents (None: not returned).
        input_key, output_key: Keys of the user input and of the answer (inferred when
            there is only one candidate).
        passages_key: Input or output key holding the documents shown to the model.
        session_key: Input key that may name the session per call.
        k: Context passages per selection (default: ``Settings.retrieval.context_k``).
        return_messages: Return the history as messages instead of a string.

    Example:
        ```python
        memory = DHRAGMemory(engine=rag, session_id="alice")
        memory.load_memory_variables({"input": "How long is it?"})
        # {"history": "Human: What is the Great Wall built of?\nAI: ...",
        #  "rewritten_query": "How long is it? (great wall china built)"}
        memory.save_context({"input": "How long is it?"}, {"output": "About 21,196 km."})
        ```
    """

    engine: DHRAG
    session_id: str | None = Field(default=None, min_length=1, max_length=256)
    memory_key: str = "history"
    rewritten_query_key: str | None = "rewritten_query"
    context_key: str | None = None
    input_key: str | None = None
    output_key: str | None = None
    passages_key: str | None = None
    session_key: str = "session_id"
    k: int | None = Field(default=None, ge=1, strict=True)
    return_messages: bool = False
    human_prefix: str = "Human"
    ai_prefix: str = "AI"

    @property
    def memory_variables(self) -> list[str]:
        optional = (self.rewritten_query_key, self.context_key)
        return [self.memory_key, *(key for key in optional if key)]

    # -- keys -------------------------------------------------------------------------------

    def _session(self, inputs: dict[str, Any]) -> str:
        sid = inputs.get(self.session_key, self.session_id) if isinstance(inputs, dict) else (
            self.session_id
        )
        if sid is None:
            raise missing_session("DHRAGMemory")
        return check_session_id(sid)

    def _input(self, inputs: dict[str, Any]) -> str:
        if not isinstance(inputs, dict):
            raise TypeError(f"inputs must be a dict, got {type(inputs).__name__}")
        if self.input_key is not None:
            if self.input_key not in inputs:
                raise ValueError(f"inputs has no key {self.input_key!r} (input_key)")
            return self._str("inputs", self.input_key, inputs[self.input_key])
        skip = {*self.memory_variables, self.session_key, "stop", self.passages_key}
        keys = [k for k in inputs if k not in skip]
        if len(keys) != 1:
            raise ValueError(
                f"cannot tell the input key among {keys}; set DHRAGMemory(input_key=...)"
            )
        return self._str("inputs", keys[0], inputs[keys[0]])

    def _output(self, outputs: dict[str, Any]) -> str:
        if not isinstance(outputs, dict):
            raise TypeError(f"outputs must be a dict, got {type(outputs).__name__}")
        if self.output_key is not None:
            if self.output_key not in outputs:
                raise ValueError(f"outputs has no key {self.output_key!r} (output_key)")
            return self._str("outputs", self.output_key, outputs[self.output_key])
        keys = [k for k in outputs if k != self.passages_key]
        if len(keys) != 1:
            raise ValueError(
                f"cannot tell the output key among {keys}; set DHRAGMemory(output_key=...)"
            )
        return self._str("outputs", keys[0], outputs[keys[0]])

    @staticmethod
    def _str(where: str, key: str, value: Any) -> str:
        if isinstance(value, BaseMessage):
            return value.text
        if not isinstance(value, str):
            raise TypeError(f"{where}[{key!r}] must be a str or message, got "
                            f"{type(value).__name__}")
        return value

    def _passages(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> list[Passage] | None:
        key = self.passages_key
        if key is None:
            return None
        docs = outputs.get(key, inputs.get(key))
        if docs is None:
            return None
        return documents_to_passages(docs, key)

    # -- load / save / clear ----------------------------------------------------------------

    def _variables(self, selection: Selection) -> dict[str, Any]:
        history: str | list[BaseMessage] = (
            history_messages(selection.history) if self.return_messages
            else format_history(selection.history, human_prefix=self.human_prefix,
                                ai_prefix=self.ai_prefix)
        )
        out: dict[str, Any] = {self.memory_key: history}
        if self.rewritten_query_key:
            out[self.rewritten_query_key] = selection.rewritten_query
        if self.context_key:
            out[self.context_key] = selection_to_documents(selection)
        return out

    def load_memory_variables(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """The selected history and rewritten query for ``inputs`` (nothing is stored)."""
        sid, query = self._session(inputs), self._input(inputs)
        return self._variables(self.engine.select(sid, query, self.k))

    async def aload_memory_variables(self, inputs: dict[str, Any]) -> dict[str, Any]:
        sid, query = self._session(inputs), self._input(inputs)
        return self._variables(await self.engine.aselect(sid, query, self.k))

    def save_context(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        """Store the turn (input, passages, output) in the session's history."""
        sid, query, answer = self._session(inputs), self._input(inputs), self._output(outputs)
        self.engine.record(sid, query, answer, passages=self._passages(inputs, outputs))

    async def asave_context(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        sid, query, answer = self._session(inputs), self._input(inputs), self._output(outputs)
        await self.engine.arecord(sid, query, answer, passages=self._passages(inputs, outputs))

    def clear(self) -> None:
        """Forget this memory's session (``session_id``)."""
        if self.session_id is None:
            raise ValueError("clear() forgets the session_id field's session; none is set "
                             "(call engine.reset(session_id))")
        self.engine.reset(self.session_id)

    async def aclear(self) -> None:
        await asyncio.to_thread(self.clear)


class DHRAGChatMessageHistory(BaseChatMessageHistory):
    """One session of the DH-RAG history database as a LangChain chat message history.

    ``messages`` are the stored turns, oldest first, as human/AI message pairs (what DH-RAG
    kept: near-duplicate turns merged, low-weight turns evicted beyond capacity), then the
    question still waiting for its answer, if any. ``add_messages`` records each human
    message with the AI message that follows it as one turn, with the passages of the latest
    ``DHRAGRetriever`` selection for that question on the same engine
    (``DHRAG.record_messages``). A human message without an answer yet is held in the
    history store, so the answer may be added through another instance (a
    ``get_session_history`` factory makes one per call), another worker, or after a restart.
    Other message types, and AI messages that call tools, are ignored.
    ``select_messages(query)`` gives only the turns DH-RAG selects for a query.

    Args:
        engine: The ``DHRAG`` engine.
        session_id: The session this view shows.

    Example:
        ```python
        chat = DHRAGChatMessageHistory(rag, "alice")
        chat.add_messages([HumanMessage("How long is it?"), AIMessage("21,196 km.")])
        chat.select_messages("What is it built of?")  # the turns DH-RAG selects
        ```
    """

    def __init__(self, engine: DHRAG, session_id: str) -> None:
        if not isinstance(engine, DHRAG):
            raise TypeError(f"engine must be a dhrag_core.DHRAG, got {type(engine).__name__}")
        self.engine = engine
        self.session_id = check_session_id(session_id)

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]  # base: an attribute
        stored = turns_to_messages(self.engine.history.turns(self.session_id))
        held = self.engine.history.held_question(self.session_id)
        return stored if held is None else [*stored, HumanMessage(held)]

    def select_messages(self, query: str, k: int | None = None) -> list[BaseMessage]:
        """Messages of the history turns DH-RAG selects for ``query``, oldest first."""
        return history_messages(self.engine.select(self.session_id, query, k).history)

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        if isinstance(messages, BaseMessage) or not isinstance(messages, Sequence):
            raise TypeError("messages must be a sequence of BaseMessage")
        for i, m in enumerate(messages):
            if not isinstance(m, BaseMessage):
                raise TypeError(f"messages[{i}] must be a BaseMessage, got {type(m).__name__}")
        said: list[tuple[Role, str]] = []
        for m in messages:
            if isinstance(m, HumanMessage):
                said.append(("user", m.text))
            elif isinstance(m, AIMessage) and not m.tool_calls:
                said.append(("assistant", m.text))
        self.engine.record_messages(self.session_id, said)

    def record(
        self, question: str, answer: str, documents: Sequence[Document | str] | None = None
    ) -> None:
        """Store one turn directly, with the documents shown (default: the pending ones)."""
        passages = None if documents is None else documents_to_passages(documents, "documents")
        self.engine.record(self.session_id, question, answer, passages=passages)

    def clear(self) -> None:
        """Forget the session (its held question too)."""
        self.engine.reset(self.session_id)
