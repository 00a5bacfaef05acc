"""``DHRAGRetriever``: DH-RAG selection (history + knowledge base, weighted) as a retriever."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, overload

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.callbacks import CallbackManager
from llama_index.core.llms.llm import LLM
from llama_index.core.schema import NodeWithScore, QueryBundle, QueryType

from dhrag_core import (
    DHRAG,
    AddResult,
    Embedder,
    Passage,
    QueryRewriter,
    Selection,
    Settings,
)
from dhrag_core.deprecation import warn_renamed
from dhrag_core.pipeline.engine import EngineCloser
from dhrag_core.store import HistoryStore
from dhrag_core.validation import check_k, check_session_id
from llamaindex_dhrag._deprecated import engine_argument
from llamaindex_dhrag.build import build_dhrag
from llamaindex_dhrag.convert import node_to_passage, selection_to_nodes

__all__ = ["DHRAGRetriever"]


class _Required:
    """The default of ``record``'s arguments: not given (an explicit None is passed on, for
    the engine to refuse)."""

    def __repr__(self) -> str:
        return "<required>"


_UNSET: Any = _Required()


class DHRAGRetriever(EngineCloser, BaseRetriever):
    """Retrieves DH-RAG's integrated context for one conversation.

    A query goes through ``DHRAG.select``: history turns are selected, the query is
    reconstructed, the knowledge base is searched and its passages are integrated with the
    passages of the selected turns. The nodes come best first, with the integration weight as
    score and the trace in ``node.metadata["dhrag"]``.

    **Recording.** Retrieval stores nothing (a retriever never sees the answer): call
    ``record(session_id, query, answer)`` once the answer is known -- it stores the turn
    with the nodes this retrieval returned -- so the next query sees it. ``DHRAGChatEngine``
    records by itself. The shape is that of the LangChain ``DHRAGRetriever``
    (``record(session_id, query, answer, documents=...)``) and of ``DHRAG.record``; ``nodes``
    and ``documents`` are each framework's name for the passages shown. The old form
    ``record(query, answer)`` (this retriever's session) still works for one release, with a
    ``DeprecationWarning``.

    Args:
        engine: The DH-RAG engine (``from_defaults`` builds one over another retriever);
            ``rag=`` is its deprecated name.
        session_id: The conversation this retriever serves (required: one retriever per
            conversation, so that users never share a history by accident).
        k: Nodes returned; default ``Settings.retrieval.context_k``.
        callback_manager: LlamaIndex callbacks.

    Example:
        >>> retriever = DHRAGRetriever(engine, session_id="alice")  # doctest: +SKIP
        >>> nodes = retriever.retrieve("How long is it?")  # doctest: +SKIP
        >>> nodes[0].node.metadata["dhrag"]["rewritten_query"]  # doctest: +SKIP
        >>> retriever.record("alice", "How long is it?", "About 21,196 km.")  # doctest: +SKIP
    """

    def __init__(
        self,
        engine: DHRAG | None = None,
        *,
        session_id: str | None = None,
        k: int | None = None,
        callback_manager: CallbackManager | None = None,
        rag: DHRAG | None = None,
    ) -> None:
        engine = engine_argument(engine, rag, "DHRAGRetriever")
        if session_id is None:
            raise ValueError(
                'no session id: pass DHRAGRetriever(..., session_id="...") -- one retriever '
                "per conversation (DHRAGChatEngine takes a session_id per chat call)"
            )
        self._engine = engine
        self._session_id = check_session_id(session_id)
        self._k = None if k is None else check_k(k)
        super().__init__(callback_manager=callback_manager)

    @classmethod
    def from_defaults(
        cls,
        retriever: BaseRetriever,
        *,
        embedder: Embedder | BaseEmbedding | None = None,
        store: HistoryStore | str | None = None,
        settings: Settings | None = None,
        rewriter: QueryRewriter | Literal["light", "llm"] = "light",
        llm: LLM | None = None,
        search: Literal["auto", "vector", "text"] = "auto",
        session_id: str | None = None,
        k: int | None = None,
    ) -> DHRAGRetriever:
        """A DH-RAG retriever over another LlamaIndex retriever (see ``build_dhrag``: a
        vector index's retriever is searched by vector with the index's embedding model).

        Example:
            >>> r = DHRAGRetriever.from_defaults(  # doctest: +SKIP
            ...     index.as_retriever(similarity_top_k=20), session_id="alice")
        """
        engine = build_dhrag(retriever, embedder=embedder, store=store, settings=settings,
                             rewriter=rewriter, llm=llm, search=search)
        return cls(engine, session_id=session_id, k=k)

    @property
    def engine(self) -> DHRAG:
        """The DH-RAG engine (history database at ``engine.history``)."""
        return self._engine

    @property
    def rag(self) -> DHRAG:
        """Deprecated: ``engine``."""
        warn_renamed("DHRAGRetriever.rag", "DHRAGRetriever.engine")
        return self._engine

    @property
    def session_id(self) -> str:
        return self._session_id

    def _engine_to_close(self) -> DHRAG:
        return self._engine

    @property
    def last_selection(self) -> Selection | None:
        """The latest retrieval's selection until its turn is recorded (trace, history and
        rewritten query), else None."""
        return self._engine.pending(self._session_id)

    @staticmethod
    def _check_query(query: object) -> None:
        if not isinstance(query, (str, QueryBundle)):
            raise TypeError(
                f"query must be a str or QueryBundle, got {type(query).__name__}"
                + ("; decode it first (value.decode('utf-8'))" if isinstance(query, bytes)
                   else "")
            )

    def retrieve(self, str_or_query_bundle: QueryType) -> list[NodeWithScore]:
        """The integrated context for a query (a str or ``QueryBundle``), best first."""
        self._check_query(str_or_query_bundle)
        return super().retrieve(str_or_query_bundle)

    async def aretrieve(self, str_or_query_bundle: QueryType) -> list[NodeWithScore]:
        self._check_query(str_or_query_bundle)
        return await super().aretrieve(str_or_query_bundle)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return selection_to_nodes(
            self._engine.select(self._session_id, query_bundle.query_str, self._k))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return selection_to_nodes(
            await self._engine.aselect(self._session_id, query_bundle.query_str, self._k))

    @staticmethod
    def _passages(nodes: Sequence[NodeWithScore] | None) -> list[Passage] | None:
        return None if nodes is None else [node_to_passage(n) for n in nodes]

    def _turn(self, session_id: str, query: str, answer: str) -> tuple[str, str, str]:
        """``(session_id, query, answer)`` of a ``record`` call, the deprecated
        ``record(query, answer)`` (this retriever's session) included."""
        if _UNSET not in (session_id, query, answer):
            return session_id, query, answer
        given = [v for v in (session_id, query, answer) if v is not _UNSET]
        if len(given) != 2:
            raise TypeError("record() takes session_id, query and answer")
        warn_renamed("DHRAGRetriever.record(query, answer)",
                     "record(session_id, query, answer), as in LangChain's DHRAGRetriever",
                     stacklevel=4)
        return self._session_id, given[0], given[1]

    @overload
    def record(
        self, session_id: str, query: str, answer: str, *,
        nodes: Sequence[NodeWithScore] | None = None,
    ) -> AddResult: ...

    @overload
    def record(
        self, query: str, answer: str, /, *, nodes: Sequence[NodeWithScore] | None = None
    ) -> AddResult: ...

    def record(
        self,
        session_id: str = _UNSET,
        query: str = _UNSET,
        answer: str = _UNSET,
        *,
        nodes: Sequence[NodeWithScore] | None = None,
    ) -> AddResult:
        """Store a turn of ``session_id`` (usually this retriever's ``session_id``):
        ``query``, the passages shown and ``answer``.

        The passages are ``nodes`` when given (e.g. a query engine's ``source_nodes``), else
        the context of the session's latest retrieval if it was for the same ``query``.
        ``record(query, answer)`` (deprecated) records in this retriever's session.
        """
        sid, query, answer = self._turn(session_id, query, answer)
        return self._engine.record(sid, query, answer, passages=self._passages(nodes))

    @overload
    async def arecord(
        self, session_id: str, query: str, answer: str, *,
        nodes: Sequence[NodeWithScore] | None = None,
    ) -> AddResult: ...

    @overload
    async def arecord(
        self, query: str, answer: str, /, *, nodes: Sequence[NodeWithScore] | None = None
    ) -> AddResult: ...

    async def arecord(
        self,
        session_id: str = _UNSET,
        query: str = _UNSET,
        answer: str = _UNSET,
        *,
        nodes: Sequence[NodeWithScore] | None = None,
    ) -> AddResult:
        """``record`` off the event loop."""
        sid, query, answer = self._turn(session_id, query, answer)
        return await self._engine.arecord(sid, query, answer, passages=self._passages(nodes))

