"""``DHRAGRetriever``: a LangChain retriever with DH-RAG conversational memory."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig, ensure_config
from pydantic import Field

from dhrag_core import DHRAG, AddResult, Selection, Settings
from dhrag_core.pipeline.engine import EngineCloser
from dhrag_core.store import HistoryStore
from dhrag_core.validation import check_k
from langchain_dhrag._context import caller_context, handed_selection, session_from_config
from langchain_dhrag.convert import documents_to_passages, selection_to_documents
from langchain_dhrag.knowledge import knowledge_and_embedder
from langchain_dhrag.llm import as_rewriter

__all__ = ["DHRAGRetriever"]


class DHRAGRetriever(EngineCloser, BaseRetriever):
    """Retrieval with DH-RAG memory: the session's history reconstructs the query and joins
    the knowledge base's passages in one weighted context.

    For each query it selects the relevant earlier turns of the session (topic clusters,
    summaries, chains, recency), rewrites the query, searches the knowledge base, and returns
    the ``k`` best passages of the knowledge base *and* of the selected turns, best first.
    Every document carries ``metadata["dhrag"]``: ``source`` (``"kb"``/``"history"``),
    ``weight``, ``similarity``, ``rank``, ``rewritten_query``, ``session_id`` and, for history
    items, ``turn``, ``cluster``, ``cluster_label``, ``chain``, ``via``.

    **Session.** Per call: ``config={"configurable": {"session_id": "..."}}`` (LangGraph's
    ``thread_id`` is accepted too), or the keyword ``session_id=`` of ``invoke``; otherwise
    the ``session_id`` field if set, else a ``ValueError`` saying how to pass one.

    **Recording.** Retrieval never writes history: a retriever does not see the answer.
    Wrap the chain with ``with_dhrag_memory(chain, retriever)`` and each answer is recorded
    by itself; or call ``record(session_id, query, answer)`` -- it stores the turn with the
    passages this retriever returned for that query.

    **Search path.** A LangChain ``VectorStore`` (or its similarity/MMR retriever) is
    searched by the expanded query vector, embedded by the store's own embeddings; other
    retrievers get the rewritten query as text (see ``from_knowledge``).

    Args:
        engine: The ``DHRAG`` engine (knowledge base, history database, settings).
        k: Documents returned per query (``invoke(..., k=n)`` overrides it).
        session_id: Session used when a call names none (default: none, an error).

    Example:
        ```python
        retriever = DHRAGRetriever.from_knowledge(vector_store, k=4)
        cfg = {"configurable": {"session_id": "alice"}}
        docs = retriever.invoke("What is the Great Wall built of?", config=cfg)
        retriever.record("alice", "What is the Great Wall built of?", answer)
        docs = retriever.invoke("How long is it?", config=cfg)
        docs[0].metadata["dhrag"]["rewritten_query"]  # 'How long is it? (great wall ...)'
        ```
    """

    engine: DHRAG
    k: int = Field(default=4, ge=1, strict=True)
    session_id: str | None = Field(default=None, min_length=1, max_length=256)

    @classmethod
    def from_knowledge(
        cls,
        knowledge: Any,
        *,
        embedder: Any = None,
        store: HistoryStore | str | None = None,
        settings: Settings | None = None,
        rewriter: Any = None,
        search: Literal["auto", "vector", "text"] = "auto",
        **fields: Any,
    ) -> DHRAGRetriever:
        """A retriever over a new engine.

        Args:
            knowledge: A LangChain ``VectorStore`` (searched by vector) or ``BaseRetriever``
                (by text; a vector store's similarity/MMR retriever by vector), or a dhrag
                ``KnowledgeBase`` such as ``FaissKnowledgeBase``, or a list of texts,
                ``Passage``s or ``Document``s (indexed in a ``FaissKnowledgeBase``).
            embedder: dhrag ``Embedder`` or LangChain ``Embeddings`` for queries and history
                (default: the vector store's own embeddings, so no second model is loaded;
                for a source without embeddings, offline MiniLM, loaded on first use). A
                different embedder than the store's puts the store on the text path.
            store: History store or URL (``"memory"``, ``"sqlite:///history.db"``,
                ``"postgresql://user:password@host/db"``).
            settings: DH-RAG settings (``Settings(retrieval=Retrieval(kb_k=...))`` sets how
                many passages are fetched from ``knowledge`` per query).
            rewriter: dhrag ``QueryRewriter`` or a chat model (the core's ``LLMRewriter``
                over ``LangChainLLM(model)``).
            search: ``"auto"`` (by vector where the source allows it, else by text),
                ``"vector"`` or ``"text"``.
            **fields: ``k``, ``session_id`` and other retriever fields.
        """
        kb, emb = knowledge_and_embedder(knowledge, embedder, search)
        engine = DHRAG(kb, embedder=emb, store=store, settings=settings,
                       rewriter=as_rewriter(rewriter))
        return cls(engine=engine, **fields)

    # -- session plumbing -------------------------------------------------------------------

    def invoke(
        self, input: str, config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[Document]:
        """The ``k`` best documents for ``input`` in the call's session (nothing is stored).

        Args:
            input: The user's question, as asked (elliptical follow-ups included).
            config: Runnable config; ``config["configurable"]["session_id"]`` names the session.
            **kwargs: ``k`` and ``session_id`` override the fields for this call.
        """
        config = ensure_config(config)
        if kwargs.get("session_id") is None:
            kwargs["session_id"] = session_from_config(config, self.session_id,
                                                       "DHRAGRetriever")
        return super().invoke(input, config, **kwargs)

    async def ainvoke(
        self, input: str, config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[Document]:
        """``invoke`` for async code; the knowledge source's own async search is used."""
        config = ensure_config(config)
        if kwargs.get("session_id") is None:
            kwargs["session_id"] = session_from_config(config, self.session_id,
                                                       "DHRAGRetriever")
        return await super().ainvoke(input, config, **kwargs)

    def _call_args(
        self, k: int | None, session_id: str | None, extra: dict[str, Any]
    ) -> tuple[str, int]:
        extra.pop("verbose", None)
        if extra:
            raise TypeError(
                f"unexpected keyword argument(s) {sorted(extra)}; DHRAGRetriever accepts k "
                "and session_id"
            )
        k = check_k(self.k if k is None else k)
        if session_id is None:  # _get_relevant_documents called directly
            session_id = session_from_config(None, self.session_id, "DHRAGRetriever")
        return session_id, k

    # -- retrieval --------------------------------------------------------------------------

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
        session_id: str | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        sid, k = self._call_args(k, session_id, kwargs)
        sel = handed_selection(self.engine, sid, query, k)
        if sel is None:
            with caller_context(run_manager.get_child()):
                sel = self.engine.select(sid, query, k)
        return self._documents(sel)

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: int | None = None,
        session_id: str | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        sid, k = self._call_args(k, session_id, kwargs)
        sel = handed_selection(self.engine, sid, query, k)
        if sel is None:
            with caller_context(run_manager.get_child()):
                sel = await self.engine.aselect(sid, query, k)
        return self._documents(sel)

    @staticmethod
    def _documents(selection: Selection) -> list[Document]:
        return selection_to_documents(selection)

    # -- after the answer -------------------------------------------------------------------

    def record(
        self,
        session_id: str,
        query: str,
        answer: str,
        *,
        documents: Sequence[Document | str] | None = None,
    ) -> AddResult:
        """Store one turn (query, passages shown, answer) in the session's history.

        The passages are ``documents`` when given, else those this retriever (or another
        component on the same engine) returned for ``query`` in this session -- the latest
        retrieval, if it was for this query; else none. The LlamaIndex ``DHRAGRetriever`` and
        the core's ``DHRAG.record`` take the same ``(session_id, query, answer)``.

        Example:
            ```python
            retriever.record("alice", "How long is it?", "About 21,196 km.")
            ```
        """
        passages = None if documents is None else documents_to_passages(documents, "documents")
        return self.engine.record(session_id, query, answer, passages=passages)

    async def arecord(
        self,
        session_id: str,
        query: str,
        answer: str,
        *,
        documents: Sequence[Document | str] | None = None,
    ) -> AddResult:
        """``record`` off the event loop."""
        passages = None if documents is None else documents_to_passages(documents, "documents")
        return await self.engine.arecord(session_id, query, answer, passages=passages)

    def reset(self, session_id: str) -> None:
        """Forget one session's history."""
        self.engine.reset(session_id)

    def _engine_to_close(self) -> DHRAG:
        return self.engine
