"""How much better could T* be chosen from the signals a bi-encoder gives? A learned ceiling.

    python -m benchmarks.analyses.choice_ceiling [--threads 3,10] [--seeds 0,1,2] [--out F.json]

An analysis, not a system. The real engine (defaults) replays the interleaved MTRAG sessions;
on every evaluated continue and return turn each of the session's chains is described by
signals the engine could compute without an LLM, and the query expanded inside that chain
(as for T*) is searched alone. A conditional logit (softmax over the chains of a turn) is then
trained to pick the chain whose majority is the turn's true thread, by 5-fold cross-validation
on the original conversations, once on the engine's own two signals and once on all of them.
The report gives, by kind, how often the pick is right and MRR@10 of the picked chain's row,
beside the engine's rule, the true thread's row and what dhrag returned on the same turns
(hedged over runner-up threads, history passages integrated) and with T*'s query alone, and the
better of those two on each turn in hindsight (the ceiling of any rule for when to hedge):
whether a better *rule* over these signals is where the interleaved gap can be closed. Those
rows are searched on the engine's own chains at each turn; a better choice also files later
turns better, so the sets are replayed once more end to end with T* chosen by the logit
(weights fitted on all turns: an optimistic bound), beside the engine's rule.

Signals per chain: the engine's thread relevance and recency (``thread_half_life``), whether it
holds the session's latest turn, log of its length; the query's cosine to the chain's latest
turn's query, answer, passages (mean) and topic vector; and three that go through the knowledge
base: the mean of the raw query's top-10 passages against the chain's passages (mean of all
its turns'), its latest turn's passages and its latest answer; recency times how unclear
the query is (0.7 minus the raw query's best passage cosine); and three on words, not vectors:
the IDF-weighted share of the question's words (stop words dropped, IDF over the knowledge
base) found in the chain's latest question and answer, in its latest 8 questions and answers,
and in the top 3 passages of its latest 4 turns.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness.crossval import fold_of
from benchmarks.harness.data import build_conversations
from benchmarks.harness.dhrag_systems import DHRAGSystem
from benchmarks.harness.interleave import interleave_benchmark
from benchmarks.harness.metrics import TaskScore, reciprocal_rank
from benchmarks.harness.mtrag_kb import load_with_kb
from benchmarks.harness.paths import default_cache
from benchmarks.harness.replay import replay, score_runs
from benchmarks.harness.sparse import tokenize
from benchmarks.harness.systems import BenchContext
from dhrag_core import DHRAG, FaissKnowledgeBase, HistoryDatabase, SessionView, Settings
from dhrag_core.algorithm import scoring
from dhrag_core.algorithm.hierarchy import topic_vector
from dhrag_core.pipeline.expansion import expanded
from dhrag_core.records import Passage, Vector

__all__ = ["SIGNALS", "Choice", "fit_logit", "main"]

SIGNALS = ("relevance", "recency", "current", "log length", "latest query", "latest answer",
           "latest passages", "latest topic", "kb: thread passages", "kb: latest passages",
           "kb: latest answer", "recency x unclear", "words: latest turn", "words: thread",
           "words: passages")
ENGINE = (0, 1)
"""The signals the engine's rule uses (relevance plus a recency bonus)."""


@dataclass
class Choice:
    """One evaluated turn: its chains' signals (one row each, the engine's T* first), the
    index of the true thread's chain (None when no chain is mostly that thread), each chain's
    row MRR@10, the turn's kind and conversation, MRR@10 of what dhrag returned and of what it
    returns searching with T*'s query alone (no hedge) in the same state."""

    signals: np.ndarray
    true: int | None
    mrr: np.ndarray
    kind: str
    conversation: str
    dhrag: float = 0.0
    t_star_only: float = 0.0


