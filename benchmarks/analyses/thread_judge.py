"""Would a judge of the thread close the interleaved gap? A simulation with the data's labels.

    python -m benchmarks.analyses.thread_judge [--threads 10] [--seeds 0,1,2] [--accuracy 1,0.9,0.8]
                                               [--candidates 5] [--out results/thread_judge.json]
                                               [--export PROMPTS.jsonl] [--judgments FILE.jsonl]

An analysis, not a system: what an LLM asked "which of these earlier topics does this question
continue?" could at best bring, before anyone pays for one. The real engine (defaults) replays
the interleaved MTRAG sessions. On each turn where it would hedge (a runner-up thread within
``hedge_margin`` of T*), a simulated judge is shown the ``candidates`` best chains: when none of
them is mostly the question's true thread it abstains and the engine hedges as it does today;
otherwise it names the true thread's chain with probability ``accuracy`` (else one of the other
candidates, evenly), and the engine takes that chain as T*, searches with its query alone and
files the turn in it. Draws are a hash of the query vector, so a run is deterministic. The
defaults and the thread oracle (a session per true thread) run in the same replay.

A real judge is measured from a file, as the shared data's LLM rewrites are: ``--export``
writes one prompt per turn (the session's earlier turns, numbered, and the question) to be
answered by any LLM elsewhere; ``--judgments`` replays with its answers (one JSON object a
line, ``{"id": ..., "follows": N}``: the earlier turn N the question follows up on, 0 for a new
topic). On a turn where the engine would hedge, the chain holding turn N becomes T*; ``0`` or
a missing id leaves the turn to the engine. ``--export-oracle`` writes the answers the labels
give (the thread's latest earlier turn; ``--oracle-accuracy`` leaves only that share right),
to check the path end to end and to see how right a judge must be.
"""

from __future__ import annotations

import argparse
import json
import random
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.analyses.thread_gap import _replay, _Truth
from benchmarks.harness.data import (
    Conversation,
    build_conversations,
    load_benchmark,
    numbered_jsonl,
    write_jsonl,
)
from benchmarks.harness.interleave import interleave_benchmark
from benchmarks.harness.mtrag_kb import load_with_kb
from benchmarks.harness.paths import default_cache
from benchmarks.harness.systems import BenchContext
from dhrag_core import SessionView, Settings
from dhrag_core.history.selection import hedged_threads
from dhrag_core.records import Vector

__all__ = ["judge_prompts", "judged", "judged_by_turn", "load_judgments", "main",
           "oracle_judgments"]

_NOT_CHOSEN = -9.0  # a relevance no hedge margin keeps
_ANSWER_WORDS = 40

Found = list[tuple[int, float]]  # threads with their relevance, T* first

_PROMPT = """Below are the earlier turns of a conversation, numbered, and the user's new \
question. The conversation may switch between several topics and come back to one.

{turns}

New question: {question}

Which earlier turn does the new question follow up on? Reply with that turn's number only, \
or 0 if it starts a new topic."""


def _short(text: str) -> str:
    words = text.split()
    return " ".join(words[:_ANSWER_WORDS]) + (" ..." if len(words) > _ANSWER_WORDS else "")


def judge_prompts(conversations: Sequence[Conversation]) -> Iterator[dict[str, Any]]:
    """One prompt per turn after a session's first: ``{"id", "turns", "prompt"}``, the prompt
    holding the session's earlier turns (question and the start of its answer) and nothing
    after the question; ``id`` is ``"<session>#<position>"``, position counted from 0."""
    for conv in conversations:
        for i in range(1, len(conv.turns)):
            earlier = "\n".join(f"{j}. User: {t.question}\n   Assistant: {_short(t.answer)}"
                                for j, t in enumerate(conv.turns[:i], 1))
            yield {"id": f"{conv.conversation_id}#{i}", "turns": i,
                   "prompt": _PROMPT.format(turns=earlier, question=conv.turns[i].question)}


