"""Information integration (paper eq. 6-7): one weighted, de-duplicated context from K and H.

Every candidate -- a knowledge-base passage or a passage shown with a selected history turn --
gets the logit ``(q^T W d + h * (b + a * u)) / tau``, where ``h`` is the history weight of the
turn it came with (0 for the knowledge base) and ``u`` how much that turn's answer drew on the
passage (cosine of answer and passage); ``w = softmax(logits)``. ``W`` starts as the identity.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from dhrag_core.algorithm.calibration import rescale
from dhrag_core.records import ContextItem, Passage, SelectedTurn, Vector

__all__ = ["Candidate", "integrate", "softmax"]


def softmax(logits: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Numerically stable softmax (empty in, empty out)."""
    x = np.asarray(logits, dtype=np.float64)
    if x.size == 0:
        return x
    with np.errstate(over="ignore"):  # a spread beyond the float range: those weights are 0
        e = np.exp(x - x.max())
    out: npt.NDArray[np.float64] = e / e.sum()
    return out


@dataclass(frozen=True)
class Candidate:
    """A passage that may enter the context, with its vector and where it came from."""

    passage: Passage
    vector: Vector
    source: str
    selected: SelectedTurn | None = None


def _answer_support(c: Candidate, answers: dict[str, Vector | None]) -> float:
    """How much the earlier answer drew on this history passage: cos(response, passage).
    ``answers`` keeps each turn's decoded answer vector for the other passages of that turn."""
    if c.selected is None:
        return 0.0
    turn = c.selected.turn
    if turn.turn_id not in answers:
        answers[turn.turn_id] = turn.response_vector
    answer = answers[turn.turn_id]
    if answer is None:
        return 0.0
    return float(np.clip(answer @ c.vector, 0.0, 1.0))


def integrate(
    query: Vector,
    candidates: Sequence[Candidate],
    k: int,
    *,
    matrix: np.ndarray | None = None,
    temperature: float = 0.05,
    history_bonus: float = 0.1,
    answer_bonus: float = 0.0,
    weighted: bool = True,
    lexical: np.ndarray | None = None,
    unrelated: float = 0.0,
) -> list[ContextItem]:
    """The ``k`` best candidates as context items, de-duplicated by passage id (or text).

    ``query`` may hold several query vectors, one per row: a candidate then scores by its best
    match among them. ``lexical`` adds a term per candidate (the question's words it holds,
    already weighted; ``lexical.word_overlap``). With ``weighted=False`` (the no-integration
    ablation) candidates are ranked by plain cosine similarity (plus ``lexical``), with no
    ``W`` and no history term. ``unrelated`` is the embedder's cosine of unrelated texts
    (``Calibration.unrelated``): similarities are rescaled (``calibration.rescale``), so that
    the other terms weigh the same for any embedder.
    """
    if not candidates:
        return []
    d = np.stack([c.vector for c in candidates]).astype(np.float32)
    queries = np.atleast_2d(query)
    sims = rescale((d @ queries.T).max(axis=1), unrelated)
    if matrix is None or not weighted:
        bilinear = sims
    else:
        bilinear = rescale((d @ (queries @ matrix).astype(np.float32).T).max(axis=1), unrelated)
    hist = np.array([c.selected.weight if c.selected is not None else 0.0 for c in candidates])
    extra = history_bonus * hist
    if answer_bonus:
        answers: dict[str, Vector | None] = {}
        used = np.array([_answer_support(c, answers) for c in candidates])
        extra = extra + answer_bonus * hist * used
    words = 0.0 if lexical is None else np.asarray(lexical, dtype=np.float32)
    logits = ((bilinear + extra if weighted else sims) + words) / temperature
    best: dict[str, int] = {}
    for i, c in enumerate(candidates):
        j = best.get(c.passage.key)
        if j is None or logits[i] > logits[j]:
            best[c.passage.key] = i
    keep = np.array(sorted(best.values()))
    weights = softmax(logits[keep])
    order = np.argsort(-weights, kind="stable")[:k]
    out = []
    for o in order:
        i = int(keep[o])
        c = candidates[i]
        passage = c.passage if c.passage.vector is not None else replace(c.passage, vector=c.vector)
        out.append(ContextItem(
            passage=passage, source=c.source, score=float(logits[i]), weight=float(weights[o]),
            similarity=float(sims[i]), turn=c.selected.turn if c.selected else None,
            selected=c.selected,
        ))
    return out
