"""The per-turn pipeline: integration weights, select/record, async twins, real-model run."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from dhrag_core import (
    DHRAG,
    Ablations,
    Candidate,
    Experiments,
    FaissKnowledgeBase,
    HashingEmbedder,
    Integration,
    LightRewriter,
    Limits,
    MiniLMEmbedder,
    Passage,
    Retrieval,
    Settings,
    Threads,
    integrate,
    softmax,
)
from dhrag_core.algorithm.hierarchy import topic_vector
from dhrag_core.algorithm.lexical import held_words, word_overlap
from dhrag_core.algorithm.rewriting import expand_vector
from dhrag_core.embedding import l2_normalise, token_set
from dhrag_core.settings import with_changes

KB = [
    Passage("The Great Wall of China is built of stone, brick, tamped earth and wood.", id="w1",
            title="Great Wall"),
    Passage("The Great Wall of China is 21,196 km long across northern China.", id="w2",
            title="Great Wall"),
    Passage("Guinea pigs sleep in burrows dug by other animals in the wild.", id="g1",
            title="Guinea pig"),
    Passage("Guinea pigs are popular pets and live five to seven years.", id="g2",
            title="Guinea pig"),
    Passage("Bonds pay interest as periodic coupons until maturity.", id="b1", title="Bond"),
    Passage("A long bond has a maturity over ten years.", id="b2", title="Bond"),
]


class TextOnly:
    """A knowledge base searched by text only, like a framework retriever."""

    def __init__(self, kb: FaissKnowledgeBase) -> None:
        self.kb = kb

    def search(self, query: str, k: int) -> list[Passage]:
        return self.kb.search(query, k)


@pytest.fixture
def rag() -> DHRAG:
    emb = HashingEmbedder()
    return DHRAG(TextOnly(FaissKnowledgeBase(KB, emb)), embedder=emb)


def test_softmax_is_a_distribution() -> None:
    w = softmax([1.0, 2.0, 3.0])
    assert w.sum() == pytest.approx(1.0) and list(np.argsort(w)) == [0, 1, 2]
    assert softmax([1000.0, 1000.0]).tolist() == [0.5, 0.5]
    assert softmax([]).size == 0


def _cands() -> tuple[np.ndarray, list[Candidate]]:
    q = l2_normalise(np.array([1.0, 0.2, 0, 0]))[0]
    vecs = l2_normalise(np.array([[1.0, 0.1, 0, 0], [0.8, 0.6, 0, 0], [0, 1.0, 0, 0]]))
    cands = [Candidate(Passage("a", id="a"), vecs[0], "kb"),
             Candidate(Passage("b", id="b"), vecs[1], "kb"),
             Candidate(Passage("a", id="a"), vecs[0], "history")]
    return q, cands


def test_integration_ranks_deduplicates_and_weights() -> None:
    q, cands = _cands()
    items = integrate(q, cands, 10, temperature=0.1)
    assert [i.passage.id for i in items] == ["a", "b"], "duplicate 'a' kept once"
    assert sum(i.weight for i in items) == pytest.approx(1.0)
    assert items[0].weight > items[1].weight
    identity = integrate(q, cands, 10, matrix=np.eye(4), temperature=0.1)
    assert [round(i.weight, 6) for i in identity] == [round(i.weight, 6) for i in items]


def test_integration_matrix_changes_the_ranking() -> None:
    q, cands = _cands()
    w = np.diag([0.0, 1.0, 1.0, 1.0])  # ignore the first dimension
    items = integrate(q, cands, 10, matrix=w, temperature=0.1)
    assert items[0].passage.id == "b"


def test_integration_scores_each_candidate_by_its_best_query() -> None:
    q, other = np.eye(4, dtype=np.float32)[0], np.eye(4, dtype=np.float32)[2]
    vecs = l2_normalise(np.array([[1.0, 0.5, 0, 0], [0, 0, 1.0, 0]]))
    cands = [Candidate(Passage("a", id="a"), vecs[0], "kb"),
             Candidate(Passage("b", id="b"), vecs[1], "kb")]
    alone = integrate(q, cands, 10, temperature=0.1)
    both = integrate(np.stack([q, other]), cands, 10, temperature=0.1)
    assert [i.passage.id for i in alone] == ["a", "b"]
    assert [i.passage.id for i in both] == ["b", "a"], "b matches the second query best"
    assert both[0].similarity == pytest.approx(1.0)
    assert both[1].similarity == pytest.approx(float(vecs[0] @ q))


def test_answer_bonus_lifts_the_history_passage_the_answer_drew_on() -> None:
    from dhrag_core.records import SelectedTurn, Turn

    e = np.eye(4, dtype=np.float32)
    x, y = l2_normalise(np.array([[0.6, 0.8, 0, 0], [0.6, 0, 0.8, 0]]))

    def selected(answer: np.ndarray | None) -> SelectedTurn:
        turn = Turn(session_id="s", turn_id="t", index=0, query="q", passages=(),
                    response="a", timestamp=0.0, query_vector=e[0], response_vector=answer,
                    passage_vectors=np.zeros((0, 4), dtype=np.float32))
        return SelectedTurn(turn=turn, relevance=1.0, recency=1.0, weight=0.5, via=("chain",),
                            cluster_id=0, cluster_label="", summary=None, chain_id=0)

    def ranked(answer: np.ndarray | None, bonus: float) -> list[str | None]:
        sel = selected(answer)
        cands = [Candidate(Passage("y", id="y"), y, "history", sel),
                 Candidate(Passage("x", id="x"), x, "history", sel)]
        items = integrate(e[0], cands, 10, temperature=0.1, answer_bonus=bonus)
        return [i.passage.id for i in items]

    assert ranked(e[1], 0.0) == ["y", "x"], "equal similarity: candidate order"
    assert ranked(e[1], 1.0) == ["x", "y"], "the answer drew on x"
    assert ranked(None, 1.0) == ["y", "x"], "no answer vector: no support"


@pytest.mark.parametrize("variants", [1, 2])
def test_the_knowledge_base_is_searched_inside_each_candidate_thread(variants: int) -> None:
    emb = HashingEmbedder()
    rag = DHRAG(FaissKnowledgeBase(KB, emb), embedder=emb,
                settings=Settings(threads=Threads(thread_variants=variants),
                                  retrieval=Retrieval(kb_k=1, context_k=4)))
    for q, a in [("What is the Great Wall of China built of?", "Stone, brick and earth."),
                 ("Where do guinea pigs sleep in the wild?", "In burrows.")]:
        rag.record("u", q, a, selection=rag.select("u", q))
    sel = rag.select("u", "Tell me more")
    assert len(sel.search_vectors) == variants
    assert np.array_equal(sel.search_vectors[0], sel.search_vector)
    # kb_k=1: one passage per searched query vector
    assert len({c.passage.id for c in sel.context if c.source == "kb"}) == variants
    raw = DHRAG(FaissKnowledgeBase(KB, emb), embedder=emb,
                settings=Settings(threads=Threads(thread_variants=variants),
                                  experiments=Experiments(search_raw_query=True)))
    raw.record("u", "What is the Great Wall of China built of?", "Stone.")
    last = raw.select("u", "How long is it?").search_vectors[-1]
    assert np.allclose(last, emb.encode(["How long is it?"])[0])


class _TextOnly:
    """A knowledge base with ``search(text, k)`` only, recording what it was asked."""

    def __init__(self, inner: FaissKnowledgeBase) -> None:
        self.inner, self.searched = inner, list[str]()

    def search(self, query: str, k: int) -> list[Passage]:
        self.searched.append(query)
        return self.inner.search(query, k)


@pytest.mark.parametrize("variants", [1, 2])
def test_a_text_knowledge_base_is_searched_once_and_reranked_inside_each_thread(
    variants: int,
) -> None:
    emb = HashingEmbedder()
    kb = _TextOnly(FaissKnowledgeBase(KB, emb))
    rag = DHRAG(kb, embedder=emb, settings=Settings(threads=Threads(thread_variants=variants)))
    for q, a in [("What is the Great Wall of China built of?", "Stone, brick and earth."),
                 ("Where do guinea pigs sleep in the wild?", "In burrows.")]:
        rag.record("u", q, a, selection=rag.select("u", q))
    kb.searched.clear()
    sel = rag.select("u", "Tell me more")
    assert kb.searched == [sel.rewritten_query]  # one search, by the rewrite in T*
    assert len(sel.search_vectors) == variants  # its candidates ranked by each thread's query


def test_select_then_record_updates_history_and_traces(rag: DHRAG) -> None:
    s1 = rag.select("u", "What is the Great Wall of China built of?")
    assert s1.history == () and s1.rewritten_query == s1.query
    assert s1.context[0].passage.id == "w1" and s1.context[0].source == "kb"
    r = rag.record("u", s1.query, "Stone, brick and earth.", selection=s1)
    assert [p.id for p in r.turn.passages] == [p.id for p in s1.passages]
    s2 = rag.select("u", "How long is it?")
    assert s2.history and s2.history[0].turn.query == s1.query
    assert "wall" in s2.rewritten_query.lower() and s2.rewritten_query.startswith("How long")
    # the rewritten text retrieved it; a bag-of-words fake ranks "A long bond" by "long" too
    assert "w2" in [c.passage.id for c in s2.context[:2]], "completed from history"
    assert s2.context[0].source == "kb" and s2.history[0].via
    trace = s2.trace()
    assert json.dumps(trace) and {"source", "id", "weight"} <= set(trace[0])


@pytest.mark.parametrize("rewrite_vector", [False, True])
def test_text_path_searches_the_rewrite_and_ranks_by_the_expanded_vector(
    rewrite_vector: bool,
) -> None:
    emb = HashingEmbedder()
    calls: list[tuple[str, int]] = []

    class Spy(TextOnly):
        def search(self, query: str, k: int) -> list[Passage]:
            calls.append((query, k))
            return super().search(query, k)

    # vectors alone rank; the history's pull weak enough that the base vector decides
    rag = DHRAG(Spy(FaissKnowledgeBase(KB, emb)), embedder=emb,
                settings=Settings(retrieval=Retrieval(text_k=5, follow_up_expansion=0.3),
                                  integration=Integration(lexical_weight=0.0),
                                  experiments=Experiments(rewrite_vector=rewrite_vector)))
    s1 = rag.select("u", "What is the Great Wall of China built of?")
    rag.record("u", s1.query, "Stone, brick and earth.", selection=s1)
    s2 = rag.select("u", "How long is it?")
    assert s2.rewritten_query != s2.query and calls[-1] == (s2.rewritten_query, 5)
    base = rag.history.calibrate(emb.encode([s2.rewritten_query if rewrite_vector
                                             else s2.query])[0])
    cfg = rag.settings
    # "How long is it?" names nothing and stays in the latest thread: follow_up_expansion
    expected = rag.history.calibration.invert(expand_vector(
        base, s2.history, cfg.retrieval.follow_up_expansion,
        lambda t: topic_vector(t, cfg.tree.topic_answer_weight, cfg.tree.topic_passage_weight),
        cfg.retrieval.expansion_weights == "share"))
    np.testing.assert_allclose(s2.search_vector, expected, atol=1e-6)
    kb_items = [c for c in s2.context if c.source == "kb"]
    sims = [c.similarity for c in kb_items]
    assert sims == sorted(sims, reverse=True), "candidates re-ranked by the expanded vector"
    assert (s2.context[0].passage.id == "w2") == rewrite_vector  # raw "long": the bond first


def test_select_and_record_report_their_stage_timings(rag: DHRAG) -> None:
    s1 = rag.select("u", "What is the Great Wall of China built of?")
    stages = {"encode_s", "history_s", "rewrite_s", "expand_s", "kb_s", "integrate_s"}
    assert set(s1.timings) == stages and all(v >= 0 for v in s1.timings.values())
    r = rag.record("u", s1.query, "Stone, brick and earth.", selection=s1)
    assert set(r.timings) == {"encode_s", "update_s"} and r.timings["update_s"] > 0
    assert dataclasses.replace(s1, timings={"x": 1.0}) == s1


def test_without_history_the_follow_up_misses(rag: DHRAG) -> None:
    raw = DHRAG(rag.knowledge, embedder=rag.history.embedder,
                settings=Settings(ablations=Ablations(use_rewrite=False)))
    s1 = raw.select("u", "What is the Great Wall of China built of?")
    raw.record("u", s1.query, "Stone, brick and earth.", selection=s1)
    assert raw.select("u", "How long is it?").context[0].passage.id == "b2"


def test_sessions_do_not_mix_and_reset_forgets(rag: DHRAG) -> None:
    s = rag.select("a", "guinea pigs in the wild")
    rag.record("a", s.query, "In burrows.", selection=s)
    assert rag.select("b", "How long is it?").history == ()
    with pytest.raises(ValueError, match="selection belongs"):
        rag.record("b", s.query, "x", selection=s)
    rag.reset("a")
    assert rag.history.size("a") == 0


def test_bad_arguments(rag: DHRAG) -> None:
    with pytest.raises(ValueError, match="query"):
        rag.select("u", "   ")
    with pytest.raises(ValueError, match="k must be"):
        rag.select("u", "ok", k=0)
    with pytest.raises(TypeError, match="knowledge"):
        DHRAG(object(), embedder=HashingEmbedder())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="integration_matrix"):
        DHRAG(rag.knowledge, embedder=HashingEmbedder(), integration_matrix=np.eye(3))
    with pytest.raises(ValueError, match="text_k"):
        Settings(retrieval=Retrieval(text_k=0))
    with pytest.raises(TypeError, match="text_k"):
        Settings(retrieval=Retrieval(text_k=2.5))  # type: ignore[arg-type]


async def test_async_twins_run_concurrently_without_mixing(rag: DHRAG) -> None:
    async def converse(user: str, first: str) -> tuple[str, str]:
        s = await rag.aselect(user, first)
        await rag.arecord(user, first, "ok", selection=s)
        s2 = await rag.aselect(user, "tell me more")
        return user, s2.history[0].turn.query

    results = await asyncio.gather(*(
        converse(f"user{i}", q) for i, q in
        enumerate(["guinea pigs as pets", "great wall length", "bond coupons"] * 3)
    ))
    for user, seen in results:
        assert seen == ["guinea pigs as pets", "great wall length", "bond coupons"][
            int(user[4:]) % 3]


def test_light_rewriter_keeps_the_query_and_adds_missing_terms(rag: DHRAG) -> None:
    s = rag.select("u", "Great Wall of China materials")
    rag.record("u", s.query, "Stone and brick.", selection=s)
    hist = rag.select("u", "how long is it").history
    rw = LightRewriter(max_terms=3, mode="append").rewrite("how long is it", hist)
    assert rw.text.startswith("how long is it") and 0 < len(rw.added) <= 3
    assert all(w not in ("how", "long") for w in rw.added)


@pytest.mark.model
def test_real_conversation_topic_switch_and_return_selects_the_right_turns() -> None:
    data = json.loads((Path(__file__).parent / "fixtures" / "mtrag_two_topics.json").read_text())
    emb = MiniLMEmbedder()
    kb = FaissKnowledgeBase([Passage(t["answer"], id=f"{k}{i}") for k in ("great_wall",
                             "berlin_wall") for i, t in enumerate(data[k])], emb)
    rag = DHRAG(kb, embedder=emb)
    ids: dict[str, list[str]] = {"great_wall": [], "berlin_wall": []}
    for topic, turns in (("great_wall", data["great_wall"][:2]),
                         ("berlin_wall", data["berlin_wall"][:3])):
        for t in turns:
            sel = rag.select("u", t["question"])
            ids[topic].append(rag.record("u", t["question"], t["answer"],
                                         selection=sel).turn.turn_id)
    back = rag.select("u", "Going back to the Great Wall of China: who was the enemy?")
    assert back.history[0].turn.turn_id in ids["great_wall"]
    # and an elliptical follow-up right after the switch stays on the new topic
    follow = rag.select("u", "How did people try to escape?")
    assert follow.history[0].turn.turn_id in ids["berlin_wall"]


@pytest.mark.parametrize("on", [True, False])
def test_use_integration_merges_history_passages_into_the_context(on: bool) -> None:
    emb = HashingEmbedder()
    # thread scores: on hashing vectors the fitted decision reads this switch as a new topic
    rag = DHRAG(FaissKnowledgeBase(KB, emb), embedder=emb,
                settings=Settings(threads=Threads(thread_decision="scores"),
                                  ablations=Ablations(use_integration=on)))
    care = Passage("Guinea pigs need vitamin C every day, from peppers or kale.", id="care")
    sel = rag.select("u", "What do guinea pigs need every day?")
    rag.record("u", sel.query, "Vitamin C.", passages=[care])
    back = rag.select("u", "Which guinea pig vitamin every day?")
    sources = {item.passage.key: item.source for item in back.context}
    assert (sources.get("care") == "history") is on
    assert on or set(sources.values()) == {"kb"}


def test_text_only_passages_are_encoded_once_per_conversation() -> None:
    seen: list[str] = []

    class Counting(HashingEmbedder):
        def encode(self, texts):  # type: ignore[no-untyped-def]
            seen.extend(texts)
            return super().encode(texts)

    emb = Counting()
    rag = DHRAG(TextOnly(FaissKnowledgeBase(KB, HashingEmbedder())), embedder=emb)
    for q in ["Great Wall of China materials", "Great Wall of China length"]:
        s = rag.select("u", q)
        rag.record("u", q, "ok", selection=s)
    passage_texts = {p.text for p in KB}
    encoded = [t for t in seen if t in passage_texts]
    assert len(encoded) == len(set(encoded)), "a passage is embedded at most once"


def test_passage_vector_cache_is_safe_across_threads() -> None:
    """16 threads over a small LRU: a key evicted between another thread's lookup and its
    ``move_to_end`` raised ``KeyError`` (issue 18)."""
    import random
    import sys
    import threading
    import time
    from collections import OrderedDict

    class Slow(OrderedDict[str, np.ndarray]):
        """Yields to other threads right after a lookup, where the race was."""

        def get(self, key, default=None):  # type: ignore[no-untyped-def, override]
            found = super().get(key, default)
            time.sleep(0.0002)
            return found

    emb = HashingEmbedder(64)
    rag = DHRAG(TextOnly(FaissKnowledgeBase(KB, emb)), embedder=emb,
                settings=Settings(limits=Limits(vector_cache_size=6)))
    rag._kb._vector_cache = Slow()
    texts = [Passage(text=f"passage number {i} about walls", id=f"p{i}") for i in range(8)]
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(60):
                batch = rng.sample(texts, 4)
                got = rag._kb.passage_vectors(batch)
                assert len(got) == 4
        except BaseException as exc:  # collected for the assertion
            errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors, repr(errors[:3])
    assert len(rag._kb._vector_cache) <= 6


# -- pending selections and async members (issue 17) ----------------------------------------


def test_record_without_selection_stores_the_pending_selections_passages(rag: DHRAG) -> None:
    sel = rag.select("alice", "What is the Great Wall built of?")
    assert rag.pending("alice") is sel and rag.pending("alice", "other?") is None
    rag.record("alice", "What is the Great Wall built of?", "Stone and brick.")
    (turn,) = rag.history.turns("alice")
    assert [p.id for p in turn.passages] == [p.id for p in sel.passages] and turn.passages
    assert rag.pending("alice") is None


def test_recording_another_query_leaves_the_pending_selection(rag: DHRAG) -> None:
    sel = rag.select("alice", "What is the Great Wall built of?")
    rag.select("bob", "Do guinea pigs dig?")
    rag.record("alice", "Something else", "ok")  # e.g. a concurrent turn of the session
    (turn,) = rag.history.turns("alice")
    assert turn.passages == () and rag.pending("alice") is sel  # its turn still to come
    rag.record("alice", sel.query, "Stone.")
    assert [p.id for p in rag.history.turns("alice")[-1].passages] == [
        p.id for p in sel.passages]
    assert rag.pending("bob", "Do guinea pigs dig?") is not None  # other sessions kept
    rag.reset("bob")
    assert rag.pending("bob") is None


def test_failed_record_keeps_the_pending_selection(rag: DHRAG) -> None:
    sel = rag.select("alice", "What is the Great Wall built of?")
    with pytest.raises(TypeError):
        rag.record("alice", sel.query, None)  # type: ignore[arg-type]
    assert rag.pending("alice") is sel


def test_pending_selections_are_bounded() -> None:
    emb = HashingEmbedder()
    rag = DHRAG(FaissKnowledgeBase(KB, emb), embedder=emb,
                settings=Settings(limits=Limits(max_pending=2)))
    for sid in ("a", "b", "c"):
        rag.select(sid, "wall")
    assert rag.pending("a") is None and rag.pending("c") is not None
    with pytest.raises(ValueError, match="max_pending"):
        Limits(max_pending=0)


class AsyncParts:
    """A vector knowledge base and a rewriter whose async members must be awaited."""

    def __init__(self, kb: FaissKnowledgeBase) -> None:
        self.kb = kb
        self.calls: list[str] = []

    def search(self, query: str, k: int) -> list[Passage]:
        raise AssertionError("text search used")

    def search_vectors(self, vectors: np.ndarray, k: int) -> list[list[Passage]]:
        raise AssertionError("sync search used under aselect")

    async def asearch_vectors(self, vectors: np.ndarray, k: int) -> list[list[Passage]]:
        self.calls.append("asearch_vectors")
        return self.kb.search_vectors(vectors, k)

    def rewrite(self, query: str, history: object) -> object:
        raise AssertionError("sync rewrite used under aselect")

    async def arewrite(self, query: str, history: object) -> object:
        from dhrag_core import Rewrite

        self.calls.append("arewrite")
        return Rewrite(query + " (great wall)")


def test_aselect_awaits_the_async_members() -> None:
    emb = HashingEmbedder()
    parts = AsyncParts(FaissKnowledgeBase(KB, emb))
    rag = DHRAG(parts, embedder=emb, rewriter=parts)  # type: ignore[arg-type]
    rag.record("alice", "What is the Great Wall built of?", "Stone.")

    async def main() -> None:
        sel = await rag.aselect("alice", "How long is it?")
        assert sel.rewritten_query == "How long is it? (great wall)"
        assert rag.pending("alice", "How long is it?") is sel
        await rag.arecord("alice", "How long is it?", "21,196 km.")
        assert [p.id for p in rag.history.turns("alice")[-1].passages] == [
            p.id for p in sel.passages]

    asyncio.run(main())
    assert parts.calls == ["arewrite", "asearch_vectors"]


class _RowCounter:
    """A vector knowledge base that records how many query rows each search had."""

    def __init__(self, inner: FaissKnowledgeBase) -> None:
        self.inner, self.rows = inner, list[int]()

    def search(self, query: str, k: int) -> list[Passage]:
        return self.inner.search(query, k)

    def search_vectors(self, vectors: np.ndarray, k: int) -> list[list[Passage]]:
        self.rows.append(len(vectors))
        return self.inner.search_vectors(vectors, k)


def test_the_clarity_gate_ranks_a_clear_query_by_itself_and_expands_the_others() -> None:
    emb = HashingEmbedder()
    clear = "Guinea pigs are popular pets and live five to seven years."  # a passage verbatim

    def engine(threshold: float | None) -> tuple[DHRAG, _RowCounter]:
        kb = _RowCounter(FaissKnowledgeBase(KB, emb))
        # thread scores: the fitted decision gives a clear new question no history at all
        rag = DHRAG(kb, embedder=emb, settings=Settings(
            threads=Threads(thread_variants=1, thread_decision="scores"),
            retrieval=Retrieval(clarity_threshold=threshold)))
        rag.record("u", "What is the Great Wall of China built of?", "Stone, brick and earth.")
        return rag, kb

    gated, kb = engine(0.9)
    sel = gated.select("u", clear)
    qv = emb.encode([clear])[0]
    assert kb.rows == [1], "no further search: the expanded query's candidates"
    assert sel.clarity == pytest.approx(1.0, abs=1e-5) and sel.gated
    assert len(sel.search_vectors) == 1
    assert np.allclose(sel.search_vector, qv)
    raw = FaissKnowledgeBase(KB, emb).search_vectors(qv[None, :], 10)[0]
    assert [c.passage.id for c in sel.context] == [p.id for p in raw]
    assert sel.history, "the history is still selected; it only does not move the search"

    vague = gated.select("u", "How long is it?")
    assert vague.clarity is not None and vague.clarity < 0.9 and not vague.gated
    assert not np.allclose(vague.search_vector, emb.encode(["How long is it?"])[0])

    ungated, kb = engine(None)
    sel = ungated.select("u", clear)
    assert sel.clarity is None
    assert not np.allclose(sel.search_vector, qv), "without the gate the query is expanded"


def test_the_engine_shares_the_knowledge_bases_embedder_and_checks_its_dimension() -> None:
    emb = HashingEmbedder()
    kb = FaissKnowledgeBase(KB, emb)
    assert DHRAG(kb).history.embedder is emb
    with pytest.raises(ValueError, match="256 dimensions but the embedder gives 128"):
        DHRAG(kb, embedder=HashingEmbedder(128))
    with pytest.raises(ValueError, match=r"shape \(n, 256\)"):
        kb.search_vectors(np.ones((1, 128), dtype=np.float32), 2)
    with pytest.raises(TypeError, match="wrap it"):
        FaissKnowledgeBase("hello world", emb)  # type: ignore[arg-type]


class _Returns:
    """A user's knowledge base that returns ``found`` whatever it is asked."""

    def __init__(self, found: object) -> None:
        self.found = found

    def search(self, query: str, k: int) -> object:
        return self.found

    async def asearch(self, query: str, k: int) -> object:
        return self.found


