"""The knowledge base's vectors cached on disk."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from bench_support import (
    CountingEmbedder,
    _seed_file,
)

from benchmarks.harness.kbcache import kb_vectors
from dhrag_core import HashingEmbedder, Passage


def test_kb_cache_seeds_checks_and_reuses(tmp_path: Path) -> None:
    kb = [Passage(text=f"passage number {i} about topic {i % 7}", id=f"p{i}") for i in range(60)]
    emb = CountingEmbedder()
    stale = [*kb[:50], Passage(text="an older text", id="p50")]
    seed = _seed_file(tmp_path / "seed.npz", stale, HashingEmbedder(64))
    vectors = kb_vectors(kb, emb, "hash64", cache_dir=tmp_path / "c", seed=seed,
                         show_progress=False)
    assert emb.count == 24 + 10  # the sample check, then the 10 rows the seed lacks or differs
    assert np.allclose(vectors, HashingEmbedder(64).encode([p.text for p in kb]), atol=1e-6)
    emb.count = 0
    again = kb_vectors(kb, emb, "hash64", cache_dir=tmp_path / "c", show_progress=False)
    assert emb.count == 0 and np.array_equal(again, vectors)


def test_kb_cache_rejects_a_disagreeing_seed(tmp_path: Path) -> None:
    kb = [Passage(text=f"text {i} words", id=f"p{i}") for i in range(30)]
    seed = _seed_file(tmp_path / "seed.npz", kb, HashingEmbedder(64), noise=1.0)
    emb = CountingEmbedder()
    vectors = kb_vectors(kb, emb, "hash64", cache_dir=tmp_path, seed=seed, show_progress=False)
    assert emb.count == 24 + 30
    assert np.allclose(vectors, HashingEmbedder(64).encode([p.text for p in kb]), atol=1e-6)

