"""The engine's limits: reloads, pending selections, wrong vectors, a closed engine (found by
the outside attack of issue 55), as a user meets each finding. Each test failed before its
fix, but the one that guards the NaN paths that named the embedder already (queries,
passages, a knowledge base built by encoding).

Item 10: a session reloaded from its store merges over the clusters changed since the last
merge pass only, and ends with the clusters a session never reloaded has. Item 11: pending
selections are bounded by the memory they hold. Raw errors: a knowledge-base vector of the
wrong length, NaN from an embedder on every path, an engine used after ``close()``.
"""

from __future__ import annotations

import gc
import logging
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dhrag_core import (
    DHRAG,
    Ablations,
    FaissKnowledgeBase,
    FunctionEmbedder,
    HashingEmbedder,
    HistoryDatabase,
    Limits,
    Passage,
    Settings,
)
from dhrag_core.algorithm.calibration import calibrate
from dhrag_core.closing import ClosedError
from dhrag_core.knowledge.ingest import load_kb
from dhrag_core.pipeline.pending import selection_bytes
from dhrag_core.store import MemoryStore

DIM = 48


def _spread(texts: list[str]) -> np.ndarray:
    """A direction of its own for every text: every turn opens a topic cluster."""
    return np.stack([np.random.default_rng(zlib.crc32(t.encode())).standard_normal(DIM)
                     for t in texts])


def _topics(texts: list[str]) -> np.ndarray:
    """``"t<topic> n<i>"``: the topic's centre plus noise, so clusters open, grow and merge
    as a conversation goes on."""
    centres = np.random.default_rng(7).standard_normal((4, DIM))
    rows = []
    for t in texts:
        words = t.split()
        if len(words) != 2 or words[0][0] != "t":  # another session's words
            rows.append(_spread([t])[0])
            continue
        topic, noise = (int(w[1:]) for w in words)
        rows.append(centres[topic] + 1.1 * np.random.default_rng(noise).standard_normal(DIM))
    return np.stack(rows)


def _partition(db: HistoryDatabase, sid: str) -> set[frozenset[str]]:
    """The session's topic clusters as sets of queries (turn ids differ between sessions)."""
    s = db._session(sid)
    return {frozenset(s.turns[t].query for t in c.members)
            for c in s.tree.clusters.clusters.values()}


# -- item 10: merge passes after a reload look at the changed clusters only -----------------

def test_a_reopened_session_merges_over_the_changed_clusters_only() -> None:
    emb = FunctionEmbedder(_spread, DIM)
    cfg = Settings(limits=Limits(capacity=10_000), ablations=Ablations(calibrate=False))
    store = MemoryStore()
    writer = HistoryDatabase(emb, store=store, settings=cfg)
    for i in range(600):
        writer.add("s", f"question {i}", "")
    reopened = HistoryDatabase(emb, store=store, settings=cfg)  # a restart
    clusters = reopened.stats("s")["clusters"]
    assert clusters > 550
    for i in range(cfg.tree.cluster_merge_every):  # one merge pass
        reopened.add("s", f"later question {i}", "")
    compared = reopened.stats("s")["merge_comparisons"]
    # the turns since the last pass, each cluster compared with every centroid; before:
    # every cluster with every other (~360,000)
    assert 0 < compared <= cfg.tree.cluster_merge_every * (clusters + cfg.tree.cluster_merge_every)


def test_a_session_reloaded_before_every_turn_ends_with_the_clusters_of_one_never_reloaded(
) -> None:
    emb = FunctionEmbedder(_topics, DIM)
    cfg = Settings(limits=Limits(capacity=10_000, max_sessions_in_memory=1),
                   ablations=Ablations(calibrate=False))
    kept = HistoryDatabase(emb, settings=cfg)  # one session: never reloaded
    reloaded = HistoryDatabase(emb, settings=cfg)
    rng = np.random.default_rng(3)
    for i in range(240):
        query = f"t{int(rng.integers(0, 4))} n{i}"
        kept.add("a", query, "", timestamp=1e9 + i)
        reloaded.add("other", "a word", "")  # evicts "a": its next use reloads it
        reloaded.add("a", query, "", timestamp=1e9 + i)
    clusters = kept._session("a").tree.clusters
    assert clusters._next_id - len(clusters) >= 2  # clusters merged away
    assert _partition(reloaded, "a") == _partition(kept, "a")


