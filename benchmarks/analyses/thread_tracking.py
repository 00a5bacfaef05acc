"""Does dhrag follow the topic? The earlier turn it ranks first, against the data's topic labels.

    python -m benchmarks.analyses.thread_tracking [--scenarios DIR] [--seeds 0,1,2] [--set k=v ...]
                                                  [--out results/thread_tracking.json]

An analysis, not a system: the real engine replays the hand-written scenarios
(``benchmarks/scenarios``, topic labels per turn) and the interleaved MTRAG sessions (3 and 10
threads; a thread is an original conversation). At every continue and return turn, the history
turn dhrag ranks first (``Selection.history[0]``: the heaviest turn of T*) is right when its
topic is the question's. The same is reported for the nearest-earlier-turn rule (the earlier
question most similar to this one, by the embedder's cosine) and for the previous turn. MRR@10
of the engine is given beside, overall, by kind and (scenarios) by pattern.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from benchmarks.harness.crossval import parse_value
from benchmarks.harness.data import (
    Benchmark,
    Conversation,
    Task,
    build_conversations,
    load_benchmark,
    load_tasks,
)
from benchmarks.harness.dhrag_systems import DHRAGSystem, memo_for
from benchmarks.harness.interleave import interleave_benchmark
from benchmarks.harness.kbcache import kb_vectors
from benchmarks.harness.metrics import score_task
from benchmarks.harness.paths import default_cache, default_data
from benchmarks.harness.systems import BenchContext
from dhrag_core import FaissKnowledgeBase, MiniLMEmbedder, Settings
from dhrag_core.embedding import Embedder
from dhrag_core.settings import with_changes

__all__ = ["TrackedTurn", "main", "summarise", "topic_of", "track"]

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


def topic_of(task: Task) -> set[str]:
    """The topics a turn is about: its interleaved thread, or its scenario topic(s)
    (a comparison names two, joined by ``+``)."""
    label = task.tags.get("thread") or task.tags.get("topic") or task.conversation_id
    return set(label.split("+"))


class TrackedTurn(dict[str, Any]):
    """One evaluated turn: kind, pattern, MRR@10 and whether each rule's first turn is on
    topic (``None``: no earlier turn)."""


def _rule_pick(vectors: np.ndarray, i: int) -> int | None:
    """The earlier question most similar to question ``i`` (the nearest-earlier-turn rule)."""
    if i == 0:
        return None
    return int(np.argmax(vectors[:i] @ vectors[i]))


def track(system: DHRAGSystem, conversations: Sequence[Conversation], embedder: Embedder,
          k: int = 10) -> list[TrackedTurn]:
    """Replay ``conversations`` through ``system`` and judge each turn's first history turn."""
    out: list[TrackedTurn] = []
    for conv in conversations:
        system.start(conv.conversation_id)
        qv = embedder.encode([t.question for t in conv.turns])
        topics: list[set[str]] = []
        queries: list[str] = []
        for i, turn in enumerate(conv.turns):
            ranked = system.retrieve(turn.question, k)
            sel = system.selection
            task = turn.task
            here = topic_of(task) if task is not None else set()
            if task is not None and task.evaluated and i > 0:
                top = None
                if sel is not None and sel.history:
                    text = sel.history[0].turn.query
                    top = max(j for j in range(i) if queries[j] == text) \
                        if text in queries else None
                pick = _rule_pick(qv, i)
                out.append(TrackedTurn(
                    kind=task.tags.get("kind", ""), pattern=task.tags.get("pattern", ""),
                    mrr=score_task(task.task_id, task.turn, [p.key for p in ranked[:k]],
                                   task.relevant).values["MRR@10"],
                    dhrag=None if top is None else bool(topics[top] & here),
                    rule=None if pick is None else bool(topics[pick] & here),
                    previous=bool(topics[i - 1] & here),
                ))
            topics.append(here)
            queries.append(turn.question)
            system.observe(turn.question, list(ranked), turn.answer)
    return out


