"""What llama-index-core's own tests ask of a chat engine, a memory block and an embedding
model (tests/chat_engine, tests/memory, tests/embeddings), asked of ours.

Written after reading those tests, for our classes: real LlamaIndex parts throughout; the LLM
is LlamaIndex's ``MockLLM`` (it echoes its prompt) or the scripted one; the embedders are
dhrag's hashing one, or the real MiniLM where meaning matters.
"""

from __future__ import annotations

import asyncio
import builtins
import gc
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pytest
from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock
from llama_index.core.chat_engine.types import BaseChatEngine, StreamingAgentChatResponse
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.events.embedding import EmbeddingEndEvent
from llama_index.core.llms import MockLLM
from llama_index.core.memory import Memory
from llama_index.core.memory.memory import InsertMethod
from llama_index.core.memory.memory_blocks import StaticMemoryBlock
from llama_index.core.schema import TextNode
from llama_index.core.storage.kvstore import SimpleKVStore
from llama_index_instrumentation import get_dispatcher

from dhrag_core import (
    Ablations,
    HashingEmbedder,
    HistoryDatabase,
    NumpyMiniLMEmbedder,
    Settings,
    Weighting,
)
from dhrag_core.records import Vector
from llamaindex_dhrag import DHRAGChatEngine, DHRAGEmbedding, DHRAGMemoryBlock

SYSTEM_PROMPT = "Talk like a pirate."
HELLO = "Hello World!"
MOON = "What is the capital of the moon?"

Make = Callable[..., DHRAGChatEngine]
MemoryFor = Callable[..., Memory]


# -- BaseChatEngine ---------------------------------------------------------------------------


@pytest.fixture
def engine(make_engine: Make) -> DHRAGChatEngine:
    return make_engine(llm=MockLLM(), system_prompt=SYSTEM_PROMPT)


def _wait_done(reply: StreamingAgentChatResponse) -> None:
    deadline = time.monotonic() + 10
    while not reply.is_done and time.monotonic() < deadline:
        time.sleep(0.01)


def test_is_a_complete_base_chat_engine(engine: DHRAGChatEngine) -> None:
    assert isinstance(engine, BaseChatEngine)
    assert not getattr(DHRAGChatEngine, "__abstractmethods__", None)
    assert engine.chat_history == []


def test_chat_answers_with_the_prompt_and_keeps_each_turn(engine: DHRAGChatEngine) -> None:
    reply = engine.chat(HELLO)
    assert SYSTEM_PROMPT in str(reply) and HELLO in str(reply)
    assert len(engine.chat_history) == 2
    reply = engine.chat(MOON)
    assert SYSTEM_PROMPT in str(reply) and MOON in str(reply)
    assert len(engine.chat_history) == 4

    engine.reset()
    engine.chat(MOON)
    assert [m.content for m in engine.chat_history][:1] == [MOON]
    assert len(engine.chat_history) == 2


async def test_achat_answers_with_the_prompt_and_keeps_each_turn(
    engine: DHRAGChatEngine,
) -> None:
    reply = await engine.achat(HELLO)
    assert SYSTEM_PROMPT in str(reply) and HELLO in str(reply)
    assert len(engine.chat_history) == 2
    reply = await engine.achat(MOON)
    assert MOON in str(reply)
    assert len(engine.chat_history) == 4


def test_stream_chat_streams_in_pieces_and_keeps_each_turn(engine: DHRAGChatEngine) -> None:
    for n, message in enumerate((HELLO, MOON), 1):
        reply = engine.stream_chat(message)
        pieces = list(reply.response_gen)
        assert len(pieces) > 1
        assert "".join(pieces).rstrip() == str(reply)
        assert SYSTEM_PROMPT in str(reply) and message in str(reply)
        assert len(engine.chat_history) == 2 * n
        assert engine.chat_history[-1].content == str(reply)


async def test_astream_chat_streams_in_pieces_and_keeps_each_turn(
    engine: DHRAGChatEngine,
) -> None:
    for n, message in enumerate((HELLO, MOON), 1):
        reply = await engine.astream_chat(message)
        pieces = [p async for p in reply.async_response_gen()]
        assert len(pieces) > 1
        assert "".join(pieces).rstrip() == str(reply)
        assert message in str(reply)
        assert len(engine.chat_history) == 2 * n


