"""MTRAG retrieval through the text path: DH-RAG over a knowledge base searched by text only.

    python -m benchmarks.studies.text_path [--bench DIR] [--cache DIR] [--seed NPZ] [--out DIR]
    python -m benchmarks.studies.text_path --cv [--folds 5]  # text-path defaults, cross-validated

Plain retrievers (the LangChain / LlamaIndex path) have ``search(text, k)`` and nothing else, so
the engine searches them with the rewritten question: the rewriter's text is what is retrieved
with. ``TextOnlyKB`` wraps the benchmark's FAISS knowledge base to expose only that method (it
embeds the text with the same MiniLM model); the engine's vector path (``search_vectors`` with
the expanded query vector) is replayed beside it. Systems: the vector path with the default
rewriter and with the appender, the text path with each rewriter (its candidates re-ranked by
the expanded vector of the raw query, or of the rewrite with ``rewrite_vector``), and the raw
last turn searched by text (no rewriting) as the floor. ``--cv`` replays the text path over a
grid of ``text_k`` x ``rewrite_vector`` and prints the best setting's MRR@10 (tuned on all
conversations) beside the 5-fold cross-validated one (folds by conversation). Data and
protocol as ``python -m benchmarks run`` (``benchmarks/harness/runner.py``): MTRAG dev, 777
evaluated tasks, the 36,639-passage KB.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from benchmarks.harness.crossval import conversation_of, cross_validate, fold_of
from benchmarks.harness.data import Benchmark, load_benchmark
from benchmarks.harness.dhrag_systems import DHRAGSystem, MemoEmbedder
from benchmarks.harness.kbcache import kb_vectors
from benchmarks.harness.metrics import mean_scores
from benchmarks.harness.replay import replay, score_runs
from benchmarks.harness.systems import BenchContext
from dhrag_core import Embedder, FaissKnowledgeBase, LightRewriter, MiniLMEmbedder, Passage
from dhrag_core.algorithm.rewriting import QueryRewriter
from dhrag_core.settings import Ablations, Experiments, Settings, with_changes

__all__ = ["CV_GRID", "TextOnlyKB", "cross_validate_text", "main", "run_text_path"]

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SEED = REPO_ROOT.parent / "shared" / "data" / "mtrag" / "kb_minilm.npz"


class TextOnlyKB:
    """A knowledge base with ``search(text, k)`` only: what a plain retriever offers."""

    def __init__(self, inner: FaissKnowledgeBase, embedder: Embedder) -> None:
        self._inner = inner
        self.embedder = embedder

    def search(self, query: str, k: int) -> list[Passage]:
        return self._inner.search_vectors(self.embedder.encode([query]), k)[0]


@dataclass(frozen=True)
class PathRun:
    """One system's mean scores over the evaluated tasks, and its replay time."""

    name: str
    scores: dict[str, float]
    seconds: float


def _systems(
    kb: FaissKnowledgeBase, memo: MemoEmbedder
) -> dict[str, Callable[[], DHRAGSystem]]:
    vector_ctx = BenchContext(kb=kb, embedder=memo)
    text_ctx = BenchContext(kb=cast(FaissKnowledgeBase, TextOnlyKB(kb, memo)), embedder=memo)

    def make(name: str, ctx: BenchContext, rewriter: QueryRewriter,
             settings: Settings | None = None) -> Callable[[], DHRAGSystem]:
        return lambda: DHRAGSystem(name, ctx, settings or Settings(), rewriter=rewriter)

    return {
        "vector path, substitute (default)": make("v-sub", vector_ctx, LightRewriter()),
        "vector path, append": make("v-app", vector_ctx, LightRewriter(mode="append")),
        "text path, raw question": make("t-raw", text_ctx, LightRewriter(),
                                        Settings(ablations=Ablations(use_rewrite=False))),
        "text path, append": make("t-app", text_ctx, LightRewriter(mode="append")),
        "text path, substitute (default)": make("t-sub", text_ctx, LightRewriter()),
        "text path, substitute, rewrite embedded": make(
            "t-sub-rv", text_ctx, LightRewriter(),
            Settings(experiments=Experiments(rewrite_vector=True))),
    }


def run_text_path(
    bench: Benchmark, embedder: Embedder, *, cache_dir: Path, seed: Path | None,
    names: Sequence[str] | None = None, show_progress: bool = False,
) -> list[PathRun]:
    """Replay the systems (all, or ``names``) on ``bench``; mean scores per system."""
    vectors = kb_vectors(bench.kb, embedder, "all-MiniLM-L6-v2", cache_dir=cache_dir,
                         seed=seed, show_progress=show_progress)
    memo = MemoEmbedder(embedder)
    kb = FaissKnowledgeBase(bench.kb, memo, vectors=vectors)
    out: list[PathRun] = []
    for name, factory in _systems(kb, memo).items():
        if names is not None and name not in names:
            continue
        t0 = time.perf_counter()
        runs = replay(factory(), bench.conversations, k=10, show_progress=show_progress)
        out.append(PathRun(name, mean_scores(score_runs(runs, bench.tasks)),
                           time.perf_counter() - t0))
    return out