def summarise(turns: Sequence[TrackedTurn]) -> dict[str, Any]:
    """Shares on topic for continue and return turns; MRR@10 overall, by kind, by pattern."""
    out: dict[str, Any] = {"turns": len(turns),
                           "MRR@10": round(float(np.mean([t["mrr"] for t in turns])), 4)}
    for kind in ("continue", "return"):
        sub = [t for t in turns if t["kind"] == kind]
        if not sub:
            continue
        for rule in ("dhrag", "rule", "previous"):
            out[f"{kind} on topic: {rule}"] = round(
                float(np.mean([bool(t[rule]) for t in sub])), 3)
        out[f"{kind} turns"] = len(sub)
    for key in ("kind", "pattern"):
        groups: dict[str, list[float]] = defaultdict(list)
        for t in turns:
            if t[key]:
                groups[t[key]].append(t["mrr"])
        if groups:
            out[f"MRR@10 by {key}"] = {g: round(float(np.mean(v)), 4)
                                       for g, v in sorted(groups.items())}
    return out


def _sets(mtrag: Benchmark, scenarios: Benchmark, seeds: Sequence[int]) -> list[
        tuple[str, Benchmark]]:
    out = [("scenarios", scenarios)]
    for threads in (3, 10):
        tasks = [t for seed in seeds for t in interleave_benchmark(
            mtrag.conversations, threads=threads, block=(2, 4), seed=seed)]
        out.append((f"{threads} threads", Benchmark(kb=mtrag.kb, tasks=tasks,
                                                     conversations=build_conversations(tasks))))
    return out


def run(settings: Settings, sets: Sequence[tuple[str, Benchmark]], ctx: BenchContext,
        embedder: Embedder) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for label, data in sets:
        system = DHRAGSystem("dhrag", ctx, settings)
        result[label] = summarise(track(system, data.conversations, embedder))
    return result


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", type=Path, default=default_cache() / "benchmarks" / "mtrag")
    ap.add_argument("--scenarios", type=Path, default=SCENARIOS / "tasks.jsonl")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--set", nargs="*", default=[],
                    help="settings key=value (key: a knob's name or group.knob)")
    ap.add_argument("--also", nargs="*", default=[],
                    help="further settings to compare, each 'key=value,key=value'")
    ap.add_argument("--out", type=Path, default=Path("results/thread_tracking.json"))
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    import torch

    torch.set_num_threads(1)
    faiss.omp_set_num_threads(1)
    mtrag = load_benchmark(args.bench)
    scenarios = _load_scenarios(args.scenarios, mtrag)
    emb = MiniLMEmbedder()
    vectors = kb_vectors(mtrag.kb, emb, "all-MiniLM-L6-v2", cache_dir=default_cache(),
                         seed=default_data() / "kb_minilm.npz", show_progress=False)
    memo = memo_for(emb)
    ctx = BenchContext(kb=FaissKnowledgeBase(mtrag.kb, memo, vectors=vectors), embedder=memo)
    sets = _sets(mtrag, scenarios, [int(s) for s in args.seeds.split(",")])
    candidates = [("defaults" if not args.set else " ".join(args.set), _changes(args.set))]
    candidates += [(a, _changes(a.split(","))) for a in args.also]
    report: dict[str, Any] = {}
    for name, changes in candidates:
        t0 = time.perf_counter()
        report[name] = run(with_changes(Settings(), changes), sets, ctx, memo)
        report[name]["s"] = round(time.perf_counter() - t0, 1)
        print(json.dumps({name: report[name]}, indent=1), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


def _changes(pairs: Sequence[str]) -> Mapping[str, object]:
    return {k: parse_value(v) for k, v in (kv.split("=", 1) for kv in pairs if kv)}


def _load_scenarios(path: Path, mtrag: Benchmark) -> Benchmark:
    """The scenario tasks over the MTRAG knowledge base."""
    tasks = load_tasks(path)
    return Benchmark(kb=mtrag.kb, tasks=tasks, conversations=build_conversations(tasks))


if __name__ == "__main__":
    main()
