"""Choose DH-RAG defaults by cross-validation by conversation, on plain and interleaved sessions.

    python -m benchmarks.studies.tune_dhrag --grid thread_switch=none,0.2 thread_recency=0.05,0.1
    python -m benchmarks.studies.tune_dhrag --text --grid text_k=none,100   # the text path

Every setting of the grid replays the plain benchmark and its interleaved sessions (3 threads,
seeds 0-2; 10 threads, seeds 0-2). Per-task MRR@10 are pooled; folds split the *original*
conversations (a thread and its interleaved copies are in the same fold). For each fold the
setting with the best mean on the other folds is scored on it: the cross-validated figure is
what choosing by this procedure gives on conversations it did not see. Both it and the best
(tuned on everything) figure are printed; tuning on the evaluation data: say so. Each setting
after the first has the p-value of its pooled difference with the first (paired sign flips per
original conversation).
``--by-domain`` makes the folds the data's domains instead (leave one domain out: defaults
chosen on three domains, scored on the fourth), with each setting's pooled figure by domain.
``--text`` replays the text path (a knowledge base with ``search(text, k)`` only: ``TextOnlyKB``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import time
from pathlib import Path
from typing import cast

import faiss
import numpy as np

from benchmarks.harness.crossval import (
    SPLITS,
    conversation_of,
    cross_validate,
    parse_value,
    split_benchmark,
    task_fold,
)
from benchmarks.harness.data import Benchmark, load_benchmark
from benchmarks.harness.dhrag_systems import DHRAGSystem, memo_for
from benchmarks.harness.embedders import EMBEDDERS, ShiftedEmbedder, bench_embedder, shift
from benchmarks.harness.interleave import interleave_benchmark
from benchmarks.harness.kbcache import kb_vectors
from benchmarks.harness.metrics import TaskScore, paired_randomisation_test
from benchmarks.harness.paths import default_cache, default_data
from benchmarks.harness.replay import replay, score_runs
from benchmarks.harness.systems import BenchContext
from dhrag_core import FaissKnowledgeBase, Settings
from dhrag_core.settings import with_changes

__all__ = ["interleaved_sets"]

SETS = (("plain", 0, 0), ("3 threads", 3, 0), ("3 threads", 3, 1), ("3 threads", 3, 2),
        ("10 threads", 10, 0), ("10 threads", 10, 1), ("10 threads", 10, 2))
"""(label, threads, seed); threads 0 is the plain benchmark."""


def interleaved_sets(bench: Benchmark, block: tuple[int, int] = (2, 4)) -> list[
        tuple[str, Benchmark]]:
    """The plain benchmark and its interleaved copies named in ``SETS``."""
    from benchmarks.harness.data import build_conversations

    out = []
    for label, threads, seed in SETS:
        if threads == 0:
            out.append((label, bench))
            continue
        tasks = interleave_benchmark(bench.conversations, threads=threads, block=block, seed=seed)
        out.append((label, Benchmark(kb=bench.kb, tasks=tasks,
                                     conversations=build_conversations(tasks))))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", type=Path, default=default_cache() / "benchmarks" / "mtrag")
    ap.add_argument("--grid", nargs="*", default=[],
                    help="key=v1,v2 ... (key: a knob's name, or group.knob: with_changes)")
    ap.add_argument("--base", nargs="*", default=[], help="fixed settings key=value")
    ap.add_argument("--also", nargs="*", default=[],
                    help="further candidate settings, each 'key=value,key=value'")
    ap.add_argument("--text", action="store_true",
                    help="the text path: a knowledge base searched by text only")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--by-domain", action="store_true",
                    help="folds are the data's domains (leave one domain out), not conversations")
    ap.add_argument("--embedder", choices=EMBEDDERS, default="minilm")
    ap.add_argument("--seed-npz", type=Path, default=None,
                    help="KB vectors to seed the cache from (default: MiniLM's in the data)")
    ap.add_argument("--shift", type=float, default=0.0, metavar="A",
                    help="an embedder whose cosines are A + (1 - A) * MiniLM's "
                         "(benchmarks.harness.embedders.ShiftedEmbedder); 0: MiniLM itself")
    ap.add_argument("--split", choices=SPLITS, default="all",
                    help="tune on one fixed half of the conversations ('tune': how defaults "
                         "are chosen; the README reports on 'report'); default all")
    ap.add_argument("--out", type=Path, default=Path("results/tune.json"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    import torch

    torch.set_num_threads(1)
    faiss.omp_set_num_threads(1)
    bench = split_benchmark(load_benchmark(args.bench), args.split)
    emb, model = bench_embedder(args.embedder, default_cache())
    seed = args.seed_npz or (default_data() / "kb_minilm.npz" if args.embedder == "minilm"
                             else None)
    vectors = kb_vectors(bench.kb, emb, model, cache_dir=default_cache(), seed=seed,
                         show_progress=False)
    if args.shift:
        emb, vectors = ShiftedEmbedder(emb, args.shift), shift(vectors, args.shift)
    kb = FaissKnowledgeBase(bench.kb, memo_for(emb), vectors=vectors)
    if args.text:
        from benchmarks.studies.text_path import TextOnlyKB

        kb = cast(FaissKnowledgeBase, TextOnlyKB(kb, memo_for(emb)))
    ctx = BenchContext(kb=kb, embedder=memo_for(emb))
    base = {k: parse_value(v) for k, v in (kv.split("=", 1) for kv in args.base)}
    keys = [g.split("=", 1)[0] for g in args.grid]
    values = [[parse_value(v) for v in g.split("=", 1)[1].split(",")] for g in args.grid]
    sets = interleaved_sets(bench)
    pooled: dict[str, list[tuple[int, float]]] = {}
    domains = sorted({t.tags.get("domain", "") for t in bench.tasks}) if args.by_domain else None
    folds = len(domains) if domains else args.folds
    rows = []
    candidates = [dict(base, **dict(zip(keys, combo, strict=True)))
                  for combo in itertools.product(*values)]
    candidates += [dict(base, **{k: parse_value(v) for k, v in (kv.split("=", 1)
                                                           for kv in also.split(","))})
                   for also in args.also]
    for changes in candidates:
        name = ",".join(f"{k}={v}" for k, v in changes.items()) or "defaults"
        t0 = time.perf_counter()
        row: dict[str, object] = {"setting": name}
        pooled[name] = []
        conversations: list[str] = []
        per_label: dict[str, list[TaskScore]] = {}
        for label, data in sets:
            system = DHRAGSystem("dhrag", ctx, with_changes(Settings(), changes))
            scores = score_runs(replay(system, data.conversations, show_progress=False),
                                data.tasks)
            per_label.setdefault(label, []).extend(scores)
            pooled[name].extend((task_fold(s, folds, domains), s.values["MRR@10"])
                                for s in scores)
            conversations.extend(conversation_of(s) for s in scores)
        for label, scores in per_label.items():
            row[label] = round(float(np.mean([s.values["MRR@10"] for s in scores])), 4)
            for kind in ("first", "continue", "return"):
                sub = [s.values["MRR@10"] for s in scores if s.tags.get("kind") == kind]
                if sub:
                    row[f"{label} {kind}"] = round(float(np.mean(sub)), 4)
        row["pooled"] = round(float(np.mean([v for _, v in pooled[name]])), 4)
        if rows:  # against the first setting, signs flipped per original conversation
            first = str(rows[0]["setting"])
            row[f"p vs {first}"] = round(paired_randomisation_test(
                [v for _, v in pooled[name]], [v for _, v in pooled[first]],
                clusters=conversations), 4)
        if domains:
            for i, domain in enumerate(domains):
                row[f"pooled {domain}"] = round(float(np.mean(
                    [v for f, v in pooled[name] if f == i])), 4)
        row["s"] = round(time.perf_counter() - t0, 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
    best = max(rows, key=lambda r: float(r["pooled"]))  # type: ignore[arg-type]
    summary = {"embedder": args.embedder, "shift": args.shift, "split": args.split, "rows": rows,
               "best": best["setting"], "best_pooled": best["pooled"],
               "cross_validated_pooled": round(cross_validate(pooled, folds), 4),
               "folds": domains or folds}
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
