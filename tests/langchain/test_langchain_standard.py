"""LangChain's standard test suites: the retriever (on an empty session and on one with
history), the embeddings (unit and integration, over the hashing embedder and the default
MiniLM), and a LangChain vector store over those embeddings."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore
from langchain_tests.integration_tests import (
    EmbeddingsIntegrationTests,
    RetrieversIntegrationTests,
    VectorStoreIntegrationTests,
)
from langchain_tests.unit_tests import EmbeddingsUnitTests
from lc_support import PIG_A, PIG_Q, WALL_A, WALL_Q, demo_store, hash_engine

from dhrag_core import HashingEmbedder, NumpyMiniLMEmbedder
from langchain_dhrag import DHRAGEmbeddings, DHRAGRetriever

_STORE: InMemoryVectorStore = demo_store()
_MINILM = NumpyMiniLMEmbedder()  # one model for every test (loaded on first use)


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


class TestDHRAGEmbeddingsUnit(EmbeddingsUnitTests):
    @property
    def embeddings_class(self) -> type[DHRAGEmbeddings]:
        return DHRAGEmbeddings

    @property
    def embedding_model_params(self) -> dict[str, Any]:
        return {"embedder": HashingEmbedder(64)}


class TestDHRAGEmbeddingsIntegration(EmbeddingsIntegrationTests):
    @property
    def embeddings_class(self) -> type[DHRAGEmbeddings]:
        return DHRAGEmbeddings

    @property
    def embedding_model_params(self) -> dict[str, Any]:
        return {"embedder": HashingEmbedder(64)}


class TestDHRAGMiniLMEmbeddingsUnit(TestDHRAGEmbeddingsUnit):
    @property
    def embedding_model_params(self) -> dict[str, Any]:
        return {"embedder": _MINILM}


class TestDHRAGMiniLMEmbeddingsIntegration(TestDHRAGEmbeddingsIntegration):
    @property
    def embedding_model_params(self) -> dict[str, Any]:
        return {"embedder": _MINILM}


class TestVectorStoreOverDHRAGEmbeddings(VectorStoreIntegrationTests):
    """LangChain's in-memory vector store embedding with ``DHRAGEmbeddings`` (MiniLM)."""

    @pytest.fixture
    def vectorstore(self) -> VectorStore:
        return InMemoryVectorStore(self.get_embeddings())

    @staticmethod
    def get_embeddings() -> Embeddings:
        return DHRAGEmbeddings(_MINILM)
