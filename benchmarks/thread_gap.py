"""Where does dhrag lose to the thread oracle on interleaved sessions: the grouping of turns
into chains, the choice of T*, the hedge over runner-up threads, or what is left?

    python -m benchmarks.thread_gap [--threads 10] [--seeds 0,1,2] [--out results/thread_gap.json]

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
import weakref
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.data import build_conversations
from benchmarks.dhrag_systems import DHRAGSystem
from benchmarks.interleave import interleave_benchmark
from benchmarks.metrics import reciprocal_rank
from benchmarks.mtrag_kb import load_with_kb
from benchmarks.paths import default_cache
from benchmarks.systems import BenchContext
from dhrag_core import DHRAG, Settings
from dhrag_core.algorithm.chains import Chain, ChainTracker
from dhrag_core.history.selection import Selector
from dhrag_core.history.session import SessionState, Threads
from dhrag_core.records import Selection, Vector

__all__ = ["main", "swapped"]


class _Truth:
    """The true thread of each stored turn and of the current query (read from the data)."""

    def __init__(self) -> None:
        self.of: dict[str, str] = {}
        self.current = ""
        self.relevant: frozenset[str] = frozenset()
        self.key = ""  # "<session>#<position>" of the current turn, position from 0
        self.order: list[str] = []  # the session's stored turn ids, oldest first

    def majority(self, s: SessionState, chain: int) -> str | None:
        found = Counter(self.of.get(t) for t in s.turns if s.tree.chain_of(t) == chain)
        return found.most_common(1)[0][0] if found else None


@contextmanager
def swapped(owner: type, name: str, value: object) -> Iterator[None]:
    """While open, ``owner.name`` is ``value`` (an analysis variant of an engine method)."""
    original = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, original)


@contextmanager
def _oracle_choice(truth: _Truth) -> Iterator[None]:
    """While open, ``Selector.threads`` puts the true thread's chain first."""
    original = Selector.threads

    def threads(self: Selector, s: SessionState, qv: Vector) -> Threads:
        found, matches = original(self, s, qv)
        right = [f for f in found if truth.majority(s, f[0]) == truth.current][:1]
        return right + [f for f in found if f not in right], matches

    with swapped(Selector, "threads", threads):
        yield


@contextmanager
def _oracle_grouping(truth: _Truth) -> Iterator[None]:
    """While open, a new turn joins the chain of its true thread (a new chain for a new one)."""
    chain_of_thread: weakref.WeakKeyDictionary[ChainTracker, dict[str, int]] = (
        weakref.WeakKeyDictionary())

    def link(self: ChainTracker, turn_id: str, vector: Vector, index: int,
             prefer: int | None = None) -> int:
        mine = chain_of_thread.setdefault(self, {})
        cid = mine.get(truth.current)
        if cid is None or cid not in self.chains:
            chain = self.chains[self._next_id] = Chain(self._next_id, self.dimension)
            self._next_id += 1
            mine[truth.current] = chain.id
        else:
            chain = self.chains[cid]
        self._add(chain, turn_id, vector, index)
        return chain.id

    with swapped(ChainTracker, "link", link):
        yield


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
            right: set[str],
            patch: Callable[[_Truth], AbstractContextManager[object]] | None = None,
            ) -> dict[str, list[float]]:
    """MRR@10 by kind and the thread statistics of one replay; ``patch``, given the replay's
    truth, is held open around it (another way of choosing T*, say)."""
    tasks = interleave_benchmark(bench.conversations, threads=threads, block=(2, 4), seed=seed)
    out: dict[str, list[float]] = defaultdict(list)
    truth = _Truth()
    system = DHRAGSystem("dhrag", ctx, settings)
    db = system.engine.history
    with (_oracle_choice(truth) if "choice" in right else _nothing(),
          _oracle_grouping(truth) if "grouping" in right else _nothing(),
          patch(truth) if patch is not None else _nothing()):
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
                    sel = system._selection
                    if sel is not None and len(sel.search_vectors) > 1 and not sel.gated:
                        rows = _rows(ctx, system.engine, system.session, sel, truth, s)
                        for key, value in rows.items():
                            out[f"hedged turns: {key}"].append(value)
                    out["hedged turns: share"].append(float(
                        sel is not None and len(sel.search_vectors) > 1 and not sel.gated))
                system.observe(turn.question, ranked, turn.answer or "")
                latest_id = db._session(system.session).latest
                assert latest_id is not None
                truth.of[latest_id] = truth.current
                truth.order.append(latest_id)
            if "sessions" in right:
                continue
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


def _rows(ctx: BenchContext, engine: DHRAG, session: str, sel: Selection, truth: _Truth,
          s: SessionState) -> dict[str, float]:
    """On a hedged turn: MRR@10 of the fused ranking against each row searched alone (T*'s,
    the true thread's, the best in hindsight, the one with the best top-1 score), each row's
    own candidates ranked as integration ranks them (its cosine plus the lexical term)."""
    relevant = truth.relevant
    threads = engine.history.select_threads(session, sel.query_vector, len(sel.search_vectors))
    rows = np.stack(sel.search_vectors).astype(np.float32)
    rrs, top1 = [], []
    for row, found in zip(rows, ctx.kb.search_vectors(rows, engine.settings.kb_k), strict=True):
        vectors = engine._passage_vectors(found)
        ranked = engine._context(sel.rewritten_query, row[None, :], [], found, vectors, 10)
        rrs.append(reciprocal_rank([c.passage.key for c in ranked], relevant))
        top1.append(ranked[0].score if ranked else -np.inf)
    true = [i for i, h in enumerate(threads[: len(rrs)])
            if h and truth.majority(s, h[0].chain_id) == truth.current]
    fused = reciprocal_rank([c.passage.key for c in sel.context[:10]], relevant)
    return {
        "fused (today)": fused,
        "T*'s row": rrs[0],
        "the true thread's row": rrs[true[0]] if true else fused,
        "the row with the best top-1 score": rrs[int(np.argmax(top1))],
        "the best row in hindsight": max(rrs),
    }


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
    report: dict[str, Any] = {"threads": args.threads, "seeds": args.seeds}
    for name, (changes, right) in RUNS.items():
        pooled: dict[str, list[float]] = defaultdict(list)
        settings = Settings().with_(**changes)
        for seed in (int(s) for s in args.seeds.split(",")):
            for key, values in _replay(ctx, bench, args.threads, seed, settings, right).items():
                pooled[key].extend(values)
        report[name] = {k: round(float(np.mean(v)), 4) for k, v in sorted(pooled.items())}
        print(name, json.dumps(report[name]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
