"""The core's seams: thread and chain policies replace the engine's two thread decisions, and
no code outside the core patches a core class or reaches into its private members."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from dhrag_core import (
    DHRAG,
    NEW_CHAIN,
    FaissKnowledgeBase,
    HashingEmbedder,
    HistoryDatabase,
    SessionView,
    Settings,
    Threads,
    Turn,
    Weighting,
)
from dhrag_core.history.policy import Link
from dhrag_core.records import Vector
from tests.conftest import FakeClock

REPO = Path(__file__).resolve().parents[1]
OUTSIDE = ("benchmarks", "examples", "scripts", "langchain_dhrag", "llamaindex_dhrag")

GUINEA = [("What do guinea pigs eat?", "Guinea pigs eat hay, fresh vegetables and pellets."),
          ("How much hay do guinea pigs need each day?", "Guinea pigs need unlimited hay.")]
BONDS = [("How do government bonds pay interest?", "Bonds pay a fixed coupon twice a year."),
         ("Are bond coupons taxed?", "Bond coupons are taxed as income.")]
RETURN = "Which vegetables are safe for guinea pigs?"


class Latest:
    """Always continue the thread of the latest turn."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def order(self, view: SessionView, query: str, query_vector: Vector,
              ranked: Sequence[tuple[int, float]]) -> list[tuple[int, float]]:
        self.asked.append(query)
        assert view.latest is not None
        latest = view.chain_of(view.latest)
        return sorted(ranked, key=lambda r: r[0] != latest)


class EveryTurnAlone:
    """Every new turn starts a chain of its own."""

    def link(self, view: SessionView, turn: Turn, proposed: int | None) -> Link:
        return NEW_CHAIN


def _session(clock: FakeClock, **policies: object) -> HistoryDatabase:
    # the thread-score rule on hashing vectors: the policies replace its choice
    db = HistoryDatabase(embedder=HashingEmbedder(), clock=clock,
                         settings=Settings(weighting=Weighting(history_turns=3),
                                           threads=Threads(thread_decision="scores")),
                         **policies)  # type: ignore[arg-type]
    for q, a in GUINEA + BONDS:
        db.add("s", q, a, passages=[a])
    return db


def test_a_thread_policy_replaces_the_thread_choice_and_sees_the_question(
        clock: FakeClock) -> None:
    engine = _session(clock)
    assert {p.turn.query for p in engine.select("s", RETURN)} == {q for q, _ in GUINEA}
    policy = Latest()
    db = _session(clock, thread_policy=policy)
    assert {p.turn.query for p in db.select("s", RETURN)} <= {q for q, _ in BONDS}
    assert RETURN in policy.asked
    ranked = db.rank_threads("s", RETURN)
    assert ranked[0][0] == db.latest_thread("s")
    assert engine.rank_threads("s", RETURN)[0][0] != engine.latest_thread("s")


def test_a_chain_policy_replaces_the_linking(clock: FakeClock) -> None:
    engine = _session(clock).view("s")
    assert len(engine.chains) == 2 and len(engine) == 4
    alone = _session(clock, chain_policy=EveryTurnAlone()).view("s")
    assert len(alone.chains) == 4
    assert [alone.chain_members(c) for c in alone.chains] == [[t] for t in alone.turn_ids]


def test_a_policy_that_names_no_chain_of_the_session_is_refused(clock: FakeClock) -> None:
    class Wrong:
        def order(self, view: SessionView, query: str, query_vector: Vector,
                  ranked: Sequence[tuple[int, float]]) -> list[tuple[int, float]]:
            return [(999, 1.0)]

        def link(self, view: SessionView, turn: Turn, proposed: int | None) -> Link:
            return 999

    with pytest.raises(ValueError, match=r"Wrong\.order must return distinct chain ids"):
        _session(clock, thread_policy=Wrong())
    db = HistoryDatabase(embedder=HashingEmbedder(), chain_policy=Wrong())
    with pytest.raises(ValueError, match=r"Wrong\.link must return a chain id"):
        db.add("s", GUINEA[0][0], GUINEA[0][1])
    assert db.turns("s") == [], "nothing stored"
    with pytest.raises(TypeError, match="thread_policy"):
        HistoryDatabase(embedder=HashingEmbedder(), thread_policy=object())  # type: ignore[arg-type]


