"""What makes MTRAG easier than a deployment: figures for the README's data paragraph.

    python -m benchmarks.studies.data_stats [--json docs/results/data_stats/data_stats.json]

Gold passages against the rest of the knowledge base (length in words), whether the knowledge
base holds every gold passage, and how often a turn's gold passage was already a gold passage
of the turn before (the dataset's answers are written from the gold passages, so a history
that keeps them carries the next answer's evidence).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from benchmarks.harness.data import Benchmark, load_benchmark
from benchmarks.harness.paths import default_cache


def stats(bench: Benchmark) -> dict[str, Any]:
    gold = {r for t in bench.evaluated_tasks for r in t.relevant}
    words = {p.key: len(p.text.split()) for p in bench.kb}
    by_turn = {(t.conversation_id, t.turn): set(t.relevant) for t in bench.evaluated_tasks}
    later = [t for t in bench.evaluated_tasks if t.turn > 1]
    shared = [bool(set(t.relevant) & by_turn.get((t.conversation_id, t.turn - 1), set()))
              for t in later]
    return {
        "passages": len(words), "gold_passages": len(gold),
        "gold_in_kb": sum(g in words for g in gold) / len(gold),
        "gold_median_words": float(np.median([words[g] for g in gold if g in words])),
        "other_median_words": float(np.median([n for k, n in words.items() if k not in gold])),
        "later_turns": len(later),
        "share_gold_with_previous_turn": float(np.mean(shared)) if shared else 0.0,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args(argv)
    out = stats(load_benchmark(default_cache() / "benchmarks" / "mtrag"))
    print(json.dumps(out, indent=2))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
