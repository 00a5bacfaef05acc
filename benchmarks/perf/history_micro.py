"""Micro-benchmark of the history database: add + search per turn at 1k / 10k / 100k triples.

Measures the history work alone -- ``select`` (hierarchical matching, chain tracking, weights)
then ``add`` (weights, eviction, clustering, chains) -- with vectors given, so no embedding
call is timed, and the session full, so every ``add`` also evicts. Each size runs in its own
process, with MiniLM loaded first (``--embedder numpy``: the torch-free NumPy one;
``--no-model``: none), so peak RSS is that size's own with the model. A fair naive baseline
(the same update rule over preallocated matrices: one matrix-vector product,
``argpartition`` for the top 5, eviction by overwriting a row; no organisation) runs the
same turns in a process of its own.

    python -m benchmarks.perf.history_micro [--sizes 1000 10000 100000] [--turns 300]
    python -m benchmarks.perf.history_micro --embedder numpy  # peak RSS without torch
    python -m benchmarks.perf.history_micro --topics varied   # n / 10 topics: thousands of clusters
    python -m benchmarks.perf.history_micro --topics varied --sessions 10000 # triples over sessions

``--backends memory sqlite postgres`` times the same work on each store (default sizes 1k and
10k) with the ratio to memory; PostgreSQL uses ``--dsn`` / ``$DHRAG_POSTGRES_DSN``, or else
starts a throw-away local server (``dhrag_core.testing``). The stored triples are seeded with
one ``apply``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from typing import Any

import numpy as np

from benchmarks.harness.rss import peak_rss_mib

DIM = 384
PASSAGES_PER_TURN = 3
_CHUNK = 1024  # turns made at a time: the seeding's own arrays stay small beside the history


def _unit(
    rng: np.random.Generator, n: int, centres: np.ndarray, topics: np.ndarray | None = None
) -> np.ndarray:
    """Vectors around topic centres, like queries of a long conversation (made in float32
    chunks, so that seeding does not raise the peak RSS being measured)."""
    if topics is None:
        topics = rng.integers(0, len(centres), n)
    out = np.empty((n, DIM), dtype=np.float32)
    for at in range(0, n, _CHUNK):
        part = topics[at : at + _CHUNK]
        v = centres[part].astype(np.float32) + 0.6 * rng.standard_normal(
            (len(part), DIM), dtype=np.float32)
        out[at : at + len(part)] = v / np.linalg.norm(v, axis=1, keepdims=True)
    return out


def _turn_vectors(
    rng: np.random.Generator, n: int, centres: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Query vectors and, from the same topic, ``PASSAGES_PER_TURN`` passage vectors each."""
    topics = rng.integers(0, len(centres), n)
    q = _unit(rng, n, centres, topics)
    p = _unit(rng, n * PASSAGES_PER_TURN, centres, np.repeat(topics, PASSAGES_PER_TURN))
    return q, p.reshape(n, PASSAGES_PER_TURN, DIM)


def _seed_turns(
    n: int, rng: np.random.Generator, centres: np.ndarray, session: str = "s"
) -> list[Any]:
    """Stored turns, made a chunk at a time: each turn owns its vectors (as a store load gives
    them), and no chunk's arrays outlive it to raise the peak RSS being measured."""
    from dhrag_core import Passage, Turn

    out = []
    for at in range(0, n, _CHUNK):
        q, p = _turn_vectors(rng, min(_CHUNK, n - at), centres)
        out += [
            Turn(session_id=session, turn_id=uuid.uuid4().hex, index=i, query=f"query {i}",
                 passages=tuple(Passage(text=f"passage {i}.{j}", id=f"{i}.{j}")
                                for j in range(PASSAGES_PER_TURN)),
                 response="", timestamp=float(i), query_vector=q[i - at].copy(),
                 response_vector=None, passage_vectors=p[i - at])
            for i in range(at, at + len(q))
        ]
    return out


class _ConstantEmbedder:
    """Never called in the timed loop (every vector is given); present for the protocol."""

    dimension = DIM

    def encode(self, texts: list[str]) -> np.ndarray:
        raise AssertionError("the micro-benchmark must not embed")


