"""Where does dhrag lose to the thread oracle on interleaved sessions: the grouping of turns
into chains, the choice of T*, the hedge over runner-up threads, or what is left?

    python -m benchmarks.analyses.thread_gap [--threads 10] [--seeds 0,1,2]
                                             [--out results/thread_gap.json]

An analysis, not a system. The real engine replays the interleaved MTRAG sessions with parts of
thread tracking made right by reading the data's thread labels, one part at a time: the
grouping (each turn joins the chain of its true thread: chains are the threads), the choice
(the chain most of whose turns are of the query's true thread is put first, at select and at
record time), and the hedge (``thread_variants=1``: T*'s query alone). The thread oracle (a
session per true thread) runs in the same replay. Beside MRR@10 by kind it reports the chains'
purity (the share of turns in a chain of their thread's majority), chains per true thread, and
on continue and return turns how often T* is right and holds the thread's latest turn.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness.data import build_conversations
from benchmarks.harness.dhrag_systems import DHRAGSystem
from benchmarks.harness.interleave import interleave_benchmark
from benchmarks.harness.metrics import reciprocal_rank
from benchmarks.harness.mtrag_kb import load_with_kb
from benchmarks.harness.paths import default_cache
from benchmarks.harness.systems import BenchContext
from dhrag_core import DHRAG, NEW_CHAIN, Settings
from dhrag_core.history.policy import Link, SessionView, ThreadPolicy
from dhrag_core.records import Selection, Turn, Vector
from dhrag_core.settings import with_changes

__all__ = ["TrueThreadChain", "TrueThreadFirst", "main"]


class _Truth:
    """The true thread of each stored turn and of the current query (read from the data)."""

    def __init__(self) -> None:
        self.of: dict[str, str] = {}
        self.current = ""
        self.relevant: frozenset[str] = frozenset()
        self.key = ""  # "<session>#<position>" of the current turn, position from 0
        self.order: list[str] = []  # the session's stored turn ids, oldest first

    def majority(self, view: SessionView, chain: int) -> str | None:
        found = Counter(self.of.get(t) for t in view.chain_members(chain))
        return found.most_common(1)[0][0] if found else None


class TrueThreadFirst:
    """A thread policy that puts first the chain most of whose turns are of the query's true
    thread (among those the engine ranked), at select and at record time."""

    def __init__(self, truth: _Truth) -> None:
        self.truth = truth

    def order(self, view: SessionView, query: str, query_vector: Vector,
              ranked: Sequence[tuple[int, float]]) -> list[tuple[int, float]]:
        right = [f for f in ranked if self.truth.majority(view, f[0]) == self.truth.current][:1]
        return right + [f for f in ranked if f not in right]


class TrueThreadChain:
    """A chain policy: a new turn joins the chain of its true thread (a new chain for a new
    thread)."""

    def __init__(self, truth: _Truth) -> None:
        self.truth = truth

    def link(self, view: SessionView, turn: Turn, proposed: int | None) -> Link:
        mine = Counter(view.chain_of(t) for t in view.turn_ids
                       if self.truth.of.get(t) == self.truth.current)
        mine.pop(None, None)
        return mine.most_common(1)[0][0] if mine else NEW_CHAIN


RUNS: dict[str, tuple[dict[str, Any], set[str]]] = {
    "defaults": ({}, set()),
    "choice made right": ({}, {"choice"}),
    "choice made right, T*'s query only": ({"thread_variants": 1}, {"choice"}),
    "grouping made right": ({}, {"grouping"}),
    "grouping and choice made right": ({}, {"grouping", "choice"}),
    "grouping and choice made right, T*'s query only": (
        {"thread_variants": 1}, {"grouping", "choice"}),
    "thread oracle (a session per thread)": ({}, {"sessions"}),
}
"""Each analysis run: settings changed from the defaults, and the parts made right."""


def _replay(ctx: BenchContext, bench: Any, threads: int, seed: int, settings: Settings,
            right: set[str], policy: Callable[[_Truth], ThreadPolicy] | None = None,
            ) -> dict[str, list[float]]:
    """MRR@10 by kind and the thread statistics of one replay; ``policy``, given the replay's
    truth, chooses T* (another way of choosing it, say)."""
    tasks = interleave_benchmark(bench.conversations, threads=threads, block=(2, 4), seed=seed)
    out: dict[str, list[float]] = defaultdict(list)
    truth = _Truth()
    chooser = (policy(truth) if policy is not None
               else TrueThreadFirst(truth) if "choice" in right else None)
    system = DHRAGSystem("dhrag", ctx, settings, thread_policy=chooser,
                         chain_policy=TrueThreadChain(truth) if "grouping" in right else None)
    db = system.engine.history
    for conv in build_conversations(tasks):
        system.start(conv.conversation_id)
        start = system.session
        truth.of.clear()
        truth.order.clear()
        for position, turn in enumerate(conv.turns):
            truth.key = f"{conv.conversation_id}#{position}"
            tags = turn.task.tags if turn.task is not None else {}
            kind, truth.current = tags.get("kind", ""), tags.get("thread", "")
            truth.relevant = frozenset(turn.task.relevant) if turn.task is not None else (
                frozenset())
            if "sessions" in right:
                system.session = f"{start}|{truth.current}"
            ranked = system.retrieve(turn.question, 10)
            view = db.view(system.session)
            mine = [t for t in view.turn_ids if truth.of.get(t) == truth.current]
            if kind in ("continue", "return") and mine and view.chains:
                sel = system.selection
                assert sel is not None
                t_star = db.rank_threads(system.session, sel.query_vector,
                                         query_text=turn.question, limit=1)[0][0]
                out[f"{kind}: T* right"].append(
                    float(truth.majority(view, t_star) == truth.current))
                out[f"{kind}: T* holds the thread's latest turn"].append(
                    float(view.chain_of(mine[-1]) == t_star))
            if turn.task is not None and turn.task.evaluated:
                rr = reciprocal_rank([p.key for p in ranked[:10]], turn.task.relevant)
                out[f"MRR@10 {kind}"].append(rr)
                out["MRR@10"].append(rr)
                sel = system.selection
                if sel is not None and len(sel.search_vectors) > 1 and not sel.gated:
                    rows = _rows(ctx, system.engine, system.session, sel, truth, view)
                    for key, value in rows.items():
                        out[f"hedged turns: {key}"].append(value)
                out["hedged turns: share"].append(float(
                    sel is not None and len(sel.search_vectors) > 1 and not sel.gated))
            system.observe(turn.question, ranked, turn.answer or "")
            latest_id = db.view(system.session).latest
            assert latest_id is not None
            truth.of[latest_id] = truth.current
            truth.order.append(latest_id)
        if "sessions" in right:
            continue
        view = db.view(system.session)
        chains: dict[int | None, list[str]] = defaultdict(list)
        for t in view.turn_ids:
            chains[view.chain_of(t)].append(truth.of[t])
        held: dict[str, set[int | None]] = defaultdict(set)
        for c, members in chains.items():
            out["purity"].extend(
                [1.0] * Counter(members).most_common(1)[0][1]
                + [0.0] * (len(members) - Counter(members).most_common(1)[0][1]))
            for m in members:
                held[m].add(c)
        out["chains per thread"].extend(float(len(v)) for v in held.values())
    return out


def _rows(ctx: BenchContext, engine: DHRAG, session: str, sel: Selection, truth: _Truth,
          view: SessionView) -> dict[str, float]:
    """On a hedged turn: MRR@10 of the fused ranking against each row searched alone (T*'s,
    the true thread's, the best in hindsight, the one with the best top-1 score), each row's
    own candidates ranked as integration ranks them (its cosine plus the lexical term)."""
    relevant = truth.relevant
    threads = engine.history.select_threads(session, sel.query_vector, len(sel.search_vectors))
    rows = np.stack(sel.search_vectors).astype(np.float32)
    rrs, top1 = [], []
    founds = ctx.kb.search_vectors(rows, engine.settings.retrieval.kb_k)
    for row, found in zip(rows, founds, strict=True):
        ranked = engine.rank(sel.rewritten_query, row[None, :], found, 10)
        rrs.append(reciprocal_rank([c.passage.key for c in ranked], relevant))
        top1.append(ranked[0].score if ranked else -np.inf)
    true = [i for i, h in enumerate(threads[: len(rrs)])
            if h and truth.majority(view, h[0].chain_id) == truth.current]
    fused = reciprocal_rank([c.passage.key for c in sel.context[:10]], relevant)
    return {
        "fused (today)": fused,
        "T*'s row": rrs[0],
        "the true thread's row": rrs[true[0]] if true else fused,
        "the row with the best top-1 score": rrs[int(np.argmax(top1))],
        "the best row in hindsight": max(rrs),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", type=Path, default=default_cache() / "benchmarks" / "mtrag")
    ap.add_argument("--threads", type=int, default=10)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--out", type=Path, default=Path("results/thread_gap.json"))
    args = ap.parse_args()
    bench, emb, kb = load_with_kb(args.bench)
    ctx = BenchContext(kb=kb, embedder=emb)
    report: dict[str, Any] = {"threads": args.threads, "seeds": args.seeds}
    for name, (changes, right) in RUNS.items():
        pooled: dict[str, list[float]] = defaultdict(list)
        settings = with_changes(Settings(), changes)
        for seed in (int(s) for s in args.seeds.split(",")):
            for key, values in _replay(ctx, bench, args.threads, seed, settings, right).items():
                pooled[key].extend(values)
        report[name] = {k: round(float(np.mean(v)), 4) for k, v in sorted(pooled.items())}
        print(name, json.dumps(report[name]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
