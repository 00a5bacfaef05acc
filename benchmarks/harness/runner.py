"""One benchmark run: load the data, embed (or fetch) the KB, replay every system, score.

Example:
    >>> config = RunConfig(bench_dir=Path("~/.cache/dhrag/benchmarks/mtrag"),
    ...                    cache_dir=Path("~/.cache/dhrag"), systems=("last-turn",))
    >>> results = run_benchmark(config)  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import faiss
import numpy as np

from benchmarks.harness.crossval import split_benchmark
from benchmarks.harness.data import (
    Benchmark,
    Conversation,
    Task,
    build_conversations,
    load_benchmark,
)
from benchmarks.harness.embedders import ShiftedEmbedder, bench_embedder, shift
from benchmarks.harness.interleave import interleave_benchmark
from benchmarks.harness.kbcache import kb_vectors
from benchmarks.harness.metrics import TaskScore
from benchmarks.harness.replay import TurnRun, history_coverage, replay, score_runs
from benchmarks.harness.rss import current_rss_mib, peak_rss_mib
from benchmarks.harness.systems import REGISTRY, BenchContext, build_systems, resolve_names
from dhrag_core import Embedder, FaissKnowledgeBase

__all__ = [
    "QUICK_SYSTEMS",
    "RunConfig",
    "RunResult",
    "SystemRun",
    "current_rss_mib",
    "interleaved",
    "peak_rss_mib",
    "quick_subset",
    "run_benchmark",
]

log = logging.getLogger(__name__)

QUICK_SYSTEMS = ("last-turn", "all-questions", "last-1-qa", "interp-0.3-0.2",
                 "interp-qa-0.2-0.2-0.3", "rewrite-ref", "dhrag")


@dataclass(frozen=True)
class RunConfig:
    """Settings of a run.

    Attributes:
        bench_dir: Folder with ``kb.jsonl`` and ``tasks.jsonl``.
        kb_file: The knowledge base, when not the folder's own ``kb.jsonl`` (tasks written
            over another benchmark's knowledge base, such as ``benchmarks/scenarios``).
        cache_dir: Cache root for KB embeddings (outside the repository).
        systems: Registered system names or globs.
        seed_npz: Optional precomputed KB embeddings to seed the cache from.
        k: Passages retrieved and scored per turn.
        baseline: The system that p-values and latency ratios compare against.
        quick: Replay a small subset (see ``quick_subset``).
        quick_domain: Domain of the quick subset (default: the first domain by name).
        quick_conversations: Conversations in the quick subset.
        quick_negatives: Random extra KB passages in the quick subset.
        model_name: Names the embedder in the cache key (set from ``embedder`` when the run
            builds its own).
        embedder: The benchmark's embedder by name (``benchmarks.harness.embedders.EMBEDDERS``).
        shift: Cosines moved to ``shift + (1 - shift) * cos`` (``ShiftedEmbedder``); 0: none.
        query_threads: Torch and FAISS threads while replaying: one query at a time gains
            little from more, and on a shared 2-core machine 2 threads give 0.5 s stalls.
        show_progress: Show progress bars.
        interleave: If > 0, replay sessions of this many conversations interleaved in blocks
            (``benchmarks.harness.interleave``), one set of sessions per seed of ``seeds``, pooled.
        seeds: Interleaving seeds.
        block: Turns of one conversation before a switch (min, max).
        split: ``tune`` / ``report``: replay one fixed half of the conversations
            (``benchmarks.harness.crossval.half_of``: defaults are chosen on ``tune``); ``all``.
        answers: The answers systems record: the dataset's, or the first sentence of the
            passage each system ranked first (``benchmarks.harness.replay.ANSWERS``).
    """

    bench_dir: Path
    cache_dir: Path
    systems: tuple[str, ...]
    kb_file: Path | None = None
    seed_npz: Path | None = None
    k: int = 10
    baseline: str = "last-turn"
    quick: bool = False
    quick_domain: str | None = None
    quick_conversations: int = 3
    quick_negatives: int = 3000
    model_name: str = "all-MiniLM-L6-v2"
    embedder: str = "minilm"
    shift: float = 0.0
    query_threads: int = 1
    show_progress: bool = True
    interleave: int = 0
    seeds: tuple[int, ...] = (0,)
    block: tuple[int, int] = (2, 4)
    split: str = "all"
    answers: str = "dataset"


@dataclass(frozen=True)
class SystemRun:
    """The replay of one system and its per-task scores."""

    name: str
    reference: bool
    description: str
    runs: list[TurnRun]
    scores: list[TaskScore]
    wall_s: float
    coverage: dict[str, float] = field(default_factory=dict)
    rss_growth_mib: float | None = None
    peak_rss_mib: float | None = None
    comparisons: int | None = None


@dataclass(frozen=True)
class RunResult:
    """Everything a report needs."""

    config: RunConfig
    systems: list[SystemRun]
    n_passages: int
    n_conversations: int
    n_turns: int
    n_evaluated: int
    timings: dict[str, float] = field(default_factory=dict)


def quick_subset(bench: Benchmark, *, domain: str | None = None, n_conversations: int = 3,
                 n_negatives: int = 3000, seed: int = 0) -> Benchmark:
    """A small benchmark: a few conversations of one domain and a reduced KB.

    The KB keeps the gold passages of the chosen conversations plus ``n_negatives`` random
    others (in the original order, so the subset, and its cache key, are deterministic).
    """
    domains = sorted({t.tags.get("domain", "") for t in bench.tasks})
    chosen = domain if domain is not None else domains[0]
    if chosen not in domains:
        raise ValueError(f"domain must be one of {domains}, got {chosen!r}")

    def wanted(c: Conversation) -> bool:
        tasks = [t.task for t in c.turns if t.task is not None]
        return any(t.evaluated for t in tasks) and tasks[0].tags.get("domain", "") == chosen

    convs = [c for c in bench.conversations if wanted(c)][:n_conversations]
    ids = {c.conversation_id for c in convs}
    tasks = [t for t in bench.tasks if t.conversation_id in ids]
    gold = {r for t in tasks for r in t.relevant}
    others = [i for i, p in enumerate(bench.kb) if p.key not in gold]
    rng = np.random.default_rng(seed)
    extra = set(rng.choice(others, min(n_negatives, len(others)), replace=False).tolist())
    kb = [p for i, p in enumerate(bench.kb) if p.key in gold or i in extra]
    return Benchmark(kb=kb, tasks=tasks, conversations=convs)


def interleaved(bench: Benchmark, threads: int, seeds: Sequence[int],
                block: tuple[int, int]) -> Benchmark:
    """Sessions of ``threads`` interleaved conversations, one set per seed, pooled."""
    tasks = [t for seed in seeds
             for t in interleave_benchmark(bench.conversations, threads=threads, block=block,
                                           seed=seed)]
    return Benchmark(kb=bench.kb, tasks=tasks, conversations=build_conversations(tasks))


def true_threads(tasks: Sequence[Task]) -> dict[tuple[str, int], str]:
    """``(conversation, turn) -> thread`` from the data's labels: an interleaved turn's
    original conversation (``thread``), a scenario turn's ``topic`` (a comparison of two
    topics stays in the thread of the turn before it), else the conversation itself."""
    out: dict[tuple[str, int], str] = {}
    for t in sorted(tasks, key=lambda t: (t.conversation_id, t.turn)):
        label = t.tags.get("thread") or t.tags.get("topic") or t.conversation_id
        if "+" in label:
            label = out.get((t.conversation_id, t.turn - 1), label)
        out[(t.conversation_id, t.turn)] = label
    return out


def _context(bench: Benchmark, config: RunConfig, embedder: Embedder) -> BenchContext:
    base = embedder.base if isinstance(embedder, ShiftedEmbedder) else embedder
    vectors = kb_vectors(bench.kb, base, config.model_name, cache_dir=config.cache_dir,
                         seed=config.seed_npz, show_progress=config.show_progress)
    if isinstance(embedder, ShiftedEmbedder):
        vectors = shift(vectors, embedder.a)
    kb = FaissKnowledgeBase(bench.kb, embedder, vectors=vectors)
    references = {(t.conversation_id, t.turn): t.rewrite for t in bench.tasks
                  if t.rewrite is not None}
    threads = true_threads(bench.tasks)
    return BenchContext(kb=kb, embedder=embedder, references=references, threads=threads)


def _run_system(name: str, ctx: BenchContext, bench: Benchmark, config: RunConfig) -> SystemRun:
    spec = REGISTRY[name]
    rss_before = current_rss_mib()
    system = build_systems([name], ctx)[0]
    t0 = time.perf_counter()
    runs = replay(system, bench.conversations, k=config.k, show_progress=config.show_progress,
                  answers=config.answers)
    wall = time.perf_counter() - t0
    growth = current_rss_mib() - rss_before if rss_before is not None else None
    return SystemRun(name=name, reference=spec.reference, description=spec.description,
                     runs=runs, scores=score_runs(runs, bench.tasks), wall_s=wall,
                     coverage=history_coverage(runs, bench.tasks),
                     rss_growth_mib=growth, peak_rss_mib=peak_rss_mib(),
                     comparisons=getattr(system, "comparisons", None))


@contextmanager
def _threads(n: int) -> Iterator[None]:
    """Use ``n`` threads in torch (query encoding) and FAISS (search), then restore."""
    import torch

    before = torch.get_num_threads(), faiss.omp_get_max_threads()
    torch.set_num_threads(n)
    faiss.omp_set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before[0])
        faiss.omp_set_num_threads(before[1])


def _warm_up(ctx: BenchContext) -> None:
    """Encode single queries of growing length and search once, so that the first system
    replayed does not pay one-off kernel set-up costs that later systems skip."""
    for n in range(1, 300, 12):
        v = ctx.embedder.encode([" ".join(["warm"] * n)])
    ctx.kb.search_vectors(v, 10)


def run_benchmark(config: RunConfig, embedder: Embedder | None = None,
                  bench: Benchmark | None = None) -> RunResult:
    """Run every configured system on the benchmark (loaded from ``config.bench_dir``)."""
    names = resolve_names(config.systems)
    if config.baseline in REGISTRY and config.baseline not in names:
        names.insert(0, config.baseline)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    data = bench if bench is not None else load_benchmark(config.bench_dir, config.kb_file)
    if config.quick:
        data = quick_subset(data, domain=config.quick_domain,
                            n_conversations=config.quick_conversations,
                            n_negatives=config.quick_negatives)
    data = split_benchmark(data, config.split)
    if config.interleave:
        data = interleaved(data, config.interleave, config.seeds, config.block)
    timings["load_s"] = time.perf_counter() - t0
    if embedder is None:
        embedder, model_name = bench_embedder(config.embedder, config.cache_dir)
        config = replace(config, model_name=model_name)
        if config.shift:
            embedder = ShiftedEmbedder(embedder, config.shift)
    emb = embedder
    t0 = time.perf_counter()
    emb.encode(["warm-up"])  # load the model before anything is timed
    timings["model_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    ctx = _context(data, config, emb)
    timings["kb_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    with _threads(config.query_threads):
        _warm_up(ctx)
        systems = [_run_system(n, ctx, data, config) for n in names]
    timings["replay_s"] = time.perf_counter() - t0
    timings["peak_rss_mib"] = peak_rss_mib()
    return RunResult(
        config=config, systems=systems, n_passages=len(data.kb),
        n_conversations=len(data.conversations),
        n_turns=sum(len(c.turns) for c in data.conversations),
        n_evaluated=sum(t.evaluated for t in data.tasks), timings=timings,
    )
