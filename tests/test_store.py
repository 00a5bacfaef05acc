"""Stores: atomic apply, versions, session scoping, persistence of every field."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from dhrag_core import MemoryStore, Passage, SQLiteStore, StaleSessionError, Turn, open_store


def make_turn(session: str, tid: str, index: int, dim: int = 8) -> Turn:
    rng = np.random.default_rng(index)
    return Turn(
        session_id=session, turn_id=tid, index=index, query=f"q{index} ünïcode",
        passages=(Passage(text="p one", id="kb1", title="T", score=0.5, metadata={"a": 1}),
                  Passage(text="p two")),
        response=f"r{index}", timestamp=100.0 + index,
        query_vector=rng.random(dim, dtype=np.float32),
        response_vector=None if index % 2 else rng.random(dim, dtype=np.float32),
        passage_vectors=rng.random((2, dim), dtype=np.float32),
        metadata={"k": [1, 2]}, merges=index, cluster_id=index % 3, chain_id=index // 2,
    )


def assert_same_turn(a: Turn, b: Turn) -> None:
    for f in ("session_id", "turn_id", "index", "query", "passages", "response", "timestamp",
              "metadata", "merges", "cluster_id", "chain_id"):
        assert getattr(a, f) == getattr(b, f), f
    np.testing.assert_array_equal(a.query_vector, b.query_vector)
    np.testing.assert_array_equal(a.passage_vectors, b.passage_vectors)
    if a.response_vector is None:
        assert b.response_vector is None
    else:
        np.testing.assert_array_equal(a.response_vector, b.response_vector)


def test_apply_load_roundtrip_and_versions(store_factory) -> None:  # type: ignore[no-untyped-def]
    store = store_factory()
    assert store.load("s") == ([], 0)
    t0, t1 = make_turn("s", "a", 0), make_turn("s", "b", 1)
    assert store.apply("s", upsert=[t1, t0]) == 1
    assert store.apply("s") == 2
    turns, version = store.load("s")
    assert version == 2 and [t.turn_id for t in turns] == ["a", "b"]
    assert_same_turn(turns[0], t0)
    assert_same_turn(turns[1], t1)
    store.apply("s", delete=["a", "missing"])
    assert [t.turn_id for t in store.load("s")[0]] == ["b"]


def test_stale_version_writes_nothing(store_factory) -> None:  # type: ignore[no-untyped-def]
    store = store_factory()
    store.apply("s", upsert=[make_turn("s", "a", 0)])
    with pytest.raises(StaleSessionError):
        store.apply("s", upsert=[make_turn("s", "b", 1)], delete=["a"], expected_version=0)
    assert [t.turn_id for t in store.load("s")[0]] == ["a"]
    assert store.version("s") == 1


def test_sessions_are_isolated(store_factory) -> None:  # type: ignore[no-untyped-def]
    store = store_factory()
    store.apply("alice", upsert=[make_turn("alice", "a", 0)])
    bob = store.apply("bob", upsert=[make_turn("bob", "b", 0)])
    assert store.sessions() == ["alice", "bob"]
    store.delete_session("bob")
    assert store.sessions() == ["alice"]
    assert store.load("bob")[0] == []
    assert [t.turn_id for t in store.load("alice")[0]] == ["a"]
    assert store.version("bob") != bob, "deletion must change the version seen by caches"
    with pytest.raises(ValueError, match="belongs to session"):
        store.apply("alice", upsert=[make_turn("bob", "c", 1)])


def test_sqlite_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "h.db"
    s = SQLiteStore(path)
    t = make_turn("s", "a", 0)
    s.apply("s", upsert=[t])
    s.close()
    s2 = SQLiteStore(path)
    assert s2.integrity_check() == "ok"
    assert_same_turn(s2.load("s")[0][0], t)
    s2.close()


def test_merges_are_stored_as_the_times_recorded(tmp_path: Path) -> None:
    """The ``hits`` column keeps counting the times a turn was recorded (1 + merges), so
    stores written before ``Turn.hits`` became ``Turn.merges`` read back unchanged."""
    path = tmp_path / "h.db"
    store = SQLiteStore(path)
    store.apply("s", upsert=[make_turn("s", "a", 0), make_turn("s", "b", 2)])
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT turn_id, hits FROM dhrag_turns ORDER BY idx").fetchall() == [
        ("a", 1), ("b", 3)]
    conn.execute("UPDATE dhrag_turns SET hits = 5 WHERE turn_id = 'a'")  # an older writer
    conn.commit()
    conn.close()
    assert [t.merges for t in SQLiteStore(path).load("s")[0]] == [4, 2]
    store.close()


def test_open_store_urls(tmp_path: Path) -> None:
    assert isinstance(open_store(None), MemoryStore)
    assert isinstance(open_store("memory"), MemoryStore)
    s = open_store(f"sqlite:///{tmp_path}/x.db")
    assert isinstance(s, SQLiteStore)
    s.close()
    with pytest.raises(ValueError, match="unknown store url"):
        open_store("redis://x")
    with pytest.raises(ValueError, match="file path"):
        open_store("sqlite:///")
