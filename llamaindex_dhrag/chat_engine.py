"""``DHRAGChatEngine``: a LlamaIndex chat engine whose memory is DH-RAG's history database.

Each turn: ``DHRAG.select`` (history selection, query reconstruction, retrieval through the
user's retriever, weighted integration of retrieved and history passages), then the user's
LLM answers from the raw message, the integrated context and the selected history turns, then
``DHRAG.record`` stores (message, context passages, answer). Follows the shape of LlamaIndex's
``CondensePlusContextChatEngine``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Literal

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    MessageRole,
)
from llama_index.core.callbacks import CallbackManager
from llama_index.core.chat_engine.types import (
    AgentChatResponse,
    BaseChatEngine,
    StreamingAgentChatResponse,
)
from llama_index.core.llms.llm import LLM
from llama_index.core.prompts import PromptTemplate

from dhrag_core import DHRAG, Embedder, QueryRewriter, Selection, Settings
from dhrag_core.pipeline.engine import EngineCloser
from dhrag_core.store import HistoryStore
from dhrag_core.validation import check_k, check_session_id, check_text
from llamaindex_dhrag.answer import DEFAULT_CONTEXT_PROMPT, answer_messages, selection_sources
from llamaindex_dhrag.build import build_dhrag, check_retriever
from llamaindex_dhrag.convert import message_pairs, message_text, turns_to_messages
from llamaindex_dhrag.llm import check_llm, configured_llm

__all__ = ["DEFAULT_CONTEXT_PROMPT", "DHRAGChatEngine"]


class DHRAGChatEngine(EngineCloser, BaseChatEngine):
    """Multi-turn RAG chat engine with DH-RAG's dynamic history database as memory.

    One engine serves many conversations: every chat method takes an optional ``session_id``
    (default: the engine's, if one was set; with neither, a ``ValueError`` says how to pass
    one). Each turn is recorded by the engine itself, with the passages it showed.
    ``chat_history`` lists the session's *stored* turns, oldest
    first; DH-RAG may have merged near-duplicate turns or evicted low-weight ones beyond
    ``Settings.capacity``. Responses carry the trace: ``sources[0]`` is a ``ToolOutput``
    whose ``raw_output`` is ``selection_trace(...)`` (rewritten query, selected history turns
    with relevance/recency/weight, context items with integration weights); ``source_nodes``
    are the context passages with the integration weight as score and the per-item trace in
    ``node.metadata["dhrag"]``; ``AgentChatResponse.metadata["dhrag"]`` is the trace too.

    Streaming yields tokens as the LLM produces them; the turn is recorded when the stream has
    been consumed to its end (a stream abandoned half-way records nothing).

    Args:
        rag: The DH-RAG pipeline (see ``from_defaults`` to build one over a retriever).
        llm: The LlamaIndex LLM that answers (``from_defaults`` falls back to LlamaIndex's
            ``Settings.llm``).
        session_id: Default conversation id (default: none; each call must name one).
        system_prompt: Prepended to the context prompt.
        context_prompt: Template with ``{context_str}``; may also use ``{query}`` (the raw
            message) and ``{rewritten_query}``.
        k: Passages in the integrated context; default ``Settings.context_k``.
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
        rag: DHRAG,
        llm: LLM,
        *,
        session_id: str | None = None,
        system_prompt: str | None = None,
        context_prompt: str | PromptTemplate | None = None,
        k: int | None = None,
        callback_manager: CallbackManager | None = None,
    ) -> None:
        if not isinstance(rag, DHRAG):
            raise TypeError(f"rag must be a dhrag_core.DHRAG, got {type(rag).__name__}")
        self._rag = rag
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
                similarity_top_k=20)`` (give it at least ``Settings.kb_k`` results).
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
            chat_history: Messages to seed that session with (replacing its history).
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
            engine._seed(engine._sid(None), chat_history)
        return engine

    # -- properties ------------------------------------------------------------------------

    @property
    def rag(self) -> DHRAG:
        """The DH-RAG pipeline (history database at ``rag.history``)."""
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
        """The default session's stored turns as user/assistant messages, oldest first."""
        return self.get_chat_history()

    def get_chat_history(self, session_id: str | None = None) -> list[ChatMessage]:
        """A session's stored turns as user/assistant messages, oldest first."""
        return turns_to_messages(self._rag.history.turns(self._sid(session_id)))

    def reset(self, session_id: str | None = None) -> None:
        """Forget a session's history (default: the engine's session); others are kept."""
        self._rag.reset(self._sid(session_id))

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
        return check_text("message", message, max_chars=self._rag.settings.max_query_chars)

    def _seed(self, session_id: str, chat_history: Sequence[ChatMessage]) -> None:
        """Replace the session's history with ``chat_history`` (every message checked before
        the stored session is touched: ``DHRAG.record_turns``)."""
        self._rag.record_turns(session_id, message_pairs(chat_history), replace_history=True)

    async def _aseed(self, session_id: str, chat_history: Sequence[ChatMessage]) -> None:
        await asyncio.to_thread(self._seed, session_id, chat_history)

    def _messages(self, selection: Selection, message: str) -> list[ChatMessage]:
        return answer_messages(selection, message, context_prompt=self._context_prompt,
                               system_prompt=self._system_prompt,
                               system_role=self._llm.metadata.system_role)

    def _prepare(self, message: Any, session_id: str | None) -> tuple[str, str]:
        return self._sid(session_id), self._check_message(message)

    # -- chat ------------------------------------------------------------------------------

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
            chat_history: When given, replaces the session's history first (LlamaIndex
                semantics); DH-RAG otherwise keeps the history itself.
            session_id: Conversation id; default: the engine's.
        """
        sid, msg = self._prepare(message, session_id)
        if chat_history is not None:
            self._seed(sid, chat_history)
        selection = self._rag.select(sid, msg, self._k)
        answer = message_text(self._llm.chat(self._messages(selection, msg)).message)
        self._rag.record(sid, msg, answer, selection=selection)
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
        """``chat`` without blocking the event loop (CPU work runs in worker threads)."""
        sid, msg = self._prepare(message, session_id)
        if chat_history is not None:
            await self._aseed(sid, chat_history)
        selection = await self._rag.aselect(sid, msg, self._k)
        reply = await self._llm.achat(self._messages(selection, msg))
        answer = message_text(reply.message)
        await self._rag.arecord(sid, msg, answer, selection=selection)
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
        """Stream the answer token by token; the turn is recorded when the stream ends.

        Example:
            >>> reply = engine.stream_chat("How long is it?")  # doctest: +SKIP
            >>> for token in reply.response_gen:  # doctest: +SKIP
            ...     print(token, end="")
        """
        sid, msg = self._prepare(message, session_id)
        if chat_history is not None:
            self._seed(sid, chat_history)
        selection = self._rag.select(sid, msg, self._k)
        stream = self._llm.stream_chat(self._messages(selection, msg))

        def generate() -> ChatResponseGen:
            text = ""
            for chunk in stream:
                delta = chunk.delta or ""
                text += delta
                yield ChatResponse(
                    message=ChatMessage(role=MessageRole.ASSISTANT, content=text), delta=delta
                )
            self._rag.record(sid, msg, text.strip(), selection=selection)

        sources, nodes, _ = selection_sources(selection)
        return StreamingAgentChatResponse(
            chat_stream=generate(), sources=sources, source_nodes=nodes,
            is_writing_to_memory=False,
        )

    async def astream_chat(
        self,
        message: str,
        chat_history: list[ChatMessage] | None = None,
        *,
        session_id: str | None = None,
    ) -> StreamingAgentChatResponse:
        """``stream_chat`` for asyncio: iterate ``reply.async_response_gen()``."""
        sid, msg = self._prepare(message, session_id)
        if chat_history is not None:
            await self._aseed(sid, chat_history)
        selection = await self._rag.aselect(sid, msg, self._k)
        stream = await self._llm.astream_chat(self._messages(selection, msg))

        async def generate() -> ChatResponseAsyncGen:
            text = ""
            async for chunk in stream:
                delta = chunk.delta or ""
                text += delta
                yield ChatResponse(
                    message=ChatMessage(role=MessageRole.ASSISTANT, content=text), delta=delta
                )
            await self._rag.arecord(sid, msg, text.strip(), selection=selection)

        sources, nodes, _ = selection_sources(selection)
        return StreamingAgentChatResponse(
            achat_stream=generate(), sources=sources, source_nodes=nodes,
            is_writing_to_memory=False,
        )
