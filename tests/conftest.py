"""Shared fixtures: a hashing embedder, a controllable clock, databases on every store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from pg_support import clean_postgres_dsn, postgres_dsn, postgres_server  # noqa: F401

from dhrag_core import (
    FaissKnowledgeBase,
    HashingEmbedder,
    HistoryDatabase,
    MemoryStore,
    Passage,
    Settings,
    SQLiteStore,
)


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def lexical_kb() -> tuple[FaissKnowledgeBase, str]:
    """A knowledge base and a question: passage "0" has the question's own vector but none of
    its words; passage "1" holds its words with a lower cosine: only the lexical term puts
    "1" first."""
    emb = HashingEmbedder()
    question = "How was the tower height calculated?"
    texts = ["Filler about something else entirely.",
             "Surveyors calculated the tower height in metres in 1889."]
    vectors = np.stack([emb.encode([question])[0], emb.encode([texts[1]])[0]])
    kb = FaissKnowledgeBase([Passage(t, id=str(i)) for i, t in enumerate(texts)], emb,
                            vectors=vectors)
    return kb, question


@pytest.fixture
def embedder() -> HashingEmbedder:
    return HashingEmbedder(dimension=256)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=["memory", "sqlite"])
def store_factory(request: pytest.FixtureRequest, tmp_path: Path):  # type: ignore[no-untyped-def]
    """Makes stores of one backend; SQLite ones reopen the same file."""
    path = tmp_path / "history.db"

    def make() -> MemoryStore | SQLiteStore:
        return MemoryStore() if request.param == "memory" else SQLiteStore(path)

    return make


@pytest.fixture
def db(embedder: HashingEmbedder, clock: FakeClock) -> Iterator[HistoryDatabase]:
    d = HistoryDatabase(embedder=embedder, settings=Settings(), clock=clock)
    yield d
    d.close()
