"""``Settings``: every field declared with its group, description and range, each checked at
construction; and the knobs no other test exercised, each shown to change what it names."""

from __future__ import annotations

import math
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

from dhrag_core import (
    DHRAG,
    FaissKnowledgeBase,
    FunctionEmbedder,
    HashingEmbedder,
    HistoryDatabase,
    Passage,
    Settings,
)
from dhrag_core.embedding import l2_normalise
from dhrag_core.settings import GROUPS, Knob
from tests.conftest import FakeClock

REPO = Path(__file__).resolve().parents[1]
DIM = 16


def test_every_field_is_a_knob_with_a_group_a_description_and_valid_values() -> None:
    knobs = Settings.knobs()
    assert [k.name for k in knobs] == [f.name for f in fields(Settings)]
    groups = [k.group for k in knobs]
    assert set(groups) == set(GROUPS)
    assert groups == sorted(groups, key=list(GROUPS).index), "fields are declared by group"
    for k in knobs:
        assert k.doc and k.doc[-1] in ".)" and k.valid()
        assert getattr(Settings(), k.name) == k.default
        assert f"{k.name}: " in (Settings.__doc__ or "")


def _bad_values(k: Knob) -> list[tuple[object, type[Exception]]]:
    if k.kind == "bool":
        return [(1, TypeError), ("yes", TypeError)]
    if k.kind == "choice":
        return [("nope", ValueError), (None, ValueError)]
    bad: list[tuple[object, type[Exception]]] = [
        ("3", TypeError), (True, TypeError),
        (math.nan, TypeError if k.kind == "int" else ValueError)]
    if not k.optional:
        bad.append((None, TypeError))
    if math.isfinite(k.low):
        bad.append((k.low - 1, ValueError))
    if math.isfinite(k.high):
        bad.append((k.high * 2 + 1, ValueError))
    if k.kind == "int":
        bad.append((max(k.low, 0) + 0.5, TypeError))
    return bad


@pytest.mark.parametrize("knob", Settings.knobs(), ids=lambda k: k.name)
def test_each_knob_refuses_what_it_cannot_hold_and_names_itself(knob: Knob) -> None:
    for value, exc in _bad_values(knob):
        with pytest.raises(exc, match=knob.name):
            Settings().with_(**{knob.name: value})


def test_settings_page_lists_every_knob() -> None:
    page = (REPO / "docs" / "settings.md").read_text(encoding="utf-8")
    for k in Settings.knobs():
        assert f"| `{k.name}` |" in page


def test_the_engine_limits_are_settings_and_checked_with_them() -> None:
    emb = HashingEmbedder()
    kb = FaissKnowledgeBase(["one passage"], emb)
    rag = DHRAG(kb, embedder=emb, settings=Settings(vector_cache_size=5, max_pending=7))
    assert (rag.vector_cache_size, rag.max_pending) == (5, 7)
    assert DHRAG(kb, embedder=emb, max_pending=3).max_pending == 3
    with pytest.raises(ValueError, match="vector_cache_size"):
        DHRAG(kb, embedder=emb, vector_cache_size=-1)
    with pytest.raises(TypeError, match="max_pending"):
        DHRAG(kb, embedder=emb, max_pending=2.5)  # type: ignore[arg-type]


# -- the knobs no other test names, each shown to change what it names ----------------------


def unit(*components: float) -> np.ndarray:
    v = np.zeros(DIM, dtype=np.float32)
    v[: len(components)] = components
    return l2_normalise(v)[0]


def fixed(table: dict[str, np.ndarray]) -> FunctionEmbedder:
    return FunctionEmbedder(lambda texts: [table.get(t, unit(*[0.0] * 7, 1.0)) for t in texts],
                            DIM)


def test_max_query_chars_cuts_a_longer_query_at_a_word_with_one_warning() -> None:
    db = HistoryDatabase(embedder=HashingEmbedder(), settings=Settings(max_query_chars=20))
    db.add("s", "twelve chars", "ok")
    with pytest.warns(UserWarning, match=r"cut from 29 .*max_query_chars.*--max-query-chars"):
        db.add("s", "how long is the wall of china", "21,196 km.")
    assert [t.query for t in db.turns("s")] == ["twelve chars", "how long is the wall"]
    with pytest.warns(UserWarning, match="cut from"):
        db.select("s", "how long is the wall of china")