def _naive(n: int, turns: int, rng: np.random.Generator, centres: np.ndarray) -> list[float]:
    """A fair flat baseline: the same update rule over preallocated matrices, no organisation.

    One matrix-vector product per turn over the stored queries gives the similarities; the
    top 5 by ``argpartition`` are the selection, the lowest weight is evicted by overwriting
    its row (query and passages) in place.
    """
    queries = _unit(rng, n, centres)
    passages = np.empty((n, PASSAGES_PER_TURN, DIM), dtype=np.float32)
    passages[:] = queries[:, None, :]
    stamps = np.arange(n, dtype=np.float64)
    qs, ps = _turn_vectors(rng, turns, centres)
    times = []
    for t in range(turns):
        q = qs[t]
        start = time.perf_counter()
        sims = queries @ q
        top = np.argpartition(-sims, 4)[:5]
        top = top[np.argsort(-sims[top])]
        rec = np.exp2(-(n + t - stamps) / 4.0)
        w = 0.6 * np.clip(sims, 0, 1) + 0.4 * rec
        drop = int(np.argmin(w))
        queries[drop] = q
        passages[drop] = ps[t]
        stamps[drop] = n + t
        times.append(time.perf_counter() - start)
    return times


def _load_model(embedder: str = "torch") -> float:
    """Load the real MiniLM (what a deployment has in memory) and encode once; RSS MiB after.
    ``embedder``: ``torch`` (``MiniLMEmbedder``) or ``numpy`` (``NumpyMiniLMEmbedder``)."""
    from benchmarks.harness.rss import current_rss_mib
    from benchmarks.perf.numpy_embedder import make_embedder

    make_embedder(embedder).encode(["load the model"])
    return current_rss_mib() or 0.0


