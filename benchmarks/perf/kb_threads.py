"""Turn latency with FAISS's default threads against one thread for a single-query search.

``FaissKnowledgeBase`` searches a single query on one OpenMP thread
(``single_query_threads=1``): FAISS's default splits one query's scan over every core, which
on small machines costs more than the scan. This replays MTRAG conversations through the real
engine (MiniLM with torch's default threads, FAISS over the 36.6k-passage knowledge base) with
both settings, alternating per conversation (ABBA) so that load hits both alike, and reports
the knowledge-base search and whole-turn (``select`` + ``record``) latency, p50/p95, the
ratio, and whether every turn retrieved the same passages in the same order under both.

    python -m benchmarks.perf.kb_threads [--conversations 60] \
        [--json docs/results/perf/kb_threads.json]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

from benchmarks.harness.data import load_benchmark
from benchmarks.harness.kbcache import kb_vectors
from benchmarks.harness.paths import default_cache, default_data
from dhrag_core import DHRAG, FaissKnowledgeBase, MiniLMEmbedder

SETTINGS = {"one thread": 1, "FAISS default": None}


def run(conversations: int) -> dict[str, Any]:
    bench = load_benchmark(default_cache() / "benchmarks" / "mtrag")
    emb = MiniLMEmbedder()
    vectors = kb_vectors(bench.kb, emb, "all-MiniLM-L6-v2", cache_dir=default_cache(),
                         seed=default_data() / "kb_minilm.npz", show_progress=False)
    kbs = {name: FaissKnowledgeBase(bench.kb, emb, vectors=vectors, single_query_threads=n)
           for name, n in SETTINGS.items()}
    engines = {name: DHRAG(kb, embedder=emb) for name, kb in kbs.items()}
    emb.encode(["warm up"])
    kb_s: dict[str, list[float]] = {name: [] for name in SETTINGS}
    turn_s: dict[str, list[float]] = {name: [] for name in SETTINGS}
    first_kb_s: dict[str, list[float]] = {name: [] for name in SETTINGS}
    found: dict[str, list[list[tuple[str, float]]]] = {name: [] for name in SETTINGS}
    names = list(SETTINGS)
    for c, conv in enumerate(bench.conversations[:conversations]):
        order = names if c % 4 in (0, 3) else names[::-1]
        for name in order:
            engine = engines[name]
            for i, turn in enumerate(conv.turns):
                start = time.perf_counter()
                sel = engine.select(conv.conversation_id, turn.question)
                engine.record(conv.conversation_id, turn.question, turn.answer, selection=sel)
                turn_s[name].append(time.perf_counter() - start)
                kb_s[name].append(sel.timings.get("kb_s", float("nan")))
                if i == 0:
                    first_kb_s[name].append(sel.timings.get("kb_s", float("nan")))
                found[name].append([(p.key, p.score or 0.0) for p in sel.passages])
    for engine in engines.values():
        engine.close()

    def ms(xs: list[float], q: float) -> float:
        return float(np.nanpercentile(xs, q) * 1e3)

    rows = {name: {"turns": len(turn_s[name]),
                   "kb_p50_ms": ms(kb_s[name], 50), "kb_p95_ms": ms(kb_s[name], 95),
                   "first_turn_kb_p50_ms": ms(first_kb_s[name], 50),
                   "turn_p50_ms": ms(turn_s[name], 50), "turn_p95_ms": ms(turn_s[name], 95)}
            for name in names}
    a, b = names
    differ, gap = 0, 0.0
    for x, y in zip(found[a], found[b], strict=True):
        if [k for k, _ in x] != [k for k, _ in y]:
            differ += 1
            at = next(i for i, (u, v) in enumerate(zip(x, y, strict=False)) if u[0] != v[0])
            gap = max(gap, abs(x[at][1] - x[at + 1][1]) if at + 1 < len(x) else 1.0)
    return {"conversations": min(conversations, len(bench.conversations)), "rows": rows,
            "turn_p50_ratio": rows[b]["turn_p50_ms"] / rows[a]["turn_p50_ms"],
            "first_turn_kb_p50_ratio": (rows[b]["first_turn_kb_p50_ms"]
                                        / rows[a]["first_turn_kb_p50_ms"]),
            "turns_differing": differ, "largest_gap_at_a_swap": gap}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--conversations", type=int, default=60)
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args(argv)
    out = run(args.conversations)
    print("| FAISS threads for one query | turns | KB search p50 / p95 ms "
          "| first turn's KB search p50 ms | turn p50 / p95 ms |")
    print("|---|---|---|---|---|")
    for name, r in out["rows"].items():
        print(f"| {name} | {r['turns']} | {r['kb_p50_ms']:.2f} / {r['kb_p95_ms']:.2f} "
              f"| {r['first_turn_kb_p50_ms']:.2f} "
              f"| {r['turn_p50_ms']:.1f} / {r['turn_p95_ms']:.1f} |")
    print(f"default / one thread: turn p50 {out['turn_p50_ratio']:.2f}x, first turn's search "
          f"{out['first_turn_kb_p50_ratio']:.2f}x; contexts differing: {out['turns_differing']} "
          f"turns (largest score gap at a swap {out['largest_gap_at_a_swap']:.1e})")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