class _Words:
    """IDF-weighted word overlap of a question with a text (IDF over the knowledge base)."""

    def __init__(self, passages: Sequence[Passage]) -> None:
        df: Counter[str] = Counter()
        for p in passages:
            df.update(set(tokenize(p.text)))
        n = len(passages)
        self.idf = {w: math.log((n + 1) / (c + 1)) for w, c in df.items()}
        self.unseen = math.log(n + 1)

    def overlap(self, question: str, text: str) -> float:
        words = set(tokenize(question))
        total = sum(self.idf.get(w, self.unseen) for w in words)
        found = set(tokenize(text))
        return sum(self.idf.get(w, self.unseen) for w in words & found) / total if total else 0.0


def _mean(rows: list[Vector], dim: int) -> Vector:
    return np.mean(rows, axis=0) if rows else np.zeros(dim, dtype=np.float32)


def _choices(ctx: BenchContext, kb: FaissKnowledgeBase, bench: Any, threads: int,
             seed: int, words: _Words) -> list[Choice]:
    tasks = interleave_benchmark(bench.conversations, threads=threads, block=(2, 4), seed=seed)
    system = DHRAGSystem("dhrag", ctx, Settings())
    db = system.engine.history
    out: list[Choice] = []
    for conv in build_conversations(tasks):
        system.start(conv.conversation_id)
        thread_of: dict[str, str] = {}
        for turn in conv.turns:
            task = turn.task
            kind = task.tags.get("kind", "") if task is not None else ""
            thread = task.tags.get("thread", "") if task is not None else ""
            ranked = system.retrieve(turn.question, 10)
            view = db.view(system.session)
            sel = system.selection
            if (task is not None and task.evaluated and kind in ("continue", "return")
                    and sel is not None and view.chains):
                out.append(_choice(db, system.session, kb, view, sel.query_vector, thread_of,
                                   thread, kind, frozenset(task.relevant), words,
                                   turn.question))
                out[-1].dhrag = reciprocal_rank([p.key for p in ranked[:10]], task.relevant)
                alone = _t_star_only(system.engine, system.session, turn.question,
                                     sel.query_vector)
                out[-1].t_star_only = reciprocal_rank(alone, task.relevant)
            system.observe(turn.question, ranked, turn.answer or "")
            latest = db.view(system.session).latest
            assert latest is not None
            thread_of[latest] = thread
    return out


def _t_star_only(engine: DHRAG, session: str, question: str, qv: Vector) -> list[str]:
    """The top 10 of the engine's context for ``question`` searched with T*'s query alone
    (``thread_variants=1``), nothing stored and nothing kept pending."""
    sel = engine.preview(session, question, 10, thread_variants=1)
    return [c.passage.key for c in sel.context[:10]]


def _chain_signals(cfg: Settings, kb: FaissKnowledgeBase, view: SessionView, qv: Vector,
                   found: Sequence[tuple[int, float]], question: str,
                   words: _Words) -> np.ndarray:
    """The ``SIGNALS`` of each chain in ``found`` (id, relevance) for the query ``qv``."""
    raw = kb.search_vectors(qv[None, :], 10)[0]
    raw_vectors = np.stack([p.vector for p in raw if p.vector is not None])
    raw_mean = raw_vectors.mean(axis=0)
    unclear = 0.7 - float((raw_vectors @ qv).max())
    signals = []
    for cid, rel in found:
        ordered = view.chain_members(cid)
        latest = view.turn(ordered[-1])
        q, a, shown_vectors = latest.decoded()
        latest_passages = _mean(list(shown_vectors), len(qv))
        recency = float(scoring.recency(view.next_index - latest.index,
                                        cfg.threads.thread_half_life))
        passages = _mean([v for t in ordered for v in view.turn(t).decoded()[2]], len(qv))
        said = [f"{view.turn(t).query} {view.turn(t).response}" for t in ordered[-8:]]
        shown = [x.text for t in ordered[-4:] for x in view.turn(t).passages[:3]]
        topic = topic_vector(latest, cfg.tree.topic_answer_weight, cfg.tree.topic_passage_weight)
        signals.append([
            rel, recency, float(latest.turn_id == view.latest), float(np.log(len(ordered))),
            float(q @ qv), float(a @ qv) if a is not None else 0.0,
            float(latest_passages @ qv), float(topic @ qv),
            float(raw_mean @ passages), float(raw_mean @ latest_passages),
            float(raw_mean @ a) if a is not None else 0.0, recency * unclear,
            words.overlap(question, said[-1]), words.overlap(question, " ".join(said)),
            words.overlap(question, " ".join(shown)),
        ])
    return np.array(signals)


