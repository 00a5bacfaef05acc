"""Soak test: one long session through ``HistoryDatabase``, memory and time per turn sampled.

Every turn runs the real path of a conversation -- ``select`` (hierarchical matching, chain
tracking, weights) then ``add`` (weights, eviction beyond ``capacity``, clustering, chains)
-- with precomputed vectors (queries and passages drawn around topic centres, the topic kept
for a few turns so chains form), so no embedding time is measured. Current RSS (from
``/proc/self/statm``, not the peak) and the mean time per turn are recorded every
``--every`` turns; a bounded memory shows as a flat RSS once the session is full.

    python -m benchmarks.perf.soak                          # 100,000 turns, capacity 1,000
    python -m benchmarks.perf.soak --turns 5000 --capacity 200 --json /tmp/s.json --png ''
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness.rss import current_rss_mib

DIM = 384
PASSAGES_PER_TURN = 3
TOPICS = 40
STAY = 0.8  # probability that the next turn keeps the topic (chains of about 5 turns)


class _Stream:
    """Query and passage vectors of a conversation that drifts between topics."""

    def __init__(self, seed: int = 0, block: int = 1000) -> None:
        self.rng = np.random.default_rng(seed)
        self.centres = self.rng.standard_normal((TOPICS, DIM))
        self.block = block
        self.topic = 0
        self._buf: list[tuple[int, np.ndarray, np.ndarray]] = []

    def _unit(self, topics: np.ndarray) -> np.ndarray:
        v = self.centres[topics] + 0.6 * self.rng.standard_normal((len(topics), DIM))
        return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)

    def _refill(self) -> None:
        topics = np.empty(self.block, dtype=np.int64)
        for i in range(self.block):
            if self.rng.random() > STAY:
                self.topic = int(self.rng.integers(TOPICS))
            topics[i] = self.topic
        q = self._unit(topics)
        p = self._unit(np.repeat(topics, PASSAGES_PER_TURN)).reshape(
            self.block, PASSAGES_PER_TURN, DIM
        )
        self._buf = [(int(topics[i]), q[i], p[i]) for i in range(self.block)][::-1]

    def next(self) -> tuple[int, np.ndarray, np.ndarray]:
        if not self._buf:
            self._refill()
        return self._buf.pop()


def run(turns: int, capacity: int, every: int, store: str = "memory",
        seed: int = 0) -> dict[str, Any]:
    """Run the soak; the samples and a summary as a dict."""
    from dhrag_core import HashingEmbedder, HistoryDatabase, Limits, Passage, Settings

    now = [0.0]
    db = HistoryDatabase(embedder=HashingEmbedder(DIM), store=store,
                         settings=Settings(limits=Limits(capacity=capacity)), clock=lambda: now[0])
    stream = _Stream(seed)
    session = "soak"
    samples: list[dict[str, Any]] = []
    gc.collect()
    rss0 = current_rss_mib() or 0.0
    window_start, cpu_start = time.perf_counter(), time.process_time()
    evicted = merged = 0
    for i in range(1, turns + 1):
        now[0] = float(i)
        topic, qv, pv = stream.next()
        passages = [Passage(text=f"passage {i}.{j} on topic {topic}", id=f"{i}.{j}",
                            vector=pv[j]) for j in range(PASSAGES_PER_TURN)]
        db.select(session, qv)
        res = db.add(session,
                     f"question {i} about topic {topic}",
                     "",
                     passages=passages,
                     query_vector=qv)
        evicted += len(res.evicted)
        merged += res.merged
        if i % every == 0 or i == turns:
            elapsed = time.perf_counter() - window_start
            cpu = time.process_time() - cpu_start
            n_window = i - (samples[-1]["turn"] if samples else 0)
            stats = db.stats(session)
            gc.collect()  # what is still referenced, not what the collector has yet to free
            samples.append({
                "turn": i,
                "rss_mib": round(current_rss_mib() or 0.0, 2),
                "ms_per_turn": round(1e3 * elapsed / n_window, 4),
                "cpu_ms_per_turn": round(1e3 * cpu / n_window, 4),
                "size": stats["turns"],
                "clusters": stats["clusters"],
                "chains": stats["chains"]["chains"],
                "evicted_total": evicted,
                "merged_total": merged,
            })
            window_start, cpu_start = time.perf_counter(), time.process_time()
    db.close()
    full = [s for s in samples if s["turn"] >= capacity]
    return {
        "turns": turns, "capacity": capacity, "every": every, "store": store,
        "dimension": DIM, "passages_per_turn": PASSAGES_PER_TURN,
        "rss_start_mib": round(rss0, 2), "samples": samples,
        "rss_first_mib": samples[0]["rss_mib"], "rss_last_mib": samples[-1]["rss_mib"],
        # peak against peak: the allocator's arenas swing RSS by ~20 MiB between samples, a
        # leak lifts the later half's peak above the earlier half's
        "rss_growth_after_fill_mib": round(_peak_growth([s["rss_mib"] for s in full]), 2),
        "ms_per_turn_first": samples[0]["ms_per_turn"],
        "ms_per_turn_last": samples[-1]["ms_per_turn"],
        "cpu_ms_per_turn_first": samples[0]["cpu_ms_per_turn"],
        "cpu_ms_per_turn_last": samples[-1]["cpu_ms_per_turn"],
    }


def table(result: dict[str, Any]) -> str:
    rows = ["| turn | size | clusters | chains | evicted | RSS MiB | ms/turn (wall) "
            "| ms/turn (CPU) |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    rows += [f"| {s['turn']:,} | {s['size']:,} | {s['clusters']} | {s['chains']} "
             f"| {s['evicted_total']:,} | {s['rss_mib']:.1f} | {s['ms_per_turn']:.3f} "
             f"| {s['cpu_ms_per_turn']:.3f} |"
             for s in result["samples"]]
    return "\n".join(rows)


def _peak_growth(rss: list[float]) -> float:
    """The highest RSS of the later half of the samples minus that of the earlier half."""
    if len(rss) < 2:
        return 0.0
    half = len(rss) // 2
    return max(rss[half:]) - max(rss[:half])


def plot(result: dict[str, Any], path: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [s["turn"] for s in result["samples"]]
    fig, ax1 = plt.subplots(figsize=(7, 3.6))
    ax1.plot(x, [s["rss_mib"] for s in result["samples"]], "o-", color="tab:blue")
    ax1.set_xlabel("turns in the session")
    ax1.set_ylabel("current RSS (MiB)", color="tab:blue")
    ax1.set_ylim(bottom=0)
    ax2 = ax1.twinx()
    ax2.plot(x, [s["ms_per_turn"] for s in result["samples"]], "s--", color="tab:red",
             label="wall")
    ax2.plot(x, [s["cpu_ms_per_turn"] for s in result["samples"]], "^:", color="tab:orange",
             label="CPU")
    ax2.legend(loc="lower right")
    ax2.set_ylabel("ms per turn (select + add)", color="tab:red")
    ax2.set_ylim(bottom=0)
    ax1.set_title(f"Soak: {result['turns']:,} turns, capacity {result['capacity']:,}")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=100_000)
    ap.add_argument("--capacity", type=int, default=1_000)
    ap.add_argument("--every", type=int, default=None,
                    help="sample every N turns (default: turns / 10)")
    ap.add_argument("--store", default="memory", help="memory or sqlite:///PATH.db")
    ap.add_argument("--json", default="docs/results/perf/soak.json", help="'' to skip")
    ap.add_argument("--png", default="docs/results/perf/soak.png", help="'' to skip")
    args = ap.parse_args(argv)
    every = args.every or max(args.turns // 10, 1)
    result = run(args.turns, args.capacity, every, args.store)
    print(table(result))
    print(f"RSS first/last sample: {result['rss_first_mib']:.1f} / "
          f"{result['rss_last_mib']:.1f} MiB; growth after fill "
          f"{result['rss_growth_after_fill_mib']:.1f} MiB; ms/turn first/last window: "
          f"{result['ms_per_turn_first']:.3f} / {result['ms_per_turn_last']:.3f} "
          f"(CPU {result['cpu_ms_per_turn_first']:.3f} / {result['cpu_ms_per_turn_last']:.3f})")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    if args.png:
        plot(result, args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
