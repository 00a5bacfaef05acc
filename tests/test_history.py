"""The history database: update rule, eviction, merging, persistence, isolation, bad input."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from dhrag_core import (
    Ablations,
    HashingEmbedder,
    HistoryDatabase,
    Limits,
    Passage,
    Settings,
    SQLiteStore,
    Tree,
    Turn,
    Weighting,
    calibrate,
)
from dhrag_core.algorithm import scoring
from dhrag_core.embedding import opening_words, tokens
from dhrag_core.history.inputs import answer_shares
from dhrag_core.settings import with_changes
from tests.conftest import FakeClock

TOPICS = [
    "guinea pig diet and hay",
    "bond interest rates",
    "kubernetes pod scheduling",
    "passport renewal forms",
]


def fill(db: HistoryDatabase, session: str, n: int, clock: FakeClock | None = None) -> None:
    for i in range(n):
        db.add(session,
               f"question {i} about {TOPICS[i % len(TOPICS)]}",
               f"answer {i}",
               passages=[f"passage {i} on {TOPICS[i % len(TOPICS)]}"])
        if clock is not None:
            clock.advance(10)


def test_add_then_search_finds_the_related_turn(
    embedder: HashingEmbedder, clock: FakeClock
) -> None:
    db = HistoryDatabase(embedder=embedder, settings=Settings(weighting=Weighting(alpha=0.9)),
                         clock=clock)
    fill(db, "alice", 4)
    hits = db.search("alice", "what do guinea pigs eat? hay?", k=2)
    assert hits[0].turn.query == "question 0 about guinea pig diet and hay"
    assert hits[0].weight >= hits[1].weight
    assert 0 <= hits[0].relevance <= 1 and 0 <= hits[0].recency <= 1


def test_weight_follows_equation_13(embedder: HashingEmbedder, clock: FakeClock) -> None:
    s = Settings(weighting=Weighting(alpha=0.3, half_life_turns=2.0, half_life_seconds=100.0))
    db = HistoryDatabase(embedder=embedder, settings=s, clock=clock)
    db.add("s", "guinea pig hay", "")
    clock.advance(100)
    db.add("s", "bond interest", "")
    hit = next(h for h in db.search("s", "guinea pig hay", k=2) if h.turn.index == 0)
    # turn 0 is 2 turns (next index 2) and 100 s old: recency = 0.5 * 0.5
    assert hit.recency == pytest.approx(0.25)
    assert hit.relevance == pytest.approx(1.0, abs=3e-3)  # the stored copy is int8-coded
    assert hit.weight == pytest.approx(0.3 * hit.relevance + 0.7 * 0.25, abs=1e-5)


def test_capacity_bound_evicts_lowest_weight(embedder: HashingEmbedder, clock: FakeClock) -> None:
    s = Settings(limits=Limits(capacity=5), weighting=Weighting(alpha=0.5, half_life_turns=3.0))
    db = HistoryDatabase(embedder=embedder, settings=s, clock=clock)
    for i in range(12):
        q = f"question {i} about {TOPICS[i % 4]}"
        before = db.turns("s")
        qv = embedder.encode([q])[0]
        r = db.add("s", q, f"a{i}", passages=[f"p{i}"])
        assert db.size("s") <= 5
        if before and len(before) + 1 > 5:
            # recompute eq. 13 for everything stored before, against the new query
            idx = r.turn.index
            sims = np.array([t.query_vector @ qv for t in before])
            rec = scoring.recency([idx - t.index for t in before], 3.0,
                                  [clock() - t.timestamp for t in before],
                                  s.weighting.half_life_seconds)
            w = scoring.combined_weight(scoring.relevance(sims), rec, 0.5)
            expected = before[int(scoring.lowest_weights(w, 1)[0])].turn_id
            assert r.evicted == (expected,)
            assert expected not in {t.turn_id for t in db.turns("s")}
            assert all(h.turn.turn_id != expected for h in db.search("s", q, k=10))
        clock.advance(5)
    assert db.turns("s")[-1].query == "question 11 about " + TOPICS[3]


def test_eviction_reaches_store_and_indexes(tmp_path: Path, embedder: HashingEmbedder) -> None:
    path = tmp_path / "h.db"
    db = HistoryDatabase(embedder=embedder, store=SQLiteStore(path),
                         settings=Settings(limits=Limits(capacity=3)))
    fill(db, "s", 10)
    assert len(SQLiteStore(path).load("s")[0]) == 3
    assert len(db.search("s", "passage", k=50)) == 3


def test_near_duplicate_turn_is_merged(db: HistoryDatabase) -> None:
    a = db.add("s",
               "Who built the mosque?",
               "In 1680.",
               passages=[Passage("built in 1680", id="kb1")])
    db.add("s", "What is a bond?", "Debt.", passages=["a bond is debt"])
    b = db.add("s",
               "Who built the mosque?",
               "In 1680.",
               passages=[Passage("the architect", id="kb2")])
    assert b.merged and b.turn.turn_id == a.turn.turn_id and b.turn.merges == 1
    assert [p.id for p in b.turn.passages] == ["kb2", "kb1"]
    assert b.turn.index == 2 and db.size("s") == 2
    # same words, different answer: a different turn, not a duplicate
    c = db.add("s", "Who built the mosque?", "A completely different reply about bridges.")
    assert not c.merged and db.size("s") == 3


def test_passage_vectors_are_not_reencoded(clock: FakeClock) -> None:
    seen: list[str] = []

    class Counting(HashingEmbedder):
        def encode(self, texts):  # type: ignore[no-untyped-def]
            seen.extend(texts)
            return super().encode(texts)

    e = Counting()
    cal = calibrate(HashingEmbedder())
    db = HistoryDatabase(embedder=e, clock=clock, calibration=cal)
    v = HashingEmbedder().encode(["precomputed passage"])[0]
    db.add("s",
           "question",
           "ans",
           passages=[Passage("precomputed passage", vector=v), "fresh passage"])
    assert seen == ["question", "ans", "fresh passage"]
    stored = db.turns("s")[0]
    # stored centred, as int8
    np.testing.assert_allclose(stored.passage_vectors[0], cal.apply(v), atol=3e-3)
    # one compact copy: int8-coded rows on the turn, no vector left on its passages
    assert stored.passage_vectors.dtype == np.float32 and isinstance(stored.vectors, bytes)
    assert all(p.vector is None for p in stored.passages)
    assert stored.passages[0].vector is None  # vectors live in passage_vectors only


def test_sqlite_reload_gives_identical_retrieval(
    tmp_path: Path, embedder: HashingEmbedder, clock: FakeClock
) -> None:
    path = tmp_path / "h.db"
    s = Settings(limits=Limits(capacity=6))
    db = HistoryDatabase(embedder=embedder, store=SQLiteStore(path), settings=s, clock=clock)
    fill(db, "alice", 9, clock)
    fill(db, "bob", 3, clock)
    queries = ["guinea pigs", "interest", "pods", "renew passport"]
    before = {q: [(h.turn.turn_id, h.weight) for h in db.search("alice", q, k=4)] for q in queries}
    db.close()
    db2 = HistoryDatabase(embedder=embedder, store=f"sqlite:///{path}", settings=s, clock=clock)
    after = {q: [(h.turn.turn_id, h.weight) for h in db2.search("alice", q, k=4)] for q in queries}
    assert after == before
    assert db2.size("alice") == 6 and db2.size("bob") == 3
    # the turn counter continues after a restart
    assert db2.add("alice", "a new question", "").turn.index == 9


def test_two_processes_share_a_sqlite_file(tmp_path: Path, embedder: HashingEmbedder) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    w1 = HistoryDatabase(embedder=embedder, store=url, settings=Settings(limits=Limits(capacity=4)))
    w2 = HistoryDatabase(embedder=embedder, store=url, settings=Settings(limits=Limits(capacity=4)))
    for i in range(6):
        (w1 if i % 2 else w2).add("s", f"question {i} {TOPICS[i % 4]}", "")
    assert w1.size("s") == w2.size("s") == 4
    assert [t.index for t in w1.turns("s")] == [t.index for t in w2.turns("s")]
    assert w1.turns("s")[-1].index == 5


def test_sessions_never_leak(db: HistoryDatabase) -> None:
    db.add("alice", "alice secret about guinea pigs", "alice answer", passages=["alice passage"])
    db.add("bob", "bob question about bonds", "bob answer", passages=["bob passage"])
    for q in ["alice secret guinea pigs", "bob bonds"]:
        assert {h.turn.session_id for h in db.search("bob", q, k=10)} == {"bob"}
    db.delete_session("bob")
    assert db.search("bob", "bob bonds", k=5) == []
    assert db.size("alice") == 1
    assert db.search("nobody", "anything", k=3) == []


BAD_ADDS = [
    ({"query": ""}, ValueError, "query"),
    ({"query": "   \n"}, ValueError, "query"),
    ({"query": None}, TypeError, "query"),
    ({"query": 42}, TypeError, "query"),
    ({"query": b"\xff\xfe bytes"}, TypeError, "decode"),
    ({"answer": None}, TypeError, "answer"),
    ({"passages": "one string"}, TypeError, "passages"),
    ({"passages": [None]}, TypeError, r"passages\[0\]"),
    ({"metadata": {"x": object()}}, TypeError, r"metadata\['x'\] must be JSON data"),
    ({"metadata": {1: "one"}}, TypeError, "metadata keys must be str, got int"),
    ({"metadata": {"k": ["caf\udce9"]}}, ValueError, r"metadata\['k'\]\[0\] is not valid Unicode"),
    ({"metadata": {"blob": "x" * 30_000_000}}, ValueError, "Settings.limits.max_metadata_chars"),
    ({"metadata": {"x": float("nan")}}, ValueError, r"metadata\['x'\]"),
    ({"metadata": "not a mapping"}, TypeError, "metadata must be a mapping"),
    ({"query_vector": np.ones(3)}, ValueError, "query_vector"),
    ({"query_vector": np.full(256, np.nan)}, ValueError, "query_vector"),
    ({"passages": [Passage("a", vector=np.ones(256)), Passage("b", vector=np.ones(3))]},
     ValueError, r"passages\[1\]\.vector must be a finite vector of length 256"),
    ({"passages": [Passage("a", vector=np.ones(256)), Passage("b", vector=np.full(256, np.inf))]},
     ValueError, r"passages\[1\]\.vector must be a finite vector"),
    ({"session_id": ""}, ValueError, "session_id"),
    ({"session_id": None}, TypeError, "session_id"),
    ({"session_id": "s" * 300}, ValueError, "session_id"),
    ({"timestamp": "yesterday"}, TypeError, "timestamp"),
]


@pytest.mark.parametrize(("query", "response", "stored_query", "note"), [
    ("bad \udcff surrogate", "r", "bad \ufffd surrogate", None),
    ("nul\x00byte", "r", "nulbyte", None),
    ("word " * 2_000_000, "r", ("word " * 1_638).strip(), None),  # 8,192 at a word
    ("valid question", "y" * 10_000_000, "valid question", "cut from 10,000,000"),
    ("valid question", "an \udcff answer\x00", "valid question", "lone surrogates"),
])
def test_text_that_cannot_be_stored_as_given_is_stored_cleaned_and_said_so(
    tmp_path: Path, embedder: HashingEmbedder, query: str, response: str, stored_query: str,
    note: str | None,
) -> None:
    """A question is cut or cleaned with a warning, an answer (already given by the LLM) is
    cleaned with a note in the turn's metadata: neither fails the turn."""
    db = HistoryDatabase(embedder=embedder, store=SQLiteStore(tmp_path / "h.db"))
    fill(db, "s", 2)
    if note is None:
        with pytest.warns(UserWarning, match="query: "):
            db.add("s", query, response, passages=["p"])
    else:
        db.add("s", query, response, passages=["p"])
    last = db.turns("s")[-1]
    assert last.query == stored_query and len(db.turns("s")) == 3
    assert (note is None) == ("dhrag_cleaned" not in last.metadata)
    if note is not None:
        assert note in last.metadata["dhrag_cleaned"]
        assert "\x00" not in last.response and len(last.response) <= 1_000_000


