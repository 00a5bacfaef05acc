"""The converted benchmark and its knowledge base, as the analysis scripts load them."""

from __future__ import annotations

from pathlib import Path

import faiss

from benchmarks.harness.data import Benchmark, load_benchmark
from benchmarks.harness.dhrag_systems import MemoEmbedder, memo_for
from benchmarks.harness.kbcache import kb_vectors
from benchmarks.harness.paths import default_cache, default_data
from dhrag_core import FaissKnowledgeBase, MiniLMEmbedder

__all__ = ["load_with_kb"]


def load_with_kb(bench_dir: Path) -> tuple[Benchmark, MemoEmbedder, FaissKnowledgeBase]:
    """The benchmark in ``bench_dir``, a memo of MiniLM, and a FAISS knowledge base over the
    cached MiniLM vectors of its passages; torch and FAISS on one thread each, so that replays
    on a 2-core machine do not fight over the cores."""
    import torch

    torch.set_num_threads(1)
    faiss.omp_set_num_threads(1)
    bench = load_benchmark(bench_dir)
    emb = memo_for(MiniLMEmbedder())
    vectors = kb_vectors(bench.kb, emb, "all-MiniLM-L6-v2", cache_dir=default_cache(),
                         seed=default_data() / "kb_minilm.npz", show_progress=False)
    return bench, emb, FaissKnowledgeBase(bench.kb, emb, vectors=vectors)
