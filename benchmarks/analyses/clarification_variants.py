"""dhrag variants for the clarification gap of the embedder issue, as systems of the harness.

    python -m benchmarks run --split tune [--embedder mpnet --seed-npz ...] \\
        --import benchmarks.analyses.clarification_variants \\
        --systems 'interp-qa-0.2-0.2-0.5-gated-lex,dhrag,dhrag-clar-*' \\
        --out docs/results/clarification/minilm_tune

A plug-in, not a default: each variant changes one part that a clarification ("Pollution",
"what? you said it is free") may be misled by -- the passages shown with the earlier turns, in
their topic vectors and in the context -- or how the question's words are read
(docs/results/calibration/README.md).
"""

from __future__ import annotations

from benchmarks.harness.dhrag_systems import register_variants

__all__ = ["VARIANTS"]

VARIANTS: dict[str, dict[str, object]] = {
    "dhrag-clar-encode": {"answer_vector": "encode"},
    "dhrag-clar-no-passages": {"topic_passage_weight": 0.0},
    "dhrag-clar-encode-no-passages": {"answer_vector": "encode", "topic_passage_weight": 0.0},
    "dhrag-clar-no-integration": {"use_integration": False},
    "dhrag-clar-no-cues": {"use_cues": False},
}
"""System name -> the settings it changes from the defaults."""

register_variants(VARIANTS)
