"""The one transcript form of selected history: order, blank answers, clipping, trace lines."""

from __future__ import annotations

import numpy as np

from dhrag_core.records import SelectedTurn, Turn
from dhrag_core.transcript import (
    clip,
    describe_selected,
    exchanges,
    format_transcript,
    in_turn_order,
)


def selected(index: int, query: str, response: str, weight: float) -> SelectedTurn:
    turn = Turn(session_id="s", turn_id=f"t{index}", index=index, query=query, passages=(),
                response=response, timestamp=0.0, query_vector=np.zeros(4, np.float32),
                response_vector=None, passage_vectors=np.zeros((0, 4), np.float32))
    return SelectedTurn(turn=turn, relevance=0.5, recency=0.25, weight=weight,
                        via=("hierarchy", "recent"), cluster_id=2, cluster_label="wall, stone",
                        summary=None, chain_id=1)


# ranked best first, as selection returns them
HISTORY = [selected(4, "How long is it?", "   ", 0.9),
           selected(1, "What is the Great Wall\nbuilt of?", "Stone and brick.", 0.7)]


def test_transcript_reads_oldest_first_and_leaves_out_blank_answers() -> None:
    assert [t.index for t in in_turn_order(HISTORY)] == [1, 4]
    assert exchanges(in_turn_order(HISTORY)) == [
        ("user", "What is the Great Wall\nbuilt of?"), ("assistant", "Stone and brick."),
        ("user", "How long is it?")]
    assert format_transcript(HISTORY, user="Human", assistant="AI") == (
        "Human: What is the Great Wall\nbuilt of?\nAI: Stone and brick.\nHuman: How long is it?")


def test_clipping_folds_white_space_and_marks_the_cut() -> None:
    assert clip("a  b\n c", 10) == "a b c"
    assert clip("stone and brick", 7) == "stone…", "no space before the ellipsis"
    assert format_transcript(HISTORY, max_chars=12).splitlines() == [
        "User: What is the…", "Assistant: Stone and b…", "User: How long is…"]


def test_trace_line_names_every_part_of_the_weight() -> None:
    assert describe_selected(HISTORY[1], query_chars=12, digits=2) == (
        "turn 2 'What is the…'  weight=0.70 (relevance=0.50 recency=0.25)  "
        "cluster 2 [wall, stone]  chain 1  via hierarchy+recent")
    assert describe_selected(HISTORY[1], query_chars=60, response_chars=5).startswith(
        "turn 2 'What is the Great Wall built of?' -> 'Ston…'  weight=0.700 ")
