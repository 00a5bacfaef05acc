"""``Settings``: one frozen option object per group, every knob declared with its
description and range and checked at construction; one way to set each (the flat forms warn for
one release); and the knobs no other test exercised, each shown to change what it names."""

from __future__ import annotations

import dataclasses
import math
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

from dhrag_core import (
    DHRAG,
    Ablations,
    Experiments,
    FaissKnowledgeBase,
    FunctionEmbedder,
    HashingEmbedder,
    HistoryDatabase,
    Integration,
    Limits,
    Passage,
    Retrieval,
    Settings,
    Threads,
    Tree,
    Weighting,
)
from dhrag_core.embedding import l2_normalise
from dhrag_core.settings import GROUPS, Knob, with_changes
from tests.conftest import FakeClock

REPO = Path(__file__).resolve().parents[1]
DIM = 16
CLASSES = {"limits": Limits, "weighting": Weighting, "tree": Tree, "threads": Threads,
           "retrieval": Retrieval, "integration": Integration, "ablations": Ablations,
           "experiments": Experiments}
NEUTRAL = {"temperature", "history_bonus", "answer_bonus", "lexical_length_norm",
           "rewrite_vector", "search_raw_query"}


def test_settings_holds_one_option_object_per_group_in_order() -> None:
    assert [f.name for f in dataclasses.fields(Settings)] == list(GROUPS) == list(CLASSES)
    settings = Settings()
    for group, cls in CLASSES.items():
        assert type(getattr(settings, group)) is cls and group == cls.GROUP
        assert cls.__name__ in (Settings.__doc__ or "")
    public = [n for n in dir(settings) if not n.startswith("_")]
    assert len(public) <= 30, public


def test_every_knob_has_its_group_a_description_and_valid_values() -> None:
    knobs = Settings.knobs()
    assert [k.path for k in knobs] == [
        f"{g}.{f.name}" for g, cls in CLASSES.items() for f in dataclasses.fields(cls)]
    assert len({k.name for k in knobs}) == len(knobs), "a knob's name is unique across groups"
    for k in knobs:
        assert k.doc and k.doc[-1] in ".)" and k.valid()
        assert getattr(getattr(Settings(), k.group), k.name) == k.default
        assert f"{k.name}: " in (CLASSES[k.group].__doc__ or "")


def test_the_experiments_group_holds_exactly_the_neutral_knobs() -> None:
    assert {k.name for k in Experiments.knobs()} == NEUTRAL
    assert not NEUTRAL & {k.name for g, c in CLASSES.items() if g != "experiments"
                          for k in c.knobs()}


def test_temperature_sets_the_weights_not_the_order() -> None:
    emb = HashingEmbedder()
    kb = FaissKnowledgeBase([f"The wall number {i} is {i * 7} km long." for i in range(12)], emb)

    def context(temperature: float) -> tuple[list[str], list[float]]:
        rag = DHRAG(kb, embedder=emb,
                    settings=Settings(experiments=Experiments(temperature=temperature)))
        sel = rag.select("s", "How long is wall number 3?")
        return [c.passage.text for c in sel.context], [c.weight for c in sel.context]

    (cool, w_cool), (warm, w_warm) = context(0.05), context(5.0)
    assert cool == warm and w_cool != pytest.approx(w_warm)


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


@pytest.mark.parametrize("knob", Settings.knobs(), ids=lambda k: k.path)
def test_each_group_refuses_what_a_knob_cannot_hold_and_names_it(knob: Knob) -> None:
    cls = CLASSES[knob.group]
    for value, exc in _bad_values(knob):
        with pytest.raises(exc, match=re.escape(knob.path)):
            cls(**{knob.name: value})
        with pytest.raises(exc, match=re.escape(knob.path)):
            with_changes(Settings(), {knob.path: value})


def test_a_group_is_given_as_its_option_object() -> None:
    with pytest.raises(TypeError, match="retrieval must be a Retrieval"):
        Settings(retrieval=Limits())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"retrieval\.context_k .*limits\.max_passages"):
        Settings(retrieval=Retrieval(context_k=20), limits=Limits(max_passages=10))
    settings = Settings(retrieval=Retrieval(expansion=0.5))
    assert settings.retrieval.expansion == 0.5 and settings.retrieval.kb_k == 20
    assert dataclasses.replace(settings, tree=Tree(summary_size=4)).tree.summary_size == 4
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.retrieval.expansion = 0.3  # type: ignore[misc]
    assert hash(settings) == hash(Settings(retrieval=Retrieval(expansion=0.5)))


