"""``DHRAGMemoryBlock``: DH-RAG history selection as a ``llama_index.core.memory.Memory`` block.

``Memory`` keeps recent messages itself and flushes older ones to its blocks. This block
stores each flushed user/assistant exchange as a turn of DH-RAG's history database and, when
the memory is read, returns the earlier turns DH-RAG selects for the latest user message
(hierarchical matching, chains, recency), as text for the memory prompt.
"""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.bridge.pydantic import Field, PrivateAttr, field_validator
from llama_index.core.memory.memory import BaseMemoryBlock

from dhrag_core import DHRAG, HistoryDatabase, SelectedTurn
from dhrag_core.transcript import exchanges
from dhrag_core.validation import check_session_id
from llamaindex_dhrag.convert import message_pairs, message_text

__all__ = ["DHRAGMemoryBlock"]

DEFAULT_HEADER = (
    "Earlier turns of this conversation relevant to the latest message "
    "(selected by DH-RAG, best first):"
)


def _check_messages(messages: Any) -> None:
    if isinstance(messages, (str, bytes)) or not isinstance(messages, (list, tuple)):
        raise TypeError(f"messages must be a list of ChatMessage, got {type(messages).__name__}")
    for i, m in enumerate(messages):
        if not isinstance(m, ChatMessage):
            raise TypeError(f"messages[{i}] must be a ChatMessage, got {type(m).__name__}")


class DHRAGMemoryBlock(BaseMemoryBlock[str]):
    """A memory block that stores flushed turns in DH-RAG and returns the relevant ones.

    **Recording.** ``Memory`` keeps recent messages itself and flushes older ones to its
    blocks; each flushed user message and the assistant answer after it become one turn of
    the history (system and tool messages are skipped), stored without passages. Turns are
    thus recorded when ``Memory`` flushes, not at once: use ``DHRAGChatEngine`` (records each
    turn with its passages) or ``DHRAGRetriever.record`` to store every turn immediately. A
    block asked about a conversation with earlier questions but holding no stored turn says
    so, once per session (a ``UserWarning``).

    The session is ``session_id`` when set, else the ``Memory``'s own session id (passed to
    blocks by ``Memory``); with neither, a ``ValueError`` says how to pass one.

    Args:
        history: A dhrag ``HistoryDatabase``, or a ``DHRAG`` (its ``.history`` is used), so a
            chat engine and a memory can share one database.
        session_id: Fixed session id (default: the Memory's).
        name: Block name in the memory prompt.
        header: First line of the returned text.
        max_response_chars: Each stored answer is cut to this many characters in the text.

    Example:
        >>> from llama_index.core.memory import Memory
        >>> from dhrag_core import HashingEmbedder, HistoryDatabase
        >>> block = DHRAGMemoryBlock(history=HistoryDatabase(embedder=HashingEmbedder()))
        >>> memory = Memory.from_defaults(session_id="alice", token_limit=2000,
        ...                               memory_blocks=[block])
    """

    name: str = Field(default="dhrag_history", description="The name of the memory block.")
    history: HistoryDatabase = Field(description="The DH-RAG history database.")
    session_id: str | None = Field(
        default=None, description="Fixed session id; default: the Memory's session id."
    )
    header: str = Field(default=DEFAULT_HEADER, description="First line of the block text.")
    max_response_chars: int = Field(default=1_000, ge=1)
    _warned: set[str] = PrivateAttr(default_factory=set)

    def __init__(
        self,
        *,
        history: HistoryDatabase | DHRAG,
        session_id: str | None = None,
        **data: Any,
    ) -> None:
        fields: dict[str, Any] = {"history": history, "session_id": session_id, **data}
        super().__init__(**fields)

    @field_validator("history", mode="before")
    @classmethod
    def _history_of(cls, value: Any) -> HistoryDatabase:
        if isinstance(value, DHRAG):
            return value.history
        if not isinstance(value, HistoryDatabase):
            raise TypeError(
                "history must be a dhrag_core.HistoryDatabase or DHRAG, "
                f"got {type(value).__name__}"
            )
        return value

    @field_validator("session_id", mode="before")
    @classmethod
    def _check_session(cls, value: Any) -> str | None:
        return None if value is None else check_session_id(value)

    def _session(self, given: Any) -> str:
        if self.session_id is not None:
            return self.session_id
        if given is None:
            raise ValueError(
                'no session id: use the block inside Memory.from_defaults(session_id="...", '
                'memory_blocks=[...]), or set DHRAGMemoryBlock(session_id="...")'
            )
        return check_session_id(given)

    def format_turns(self, selected: list[SelectedTurn]) -> str:
        """The selected turns as text, best first, each with its turn number (from 1) and
        weight."""
        lines = [self.header]
        for s in selected:
            for role, text in exchanges([s.turn]):
                lines.append(
                    f"- turn {s.turn.index + 1} (weight {s.weight:.2f}) User: {text}"
                    if role == "user" else f"  Assistant: {text[: self.max_response_chars]}")
        return "\n".join(lines)

    async def _aget(
        self, messages: list[ChatMessage] | None = None, **block_kwargs: Any
    ) -> str:
        """The turns selected for the latest user message, as text ("" if none)."""
        _check_messages(messages or [])
        latest = next(
            (message_text(m) for m in reversed(messages or []) if m.role == MessageRole.USER),
            "",
        )
        if not latest.strip():
            return ""
        session = self._session(block_kwargs.get("session_id"))
        selected = await asyncio.to_thread(self.history.select, session, latest)
        earlier = sum(m.role == MessageRole.USER for m in messages or []) - 1
        if (not selected and earlier > 0 and session not in self._warned
                and not await asyncio.to_thread(self.history.size, session)):
            # Memory hands a block only the messages it flushes: say so, once per session
            self._warned.add(session)
            warnings.warn(
                f"DHRAGMemoryBlock: session {session!r} has no stored turn, though the "
                f"conversation has {earlier} earlier question(s): Memory hands a block only "
                "the messages it flushes (once the chat history passes token_limit x "
                "chat_history_token_ratio). To store every turn as it happens, use "
                "DHRAGChatEngine, or call DHRAGRetriever.record after each answer.",
                UserWarning, stacklevel=2)
        return self.format_turns(selected) if selected else ""

    async def _aput(self, messages: list[ChatMessage]) -> None:
        """Store the flushed messages' user/assistant exchanges as turns, in order."""
        _check_messages(messages)
        given = next((m.additional_kwargs.get("session_id") for m in messages
                      if m.additional_kwargs.get("session_id") is not None), None)
        session = self._session(given)
        pairs = message_pairs(messages)

        def store() -> None:
            for query, answer in pairs:
                self.history.add(session, query, None, answer)

        if pairs:
            await asyncio.to_thread(store)