@pytest.mark.parametrize("found, says", [
    (["a plain string"], "item 0 is str"),
    ([{"text": "a dict"}], "item 0 is dict"),
    (None, "got NoneType"),
    ([Passage(text=None)], "item 0 has text of type NoneType"),  # type: ignore[arg-type]
])
def test_a_knowledge_base_returning_the_wrong_types_is_named_and_loses_no_history(
        tmp_path: Path, found: object, says: str) -> None:
    emb = HashingEmbedder()
    store = f"sqlite:///{tmp_path / 'h.db'}"
    good = DHRAG(FaissKnowledgeBase(KB, emb), store=store)
    good.record("u", "How long is the Great Wall?", "21,196 km.",
                selection=good.select("u", "How long is the Great Wall?"))
    bad = DHRAG(_Returns(found), embedder=emb, store=store)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"search\(query, k\) must return a list of "
                                        r"dhrag_core.Passage.*" + says):
        bad.select("u", "Who built it?")
    with pytest.raises(TypeError, match=r"asearch\(query, k\) must return"):
        asyncio.run(bad.aselect("u", "Who built it?"))
    assert [t.query for t in good.history.turns("u")] == ["How long is the Great Wall?"]


def test_a_knowledge_base_may_return_any_iterable_of_passages() -> None:
    emb = HashingEmbedder()
    inner = FaissKnowledgeBase(KB, emb)

    class Yields:
        def search(self, query: str, k: int) -> Iterator[Passage]:
            yield from inner.search(query, k)

    sel = DHRAG(Yields(), embedder=emb).select("u", "How long is the Great Wall?")
    assert sel.context[0].passage.id == "w2"