def test_flat_construction_and_flat_reads_warn_and_give_the_same_values() -> None:
    grouped = Settings(retrieval=Retrieval(expansion=0.5), limits=Limits(capacity=9))
    with pytest.warns(DeprecationWarning, match=r"Settings\(retrieval=Retrieval\(expansion="):
        flat = Settings(expansion=0.5, capacity=9)  # type: ignore[call-arg]
    assert flat == grouped
    with pytest.warns(DeprecationWarning, match=r"settings\.retrieval\.expansion"):
        assert flat.expansion == 0.5  # type: ignore[attr-defined]
    with pytest.warns(DeprecationWarning, match="with_changes"):
        assert Settings().with_(expansion=0.5, capacity=9) == grouped
    with pytest.raises(TypeError, match=r"unknown setting.*limits, weighting"):
        Settings(expansio=0.5)  # type: ignore[call-arg]
    with pytest.raises(AttributeError, match="expansio"):
        Settings().expansio  # type: ignore[attr-defined]  # noqa: B018
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Settings().retrieval.expansion == 0.4  # the grouped form does not warn


def test_with_changes_takes_flat_and_dotted_names_and_refuses_unknown_ones() -> None:
    base = Settings(threads=Threads(thread_switch=None))
    changed = with_changes(base, {"expansion": 0.5, "tree.summary_size": 4,
                                  "use_cues": False})
    assert changed == dataclasses.replace(
        base, retrieval=Retrieval(expansion=0.5), tree=Tree(summary_size=4),
        ablations=Ablations(use_cues=False))
    assert with_changes(base, {}) == base
    groups = ", ".join(GROUPS)
    for key in ("expansio", "tree.expansion", "nowhere.kb_k", "retrieval"):
        with pytest.raises(TypeError, match=re.escape(groups)):
            with_changes(base, {key: 1})
    with pytest.raises(TypeError, match="did you mean expansion"):
        with_changes(base, {"expansio": 1})


def test_settings_page_lists_every_knob_by_group() -> None:
    page = (REPO / "docs" / "settings.md").read_text(encoding="utf-8")
    at = -1
    for k in Settings.knobs():
        assert f"| `{k.name}` |" in page
        heading = page.index(f"`{k.group}`: `{CLASSES[k.group].__name__}`")
        assert heading >= at, "the page lists the groups in order"
        at = heading
    assert "Settings(retrieval=Retrieval(" in page


def test_the_engine_limits_are_settings_and_checked_with_them() -> None:
    emb = HashingEmbedder()
    kb = FaissKnowledgeBase(["one passage"], emb)
    rag = DHRAG(kb, embedder=emb,
                settings=Settings(limits=Limits(vector_cache_size=5, max_pending=7)))
    assert (rag.vector_cache_size, rag.max_pending) == (5, 7)
    with pytest.warns(DeprecationWarning, match=r"Limits\(max_pending=\.\.\.\)"):
        assert DHRAG(kb, embedder=emb, max_pending=3).max_pending == 3
    with pytest.raises(ValueError, match="vector_cache_size"), \
            pytest.warns(DeprecationWarning):
        DHRAG(kb, embedder=emb, vector_cache_size=-1)
    with pytest.raises(TypeError, match=r"limits\.max_pending"):
        Limits(max_pending=2.5)  # type: ignore[arg-type]


# -- the knobs no other test names, each shown to change what it names ----------------------


def unit(*components: float) -> np.ndarray:
    v = np.zeros(DIM, dtype=np.float32)
    v[: len(components)] = components
    return l2_normalise(v)[0]


def fixed(table: dict[str, np.ndarray]) -> FunctionEmbedder:
    return FunctionEmbedder(lambda texts: [table.get(t, unit(*[0.0] * 7, 1.0)) for t in texts],
                            DIM)


def test_max_query_chars_cuts_a_longer_query_at_a_word_with_one_warning() -> None:
    db = HistoryDatabase(embedder=HashingEmbedder(),
                         settings=Settings(limits=Limits(max_query_chars=20)))
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
                             settings=Settings(limits=Limits(max_passage_metadata_chars=limit)))
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
            weighting=Weighting(merge_threshold=1.0),
            tree=Tree(cluster_threshold=0.3, cluster_min_quality=min_quality),
            ablations=Ablations(calibrate=False)))
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
            weighting=Weighting(relevance_contrast=contrast),
            ablations=Ablations(use_chains=False, calibrate=False)))
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
    settings = Settings(threads=Threads(thread_decision="scores"),
                        ablations=Ablations(calibrate=False))
    db = HistoryDatabase(embedder=fixed(TABLE), clock=clock,
                         settings=with_changes(settings, changes))
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
