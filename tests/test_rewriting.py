"""The light rewriter on real elliptical examples: the antecedent is recovered, gating holds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dhrag_core import LightRewriter, SelectedTurn, Turn
from dhrag_core.rewriting import is_incomplete, names


def turn(i: int, query: str, response: str) -> SelectedTurn:
    t = Turn(session_id="s", turn_id=str(i), index=i, query=query, passages=(),
             response=response, timestamp=0.0, query_vector=np.zeros(4, np.float32),
             response_vector=None, passage_vectors=np.zeros((0, 4), np.float32))
    return SelectedTurn(turn=t, relevance=0.5, recency=0.8, weight=0.6, via=("recent",),
                        cluster_id=0, cluster_label="", summary=None, chain_id=0)


# the Dialogue-RAG seed's example conversation (../shared/seeds/dialogue-rag-paper.txt)
MOSQUE = [turn(0, "What is the Athar Jamad Mosque known for?",
               "It is one of the oldest and biggest mosques in Coimbatore.")]


@pytest.mark.parametrize("query", ["Who built it?", "How long did it take to build?",
                                   "And its minarets?"])
def test_pronoun_follow_ups_get_the_named_antecedent(query: str) -> None:
    out = LightRewriter().rewrite(query, MOSQUE)
    assert out.text.startswith(query)
    assert {"athar", "jamad", "mosque"} <= set(out.added), out


def test_real_mtrag_follow_up_recovers_its_topic() -> None:
    data = json.loads((Path(__file__).parent / "fixtures" / "mtrag_two_topics.json").read_text())
    first = data["berlin_wall"][2]
    history = [turn(0, first["question"], first["answer"])]
    out = LightRewriter().rewrite("How did people try to escape it?", history)
    assert "berlin" in out.added and "wall" in out.added


def test_self_contained_queries_are_left_alone() -> None:
    q = "When did the Berlin Wall come down?"
    assert not is_incomplete(q)
    assert LightRewriter().rewrite(q, MOSQUE).text == q
    assert LightRewriter(gate=False).rewrite(q, MOSQUE).text != q


def test_incompleteness_and_names() -> None:
    assert is_incomplete("Who built it?") and is_incomplete("why?")
    assert not is_incomplete("Where do guinea pigs sleep in the wild?")
    assert names("What is the Athar Jamad Mosque known for?") == {"athar", "jamad", "mosque"}
    assert names("what is the great wall") == set()


def test_no_history_no_change() -> None:
    assert LightRewriter().rewrite("Who built it?", []).text == "Who built it?"
