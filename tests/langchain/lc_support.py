"""Test doubles for the LangChain adapter tests (real LangChain base classes, fake data)."""

from __future__ import annotations

import asyncio
import json
from importlib import resources
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForLLMRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel, GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable
from langchain_core.vectorstores import InMemoryVectorStore
from pydantic import Field

from dhrag_core import DHRAG, HashingEmbedder, Passage, Settings
from dhrag_core.settings import with_changes
from langchain_dhrag import RetrieverKnowledgeBase

WALL_Q = "What is the Great Wall of China built out of?"
WALL_A = "It is built of stone, brick, tamped earth, wood and other materials."
PIG_Q = "Where do guinea pigs sleep in the wild?"
PIG_A = "Wild guinea pigs shelter in burrows dug by other animals."
FOLLOW_UP = "How long is it?"


class HashEmbeddings(Embeddings):
    """Deterministic LangChain embeddings over dhrag's hashing embedder (texts sharing words
    get close vectors); counts calls so tests can see what was embedded."""

    def __init__(self, dimension: int = 256) -> None:
        self.inner = HashingEmbedder(dimension)
        self.calls: list[list[str]] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        out: list[list[float]] = self.inner.encode(texts).astype(float).tolist()
        return out

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def demo_documents() -> list[Document]:
    """The shipped demo passages (real Wikipedia text) as LangChain documents."""
    data = resources.files("dhrag_core") / "data" / "demo_kb.jsonl"
    rows = [json.loads(line) for line in data.read_text("utf-8").splitlines()]
    return [Document(page_content=r["text"], id=r["id"],
                     metadata={"title": r["title"], "source": r["source"]}) for r in rows]


def demo_store(embeddings: Embeddings | None = None) -> InMemoryVectorStore:
    store = InMemoryVectorStore(embeddings or HashEmbeddings())
    store.add_documents(demo_documents())
    return store


def hash_engine(store: InMemoryVectorStore | None = None, *, history: str | None = None,
                **settings: Any) -> DHRAG:
    """A DH-RAG engine over the demo store, hashing embedder, history in ``history`` (a
    store URL; default in memory); the thread-score decision (hashing vectors carry no
    meaning for the fitted one, which test_langchain_topic_switch checks with MiniLM)."""
    settings.setdefault("thread_decision", "scores")
    return DHRAG(RetrieverKnowledgeBase(store or demo_store()), embedder=HashingEmbedder(),
                 store=history, settings=with_changes(Settings(), settings))


def demo_passages() -> list[Passage]:
    """The demo passages as dhrag passages: the title in ``Passage.title``, no metadata."""
    return [Passage(d.page_content, id=d.id, title=d.metadata["title"])
            for d in demo_documents()]


class ToolFakeChatModel(GenericFakeChatModel):
    """``GenericFakeChatModel`` that accepts tools (agents bind them) and keeps every prompt."""

    seen: list[list[BaseMessage]] = Field(default_factory=list)

    def bind_tools(self, tools: Any, **kwargs: Any) -> Runnable[Any, BaseMessage]:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any,
    ) -> ChatResult:
        self.seen.append(list(messages))
        return super()._generate(messages, stop, run_manager, **kwargs)


class RaisingChatModel(BaseChatModel):
    """A chat model whose every call fails (a provider outage)."""

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None,
                  **kwargs: Any) -> ChatResult:
        raise ConnectionError("provider down")

    @property
    def _llm_type(self) -> str:
        return "raising"


class AsyncOnlyChatModel(BaseChatModel):
    """Answers only through the async API; the sync API raises (proves ``ainvoke`` is used)."""

    answer: str
    async_calls: int = 0

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None,
                  **kwargs: Any) -> ChatResult:
        raise RuntimeError("sync path used")

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                         run_manager: Any = None, **kwargs: Any) -> ChatResult:
        self.async_calls += 1
        await asyncio.sleep(0)
        return ChatResult(generations=[ChatGeneration(message=AIMessage(self.answer))])

    @property
    def _llm_type(self) -> str:
        return "async-only"


class BarrierRetriever(BaseRetriever):
    """An async-only retriever over a vector store: every call waits until ``parties`` calls
    are in flight at once, so it completes only if callers really run concurrently on the
    event loop. The sync path raises."""

    store: InMemoryVectorStore
    parties: int
    arrived: int = 0
    event: asyncio.Event | None = None

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        raise RuntimeError("sync path used")

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        if self.event is None:
            self.event = asyncio.Event()
        self.arrived += 1
        if self.arrived >= self.parties:
            self.event.set()
        await asyncio.wait_for(self.event.wait(), timeout=10)
        return await self.store.asimilarity_search(query, k=8)


class ListRetriever(BaseRetriever):
    """A retriever with no ``k``: always the same documents."""

    docs: list[Document]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return list(self.docs)
