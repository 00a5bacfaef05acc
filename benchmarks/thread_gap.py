"""Where does dhrag lose to the thread oracle on interleaved sessions: the choice of T*, or what
is stored and grouped in one shared session?

    python -m benchmarks.thread_gap [--threads 10] [--seeds 0,1,2] [--out results/thread_gap.json]

An analysis, not a system. The real engine replays the interleaved MTRAG sessions three ways:
with its defaults; with the thread choice made right -- the chain most of whose turns are of
the query's true thread is put first, when there is one (an oracle choice inside the engine's
own chains, at select and at record time); and the same with T*'s query alone
(``thread_variants=1``). Beside MRR@10 by kind it reports the chains' purity (the share of turns
in a chain of their thread's majority), chains per true thread, and on continue and return
turns how often T* holds the thread's latest turn.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.__main__ import default_cache
from benchmarks.data import build_conversations
from benchmarks.dhrag_systems import DHRAGSystem
from benchmarks.interleave import interleave_benchmark
from benchmarks.metrics import reciprocal_rank
from benchmarks.mtrag_kb import load_with_kb
from benchmarks.systems import BenchContext
from dhrag_core import Settings
from dhrag_core.history.selection import Selector
from dhrag_core.history.session import SessionState, Threads
from dhrag_core.records import Vector

__all__ = ["main"]


class _Truth:
    """The true thread of each stored turn and of the current query (read from the data)."""

    def __init__(self) -> None:
        self.of: dict[str, str] = {}
        self.current = ""

    def majority(self, s: SessionState, chain: int) -> str | None:
        found = Counter(self.of.get(t) for t in s.turns if s.tree.chain_of(t) == chain)
        return found.most_common(1)[0][0] if found else None


@contextmanager
def _oracle_choice(truth: _Truth) -> Iterator[None]:
    """While open, ``Selector.threads`` puts the true thread's chain first."""
    original = Selector.threads

    def threads(self: Selector, s: SessionState, qv: Vector) -> Threads:
        found, matches = original(self, s, qv)
        right = [f for f in found if truth.majority(s, f[0]) == truth.current][:1]
        return right + [f for f in found if f not in right], matches

    Selector.threads = threads  # type: ignore[method-assign]
    try:
        yield
    finally:
        Selector.threads = original  # type: ignore[method-assign]


def _replay(ctx: BenchContext, bench: Any, threads: int, seed: int, settings: Settings,
            oracle: bool) -> dict[str, list[float]]:
    tasks = interleave_benchmark(bench.conversations, threads=threads, block=(2, 4), seed=seed)
    out: dict[str, list[float]] = defaultdict(list)
    truth = _Truth()
    system = DHRAGSystem("dhrag", ctx, settings)
    db = system.engine.history
    with _oracle_choice(truth) if oracle else _nothing():
        for conv in build_conversations(tasks):
            system.start(conv.conversation_id)
            truth.of.clear()
            for turn in conv.turns:
                tags = turn.task.tags if turn.task is not None else {}
                kind, truth.current = tags.get("kind", ""), tags.get("thread", "")
                ranked = system.retrieve(turn.question, 10)
                s = db._session(system.session)
                mine = [t for t in s.turns if truth.of.get(t) == truth.current]
                if kind in ("continue", "return") and mine and s.tree.has_chains:
                    sel = system._selection
                    assert sel is not None
                    t_star = db._selector.threads(s, sel.query_vector)[0][0][0]
                    latest = max(mine, key=lambda t: s.turns[t].index)
                    out[f"{kind}: T* right"].append(
                        float(truth.majority(s, t_star) == truth.current))
                    out[f"{kind}: T* holds the thread's latest turn"].append(
                        float(s.tree.chain_of(latest) == t_star))
                if turn.task is not None and turn.task.evaluated:
                    rr = reciprocal_rank([p.key for p in ranked[:10]], turn.task.relevant)
                    out[f"MRR@10 {kind}"].append(rr)
                    out["MRR@10"].append(rr)
                system.observe(turn.question, ranked, turn.answer or "")
                latest_id = db._session(system.session).latest
                assert latest_id is not None
                truth.of[latest_id] = truth.current
            s = db._session(system.session)
            chains: dict[int | None, list[str]] = defaultdict(list)
            for t in s.turns:
                chains[s.tree.chain_of(t)].append(truth.of[t])
            held: dict[str, set[int | None]] = defaultdict(set)
            for c, members in chains.items():
                out["purity"].extend(
                    [1.0] * Counter(members).most_common(1)[0][1]
                    + [0.0] * (len(members) - Counter(members).most_common(1)[0][1]))
                for m in members:
                    held[m].add(c)
            out["chains per thread"].extend(float(len(v)) for v in held.values())
    return out


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", type=Path, default=default_cache() / "benchmarks" / "mtrag")
    ap.add_argument("--threads", type=int, default=10)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--out", type=Path, default=Path("results/thread_gap.json"))
    args = ap.parse_args()
    bench, emb, kb = load_with_kb(args.bench)
    ctx = BenchContext(kb=kb, embedder=emb)
    runs = {
        "defaults": (Settings(), False),
        "thread choice made right": (Settings(), True),
        "thread choice made right, T*'s query only": (Settings(thread_variants=1), True),
    }
    report: dict[str, Any] = {"threads": args.threads, "seeds": args.seeds}
    for name, (settings, oracle) in runs.items():
        pooled: dict[str, list[float]] = defaultdict(list)
        for seed in (int(s) for s in args.seeds.split(",")):
            for key, values in _replay(ctx, bench, args.threads, seed, settings, oracle).items():
                pooled[key].extend(values)
        report[name] = {k: round(float(np.mean(v)), 4) for k, v in sorted(pooled.items())}
        print(name, json.dumps(report[name]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
