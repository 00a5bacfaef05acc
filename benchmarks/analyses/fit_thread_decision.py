"""Fit the thread decision's constants (``dhrag_core.algorithm.topic_shift``) on human labels.

    python -m benchmarks.analyses.fit_thread_decision [--split tune] [--out FILE]

TopiOCQA's tuning half (even conversation numbers; ``benchmarks.harness.topic_selection``): at every
judged turn, the features of ``topic_shift.shift_features`` over the earlier answered turns,
their threads being the data's topic labels, and the label "the latest answered turn has this
turn's topic". A logistic regression (scikit-learn, a benchmark dependency only) gives the
weights and bias. The thresholds are read off a grid on the same half: among the settings
that keep at least ``--same`` of same-topic turns with the latest turn, those within .005 of
the most return turns right, the one that leaves the most new topics without history (it
picks a return threshold of 0.3; the engine ships 0.2, the other setting of that band, which
kept plain MTRAG's tuning half within .005: 0.3 lost .003 more there). ``drift`` (a return
inside one thread) is not fitted here: it was set on an engine replay of TopiOCQA's tuning
half (``python -m benchmarks topics``) and the 7-turn chat of ``tests/topic_chat.py``.
``--split report`` only scores the shipped constants (``topic_shift.FITTED``).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness.paths import default_cache
from benchmarks.harness.topic_selection import (
    all_texts,
    encode_cached,
    kind_of,
    load_topiocqa,
    select_conversations,
)
from dhrag_core import MiniLMEmbedder, Settings
from dhrag_core.algorithm import topic_shift
from dhrag_core.algorithm.calibration import calibrate
from dhrag_core.algorithm.discourse import is_follow_up
from dhrag_core.embedding import opening_words


@dataclass
class Case:
    kind: str
    features: np.ndarray
    stay_right: bool
    question_sims: np.ndarray
    answer_sims: np.ndarray
    threads: np.ndarray
    topics: list[str]
    here: str
    latest: int


def cases(split: str, limit: int | None = None) -> list[Case]:
    """Every judged turn of the split with an earlier answered turn, as the decision sees it
    when the threads are the topic labels."""
    settings = Settings()
    convs = select_conversations(load_topiocqa(), split, limit)
    memo = encode_cached(MiniLMEmbedder(), all_texts(convs, settings), "minilm",
                         default_cache() / "benchmarks")
    cal = calibrate(memo.inner)
    out: list[Case] = []
    for c in convs:
        topics = [t.topic for t in c.turns]
        q = cal.apply(memo.encode([t.question for t in c.turns]))
        a = cal.apply(memo.encode([opening_words(t.answer, settings.tree.answer_words)
                                   for t in c.turns]))
        words = [topic_shift.turn_words(t.question, t.answer) for t in c.turns]
        answered = [not topic_shift.is_unanswered(t.answer) for t in c.turns]
        labels = {name: i for i, name in enumerate(dict.fromkeys(topics))}
        for t, turn in enumerate(c.turns):
            kind = kind_of(topics, t)
            cand = [j for j in range(t) if answered[j]]
            if kind is None or not cand:
                continue
            qs, as_ = q[cand] @ q[t], a[cand] @ q[t]
            threads = np.array([labels[topics[j]] for j in cand])
            latest = len(cand) - 1
            f = topic_shift.shift_features(
                topic_shift.turn_words(turn.question, ""), is_follow_up(turn.question),
                topic_shift.back_reference(turn.question), qs, as_, [words[j] for j in cand],
                threads, latest, t - 1 - cand[-1])
            out.append(Case(kind, f, topics[cand[-1]] == topics[t], qs, as_, threads,
                            [topics[j] for j in cand], topics[t], latest))
    return out


def score(data: Sequence[Case], constants: topic_shift.Constants) -> dict[str, float]:
    """P@1 of the decision's first turn by kind (a new topic given nothing counts as right
    under ``new``), with the threads as the labels give them."""
    hits: dict[str, list[float]] = {"same": [], "return": [], "new": []}
    for c in data:
        first = topic_shift.decide(c.features, c.question_sims, c.answer_sims, c.threads,
                                   c.latest, constants).anchor
        if c.kind == "new":
            hits["new"].append(float(first is None))
        else:
            hits[c.kind].append(float(first is not None and c.topics[first] == c.here))
    return {k: round(float(np.mean(v)), 4) for k, v in hits.items() if v}


def fit(data: Sequence[Case], same: float) -> dict[str, Any]:
    from sklearn.linear_model import LogisticRegression

    x = np.stack([c.features for c in data])
    y = np.array([c.stay_right for c in data])
    model = LogisticRegression(C=1.0, max_iter=5000).fit(x, y)
    weights = tuple(round(float(w), 2) for w in model.coef_[0])
    bias = round(float(model.intercept_[0]), 2)
    drift = topic_shift.FITTED.drift
    grid = []
    for stay in np.arange(0.2, 0.71, 0.05):
        for back in np.arange(-0.2, 0.61, 0.1):
            c = topic_shift.Constants(weights, bias, round(float(stay), 2),
                                      round(float(back), 2), drift)
            grid.append({"stay threshold": c.stay, "return threshold": c.back,
                         **score(data, c)})
    ok = [g for g in grid if g["same"] >= same] or grid
    top = max(g["return"] for g in ok)
    best = max((g for g in ok if g["return"] >= top - 0.005),
               key=lambda g: (g["new"], g["return"]))
    return {"features": list(topic_shift.FEATURES), "weights": list(weights), "bias": bias,
            "chosen": best, "grid": grid}


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", choices=("tune", "report"), default="tune")
    ap.add_argument("--conversations", type=int, default=None)
    ap.add_argument("--same", type=float, default=0.95,
                    help="least share of same-topic turns kept with the latest turn")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    data = cases(args.split, args.conversations)
    if args.split == "tune":
        report: dict[str, Any] = fit(data, args.same)
    else:
        report = {"shipped": score(data, topic_shift.FITTED)}
    report["turns"] = {k: sum(c.kind == k for c in data) for k in ("same", "return", "new")}
    print(json.dumps({k: v for k, v in report.items() if k != "grid"}, indent=1))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
