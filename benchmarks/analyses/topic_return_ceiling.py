"""How far the return target of issue 53 sits from what the thread decision can reach.

    python -m benchmarks.analyses.topic_return_ceiling [--split tune|report] [--out FILE]

TopiOCQA (``benchmarks.harness.topic_selection``), every judged turn with an earlier answered turn,
the earlier turns' threads being the data's topic labels (perfect thread tracking of the
history, as ``fit_thread_decision`` sees it). P@1 on same-topic and return turns of:

- **nearest**: the earlier question most similar to this one (the issue's rule);
- **shipped decision**: ``topic_shift.decide`` with the shipped constants;
- **best threshold on the fitted probability**: the stay threshold that maximises return P@1
  while keeping same-topic P@1 at least ``--same`` (the decision's features, any threshold);
- **trees on the same features**: gradient-boosted trees (scikit-learn) fitted on the tuning
  half's features and labels, their stay threshold chosen on the split scored (an upper bound
  of a non-linear decision over these features);
- **switch oracle + nearest**: knows whether the topic is the latest answered turn's (half
  of the data's "returns" follow an unanswered turn: the latest answered one has their topic);
  if not, the nearest earlier question outside that topic;
- **switch oracle + question and answer**: the same, choosing by question plus answer
  similarity (the decision's own target score).

The two oracles bound what any stay-or-leave rule can reach with these targets: if they sit
below "nearest + .10", no switch detector reaches the issue's return target with them.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.analyses.fit_thread_decision import Case, cases
from dhrag_core.algorithm import topic_shift


def _leave(c: Case, score: np.ndarray) -> int | None:
    other = np.array([t != c.topics[c.latest] for t in c.topics])
    if not other.any():
        return None
    return int(np.argmax(np.where(other, score, -np.inf)))


def _p1(data: Sequence[Case], pick: Callable[[Case], int | None]) -> dict[str, float]:
    hits: dict[str, list[float]] = {"same": [], "return": []}
    for c in data:
        if c.kind in hits:
            first = pick(c)
            hits[c.kind].append(float(first is not None and c.topics[first] == c.here))
    return {k: round(float(np.mean(v)), 4) for k, v in hits.items()}


def _leave_or_none(c: Case) -> int | None:
    first = _leave(c, c.question_sims + c.answer_sims)
    sims = c.question_sims + c.answer_sims
    return None if first is None or sims[first] < topic_shift.FITTED.back else first


def trees(data: Sequence[Case], tune: Sequence[Case], same: float) -> dict[str, float] | None:
    """The best stay threshold (same-topic P@1 at least ``same``) of gradient-boosted trees
    fitted on ``tune``; the target on leaving as the shipped decision's."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    model = HistGradientBoostingClassifier(max_iter=300, random_state=0).fit(
        np.stack([c.features for c in tune]), np.array([c.stay_right for c in tune]))
    p = dict(zip(map(id, data), model.predict_proba(
        np.stack([c.features for c in data]))[:, 1], strict=True))
    rows = [{"stay threshold": round(float(th), 3), **_p1(data, lambda c, th=th: (
        c.latest if p[id(c)] >= th else _leave_or_none(c)))}
            for th in np.arange(0.05, 0.96, 0.025)]
    ok = [r for r in rows if r["same"] >= same]
    return max(ok, key=lambda r: r["return"]) if ok else None


def ceilings(data: Sequence[Case], same: float) -> dict[str, Any]:
    """P@1 by kind of each rule above, and the best stay threshold's."""
    fitted = topic_shift.FITTED

    def shipped(c: Case) -> int | None:
        return topic_shift.decide(c.features, c.question_sims, c.answer_sims, c.threads,
                                  c.latest).anchor

    def oracle(score: Callable[[Case], np.ndarray]) -> Callable[[Case], int | None]:
        def pick(c: Case) -> int | None:
            return c.latest if c.topics[c.latest] == c.here else _leave(c, score(c))
        return pick

    sweep = []
    for stay in np.arange(0.05, 0.96, 0.05):
        constants = topic_shift.Constants(fitted.weights, fitted.bias, round(float(stay), 2),
                                          fitted.back, fitted.drift)
        sweep.append({"stay threshold": constants.stay, **_p1(data, lambda c, k=constants: (
            topic_shift.decide(c.features, c.question_sims, c.answer_sims, c.threads,
                               c.latest, k).anchor))})
    ok = [s for s in sweep if s["same"] >= same]
    return {
        "nearest": _p1(data, lambda c: int(np.argmax(c.question_sims))),
        "shipped decision": _p1(data, shipped),
        f"best stay threshold (same >= {same})": max(ok, key=lambda s: s["return"])
        if ok else None,
        "switch oracle + nearest": _p1(data, oracle(lambda c: c.question_sims)),
        "switch oracle + question and answer": _p1(
            data, oracle(lambda c: c.question_sims + c.answer_sims)),
        "stay threshold sweep": sweep,
    }


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", choices=("tune", "report"), default="tune")
    ap.add_argument("--same", type=float, default=0.95)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    data = cases(args.split)
    tune = data if args.split == "tune" else cases("tune")
    report = {"split": args.split,
              "command": "python -m benchmarks.analyses.topic_return_ceiling "
                         + " ".join(argv if argv is not None else __import__("sys").argv[1:]),
              "turns": {k: sum(c.kind == k for c in data) for k in ("same", "return")},
              **ceilings(data, args.same),
              "trees on the same features (fit on tune)": trees(data, tune, args.same)}
    print(json.dumps({k: v for k, v in report.items() if k != "stay threshold sweep"},
                     indent=1))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