def test_stream_chat_memory_is_not_lost_on_incomplete_consumption(
    engine: DHRAGChatEngine,
) -> None:
    reply = engine.stream_chat(HELLO)
    assert engine.chat_history[0].role == MessageRole.USER
    assert HELLO in (engine.chat_history[0].content or "")
    for _ in reply.response_gen:
        break
    _wait_done(reply)
    assert reply.is_done
    assert [m.role for m in engine.chat_history] == [MessageRole.USER, MessageRole.ASSISTANT]


async def test_astream_chat_memory_is_not_lost_on_incomplete_consumption(
    engine: DHRAGChatEngine,
) -> None:
    reply = await engine.astream_chat(HELLO)
    assert [m.role for m in engine.chat_history] == [MessageRole.USER]
    async for _ in reply.async_response_gen():
        break
    assert reply.awrite_response_to_history_task is not None
    await reply.awrite_response_to_history_task
    assert [m.role for m in engine.chat_history] == [MessageRole.USER, MessageRole.ASSISTANT]


async def test_astream_response_text_without_draining(engine: DHRAGChatEngine) -> None:
    reply = await engine.astream_chat(HELLO)
    assert reply.awrite_response_to_history_task is not None
    await reply.awrite_response_to_history_task
    assert reply.response != "" and str(reply) == reply.response
    assert HELLO in str(reply)


def test_astream_error_reaches_the_reader_and_leaves_no_unretrieved_task(
    make_engine: Make, make_llm: Any,
) -> None:
    engine = make_engine(llm=make_llm(fail_after=2))
    unretrieved: list[str] = []

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        unretrieved.append(str(context.get("message")))

    async def converse() -> None:
        reply = await engine.astream_chat(HELLO)
        with pytest.raises(RuntimeError, match="mid-stream"):
            async for _ in reply.async_response_gen():
                pass

    loop = asyncio.new_event_loop()
    loop.set_exception_handler(handler)
    try:
        loop.run_until_complete(converse())
    finally:
        loop.close()
    gc.collect()
    assert not [m for m in unretrieved if "never retrieved" in m], unretrieved
    assert engine.chat_history == []


def test_chat_with_an_initial_history(make_engine: Make) -> None:
    seed = [ChatMessage(role=MessageRole.USER, content="test human message"),
            ChatMessage(role=MessageRole.ASSISTANT, content="test ai message")]
    engine = make_engine(llm=MockLLM(), chat_history=seed)
    engine.chat("new human message")
    assert [m.content for m in engine.chat_history[:2]] == ["test human message",
                                                            "test ai message"]
    assert len(engine.chat_history) == 4


@pytest.mark.parametrize("repl", ["chat_repl", "streaming_chat_repl"])
def test_repls(engine: DHRAGChatEngine, repl: str, monkeypatch: pytest.MonkeyPatch,
               capsys: pytest.CaptureFixture[str]) -> None:
    engine.chat(MOON)  # a REPL starts afresh
    said: Iterator[str] = iter([HELLO, "exit"])
    monkeypatch.setattr(builtins, "input", lambda prompt="": next(said))
    getattr(engine, repl)()
    assert SYSTEM_PROMPT in capsys.readouterr().out
    assert [m.content for m in engine.chat_history][:1] == [HELLO]
    assert len(engine.chat_history) == 2


# -- BaseMemoryBlock --------------------------------------------------------------------------

CONVERSATION = [
    ("What is the Great Wall of China built out of?", "Stone, brick, tamped earth and wood."),
    ("Where do guinea pigs sleep in the wild?", "In burrows dug by other animals."),
    ("When did the Berlin Wall come down?", "In November 1989."),
]
ASK = "How long is the Great Wall of China?"


def _messages(pairs: Sequence[tuple[str, str]]) -> list[ChatMessage]:
    return [ChatMessage(role=r, content=t) for q, a in pairs
            for r, t in (("user", q), ("assistant", a))]