def test_the_engine_takes_policies_and_previews_without_keeping_anything(
        clock: FakeClock) -> None:
    emb = HashingEmbedder()
    kb = FaissKnowledgeBase([a for _, a in GUINEA + BONDS], emb)
    rag = DHRAG(kb, embedder=emb, clock=clock, thread_policy=Latest())
    for q, a in GUINEA + BONDS:
        rag.record("s", q, a, selection=rag.select("s", q))
    preview = rag.preview("s", RETURN, thread_variants=1)
    assert rag.pending("s") is None
    assert len(preview.search_vectors) == 1
    assert {t.turn.chain_id for t in preview.history} == {rag.history.latest_thread("s")}
    ranked = rag.rank(RETURN, preview.search_vectors[0], [p.passage for p in preview.context],
                      3)
    assert len(ranked) == 3 and ranked[0].score >= ranked[-1].score
    with pytest.raises(ValueError, match="thread_policy"):
        DHRAG(kb, history=rag.history, thread_policy=Latest())


def test_select_in_thread_selects_inside_the_thread_named(clock: FakeClock) -> None:
    db = _session(clock)
    view = db.view("s")
    bonds = view.chain_of(view.latest or "")
    assert bonds is not None
    picked = db.select_in_thread("s", RETURN, bonds)
    assert picked and {p.turn.query for p in picked} <= {q for q, _ in BONDS}
    with pytest.raises(ValueError, match="thread must be a chain id"):
        db.select_in_thread("s", RETURN, 999)


# -- no patches, no private members from outside ----------------------------------------------


def _py(folders: Sequence[str]) -> Iterator[Path]:
    for folder in folders:
        yield from sorted((REPO / folder).rglob("*.py"))


def _core_privates() -> set[str]:
    """Private members (``_name``, not dunder) the core's classes define."""
    names: set[str] = set()
    for path in _py(["dhrag_core"]):
        for cls in (n for n in ast.walk(ast.parse(path.read_text("utf-8")))
                    if isinstance(n, ast.ClassDef)):
            for node in ast.walk(cls):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(node.name)
                elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                        and node.value.id == "self" and isinstance(node.ctx, ast.Store):
                    names.add(node.attr)
    return {n for n in names if n.startswith("_") and not n.endswith("__")}


def violations(source: str, privates: set[str]) -> list[str]:
    """Where ``source`` assigns to an attribute of a class imported from the core, calls
    ``setattr`` on one, or reads a core private member of anything but ``self``/``cls``."""
    tree = ast.parse(source)
    core = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
            and (n.module or "").startswith("dhrag_core") for a in n.names}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                and isinstance(node.value, ast.Name) and node.value.id in core:
            found.append(f"line {node.lineno}: assigns {node.value.id}.{node.attr}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == "setattr" and node.args \
                and isinstance(node.args[0], ast.Name) and node.args[0].id in core:
            found.append(f"line {node.lineno}: setattr on {node.args[0].id}")
        elif isinstance(node, ast.Attribute) and node.attr in privates and not (
                isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            found.append(f"line {node.lineno}: reads .{node.attr}")
    return found


def test_no_code_outside_the_core_patches_it_or_reads_its_private_members() -> None:
    privates = _core_privates()
    assert {"_session", "_selector", "_select_in_thread", "_integrate"} <= privates
    bad = {str(p.relative_to(REPO)): v for p in _py(OUTSIDE)
           if (v := violations(p.read_text("utf-8"), privates))}
    assert not bad, f"use the core's seams (policies, view, preview, rank) instead: {bad}"


def test_the_check_finds_what_it_looks_for() -> None:
    privates = _core_privates()
    source = ("from dhrag_core.history.selection import Selector\n"
              "Selector.threads = None\n"
              "setattr(Selector, 'threads', None)\n"
              "s = db._session('x')\n"
              "self._session = 1\n")
    assert [v.split(":")[0] for v in violations(source, privates)] == [
        "line 2", "line 3", "line 4"]
    assert np.isfinite(len(privates))


def test_one_search_path_rule_for_both_adapters() -> None:
    from dhrag_core.knowledge import search_path

    assert search_path("auto", by_vector=True, same_embedder=True, needs="x") == "vector"
    assert search_path("text", by_vector=True, same_embedder=True, needs="x") == "text"
    for by_vector, same in ((True, False), (False, True), (False, False)):
        assert search_path("auto", by_vector=by_vector, same_embedder=same, needs="x") == "text"
        with pytest.raises(ValueError, match='search="vector" needs its own embeddings'):
            search_path("vector", by_vector=by_vector, same_embedder=same,
                        needs="its own embeddings")
    with pytest.raises(ValueError, match="search must be"):
        search_path("fast", by_vector=True, same_embedder=True, needs="x")  # type: ignore[arg-type]
    for adapter in ("langchain_dhrag", "llamaindex_dhrag"):
        source = (REPO / adapter / "knowledge.py").read_text("utf-8")
        assert "search_path(" in source and 'search != "text"' not in source, adapter
