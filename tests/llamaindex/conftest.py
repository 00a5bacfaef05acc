"""Fakes for the LlamaIndex adapter tests: a scripted LLM, a hashing embedding, a small index.

Only the LLM is fake (a real model would need the network). Everything else is real
LlamaIndex: ``CustomLLM`` base class, ``VectorStoreIndex`` with its in-memory vector store,
and a real ``BaseEmbedding`` (``DHRAGEmbedding``) over dhrag's deterministic hashing embedder.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from llama_index.core import Settings as LlamaSettings
from llama_index.core import VectorStoreIndex
from llama_index.core.async_utils import asyncio_run
from llama_index.core.base.llms.generic_utils import messages_to_prompt
from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
)
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.embeddings import BaseEmbedding
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.memory import Memory
from llama_index.core.schema import TextNode
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from dhrag_core import DHRAGSettings, Experiments, HashingEmbedder, Retrieval, Threads
from llamaindex_dhrag import DHRAGChatEngine, DHRAGEmbedding

#: A small knowledge base: two Great Wall facts, distractors that share the word "long".
DOCS: dict[str, str] = {
    "wall-material": "The Great Wall of China is built from stone, brick, tamped earth and wood.",
    "wall-length": "The Great Wall of China, with all of its branches, is 21,196 km long.",
    "berlin-length": "The Berlin Wall was 155 km long and came down in November 1989.",
    "nile-length": "The Nile is 6,650 km long.",
    "pig-sleep": "In the wild, guinea pigs sleep in burrows dug by other animals.",
    "pig-life": "Guinea pigs live for four to eight years.",
    "moon-distance": "The Moon orbits the Earth at an average distance of 384,402 km.",
}

_FIRST_CONTEXT = re.compile(r"\[1\][^\n]*\n([^\n]+)")


def first_context_sentence(prompt: str) -> str:
    """What the scripted LLM answers: the first sentence of context passage [1]."""
    m = _FIRST_CONTEXT.search(prompt)
    return m.group(1).strip() if m else "I don't know."


class ScriptedLLM(CustomLLM):
    """A deterministic LLM: answers with ``answer_fn(prompt)`` and logs what it did.

    Streams word by word and logs ``("produced", i)`` before yielding token ``i``, so tests
    can check that tokens reach the consumer as they are produced. Async calls are really
    async (they yield to the event loop between tokens). With ``gate`` the stream stops after
    its first token until the event is set; with ``fail_after`` it raises after that many
    tokens.
    """

    answer_fn: Callable[[str], str] = first_context_sentence
    fail: bool = False
    gate: threading.Event | None = None
    fail_after: int | None = None
    _prompts: list[str] = PrivateAttr(default_factory=list)
    _events: list[tuple[str, int]] = PrivateAttr(default_factory=list)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="scripted", is_chat_model=False)

    @property
    def prompts(self) -> list[str]:
        return self._prompts

    @property
    def events(self) -> list[tuple[str, int]]:
        return self._events

    def _answer(self, prompt: str) -> str:
        with self._lock:
            self._prompts.append(prompt)
        if self.fail:
            raise RuntimeError("scripted LLM failure")
        return self.answer_fn(prompt)

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text=self._answer(prompt))

    @llm_completion_callback()
    def stream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseGen:
        words = self._answer(prompt).split(" ")

        def gen() -> CompletionResponseGen:
            text = ""
            for i, word in enumerate(words):
                self._hold(i)
                delta = word if i == 0 else " " + word
                text += delta
                self._events.append(("produced", i))
                yield CompletionResponse(text=text, delta=delta)
            self._events.append(("finished", len(words)))

        return gen()

    def _hold(self, i: int) -> None:
        """Before token ``i``: wait at the gate (after the first token), or fail."""
        if i == 1 and self.gate is not None and not self.gate.wait(timeout=10):
            raise AssertionError("the test never opened the gate")
        if self.fail_after is not None and i == self.fail_after:
            raise RuntimeError("scripted LLM failure mid-stream")

    async def achat(self, messages: Any, **kwargs: Any) -> ChatResponse:
        await asyncio.sleep(0.01)
        text = self._answer(messages_to_prompt(messages))
        await asyncio.sleep(0.01)
        return ChatResponse(message=ChatMessage(role="assistant", content=text))

    async def astream_chat(self, messages: Any, **kwargs: Any) -> ChatResponseAsyncGen:
        words = self._answer(messages_to_prompt(messages)).split(" ")

        async def gen() -> ChatResponseAsyncGen:
            text = ""
            for i, word in enumerate(words):
                await asyncio.sleep(0)
                if i == 1 and self.gate is not None:
                    await asyncio.to_thread(self.gate.wait, 10)
                self._hold(i)
                delta = word if i == 0 else " " + word
                text += delta
                self._events.append(("produced", i))
                yield ChatResponse(message=ChatMessage(role="assistant", content=text),
                                   delta=delta)
            self._events.append(("finished", len(words)))

        return gen()


class _UnusableLLM(CustomLLM):
    """Stands in for LlamaIndex's global default LLM: any use fails the test."""

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="must-not-be-used")

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        raise AssertionError("the adapter used llama_index Settings.llm")

    def stream_complete(self, prompt: str, formatted: bool = False,
                        **kwargs: Any) -> CompletionResponseGen:
        raise AssertionError("the adapter used llama_index Settings.llm")