def _choice(db: HistoryDatabase, session: str, kb: FaissKnowledgeBase, view: SessionView,
            qv: Vector, thread_of: dict[str, str], thread: str, kind: str,
            relevant: frozenset[str], words: _Words, question: str) -> Choice:
    cfg = db.settings
    centred = db.calibrate(qv)
    found = db.rank_threads(session, qv, query_text=question)
    rows, true = [], None
    for i, (cid, _) in enumerate(found):
        members = view.chain_members(cid)
        if true is None and Counter(thread_of[t] for t in members).most_common(1)[0][0] == thread:
            true = i
        chosen = db.select_in_thread(session, qv, cid)
        # as the engine searches: expanded in the calibrated space, mapped back
        rows.append(expanded(centred, chosen, cfg.retrieval.expansion, cfg))
    found_rows = kb.search_vectors(db.calibration.invert(np.stack(rows)).astype(np.float32), 10)
    mrr = np.array([reciprocal_rank([p.key for p in r], relevant) for r in found_rows])
    return Choice(_chain_signals(cfg, kb, view, qv, found, question, words), true, mrr, kind,
                  thread)


class LogitChoice:
    """A thread policy: the chain the logit ``weights`` score highest first (the rest in that
    order too), at select and at record time."""

    def __init__(self, weights: np.ndarray, kb: FaissKnowledgeBase, words: _Words,
                 settings: Settings) -> None:
        self.weights, self.kb, self.words, self.settings = weights, kb, words, settings

    def order(self, view: SessionView, query: str, query_vector: Vector,
              ranked: Sequence[tuple[int, float]]) -> list[tuple[int, float]] | None:
        if len(ranked) < 2:
            return None
        score = _chain_signals(self.settings, self.kb, view, query_vector, ranked, query,
                               self.words) @ self.weights
        return [ranked[i] for i in np.argsort(-score, kind="stable")]


def _end_to_end(ctx: BenchContext, bench: Any, threads: int, seeds: list[int],
                weights: np.ndarray | None, words: _Words) -> dict[str, float]:
    """MRR@10 by kind of the engine replayed on the sets, T* chosen by its rule or, with
    ``weights``, by the logit."""
    scores: list[TaskScore] = []
    policy = (LogitChoice(weights, ctx.kb, words, Settings()) if weights is not None
              else None)
    for seed in seeds:
        tasks = interleave_benchmark(bench.conversations, threads=threads, block=(2, 4),
                                     seed=seed)
        system = DHRAGSystem("dhrag", ctx, Settings(), thread_policy=policy)
        scores += score_runs(replay(system, build_conversations(tasks),
                                    show_progress=False), tasks)
    out = {"all": round(float(np.mean([x.values["MRR@10"] for x in scores])), 4)}
    for kind in ("first", "continue", "return"):
        out[kind] = round(float(np.mean([x.values["MRR@10"] for x in scores
                                         if x.tags.get("kind") == kind])), 4)
    return out


def fit_logit(choices: list[Choice], columns: tuple[int, ...], l2: float = 1e-3) -> np.ndarray:
    """Weights of a conditional logit over ``columns`` of the signals, fitted by L-BFGS."""
    from scipy.optimize import minimize

    data = [(c.signals[:, columns], c.true) for c in choices if c.true is not None]

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        total, grad = 0.0, np.zeros_like(w)
        for x, y in data:
            z = x @ w
            z = z - z.max()
            p = np.exp(z) / np.exp(z).sum()
            total -= z[y] - np.log(np.exp(z).sum())
            grad -= x[y] - p @ x
        n = len(data)
        return total / n + l2 * float(w @ w), grad / n + 2 * l2 * w

    start = np.zeros(len(columns))
    start[0] = 1.0
    return np.asarray(minimize(loss, start, jac=True, method="L-BFGS-B").x)


