"""``DHRAGMemoryBlock``: DH-RAG history selection as a ``llama_index.core.memory.Memory`` block.

``Memory`` keeps recent messages itself and flushes older ones to its blocks. This block
stores each flushed user/assistant exchange as a turn of DH-RAG's history database and, when
the memory is read, returns the earlier turns DH-RAG selects for the latest user message
(hierarchical matching, chains, recency), as text for the memory prompt. Under token pressure
``Memory`` asks the block to shrink (``atruncate``): it drops its lowest-weight turns first.
"""

from __future__ import annotations

import asyncio
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.bridge.pydantic import Field, PrivateAttr, field_validator
from llama_index.core.memory.memory import BaseMemoryBlock
from llama_index.core.utils import get_tokenizer

from dhrag_core import DHRAG, HistoryDatabase, SelectedTurn
from dhrag_core.transcript import Role, exchanges
from dhrag_core.validation import check_session_id
from llamaindex_dhrag.convert import message_text

__all__ = ["DHRAGMemoryBlock"]

DEFAULT_HEADER = (
    "Earlier turns of this conversation relevant to the latest message "
    "(selected by DH-RAG, best first):"
)

#: Texts the block returned lately, with their turns, for ``atruncate``.
_SHOWN_KEPT = 64


def _said(messages: list[ChatMessage]) -> list[tuple[Role, str]]:
    """The user and assistant messages with text as ``(role, text)``, the assistant messages
    that follow one another joined by newlines: one answer, however many messages (an
    agent's, around its tool calls) it took. System and tool messages are left out."""
    said: list[tuple[Role, str]] = []
    for m in messages:
        text = message_text(m)
        if not text.strip():
            continue
        if m.role == MessageRole.USER:
            said.append(("user", text))
        elif m.role == MessageRole.ASSISTANT:
            if said and said[-1][0] == "assistant":
                said[-1] = ("assistant", f"{said[-1][1]}\n{text}")
            else:
                said.append(("assistant", text))
    return said


def _check_messages(messages: Any) -> None:
    if isinstance(messages, (str, bytes)) or not isinstance(messages, (list, tuple)):
        raise TypeError(f"messages must be a list of ChatMessage, got {type(messages).__name__}")
    for i, m in enumerate(messages):
        if not isinstance(m, ChatMessage):
            raise TypeError(f"messages[{i}] must be a ChatMessage, got {type(m).__name__}")


class DHRAGMemoryBlock(BaseMemoryBlock[str]):
    """A memory block that stores flushed turns in DH-RAG and returns the relevant ones.

    **Recording.** ``Memory`` keeps recent messages itself and flushes older ones to its
    blocks; each flushed user message and the assistant answer after it (its assistant
    messages, joined) become one turn of the history (system and tool messages are skipped),
    stored without passages, by DH-RAG's own rule (``HistoryDatabase.record_messages``): a
    question put without its answer is held in the history store, so the answer may come
    through another block on the same store, another worker, or after a restart; a new
    question before it comes replaces it. Turns are thus recorded when ``Memory`` flushes,
    not at once: use ``DHRAGChatEngine`` (records each turn with its passages) or
    ``DHRAGRetriever.record`` to store every turn immediately. A block asked about a
    conversation with earlier questions but holding no stored turn says so, once per
    session (a ``UserWarning``).

    The session is ``session_id`` when set, else the ``Memory``'s own session id (passed to
    blocks by ``Memory``); with neither, a ``ValueError`` says how to pass one.

    **Token pressure.** With ``priority`` 1 or more (0, the default as for LlamaIndex's own
    blocks, means never cut), ``Memory`` over its ``token_limit`` calls ``atruncate``: the
    block drops its lowest-weight turns until the text is short enough, and goes only when no
    turn is left. Tokens are counted with ``tokenizer_fn``, LlamaIndex's default tokenizer
    unless given (give ``Memory``'s own if it has another).

    Args:
        history: A dhrag ``HistoryDatabase``, or a ``DHRAG`` (its ``.history`` is used), so a
            chat engine and a memory can share one database.
        session_id: Fixed session id (default: the Memory's).
        name: Block name in the memory prompt.
        header: First line of the returned text.
        max_response_chars: Each stored answer is cut to this many characters in the text.
        priority: ``Memory``'s truncation setting (0, the default: never cut).
        tokenizer_fn: Counts tokens for ``atruncate``.

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
    tokenizer_fn: Callable[[str], list[Any]] = Field(
        default_factory=get_tokenizer, exclude=True,
        description="Counts tokens when Memory asks the block to shrink.",
    )
    _warned: set[str] = PrivateAttr(default_factory=set)
    _shown: OrderedDict[str, list[SelectedTurn]] = PrivateAttr(default_factory=OrderedDict)
    _shown_lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

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
        return self._text(selected) if selected else ""

    def _text(self, selected: list[SelectedTurn]) -> str:
        """``format_turns``, remembered with its turns for ``atruncate``."""
        text = self.format_turns(selected)
        with self._shown_lock:
            self._shown[text] = selected
            self._shown.move_to_end(text)
            while len(self._shown) > _SHOWN_KEPT:
                self._shown.popitem(last=False)
        return text

    async def atruncate(self, content: str, tokens_to_truncate: int) -> str | None:
        """``content`` without its lowest-weight turns, at least ``tokens_to_truncate``
        tokens shorter; None when no turn would be left (or the text is not this block's).
        """
        if not isinstance(content, str) or not content:
            return None  # Memory passes [] for a block that gave nothing
        if tokens_to_truncate <= 0:
            return content
        with self._shown_lock:
            selected = self._shown.get(content)
        if not selected:
            return None
        full = len(self.tokenizer_fn(content))
        strongest = sorted(range(len(selected)), key=lambda i: -selected[i].weight)
        for n in range(len(selected) - 1, 0, -1):
            kept = [selected[i] for i in sorted(strongest[:n])]
            text = self.format_turns(kept)
            if full - len(self.tokenizer_fn(text)) >= tokens_to_truncate:
                return self._text(kept)
        return None

    async def _aput(self, messages: list[ChatMessage]) -> None:
        """Store the flushed messages' user/assistant exchanges as turns, in order, and hold
        a question left without answer in the history store (``record_messages``)."""
        _check_messages(messages)
        given = next((m.additional_kwargs.get("session_id") for m in messages
                      if m.additional_kwargs.get("session_id") is not None), None)
        session = self._session(given)
        said = _said(messages)
        if said:
            await asyncio.to_thread(self.history.record_messages, session, said)