@pytest.mark.parametrize(("change", "exc", "match"), BAD_ADDS)
def test_bad_input_is_rejected_and_loses_nothing(
    tmp_path: Path, embedder: HashingEmbedder, change: dict, exc: type, match: str  # type: ignore[type-arg]
) -> None:
    db = HistoryDatabase(embedder=embedder, store=SQLiteStore(tmp_path / "h.db"))
    fill(db, "s", 3)
    before = [(t.turn_id, t.query) for t in db.turns("s")]
    args = {"session_id": "s", "query": "valid question", "passages": ["p"], "answer": "r",
            **change}
    with pytest.raises(exc, match=match):
        db.add(args.pop("session_id"), args.pop("query"), **args)
    assert [(t.turn_id, t.query) for t in db.turns("s")] == before
    assert SQLiteStore(tmp_path / "h.db").integrity_check() == "ok"
    assert db.add("s", "still works", "").turn.index == 3


@pytest.mark.parametrize(
    ("kwargs", "exc"),
    [({"alpha": 1.5}, ValueError), ({"alpha": -0.1}, ValueError), ({"capacity": -1}, ValueError),
     ({"capacity": 0}, ValueError), ({"capacity": 2.5}, TypeError), ({"alpha": "0.5"}, TypeError),
     ({"half_life_turns": 0}, ValueError), ({"alpha": float("nan")}, ValueError)],
)
def test_bad_settings_name_the_argument(kwargs: dict, exc: type) -> None:  # type: ignore[type-arg]
    with pytest.raises(exc, match=next(iter(kwargs))):
        with_changes(Settings(), kwargs)