def topic_count(n: int, topics: str) -> int:
    """Topic centres for ``n`` stored turns: a number, or ``varied`` (one per 10 turns, at
    least 40: a long session of many subjects, thousands of clusters and chains)."""
    if topics == "varied":
        return max(40, n // 10)
    if not topics.isdigit() or int(topics) < 1:
        raise ValueError(f"--topics must be a positive number or 'varied', got {topics!r}")
    return int(topics)


def run_naive(n: int, turns: int, model: bool = True, embedder: str = "torch",
              topics: str = "40") -> dict[str, Any]:
    """The fair naive baseline alone, in its own process (its peak RSS is its own)."""
    rng = np.random.default_rng(1)
    centres = np.random.default_rng(0).standard_normal((topic_count(n, topics), DIM))
    if model:
        _load_model(embedder)
    naive = np.asarray(_naive(n, turns, rng, centres))
    ms = lambda p: float(np.percentile(naive, p) * 1e3)  # noqa: E731
    return {"naive_turn_p50_ms": ms(50), "naive_turn_p95_ms": ms(95),
            "naive_peak_rss_mib": peak_rss_mib()}


def _open_store(backend: str, dsn: str | None, folder: str) -> Any:
    from dhrag_core import MemoryStore, PostgresStore, SQLiteStore

    if backend == "memory":
        return MemoryStore()
    if backend == "sqlite":
        return SQLiteStore(f"{folder}/history.db")
    return PostgresStore(dsn)


def run_size(n: int, turns: int, backend: str = "memory", dsn: str | None = None,
             workers: int = 1, model: bool = False, embedder: str = "torch",
             topics: str = "40", sessions: int = 1) -> dict[str, Any]:
    """Times select + add per turn at ``n`` stored triples; with ``workers`` > 1 the turns go
    round-robin to that many databases on one store (processes behind a load balancer: each
    turn first catches up with the others' writes). With ``sessions`` > 1 the triples are
    spread over that many sessions (each full at ``n / sessions``) and each timed turn goes to
    one drawn at random: most are not in memory (``max_sessions_in_memory``) and load first."""
    import tempfile

    from dhrag_core import Calibration, HistoryDatabase, Limits, Passage, Settings, Weighting

    model_mib = _load_model(embedder) if model else None
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((topic_count(n, topics), DIM))
    folder = tempfile.mkdtemp(prefix="dhrag-micro-")
    store = _open_store(backend, dsn, folder)
    prefix = f"s-{uuid.uuid4().hex}" if backend == "postgres" else "s"
    sids = [prefix] if sessions == 1 else [f"{prefix}-{i}" for i in range(sessions)]
    sid, per = sids[0], n // len(sids)
    t0 = time.perf_counter()
    for each in sids:
        store.apply(each, upsert=_seed_turns(per, rng, centres, each))
    seed_s = time.perf_counter() - t0
    clock = iter(range(n, n + 10 * turns))
    stores = [store] + [_open_store(backend, dsn, folder) if backend != "memory" else store
                        for _ in range(workers - 1)]
    # centred like any history (the seeded turns count as centred): the mean of the topics
    calibration = Calibration.from_vectors(centres)
    dbs = [HistoryDatabase(embedder=_ConstantEmbedder(), store=st,
                           settings=Settings(limits=Limits(capacity=per),
                                             weighting=Weighting(merge_threshold=1.0)),
                           clock=lambda: float(next(clock)), calibration=calibration)
           for st in stores]
    t0 = time.perf_counter()
    assert dbs[0].size(sid) == per
    load_s = time.perf_counter() - t0
    for other in dbs[1:]:
        other.size(sid)
    add_t, search_t = [], []
    qs, ps = _turn_vectors(rng, turns, centres)
    for i in range(turns):
        passages = [Passage(text=f"new {i}.{j}", id=f"n{i}.{j}", vector=ps[i, j])
                    for j in range(PASSAGES_PER_TURN)]
        db = dbs[i % len(dbs)]
        if len(sids) > 1:
            sid = sids[int(rng.integers(len(sids)))]
        a = time.perf_counter()
        db.select(sid, qs[i])
        b = time.perf_counter()
        db.add(sid, f"new query {i}", "", passages=passages, query_vector=qs[i])
        c = time.perf_counter()
        search_t.append(b - a)
        add_t.append(c - b)
    assert dbs[0].size(sid) == per, "capacity bound must hold"
    shape = dbs[0].stats(sid)
    if backend == "postgres":
        for each in sids:
            store.delete_session(each)
    for db in dbs:
        db.close()
    total = np.add(add_t, search_t)
    peak_mib = peak_rss_mib()
    ms = lambda a, p: float(np.percentile(a, p) * 1e3)  # noqa: E731
    return {
        "triples": n, "sessions": len(sids), "backend": backend, "workers": workers,
        "turns_timed": turns,
        "seed_s": seed_s,
        "load_s": load_s,
        "add_p50_ms": ms(add_t, 50), "search_p50_ms": ms(search_t, 50),
        "turn_p50_ms": ms(total, 50), "turn_p95_ms": ms(total, 95),
        "select_p99_ms": ms(search_t, 99), "add_p99_ms": ms(add_t, 99),
        "turn_p99_ms": ms(total, 99), "add_max_ms": max(add_t) * 1e3,
        "topics": topic_count(n, topics), "clusters": shape["clusters"],
        "chains": shape["chains"]["chains"],
        "peak_rss_mib": peak_mib, "model_rss_mib": model_mib,
        "embedder": embedder if model else None,
    }


def _print_backends(rows: list[dict[str, Any]]) -> None:
    print("| triples | backend | select p50 ms | add p50 ms | turn p50 ms | turn p95 ms "
          "| p50 vs memory | seed (1 apply) s | load s |")
    print("|" + "---|" * 9)
    base = {r["triples"]: r["turn_p50_ms"] for r in rows if r["backend"] == "memory"}
    for r in rows:
        ratio = (f"{r['turn_p50_ms'] / base[r['triples']]:.1f}x" if r["triples"] in base
                 else "-")
        print(f"| {r['triples']:,} | {r['backend']} | {r['search_p50_ms']:.3f} "
              f"| {r['add_p50_ms']:.3f} | {r['turn_p50_ms']:.3f} | {r['turn_p95_ms']:.3f} "
              f"| {ratio} | {r['seed_s']:.2f} | {r['load_s']:.2f} |")


def _child(args: list[str]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "benchmarks.perf.history_micro", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    row: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return row


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=None,
                    help="stored triples (default 1000 10000 100000; with several "
                         "backends 1000 10000)")
    ap.add_argument("--turns", type=int, default=300)
    ap.add_argument("--backends", nargs="+", default=["memory"],
                    choices=["memory", "sqlite", "postgres"])
    ap.add_argument("--dsn", default=None,
                    help="PostgreSQL DSN (default: $DHRAG_POSTGRES_DSN, else a temporary server)")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--naive", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--backend", default="memory", help=argparse.SUPPRESS)
    ap.add_argument("--workers", type=int, default=1,
                    help="databases on one store taking turns round-robin (default 1)")
    ap.add_argument("--no-model", dest="model", action="store_false",
                    help="do not load MiniLM first (peak RSS then excludes the model)")
    ap.add_argument("--embedder", choices=["torch", "numpy"], default="torch",
                    help="the model loaded first: MiniLMEmbedder (torch, default) or "
                         "NumpyMiniLMEmbedder (the same vectors without torch)")
    ap.add_argument("--topics", default="40",
                    help="topic centres of the turns: a number (default 40) or 'varied' "
                         "(one per 10 stored turns)")
    ap.add_argument("--sessions", type=int, default=1,
                    help="spread the stored triples over this many sessions; each timed turn "
                         "goes to one at random (default 1)")
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--plot", help="also plot time per turn vs history size (memory) to this PNG")
    args = ap.parse_args(argv)
    if args.one and args.naive:
        print(json.dumps(run_naive(args.one, args.turns, args.model, args.embedder,
                                   args.topics)))
        return
    if args.one:
        print(json.dumps(run_size(args.one, args.turns, args.backend, args.dsn,
                                  workers=args.workers, model=args.model,
                                  embedder=args.embedder, topics=args.topics,
                                  sessions=args.sessions)))
        return
    several = args.backends != ["memory"]
    sizes = args.sizes or ([1_000, 10_000] if several else [1_000, 10_000, 100_000])
    server = None
    dsn = args.dsn or os.environ.get("DHRAG_POSTGRES_DSN")
    if "postgres" in args.backends and not dsn:
        from dhrag_core.testing import TempPostgres

        server = TempPostgres()
        dsn = server.start()
    topic_count(1, args.topics)  # a wrong --topics fails here, not in a child
    model = ["--embedder", args.embedder] if args.model else ["--no-model"]
    model += ["--topics", args.topics]
    if args.sessions < 1:
        ap.error("--sessions must be at least 1")
    rows = []
    try:
        for n in sizes:
            for backend in args.backends:
                cmd = ["--one", str(n), "--turns", str(args.turns), "--backend", backend,
                       "--workers", str(args.workers), "--sessions", str(args.sessions),
                       *model]
                if backend == "postgres" and dsn:
                    cmd += ["--dsn", dsn]
                row = _child(cmd)
                if not several:
                    # the naive scan over one session's triples
                    row.update(_child(["--one", str(n // args.sessions), "--turns",
                                       str(args.turns), "--naive", *model]))
                    row["speedup_vs_naive"] = row["naive_turn_p50_ms"] / row["turn_p50_ms"]
                rows.append(row)
    finally:
        if server is not None:
            server.stop()
    if several:
        _print_backends(rows)
    else:
        _print_memory(rows)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=2)
    if args.plot:
        from pathlib import Path

        from benchmarks.harness.report import plot_scaling

        memory = [r for r in rows if r.get("backend", "memory") == "memory"]
        print(f"plot: {plot_scaling(memory, Path(args.plot))}")