class _UnusableEmbedding(BaseEmbedding):
    """Stands in for LlamaIndex's global default embedding model."""

    def _get_query_embedding(self, query: str) -> list[float]:
        raise AssertionError("the adapter used llama_index Settings.embed_model")

    async def _aget_query_embedding(self, query: str) -> list[float]:
        raise AssertionError("the adapter used llama_index Settings.embed_model")

    def _get_text_embedding(self, text: str) -> list[float]:
        raise AssertionError("the adapter used llama_index Settings.embed_model")


@pytest.fixture(autouse=True)
def no_global_llama_defaults() -> Iterator[None]:
    """LlamaIndex's global LLM/embedding (OpenAI by default) must never be used."""
    old_llm, old_embed = LlamaSettings._llm, LlamaSettings._embed_model
    LlamaSettings.llm = _UnusableLLM()
    LlamaSettings.embed_model = _UnusableEmbedding()
    yield
    LlamaSettings._llm, LlamaSettings._embed_model = old_llm, old_embed


@pytest.fixture
def hashing() -> HashingEmbedder:
    return HashingEmbedder(dimension=256)


@pytest.fixture
def embed_model(hashing: HashingEmbedder) -> DHRAGEmbedding:
    return DHRAGEmbedding(hashing)


@pytest.fixture
def index(embed_model: DHRAGEmbedding) -> VectorStoreIndex:
    nodes = [TextNode(id_=node_id, text=text, metadata={"title": node_id.split("-")[0]})
             for node_id, text in DOCS.items()]
    return VectorStoreIndex(nodes=nodes, embed_model=embed_model)


@pytest.fixture
def llm() -> ScriptedLLM:
    return ScriptedLLM()


@pytest.fixture
def make_llm() -> type[ScriptedLLM]:
    """The scripted LLM class, for tests that need their own answers or failures."""
    return ScriptedLLM


@pytest.fixture
def make_engine(
    index: VectorStoreIndex, llm: ScriptedLLM, hashing: HashingEmbedder
) -> Callable[..., DHRAGChatEngine]:
    """``DHRAGChatEngine.from_defaults`` over the small index, hashing embedder, scripted LLM."""

    def make(**kwargs: Any) -> DHRAGChatEngine:
        kwargs.setdefault("embedder", hashing)
        kwargs.setdefault("session_id", "default")  # explicit: no session is an error
        # answers here are scripted for the text path over the hashing embedder; the vector
        # path (the default over a vector index) is tested in test_bridges and test_minilm
        kwargs.setdefault("search", "text")
        # a bag-of-words fake: re-ranked by the raw "How long is it?", "long" wins anywhere;
        # the rewrite's vector carries the subject, with a light pull toward the history
        # (real MiniLM: tests/test_engine.py)
        # the thread-score decision: hashing vectors carry no meaning for the fitted one
        # (tests/llamaindex/test_topic_switch.py checks it with MiniLM)
        kwargs.setdefault("settings", DHRAGSettings(threads=Threads(thread_decision="scores"),
                                                    retrieval=Retrieval(follow_up_expansion=0.3),
                                                    experiments=Experiments(rewrite_vector=True)))
        chosen = kwargs.pop("llm", llm)
        retriever = kwargs.pop("retriever", index.as_retriever(similarity_top_k=5))
        return DHRAGChatEngine.from_defaults(retriever, chosen, **kwargs)

    return make


@pytest.fixture
def memories() -> Iterator[Callable[..., Memory]]:
    """``Memory.from_defaults(**kwargs)`` on an in-memory SQLite engine disposed after the test.

    LlamaIndex's default ``Memory`` opens an aiosqlite connection that nobody closes; when it
    is collected after its event loop has closed, aiosqlite's worker thread raises "Event loop
    is closed" during some later test. Disposing the engine closes the connection in time.
    """
    engines: list[AsyncEngine] = []

    def make(**kwargs: Any) -> Memory:
        engine = create_async_engine("sqlite+aiosqlite://")
        engines.append(engine)
        return Memory.from_defaults(async_engine=engine, **kwargs)

    yield make
    for engine in engines:
        asyncio_run(engine.dispose())
