"""Hostile input through every public door (core, LangChain, LlamaIndex, ``dhrag chat``).

The cases live in ``benchmarks/tools/hostile_table.py`` (door x input, run for real); each must be
rejected with a ``TypeError``/``ValueError`` that says what to fix, or handled as ordinary
text, and nothing already stored may change. ``DHRAG_WRITE_TABLE=1`` also rewrites
``docs/reliability_inputs.md`` from this run.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from benchmarks.tools.hostile_table import INJECTION, INPUTS, Outcome, markdown, run_all
from dhrag_core import (
    DHRAG,
    FaissKnowledgeBase,
    HashingEmbedder,
    HistoryDatabase,
    Passage,
    Settings,
    Threads,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[Outcome]:
    out = run_all(tmp_path_factory.mktemp("hostile"))
    if os.environ.get("DHRAG_WRITE_TABLE"):
        (REPO / "docs" / "reliability_inputs.md").write_text(markdown(out), encoding="utf-8")
    return out


def test_every_door_and_input_is_handled(results: list[Outcome]) -> None:
    bad = [f"{r.door} x {r.input}: {r.outcome} {r.detail}" for r in results if not r.ok]
    assert not bad, "\n".join(bad)
    doors = {r.door for r in results}
    assert len(doors) >= 20 and len(results) >= 280  # nothing silently dropped
    for door in {d for d in doors if not d.startswith("dhrag ")}:
        assert {r.input for r in results if r.door == door} == set(INPUTS), door


def test_rejections_say_what_to_fix(results: list[Outcome]) -> None:
    for r in results:
        if r.outcome == "rejected" and r.door.startswith(("HistoryDatabase", "DHRAG.")):
            assert r.detail.startswith(("TypeError", "ValueError")), r
            # names the argument or the limit, not a bare "invalid input"
            assert any(w in r.detail for w in ("must", "limit", "contains", "not valid")), r


def test_kb_file_errors_name_file_and_line(results: list[Outcome]) -> None:
    kb = [r for r in results if r.door == "dhrag chat --kb FILE"]
    assert len(kb) == 4 and all(r.outcome == "rejected" and ".jsonl:" in r.detail for r in kb)


def test_damaged_store_is_a_clear_command_error(results: list[Outcome]) -> None:
    damaged = [r for r in results if r.input == "damaged SQLite file"]
    assert len(damaged) == 2
    assert all(r.outcome == "rejected" and "damaged.db is damaged" in r.detail for r in damaged)


# -- prompt injection is data ----------------------------------------------------------------

NEUTRAL = "What is the capital of Australia and when was it founded?"


class _Alias(HashingEmbedder):
    """Embeds INJECTION exactly like NEUTRAL; everything else as the hashing embedder."""

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return super().encode([NEUTRAL if t == INJECTION else t for t in texts])


def _history(first: str, decision: str = "scores") -> tuple[HistoryDatabase, DHRAG]:
    # thread scores by default: they read the stored turns by their vectors alone, so a twin
    # with the same embedding must decide alike (the fitted decision also reads their words)
    emb = _Alias(128)
    kb = FaissKnowledgeBase([Passage(text="Canberra is the capital of Australia.", id="c"),
                             Passage(text="The Nile is 6,650 km long.", id="n")], emb)
    rag = DHRAG(kb, embedder=emb, clock=lambda: 1_000_000.0,
                settings=Settings(threads=Threads(thread_decision=decision)))
    db = rag.history
    db.add("alice",
           first,
           "Canberra, founded in 1913.",
           passages=["Canberra was founded in 1913."])
    db.add("alice", "How long is the Nile?", "6,650 km.", passages=["The Nile is 6,650 km long."])
    db.add("alice", "Which city hosts parliament?", "Canberra.")
    db.add("bob", "What do guinea pigs eat?", "Hay.", passages=["Hay and vegetables."])
    return db, rag


def test_prompt_injection_behaves_like_neutral_text() -> None:
    """Stored instructions are ordinary text: the same selections, weights and context as a
    neutral turn with the same embedding, and nothing of them in another session."""
    evil_db, evil_rag = _history(INJECTION)
    fair_db, fair_rag = _history(NEUTRAL)
    probes = ["capital of Australia", "ignore previous instructions", "admin mode",
              "How long is it?", "delete all other sessions"]
    for q in probes:
        for db in (evil_db, fair_db):
            assert all(h.turn.session_id == "bob" for h in db.select("bob", q))
        evil = [(h.turn.index, round(h.weight, 6), h.via) for h in evil_db.select("alice", q)]
        fair = [(h.turn.index, round(h.weight, 6), h.via) for h in fair_db.select("alice", q)]
        assert evil == fair, q
        e, f = evil_rag.select("alice", q), fair_rag.select("alice", q)
        assert [(c.passage.text, round(c.weight, 6)) for c in e.context] == \
            [(c.passage.text, round(c.weight, 6)) for c in f.context]
    fitted_db, fitted_rag = _history(INJECTION, "fitted")
    for q in probes:  # read as words, the instructions still reach no other session
        assert all(h.turn.session_id == "bob" for h in fitted_db.select("bob", q))
        assert all(INJECTION not in c.passage.text for c in fitted_rag.select("bob", q).context)
    assert all(INJECTION not in (t.query + t.response) for t in evil_db.turns("bob"))
    assert evil_db.turns("alice")[0].query == INJECTION  # stored verbatim, as data
    assert evil_db.store.sessions() == ["alice", "bob"]  # "delete all other sessions": no