def test_search_vectors_must_return_one_list_per_row() -> None:
    emb = HashingEmbedder()
    inner = FaissKnowledgeBase(KB, emb)

    class OneRowShort:
        embedder = emb

        def search(self, query: str, k: int) -> list[Passage]:
            return inner.search(query, k)

        def search_vectors(self, vectors: np.ndarray, k: int) -> list[list[Passage]]:
            return inner.search_vectors(vectors, k)[:-1]

    with pytest.raises(TypeError, match="per query row; asked with 1, got list of length 0"):
        DHRAG(OneRowShort()).select("u", "How long is the Great Wall?")


def test_a_store_that_is_no_store_is_refused_at_construction() -> None:
    for store in (123, ["x"], object()):
        with pytest.raises(TypeError, match=r"store must be a URL .* or a HistoryStore"):
            DHRAG(FaissKnowledgeBase(KB, HashingEmbedder()), store=store)  # type: ignore[arg-type]


def test_a_selection_made_for_another_query_is_refused_and_stays_pending(rag: DHRAG) -> None:
    sel = rag.select("u", "How long is the Great Wall?")
    with pytest.raises(ValueError, match="made for the query 'How long is the Great Wall"):
        rag.record("u", "Who built it?", "Emperors.", selection=sel)
    assert rag.history.turns("u") == []
    assert rag.pending("u") is sel
    rag.record("u", sel.query, "21,196 km.", selection=sel)
    assert [t.query for t in rag.history.turns("u")] == [sel.query]


