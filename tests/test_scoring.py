"""The update rule's pure functions (paper eq. 13-14)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dhrag_core.algorithm import scoring


def test_relevance_clips_to_unit_interval() -> None:
    np.testing.assert_allclose(scoring.relevance([-0.5, 0.0, 0.3, 1.2, np.nan]), [0, 0, 0.3, 1, 0])


def test_recency_halves_every_half_life() -> None:
    np.testing.assert_allclose(scoring.recency([0, 4, 8], half_life_turns=4), [1.0, 0.5, 0.25])


def test_recency_combines_turn_and_time_decay() -> None:
    r = scoring.recency([2], 2.0, seconds_age=[60.0], half_life_seconds=60.0)
    assert r[0] == pytest.approx(0.25)


def test_recency_treats_negative_age_as_now() -> None:
    assert scoring.recency([-3], 2.0)[0] == 1.0


@pytest.mark.parametrize("bad", [0.0, -1.0])
def test_recency_rejects_non_positive_half_life(bad: float) -> None:
    with pytest.raises(ValueError, match="half_life_turns"):
        scoring.recency([1], bad)


@given(
    rel=st.floats(0, 1), rec=st.floats(0, 1), alpha=st.floats(0, 1),
)
def test_combined_weight_is_convex_mix(rel: float, rec: float, alpha: float) -> None:
    w = float(scoring.combined_weight(rel, rec, alpha))
    assert min(rel, rec) - 1e-12 <= w <= max(rel, rec) + 1e-12
    assert float(scoring.combined_weight(rel, rec, 1.0)) == pytest.approx(rel)
    assert float(scoring.combined_weight(rel, rec, 0.0)) == pytest.approx(rec)


@given(a=st.floats(0, 1000), b=st.floats(0, 1000), h=st.floats(0.1, 100))
def test_recency_is_monotone_in_age(a: float, b: float, h: float) -> None:
    ra, rb = scoring.recency([a, b], h)
    if a <= b:
        assert ra >= rb
    assert 0.0 <= ra <= 1.0 and math.isfinite(ra)


def test_combined_weight_rejects_alpha_outside_unit_interval() -> None:
    with pytest.raises(ValueError, match="alpha"):
        scoring.combined_weight(0.5, 0.5, 1.5)


def test_lowest_weights_picks_smallest_and_older_on_ties() -> None:
    assert scoring.lowest_weights([0.5, 0.1, 0.9, 0.1], 2).tolist() == [1, 3]
    assert scoring.lowest_weights([0.2, 0.2, 0.2], 1).tolist() == [0]
    assert scoring.lowest_weights([0.3], 0).tolist() == []
    assert scoring.lowest_weights([0.3, 0.1], 5).tolist() == [0, 1]


@given(st.lists(st.floats(0, 1), min_size=1, max_size=50), st.integers(0, 60))
def test_lowest_weights_never_keeps_a_lower_item_than_it_drops(w: list[float], n: int) -> None:
    drop = set(scoring.lowest_weights(w, n).tolist())
    assert len(drop) == min(n, len(w))
    kept = [w[i] for i in range(len(w)) if i not in drop]
    if kept and drop:
        assert max(w[i] for i in drop) <= min(kept)


def test_lowest_weights_break_ties_by_age() -> None:
    # equal weights: the lower age goes first, whatever the position
    assert scoring.lowest_weights([0.2, 0.2, 0.2, 0.9], 1, age=[7, 3, 5, 0]).tolist() == [1]
    assert scoring.lowest_weights([0.2, 0.2, 0.1], 2, age=[9, 4, 8]).tolist() == [1, 2]
