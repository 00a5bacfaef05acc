"""Calibration: the centring map itself, and dhrag's decisions invariant to the embedder's scale.

An embedder whose cosines are ``a + (1 - a) * cos`` of MiniLM's ranks every single-vector query
as MiniLM does; with calibration dhrag must then choose the same threads, clusters, chains,
gate and top-10 at every turn. Without it (``Settings(ablations=Ablations(calibrate=False))``)
it does not: the test of invariance can fail.
"""

from __future__ import annotations

import hashlib
import json
from importlib import resources
from typing import Any

import numpy as np
import pytest

from benchmarks.harness.embedders import ShiftedEmbedder, shift
from dhrag_core import (
    DHRAG,
    Ablations,
    Calibration,
    Embedder,
    FaissKnowledgeBase,
    HashingEmbedder,
    HistoryDatabase,
    Passage,
    Settings,
    Tree,
    Weighting,
    calibrate,
    l2_normalise,
)
from dhrag_core.app.demo import DEMO_TURNS
from dhrag_core.embedding import default_embedder
from dhrag_core.records import Vector


def test_apply_then_invert_gives_back_the_embedders_vectors() -> None:
    rng = np.random.default_rng(0)
    raw = l2_normalise(rng.normal(size=(50, 16)) + 2.0)  # a strong common component
    cal = Calibration.from_vectors(raw)
    centred = cal.apply(raw)
    assert np.allclose(np.linalg.norm(centred, axis=1), 1.0, atol=1e-5)
    assert abs(float((centred @ centred.T)[np.triu_indices(50, 1)].mean())) < 0.05
    assert np.allclose(cal.invert(centred), raw, atol=1e-5)
    assert np.allclose(cal.invert(centred[3]), raw[3], atol=1e-5)  # one vector in, one out


def test_identity_changes_nothing() -> None:
    raw = l2_normalise(np.random.default_rng(1).normal(size=(5, 8)))
    cal = Calibration.identity(8)
    assert np.allclose(cal.apply(raw), raw) and np.allclose(cal.invert(raw), raw)


def test_centred_cosines_ignore_a_constant_component() -> None:
    emb = HashingEmbedder()
    texts = ["the wall was built of stone", "guinea pigs eat hay", "who built it", "how long"]
    plain = calibrate(emb).apply(emb.encode(texts))
    for a in (0.3, 0.85):
        shifted = ShiftedEmbedder(emb, a)
        moved = calibrate(shifted).apply(shifted.encode(texts))
        assert np.allclose(plain @ plain.T, moved @ moved.T, atol=1e-5)


@pytest.mark.parametrize("mean", [np.zeros((2, 3)), np.array([np.nan, 0.0]), np.ones(4)])
def test_a_bad_mean_is_refused(mean: Any) -> None:
    with pytest.raises(ValueError, match="mean"):
        Calibration(mean)


def test_history_rejects_a_calibration_of_another_dimension() -> None:
    with pytest.raises(TypeError, match="calibration"):
        HistoryDatabase(embedder=HashingEmbedder(64), calibration=Calibration.identity(8))
    emb = HashingEmbedder()
    with pytest.raises(ValueError, match="calibration"):
        DHRAG(FaissKnowledgeBase([Passage("a wall")], emb), history=HistoryDatabase(embedder=emb),
              calibration=Calibration.identity(emb.dimension))


def test_the_switch_off_means_no_centring() -> None:
    emb = HashingEmbedder()
    on = HistoryDatabase(embedder=emb).calibration
    off = HistoryDatabase(embedder=emb,
                          settings=Settings(ablations=Ablations(calibrate=False))).calibration
    assert float(on.mean @ on.mean) > 0.0
    assert float(off.mean @ off.mean) == 0.0


