"""The vectors a question searches the knowledge base with: the question moved toward the turns
selected in its threads, by their weights, in the history's calibrated space.

One place for it, used by the engine and by the analyses that search as the engine would.
"""

from __future__ import annotations

import numpy as np

from dhrag_core.algorithm.calibration import Calibration
from dhrag_core.algorithm.hierarchy import topic_vector
from dhrag_core.algorithm.rewriting import expand_vector
from dhrag_core.history.selection import ThreadChoice
from dhrag_core.records import SelectedTurn, Turn, Vector
from dhrag_core.settings import Settings

__all__ = ["expanded", "expansion_weight", "search_vectors"]


def expansion_weight(choice: ThreadChoice, settings: Settings) -> float:
    """The history's weight in the expanded question: ``follow_up_expansion`` for a follow-up
    that names nothing and stays in the latest turn's thread (only the history says what it
    is about), else ``expansion``."""
    stays = choice.follow_up and settings.ablations.use_cues and bool(choice.threads[0]) \
        and choice.in_latest_thread
    return settings.retrieval.follow_up_expansion if stays else settings.retrieval.expansion


def expanded(centred: Vector, turns: tuple[SelectedTurn, ...] | list[SelectedTurn],
             strength: float, settings: Settings) -> Vector:
    """``centred`` (a calibrated question vector) moved toward the topic vectors of ``turns``
    by their weights (``rewriting.expand_vector``), still in the calibrated space."""

    def topic(t: Turn) -> Vector:
        return topic_vector(t, settings.tree.topic_answer_weight,
                            settings.tree.topic_passage_weight)

    return expand_vector(centred, turns, strength, topic,
                         settings.retrieval.expansion_weights == "share")


def search_vectors(query_vector: Vector, choice: ThreadChoice, settings: Settings,
                   calibration: Calibration, *, rewritten: Vector | None = None,
                   expansion: float | None = None) -> Vector:
    """The rows to search with, in the embedder's space, the expanded question first.

    Sums are taken in the calibrated space and mapped back (``Calibration.invert``), so that
    any knowledge base can be searched with them. The first row moves the question toward
    the turns selected in T* by ``expansion`` (default ``expansion_weight``); its base is
    ``rewritten`` (the rewritten question's embedding, ``rewrite_vector``) when given, else
    the question's. The question expanded inside each runner-up thread follows
    (``thread_variants``), and the raw question (``search_raw_query``): when T* is a wrong
    guess, the right thread or the question alone still ranks its passages. Without
    ``use_rewrite``: the question alone.
    """
    if not settings.ablations.use_rewrite:
        return query_vector[None, :]
    strength = expansion_weight(choice, settings) if expansion is None else expansion
    centred = calibration.apply(query_vector)
    base = centred if rewritten is None else calibration.apply(rewritten)
    threads = choice.threads
    rows = [expanded(base, threads[0], strength, settings)]
    if threads[0]:
        rows += [expanded(centred, h, settings.retrieval.expansion, settings)
                 for h in threads[1:] if h]
        if settings.experiments.search_raw_query:
            rows.append(centred)
    return calibration.invert(np.stack(rows)).astype(np.float32, copy=False)
