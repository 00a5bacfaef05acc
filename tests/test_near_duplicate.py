"""The near-duplicate merge of the update rule: by vector, unless the embedder does not tell
texts apart (one vector for every text, as llama-index's ``MockEmbedding``); then by words."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest

from dhrag_core import Ablations, HashingEmbedder, HistoryDatabase, Settings
from dhrag_core.embedding import l2_normalise
from dhrag_core.records import Vector

DIM = 8


class FunctionOfText:
    """An embedder whose vector for a text is ``fn(text)``, made a unit vector."""

    def __init__(self, fn: Callable[[str], Sequence[float]]) -> None:
        self.fn = fn

    @property
    def dimension(self) -> int:
        return DIM

    def encode(self, texts: Sequence[str]) -> Vector:
        return l2_normalise(np.array([self.fn(t) for t in texts], dtype=np.float32))


def constant(text: str) -> list[float]:
    """What ``MockEmbedding`` gives: one vector whatever the text."""
    return [0.5] * DIM


def _db(fn: Callable[[str], Sequence[float]]) -> HistoryDatabase:
    # uncentred: the vectors are compared as the embedder gives them
    return HistoryDatabase(embedder=FunctionOfText(fn),
                           settings=Settings(ablations=Ablations(calibrate=False)))


def test_an_embedder_with_one_vector_for_every_text_keeps_every_turn() -> None:
    db = _db(constant)
    asked = ["Hello World!", "What is the capital of the moon?", "Where do guinea pigs sleep?"]
    results = [db.add("s", q, f"An answer to {q}") for q in asked]
    assert not any(r.merged for r in results)
    assert [t.query for t in db.turns("s")] == asked


def test_with_such_an_embedder_words_decide_what_is_a_duplicate() -> None:
    db = _db(constant)
    db.add("s", "Where do guinea pigs sleep?", "In burrows.")
    db.add("s", "How long is the Great Wall?", "21,196 km.")
    again = db.add("s", "where do Guinea pigs sleep", "In burrows.")
    assert again.merged and again.turn.merges == 1  # the same words, the same answer
    other = db.add("s", "Where do guinea pigs sleep?", "Under the hay, in hutches.")
    assert not other.merged  # the same question, another answer: vectors cannot say so
    assert db.size("s") == 3


@pytest.mark.parametrize("second", ["Who constructed the mosque?", "Who built the mosque?"])
def test_an_embedder_that_tells_texts_apart_still_merges_by_vector(second: str) -> None:
    """A rewording the embedder puts above ``merge_threshold`` (but not on the same vector)
    merges as before, and so does the same question asked again."""

    def near(text: str) -> list[float]:
        v = [float(ord(c) % 7) for c in (text + " " * DIM)[:DIM]]  # other words: far apart
        if "mosque" in text:
            v = [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
            v[1] = 0.1 if "constructed" in text else 0.0  # cosine 0.995: a near-duplicate
        return v

    db = _db(near)
    first = db.add("s", "Who built the mosque?", "In 1680.")
    db.add("s", "How long is the Great Wall?", "21,196 km.")
    again = db.add("s", second, "In 1680.")
    assert again.merged and again.turn.turn_id == first.turn.turn_id
    assert db.size("s") == 2


def test_the_hashing_embedder_still_merges_a_repeat_and_keeps_a_new_answer() -> None:
    db = HistoryDatabase(embedder=HashingEmbedder())
    a = db.add("s", "Who built the mosque?", "In 1680.", passages=["built in 1680"])
    db.add("s", "What is a bond?", "Debt.", passages=["a bond is debt"])
    b = db.add("s", "Who built the mosque?", "In 1680.", passages=["the architect"])
    assert b.merged and b.turn.turn_id == a.turn.turn_id
    c = db.add("s", "Who built the mosque?", "A completely different reply about bridges.")
    assert not c.merged and db.size("s") == 3
