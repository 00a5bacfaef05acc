"""dhrag with the topic-vector candidates of the embedder issue, as systems of the harness.

    python -m benchmarks run --bench benchmarks/scenarios \\
        --import benchmarks.analyses.topic_vector_candidates \\
        --systems 'last-turn,interp-qa-*-gated-lex,dhrag,dhrag-cand*' \\
        --out docs/results/topic_vector_grid

A plug-in, not a default: each candidate changes the topic vector (the question and answer,
without the passages shown: ``topic_passage_weight=0``) and how far the query moves toward it,
chosen on the tuning half with all-mpnet-base-v2 (``tune_dhrag --split tune --embedder mpnet``;
docs/results/calibration/README.md). The scenario run checks them on hand-written topic switches.
"""

from __future__ import annotations

from benchmarks.harness.dhrag_systems import register_variants

__all__ = ["CANDIDATES"]

CANDIDATES: dict[str, dict[str, float]] = {
    "dhrag-candA": {"topic_passage_weight": 0.0, "topic_answer_weight": 6.0,
                    "expansion": 0.35, "follow_up_expansion": 0.5},
    "dhrag-candB": {"topic_passage_weight": 0.0, "topic_answer_weight": 6.0,
                    "expansion": 0.35, "follow_up_expansion": 0.75},
    "dhrag-candC": {"topic_passage_weight": 0.0, "topic_answer_weight": 6.0,
                    "expansion": 0.4, "follow_up_expansion": 0.6},
}
"""System name -> the settings it changes from the defaults."""

register_variants(CANDIDATES)
