"""Grid over DH-RAG settings on the converted benchmark (tuning on the evaluation data: say so).

    python -m benchmarks.tune_dhrag --grid expansion=0,0.3,0.6 history_bonus=0,0.1
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import time
from pathlib import Path

import faiss

from benchmarks.__main__ import default_cache, default_data
from benchmarks.data import load_benchmark
from benchmarks.dhrag_systems import DHRAGSystem, memo_for
from benchmarks.kbcache import kb_vectors
from benchmarks.metrics import depth_bucket, mean_scores
from benchmarks.replay import replay, score_runs
from benchmarks.systems import BenchContext, DenseSystem, text_builder
from dhrag_core import FaissKnowledgeBase, MiniLMEmbedder, Settings


def _parse(value: str) -> object:
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return {"true": True, "false": False, "none": None}.get(value.lower(), value)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", type=Path, default=default_cache() / "benchmarks" / "mtrag")
    ap.add_argument("--grid", nargs="*", default=[])
    ap.add_argument("--base", nargs="*", default=[], help="fixed settings key=value")
    ap.add_argument("--out", type=Path, default=Path("results/tune.jsonl"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    import torch

    torch.set_num_threads(1)
    faiss.omp_set_num_threads(1)
    bench = load_benchmark(args.bench)
    emb = MiniLMEmbedder()
    vectors = kb_vectors(bench.kb, emb, "all-MiniLM-L6-v2", cache_dir=default_cache(),
                         seed=default_data() / "kb_minilm.npz", show_progress=False)
    ctx = BenchContext(kb=FaissKnowledgeBase(bench.kb, memo_for(emb), vectors=vectors),
                       embedder=memo_for(emb))
    base = {k: _parse(v) for k, v in (kv.split("=", 1) for kv in args.base)}
    keys = [g.split("=", 1)[0] for g in args.grid]
    values = [[_parse(v) for v in g.split("=", 1)[1].split(",")] for g in args.grid]
    args.out.parent.mkdir(parents=True, exist_ok=True)

    def report(name: str, system: object, extra: dict[str, object]) -> None:
        t0 = time.perf_counter()
        runs = replay(system, bench.conversations, k=10, show_progress=False)  # type: ignore[arg-type]
        scores = score_runs(runs, bench.tasks)
        m = mean_scores(scores)
        by = {}
        for bucket in ("1", "2", "3-4", "5+"):
            sub = [s for s in scores if depth_bucket(s.turn) == bucket]
            if sub:
                by[bucket] = round(mean_scores(sub)["MRR@10"], 4)
        row = {"name": name, **extra, "mrr@10": round(m["MRR@10"], 4),
               "ndcg@10": round(m["nDCG@10"], 4), "r@10": round(m["R@10"], 4),
               "by_depth_mrr": by, "s": round(time.perf_counter() - t0, 1)}
        print(json.dumps(row), flush=True)
        with open(args.out, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")

    report("last-turn", DenseSystem("last-turn", ctx.kb, text_builder(0, False)), {})
    for combo in itertools.product(*values):
        settings = dict(base, **dict(zip(keys, combo, strict=True)))
        report("dhrag", DHRAGSystem("dhrag", ctx, Settings().with_(**settings)), settings)


if __name__ == "__main__":
    main()
