"""How often can a thread be guessed from content alone, and what do the wrong guesses cost?

    python -m benchmarks.analyses.thread_choice [--bench DIR] [--out results/thread_choice.json]

An analysis, not a system: on the interleaved MTRAG sessions (3 and 10 threads, seeds 0-2), the
earlier turns are grouped by their *true* thread (the data's labels), so only the choice is
tested. Each thread is its turns' summed topic vector (query + 3 x answer + 3 x mean of the top-5
passages the raw query retrieves, as ``topic_vector``); the choice is the thread whose
normalised sum is closest to the query. For every evaluated continue and return turn it reports
the share chosen right and, split by right and wrong choices, MRR@10 of the query alone and of
the query expanded toward the true thread's latest turn (the oracle's gain).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import faiss
import numpy as np

from benchmarks.harness.data import build_conversations, load_benchmark
from benchmarks.harness.dhrag_systems import memo_for
from benchmarks.harness.interleave import interleave_benchmark
from benchmarks.harness.kbcache import kb_vectors
from benchmarks.harness.paths import default_cache, default_data
from dhrag_core import MiniLMEmbedder
from dhrag_core.embedding import l2_normalise

__all__ = ["main"]

SETS = ((3, 0), (3, 1), (3, 2), (10, 0), (10, 1), (10, 2))


def _mrr(ids: np.ndarray, keys: np.ndarray, relevant: set[str]) -> float:
    for rank, key in enumerate(keys[ids[:10]], 1):
        if key in relevant:
            return 1.0 / rank
    return 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", type=Path, default=default_cache() / "benchmarks" / "mtrag")
    ap.add_argument("--out", type=Path, default=Path("results/thread_choice.json"))
    args = ap.parse_args()
    faiss.omp_set_num_threads(1)
    bench = load_benchmark(args.bench)
    emb = memo_for(MiniLMEmbedder())
    kb = kb_vectors(bench.kb, emb, "all-MiniLM-L6-v2", cache_dir=default_cache(),
                    seed=default_data() / "kb_minilm.npz", show_progress=False)
    keys = np.array([p.key for p in bench.kb])
    index = faiss.IndexFlatIP(kb.shape[1])
    index.add(kb)
    stats: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for threads, seed in SETS:
        tasks = interleave_benchmark(bench.conversations, threads=threads, block=(2, 4),
                                     seed=seed)
        for conv in build_conversations(tasks):
            qv = emb.encode([t.question for t in conv.turns])
            av = emb.encode([t.answer or "" for t in conv.turns])
            _, top = index.search(qv, 10)
            topics = l2_normalise(qv + 3 * av + 3 * kb[top[:, :5]].mean(axis=1))
            sums: dict[str, np.ndarray] = {}
            latest: dict[str, int] = {}
            for i, turn in enumerate(conv.turns):
                task = turn.task
                true = task.tags.get("thread", "") if task is not None else ""
                kind = task.tags.get("kind", "") if task is not None else ""
                if (task is not None and task.evaluated and kind in ("continue", "return")
                        and len(sums) > 1):
                    names = list(sums)
                    cents = l2_normalise(np.stack([sums[n] for n in names]))
                    right = names[int(np.argmax(cents @ qv[i]))] == true
                    expanded = l2_normalise(qv[i] + 0.375 * topics[latest[true]])[0]
                    _, ids = index.search(np.stack([qv[i], expanded]), 10)
                    rel = set(task.relevant)
                    group = stats[f"{threads} threads {kind}"]
                    group["right"].append(float(right))
                    side = "right" if right else "wrong"
                    group[f"{side}: query alone"].append(_mrr(ids[0], keys, rel))
                    group[f"{side}: true thread"].append(_mrr(ids[1], keys, rel))
                sums[true] = sums.get(true, 0) + topics[i]
                latest[true] = i
    out = {label: {k: round(float(np.mean(v)), 3) for k, v in group.items()} | {
        "n": len(group["right"])} for label, group in sorted(stats.items())}
    print(json.dumps(out, indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
