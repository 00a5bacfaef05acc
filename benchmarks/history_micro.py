"""Micro-benchmark of the history database: add + search per turn at 1k / 10k / 100k triples.

Measures the history work alone -- ``select`` (hierarchical matching, chain tracking, weights)
then ``add`` (weights, eviction, clustering, chains) -- with vectors given, so no embedding
call is timed, and the session full, so every ``add`` also evicts. Each size runs in its own
process so peak RSS is that size's own. A naive baseline (Python list of vectors, stacked and
scanned every turn, ``list.pop`` eviction) runs in the same process for a ratio.

    python -m benchmarks.history_micro [--sizes 1000 10000 100000] [--turns 300]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
import uuid
from typing import Any

import numpy as np

DIM = 384
PASSAGES_PER_TURN = 3


def _unit(
    rng: np.random.Generator, n: int, centres: np.ndarray, topics: np.ndarray | None = None
) -> np.ndarray:
    """Vectors around topic centres, like queries of a long conversation."""
    if topics is None:
        topics = rng.integers(0, len(centres), n)
    v = centres[topics] + 0.6 * rng.standard_normal((n, DIM))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def _turn_vectors(
    rng: np.random.Generator, n: int, centres: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Query vectors and, from the same topic, ``PASSAGES_PER_TURN`` passage vectors each."""
    topics = rng.integers(0, len(centres), n)
    q = _unit(rng, n, centres, topics)
    p = _unit(rng, n * PASSAGES_PER_TURN, centres, np.repeat(topics, PASSAGES_PER_TURN))
    return q, p.reshape(n, PASSAGES_PER_TURN, DIM)


def _seed_turns(n: int, rng: np.random.Generator, centres: np.ndarray) -> list[Any]:
    from dhrag_core import Passage, Turn

    q, p = _turn_vectors(rng, n, centres)
    return [
        Turn(session_id="s", turn_id=uuid.uuid4().hex, index=i, query=f"query {i}",
             passages=tuple(Passage(text=f"passage {i}.{j}", id=f"{i}.{j}")
                            for j in range(PASSAGES_PER_TURN)),
             response="", timestamp=float(i), query_vector=q[i], response_vector=None,
             passage_vectors=p[i])
        for i in range(n)
    ]


class _ConstantEmbedder:
    """Never called in the timed loop (every vector is given); present for the protocol."""

    dimension = DIM

    def encode(self, texts: list[str]) -> np.ndarray:
        raise AssertionError("the micro-benchmark must not embed")


def _naive(n: int, turns: int, rng: np.random.Generator, centres: np.ndarray) -> list[float]:
    vecs = list(_unit(rng, n, centres))
    stamps = list(range(n))
    times = []
    for t in range(turns):
        q = _unit(rng, 1, centres)[0]
        start = time.perf_counter()
        m = np.stack(vecs)
        sims = m @ q
        rec = np.exp2(-(n + t - np.asarray(stamps)) / 4.0)
        w = 0.6 * np.clip(sims, 0, 1) + 0.4 * rec
        drop = int(np.argmin(w))
        vecs.pop(drop)
        stamps.pop(drop)
        vecs.append(q)
        stamps.append(n + t)
        top = np.argsort(-(np.stack(vecs) @ q))[:5]
        del top
        times.append(time.perf_counter() - start)
    return times


def run_size(n: int, turns: int) -> dict[str, Any]:
    from dhrag_core import HistoryDatabase, MemoryStore, Passage, Settings

    rng = np.random.default_rng(0)
    centres = rng.standard_normal((40, DIM))
    store = MemoryStore()
    store.apply("s", upsert=_seed_turns(n, rng, centres))
    clock = iter(range(n, n + 10 * turns))
    db = HistoryDatabase(embedder=_ConstantEmbedder(), store=store,
                         settings=Settings(capacity=n, merge_threshold=1.0),
                         clock=lambda: float(next(clock)))
    t0 = time.perf_counter()
    assert db.size("s") == n
    load_s = time.perf_counter() - t0
    add_t, search_t = [], []
    qs, ps = _turn_vectors(rng, turns, centres)
    for i in range(turns):
        passages = [Passage(text=f"new {i}.{j}", id=f"n{i}.{j}", vector=ps[i, j])
                    for j in range(PASSAGES_PER_TURN)]
        a = time.perf_counter()
        db.select("s", qs[i])
        b = time.perf_counter()
        db.add("s", f"new query {i}", passages, "", query_vector=qs[i])
        c = time.perf_counter()
        search_t.append(b - a)
        add_t.append(c - b)
    assert db.size("s") == n, "capacity bound must hold"
    total = np.add(add_t, search_t)
    naive = np.asarray(_naive(n, min(turns, 100), rng, centres))
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    ms = lambda a, p: float(np.percentile(a, p) * 1e3)  # noqa: E731
    return {
        "triples": n, "turns_timed": turns, "load_s": load_s,
        "add_p50_ms": ms(add_t, 50), "search_p50_ms": ms(search_t, 50),
        "turn_p50_ms": ms(total, 50), "turn_p95_ms": ms(total, 95),
        "naive_turn_p50_ms": ms(naive, 50),
        "speedup_vs_naive": float(np.median(naive) / np.median(total)),
        "peak_rss_mib": peak_mib,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 1_000, 10_000, 100_000])
    ap.add_argument("--turns", type=int, default=300)
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(run_size(args.one, args.turns)))
        return
    rows = []
    for n in args.sizes:
        out = subprocess.run(
            [sys.executable, "-m", "benchmarks.history_micro", "--one", str(n),
             "--turns", str(args.turns)],
            capture_output=True, text=True, check=True,
        )
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    head = ("| triples | add p50 ms | search p50 ms | turn p50 ms | turn p95 ms "
            "| naive p50 ms | speed-up | peak RSS MiB |")
    print(head)
    print("|" + "---|" * 8)
    for r in rows:
        print(f"| {r['triples']:,} | {r['add_p50_ms']:.3f} | {r['search_p50_ms']:.3f} "
              f"| {r['turn_p50_ms']:.3f} | {r['turn_p95_ms']:.3f} | {r['naive_turn_p50_ms']:.3f} "
              f"| {r['speedup_vs_naive']:.1f}x | {r['peak_rss_mib']:.0f} |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
