"""LangChain's standard retriever test-suite, on an empty session and on one with history."""

from __future__ import annotations

from typing import Any

from langchain_core.vectorstores import InMemoryVectorStore
from langchain_tests.integration_tests import RetrieversIntegrationTests
from lc_support import PIG_A, PIG_Q, WALL_A, WALL_Q, demo_store, hash_engine

from langchain_dhrag import DHRAGRetriever

_STORE: InMemoryVectorStore = demo_store()


class TestDHRAGRetrieverStandard(RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[DHRAGRetriever]:
        return DHRAGRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"engine": hash_engine(_STORE), "session_id": "default"}

    @property
    def retriever_query_example(self) -> str:
        return "What is the Great Wall of China built out of?"


class TestDHRAGRetrieverWithHistoryStandard(RetrieversIntegrationTests):
    """Same suite when the default session has history: k counts history items too."""

    @property
    def retriever_constructor(self) -> type[DHRAGRetriever]:
        return DHRAGRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        engine = hash_engine(_STORE)
        retriever = DHRAGRetriever(engine=engine, session_id="default")
        for q, a in ((WALL_Q, WALL_A), (PIG_Q, PIG_A)):
            retriever.invoke(q)
            retriever.record("default", q, a)
        return {"engine": engine, "session_id": "default"}

    @property
    def retriever_query_example(self) -> str:
        return "How long is it?"