def _cross_validated(choices: list[Choice], columns: tuple[int, ...],
                     folds: int = 5) -> list[int]:
    """Each turn's pick by a logit trained on the other folds' conversations."""
    picks = [0] * len(choices)
    for k in range(folds):
        train = [c for c in choices if fold_of(c.conversation, folds) != k]
        w = fit_logit(train, columns)
        for i, c in enumerate(choices):
            if fold_of(c.conversation, folds) == k:
                picks[i] = int(np.argmax(c.signals[:, columns] @ w))
    return picks


def _summary(choices: list[Choice], picks: list[int]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for kind in ("continue", "return", "all"):
        idx = [i for i, c in enumerate(choices) if kind in ("all", c.kind)]
        out[kind] = {
            "right": round(float(np.mean([picks[i] == choices[i].true for i in idx])), 3),
            "MRR@10 of the picked row": round(
                float(np.mean([choices[i].mrr[picks[i]] for i in idx])), 4),
        }
    return out


def _by_kind(choices: list[Choice], value: Callable[[Choice], float]) -> dict[str, float]:
    return {kind: round(float(np.mean([value(c) for c in choices if kind in ("all", c.kind)])), 4)
            for kind in ("continue", "return", "all")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", type=Path, default=default_cache() / "benchmarks" / "mtrag")
    ap.add_argument("--threads", default="3,10")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--out", type=Path, default=Path("results/choice_ceiling.json"))
    args = ap.parse_args()
    bench, emb, kb = load_with_kb(args.bench)
    ctx = BenchContext(kb=kb, embedder=emb)
    report: dict[str, Any] = {"seeds": args.seeds, "signals": list(SIGNALS)}
    words = _Words(bench.kb)
    seeds = [int(x) for x in args.seeds.split(",")]
    for threads in (int(t) for t in args.threads.split(",")):
        choices = [c for seed in seeds for c in _choices(ctx, kb, bench, threads, seed, words)]
        everything = tuple(range(len(SIGNALS)))
        weights = fit_logit(choices, everything)
        part: dict[str, Any] = {
            "turns": len(choices),
            "a chain is mostly the true thread": round(
                float(np.mean([c.true is not None for c in choices])), 3),
            "the engine's rule (T*)": _summary(choices, [0] * len(choices)),
            "logit on the engine's signals (cross-validated)": _summary(
                choices, _cross_validated(choices, ENGINE)),
            "logit on every signal but words (cross-validated)": _summary(
                choices, _cross_validated(choices, everything[:-3])),
            "logit on every signal (cross-validated)": _summary(
                choices, _cross_validated(choices, everything)),
            "the true thread's row (its chain; T* when none)": _summary(
                choices, [c.true if c.true is not None else 0 for c in choices]),
            "dhrag as run (MRR@10, hedged and integrated)": _by_kind(
                choices, lambda c: c.dhrag),
            "dhrag with T*'s query only (MRR@10, same turns)": _by_kind(
                choices, lambda c: c.t_star_only),
            "the better of the two on each turn (hindsight)": _by_kind(
                choices, lambda c: max(c.dhrag, c.t_star_only)),
            "logit weights on every signal (all turns)": dict(zip(
                SIGNALS, (round(float(w), 2) for w in weights), strict=True)),
            "end to end, MRR@10: the engine's rule": _end_to_end(
                ctx, bench, threads, seeds, None, words),
            "end to end, MRR@10: T* by the logit (weights of all turns: optimistic)":
                _end_to_end(ctx, bench, threads, seeds, weights, words),
        }
        report[f"{threads} threads"] = part
        print(threads, json.dumps(part, indent=1), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