CV_GRID: dict[str, tuple[object, ...]] = {"text_k": (None, 40, 60, 100),
                                            "rewrite_vector": (False, True)}
"""Text-path settings ``--cv`` chooses among (``text_k=None`` is ``kb_k``, 20)."""


def cross_validate_text(
    bench: Benchmark, embedder: Embedder, *, cache_dir: Path, seed: Path | None,
    folds: int = 5, grid: dict[str, tuple[object, ...]] | None = None,
) -> dict[str, Any]:
    """Replay the text path for every setting of ``grid``; tuned and cross-validated MRR@10."""

    vectors = kb_vectors(bench.kb, embedder, "all-MiniLM-L6-v2", cache_dir=cache_dir,
                         seed=seed, show_progress=False)
    memo = MemoEmbedder(embedder)
    kb = FaissKnowledgeBase(bench.kb, memo, vectors=vectors)
    ctx = BenchContext(kb=cast(FaissKnowledgeBase, TextOnlyKB(kb, memo)), embedder=memo)
    grid = grid or CV_GRID
    pooled: dict[str, list[tuple[int, float]]] = {}
    rows: dict[str, float] = {}
    for combo in itertools.product(*grid.values()):
        changes = dict(zip(grid, combo, strict=True))
        name = ",".join(f"{k}={v}" for k, v in changes.items())
        system = DHRAGSystem(name, ctx, with_changes(Settings(), changes), rewriter=LightRewriter())
        scores = score_runs(replay(system, bench.conversations, k=10, show_progress=False),
                            bench.tasks)
        pooled[name] = [(fold_of(conversation_of(s), folds), s.values["MRR@10"])
                        for s in scores]
        rows[name] = float(np.mean([v for _, v in pooled[name]]))
        print(f"{name}: MRR@10 {rows[name]:.4f}", flush=True)
    best = max(rows, key=lambda n: rows[n])
    return {"rows": rows, "best": best, "best_mrr10": rows[best],
            "cross_validated_mrr10": cross_validate(pooled, folds), "folds": folds}


def markdown(runs: Sequence[PathRun]) -> str:
    lines = ["| system | n | MRR@10 | nDCG@10 | R@10 |", "|---|---|---|---|---|"]
    lines += [f"| {r.name} | {r.scores['n']:.0f} | {r.scores['MRR@10']:.3f} | "
              f"{r.scores['nDCG@10']:.3f} | {r.scores['R@10']:.3f} |" for r in runs]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.studies.text_path", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    cache = Path.home() / ".cache" / "dhrag"
    ap.add_argument("--cache", type=Path, default=cache, help="cache root (KB embeddings)")
    ap.add_argument("--bench", type=Path, default=None,
                    help="converted MTRAG folder (default: <cache>/benchmarks/mtrag; "
                         "python -m benchmarks convert makes it)")
    ap.add_argument("--seed", type=Path, default=DEFAULT_SEED, help="KB embeddings to seed from")
    ap.add_argument("--out", type=Path, default=Path("results"), help="folder for the JSON")
    ap.add_argument("--cv", action="store_true", help="choose text-path settings by CV")
    ap.add_argument("--folds", type=int, default=5, help="folds of --cv (by conversation)")
    args = ap.parse_args(argv)
    bench = load_benchmark(args.bench or args.cache / "benchmarks" / "mtrag")
    import torch

    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.cv:
        cv = cross_validate_text(bench, MiniLMEmbedder(), cache_dir=args.cache,
                                 seed=args.seed if args.seed.is_file() else None,
                                 folds=args.folds)
        print(f"best {cv['best']}: MRR@10 {cv['best_mrr10']:.4f} (tuned on all); "
              f"{cv['folds']}-fold cross-validated {cv['cross_validated_mrr10']:.4f}")
        path = args.out / "text_path_cv.json"
        path.write_text(json.dumps(cv, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {path}")
        return 0
    runs = run_text_path(bench, MiniLMEmbedder(), cache_dir=args.cache,
                         seed=args.seed if args.seed.is_file() else None, show_progress=True)
    print(markdown(runs))
    path = args.out / "text_path_mtrag.json"
    data: dict[str, Any] = {r.name: {"scores": r.scores, "seconds": r.seconds} for r in runs}
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
