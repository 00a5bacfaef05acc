"""``DHRAGRetriever``: DH-RAG selection (history + knowledge base, weighted) as a retriever."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

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
from dhrag_core.pipeline.engine import EngineCloser
from dhrag_core.store import HistoryStore
from dhrag_core.validation import check_k, check_session_id
from llamaindex_dhrag.build import build_dhrag
from llamaindex_dhrag.convert import passage_from_node, selection_to_nodes

__all__ = ["DHRAGRetriever"]


class DHRAGRetriever(EngineCloser, BaseRetriever):
    """Retrieves DH-RAG's integrated context for one conversation.

    A query goes through ``DHRAG.select``: history turns are selected, the query is
    reconstructed, the knowledge base is searched and its passages are integrated with the
    passages of the selected turns. The nodes come best first, with the integration weight as
    score and the trace in ``node.metadata["dhrag"]``.

    **Recording.** Retrieval stores nothing (a retriever never sees the answer): call
    ``record(query, answer)`` once the answer is known -- it stores the turn with the
    nodes this retrieval returned -- so the next query sees it. ``DHRAGChatEngine`` records
    by itself. The LangChain ``DHRAGRetriever`` records the same way,
    ``record(session_id, query, answer, documents=...)``: it serves many sessions (one per
    call's config), this one serves the conversation it was made for; ``nodes`` and
    ``documents`` are each framework's name for the passages shown.

    Args:
        rag: The DH-RAG pipeline (``from_defaults`` builds one over another retriever).
        session_id: The conversation this retriever serves (required: one retriever per
            conversation, so that users never share a history by accident).
        k: Nodes returned; default ``Settings.context_k``.
        callback_manager: LlamaIndex callbacks.

    Example:
        >>> retriever = DHRAGRetriever(rag, session_id="alice")  # doctest: +SKIP
        >>> nodes = retriever.retrieve("How long is it?")  # doctest: +SKIP
        >>> nodes[0].node.metadata["dhrag"]["rewritten_query"]  # doctest: +SKIP
        >>> retriever.record("How long is it?", "About 21,196 km.")  # doctest: +SKIP
    """

    def __init__(
        self,
        rag: DHRAG,
        *,
        session_id: str | None = None,
        k: int | None = None,
        callback_manager: CallbackManager | None = None,
    ) -> None:
        if not isinstance(rag, DHRAG):
            raise TypeError(f"rag must be a dhrag_core.DHRAG, got {type(rag).__name__}")
        if session_id is None:
            raise ValueError(
                'no session id: pass DHRAGRetriever(..., session_id="...") -- one retriever '
                "per conversation (DHRAGChatEngine takes a session_id per chat call)"
            )
        self._rag = rag
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
        rag = build_dhrag(retriever, embedder=embedder, store=store, settings=settings,
                          rewriter=rewriter, llm=llm, search=search)
        return cls(rag, session_id=session_id, k=k)

    @property
    def rag(self) -> DHRAG:
        return self._rag

    @property
    def session_id(self) -> str:
        return self._session_id

    def _engine_to_close(self) -> DHRAG:
        return self._rag

    @property
    def last_selection(self) -> Selection | None:
        """The latest retrieval's selection until its turn is recorded (trace, history and
        rewritten query), else None."""
        return self._rag.pending(self._session_id)

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
            self._rag.select(self._session_id, query_bundle.query_str, self._k))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return selection_to_nodes(
            await self._rag.aselect(self._session_id, query_bundle.query_str, self._k))

    @staticmethod
    def _passages(nodes: Sequence[NodeWithScore] | None) -> list[Passage] | None:
        return None if nodes is None else [passage_from_node(n) for n in nodes]

    def record(
        self, query: str, answer: str, *, nodes: Sequence[NodeWithScore] | None = None
    ) -> AddResult:
        """Store the turn: ``query``, the passages shown and ``answer``.

        The passages are ``nodes`` when given (e.g. a query engine's ``source_nodes``), else
        the context of the latest retrieval if it was for the same ``query``.
        """
        return self._rag.record(self._session_id, query, answer,
                                passages=self._passages(nodes))

    async def arecord(
        self, query: str, answer: str, *, nodes: Sequence[NodeWithScore] | None = None
    ) -> AddResult:
        """``record`` off the event loop."""
        return await self._rag.arecord(self._session_id, query, answer,
                                       passages=self._passages(nodes))