def test_word_overlap_weighs_the_words_that_tell_candidates_apart() -> None:
    texts = ["The tower height was calculated in 1889.", "The tower is in Paris.",
             "The tower is in Paris."]
    got = word_overlap("How was the tower height calculated?", texts)
    assert got.shape == (3,) and got[0] == pytest.approx(1.0)
    # "tower" is in every candidate: it counts least, so the second holds less than a third
    assert 0 < got[1] == got[2] < 1 / 3
    assert not word_overlap("What is it?", texts).any()  # no content word: no evidence
    assert word_overlap("tower", []).shape == (0,)


def test_length_norm_takes_away_what_length_alone_earns() -> None:
    short = "The tower height was calculated in 1889."
    long = short + " " + " ".join(f"filler{i}" for i in range(60))
    texts = [short, long, "The bridge is in Paris."]
    plain = word_overlap("How was the tower height calculated?", texts)
    assert plain[0] == plain[1]  # the same words held, whatever the length
    normed = word_overlap("How was the tower height calculated?", texts, 0.75)
    assert normed[0] > plain[0] and normed[1] < plain[1]
    assert np.array_equal(word_overlap("tower", texts, 0.0), word_overlap("tower", texts))
    with pytest.raises(ValueError, match="length_norm"):
        word_overlap("tower", texts, 1.5)


