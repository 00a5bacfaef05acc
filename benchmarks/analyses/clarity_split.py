"""Why the clarity gate: MRR@10 by how clearly the question alone finds a passage.

    python -m benchmarks.analyses.clarity_split [--threads 3] [--seeds 0,1,2] [--out FILE]

An analysis, not a system. Replays plain MTRAG and its interleaved sessions with the question
alone (``last-turn``), dhrag and the thread oracle both without the gate
(``clarity_threshold=None``), and dhrag with its defaults; splits the tasks by the question's own
best cosine to a passage (its clarity: quarters of its distribution, and the side of the default
threshold) and reports each system's MRR@10 per kind of turn in each band.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness.data import Benchmark, build_conversations
from benchmarks.harness.dhrag_systems import DHRAGSystem, ThreadOracleSystem
from benchmarks.harness.interleave import interleave_benchmark
from benchmarks.harness.mtrag_kb import load_with_kb
from benchmarks.harness.paths import default_cache
from benchmarks.harness.replay import replay, score_runs
from benchmarks.harness.systems import REGISTRY, BenchContext
from dhrag_core import Retrieval, Settings

__all__ = ["main"]


def _sets(bench: Benchmark, threads: int, seeds: list[int]) -> list[tuple[str, Benchmark]]:
    out = [("plain", bench)]
    for seed in seeds:
        tasks = interleave_benchmark(bench.conversations, threads=threads, block=(2, 4),
                                     seed=seed)
        out.append((f"{threads} threads", Benchmark(kb=bench.kb, tasks=tasks,
                                                   conversations=build_conversations(tasks))))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", type=Path, default=default_cache() / "benchmarks" / "mtrag")
    ap.add_argument("--threads", type=int, default=3)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--out", type=Path, default=Path("results/clarity_split.json"))
    args = ap.parse_args()
    bench, emb, kb = load_with_kb(args.bench)
    threshold = Settings().retrieval.clarity_threshold
    rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for label, data in _sets(bench, args.threads, [int(s) for s in args.seeds.split(",")]):
        threads = {(t.conversation_id, t.turn): t.tags.get("thread", t.conversation_id)
                   for t in data.tasks}
        ctx = BenchContext(kb=kb, embedder=emb, threads=threads)
        ungated = Settings(retrieval=Retrieval(clarity_threshold=None))
        systems = {
            "question alone": REGISTRY["last-turn"].factory(ctx),
            "dhrag without the gate": DHRAGSystem("dhrag", ctx, ungated),
            "thread oracle without the gate": ThreadOracleSystem("oracle", ctx, ungated),
            "dhrag (defaults)": DHRAGSystem("dhrag", ctx, Settings()),
        }
        scores = {name: score_runs(replay(s, data.conversations, show_progress=False),
                                   data.tasks) for name, s in systems.items()}
        by_id = {t.task_id: t for t in data.tasks}
        for i, base in enumerate(scores["question alone"]):
            task = by_id[base.task_id]
            qv = emb.encode([task.question])[0]
            best = kb.search_vectors(qv[None, :], 1)[0][0]
            assert best.vector is not None
            rows[label].append({
                "clarity": float(best.vector @ qv), "kind": base.tags.get("kind", "all"),
                **{name: s[i].values["MRR@10"] for name, s in scores.items()},
            })
    report: dict[str, Any] = {"threshold": threshold, "threads": args.threads,
                              "seeds": args.seeds, "sets": {}}
    for label, found in rows.items():
        clarity = np.array([r["clarity"] for r in found])
        cuts = np.quantile(clarity, [0.25, 0.5, 0.75])
        bands = [(-1.0, cuts[0]), (cuts[0], cuts[1]), (cuts[1], cuts[2]), (cuts[2], 2.0)]
        if threshold is not None:
            bands += [(-1.0, threshold), (threshold, 2.0)]
        out = []
        for lo, hi in bands:
            for kind in sorted({r["kind"] for r in found}):
                sub = [r for r in found if r["kind"] == kind and lo <= r["clarity"] < hi]
                if sub:
                    out.append({"clarity from": round(float(max(lo, -1.0)), 3),
                                "clarity below": round(float(min(hi, 2.0)), 3), "kind": kind,
                                "tasks": len(sub),
                                **{name: round(float(np.mean([r[name] for r in sub])), 4)
                                   for name in ("question alone", "dhrag without the gate",
                                                "thread oracle without the gate",
                                                "dhrag (defaults)")}})
        report["sets"][label] = out
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    for label, out in report["sets"].items():
        print(label)
        for r in out:
            print("  ", json.dumps(r))


if __name__ == "__main__":
    main()
