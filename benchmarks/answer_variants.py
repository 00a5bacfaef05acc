"""Ways to get a stored turn's answer vector, as benchmark systems (issue 20's comparison).

``python -m benchmarks run --import benchmarks.answer_variants --systems 'dhrag,ans-*'`` replays
dhrag with each variant: ``ans-encode`` encodes the whole answer (the former default),
``ans-none`` stores no answer vector, ``ans-chars100``/``ans-chars200`` encode the answer's
first characters, ``ans-lex``/``ans-lex4``/``ans-top`` derive it from the passages shown,
weighted by the share of the answer's content words each contains (to the power 1 or 4, or
the best passage alone). ``dhrag`` itself derives it with the squared share (the default,
``Settings.answer_vector="passages"``). The variants share one encoding memo, so only their
scores are comparable with dhrag's, not their latency.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from benchmarks.dhrag_systems import DHRAGSystem
from benchmarks.systems import BenchContext, register_system
from dhrag_core import Passage, Settings
from dhrag_core.embedding import l2_normalise, tokens
from dhrag_core.history import HistoryDatabase
from dhrag_core.records import Vector

__all__ = ["VARIANTS"]

VARIANTS = ("encode", "none", "chars100", "chars200", "lex", "lex4", "top")

Encoded = tuple[Vector, Vector | None, Vector]


def _variant(db: HistoryDatabase, mode: str) -> Callable[[str, str, list[Passage],
                                                           Vector | None], Encoded]:
    base = db._encode_turn

    def encode_turn(query: str, response: str, items: list[Passage],
                    query_vector: Vector | None) -> Encoded:
        if mode == "none":
            return base(query, "", items, query_vector)
        if mode.startswith("chars"):
            return base(query, response[: int(mode[5:])], items, query_vector)
        qv, _, pv = base(query, "", items, query_vector)
        words = set(tokens(response))
        if not words or not items:
            return qv, None, pv
        w = np.array([len(words.intersection(tokens(p.text))) for p in items], dtype=np.float64)
        if mode == "lex4":
            w = w**4
        elif mode == "top":
            w = (w == w.max()).astype(np.float64) * (w.max() > 0)
        if not w.any():
            return qv, None, pv
        return qv, l2_normalise(w @ pv)[0], pv

    return encode_turn


def _factory(mode: str) -> Callable[[BenchContext], DHRAGSystem]:
    def build(ctx: BenchContext) -> DHRAGSystem:
        if mode == "encode":
            return DHRAGSystem("ans-encode", ctx, Settings(answer_vector="encode"))
        system = DHRAGSystem(f"ans-{mode}", ctx, Settings(answer_vector="encode"))
        history = system.engine.history
        history._encode_turn = _variant(history, mode)  # type: ignore[method-assign]
        return system
    return build


for _mode in VARIANTS:
    register_system(f"ans-{_mode}", _factory(_mode), description=f"dhrag, answer vector: {_mode}")