def test_max_passage_metadata_chars_drops_the_largest_fields_of_a_stored_passage() -> None:
    meta = {"source": "wiki", "raw_html": "<p>" * 200}

    def stored(limit: int) -> dict[str, object]:
        db = HistoryDatabase(embedder=HashingEmbedder(),
                             settings=Settings(max_passage_metadata_chars=limit))
        db.add("s", "question", "answer", passages=[Passage("a passage", metadata=meta)])
        return dict(db.turns("s")[0].passages[0].metadata)

    assert stored(10_000)["raw_html"] == meta["raw_html"]
    small = stored(100)
    assert small["source"] == "wiki" and "raw_html" not in small


def test_cluster_min_quality_splits_a_cluster_whose_members_drift_apart() -> None:
    a, b = unit(1), unit(0.6, 0.8)  # cosine 0.6: one cluster at threshold 0.3, until split
    table = {f"q{i}": (a if i % 2 == 0 else b) for i in range(12)}

    def clusters(min_quality: float) -> int:
        db = HistoryDatabase(embedder=fixed(table), settings=Settings(
            cluster_threshold=0.3, cluster_min_quality=min_quality, calibrate=False,
            merge_threshold=1.0))
        for i in range(12):
            db.add("s", f"q{i}", "")
        return len({t.cluster_id for t in db.turns("s")})

    assert clusters(-1.0) == 1
    assert clusters(0.95) == 2


def test_relevance_contrast_sharpens_relevances_around_the_best_match() -> None:
    q = unit(0.55, 0.5, float(np.sqrt(1 - 0.55**2 - 0.5**2)))
    table = {"first": unit(1), "second": unit(0, 1), "query": q}

    def relevances(contrast: float | None) -> dict[str, float]:
        db = HistoryDatabase(embedder=fixed(table), settings=Settings(
            relevance_contrast=contrast, use_chains=False, calibrate=False))
        db.add("s", "first", "")
        db.add("s", "second", "")
        return {p.turn.query: p.relevance for p in db.select("s", "query")}

    assert relevances(None) == pytest.approx({"first": 0.55, "second": 0.5}, abs=1e-5)
    assert relevances(0.1) == pytest.approx(
        {"first": 0.55, "second": 0.5 * math.exp(-0.05 / 0.1)}, abs=1e-5)


# A session of two threads: "walls" (older), then "bonds" (latest). The query matches walls .55
# and bonds .5: which thread it continues depends on the latest thread's recency bonus.
WALLS, BONDS = unit(1), unit(0, 1)
QUERY = unit(0.55, 0.5, float(np.sqrt(1 - 0.55**2 - 0.5**2)))
TABLE = {"walls of stone": WALLS, "stone walls answer": WALLS, "bond coupons": BONDS,
         "coupon answer": BONDS, "tell me about lighthouse keepers history": QUERY,
         "How big is it?": QUERY}


def _thread_of(query: str, clock: FakeClock, **changes: object) -> set[str]:
    # the knobs of the thread score (thread_decision="scores")
    db = HistoryDatabase(embedder=fixed(TABLE), clock=clock, settings=Settings(
        calibrate=False, thread_decision="scores").with_(**changes))
    for question, answer in [("walls of stone", "stone walls answer")] * 2 + [
            ("bond coupons", "coupon answer")] * 2:
        db.add("s", question, answer)
    return {p.turn.query for p in db.select("s", query)}


def test_thread_recency_is_the_bonus_that_keeps_the_latest_thread(clock: FakeClock) -> None:
    query = "tell me about lighthouse keepers history"
    assert _thread_of(query, clock, use_cues=False) == {"bond coupons"}
    assert _thread_of(query, clock, use_cues=False, thread_recency=0.0) == {"walls of stone"}


def test_thread_half_life_sets_how_fast_that_bonus_fades(clock: FakeClock) -> None:
    query = "tell me about lighthouse keepers history"
    # .5 + .2 * 2**(-1/2) beats .55 + .2 * 2**(-3/2); with a long half-life both get ~.2
    assert _thread_of(query, clock, use_cues=False, thread_half_life=2.0) == {"bond coupons"}
    assert _thread_of(query, clock, use_cues=False, thread_half_life=1e6) == {"walls of stone"}


def test_follow_up_margin_holds_a_follow_up_in_the_latest_thread(clock: FakeClock) -> None:
    # no recency bonus: the vectors alone pick walls (.55 > .5); "How big is it?" names
    # nothing, so it stays with bonds unless walls is follow_up_margin more relevant
    assert _thread_of("How big is it?", clock, thread_recency=0.0) == {"bond coupons"}
    assert _thread_of("How big is it?", clock, thread_recency=0.0,
                      follow_up_margin=0.0) == {"walls of stone"}
    assert _thread_of("How big is it?", clock, thread_recency=0.0,
                      use_cues=False) == {"walls of stone"}