def test_stored_vectors_are_centred_and_passages_come_back_as_the_embedders() -> None:
    emb = HashingEmbedder()
    kb = FaissKnowledgeBase([Passage("The Great Wall is built of stone and brick.", id="w"),
                             Passage("Guinea pigs eat hay and vegetables.", id="g")], emb)
    rag = DHRAG(kb, embedder=emb)
    sel = rag.select("u", "What is the Great Wall built of?")
    turn = rag.record("u", sel.query, "Stone and brick.", selection=sel).turn
    cal = rag.history.calibration
    assert np.allclose(turn.query_vector, cal.apply(emb.encode([sel.query])[0]), atol=0.02)
    again = rag.select("u", "And how long is the Great Wall?")
    from_history = [i for i in again.context if i.source == "history"]
    for item in again.context:  # the embedder's own vector, whichever channel it came by
        assert item.passage.vector is not None
        assert float(item.passage.vector @ emb.encode([item.passage.text])[0]) > 0.98
    assert from_history or all(i.source == "kb" for i in again.context)


# -- invariance on the demo knowledge base, real MiniLM ------------------------------------------


def _demo_kb() -> tuple[list[Passage], Vector]:
    data = resources.files("dhrag_core") / "data"
    rows = [json.loads(line) for line in
            (data / "demo_kb.jsonl").read_text("utf-8").split("\n") if line.strip()]
    with (data / "demo_kb_minilm.npz").open("rb") as f:
        npz = np.load(f)
        assert str(npz["text_sha1"]) == hashlib.sha1(
            "\n".join(r["text"] for r in rows).encode()).hexdigest()
        vectors = npz["E"].astype(np.float32)
    return [Passage(r["text"], id=r["id"], title=r["title"]) for r in rows], vectors


def _trace(emb: Embedder, vectors: Vector, settings: Settings) -> list[tuple[Any, ...]]:
    """Every decision of a conversation with switches and a return, turn by turn."""
    passages, _ = _demo_kb()
    rag = DHRAG(FaissKnowledgeBase(passages, emb, vectors=vectors), embedder=emb,
                settings=settings)
    out: list[tuple[Any, ...]] = []
    for q in (*DEMO_TURNS, "What is the wall made of?", "And guinea pigs, what do they eat?"):
        sel = rag.select("s", q)
        threads = rag.history.select_threads("s", q, 3)
        added = rag.record("s", q, sel.context[0].passage.text, selection=sel)
        out.append((
            q, sel.rewritten_query, sel.gated,
            tuple(i.passage.key for i in sel.context[:10]),
            tuple(h.turn.query for h in sel.history),
            tuple(tuple(h.turn.query for h in t) for t in threads),
            added.turn.cluster_id, added.turn.chain_id, added.merged,
        ))
    final = rag.history.turns("s")
    out.append(tuple((t.query, t.cluster_id, t.chain_id) for t in final))
    out.append((rag.history.stats("s")["clusters"],))
    return out


_CASES = [Settings(), Settings(weighting=Weighting(history_turns=3),
                               tree=Tree(min_tree_turns=0, cluster_merge_every=2))]


@pytest.mark.model
@pytest.mark.parametrize("settings", _CASES, ids=["defaults", "tree"])
def test_every_decision_is_the_same_when_the_embedder_shifts_its_cosines(
    settings: Settings,
) -> None:
    emb = default_embedder()
    _, vectors = _demo_kb()
    reference = _trace(emb, vectors, settings)
    assert any(t[2] for t in reference[:-2]) and not all(t[2] for t in reference[:-2])
    assert len({t[7] for t in reference[:-2]}) > 1  # more than one thread
    for a in (0.3, 0.6, 0.85):
        assert _trace(ShiftedEmbedder(emb, a), shift(vectors, a), settings) == reference, a


@pytest.mark.model
def test_without_calibration_the_shift_changes_decisions() -> None:
    emb = default_embedder()
    _, vectors = _demo_kb()
    off = Settings(ablations=Ablations(calibrate=False))
    reference = _trace(emb, vectors, off)
    assert _trace(ShiftedEmbedder(emb, 0.6), shift(vectors, 0.6), off) != reference


def test_an_embedder_that_tells_nothing_apart_is_compared_uncentred(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from dhrag_core import FunctionEmbedder

    same = FunctionEmbedder(lambda texts: [np.eye(8)[0] for _ in texts], 8)
    with caplog.at_level("WARNING"):
        cal = calibrate(same)
    assert float(cal.mean @ cal.mean) == 0.0
    assert "nearly the same vector" in caplog.text