def _block(hashing: HashingEmbedder, **kwargs: Any) -> DHRAGMemoryBlock:
    db = HistoryDatabase(embedder=hashing, settings=Settings(weighting=Weighting(history_turns=3),
                                                             ablations=Ablations(use_chains=False)))
    return DHRAGMemoryBlock(history=db, **kwargs)


async def test_block_with_nothing_gives_and_takes_nothing(hashing: HashingEmbedder) -> None:
    block = _block(hashing, session_id="s")
    assert await block.aget(messages=[]) == ""
    await block.aput(messages=[])
    await block.aput(messages=[ChatMessage(role="user", content=None, blocks=[])])
    assert block.history.size("s") == 0


async def test_block_put_takes_the_session_and_short_term_switch(
    hashing: HashingEmbedder,
) -> None:
    block = _block(hashing)
    await block.aput(_messages(CONVERSATION[:1]), session_id="x")
    assert block.history.size("x") == 1
    closed = _block(hashing, accept_short_term_memory=False)
    await closed.aput(_messages(CONVERSATION[:1]), from_short_term_memory=True, session_id="x")
    assert closed.history.size("x") == 0


async def test_block_text_goes_where_insert_method_says(hashing: HashingEmbedder,
                                                       memories: MemoryFor) -> None:
    block = _block(hashing, name="earlier")
    await block.aput(_messages(CONVERSATION), session_id="s")
    for method, role in ((InsertMethod.SYSTEM, MessageRole.SYSTEM),
                         (InsertMethod.USER, MessageRole.USER)):
        memory = memories(session_id="s", memory_blocks=[block], insert_method=method)
        await memory.aput(ChatMessage(role="user", content=ASK))
        got = await memory.aget()
        holder = [m for m in got if "<earlier>" in (m.content or "")]
        assert len(holder) == 1 and holder[0].role == role
        assert "Great Wall of China built out of" in (holder[0].content or "")


async def _pressed(memory: Memory) -> str:
    got = await memory.aget(input=ASK)
    return "\n".join(m.content or "" for m in got if m.role == MessageRole.SYSTEM)


async def test_priority_zero_block_is_never_truncated(hashing: HashingEmbedder,
                                                      memories: MemoryFor) -> None:
    block = _block(hashing)  # LlamaIndex's default priority: 0
    await block.aput(_messages(CONVERSATION), session_id="s")
    memory = memories(session_id="s", token_limit=20, token_flush_size=10,
                      chat_history_token_ratio=0.5, memory_blocks=[block])
    text = await _pressed(memory)
    assert all(q in text for q, _ in CONVERSATION)


async def test_truncatable_block_gives_up_its_weakest_turns_not_itself(
    hashing: HashingEmbedder, memories: MemoryFor,
) -> None:
    # (which of two truncatable blocks goes first changed between llama-index-core releases;
    # a priority-0 block is never cut in any)
    block = _block(hashing, priority=1)
    await block.aput(_messages(CONVERSATION), session_id="s")
    full = await block.aget([ChatMessage(role="user", content=ASK)], session_id="s")
    static = StaticMemoryBlock(name="core", static_content=[TextBlock(text="Keep answers short.")],
                               priority=0)
    limit = len(block.tokenizer_fn(full)) + 2  # room for less than both blocks
    memory = memories(session_id="s", token_limit=limit, token_flush_size=10,
                      chat_history_token_ratio=0.5, memory_blocks=[static, block])
    text = await _pressed(memory)
    assert "Keep answers short." in text  # the block that is never cut is whole
    assert "<dhrag_history>" in text and "Great Wall of China built out of" in text
    assert sum(q in text for q, _ in CONVERSATION) < len(CONVERSATION)


# -- BaseEmbedding ----------------------------------------------------------------------------


class CountingEmbedder:
    """The hashing embedder, counting the texts it is asked to embed."""

    def __init__(self) -> None:
        self.inner = HashingEmbedder(dimension=32)
        self.texts = 0

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def encode(self, texts: Sequence[str]) -> Vector:
        self.texts += len(texts)
        return self.inner.encode(texts)


