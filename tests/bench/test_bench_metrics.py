"""Metrics against hand-computed values, and the clustered randomisation test."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks.harness.metrics import (
    depth_bucket,
    mean_scores,
    ndcg_at_k,
    paired_randomisation_test,
    recall_at_k,
    reciprocal_rank,
    score_task,
    split_scores,
)


def test_recall_counts_gold_in_top_k() -> None:
    ranked = ["a", "x", "b", "y"]
    assert recall_at_k(ranked, {"a", "b"}, 1) == 0.5
    assert recall_at_k(ranked, {"a", "b"}, 3) == 1.0
    assert recall_at_k(ranked, {"a", "b", "c", "d"}, 10) == 0.5
    assert recall_at_k(["a", "a", "a"], {"a", "b"}, 3) == 0.5  # a repeat counts once
    assert recall_at_k(ranked, set(), 5) == 0.0


def test_reciprocal_rank_is_first_hit_within_k() -> None:
    assert reciprocal_rank(["x", "y", "a", "b"], {"a", "b"}) == pytest.approx(1 / 3)
    assert reciprocal_rank(["a"], {"a"}) == 1.0
    assert reciprocal_rank(["x", "y", "a"], {"a"}, k=2) == 0.0


def test_ndcg_matches_hand_computation() -> None:
    # DCG = 1/log2(2) + 1/log2(4) = 1.5; IDCG@3 (2 relevant) = 1 + 1/log2(3)
    assert ndcg_at_k(["a", "x", "b"], {"a", "b"}, 3) == pytest.approx(1.5 / (1 + 1 / math.log2(3)))
    # one relevant at rank 3: 1/log2(4) = 0.5; IDCG = 1
    assert ndcg_at_k(["x", "y", "a"], {"a"}, 10) == pytest.approx(0.5)
    # more relevant than k: ideal counts only k of them
    assert ndcg_at_k(["a", "b"], {"a", "b", "c"}, 2) == pytest.approx(1.0)
    assert ndcg_at_k(["a", "a"], {"a", "b"}, 2) == pytest.approx(1 / (1 + 1 / math.log2(3)))
    assert ndcg_at_k(["x"], {"a"}, 3) == 0.0


def test_metrics_reject_bad_arguments() -> None:
    with pytest.raises(ValueError, match="k must be"):
        recall_at_k(["a"], {"a"}, 0)
    with pytest.raises(TypeError):
        ndcg_at_k("abc", {"a"}, 3)


def test_depth_buckets() -> None:
    assert [depth_bucket(t) for t in (1, 2, 3, 4, 5, 12)] == ["1", "2", "3-4", "3-4", "5+", "5+"]
    with pytest.raises(ValueError):
        depth_bucket(0)


def test_score_task_and_splits() -> None:
    s1 = score_task("t1", 1, ["a", "b"], {"a"}, {"domain": "x"})
    s2 = score_task("t2", 3, ["b", "a"], {"a"}, {"domain": "y"})
    assert s1.values["MRR@10"] == 1.0 and s2.values["MRR@10"] == 0.5
    assert s2.values["R@1"] == 0.0 and s2.values["R@5"] == 1.0
    assert mean_scores([s1, s2])["MRR@10"] == 0.75 and mean_scores([s1, s2])["n"] == 2
    by_domain = split_scores([s1, s2], lambda s: s.tags.get("domain"))
    assert by_domain["x"]["MRR@10"] == 1.0 and by_domain["y"]["MRR@10"] == 0.5
    assert list(split_scores([s1, s2], lambda s: depth_bucket(s.turn))) == ["1", "3-4"]


def test_paired_randomisation_test() -> None:
    rng = np.random.default_rng(1)
    a = rng.random(200)
    assert paired_randomisation_test(a, a) == 1.0
    assert paired_randomisation_test(a + 0.2, a, n_resamples=2000) < 0.001
    noise = a + rng.normal(0, 0.01, 200)
    p1 = paired_randomisation_test(noise, a, n_resamples=2000)
    p2 = paired_randomisation_test(a, noise, n_resamples=2000)
    assert p1 == pytest.approx(p2) and p1 > 0.05
    with pytest.raises(ValueError, match="paired"):
        paired_randomisation_test([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="label every task"):
        paired_randomisation_test([1.0, 2.0], [1.0, 2.0], clusters=["a"])


def test_clustered_p_value_counts_conversations_not_replayed_turns() -> None:
    """20 conversations of 10 turns, each replayed in 3 sessions: a per-conversation effect
    with no consistent sign is significant per turn (600 'independent' tasks) but not once the
    signs flip per conversation; an effect shared by every conversation stays significant."""
    rng = np.random.default_rng(3)
    effect = rng.normal(0.0, 0.1, 20)
    effect -= effect.mean() - 0.02
    conv = np.repeat(np.arange(20), 10)
    diff = np.tile(effect[conv] + rng.normal(0, 0.01, 200), 3)
    labels = [f"c{c}" for c in np.tile(conv, 3)]
    base = rng.random(600)
    assert paired_randomisation_test(base + diff, base, n_resamples=2000) < 0.01
    assert paired_randomisation_test(base + diff, base, clusters=labels,
                                     n_resamples=2000) > 0.2
    assert paired_randomisation_test(base + 0.05 + diff / 10, base, clusters=labels,
                                     n_resamples=2000) < 0.01