@pytest.mark.parametrize("norm", [0.0, 1.0])
def test_lexical_length_norm_reaches_the_ranking(norm: float) -> None:
    emb = HashingEmbedder()
    words = "guinea pig diet hay vitamin"
    long = Passage(words + " " + " ".join(f"word{i}" for i in range(200)), id="long")
    short = Passage(words + " grass", id="short")
    rag = DHRAG(FaissKnowledgeBase([long, short], emb), embedder=emb,
                settings=Settings(integration=Integration(lexical_weight=5.0),
                                  experiments=Experiments(lexical_length_norm=norm)))
    sel = rag.select("u", "what guinea pig diet hay vitamin is best")
    lexical = {c.passage.id: c.score for c in sel.context}
    gap = lexical["short"] - lexical["long"]
    plain = DHRAG(FaissKnowledgeBase([long, short], emb), embedder=emb,
                  settings=Settings(integration=Integration(lexical_weight=5.0))).select(
        "u", "what guinea pig diet hay vitamin is best").context
    base_gap = {c.passage.id: c.score for c in plain}
    assert (gap > base_gap["short"] - base_gap["long"] + 1.0) is bool(norm)


def test_held_words_finds_what_tokenising_finds() -> None:
    texts = [p.text for p in KB] + [
        "Buses, bus stops and classes; the class's glasses. Cats, a cat, CATS!",
        "İstanbul's 1099 forms (tax1099) and her hers; rates rate-based RATE",
        "long-term longer belong LONG_run s ss sss",
        "It's Obama\u2019s; I'd say don't, we'll, can't; vitamin d's role, the 're' prefix, m",
    ]
    queries = ["How long is the bus to class?", "cats and glasses", "her 1099 tax rate",
               "Istanbul forms", "What is it?", "s ss sss runs run", "vitamin d obama re",
               "don t s d ll m ca"]
    for q in queries:
        words = token_set(q)
        for t in texts:
            assert held_words(words, t) == words & token_set(t), (q, t)


