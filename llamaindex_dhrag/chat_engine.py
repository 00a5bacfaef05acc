"""``DHRAGChatEngine``: a LlamaIndex chat engine whose memory is DH-RAG's history database.

Each turn: ``DHRAG.select`` (history selection, query reconstruction, retrieval through the
user's retriever, weighted integration of retrieved and history passages), then the user's
LLM answers from the raw message, the integrated context and the selected history turns, then
``DHRAG.record`` stores (message, context passages, answer). Follows the shape of LlamaIndex's
``CondensePlusContextChatEngine``, streams included.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import warnings
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.callbacks import CallbackManager
from llama_index.core.chat_engine.types import (
    AgentChatResponse,
    BaseChatEngine,
    StreamingAgentChatResponse,
)
from llama_index.core.llms.llm import LLM
from llama_index.core.memory import BaseMemory
from llama_index.core.prompts import PromptTemplate

from dhrag_core import DHRAG, Embedder, QueryRewriter, Selection, Settings
from dhrag_core.deprecation import warn_renamed
from dhrag_core.pipeline.engine import EngineCloser
from dhrag_core.store import HistoryStore
from dhrag_core.validation import check_k, check_session_id, fit_query, one_line
from llamaindex_dhrag._deprecated import engine_argument
from llamaindex_dhrag._stack import caller_level
from llamaindex_dhrag.answer import DEFAULT_CONTEXT_PROMPT, answer_messages, selection_sources
from llamaindex_dhrag.build import build_dhrag, check_retriever
from llamaindex_dhrag.convert import message_pairs, message_text, turns_to_messages
from llamaindex_dhrag.llm import check_llm, configured_llm

__all__ = ["DEFAULT_CONTEXT_PROMPT", "DHRAGChatEngine"]

log = logging.getLogger(__name__)


@dataclass
class _Stream:
    """A streamed turn being written: its question and the thread or task writing it."""

    question: str
    writer: threading.Thread | asyncio.Task[None] | None = None
    stored: bool = False


async def _finish_despite_cancel(work: Awaitable[None]) -> None:
    """Await ``work`` to its end even if the caller is cancelled meanwhile (``asyncio.shield``
    alone would return while it still runs); a cancellation is raised once it is done. A
    failure of ``work`` is raised as it is."""
    task = asyncio.ensure_future(work)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done() and task.cancelled():
                raise
            cancelled = True
    task.result()
    if cancelled:
        raise asyncio.CancelledError


class _TurnWriter(BaseMemory):
    """The memory a ``StreamingAgentChatResponse`` writes the finished answer to: it records
    the streamed turn (LlamaIndex's own engines hand their memory to the same writer)."""

    _write: Callable[[str], None] = PrivateAttr()
    _awrite: Callable[[str], Awaitable[None]] = PrivateAttr()

    def __init__(self, write: Callable[[str], None],
                 awrite: Callable[[str], Awaitable[None]]) -> None:
        super().__init__()
        self._write, self._awrite = write, awrite

    @classmethod
    def from_defaults(cls, **kwargs: Any) -> _TurnWriter:
        raise NotImplementedError("made by DHRAGChatEngine for one streamed turn")

    def get(self, input: str | None = None, **kwargs: Any) -> list[ChatMessage]:
        return []

    def get_all(self) -> list[ChatMessage]:
        return []

    def put(self, message: ChatMessage) -> None:
        self._write(message_text(message))

    async def aput(self, message: ChatMessage) -> None:
        await self._awrite(message_text(message))

    def set(self, messages: list[ChatMessage]) -> None:
        raise NotImplementedError("a streamed turn is only written")

    def reset(self) -> None:
        raise NotImplementedError("a streamed turn is only written")


class DHRAGChatEngine(EngineCloser, BaseChatEngine):
    """Multi-turn RAG chat engine with DH-RAG's dynamic history database as memory.

    One engine serves many conversations: every chat method takes an optional ``session_id``
    (default: the engine's, if one was set; with neither, a ``ValueError`` says how to pass
    one). Each turn is recorded by the engine itself, with the passages it showed.
    ``chat_history`` lists the session's *stored* turns, oldest first (DH-RAG may have merged
    near-duplicate turns or evicted low-weight ones beyond ``Settings.limits.capacity``), then the
    questions of streams still being written. Responses carry the trace: ``sources[0]`` is a
    ``ToolOutput`` whose ``raw_output`` is ``selection_trace(...)`` (rewritten query, selected
    history turns with relevance/recency/weight, context items with integration weights);
    ``source_nodes`` are the context passages with the integration weight as score and the
    per-item trace in ``node.metadata["dhrag"]``; ``AgentChatResponse.metadata["dhrag"]`` is
    the trace too.

    **Streaming** works as in LlamaIndex's own engines: the question is in ``chat_history`` as
    soon as ``stream_chat``/``astream_chat`` returns; a writer (a thread; for ``astream_chat``
    a task on the running loop) reads the LLM's stream to its end, passing tokens on as they
    come, and records the turn with the whole answer and its passages, however much of the
    stream the caller reads (``reply.is_done``, or ``await
    reply.awrite_response_to_history_task``, says it is stored). If the LLM fails mid-stream,
    nothing is recorded and the reader gets the error. The next call on the session waits
    for the streamed turn, so turns keep their order. Until its turn is recorded, the
    question is also held in the history store (``HistoryDatabase.hold_question``): the
    ``chat_history`` of any engine on the same store (another worker, a restarted process)
    shows it. One that a stopped process left there is shown until the session's next turn
    is recorded.

    **``chat_history=``** (LlamaIndex: "replace the memory with these messages"): the
    session's own history passed back (``engine.chat(msg, chat_history=engine.chat_history)``)
    changes nothing, so stored turns keep their passages; the stored history followed by new
    exchanges adds those; anything else replaces the stored history, with a ``UserWarning``
    when that drops stored turns (``chat_history=[]`` included). To clear a session, call
    ``reset``.

    Args:
        engine: The DH-RAG engine (see ``from_defaults`` to build one over a retriever);
            ``rag=`` is its deprecated name.
        llm: The LlamaIndex LLM that answers (``from_defaults`` falls back to LlamaIndex's
            ``Settings.llm``).
        session_id: Default conversation id (default: none; each call must name one).
        system_prompt: Prepended to the context prompt.
        context_prompt: Template with ``{context_str}``; may also use ``{query}`` (the raw
            message) and ``{rewritten_query}``.
        k: Passages in the integrated context; default ``Settings.retrieval.context_k``.
        callback_manager: LlamaIndex callbacks (kept for tools that look for one).

    Example:
        >>> engine = DHRAGChatEngine.from_defaults(  # doctest: +SKIP
        ...     index.as_retriever(similarity_top_k=20), llm=llm, session_id="alice")
        >>> engine.chat("What is the Great Wall of China built out of?")  # doctest: +SKIP
        >>> reply = engine.chat("How long is it?")  # doctest: +SKIP
        >>> reply.sources[0].raw_output["rewritten_query"]  # doctest: +SKIP
    """

    def __init__(
        self,
        engine: DHRAG | None = None,
        llm: LLM | None = None,
        *,
        session_id: str | None = None,
        system_prompt: str | None = None,
        context_prompt: str | PromptTemplate | None = None,
        k: int | None = None,
        callback_manager: CallbackManager | None = None,
        rag: DHRAG | None = None,
    ) -> None:
        self._rag = engine_argument(engine, rag, "DHRAGChatEngine")
        self._llm = check_llm(llm)
        self._session_id = None if session_id is None else check_session_id(session_id)
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise TypeError(f"system_prompt must be a str, got {type(system_prompt).__name__}")
        self._system_prompt = system_prompt
        if isinstance(context_prompt, str):
            context_prompt = PromptTemplate(context_prompt)
        if context_prompt is not None and not isinstance(context_prompt, PromptTemplate):
            raise TypeError(
                f"context_prompt must be a str or PromptTemplate, "
                f"got {type(context_prompt).__name__}"
            )
        self._context_prompt = context_prompt or DEFAULT_CONTEXT_PROMPT
        if "context_str" not in self._context_prompt.template_vars:
            raise ValueError("context_prompt must contain {context_str}")
        self._k = None if k is None else check_k(k)
        self.callback_manager = callback_manager or CallbackManager([])
        self._streams: dict[str, list[_Stream]] = {}
        # held while a streamed turn moves from pending to stored, and while history is read
        self._streams_lock = threading.Lock()

    @classmethod
    def from_defaults(
        cls,
        retriever: BaseRetriever,
        llm: LLM | None = None,
        *,
        embedder: Embedder | BaseEmbedding | None = None,
        store: HistoryStore | str | None = None,
        settings: Settings | None = None,
        rewriter: QueryRewriter | Literal["light", "llm"] = "light",
        search: Literal["auto", "vector", "text"] = "auto",
        session_id: str | None = None,
        chat_history: Sequence[ChatMessage] | None = None,
        system_prompt: str | None = None,
        context_prompt: str | PromptTemplate | None = None,
        k: int | None = None,
    ) -> DHRAGChatEngine:
        """A chat engine over a LlamaIndex retriever.

        Args:
            retriever: The static knowledge base, e.g. ``index.as_retriever(
                similarity_top_k=20)`` (give it at least ``Settings.retrieval.kb_k`` results).
            llm: The LLM that answers (and rewrites, with ``rewriter="llm"``); default:
                LlamaIndex's ``Settings.llm`` (a ``ValueError`` if none can be had).
            embedder: dhrag embedder or LlamaIndex ``BaseEmbedding`` for the history and the
                integration step; default: the vector index's own embedding model (the index
                is then searched by vector), else the offline MiniLM, loaded on first use.
            store: History store or URL (``"memory"``, ``"sqlite:///path.db"``,
                ``"postgresql://user:password@host/db"``).
            settings: dhrag ``Settings``.
            rewriter: ``"light"`` (no LLM call), ``"llm"`` (the core's ``LLMRewriter`` over
                ``LlamaIndexLLM(llm)``, falling back to the light one on errors) or any
                ``QueryRewriter``.
            search: ``"auto"`` (by vector where possible), ``"vector"`` or ``"text"``
                (see ``build_dhrag``).
            session_id: Default conversation id (default: none; each call names one).
            chat_history: Messages to seed that session with (as ``chat(...,
                chat_history=)``: the stored history itself is kept as it is).
            system_prompt, context_prompt, k: As for the constructor.

        Example:
            >>> engine = DHRAGChatEngine.from_defaults(  # doctest: +SKIP
            ...     index.as_retriever(similarity_top_k=20), llm, rewriter="llm",
            ...     store="sqlite:///history.db")
        """
        check_retriever(retriever)
        llm = configured_llm() if llm is None else check_llm(llm)
        if session_id is not None:
            check_session_id(session_id)
        rag = build_dhrag(retriever, embedder=embedder, store=store, settings=settings,
                          rewriter=rewriter, llm=llm, search=search)
        engine = cls(rag, llm, session_id=session_id, system_prompt=system_prompt,
                     context_prompt=context_prompt, k=k)
        if chat_history is not None:
            engine._apply_history(engine._sid(None), chat_history)
        return engine

    # -- properties ------------------------------------------------------------------------

    @property
    def engine(self) -> DHRAG:
        """The DH-RAG engine (history database at ``engine.history``)."""
        return self._rag

    @property
    def rag(self) -> DHRAG:
        """Deprecated: ``engine``."""
        warn_renamed("DHRAGChatEngine.rag", "DHRAGChatEngine.engine")
        return self._rag

    @property
    def llm(self) -> LLM:
        return self._llm

    @property
    def session_id(self) -> str | None:
        """The default conversation id (None: each call names one)."""
        return self._session_id

    @property
    def chat_history(self) -> list[ChatMessage]:
        """The default session's stored turns as user/assistant messages, oldest first, then
        the questions of streams still being written (``get_chat_history``)."""
        return self.get_chat_history()

    def get_chat_history(self, session_id: str | None = None) -> list[ChatMessage]:
        """A session's stored turns as user/assistant messages, oldest first, then the
        questions of streams still being written: this engine's, and the one held in the
        history store (another engine's or process's, or one left by a process that stopped
        mid-stream)."""
        sid = self._sid(session_id)
        with self._streams_lock:
            turns = self._rag.history.turns(sid)
            pending = [s.question for s in self._streams.get(sid, [])]
            held = self._rag.history.held_question(sid)
        if held is not None and held not in pending:
            pending.append(held)
        return turns_to_messages(turns) + [
            ChatMessage(role=MessageRole.USER, content=q) for q in pending
        ]

    def reset(self, session_id: str | None = None) -> None:
        """Forget a session's history (default: the engine's session); others are kept."""
        sid = self._sid(session_id)
        self._wait_for_streams(sid)
        self._rag.reset(sid)

    def close(self) -> None:
        """Wait for the streamed turns being written by threads, then close the history's
        store (``DHRAG.close``); also on leaving a ``with`` block."""
        with self._streams_lock:
            sessions = list(self._streams)
        for sid in sessions:
            self._wait_for_streams(sid)
        super().close()

    def _engine_to_close(self) -> DHRAG:
        return self._rag

    # -- helpers ---------------------------------------------------------------------------

    def _sid(self, session_id: str | None) -> str:
        if session_id is not None:
            return check_session_id(session_id)
        if self._session_id is None:
            raise ValueError(
                'no session id: pass chat(..., session_id="...") or set '
                'DHRAGChatEngine(..., session_id="...") for calls that name none'
            )
        return self._session_id

    def _check_message(self, message: Any) -> str:
        return fit_query(message, self._rag.settings.limits.max_query_chars, "message")

    def _set_history(self, session_id: str, chat_history: Sequence[ChatMessage]) -> str | None:
        """Make the session's history ``chat_history``: nothing to do when it is the stored
        history, the new exchanges added when it extends it, else replaced. Every message is
        checked before the session is touched (``DHRAG.record_turns``). Returns the warning
        to give when stored turns were dropped."""
        given = message_pairs(chat_history)
        stored = message_pairs(turns_to_messages(self._rag.history.turns(session_id)))
        if given[: len(stored)] == stored:
            if len(given) > len(stored):
                self._rag.record_turns(session_id, given[len(stored):])
            return None
        self._rag.record_turns(session_id, given, replace_history=True)
        return (f"chat_history= replaced the {len(stored)} stored turn(s) of session "
                f"{session_id!r} with {len(given)} turn(s) without passages: pass no "
                "chat_history (DH-RAG keeps the conversation) or engine.chat_history to "
                "continue it, or call engine.reset() to clear it")

    def _apply_history(self, session_id: str, chat_history: Sequence[ChatMessage]) -> None:
        note = self._set_history(session_id, chat_history)
        if note is not None:
            warnings.warn(note, UserWarning, stacklevel=caller_level())

    async def _aapply_history(self, session_id: str,
                              chat_history: Sequence[ChatMessage]) -> None:
        note = await asyncio.to_thread(self._set_history, session_id, chat_history)
        if note is not None:
            warnings.warn(note, UserWarning, stacklevel=caller_level())

    def _messages(self, selection: Selection, message: str) -> list[ChatMessage]:
        return answer_messages(selection, message, context_prompt=self._context_prompt,
                               system_prompt=self._system_prompt,
                               system_role=self._llm.metadata.system_role)

    def _prepare(self, message: Any, session_id: str | None) -> tuple[str, str]:
        return self._sid(session_id), self._check_message(message)

    def _wait_for_streams(self, session_id: str) -> None:
        """Wait until the session's streamed turns written by threads are stored."""
        with self._streams_lock:
            writers = [s.writer for s in self._streams.get(session_id, [])]
        for w in writers:
            if isinstance(w, threading.Thread) and w is not threading.current_thread():
                w.join()

    async def _await_streams(self, session_id: str) -> None:
        """``_wait_for_streams`` for asyncio: also awaits writer tasks on this loop."""
        with self._streams_lock:
            writers = [s.writer for s in self._streams.get(session_id, [])]
        loop = asyncio.get_running_loop()
        for w in writers:
            if isinstance(w, threading.Thread):
                await asyncio.to_thread(w.join)
            elif w is not None and w.get_loop() is loop and w is not asyncio.current_task():
                await asyncio.wait([w])

    def _begin_stream(self, session_id: str, question: str) -> _Stream:
        """A stream of ``question`` (which the caller has held in the history store)."""
        stream = _Stream(question)
        with self._streams_lock:
            self._streams.setdefault(session_id, []).append(stream)
        return stream

    def _let_go(self, session_id: str, question: str) -> None:
        """No longer hold ``question`` (if it is still the held one). Its turn is recorded or
        given up: a store error here is logged, not raised, so that it does not hide that."""
        try:
            self._rag.history.take_question(session_id, question)
        except Exception as e:
            log.warning("session %r: an answered or given-up question is still held in the "
                        "store: %s: %s", session_id, type(e).__name__, one_line(e))

    def _finish_stream(self, session_id: str, stream: _Stream) -> None:
        """Forget ``stream``; its question, if no turn was recorded (the LLM failed), is
        no longer held either."""
        with self._streams_lock:
            self._end_stream(session_id, stream)
            if not stream.stored:
                self._let_go(session_id, stream.question)

    def _end_stream(self, session_id: str, stream: _Stream) -> None:
        """Forget ``stream`` (the caller holds the lock)."""
        left = [s for s in self._streams.get(session_id, []) if s is not stream]
        if left:
            self._streams[session_id] = left
        else:
            self._streams.pop(session_id, None)

    def _store_streamed(self, sid: str, stream: _Stream, answer: str,
                        selection: Selection) -> None:
        """Record a streamed turn and drop its pending question (here and in the store) in
        one step."""
        with self._streams_lock:
            try:
                self._rag.record(sid, stream.question, answer, selection=selection)
                stream.stored = True
                self._let_go(sid, stream.question)
            finally:
                self._end_stream(sid, stream)

    def _writer(self, sid: str, stream: _Stream, selection: Selection) -> _TurnWriter:
        def write(answer: str) -> None:
            self._store_streamed(sid, stream, answer, selection)

        async def awrite(answer: str) -> None:
            await asyncio.to_thread(write, answer)

        return _TurnWriter(write, awrite)

    def _write_stream(self, reply: StreamingAgentChatResponse, sid: str, stream: _Stream,
                      selection: Selection) -> None:
        """The writer thread: read the LLM's stream to its end and record the turn."""
        try:
            reply.write_response_to_history(self._writer(sid, stream, selection))
            if not stream.stored:  # the LLM streamed nothing: the question, unanswered
                self._store_streamed(sid, stream, "", selection)
        except Exception as e:  # the reader gets it from the reply
            log.warning("stream for session %r failed, turn not recorded: %s: %s",
                        sid, type(e).__name__, one_line(e))
        finally:
            self._finish_stream(sid, stream)

    async def _awrite_stream(self, reply: StreamingAgentChatResponse, sid: str,
                             stream: _Stream, selection: Selection) -> None:
        """The writer task: ``_write_stream`` on the event loop."""
        try:
            await reply.awrite_response_to_history(self._writer(sid, stream, selection))
            if not stream.stored:
                await asyncio.to_thread(self._store_streamed, sid, stream, "", selection)
        except Exception as e:
            log.warning("stream for session %r failed, turn not recorded: %s: %s",
                        sid, type(e).__name__, one_line(e))
        finally:
            with self._streams_lock:
                self._end_stream(sid, stream)
            if not stream.stored:
                await asyncio.to_thread(self._let_go, sid, stream.question)

    # -- chat ------------------------------------------------------------------------------

    def _store_answered(self, sid: str, msg: str, answer: str, selection: Selection,
                        left: str | None) -> None:
        """Record an answered turn and let go of the question a stopped stream left held."""
        self._rag.record(sid, msg, answer, selection=selection)
        if left is not None:
            self._let_go(sid, left)

    def chat(
        self,
        message: str,
        chat_history: list[ChatMessage] | None = None,
        *,
        session_id: str | None = None,
    ) -> AgentChatResponse:
        """Answer ``message`` in a session and record the turn.

        Args:
            message: The user's message.
            chat_history: Usually left out (DH-RAG keeps the history). When given, it becomes
                the session's history first: the stored history itself changes nothing,
                anything else replaces it (see the class notes).
            session_id: Conversation id; default: the engine's.
        """
        sid, msg = self._prepare(message, session_id)
        self._wait_for_streams(sid)
        left = self._rag.history.held_question(sid)
        if chat_history is not None:
            self._apply_history(sid, chat_history)
        selection = self._rag.select(sid, msg, self._k)
        answer = message_text(self._llm.chat(self._messages(selection, msg)).message)
        self._rag.record(sid, msg, answer, selection=selection)
        if left is not None:
            self._let_go(sid, left)
        sources, nodes, trace = selection_sources(selection)
        return AgentChatResponse(response=answer, sources=sources, source_nodes=nodes,
                                 metadata={"dhrag": trace})

    async def achat(
        self,
        message: str,
        chat_history: list[ChatMessage] | None = None,
        *,
        session_id: str | None = None,
    ) -> AgentChatResponse:
        """``chat`` without blocking the event loop (CPU work runs in worker threads).

        Cancelled, it follows one rule: the turn is stored exactly when the LLM's answer
        reached the engine. Cancelled before (during the selection or the LLM call), nothing
        is stored; cancelled after, the cancellation waits until the turn is stored (and a
        question held by a stopped stream let go), then ``CancelledError`` is raised: the
        caller may not get an answer that the history keeps.
        """
        sid, msg = self._prepare(message, session_id)
        await self._await_streams(sid)
        left = await asyncio.to_thread(self._rag.history.held_question, sid)
        if chat_history is not None:
            await self._aapply_history(sid, chat_history)
        selection = await self._rag.aselect(sid, msg, self._k)
        reply = await self._llm.achat(self._messages(selection, msg))
        answer = message_text(reply.message)
        # the LLM answered: the turn is stored whatever happens to this call from now on
        await _finish_despite_cancel(asyncio.to_thread(self._store_answered, sid, msg, answer,
                                                       selection, left))
        sources, nodes, trace = selection_sources(selection)
        return AgentChatResponse(response=answer, sources=sources, source_nodes=nodes,
                                 metadata={"dhrag": trace})

    def stream_chat(
        self,
        message: str,
        chat_history: list[ChatMessage] | None = None,
        *,
        session_id: str | None = None,
    ) -> StreamingAgentChatResponse:
        """Stream the answer token by token; the turn is recorded when the LLM's stream ends,
        however much of it is read (see the class notes).

        Example:
            >>> reply = engine.stream_chat("How long is it?")  # doctest: +SKIP
            >>> for token in reply.response_gen:  # doctest: +SKIP
            ...     print(token, end="")
        """
        sid, msg = self._prepare(message, session_id)
        self._wait_for_streams(sid)
        if chat_history is not None:
            self._apply_history(sid, chat_history)
        selection = self._rag.select(sid, msg, self._k)
        chunks = self._llm.stream_chat(self._messages(selection, msg))
        sources, nodes, _ = selection_sources(selection)
        reply = StreamingAgentChatResponse(chat_stream=chunks, sources=sources,
                                           source_nodes=nodes)
        self._rag.history.hold_question(sid, msg)
        stream = self._begin_stream(sid, msg)
        writer = threading.Thread(target=self._write_stream, args=(reply, sid, stream, selection),
                                  name=f"dhrag-stream-{sid}")
        stream.writer = reply.write_response_to_history_thread = writer
        writer.start()
        return reply

    async def astream_chat(
        self,
        message: str,
        chat_history: list[ChatMessage] | None = None,
        *,
        session_id: str | None = None,
    ) -> StreamingAgentChatResponse:
        """``stream_chat`` for asyncio: iterate ``reply.async_response_gen()``; the turn is
        recorded by a task on the running loop."""
        sid, msg = self._prepare(message, session_id)
        await self._await_streams(sid)
        if chat_history is not None:
            await self._aapply_history(sid, chat_history)
        selection = await self._rag.aselect(sid, msg, self._k)
        chunks = await self._llm.astream_chat(self._messages(selection, msg))
        sources, nodes, _ = selection_sources(selection)
        reply = StreamingAgentChatResponse(achat_stream=chunks, sources=sources,
                                           source_nodes=nodes)
        await asyncio.to_thread(self._rag.history.hold_question, sid, msg)
        stream = self._begin_stream(sid, msg)
        task = asyncio.create_task(self._awrite_stream(reply, sid, stream, selection))
        stream.writer = reply.awrite_response_to_history_task = task
        return reply
