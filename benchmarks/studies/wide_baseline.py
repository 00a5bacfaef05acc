"""A plug-in widening the answer-aware interpolation's grid, so that the baseline tuned on a
development set (the hand-written scenarios) is not held back by the grid's edges.

    python -m benchmarks run --bench benchmarks/scenarios \\
        --import benchmarks.studies.wide_baseline \\
        --systems 'last-turn,last-turn-lex,interp-qa-*,dhrag,dhrag-no-*,thread-oracle'

The grid was widened step by step until its best setting lay inside it on that set (the run's
JSON shows every setting's score).
"""

from __future__ import annotations

from benchmarks.harness.systems import register_answer_interpolations

__all__ = ["WIDER_GRID", "WIDE_GRID"]

WIDE_GRID = ((0.2, 0.3, 0.4, 0.5, 0.7), (0.0, 0.2, 0.3, 0.4, 0.5), (0.2, 0.3, 0.5, 0.7, 1.0))
"""Weights of the previous question, the first question and the previous answer: the first
widening, every variant (its best, 0.7 / 0.4 / 0.2 with the gate and the lexical term, lay at
two edges)."""
WIDER_GRID = ((0.7, 0.85, 1.0, 1.3), (0.2, 0.3, 0.4, 0.5, 0.7), (0.0, 0.1, 0.2, 0.3))
"""The second widening, past those edges, in the best variant only (gate and lexical term)."""

register_answer_interpolations(WIDE_GRID)
register_answer_interpolations(WIDER_GRID, variants=("-gated-lex",))