def test_bad_search_arguments(db: HistoryDatabase) -> None:
    fill(db, "s", 2)
    with pytest.raises(ValueError, match="k must be"):
        db.search("s", "q", k=0)
    with pytest.raises(TypeError, match="k must be"):
        db.search("s", "q", k="3")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="query"):
        db.search("s", "  ", k=1)
    with pytest.raises(TypeError, match="settings"):
        HistoryDatabase(embedder=HashingEmbedder(), settings={"alpha": 0.5})  # type: ignore[arg-type]


def test_embedder_dimension_mismatch_on_reload(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    HistoryDatabase(embedder=HashingEmbedder(64), store=url).add("s", "question", "")
    with pytest.raises(ValueError, match="embedder"):
        HistoryDatabase(embedder=HashingEmbedder(128), store=url).size("s")


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_threads_on_many_sessions_lose_nothing_and_leak_nothing(
    tmp_path: Path, embedder: HashingEmbedder, backend: str
) -> None:
    store = "memory" if backend == "memory" else f"sqlite:///{tmp_path / 'h.db'}"
    db = HistoryDatabase(embedder=embedder, store=store,
                         settings=Settings(limits=Limits(capacity=1000)))
    errors: list[BaseException] = []

    def worker(w: int) -> None:
        try:
            for i in range(40):
                session = f"user{(w + i) % 6}"
                db.add(session,
                       f"{session} asks question w{w}i{i} about {TOPICS[i % 4]}",
                       f"{session} answer",
                       passages=[f"{session} passage w{w}i{i}"])
                for h in db.search(session, f"question w{w}i{i}", k=5):
                    assert h.turn.session_id == session
                    assert h.turn.query.startswith(session + " ")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert sum(db.size(f"user{u}") for u in range(6)) == 6 * 40
    for u in range(6):
        indexes = [t.index for t in db.turns(f"user{u}")]
        assert indexes == list(range(40)), "every turn kept, numbered in order"


# -- bounded in-memory sessions (issue 18, item 3) ---------------------------------------


def test_sessions_in_memory_are_bounded_and_reloaded_from_the_store(tmp_path: Path) -> None:
    db = HistoryDatabase(embedder=HashingEmbedder(64), store=f"sqlite:///{tmp_path / 'h.db'}",
                         settings=Settings(limits=Limits(max_sessions_in_memory=8)))
    for round_ in range(2):
        for i in range(40):
            db.add(f"user{i}",
                   f"question {round_} of user {i}",
                   "answer",
                   passages=[f"passage {i}"])
            assert len(db._sessions) <= 8
    assert list(db._sessions) == [f"user{i}" for i in range(32, 40)]  # least recently used out
    for i in range(40):  # evicted sessions come back whole from the store
        assert [t.query for t in db.turns(f"user{i}")] == [
            f"question 0 of user {i}", f"question 1 of user {i}"]
        assert db.select(f"user{i}", "question")[0].turn.session_id == f"user{i}"
    db.close()


def test_reading_unknown_sessions_allocates_nothing_lasting() -> None:
    import gc
    import tracemalloc

    db = HistoryDatabase(embedder=HashingEmbedder(64))
    db.add("known", "How long is the wall?", "21,196 km.", passages=["21,196 km"])
    db.select("probe", "warm up")
    # what is kept, not what awaits the cycle collector (a read's throw-away session state
    # holds reference cycles; when the collector last ran decided the old figure, ~0-210 kB)
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for i in range(2_000):
        assert db.select(f"stranger{i}", "anything?") == []
        assert db.search(f"stranger{i}", "anything?") == [] and db.size(f"stranger{i}") == 0
    gc.collect()
    grown = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    assert list(db._sessions) == ["known"] and db.store.sessions() == ["known"]
    assert grown < 50_000, f"{grown:,} bytes kept after 2,000 reads of unknown sessions"


def test_deleting_sessions_frees_their_memory() -> None:
    db = HistoryDatabase(embedder=HashingEmbedder(64))
    for i in range(50):
        db.add(f"u{i}", "What is the capital of France?", "Paris.", passages=["Paris"])
    assert len(db._sessions) == 50
    for i in range(50):
        db.delete_session(f"u{i}")
    assert not db._sessions and db.store.sessions() == []


def test_max_sessions_in_memory_is_validated() -> None:
    with pytest.raises(ValueError, match="max_sessions_in_memory"):
        Settings(limits=Limits(max_sessions_in_memory=0))
    with pytest.raises(TypeError, match="max_sessions_in_memory"):
        Settings(limits=Limits(max_sessions_in_memory=2.5))  # type: ignore[arg-type]


def test_many_sessions_benchmark_stays_within_the_bound(tmp_path: Path) -> None:
    import json

    from benchmarks.perf.many_sessions import main

    out = tmp_path / "many.json"
    assert main(["--sessions", "1200", "--turns", "2", "--group", "50", "--bound", "40",
                 "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["stored_sessions"] == 1200 and result["embedder"] == "HashingEmbedder"
    assert all(r["in_memory"] <= 40 for r in result["checkpoints"])
    assert [r["sessions"] for r in result["checkpoints"]] == [1000, 1200]


# -- passages a retriever returned never cost the turn (issue 18, items 4 and 12) ------------


def test_unstorable_passages_are_cleaned_and_the_turn_is_kept(tmp_path: Path) -> None:
    db = HistoryDatabase(embedder=HashingEmbedder(64), store=f"sqlite:///{tmp_path / 'h.db'}",
                         settings=Settings(limits=Limits(max_text_chars=1_000)))
    passages = [
        Passage(text="from a PDF loader\x00 with a NUL", id="pdf#0"),
        "data:image/png;base64," + "A" * 5_000,
        Passage(text="caf\udce9 menu", id="id\udce9", title="T\udce9",
                metadata={"page": 3, "raw": b"bytes", 7: "int key"}),
        "an ordinary passage",
    ]
    result = db.add("s", "What does the file say?", "It says hello.", passages=passages)
    [turn] = db.turns("s")  # stored in SQLite, reloaded from it by a second database
    again = HistoryDatabase(embedder=HashingEmbedder(64), store=f"sqlite:///{tmp_path / 'h.db'}")
    [stored] = again.turns("s")
    assert result.turn.turn_id == turn.turn_id == stored.turn_id
    texts = [p.text for p in stored.passages]
    assert texts[0] == "from a PDF loader with a NUL" and len(texts[1]) == 1_000
    assert texts[2] == "caf\ufffd menu" and texts[3] == "an ordinary passage"
    assert stored.passages[2].id == "id\ufffd" and stored.passages[2].title == "T\ufffd"
    assert stored.passages[2].metadata["7"] == "int key"
    notes = [p.metadata.get("dhrag_cleaned", "") for p in stored.passages]
    assert "removed 1 NUL" in notes[0] and "cut from 5,022 to 1,000 characters" in notes[1]
    assert "lone surrogates" in notes[2] and "id:" in notes[2] and notes[3] == ""


def test_a_score_that_is_no_number_is_dropped_and_the_turn_is_kept(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    db = HistoryDatabase(embedder=HashingEmbedder(64), store=url)
    db.add("s",
           "What is it?",
           "It is one.",
           passages=[
        Passage(text="one", id="a", score="high"),  # type: ignore[arg-type]
        Passage(text="two", id="b", score=float("nan")),
        Passage(text="three", id="c", score=np.float32(0.5)),  # type: ignore[arg-type]
    ])
    [stored] = HistoryDatabase(embedder=HashingEmbedder(64), store=url).turns("s")
    assert [p.score for p in stored.passages] == [None, None, 0.5]
    notes = [p.metadata.get("dhrag_cleaned", "") for p in stored.passages]
    assert "score: 'high' is not a finite number" in notes[0] and "score: nan" in notes[1]
    assert notes[2] == ""


def test_cleaning_is_shown_in_the_trace(tmp_path: Path) -> None:
    from dhrag_core import DHRAG, FaissKnowledgeBase

    emb = HashingEmbedder(64)
    kb = FaissKnowledgeBase([Passage(text="Guinea pigs\x00 sleep in burrows.", id="g")], emb)
    rag = DHRAG(kb, embedder=emb, store=f"sqlite:///{tmp_path / 'h.db'}")
    sel = rag.select("s", "Where do guinea pigs sleep?")
    rag.record("s", sel.query, "In burrows.", selection=sel)
    later = rag.select("s", "Where do guinea pigs sleep?")
    assert kb.passages[0].text == "Guinea pigs sleep in burrows."  # cleaned at ingestion
    assert [r["cleaned"] for r in sel.trace()] == ["removed 1 NUL characters"]
    assert all("removed 1 NUL" in r["cleaned"] for r in later.trace())


class _Counting:
    """A hashing embedder that records every text it encodes."""

    def __init__(self) -> None:
        self.inner = HashingEmbedder()
        self.dimension = self.inner.dimension
        self.texts: list[str] = []

    def encode(self, texts: list[str]) -> np.ndarray:
        self.texts.extend(texts)
        return self.inner.encode(texts)


def test_answer_vector_is_derived_from_the_passages_it_shares_words_with() -> None:
    emb = _Counting()
    db = HistoryDatabase(embedder=emb)
    passages = ["the mosque was built in 1680 by the governor",
                "bond coupons are paid twice a year",
                "the governor of the province built a mosque"]
    answer = "The governor built the mosque in 1680."
    turn = db.add("s", "Who built the mosque?", answer, passages=passages).turn
    assert answer not in emb.texts  # derived, not encoded
    words = set(tokens(answer))
    shares = np.array([len(words & set(tokens(p))) / len(words) for p in passages])
    assert shares[1] == 0 and shares[0] > shares[2] > 0
    expected = (shares**2) @ db.calibrate(emb.inner.encode(passages))  # centred, float32
    expected /= np.linalg.norm(expected)
    assert turn.response_vector is not None
    # derived from the passages' float32 vectors; the turn keeps them int8-coded
    np.testing.assert_allclose(turn.response_vector, expected, atol=3e-3)


@pytest.mark.parametrize(("mode", "passages", "answer"), [
    ("passages", [], "The governor built it."),  # nothing to derive from
    ("passages", ["bond coupons twice yearly"], "The governor built it."),  # no shared word
    ("encode", ["the governor built the mosque"], "The governor built it."),
])
def test_answer_vector_is_encoded_when_it_cannot_or_must_not_be_derived(
    mode: str, passages: list[str], answer: str
) -> None:
    emb = _Counting()
    db = HistoryDatabase(embedder=emb, settings=Settings(tree=Tree(answer_vector=mode)))
    turn = db.add("s", "Who built the mosque?", answer, passages=passages).turn
    assert answer in emb.texts
    assert turn.response_vector is not None
    np.testing.assert_allclose(turn.response_vector,
                               db.calibrate(emb.inner.encode([answer])[0]), atol=3e-3)


def test_an_answer_that_did_not_draw_on_its_passages_is_encoded_by_its_opening() -> None:
    emb = _Counting()
    db = HistoryDatabase(embedder=emb, settings=Settings(tree=Tree(answer_words=5)))
    passages = ["the mosque was built in 1680 by the governor"]
    # 2 of its 7 content words are in the passage: it drew on something else
    answer = "The governor built it after the great fire, records say."
    turn = db.add("s", "Who built the mosque?", answer, passages=passages).turn
    opening = "The governor built it after"
    assert opening in emb.texts and answer not in emb.texts
    assert turn.response_vector is not None
    np.testing.assert_allclose(turn.response_vector,
                               db.calibrate(emb.inner.encode([opening])[0]), atol=3e-3)
    # the same answer is derived from that passage when a quarter of its words is enough
    emb2 = _Counting()
    db2 = HistoryDatabase(embedder=emb2, settings=Settings(tree=Tree(answer_share=0.25)))
    db2.add("s", "Who built the mosque?", answer, passages=passages)
    assert not any("fire" in t for t in emb2.texts)


def test_answer_shares_need_one_passage_holding_the_least_share() -> None:
    passages = [Passage(text="governor mosque"), Passage(text="1680 built")]
    answer = "The governor built the mosque in 1680."  # 4 content words, 2 in each passage
    shares = answer_shares(answer, passages, least=0.5)
    assert shares is not None
    np.testing.assert_allclose(shares, [0.25, 0.25])
    assert answer_shares(answer, passages, least=0.51) is None
    assert answer_shares(answer, [Passage(text="bonds")]) is None


@pytest.mark.parametrize(("text", "limit", "expected"), [
    ("one two  three", None, "one two  three"),
    ("one two  three", 3, "one two three"),
    ("one two  three four", 2, "one two"),
])
def test_opening_words(text: str, limit: int | None, expected: str) -> None:
    assert opening_words(text, limit) == expected


def test_answer_vector_setting_is_checked() -> None:
    with pytest.raises(ValueError, match="answer_vector"):
        Settings(tree=Tree(answer_vector="summary"))
    with pytest.raises(ValueError, match="answer_share"):
        Settings(tree=Tree(answer_share=1.5))
    with pytest.raises(ValueError, match="answer_words"):
        Settings(tree=Tree(answer_words=0))


def test_same_answer_over_other_passages_still_merges_a_duplicate() -> None:
    db = HistoryDatabase(embedder=HashingEmbedder())
    a = db.add("s", "Who built the mosque?", "In 1680.", passages=["the mosque was built in 1680"])
    b = db.add("s",
               "Who built the mosque?",
               "In 1680.",
               passages=["records from 1680 name a builder"])
    c = db.add("s", "Who built the mosque?", "Nobody knows.", passages=["bond coupons"])
    assert b.merged and b.turn.turn_id == a.turn.turn_id
    assert not c.merged


def test_a_turn_keeps_int8_coded_vectors_and_refuses_non_finite_ones() -> None:
    def turn(qv: np.ndarray) -> Turn:
        return Turn(session_id="s", turn_id="t", index=0, query="q", passages=(), response="",
                    timestamp=0.0, query_vector=qv, response_vector=None,
                    passage_vectors=np.zeros((0, 4), np.float32))

    kept = turn(np.array([0.5, -0.25, 1e-3, 0.0], np.float64))
    assert kept.query_vector.dtype == np.float32 and kept.passage_vectors.shape == (0, 4)
    np.testing.assert_allclose(kept.query_vector, [0.5, -0.25, 1e-3, 0.0], atol=0.5 / 250)
    assert turn(np.array([1e5, 0.0, 0.0, 0.0], np.float32)).query_vector[0] == 1e5
    for bad in (np.inf, np.nan):
        with pytest.raises(ValueError, match="finite"):
            turn(np.array([bad, 0.0, 0.0, 0.0], np.float32))


def test_records_are_slotted_share_empty_metadata_and_pickle() -> None:
    import pickle

    from dhrag_core.records import NO_METADATA

    p, q = Passage(text="a"), Passage(text="b", metadata={})
    t = Turn(session_id="s", turn_id="t", index=0, query="q", passages=(p, q), response="",
             timestamp=0.0, query_vector=np.ones(4), response_vector=None,
             passage_vectors=np.ones((2, 4)), metadata={})
    for r in (p, q, t):  # no per-record __dict__, and no empty dict each
        assert not hasattr(r, "__dict__") and r.metadata is NO_METADATA
        assert r.metadata == {} and dict(r.metadata) == {} and repr(r.metadata) == "{}"
    kept = Passage(text="c", metadata={"k": 1})
    assert kept.metadata == {"k": 1}
    back = pickle.loads(pickle.dumps(t))
    assert back.metadata is NO_METADATA and back.passages == t.passages
    np.testing.assert_array_equal(back.passage_vectors, t.passage_vectors)
    assert pickle.loads(pickle.dumps(kept)) == kept
    with pytest.raises(KeyError):
        NO_METADATA["k"]


class _GivenVectors:
    dimension = 16

    def encode(self, texts: list[str]) -> np.ndarray:
        raise AssertionError("every vector is given")


@pytest.mark.parametrize("shift, half_life", [(0.0, 3.0), (0.4, 3.0), (0.4, 2_000.0)])
def test_large_session_evicts_what_weighing_every_turn_evicts(
    shift: float, half_life: float
) -> None:
    """From 4,096 turns eviction weighs only the turns whose similarity leaves them a chance;
    it must evict the same turn as eq. 13 over every turn (ties at weight 0: the older;
    similarities all positive; recency alive for most turns)."""
    from dhrag_core import MemoryStore

    rng = np.random.default_rng(7)

    def unit(n: int) -> np.ndarray:
        v = rng.standard_normal((n, 16)).astype(np.float32) + shift
        return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)

    n = 4_200
    store = MemoryStore()
    seeded = unit(n)
    store.apply("s", upsert=[
        Turn(session_id="s", turn_id=f"t{i}", index=i, query=f"q{i}", passages=(),
             response="", timestamp=float(i), query_vector=seeded[i], response_vector=None,
             passage_vectors=np.zeros((0, 16), dtype=np.float16))
        for i in range(n)])
    now = iter(range(n, 2 * n))
    s = Settings(limits=Limits(capacity=n),
                 weighting=Weighting(half_life_turns=half_life, merge_threshold=1.0),
                 ablations=Ablations(calibrate=False))
    db = HistoryDatabase(embedder=_GivenVectors(), store=store, settings=s,
                         clock=lambda: float(next(now)))
    for qv in unit(25):
        before = db.turns("s")
        stamp = float(before[-1].timestamp + 1)
        sims = np.stack([t.query_vector for t in before]).astype(np.float32) @ qv
        rec = scoring.recency([before[-1].index + 1 - t.index for t in before],
                              half_life, [stamp - t.timestamp for t in before],
                              s.weighting.half_life_seconds)
        w = scoring.combined_weight(scoring.relevance(sims), rec, s.weighting.alpha)
        expected = before[int(scoring.lowest_weights(w, 1, age=[t.index for t in before])[0])]
        r = db.add("s", "q", "", query_vector=qv, timestamp=stamp)
        assert r.evicted == (expected.turn_id,)