TEXTS = ["Hello world.", "This is a test.", "This is another test.", "This is a test v2.",
         "Guinea pigs sleep in burrows."]


async def test_batches_keep_order_and_match_single_embeddings() -> None:
    model = DHRAGEmbedding(HashingEmbedder(dimension=32), embed_batch_size=2)
    texts = TEXTS * 3
    single = [model.get_text_embedding(t) for t in texts]
    assert model.get_text_embedding_batch(texts) == single
    assert await model.aget_text_embedding_batch(texts) == single
    assert model.get_query_embedding(TEXTS[0]) == single[0]  # one space for both
    assert await model.aget_query_embedding(TEXTS[0]) == single[0]
    assert await model.aget_text_embedding(TEXTS[1]) == single[1]
    assert model.similarity(single[0], single[0]) == pytest.approx(1.0)
    assert model.get_agg_embedding_from_queries(TEXTS[:2]) == pytest.approx(
        list(np.mean([single[0], single[1]], axis=0)))


async def test_embeddings_cache_is_used() -> None:
    counting = CountingEmbedder()
    model = DHRAGEmbedding(counting, embeddings_cache=SimpleKVStore())
    first = model.get_text_embedding("Hello")
    assert model.embeddings_cache is not None
    assert model.embeddings_cache.get(key="Hello", collection="embeddings") is not None
    assert model.get_text_embedding_batch(["Hello"]) == [first]
    assert await model.aget_text_embedding("Hello") == first
    assert counting.texts == 1


def test_embedding_events_are_dispatched() -> None:
    seen: list[EmbeddingEndEvent] = []

    class Capture(BaseEventHandler):
        @classmethod
        def class_name(cls) -> str:
            return "Capture"

        def handle(self, event: BaseEvent, **kwargs: Any) -> None:
            if isinstance(event, EmbeddingEndEvent):
                seen.append(event)

    root = get_dispatcher()
    handler = Capture()
    root.add_event_handler(handler)
    try:
        DHRAGEmbedding(HashingEmbedder(dimension=8)).get_text_embedding_batch(TEXTS[:2])
    finally:
        root.event_handlers.remove(handler)
    assert [e.chunks for e in seen] == [TEXTS[:2]]
    assert len(seen[0].embeddings) == 2 and len(seen[0].embeddings[0]) == 8


async def test_embeds_nodes_as_a_transform() -> None:
    model = DHRAGEmbedding(HashingEmbedder(dimension=8))
    nodes = model([TextNode(text=t) for t in TEXTS[:2]])
    assert [n.embedding for n in nodes] == model.get_text_embedding_batch(TEXTS[:2])
    anodes = await model.acall([TextNode(text=TEXTS[2])])
    assert anodes[0].embedding == model.get_text_embedding(TEXTS[2])


def test_to_dict_round_trip_keeps_the_model() -> None:
    model = DHRAGEmbedding(embed_batch_size=8)  # the default model: nothing loaded
    again = DHRAGEmbedding.from_dict(model.to_dict())
    assert (again.model_name, again.embed_batch_size) == (model.model_name, 8)
    assert type(again.embedder) is type(model.embedder)
    assert not getattr(again.embedder, "loaded", False)

    hashing = HashingEmbedder(dimension=8)
    data = DHRAGEmbedding(hashing).to_json()
    with pytest.raises(ValueError, match=r"names 'dhrag:HashingEmbedder'.*embedder="):
        DHRAGEmbedding.from_json(data)  # not silently another model
    assert DHRAGEmbedding.from_json(data, embedder=hashing).embedder is hashing


@pytest.mark.model
def test_minilm_embedding_ranks_related_texts_first() -> None:
    model = DHRAGEmbedding(NumpyMiniLMEmbedder())
    query = model.get_query_embedding("How long is the Great Wall of China?")
    texts = model.get_text_embedding_batch([
        "The Great Wall of China is 21,196 km long.",
        "Guinea pigs sleep in burrows dug by other animals.",
    ])
    related, unrelated = (model.similarity(query, t) for t in texts)
    assert related > unrelated + 0.2
    assert np.linalg.norm(texts[0]) == pytest.approx(1.0, abs=1e-5)