def _print_memory(rows: list[dict[str, Any]]) -> None:
    head = ("| triples | topics | clusters | chains | select p50 / p99 ms | add p50 / p99 / max ms "
            "| turn p50 / p95 / p99 ms | peak RSS MiB | naive p50 / p95 ms | naive peak RSS MiB "
            "| speed-up (p50) |")
    print(head)
    print("|" + "---|" * 11)
    for r in rows:
        where = f" in {r['sessions']:,} sessions" if r.get("sessions", 1) > 1 else ""
        print(f"| {r['triples']:,}{where} | {r['topics']:,} | {r['clusters']:,} | {r['chains']:,} "
              f"| {r['search_p50_ms']:.2f} / {r['select_p99_ms']:.2f} "
              f"| {r['add_p50_ms']:.2f} / {r['add_p99_ms']:.2f} / {r['add_max_ms']:.1f} "
              f"| {r['turn_p50_ms']:.2f} / {r['turn_p95_ms']:.2f} / {r['turn_p99_ms']:.2f} "
              f"| {r['peak_rss_mib']:.0f} "
              f"| {r['naive_turn_p50_ms']:.2f} / {r['naive_turn_p95_ms']:.2f} "
              f"| {r['naive_peak_rss_mib']:.0f} | {r['speedup_vs_naive']:.2f}x |")
    if rows and rows[0].get("model_rss_mib") is not None:
        name = {"torch": "MiniLMEmbedder", "numpy": "NumpyMiniLMEmbedder"}[rows[0]["embedder"]]
        print(f"(both with MiniLM loaded first, {name}: {rows[0]['model_rss_mib']:.0f} MiB RSS "
              "after loading it)")

if __name__ == "__main__":
    main()