# -- item 11: pending selections bounded by memory -------------------------------------------

BIG = "The wall is long and built of stone; " * 100  # ~3,700 characters


class _Retriever:
    """A retriever that returns new passages, with vectors, on every search (an API, a
    vector store)."""

    def __init__(self, emb: HashingEmbedder) -> None:
        self.emb = emb

    def search(self, query: str, k: int) -> list[Passage]:
        rng = np.random.default_rng(zlib.crc32(query.encode()))
        vectors = [rng.standard_normal(self.emb.dimension).astype(np.float32) for _ in range(k)]
        return [Passage(f"{query} {j} {BIG}", id=f"{query}-{j}", vector=v / np.linalg.norm(v))
                for j, v in enumerate(vectors)]


def test_pending_selections_of_many_sessions_stay_within_the_byte_budget() -> None:
    emb = HashingEmbedder()
    budget = 1 << 20
    engine = DHRAG(_Retriever(emb), embedder=emb,
                   settings=Settings(limits=Limits(max_pending_bytes=budget),
                                     ablations=Ablations(calibrate=False)))
    engine.select("warm", "warm up")
    engine.reset("warm")
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for s in range(32):
            for q in range(8):
                engine.select(f"s{s}", f"question {q} of {s}")
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    pending = list(engine._pending)
    assert sum(selection_bytes(sel) for sel in pending) <= budget
    assert held < 2 * budget  # before: 256 selections of ~50 KB, about 13 MB
    assert engine.pending("s31", "question 7 of 31") is not None  # the newest kept


def test_the_pending_byte_budget_is_a_setting_with_a_default() -> None:
    assert Settings().limits.max_pending_bytes >= 16 << 20
    engine = DHRAG(FaissKnowledgeBase(["a wall"], HashingEmbedder()),
                   settings=Settings(limits=Limits(max_pending_bytes=1 << 22),
                                     ablations=Ablations(calibrate=False)))
    assert engine.max_pending_bytes == 1 << 22
    with pytest.raises((TypeError, ValueError), match="max_pending_bytes"):
        Limits(max_pending_bytes=-1)


def test_a_selection_dropped_by_the_byte_budget_warns_naming_the_setting(
    caplog: pytest.LogCaptureFixture,
) -> None:
    emb = HashingEmbedder()
    engine = DHRAG(_Retriever(emb), embedder=emb,
                   settings=Settings(limits=Limits(max_pending_bytes=200_000),
                                     ablations=Ablations(calibrate=False)))
    for q in range(12):
        engine.select("s", f"question {q}")
    with caplog.at_level(logging.WARNING, logger="dhrag_core"):
        engine.record("s", "question 11", "an answer")  # still pending: its passages
        assert not caplog.records
        engine.record("s", "question 0", "an answer")  # dropped: stored without, says so
    (message,) = [r.getMessage() for r in caplog.records]
    assert "max_pending_bytes" in message and "without passages" in message


# -- raw errors ------------------------------------------------------------------------------

class _WrongLength:
    """A retriever whose passages carry vectors of another embedder (10-d)."""

    def search(self, query: str, k: int) -> list[Passage]:
        return [Passage("The wall is long.", id="w1", vector=np.ones(10, np.float32))]


class _WrongLengthByVector(_WrongLength):
    def search_vectors(self, vectors: np.ndarray, k: int) -> list[list[Passage]]:
        return [self.search("", k) for _ in vectors]