def oracle_judgments(conversations: Sequence[Conversation],
                     accuracy: float = 1.0) -> Iterator[dict[str, Any]]:
    """What a judge that read the labels would answer: the latest earlier turn of the same
    thread (numbered from 1), 0 on a thread's first turn; with probability ``1 - accuracy``
    (drawn from the id, so a file is deterministic) an earlier turn of another thread."""
    for conv in conversations:
        threads = [t.task.tags.get("thread", "") if t.task is not None else ""
                   for t in conv.turns]
        latest: dict[str, int] = {}
        for i, thread in enumerate(threads):
            if i:
                key = f"{conv.conversation_id}#{i}"
                follows = latest.get(thread, 0)
                draw = random.Random(zlib.crc32(key.encode()))
                others = [j for j in range(1, i + 1) if threads[j - 1] != thread]
                if others and draw.random() >= accuracy:
                    follows = draw.choice(others)
                yield {"id": key, "follows": follows}
            if thread:
                latest[thread] = i + 1


def load_judgments(path: Path) -> dict[str, int]:
    """A judgments file as ``{id: follows}``.

    Raises:
        ValueError: On a line that is not a JSON object with a string ``id`` and a
            non-negative integer ``follows`` (the line number says where), or a repeated id.
    """
    found: dict[str, int] = {}
    for n, rec in numbered_jsonl(path):
        if not isinstance(rec, dict) or not isinstance(rec.get("id"), str):
            raise ValueError(f'{path}:{n}: expected {{"id": "<session>#<position>", '
                             f'"follows": N}}, got {json.dumps(rec)[:80]}')
        follows = rec.get("follows")
        if isinstance(follows, bool) or not isinstance(follows, int) or follows < 0:
            raise ValueError(f"{path}:{n}: follows must be an earlier turn's number (>= 1) or 0, "
                             f"got {follows!r}")
        if rec["id"] in found:
            raise ValueError(f"{path}:{n}: id {rec['id']!r} appears twice")
        found[rec["id"]] = follows
    return found


def _first(found: Found, pick: tuple[int, float]) -> Found:
    """``pick`` as T*, the other threads out of the hedge's reach."""
    return [pick] + [(t, _NOT_CHOSEN) for t, _ in found if t != pick[0]]


def _hedges(found: Found, settings: Settings) -> bool:
    threads = settings.threads
    return len(hedged_threads(found, threads.thread_variants, threads.hedge_margin)) > 1


def judged(found: Found, right: set[int], settings: Settings,
           accuracy: float, candidates: int, draw: float) -> Found | None:
    """The threads after the judge (its pick first, the others out of the hedge's reach), or
    ``None`` where it is not asked (the engine would not hedge) or abstains (no candidate is
    in ``right``). ``draw`` in [0, 1) decides whether it names the right chain."""
    if not _hedges(found, settings):
        return None
    shown = found[:candidates]
    hits = [f for f in shown if f[0] in right]
    if not hits:
        return None
    misses = [f for f in shown if f[0] not in right]
    if draw < accuracy or not misses:
        pick = hits[0]
    else:
        pick = misses[min(int((draw - accuracy) / (1 - accuracy) * len(misses)),
                          len(misses) - 1)]
    return _first(found, pick)


def judged_by_turn(found: Found, chain: int | None,
                   settings: Settings) -> Found | None:
    """The threads after a judge that named an earlier turn, held by ``chain``: that chain
    first, or ``None`` where the engine would not hedge or the named turn is in no chain."""
    if not _hedges(found, settings):
        return None
    pick = next((f for f in found if f[0] == chain), None)
    return None if pick is None else _first(found, pick)


Choose = Callable[[SessionView, Vector, Found, set[int], Settings], Found | None]


class Following:
    """A thread policy: ``choose`` makes what it will of the engine's order (given the chains
    that are mostly the question's thread); the engine's own stands where it returns
    ``None``. ``counts`` tallies each turn once (the engine asks at select and at record)."""

    def __init__(self, truth: _Truth, counts: dict[str, int], choose: Choose,
                 settings: Settings) -> None:
        self.truth, self.counts, self.choose, self.settings = truth, counts, choose, settings
        self.seen: set[tuple[str, bytes]] = set()

    def order(self, view: SessionView, query: str, query_vector: Vector,
              ranked: Sequence[tuple[int, float]]) -> Found | None:
        found = list(ranked)
        right = {t for t, _ in found if self.truth.majority(view, t) == self.truth.current}
        after = self.choose(view, query_vector, found, right, self.settings)
        key = (self.truth.key, query_vector.tobytes())
        if key not in self.seen and len(found) > 1:
            self.seen.add(key)
            asked = _hedges(found, self.settings)
            self.counts["hedged"] += asked
            self.counts["abstained"] += asked and after is None
            self.counts["rule right"] += after is not None and found[0][0] in right
            self.counts["judge right"] += after is not None and after[0][0] in right
        return after


