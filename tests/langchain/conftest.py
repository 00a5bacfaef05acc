"""Fixtures of the LangChain adapter tests: the demo knowledge base in a real LangChain
vector store, embedded with a deterministic hashing embedder."""

from __future__ import annotations

import pytest
from langchain_core.vectorstores import InMemoryVectorStore
from lc_support import demo_store, hash_engine

from dhrag_core import DHRAG
from langchain_dhrag import DHRAGRetriever


@pytest.fixture(scope="session")
def store() -> InMemoryVectorStore:
    return demo_store()


@pytest.fixture
def engine(store: InMemoryVectorStore) -> DHRAG:
    return hash_engine(store)


@pytest.fixture
def retriever(engine: DHRAG) -> DHRAGRetriever:
    return DHRAGRetriever(engine=engine, k=4, session_id="default")