@pytest.mark.parametrize("kb", [_WrongLength(), _WrongLengthByVector()])
def test_a_knowledge_base_vector_of_the_wrong_length_names_the_knowledge_base(kb: Any) -> None:
    emb = HashingEmbedder()
    engine = DHRAG(kb, embedder=emb, settings=Settings(ablations=Ablations(calibrate=False)))
    with pytest.raises(ValueError, match=rf"{type(kb).__name__}.*'w1'.*10.*256"):
        engine.select("s", "How long is the wall?")


def test_faiss_knowledge_base_vectors_of_the_wrong_length_name_it() -> None:
    emb = HashingEmbedder()
    with pytest.raises(ValueError, match=r"FaissKnowledgeBase.*row 1.*10.*256"):
        FaissKnowledgeBase(["a wall", "a moat"], emb, vectors=[np.ones(256), np.ones(10)])
    with pytest.raises(ValueError, match=r"FaissKnowledgeBase.*NaN"):
        FaissKnowledgeBase(["a wall"], emb, vectors=np.full((1, 256), np.nan))


class BrokenModel(HashingEmbedder):
    """An embedder that returns NaN rows (a model overflowing in half precision)."""

    def encode(self, texts: Any) -> np.ndarray:
        out: np.ndarray = super().encode(texts)
        out[:] = np.nan
        return out


def test_nan_from_an_embedder_names_it_when_a_folder_is_embedded(tmp_path: Path,
                                                                monkeypatch: Any) -> None:
    monkeypatch.setenv("DHRAG_CACHE", str(tmp_path / "cache"))
    (tmp_path / "kb").mkdir()
    (tmp_path / "kb" / "walls.txt").write_text("The wall is long and built of stone. " * 40)
    with pytest.raises(ValueError, match=r"BrokenModel.*NaN"):
        load_kb(tmp_path / "kb", BrokenModel(), progress=False)
    assert not list((tmp_path / "cache").rglob("*.npy"))  # nothing broken cached


def test_nan_from_an_embedder_names_it_when_it_is_calibrated() -> None:
    with pytest.raises(ValueError, match=r"BrokenModel.*NaN"):
        calibrate(BrokenModel())
    db = HistoryDatabase(BrokenModel(), settings=Settings(ablations=Ablations(calibrate=True)))
    with pytest.raises(ValueError, match=r"BrokenModel.*NaN"):
        db.add("s", "How long is the wall?", "", query_vector=np.ones(256))


def test_nan_from_an_embedder_names_it_on_queries_and_passages() -> None:
    kb = FaissKnowledgeBase(["The wall is long."], HashingEmbedder())
    engine = DHRAG(kb, embedder=BrokenModel(),
                   settings=Settings(ablations=Ablations(calibrate=False)))
    with pytest.raises(ValueError, match=r"BrokenModel.*NaN"):
        engine.select("s", "How long is the wall?")
    with pytest.raises(ValueError, match=r"BrokenModel.*NaN"):
        engine.record("s", "How long is the wall?", "Long.", passages=["The wall is long."])
    with pytest.raises(ValueError, match=r"BrokenModel.*NaN"):
        FaissKnowledgeBase(["The wall is long."], BrokenModel())


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_an_engine_used_after_close_says_it_was_closed(store: str, tmp_path: Path) -> None:
    emb = HashingEmbedder()
    url = "memory" if store == "memory" else f"sqlite:///{tmp_path / 'h.db'}"
    engine = DHRAG(FaissKnowledgeBase(["The wall is long."], emb), embedder=emb, store=url,
                   settings=Settings(ablations=Ablations(calibrate=False)))
    sel = engine.select("s", "How long is the wall?")
    engine.record("s", sel.query, "Long.")
    engine.close()
    engine.close()  # twice is fine
    calls = [lambda: engine.select("s", "How long?"), lambda: engine.preview("t", "How long?"),
             lambda: engine.record("s", "How long?", "Long."), lambda: engine.reset("s"),
             lambda: engine.history.turns("s"), lambda: engine.history.search("s", "wall"),
             lambda: engine.history.held_question("s")]
    for call in calls:
        with pytest.raises(ClosedError, match=r"closed.*new"):
            call()
    assert issubclass(ClosedError, RuntimeError)
