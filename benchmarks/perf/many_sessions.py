"""Many users through one process: is memory bounded by ``max_sessions_in_memory``?

    python -m benchmarks.perf.many_sessions                      # 100,000 sessions x 5 turns
    python -m benchmarks.perf.many_sessions --sessions 5000 --json out.json

Drives distinct session ids through one ``HistoryDatabase`` on a SQLite file, ``--group``
conversations at a time with their turns interleaved (as a service sees them), each turn a
history ``select`` then an ``add``. Reports RSS (and the peak) and the time per turn at
checkpoints: once the in-memory bound is reached RSS should stay flat, so the figure at
100,000 sessions is compared with the one at 1,000 in the same run. Finally it reads 10,000
unknown session ids, which must not grow memory either.

The embedder is the offline ``HashingEmbedder`` by default (``--embedder minilm`` for the real
model: on 2 CPU cores it would take hours here); the history work measured is the same.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.harness.rss import current_rss_mib, peak_rss_mib
from dhrag_core import HashingEmbedder, HistoryDatabase, Limits, MiniLMEmbedder, Settings
from dhrag_core.embedding import Embedder

TOPICS = [
    ("the Great Wall of China", "It is about 21,196 km long and built of stone and brick."),
    ("guinea pigs", "They live for four to eight years and need vitamin C."),
    ("the Nile", "It is 6,650 km long and flows north into the Mediterranean."),
    ("bond coupons", "A coupon is the periodic interest a bond pays until maturity."),
    ("the Berlin Wall", "It fell on 9 November 1989 after weeks of civil unrest."),
]
QUESTIONS = ["What do you know about {t}?", "How long is it?", "Who built it and when?",
             "Why does it matter today?", "Tell me one surprising fact about {t}."]


def rss_mib() -> tuple[float, float]:
    """(current, peak) resident set size of this process in MiB."""
    return current_rss_mib() or 0.0, peak_rss_mib()


def run(sessions: int, turns: int, group: int, bound: int, embedder: Embedder,
        path: Path, checkpoints: list[int]) -> dict[str, Any]:
    db = HistoryDatabase(embedder=embedder, store=f"sqlite:///{path}",
                         settings=Settings(limits=Limits(max_sessions_in_memory=bound)))
    rows: list[dict[str, Any]] = []
    done_turns = 0
    window_t, window_turns = 0.0, 0
    marks = sorted(c for c in checkpoints if c <= sessions)
    t_start = time.perf_counter()
    for first in range(0, sessions, group):
        ids = [f"user-{n:06d}" for n in range(first, min(first + group, sessions))]
        t0 = time.perf_counter()
        for turn in range(turns):
            for n, sid in enumerate(ids, first):
                topic, answer = TOPICS[n % len(TOPICS)]
                query = QUESTIONS[turn % len(QUESTIONS)].format(t=topic) + f" ({sid})"
                qv = db.encode_query(query)
                db.select(sid, qv)
                db.add(sid, query, answer, passages=[f"{topic}: {answer}"], query_vector=qv)
        window_t += time.perf_counter() - t0
        window_turns += len(ids) * turns
        done_turns += len(ids) * turns
        seen = first + len(ids)
        while marks and seen >= marks[0]:
            current, peak = rss_mib()
            rows.append({"sessions": seen, "turns": done_turns, "rss_mib": round(current, 1),
                         "peak_rss_mib": round(peak, 1), "in_memory": db.sessions_in_memory,
                         "ms_per_turn": round(1000 * window_t / max(window_turns, 1), 3)})
            print(f"{seen:>8,} sessions {done_turns:>9,} turns  RSS {current:7.1f} MiB "
                  f"(peak {peak:7.1f})  in memory {db.sessions_in_memory:>6,}  "
                  f"{rows[-1]['ms_per_turn']:.2f} ms/turn", flush=True)
            window_t, window_turns = 0.0, 0
            marks.pop(0)
    elapsed = time.perf_counter() - t_start
    before, _ = rss_mib()
    t0 = time.perf_counter()
    unknown = 10_000
    for n in range(unknown):
        db.select(f"stranger-{n:06d}", "Who built the Great Wall?")
    read_ms = 1000 * (time.perf_counter() - t0) / unknown
    after, peak = rss_mib()
    print(f"{unknown:,} reads of unknown session ids: RSS {before:.1f} -> {after:.1f} MiB, "
          f"{read_ms:.2f} ms each, in memory {db.sessions_in_memory:,}", flush=True)
    stored = len(db.store.sessions())
    db.close()
    return {"sessions": sessions, "turns_per_session": turns, "group": group,
            "max_sessions_in_memory": bound, "embedder": type(embedder).__name__,
            "store": "sqlite", "elapsed_s": round(elapsed, 1), "stored_sessions": stored,
            "checkpoints": rows, "unknown_reads": unknown,
            "unknown_reads_rss_mib": [round(before, 1), round(after, 1)],
            "unknown_read_ms": round(read_ms, 3), "peak_rss_mib": round(peak, 1),
            "python": sys.version.split()[0], "cpus": os.cpu_count()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=100_000)
    ap.add_argument("--turns", type=int, default=5, help="turns per session")
    ap.add_argument("--group", type=int, default=100,
                    help="conversations in flight at once (their turns interleave)")
    ap.add_argument("--bound", type=int, default=Settings().limits.max_sessions_in_memory,
                    help="Settings.limits.max_sessions_in_memory")
    ap.add_argument("--embedder", choices=("hashing", "minilm"), default="hashing")
    ap.add_argument("--db", type=Path, default=None, help="SQLite file (default: a temp file)")
    ap.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = ap.parse_args(argv)
    embedder: Embedder = HashingEmbedder() if args.embedder == "hashing" else MiniLMEmbedder()
    checkpoints = [1_000, 2_000, 5_000, 10_000, 25_000, 50_000, 75_000, 100_000, args.sessions]
    print(f"many_sessions: {args.sessions:,} sessions x {args.turns} turns, {args.group} at a "
          f"time, SQLite, embedder {type(embedder).__name__} ({embedder.dimension}-d), "
          f"max_sessions_in_memory={args.bound:,}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = args.db or Path(tmp) / "many_sessions.db"
        result = run(args.sessions, args.turns, args.group, args.bound, embedder, path,
                     sorted(set(checkpoints)))
    rows = result["checkpoints"]
    first = next((r for r in rows if r["sessions"] >= 1_000), rows[0])
    last = rows[-1]
    print(f"RSS at {first['sessions']:,} sessions {first['rss_mib']:.1f} MiB, at "
          f"{last['sessions']:,} sessions {last['rss_mib']:.1f} MiB (peak "
          f"{result['peak_rss_mib']:.1f}); {last['ms_per_turn']:.2f} ms per turn at the end vs "
          f"{first['ms_per_turn']:.2f} at the start; {result['elapsed_s']:.0f} s in all")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