def test_held_words_agrees_with_tokenising_around_apostrophes() -> None:
    import random

    q = "\u2019"  # the typographic apostrophe
    pieces = ["it", "'s", q + "s", "don", "'t", "n't", "n" + q + "t", "n", "ca", "wo", "sha",
              "need", "s", "t", "re", "'re", "ve", "'ve", "ll", "'ll", "d", "'d", "m", "'", q, "o",
              "brien", "1990", "x", " ", " ", "-", "."]
    words = ["it", "s", "t", "don", "do", "n", "ca", "can", "wo", "sha", "need", "needn",
             "re", "ve", "ll", "d", "m", "o", "brien", "1990", "x", "obrien"]
    rng = random.Random(7)
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 8)))
        held = token_set(text)
        for w in words:
            assert (w in held_words(frozenset({w}), text)) == (w in held), (w, text)


@pytest.mark.parametrize("weight", [0.0, 1.0])
def test_lexical_weight_lets_the_questions_words_reorder_the_context(
        weight: float, lexical_kb: tuple[FaissKnowledgeBase, str]) -> None:
    kb, question = lexical_kb
    rag = DHRAG(kb, settings=Settings(integration=Integration(lexical_weight=weight)))
    top = rag.select("u", question).context[0].passage.id
    assert top == ("1" if weight else "0")