def _judge(truth: _Truth, accuracy: float, candidates: int,
           counts: dict[str, int]) -> Following:
    """A policy following the simulated judge."""

    def choose(view: SessionView, qv: Vector, found: Found, right: set[int],
               settings: Settings) -> Found | None:
        draw = (zlib.crc32(qv.tobytes()) % 100_000) / 100_000
        return judged(found, right, settings, accuracy, candidates, draw)

    return Following(truth, counts, choose, Settings())


def _judge_from_file(truth: _Truth, judgments: dict[str, int],
                     counts: dict[str, int]) -> Following:
    """A policy following the judgments read from a file."""

    def choose(view: SessionView, qv: Vector, found: Found, right: set[int],
               settings: Settings) -> Found | None:
        follows = judgments.get(truth.key, 0)
        if follows > len(truth.order):
            raise ValueError(f"judgment for {truth.key} names turn {follows}, but only "
                             f"{len(truth.order)} turns came before it")
        chain = view.chain_of(truth.order[follows - 1]) if follows else None
        return judged_by_turn(found, chain, settings)

    return Following(truth, counts, choose, Settings())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", type=Path, default=default_cache() / "benchmarks" / "mtrag")
    ap.add_argument("--threads", type=int, default=10)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--accuracy", default="1,0.9,0.8")
    ap.add_argument("--candidates", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("results/thread_judge.json"))
    ap.add_argument("--export", type=Path, help="write the judge's prompts here and stop")
    ap.add_argument("--export-oracle", type=Path,
                    help="write the judgments the labels give here and stop")
    ap.add_argument("--oracle-accuracy", type=float, default=1.0,
                    help="share of --export-oracle's answers left right (others: a wrong turn)")
    ap.add_argument("--judgments", type=Path, help="replay with a judge's answers (JSONL)")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.export or args.export_oracle:
        convs = [c for seed in seeds for c in build_conversations(interleave_benchmark(
            load_benchmark(args.bench).conversations, threads=args.threads, block=(2, 4),
            seed=seed))]
        if args.export:
            print(f"{write_jsonl(judge_prompts(convs), args.export)} prompts -> {args.export}")
        if args.export_oracle:
            n = write_jsonl(oracle_judgments(convs, args.oracle_accuracy), args.export_oracle)
            print(f"{n} judgments -> {args.export_oracle}")
        return
    judgments = load_judgments(args.judgments) if args.judgments else None
    bench, emb, kb = load_with_kb(args.bench)
    ctx = BenchContext(kb=kb, embedder=emb)
    report: dict[str, Any] = {"threads": args.threads, "seeds": args.seeds,
                              "candidates": args.candidates}
    # a judge's policy, still to be given the counts it fills; None for the references
    Judge = Callable[..., Following]
    runs: list[tuple[str, set[str], Judge | None]] = [("defaults", set(), None)]
    for a in (float(x) for x in args.accuracy.split(",")):
        runs.append((f"judge right {a:.0%} of the time", set(),
                     partial(_judge, accuracy=a, candidates=args.candidates)))
    if judgments is not None:
        runs.append((f"judge from {args.judgments.name}", set(),
                     partial(_judge_from_file, judgments=judgments)))
    runs.append(("thread oracle (a session per thread)", {"sessions"}, None))
    for name, right, judge in runs:
        pooled: dict[str, list[float]] = defaultdict(list)
        counts: dict[str, int] = defaultdict(int)
        policy = partial(judge, counts=counts) if judge is not None else None
        for seed in seeds:
            for key, values in _replay(ctx, bench, args.threads, seed, Settings(), right,
                                       policy).items():
                if key.startswith("MRR@10") or "T* right" in key:
                    pooled[key].extend(values)
        row: dict[str, Any] = {k: round(float(np.mean(v)), 4) for k, v in sorted(pooled.items())}
        if judge is not None:
            asked = counts["hedged"] - counts["abstained"]
            row["turns judged"] = asked
            row["turns abstained (no candidate is the thread)"] = counts["abstained"]
            row["rule right on judged turns"] = round(counts["rule right"] / max(asked, 1), 4)
            row["judge right on judged turns"] = round(counts["judge right"] / max(asked, 1), 4)
        report[name] = row
        print(name, json.dumps(row), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
