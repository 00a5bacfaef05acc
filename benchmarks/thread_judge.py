"""Would a judge of the thread close the interleaved gap? A simulation with the data's labels.

    python -m benchmarks.thread_judge [--threads 10] [--seeds 0,1,2] [--accuracy 1,0.9,0.8]
                                      [--candidates 5] [--out results/thread_judge.json]

An analysis, not a system: what an LLM asked "which of these earlier topics does this question
continue?" could at best bring, before anyone pays for one. The real engine (defaults) replays
the interleaved MTRAG sessions. On each turn where it would hedge (a runner-up thread within
``hedge_margin`` of T*), a simulated judge is shown the ``candidates`` best chains: when none of
them is mostly the question's true thread it abstains and the engine hedges as it does today;
otherwise it names the true thread's chain with probability ``accuracy`` (else one of the other
candidates, evenly), and the engine takes that chain as T*, searches with its query alone and
files the turn in it. Draws are a hash of the query vector, so a run is deterministic. The
defaults and the thread oracle (a session per true thread) run in the same replay.
"""

from __future__ import annotations

import argparse
import json
import zlib
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.__main__ import default_cache
from benchmarks.mtrag_kb import load_with_kb
from benchmarks.systems import BenchContext
from benchmarks.thread_gap import _replay, _Truth, swapped
from dhrag_core import Settings
from dhrag_core.history.selection import Selector, hedged_threads
from dhrag_core.history.session import SessionState, Threads
from dhrag_core.records import Vector

__all__ = ["judged", "main"]

_NOT_CHOSEN = -9.0  # a relevance no hedge margin keeps


def judged(found: list[tuple[int, float]], right: set[int], settings: Settings,
           accuracy: float, candidates: int, draw: float) -> list[tuple[int, float]] | None:
    """The threads after the judge (its pick first, the others out of the hedge's reach), or
    ``None`` where it is not asked (the engine would not hedge) or abstains (no candidate is
    in ``right``). ``draw`` in [0, 1) decides whether it names the right chain."""
    if len(hedged_threads(found, settings.thread_variants, settings.hedge_margin)) < 2:
        return None
    shown = found[:candidates]
    hits = [f for f in shown if f[0] in right]
    if not hits:
        return None
    misses = [f for f in shown if f[0] not in right]
    if draw < accuracy or not misses:
        pick = hits[0]
    else:
        pick = misses[min(int((draw - accuracy) / (1 - accuracy) * len(misses)),
                          len(misses) - 1)]
    return [pick] + [(t, _NOT_CHOSEN) for t, _ in found if t != pick[0]]


@contextmanager
def _judge(truth: _Truth, accuracy: float, candidates: int,
           counts: dict[str, int]) -> Iterator[None]:
    """While open, ``Selector.threads`` follows the simulated judge."""
    original = Selector.threads
    seen: set[tuple[int, bytes, int]] = set()

    def threads(self: Selector, s: SessionState, qv: Vector) -> Threads:
        found, matches = original(self, s, qv)
        right = {t for t, _ in found if truth.majority(s, t) == truth.current}
        draw = (zlib.crc32(qv.tobytes()) % 100_000) / 100_000
        after = judged(found, right, self.settings, accuracy, candidates, draw)
        key = (id(s), qv.tobytes(), s.version)
        if key not in seen and len(found) > 1:
            seen.add(key)
            cfg = self.settings
            asked = len(hedged_threads(found, cfg.thread_variants, cfg.hedge_margin)) > 1
            counts["hedged"] += asked
            counts["abstained"] += asked and after is None
            counts["rule right"] += after is not None and found[0][0] in right
            counts["judge right"] += after is not None and after[0][0] in right
        return (after if after is not None else found), matches

    with swapped(Selector, "threads", threads):
        yield


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", type=Path, default=default_cache() / "benchmarks" / "mtrag")
    ap.add_argument("--threads", type=int, default=10)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--accuracy", default="1,0.9,0.8")
    ap.add_argument("--candidates", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("results/thread_judge.json"))
    args = ap.parse_args()
    bench, emb, kb = load_with_kb(args.bench)
    ctx = BenchContext(kb=kb, embedder=emb)
    seeds = [int(s) for s in args.seeds.split(",")]
    report: dict[str, Any] = {"threads": args.threads, "seeds": args.seeds,
                              "candidates": args.candidates}
    runs: list[tuple[str, set[str], float | None]] = [("defaults", set(), None)]
    runs += [(f"judge right {a:.0%} of the time", set(), a)
             for a in (float(x) for x in args.accuracy.split(","))]
    runs.append(("thread oracle (a session per thread)", {"sessions"}, None))
    for name, right, accuracy in runs:
        pooled: dict[str, list[float]] = defaultdict(list)
        counts: dict[str, int] = defaultdict(int)
        patch = (None if accuracy is None
                 else partial(_judge, accuracy=accuracy, candidates=args.candidates,
                              counts=counts))
        for seed in seeds:
            for key, values in _replay(ctx, bench, args.threads, seed, Settings(), right,
                                       patch).items():
                if key.startswith("MRR@10") or "T* right" in key:
                    pooled[key].extend(values)
        row: dict[str, Any] = {k: round(float(np.mean(v)), 4) for k, v in sorted(pooled.items())}
        if accuracy is not None:
            asked = counts["hedged"] - counts["abstained"]
            row["turns judged"] = asked
            row["turns abstained (no candidate is the thread)"] = counts["abstained"]
            row["rule right on judged turns"] = round(counts["rule right"] / max(asked, 1), 4)
            row["judge right on judged turns"] = round(counts["judge right"] / max(asked, 1), 4)
        report[name] = row
        print(name, json.dumps(row), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