def test_follow_up_expansion_only_for_a_follow_up_in_the_latest_thread() -> None:
    """A follow-up that names nothing is expanded with ``follow_up_expansion``; a question
    that names its subject, or any question with ``use_cues=False``, with ``expansion``."""
    emb = HashingEmbedder()

    def search_vector(query: str, **changes: object) -> np.ndarray:
        # thread scores: every selected turn is shown there, so s2.history is what expands
        rag = DHRAG(FaissKnowledgeBase(KB, emb), embedder=emb,
                    settings=with_changes(Settings(), {
                        "expansion": 0.5, "follow_up_expansion": 2.0, "clarity_threshold": None,
                        "thread_decision": "scores", **changes}))
        s1 = rag.select("u", "What is the Great Wall of China built of?")
        rag.record("u", s1.query, "Stone, brick and earth.", selection=s1)
        s2 = rag.select("u", query)
        cfg = rag.settings
        held = cfg.ablations.use_cues and query == "How long is it?"
        weight = cfg.retrieval.follow_up_expansion if held else cfg.retrieval.expansion
        expected = rag.history.calibration.invert(expand_vector(
            rag.history.calibrate(emb.encode([query])[0]), s2.history, weight,
            lambda t: topic_vector(t, cfg.tree.topic_answer_weight, cfg.tree.topic_passage_weight),
            cfg.retrieval.expansion_weights == "share"))
        np.testing.assert_allclose(s2.search_vector, expected, atol=1e-6)
        return s2.search_vector

    assert not np.allclose(search_vector("How long is it?"),
                           search_vector("How long is it?", use_cues=False))
    search_vector("How long is the Great Wall of China?")
    # the weights by their share or as they are: each checked above, and not the same vector
    assert not np.allclose(search_vector("How long is it?", expansion_weights="share"),
                           search_vector("How long is it?", expansion_weights="absolute"))


def test_record_turns_checks_every_turn_before_storing_any() -> None:
    emb = HashingEmbedder()
    rag = DHRAG(FaissKnowledgeBase(KB, emb), embedder=emb)
    rag.record_turns("u", [("What is the Great Wall built of?", "Stone."), ("How long?", "")])
    assert [t.query for t in rag.history.turns("u")] == ["What is the Great Wall built of?",
                                                         "How long?"]
    for bad in ([("fine", "ok"), ("  ", "a")], [("fine", "ok"), ("q", None)]):
        with pytest.raises((ValueError, TypeError)):
            rag.record_turns("u", bad, replace_history=True)  # type: ignore[arg-type]
        assert len(rag.history.turns("u")) == 2  # kept as it was
    rag.record_turns("u", [("Where is it?", "China.")], replace_history=True)
    assert [t.query for t in rag.history.turns("u")] == ["Where is it?"]


def test_an_empty_knowledge_base_warns_when_the_engine_is_built() -> None:
    emb = HashingEmbedder()
    with pytest.warns(UserWarning, match="holds no passages"):
        DHRAG(FaissKnowledgeBase([], emb), embedder=emb)
