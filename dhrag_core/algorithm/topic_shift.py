"""Did the question leave the topic of the latest answered turn, and for which earlier thread?

A small logistic decision over calibrated features, fitted on human topic labels (the TopiOCQA
tuning half, ``benchmarks/analyses/fit_thread_decision.py``) and shipped as constants. It reads
what the vectors alone cannot: a question that names words of another thread and none of the
current one, a back-reference ("the monument mentioned earlier"), a follow-up that names
nothing. When the question leaves, it goes back to the earlier thread it matches best, if any
matches well enough; else it starts a new topic, and no earlier turn is handed on.

Rules stand beside the fit, for what TopiOCQA (whose switches follow an entity of the
previous answer) cannot teach: a question related to no earlier turn at all starts a new topic
(``unrelated``); one that leads with a subject of its own ("and what about X?") or names one no
earlier turn holds ("when did the Berlin Wall come down?" after the Great Wall) leaves; a
follow-up that names nothing of another thread stays ("who was it built for?" after "and what
about the Great Pyramid?", however alike its wording is to an older "when was it built?"); a
question that leaves and matches no other thread goes back to an earlier turn of its own
thread when one matches well (``drift``: a thread that took in turns of two topics).

Every similarity is taken in the calibrated space (unrelated texts near 0 for any embedder),
and the word features are shares of the question's content words, so the constants do not
depend on the embedder's scale.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from dhrag_core.embedding import token_set

__all__ = [
    "FEATURES", "FITTED", "UNRELATED", "Constants", "Shift",
    "back_reference", "decide", "is_unanswered", "persons", "shift_features",
    "stay_probability",
    "turn_words", "unrelated",
]

FEATURES = (
    "question_latest",  # the question's similarity to the latest answered turn's question
    "answer_latest",  # ...to that turn's answer
    "question_thread",  # its best similarity to a question of the latest turn's thread
    "question_other",  # ...to a question of any other thread (-1: none)
    "words_latest",  # share of its content words found in the latest turn
    "words_thread",  # ...in the latest turn's thread
    "words_other",  # ...in the other threads
    "words_other_only",  # ...in the other threads and not in the current one
    "follow_up",  # it names nothing of its own (``discourse.is_follow_up``)
    "back_reference",  # "mentioned earlier", "aforementioned", "back to", ...
    "has_other",  # another thread exists
    "turns_since",  # turns since the latest answered turn (0: it is the previous turn)
)
@dataclass(frozen=True)
class Constants:
    """What the fit gives: a weight per feature, the bias, and the thresholds."""

    weights: tuple[float, ...]
    bias: float
    stay: float
    """Stay when the fitted probability of the same topic is at least this."""
    back: float
    """Leaving, go back to the best other thread when its best turn scores at least this
    (question similarity plus answer similarity); below, the question starts a new topic."""
    drift: float
    """Leaving, with no other thread scoring ``back``: go back to an earlier turn of the latest
    thread only when that turn scores at least this; else the question starts a new topic."""


FITTED = Constants(
    weights=(1.3, -2.02, 0.68, -1.3, 0.59, -1.45, 1.2, -2.0, 1.02, -2.29, 1.23, -0.43),
    bias=-0.81, stay=0.5, back=0.2, drift=0.5)
"""The constants ``benchmarks/analyses/fit_thread_decision.py`` printed; read at each call, so
an analysis may set another ``Constants`` here."""
UNRELATED = 0.2
"""Calibrated similarity below which an earlier turn tells nothing of the question."""

_BACK = re.compile(
    r"\b(?:(?:mentioned|discussed|talked\s+about|said)\s+(?:earlier|before|above|previously)|"
    r"afore-?mentioned|(?:earlier|previously|above)[\s-]mentioned|back\s+to|going\s+back|"
    r"return(?:ing)?\s+to|(?:the\s+)?original)\b", re.IGNORECASE)

_UNANSWERED = re.compile(
    r"^\W*(?:unanswerable\b|no\s+answer\b|n/?a\W*$|"
    r"(?:i'?m|i\s+am)\s+(?:sorry|afraid)\b.{0,40}\b(?:(?:do\s+not|don'?t|cannot|can'?t|could\s+"
    r"not|couldn'?t)\s+(?:have|find|know|answer|say)|no\s+(?:information|answer|idea))|"
    r"(?:sorry|unfortunately),?\s+(?:but\s+)?i\s+(?:do\s+not|don'?t|cannot|can'?t|could\s+not"
    r"|couldn'?t)\b|"
    r"i\s+(?:do\s+not|don'?t|cannot|can'?t|could\s+not|couldn'?t)\s+(?:have|find)\b|"
    r"i\s+(?:do\s+not|don'?t)\s+know\s+(?:the\s+answer|that)\b|"
    r"i\s+have\s+no\s+(?:information|answer|idea)\b|"
    r"the\s+(?:documents?|passages?|context)\s+(?:do(?:es)?\s+not|don'?t)\s+"
    r"(?:contain|provide|say|mention)\b)",
    re.IGNORECASE | re.DOTALL)


def is_unanswered(response: str) -> bool:
    """Whether a stored answer says the question went unanswered (empty, "UNANSWERABLE",
    "I'm sorry, I don't have ...", "I could not find ..."): such a turn grounds nothing, so it
    neither anchors the current topic nor is handed on as history."""
    return not response.strip() or bool(_UNANSWERED.match(response[:200]))


def back_reference(query: str) -> bool:
    """Whether the question points back to something said earlier ("the union mentioned
    earlier", "back to the tower")."""
    return bool(_BACK.search(query))


_PERSONS = {"he": "m", "him": "m", "his": "m", "himself": "m",
            "she": "f", "her": "f", "hers": "f", "herself": "f"}
_WORD = re.compile(r"[a-z]+")


def persons(text: str) -> frozenset[str]:
    """The genders of the personal pronouns in ``text`` ("m", "f"): what a "he" or "she" can
    refer back to (a thread that never spoke of a him holds no antecedent for "his books")."""
    return frozenset(_PERSONS[w] for w in _WORD.findall(text.lower()) if w in _PERSONS)


@lru_cache(maxsize=8192)
def turn_words(query: str, response: str) -> frozenset[str]:
    """A stored turn's content words (question and answer), as the word features read them."""
    return token_set(query) | token_set(response)


@dataclass(frozen=True)
class Shift:
    """The decision for one question: stay in the latest answered turn's thread, go back to
    ``thread`` (the best other one), or start a new topic (``thread`` None, not ``stay``)."""

    stay: bool
    probability: float
    thread: int | None
    score: float
    anchor: int | None = None
    """The position of the turn the question continues: the latest answered one when it
    stays, the best turn of ``thread`` when it goes back."""


def shift_features(
    words: frozenset[str], follow_up: bool, back: bool, question_sims: np.ndarray,
    answer_sims: np.ndarray, turn_words: Sequence[frozenset[str]], threads: np.ndarray,
    latest: int, turns_since: int,
) -> np.ndarray:
    """The ``FEATURES`` of a question over earlier answered turns: their question and answer
    similarities to it (calibrated), their content words, their thread labels; ``latest``
    the position of the latest answered turn."""
    n = max(len(words), 1)
    mine = threads == threads[latest]
    other = ~mine
    thread_words = frozenset().union(*(turn_words[int(i)] for i in np.flatnonzero(mine)))
    other_words = frozenset().union(*(turn_words[int(i)] for i in np.flatnonzero(other)))
    return np.array([
        question_sims[latest], answer_sims[latest], question_sims[mine].max(),
        question_sims[other].max() if other.any() else -1.0,
        len(words & turn_words[latest]) / n, len(words & thread_words) / n,
        len(words & other_words) / n, len((words & other_words) - thread_words) / n,
        float(follow_up), float(back), float(other.any()), float(turns_since),
    ], dtype=np.float64)


def stay_probability(features: np.ndarray, constants: Constants | None = None) -> float:
    """The fitted probability that the question keeps the latest answered turn's topic."""
    c = constants or FITTED
    z = float(np.dot(features, c.weights)) + c.bias
    return 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0


def unrelated(features: np.ndarray, question_sims: np.ndarray,
              answer_sims: np.ndarray) -> bool:
    """A question that leans on nothing earlier: no follow-up, no back-reference, no content
    word shared with an earlier turn, and no earlier question or answer similar to it (all
    below ``UNRELATED``): a new topic, whatever the base rate of staying."""
    f = dict(zip(FEATURES, features, strict=True))
    return (not f["follow_up"] and not f["back_reference"] and f["words_thread"] == 0
            and f["words_other"] == 0
            and max(float(question_sims.max()), float(answer_sims.max())) < UNRELATED)


def decide(features: np.ndarray, question_sims: np.ndarray, answer_sims: np.ndarray,
           threads: np.ndarray, latest: int, constants: Constants | None = None, *,
           names_subject: bool = False, held: bool = False) -> Shift:
    """Stay; go back to the best other thread (its best turn by question plus answer
    similarity) when that turn scores ``Constants.back``; else to the latest thread's best
    earlier turn (a thread that drifted) when it scores ``drift``; else start a new topic.
    ``names_subject``: the
    question leads with a subject of its own ("and what about X?"): it leaves the latest turn,
    for the earlier thread it matches or a new topic. ``held``: a follow-up that names
    nothing of another thread ("who was it built for?"): it stays, however alike its wording
    is to an older question."""
    c = constants or FITTED
    p = stay_probability(features, c)
    score = question_sims + answer_sims
    if unrelated(features, question_sims, answer_sims):
        return Shift(False, p, None, float(score.max()))
    if (p >= c.stay or held) and not names_subject:
        return Shift(True, p, int(threads[latest]), float(score[latest]), latest)
    other = threads != threads[latest]
    if other.any():
        best = int(np.argmax(np.where(other, score, -np.inf)))
        if score[best] >= c.back:
            return Shift(False, p, int(threads[best]), float(score[best]), best)
    # no other thread it returns to: the latest thread drifted, back to an earlier turn of it
    # (not for a subject of its own: "the Berlin Wall" is no return to "the Great Wall")
    earlier = np.arange(len(threads)) != latest
    if not earlier.any() or (names_subject and other.any()):
        return Shift(False, p, None, -math.inf)
    best = int(np.argmax(np.where(earlier, score, -np.inf)))
    s = float(score[best])
    if s < max(c.back, c.drift):
        return Shift(False, p, None, s)
    return Shift(False, p, int(threads[best]), s, best)
