"""DHRAGMemoryBlock inside a real llama_index Memory: flushed turns stored, relevant ones read."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.memory import Memory

from dhrag_core import (
    DHRAG,
    Ablations,
    FaissKnowledgeBase,
    HashingEmbedder,
    HistoryDatabase,
    NumpyMiniLMEmbedder,
    Settings,
    Weighting,
)
from llamaindex_dhrag import DHRAGMemoryBlock

CONVERSATION = [
    ("What is the Great Wall of China built out of?", "Stone, brick, tamped earth and wood."),
    ("Where do guinea pigs sleep in the wild?", "In burrows dug by other animals."),
    ("When did the Berlin Wall come down?", "In November 1989."),
    ("Who built the first cotton gin?", "Eli Whitney, in 1793."),
]


def _db(hashing: HashingEmbedder) -> HistoryDatabase:
    # selection over the whole session (not inside the thread the query continues): these
    # tests check what the block stores and shows, with a hashing embedder
    return HistoryDatabase(embedder=hashing,
                           settings=Settings(ablations=Ablations(use_chains=False)))


MemoryFor = Callable[..., Memory]


@pytest.fixture
def memory_for(memories: MemoryFor) -> MemoryFor:
    """A Memory over one block; a tiny token limit makes it flush older messages to it."""

    def make(block: DHRAGMemoryBlock, session_id: str = "alice") -> Memory:
        return memories(session_id=session_id, token_limit=60, chat_history_token_ratio=0.5,
                        token_flush_size=20, memory_blocks=[block])

    return make


async def test_memory_flushes_turns_into_dhrag_and_reads_the_relevant_ones(
    hashing: HashingEmbedder, memory_for: MemoryFor,
) -> None:
    db = _db(hashing)
    memory = memory_for(DHRAGMemoryBlock(history=db))
    for q, a in CONVERSATION:
        await memory.aput(ChatMessage(role="user", content=q))
        await memory.aput(ChatMessage(role="assistant", content=a))

    stored = [(t.query, t.response) for t in db.turns("alice")]  # the Memory's session id
    assert stored and stored == CONVERSATION[: len(stored)]

    messages = await memory.aget(input="How long is the Great Wall of China?")
    system = messages[0]
    assert system.role == MessageRole.SYSTEM
    text = system.content or ""
    assert "<dhrag_history>" in text
    first_turn = text.split("- turn ")[1]
    assert first_turn.startswith("1 (weight ")  # the Great Wall turn (counted from 1) first
    assert "Stone, brick, tamped earth and wood." in first_turn


def test_sync_memory_api_works_with_the_block(hashing: HashingEmbedder,
                                              memory_for: MemoryFor) -> None:
    db = _db(hashing)
    memory = memory_for(DHRAGMemoryBlock(history=db), session_id="bob")
    for q, a in CONVERSATION:
        memory.put(ChatMessage(role="user", content=q))
        memory.put(ChatMessage(role="assistant", content=a))
    assert db.size("bob") >= 1
    assert "Great Wall" in (memory.get(input="How long is the wall?")[0].content or "")


async def test_aput_pairs_messages_and_aget_selects(hashing: HashingEmbedder) -> None:
    db = _db(hashing)
    block = DHRAGMemoryBlock(history=db)
    await block.aput([
        ChatMessage(role="system", content="You are helpful."),
        ChatMessage(role="assistant", content="Hello! (greeting before any question)"),
        ChatMessage(role="user", content=CONVERSATION[0][0]),
        ChatMessage(role="assistant", content="Stone and brick."),
        ChatMessage(role="tool", content="tool output"),
        ChatMessage(role="assistant", content="Also tamped earth and wood."),
        ChatMessage(role="user", content=CONVERSATION[1][0]),
    ], session_id="s1")
    turns = db.turns("s1")
    assert [(t.query, t.response) for t in turns] == [
        (CONVERSATION[0][0], "Stone and brick.\nAlso tamped earth and wood."),
    ]
    assert db.held_question("s1") == CONVERSATION[1][0]  # waits for its answer

    text = await block.aget([ChatMessage(role="user", content="How long is the Great Wall?")],
                            session_id="s1")
    assert text.startswith(block.header)
    assert "User: What is the Great Wall of China built out of?" in text
    assert "Assistant: Stone and brick." in text

    assert await block.aget([ChatMessage(role="user", content="Great Wall?")],
                            session_id="empty") == ""
    assert await block.aget([ChatMessage(role="assistant", content="no user message")],
                            session_id="s1") == ""
    assert await block.aget(None, session_id="s1") == ""


async def test_fixed_session_id_overrides_the_memory_session(hashing: HashingEmbedder) -> None:
    db = _db(hashing)
    block = DHRAGMemoryBlock(history=db, session_id="fixed")
    await block.aput([ChatMessage(role="user", content="Q?"),
                      ChatMessage(role="assistant", content="A.")], session_id="other")
    assert db.size("fixed") == 1 and db.size("other") == 0


async def test_two_memories_sharing_a_block_stay_apart(hashing: HashingEmbedder,
                                                      memory_for: MemoryFor) -> None:
    db = _db(hashing)
    block = DHRAGMemoryBlock(history=db)
    alice, bob = memory_for(block, "alice"), memory_for(block, "bob")
    for q, a in CONVERSATION:
        await alice.aput(ChatMessage(role="user", content=q))
        await alice.aput(ChatMessage(role="assistant", content=a))
    await bob.aput(ChatMessage(role="user", content="Hi"))
    assert db.size("alice") >= 1 and db.size("bob") == 0
    bob_view = await bob.aget(input="What is the Great Wall built out of?")
    assert all("Great Wall of China built" not in (m.content or "") for m in bob_view)


def test_accepts_a_dhrag_pipeline_and_rejects_other_history(hashing: HashingEmbedder) -> None:
    rag = DHRAG(FaissKnowledgeBase(["x"], hashing), embedder=hashing)
    assert DHRAGMemoryBlock(history=rag).history is rag.history
    with pytest.raises(TypeError, match="history must be"):
        DHRAGMemoryBlock(history="sqlite:///x.db")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="session_id"):
        DHRAGMemoryBlock(history=rag, session_id="  ")


async def test_a_block_without_any_session_is_an_error(hashing: HashingEmbedder) -> None:
    block = DHRAGMemoryBlock(history=_db(hashing))
    with pytest.raises(ValueError, match=r"no session id: .*Memory\.from_defaults\(session_id"):
        await block.aget([ChatMessage(role=MessageRole.USER, content="How long is it?")])


async def test_a_block_that_memory_never_fed_says_so_once(
    hashing: HashingEmbedder, memories: MemoryFor,
) -> None:
    """With Memory's default budget nothing is flushed for a short chat: the block has no
    turn to select and warns (once per session) instead of silently giving nothing."""
    db = _db(hashing)
    memory = memories(session_id="carol", memory_blocks=[DHRAGMemoryBlock(history=db)])
    for q, a in CONVERSATION[:2]:
        await memory.aput(ChatMessage(role="user", content=q))
        await memory.aput(ChatMessage(role="assistant", content=a))
    await memory.aput(ChatMessage(role="user", content="How long is the wall?"))
    with pytest.warns(UserWarning, match="no stored turn.*2 earlier question"):
        await memory.aget()
    assert db.size("carol") == 0
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        await memory.aget()  # said once


# -- token pressure: the block shrinks by its weakest turns ------------------------------------

_WEIGHT = re.compile(r"^- turn (\d+) \(weight ([0-9.]+)\)", re.MULTILINE)


def _turns_shown(text: str) -> dict[int, float]:
    """Turn number -> weight, for each turn in a block text."""
    return {int(n): float(w) for n, w in _WEIGHT.findall(text)}


async def _three_turn_text(block: DHRAGMemoryBlock) -> str:
    await block.aput([ChatMessage(role=r, content=t) for q, a in CONVERSATION[:3]
                      for r, t in (("user", q), ("assistant", a))], session_id="s")
    text = await block.aget([ChatMessage(role="user", content="How long is the Great Wall?")],
                            session_id="s")
    assert len(_turns_shown(text)) == 3
    return text


async def test_atruncate_drops_the_weakest_turns_first(hashing: HashingEmbedder) -> None:
    db = HistoryDatabase(embedder=hashing, settings=Settings(weighting=Weighting(history_turns=3),
                                                             ablations=Ablations(use_chains=False)))
    block = DHRAGMemoryBlock(history=db, priority=1)
    text = await _three_turn_text(block)
    shown = _turns_shown(text)
    ranked = sorted(shown, key=lambda n: -shown[n])

    assert await block.atruncate(text, 0) == text
    one_less = await block.atruncate(text, 1)
    assert one_less is not None and one_less.startswith(block.header)
    assert set(_turns_shown(one_less)) == set(ranked[:2])
    assert len(block.tokenizer_fn(text)) - len(block.tokenizer_fn(one_less)) >= 1
    two_less = await block.atruncate(one_less, 1)  # its own output shrinks again
    assert two_less is not None and set(_turns_shown(two_less)) == set(ranked[:1])
    assert await block.atruncate(text, 10_000) is None  # nothing left: the block goes
    assert await block.atruncate([], 5) is None  # type: ignore[arg-type]  # Memory's "none"
    assert await block.atruncate("text this block never made", 5) is None


@pytest.mark.model
async def test_memory_under_token_pressure_keeps_the_block_with_its_strongest_turns(
    memories: MemoryFor,
) -> None:
    """A real Memory over its token limit: the block loses its weakest turns, not itself
    (with MiniLM, so that "strongest" means the turn the question is about)."""
    db = HistoryDatabase(embedder=NumpyMiniLMEmbedder(),
                         settings=Settings(weighting=Weighting(history_turns=3),
                                           ablations=Ablations(use_chains=False)))
    block = DHRAGMemoryBlock(history=db, priority=1)
    await block.aput([ChatMessage(role=r, content=t) for q, a in CONVERSATION
                      for r, t in (("user", q), ("assistant", a))], session_id="alice")
    question = "How long is the Great Wall of China?"
    full = await block.aget([ChatMessage(role="user", content=question)], session_id="alice")
    shown = _turns_shown(full)
    assert len(shown) == 3 and max(shown, key=lambda n: shown[n]) == 1  # the wall turn leads

    memory = memories(session_id="alice", token_limit=len(block.tokenizer_fn(full)) - 1,
                      chat_history_token_ratio=0.5, token_flush_size=10, memory_blocks=[block])
    system = (await memory.aget(input=question))[0]
    text = system.content or ""
    assert system.role == MessageRole.SYSTEM and "<dhrag_history>" in text
    kept = _turns_shown(text)
    assert set(kept) == set(sorted(shown, key=lambda n: -shown[n])[:2])
    assert "Stone, brick, tamped earth and wood." in text
